/**
 * Channels: the first four bytes of every connection to the mux port say
 * which subsystem it is for, and in which wire protocol. HTTP's `GET ` and
 * `POST` go to the status server. The magic is not secret: the frames that
 * follow are authenticated.
 *
 * The protocol's number is the magic's last character. A peer of another
 * protocol (`CoJ1`: a cohort from before GCM frames) is refused at its magic
 * with a reason that names both protocols, never left to fail on a tag.
 */
import * as Schema from "effect/Schema"

export const ChannelName = Schema.Literal("join", "rendezvous", "data", "control")
export type ChannelName = typeof ChannelName.Type

const ascii = (text: string) => new TextEncoder().encode(text)

/** The wire protocol this cohort speaks: 2 since frames carry AES-GCM tags (1 carried HMAC-SHA256). */
export const WIRE_PROTOCOL = 2

const letters: Readonly<Record<ChannelName, string>> = { join: "J", rendezvous: "R", data: "D", control: "C" }

const magicText = (channel: ChannelName, protocol: number) => `Co${letters[channel]}${protocol}`

/** Readable in a packet capture: "CoJ2" is cohort's join channel, protocol 2. */
export const magic: Readonly<Record<ChannelName, Uint8Array>> = {
  join: ascii(magicText("join", WIRE_PROTOCOL)),
  rendezvous: ascii(magicText("rendezvous", WIRE_PROTOCOL)),
  data: ascii(magicText("data", WIRE_PROTOCOL)),
  control: ascii(magicText("control", WIRE_PROTOCOL))
}

export const MAGIC_BYTES = 4

export type Route =
  | { readonly _tag: "Channel"; readonly channel: ChannelName }
  /** A cohort channel's magic in another protocol (a digit other than ours). */
  | { readonly _tag: "OtherProtocol"; readonly channel: ChannelName; readonly protocol: number }
  | { readonly _tag: "Http" }
  | { readonly _tag: "Unknown" }

const http = [ascii("GET "), ascii("POST"), ascii("HEAD")]

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((byte, index) => byte === b[index])

/** Where the first four bytes of a connection send it. */
export const route = (first: Uint8Array): Route => {
  const digit = first[3] ?? 0
  for (const [channel, bytes] of Object.entries(magic) as Array<[ChannelName, Uint8Array]>) {
    if (same(first, bytes)) return { _tag: "Channel", channel }
    // "0".."9": the same channel, another protocol.
    if (same(first.subarray(0, 3), bytes.subarray(0, 3)) && digit >= 0x30 && digit <= 0x39) {
      return { _tag: "OtherProtocol", channel, protocol: digit - 0x30 }
    }
  }
  return http.some((bytes) => same(first, bytes)) ? { _tag: "Http" } : { _tag: "Unknown" }
}

/** Why a peer of another protocol is refused, and what to do: said on the listener's side. */
export const otherProtocol = (channel: ChannelName, protocol: number): string =>
  `a ${channel} connection in cohort's wire protocol ${protocol} (magic ${magicText(channel, protocol)}); this launcher speaks ` +
  `protocol ${WIRE_PROTOCOL} (${magicText(channel, WIRE_PROTOCOL)}): run the same cohort version on every host ` +
  `(${protocol < WIRE_PROTOCOL ? "update cohort on the dialing host" : "update this launcher's cohort"})`

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
