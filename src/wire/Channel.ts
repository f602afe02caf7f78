/**
 * Channels: the first four bytes of every connection to the mux port say
 * which subsystem it is for. HTTP's `GET ` and `POST` go to the status
 * server. The magic is not secret: the frames that follow are authenticated.
 */

export type ChannelName = "join" | "rendezvous" | "data" | "control"

const ascii = (text: string) => new TextEncoder().encode(text)

/** Readable in a packet capture: "CoJ1" is cohort's join channel, version 1. */
export const magic: Readonly<Record<ChannelName, Uint8Array>> = {
  join: ascii("CoJ1"),
  rendezvous: ascii("CoR1"),
  data: ascii("CoD1"),
  control: ascii("CoC1")
}

export const MAGIC_BYTES = 4

export type Route = { readonly _tag: "Channel"; readonly channel: ChannelName } | { readonly _tag: "Http" } | { readonly _tag: "Unknown" }

const http = [ascii("GET "), ascii("POST"), ascii("HEAD")]

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((byte, index) => byte === b[index])

/** Where the first four bytes of a connection send it. */
export const route = (first: Uint8Array): Route => {
  for (const [channel, bytes] of Object.entries(magic) as Array<[ChannelName, Uint8Array]>) {
    if (same(first, bytes)) return { _tag: "Channel", channel }
  }
  return http.some((bytes) => same(first, bytes)) ? { _tag: "Http" } : { _tag: "Unknown" }
}

/**
 * Until a peer's first frame has authenticated, a listener takes no frame larger than this: every first
 * frame (a Hello, a RelayHello, a rendezvous Join) is a few hundred bytes, and a stranger who announces
 * megabytes must not make the launcher hold them.
 */
export const UNAUTHENTICATED_CEILING = 64 << 10

/** Frame ceilings per channel, once the peer has authenticated, checked before any allocation. */
export const defaultCeiling: Readonly<Record<ChannelName, number>> = {
  join: 16 << 20,
  control: 16 << 20,
  rendezvous: 16 << 20,
  data: 1 << 30
}
