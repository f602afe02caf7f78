/**
 * Links: authenticated message streams over one connection.
 *
 * Opening: the dialer sends the channel magic, its nonce and the id of the
 * key it holds (one length byte, then the id: empty for the salt itself, a
 * host's name or a rank's number for the scoped keys of `Keys`); the listener
 * looks the key up, resets a connection naming one it does not know, answers
 * with its own nonce, and both derive the per-direction keys from that key.
 * From then on every message is a frame (`Frame`) carrying one message of
 * the channel's union (`Codec`). The first bad frame, undecodable message or
 * EOF ends the link with a `LinkError` that says which and names the peer; a
 * bad MAC is never answered.
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { Socket } from "bun"
import { type ChannelName, defaultCeiling, magic, UNAUTHENTICATED_CEILING } from "./Channel.ts"
import type { Codec } from "./Codec.ts"
import { Connection, forwardingHandlers, type SocketData } from "./Connection.ts"
import { encodeFrame, FrameDecoder, type FrameErrorReason } from "./Frame.ts"
import * as WireCounters from "./WireCounters.ts"
import { deriveKeys, deriveSealKeys, NONCE_BYTES, newNonce } from "./Keys.ts"
import { open as openSealed, seal, SEALED, sealedTags } from "./Seal.ts"

export type LinkErrorReason = "closed" | "handshake" | "connect" | "decode" | FrameErrorReason

export class LinkError extends Data.TaggedError("LinkError")<{
  readonly channel: ChannelName
  readonly peer: string
  readonly reason: LinkErrorReason
  readonly detail: string
}> {
  override get message(): string {
    return `${this.channel} link with ${this.peer}: ${this.reason}: ${this.detail}`
  }
}

export interface Link<In, Out> {
  readonly peer: string
  /** The key id the dialer named (empty: the salt): what the peer's first message must agree with. */
  readonly keyId: string
  readonly send: (message: Out) => Effect.Effect<void, LinkError>
  /** The next message; fails once the link has ended. */
  readonly receive: Effect.Effect<In, LinkError>
  /** The next message within `ms`, or a handshake error saying that `what` never came. */
  readonly receiveWithin: (ms: number, what: string) => Effect.Effect<In, LinkError>
  readonly close: Effect.Effect<void>
  /**
   * End the link now, for a peer that cannot be heard any more: readers fail
   * at once with `detail`, and the connection is reset rather than closed
   * politely (a vanished peer never answers a FIN).
   */
  readonly abort: (detail: string) => Effect.Effect<void>
  /**
   * Open admission, on the listener: from now on both directions are keyed by
   * `salt` (call it right after sending the `Accept` that carries it).
   */
  readonly rekey: (salt: Uint8Array) => Effect.Effect<void>
}

export interface LinkOptions<In, Out> {
  readonly channel: ChannelName
  readonly inbound: Codec<In>
  readonly outbound: Codec<Out>
  /** Largest inbound frame (default: the channel's). */
  readonly ceiling?: number
  /** For the nonce exchange (default 10 s). */
  readonly handshakeMs?: number
  /**
   * Open admission, on the dialer: a received message that hands over the
   * run's salt (the `Accept`); from the next frame on, both directions use it.
   */
  readonly rekeyOn?: (message: In) => Uint8Array | undefined
}

/** Both nonces, the key they are used with and this end's role: everything needed to derive the keys. */
interface Agreement {
  readonly dialerNonce: Uint8Array
  readonly listenerNonce: Uint8Array
  readonly role: "dialer" | "listener"
  readonly key: Uint8Array
  readonly keyId: string
}

/** A key id is at most this many bytes of UTF-8 (one length byte; host names stop at 253 characters). */
export const MAX_KEY_ID_BYTES = 253

/** The listener's keys when only the unnamed one exists: the salt (the join channel, tests). */
export const unnamedKey = (salt: Uint8Array) => (keyId: string): Uint8Array | undefined => (keyId === "" ? salt : undefined)

/** Wire a connection whose nonces are agreed into a Link. */
const open = <In, Out>(
  connection: Connection,
  options: LinkOptions<In, Out>,
  agreement: Agreement
): Effect.Effect<Link<In, Out>> =>
  Effect.gen(function*() {
    const { channel } = options
    const peer = connection.peer
    const inbox = yield* Queue.unbounded<Either.Either<In, LinkError>>()
    const keysFor = (salt: Uint8Array) => {
      const keys = deriveKeys(salt, magic[channel], agreement.dialerNonce, agreement.listenerNonce)
      return agreement.role === "dialer"
        ? { send: keys.dialer, receive: keys.listener }
        : { send: keys.listener, receive: keys.dialer }
    }
    // Only channels that seal some messages derive the keys for it.
    const sealed = sealedTags[channel]
    const sealKeysFor = (salt: Uint8Array) => {
      if (sealed.size === 0) return undefined
      const keys = deriveSealKeys(salt, magic[channel], agreement.dialerNonce, agreement.listenerNonce)
      return agreement.role === "dialer" ? { send: keys.dialer, receive: keys.listener } : { send: keys.listener, receive: keys.dialer }
    }
    const initial = keysFor(agreement.key)
    let sendKey = initial.send
    let sealKeys = sealKeysFor(agreement.key)
    const switchTo = (salt: Uint8Array) => {
      const next = keysFor(salt)
      sendKey = next.send
      sealKeys = sealKeysFor(salt)
      decoder.setKey(next.receive)
    }
    const ceiling = options.ceiling ?? defaultCeiling[channel]
    // A listener hears strangers: their first frame must authenticate before a large one is taken.
    const decoder = new FrameDecoder(initial.receive, ceiling, agreement.role === "listener" ? UNAUTHENTICATED_CEILING : ceiling)
    let ended: LinkError | undefined
    const end = (error: LinkError) => {
      if (ended !== undefined) return
      ended = error
      Queue.unsafeOffer(inbox, Either.left(error))
    }
    connection.receive({
      data: (bytes) => {
        if (ended !== undefined) return
        let frames = 0
        const failed = decoder.pushEach(bytes, (frame) => {
          frames += 1
          if (ended !== undefined) return
          // A sealed payload is opened first: it decodes like any other once it has.
          const kind = frame.kind & ~SEALED
          const payload = (frame.kind & SEALED) === 0 ? frame.payload : sealKeys === undefined ? undefined : openSealed(sealKeys.receive, kind, frame.sequence, frame.payload)
          if (payload === undefined) {
            end(new LinkError({ channel, peer, reason: "decode", detail: `a sealed message (kind ${kind}) did not open` }))
            connection.reset()
            return
          }
          const message = options.inbound.decode(kind, payload)
          if (Either.isLeft(message)) {
            end(new LinkError({ channel, peer, reason: "decode", detail: message.left.reason }))
            connection.reset()
            return
          }
          // An authenticated frame: the peer is no stranger (the mux stops counting it against the caps).
          if (frames === 1) connection.trusted()
          // Switch before the next frame is parsed: it may already be in this chunk.
          const salt = options.rekeyOn?.(message.right)
          if (salt !== undefined) switchTo(salt)
          Queue.unsafeOffer(inbox, Either.right(message.right))
        })
        WireCounters.received(channel, frames, bytes.length)
        if (failed !== undefined) {
          end(new LinkError({ channel, peer, reason: failed.reason, detail: failed.detail }))
          connection.reset()
        }
      },
      close: () => end(new LinkError({ channel, peer, reason: "closed", detail: "the peer closed the connection" }))
    })
    let sequence = 0n
    const receive: Effect.Effect<In, LinkError> = Effect.flatMap(Queue.take(inbox), (next) => {
      // An ending stays in the inbox for every later reader.
      if (Either.isLeft(next)) Queue.unsafeOffer(inbox, next)
      return next
    })
    const link: Link<In, Out> = {
      peer,
      keyId: agreement.keyId,
      send: (message) =>
        Effect.suspend(() => {
          if (connection.isClosed) {
            return Effect.fail(new LinkError({ channel, peer, reason: "closed", detail: "the connection is closed" }))
          }
          const encoded = options.outbound.encode(message)
          const secret = sealKeys !== undefined && sealed.has((message as { readonly _tag?: string })._tag ?? "")
          const kind = secret ? encoded.kind | SEALED : encoded.kind
          const payload = secret ? seal(sealKeys!.send, encoded.kind, sequence, encoded.payload) : encoded.payload
          const parts = encodeFrame(sendKey, kind, sequence, payload)
          sequence += 1n
          WireCounters.sent(channel, parts.reduce((sum, part) => sum + part.length, 0))
          // Waiting only when the kernel's buffer is full: an Effect.promise per frame cost a fiber suspension each.
          return connection.send(...parts) ? Effect.void : Effect.promise(() => connection.drained())
        }),
      receive,
      receiveWithin: (ms, what) =>
        Effect.timeoutFail(receive, {
          duration: Duration.millis(ms),
          onTimeout: () => new LinkError({ channel, peer, reason: "handshake", detail: `no ${what} within ${ms} ms` })
        }),
      close: Effect.sync(() => connection.end()),
      abort: (detail) =>
        Effect.sync(() => {
          end(new LinkError({ channel, peer, reason: "closed", detail }))
          connection.reset()
        }),
      rekey: (salt) => Effect.sync(() => switchTo(salt))
    }
    return link
  })

/** `n` bytes from the other side; a connection that does not send them in time is reset. */
const expect = (
  connection: Connection,
  n: number,
  options: { readonly channel: ChannelName; readonly handshakeMs?: number | undefined },
  peer: string,
  what: string
): Effect.Effect<Uint8Array, LinkError> =>
  Effect.flatMap(Effect.promise(() => connection.take(n, options.handshakeMs ?? 10_000)), (bytes) => {
    if (bytes instanceof Uint8Array) return Effect.succeed(bytes)
    connection.reset()
    const detail = bytes === "closed" ? "closed during the handshake" : `no ${what} within ${options.handshakeMs ?? 10_000} ms`
    return Effect.fail(new LinkError({ channel: options.channel, peer, reason: "handshake", detail }))
  })

export interface AcceptOptions<In, Out> extends LinkOptions<In, Out> {
  /** The key of each key id this listener knows (`unnamedKey(salt)`: the salt alone); undefined: unknown, reset. */
  readonly keyFor: (keyId: string) => Uint8Array | undefined
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The listener's side, once the mux has read the channel magic. */
export const accept = <In, Out>(
  connection: Connection,
  options: AcceptOptions<In, Out>
): Effect.Effect<Link<In, Out>, LinkError> =>
  Effect.gen(function*() {
    const peer = connection.peer
    const refuse = (detail: string) =>
      Effect.zipRight(Effect.sync(() => connection.reset()), Effect.fail(new LinkError({ channel: options.channel, peer, reason: "handshake", detail })))
    const opening = yield* expect(connection, NONCE_BYTES + 1, options, peer, "nonce")
    const dialerNonce = opening.slice(0, NONCE_BYTES)
    const idLength = opening[NONCE_BYTES]!
    if (idLength > MAX_KEY_ID_BYTES) return yield* refuse(`a key id of ${idLength} bytes (at most ${MAX_KEY_ID_BYTES})`)
    const idBytes = idLength === 0 ? new Uint8Array(0) : yield* expect(connection, idLength, options, peer, "key id")
    let keyId: string
    try {
      keyId = utf8.decode(idBytes)
    } catch {
      return yield* refuse("a key id that is not UTF-8")
    }
    const key = options.keyFor(keyId)
    // Unknown ids are not echoed: a stranger's bytes are not printed.
    if (key === undefined) return yield* refuse(keyId === "" ? "no key id, and this channel takes only scoped keys" : "a key id this launcher does not know")
    const listenerNonce = newNonce()
    yield* Effect.promise(() => connection.write(listenerNonce))
    return yield* open(connection, options, { dialerNonce, listenerNonce, role: "listener", key, keyId })
  })

export interface DialOptions<In, Out> extends LinkOptions<In, Out> {
  readonly host: string
  readonly port: number
  /** The key this dialer holds: the salt, or a scoped key (`Keys.hostKey`, `Keys.rankKey`) named by `keyId`. */
  readonly salt: Uint8Array
  /** Which key `salt` is (default: empty, the salt itself). */
  readonly keyId?: string | undefined
}

/** The dialer's side: connect, send the magic and a nonce, agree on keys. Closed with the Scope. */
export const dial = <In, Out>(options: DialOptions<In, Out>): Effect.Effect<Link<In, Out>, LinkError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const where = `${options.host}:${options.port}`
      const socket = yield* Effect.tryPromise({
        try: () =>
          Bun.connect<SocketData>({
            hostname: options.host,
            port: options.port,
            data: {},
            socket: { ...forwardingHandlers, open: (opened: Socket<SocketData>) => void new Connection(opened) }
          }),
        catch: (error) =>
          new LinkError({
            channel: options.channel,
            peer: where,
            reason: "connect",
            detail: `${error instanceof Error ? error.message : String(error)}; is the launcher running and is ${where} reachable?`
          })
      })
      const connection = socket.data.connection ?? new Connection(socket)
      const dialerNonce = newNonce()
      const keyId = options.keyId ?? ""
      const idBytes = new TextEncoder().encode(keyId)
      if (idBytes.length > MAX_KEY_ID_BYTES) {
        connection.reset()
        return yield* new LinkError({ channel: options.channel, peer: where, reason: "handshake", detail: `the key id is ${idBytes.length} bytes (at most ${MAX_KEY_ID_BYTES})` })
      }
      yield* Effect.promise(() => connection.write(magic[options.channel], dialerNonce, new Uint8Array([idBytes.length]), idBytes))
      const listenerNonce = yield* expect(connection, NONCE_BYTES, options, where, "nonce")
      return yield* open(connection, options, { dialerNonce, listenerNonce, role: "dialer", key: options.salt, keyId })
    }),
    (link) => link.close
  )
