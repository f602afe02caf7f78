/**
 * Links: authenticated message streams over one connection.
 *
 * Opening: the dialer sends the channel magic, its nonce and the id of the
 * key it holds (one length byte, then the id: empty for the salt itself, a
 * host's name or a rank's number for the scoped keys of `Keys`); the listener
 * looks the key up, resets a connection naming one it does not know, answers
 * with its own nonce and one byte for the frame mode (0: authenticated, 1:
 * encrypted; the launcher's `controller.encrypt`), and both derive the
 * per-direction keys from that key, the nonces and the mode. The dialer
 * takes the mode it is told: the mode is in the keys' label, so one changed
 * on the way gives keys under which no frame authenticates, and the link
 * ends at its first frame. From then on every message is a frame (`Frame`)
 * carrying one message of the channel's union (`Codec`). The first bad frame,
 * undecodable message or EOF ends the link with a `LinkError` that says which
 * and names the peer; a bad tag is never answered.
 *
 * The dialer's nonce carries a door token (`DoorToken`): the listener sees,
 * before it answers, whether the dialer holds the key it named, and tells
 * the connection's door (`Connection.shown`, the mux's count of strangers).
 * A dialer that has not shown its key must have a frame authenticate within
 * the door's short deadline (about a second) of the listener's nonce.
 *
 * The inbox is bounded (`InboxBound`, per channel by default: `defaultInbox`).
 * A socket callback cannot wait, so the bound is kept before decoding: frames
 * are decoded one at a time while the inbox has room; once it is full the
 * rest of what was read stays undecoded and the link stops reading the
 * socket (`Connection.pauseReading`), so the kernel's buffers fill and TCP
 * holds the peer back. Reading resumes once the owner has taken the inbox
 * down to half. A peer that sends faster than its owner reads costs at most
 * the bound, one socket read and the kernel's buffers.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Mailbox from "effect/Mailbox"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type { Socket } from "bun"
import { ChannelName, defaultCeiling, magic, UNAUTHENTICATED_CEILING, WIRE_PROTOCOL } from "./Channel.ts"
import type { Codec } from "./Codec.ts"
import { Connection, forwardingHandlers, type SocketData } from "./Connection.ts"
import { encodeFrame, type Frame, FrameDecoder, FrameErrorReason, HEADER_BYTES, MAC_BYTES } from "./Frame.ts"
import * as WireCounters from "./WireCounters.ts"
import { vouches, vouchingNonce } from "./DoorToken.ts"
import { deriveKeys, deriveSealKeys, NONCE_BYTES, newNonce } from "./Keys.ts"
import { open as openSealed, seal, SEALED, sealedTags } from "./Seal.ts"

export const LinkErrorReason = Schema.Literal("closed", "handshake", "connect", "decode", ...FrameErrorReason.literals)
export type LinkErrorReason = typeof LinkErrorReason.Type

/** How a link ended. A Schema: what it says reaches other processes (an agent's last line, a host's loss in the events). */
export class LinkError extends Schema.TaggedError<LinkError>()("LinkError", {
  channel: ChannelName,
  peer: Schema.String,
  reason: LinkErrorReason,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.channel} link with ${this.peer}: ${this.reason}: ${this.detail}`
  }
}

export interface Link<In, Out> {
  readonly peer: string
  /** The key id the dialer named (empty: the salt): what the peer's first message must agree with. */
  readonly keyId: string
  /** Whether frames' payloads are encrypted (the listener's choice, `AcceptOptions.encrypt`), not only authenticated. */
  readonly encrypted: boolean
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
   * `salt` (call it right after sending the `Accept` that carries it). Frames
   * not yet decoded are read with it: the dialer sends nothing between its
   * `Hello` and the `Accept`, so none are waiting then.
   */
  readonly rekey: (salt: Uint8Array) => Effect.Effect<void>
  /** What the link holds for its owner and whether it is reading: for diagnostics and tests. */
  readonly backlog: Effect.Effect<LinkBacklog>
  /**
   * Have `watch` called once, from the socket's callback, when the link ends (the peer closed, a bad frame, an
   * abort), whatever its inbox still holds; at once if it has ended. Returns what stops the watch. For an owner
   * that only needs to hear of the end (the join window, until it forms) without a fiber reading the link.
   */
  readonly whenEnded: (watch: (ended: LinkError) => void) => () => void
}

/** How much a link's inbox holds before it stops reading from its socket. */
export interface InboxBound {
  /** Messages received and not yet taken by the owner (at least 1). */
  readonly messages: number
  /**
   * Bytes of those messages' frames (at least 1). A frame is decoded while fewer are held, so the inbox
   * holds at most this plus one frame, and a frame larger than the bound still gets through alone.
   */
  readonly bytes: number
}

/**
 * The inbox bound per channel. 1,024 messages, an actor's default mailbox: a reader that forwards into
 * an actor holds no more in its link than the actor does, and the control plane's bursts (a host's
 * `RankExited`s, a world's `HostBeats`) are far below it. Bytes: four frames at the channel's ceiling
 * (16 MiB) for the control-plane channels, so a few large messages (a host's folded tensors) queue
 * without stopping the link; the data channel's frames are up to 1 GiB, and it holds one such frame
 * beyond the one being read.
 */
export const defaultInbox: Readonly<Record<ChannelName, InboxBound>> = {
  join: { messages: 1_024, bytes: 64 << 20 },
  control: { messages: 1_024, bytes: 64 << 20 },
  rendezvous: { messages: 1_024, bytes: 64 << 20 },
  data: { messages: 1_024, bytes: 1 << 30 }
}

export interface LinkBacklog {
  /** Messages in the inbox, not yet taken, and the bytes of their frames. */
  readonly messages: number
  readonly bytes: number
  /** The most the inbox has held at once. */
  readonly peakMessages: number
  readonly peakBytes: number
  /** Bytes read from the socket and not yet decoded: they came while the inbox was full. */
  readonly undecodedBytes: number
  /** Whether the socket is being read now: false while the inbox is full (the peer is held back) or once closed. */
  readonly reading: boolean
  /** Bytes this end has sent that the kernel has not taken yet: the peer is not reading fast enough. */
  readonly unsentBytes: number
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
  /** The inbox's bound (default: the channel's, `defaultInbox`). */
  readonly inbox?: Partial<InboxBound> | undefined
}

/** Both nonces, the key they are used with, the frame mode and this end's role: everything needed to derive the keys. */
interface Agreement {
  readonly dialerNonce: Uint8Array
  readonly listenerNonce: Uint8Array
  readonly role: "dialer" | "listener"
  readonly key: Uint8Array
  readonly keyId: string
  readonly encrypt: boolean
}

/** The listener's last handshake byte: the frame mode. */
const AUTHENTICATED_MODE = 0
const ENCRYPTED_MODE = 1

/** A key id is at most this many bytes of UTF-8 (one length byte; host names stop at 253 characters). */
export const MAX_KEY_ID_BYTES = 253

/** The listener's keys when only the unnamed one exists: the salt (the join channel, tests). */
export const unnamedKey = (salt: Uint8Array) => (keyId: string): Uint8Array | undefined => (keyId === "" ? salt : undefined)

/** A message in the inbox with the size of the frame it came in, given back to the bound when it is taken. */
interface Received<In> {
  readonly message: In
  readonly bytes: number
}

/**
 * Wire a connection whose nonces are agreed into a Link. `firstFrameMs` (a listener's, for a dialer its door holds
 * as a stranger): the link ends, and the connection is reset, unless a frame has authenticated within it.
 */
const open = <In, Out>(
  connection: Connection,
  options: LinkOptions<In, Out>,
  agreement: Agreement,
  firstFrameMs?: number
): Effect.Effect<Link<In, Out>> =>
  Effect.gen(function*() {
    const { channel } = options
    const peer = connection.peer
    const bound: InboxBound = {
      messages: Math.max(1, options.inbox?.messages ?? defaultInbox[channel].messages),
      bytes: Math.max(1, options.inbox?.bytes ?? defaultInbox[channel].bytes)
    }
    // Unbounded as a mailbox: the producer is a socket callback, which cannot wait for room, so the
    // bound is kept before decoding (`hasRoom`) and the socket is paused instead.
    const inbox = yield* Mailbox.make<Received<In>, LinkError>()
    const keysFor = (salt: Uint8Array) => {
      const keys = deriveKeys(salt, magic[channel], agreement.dialerNonce, agreement.listenerNonce, agreement.encrypt)
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
    // A listener hears strangers: their first frame must authenticate before a large one is taken. Payloads
    // are lent: `deliver` decodes each into its message (CBOR copies byte strings out) before the next frame.
    const decoder = new FrameDecoder(initial.receive, ceiling, agreement.role === "listener" ? UNAUTHENTICATED_CEILING : ceiling, "lent")

    // The inbox's load, kept here because the mailbox is unbounded.
    let queued = 0
    let queuedBytes = 0
    let peakMessages = 0
    let peakBytes = 0
    const hasRoom = () => queued < bound.messages && queuedBytes < bound.bytes
    /** Bytes read while the inbox was full, in order. Only ever non-empty while the socket is paused. */
    let undecoded: Array<Uint8Array> = []
    let undecodedBytes = 0
    /** Told the connection to stop reading, and not yet to resume. */
    let paused = false
    /** The peer closed while undecoded bytes were waiting: its messages come first, then this. */
    let closedBehind: LinkError | undefined
    let authenticated = false

    /** The first ending seen, told to `whenEnded`'s watchers: a close behind undecoded bytes counts at once. */
    let endSeen: LinkError | undefined
    const watchers = new Set<(ended: LinkError) => void>()
    const seeEnd = (error: LinkError) => {
      if (endSeen !== undefined) return
      endSeen = error
      const told = [...watchers]
      watchers.clear()
      for (const watch of told) watch(error)
    }

    /** `receiveWithin`'s waits: told when a message is in the inbox or the link has ended. */
    const arrivals = new Set<() => void>()
    const arrived = () => {
      if (arrivals.size === 0) return
      const told = [...arrivals]
      arrivals.clear()
      for (const wake of told) wake()
    }

    let ended: LinkError | undefined
    const end = (error: LinkError) => {
      if (ended !== undefined) return
      seeEnd(error)
      ended = error
      undecoded = []
      undecodedBytes = 0
      // Accepted whatever the inbox holds: readers take what came before it, then every later one fails with it.
      inbox.unsafeDone(Exit.fail(error))
      arrived()
      clearTimeout(firstFrameTimer)
    }

    // A stranger's seat at the door costs the launcher a socket and a fiber: it is given up after a short time, not
    // after the owner's whole handshake budget (a flood that redials at once then holds each seat a second, not ten).
    const firstFrameTimer = firstFrameMs === undefined ? undefined : setTimeout(() => {
      if (authenticated || ended !== undefined) return
      end(new LinkError({
        channel,
        peer,
        reason: "handshake",
        detail: `no frame that authenticates within ${firstFrameMs} ms of the listener's nonce (a dialer whose nonce does not show its key gets that long)`
      }))
      connection.reset()
    }, firstFrameMs)

    let framesDecoded = 0
    const deliver = (frame: Frame) => {
      framesDecoded += 1
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
      if (!authenticated) {
        authenticated = true
        clearTimeout(firstFrameTimer)
        connection.trusted()
      }
      // Switch before the next frame is parsed: it may already be in this chunk.
      const salt = options.rekeyOn?.(message.right)
      if (salt !== undefined) switchTo(salt)
      const bytes = HEADER_BYTES + frame.payload.length + MAC_BYTES
      queued += 1
      queuedBytes += bytes
      peakMessages = Math.max(peakMessages, queued)
      peakBytes = Math.max(peakBytes, queuedBytes)
      inbox.unsafeOffer({ message: message.right, bytes })
      arrived()
    }

    /** Decode from `bytes` while the inbox has room, a frame at a time; returns how many bytes it used. */
    const decode = (bytes: Uint8Array): number => {
      framesDecoded = 0
      // A frame under way is finished (room was checked when it began); a new one waits for room.
      const used = decoder.betweenFrames && !hasRoom() ? 0 : decoder.pushWhile(bytes, (frame) => {
        deliver(frame)
        return ended === undefined && hasRoom()
      })
      const failed = decoder.error
      if (failed !== undefined && ended === undefined) {
        end(new LinkError({ channel, peer, reason: failed.reason, detail: failed.detail }))
        connection.reset()
      }
      WireCounters.received(channel, framesDecoded, used)
      return used
    }

    const keep = (bytes: Uint8Array) => {
      undecoded.push(bytes)
      undecodedBytes += bytes.length
      if (paused) return
      paused = true
      connection.pauseReading()
    }

    /** After the owner has taken a message: decode what waits, and read again once the inbox is down to half. */
    const catchUp = () => {
      while (undecoded.length > 0 && ended === undefined) {
        const head = undecoded[0]!
        const used = decode(head)
        undecodedBytes -= used
        if (used < head.length) {
          undecoded[0] = head.subarray(used)
          return
        }
        undecoded.shift()
      }
      if (ended !== undefined) return
      if (closedBehind !== undefined) return end(closedBehind)
      // Half, not one free slot: resuming for every message taken would pause and resume the socket each time.
      if (queued <= bound.messages / 2 && queuedBytes <= bound.bytes / 2) {
        paused = false
        connection.resumeReading()
      }
    }

    connection.receive({
      data: (bytes) => {
        if (ended !== undefined) return
        // Behind bytes already waiting, to keep the stream's order (the connection's early bytes can come
        // after a pause; Bun's socket does not call back once paused). Copies: Bun reuses its buffer.
        if (undecoded.length > 0) return keep(bytes.slice())
        const used = decode(bytes)
        if (used < bytes.length && ended === undefined) keep(bytes.slice(used))
      },
      close: () => {
        const closed = new LinkError({ channel, peer, reason: "closed", detail: "the peer closed the connection" })
        if (undecoded.length === 0) end(closed)
        else {
          closedBehind = closed
          seeEnd(closed)
        }
      }
    })

    const taken = (received: Received<In>): In => {
      queued -= 1
      queuedBytes -= received.bytes
      if (paused) catchUp()
      return received.message
    }
    // Uninterruptible between the take and its accounting: a message taken and not counted would hold
    // its place in the bound for ever. The wait itself stays interruptible (`receiveWithin`).
    const receive: Effect.Effect<In, LinkError> = Effect.uninterruptibleMask((restore) => Effect.map(restore(inbox.take), taken)).pipe(
      // The mailbox is only ever failed, never ended: every later take fails with the link's ending.
      Effect.catchTag("NoSuchElementException", () => Effect.dieMessage(`the ${channel} link's inbox ended without a LinkError`))
    )
    let sequence = 0n
    const link: Link<In, Out> = {
      peer,
      keyId: agreement.keyId,
      encrypted: agreement.encrypt,
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
      receiveWithin: (ms, what) => Effect.suspend(() => {
        // The time runs from when the effect runs, as Effect.timeout's would.
        const deadline = Date.now() + ms
        const late = new LinkError({ channel, peer, reason: "handshake", detail: `no ${what} within ${ms} ms` })
        // A timer and a wake-up from `deliver`, not a race of two fibers (`Effect.timeout`): every handshake waits
        // once, and a thousand hosts join at once. A message already waiting, or the link's end, is taken at once.
        const attempt: Effect.Effect<In, LinkError> = Effect.suspend(() => {
          if (queued > 0 || ended !== undefined) return receive
          const left = deadline - Date.now()
          if (left <= 0) return Effect.fail(late)
          return Effect.flatMap(
            Effect.async<boolean>((resume) => {
              const wake = () => {
                clearTimeout(timer)
                resume(Effect.succeed(true))
              }
              const timer = setTimeout(() => {
                arrivals.delete(wake)
                resume(Effect.succeed(false))
              }, left)
              arrivals.add(wake)
              return Effect.sync(() => {
                clearTimeout(timer)
                arrivals.delete(wake)
              })
            }),
            // Woken: take it (another reader may have been first: wait again, for what is left of the time).
            (woken) => (woken ? attempt : Effect.fail(late))
          )
        })
        return attempt
      }),
      close: Effect.sync(() => connection.end()),
      abort: (detail) =>
        Effect.sync(() => {
          end(new LinkError({ channel, peer, reason: "closed", detail }))
          connection.reset()
        }),
      rekey: (salt) => Effect.sync(() => switchTo(salt)),
      whenEnded: (watch) => {
        if (endSeen !== undefined) {
          watch(endSeen)
          return () => {}
        }
        watchers.add(watch)
        return () => void watchers.delete(watch)
      },
      backlog: Effect.sync(() => ({
        messages: queued,
        bytes: queuedBytes,
        peakMessages,
        peakBytes,
        undecodedBytes,
        reading: connection.isReading,
        unsentBytes: connection.unsentBytes
      }))
    }
    return link
  })

/** `n` bytes from the other side; a connection that does not send them in time is reset. */
const expect = (
  connection: Connection,
  n: number,
  options: { readonly channel: ChannelName; readonly handshakeMs?: number | undefined },
  peer: string,
  what: string,
  onClose = "closed during the handshake"
): Effect.Effect<Uint8Array, LinkError> => {
  // Already here (the usual case on the listener): no Promise, timer or suspension.
  const now = connection.takeNow(n)
  if (now !== undefined) return Effect.succeed(now)
  return Effect.flatMap(Effect.promise(() => connection.take(n, options.handshakeMs ?? 10_000)), (bytes) => {
    if (bytes instanceof Uint8Array) return Effect.succeed(bytes)
    connection.reset()
    const detail = bytes === "closed" ? onClose : `no ${what} within ${options.handshakeMs ?? 10_000} ms`
    return Effect.fail(new LinkError({ channel: options.channel, peer, reason: "handshake", detail }))
  })
}

/**
 * What a dialer is told when the listener closes before its nonce: a launcher resets a dial it does not take,
 * and one of another wire protocol does not know this magic (the likelier cause when every dial fails).
 */
const closedBeforeNonce =
  "closed during the handshake (a launcher closes a dial it does not take: a key it does not know, a channel this run " +
  `does not serve, or another wire protocol than this cohort's ${WIRE_PROTOCOL}, for which run the same cohort version on every host)`

/** A dial the listener closed before answering it: one it did not take, or one its door let go (`Agent` dials again). */
export const closedBeforeAnswer = (error: LinkError): boolean => error.reason === "handshake" && error.detail === closedBeforeNonce

/**
 * The dialer's nonce and key id, if they came with its magic (a dialer sends them in one write) and are well formed;
 * left in place for `accept`. For the door (PortMux), which tells a key holder from a stranger before any owner
 * spends anything on the connection; undefined: `accept` reads them and tells the door itself.
 */
export const peekOpening = (connection: Connection): { readonly nonce: Uint8Array; readonly keyId: string } | undefined => {
  const head = connection.peek(NONCE_BYTES + 1)
  if (head === undefined || head[NONCE_BYTES]! > MAX_KEY_ID_BYTES) return undefined
  const opening = connection.peek(NONCE_BYTES + 1 + head[NONCE_BYTES]!)
  if (opening === undefined) return undefined
  try {
    return { nonce: opening.slice(0, NONCE_BYTES), keyId: utf8.decode(opening.subarray(NONCE_BYTES + 1)) }
  } catch {
    return undefined
  }
}

export interface AcceptOptions<In, Out> extends LinkOptions<In, Out> {
  /** The key of each key id this listener knows (`unnamedKey(salt)`: the salt alone); undefined: unknown, reset. */
  readonly keyFor: (keyId: string) => Uint8Array | undefined
  /** Encrypt every frame's payload both ways, not only authenticate it (`controller.encrypt`; default false). The dialer is told. */
  readonly encrypt?: boolean | undefined
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
    // Before answering: a dialer whose nonce shows its key stops counting at the door (PortMux); any other is a
    // stranger's, and has a short time for its first frame.
    const firstFrameMs = connection.shown(vouches(key, magic[options.channel], keyId, dialerNonce), dialerNonce)
    if (firstFrameMs === "refused") return yield* refuse("no seat left at the door for another dialer that has not shown its key")
    const listenerNonce = newNonce()
    const encrypt = options.encrypt === true
    // Waiting only when the kernel's buffer is full, as `send` does.
    if (!connection.send(listenerNonce, new Uint8Array([encrypt ? ENCRYPTED_MODE : AUTHENTICATED_MODE]))) yield* Effect.promise(() => connection.drained())
    return yield* open(connection, options, { dialerNonce, listenerNonce, role: "listener", key, keyId, encrypt }, firstFrameMs)
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
          // A reset while connecting is a listener that took the connection and let it go at once (a launcher's door
          // under a flood does): the same as a close before its answer, which a dialer may try again. Refused is not.
          (error as { readonly code?: unknown }).code === "ECONNRESET"
            ? new LinkError({ channel: options.channel, peer: where, reason: "handshake", detail: closedBeforeNonce })
            : new LinkError({
              channel: options.channel,
              peer: where,
              reason: "connect",
              detail: `${error instanceof Error ? error.message : String(error)}; is the launcher running and is ${where} reachable?`
            })
      })
      const connection = socket.data.connection ?? new Connection(socket)
      const keyId = options.keyId ?? ""
      // It shows the listener's door, in the first bytes, that this dialer holds the key it names (`DoorToken`).
      const dialerNonce = vouchingNonce(options.salt, magic[options.channel], keyId)
      const idBytes = new TextEncoder().encode(keyId)
      if (idBytes.length > MAX_KEY_ID_BYTES) {
        connection.reset()
        return yield* new LinkError({ channel: options.channel, peer: where, reason: "handshake", detail: `the key id is ${idBytes.length} bytes (at most ${MAX_KEY_ID_BYTES})` })
      }
      yield* Effect.promise(() => connection.write(magic[options.channel], dialerNonce, new Uint8Array([idBytes.length]), idBytes))
      const answer = yield* expect(connection, NONCE_BYTES + 1, options, where, "nonce", closedBeforeNonce)
      const listenerNonce = answer.slice(0, NONCE_BYTES)
      const mode = answer[NONCE_BYTES]!
      if (mode !== AUTHENTICATED_MODE && mode !== ENCRYPTED_MODE) {
        connection.reset()
        return yield* new LinkError({
          channel: options.channel,
          peer: where,
          reason: "handshake",
          detail: `the launcher asked for frame mode ${mode}, which this cohort (wire protocol ${WIRE_PROTOCOL}) does not know: run the same cohort version on every host`
        })
      }
      return yield* open(connection, options, { dialerNonce, listenerNonce, role: "dialer", key: options.salt, keyId, encrypt: mode === ENCRYPTED_MODE })
    }),
    (link) => link.close
  )
