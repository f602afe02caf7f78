/**
 * The run's secret and the per-connection keys derived from it.
 *
 * One 128-bit session salt per launch, from the OS CSPRNG. It reaches agents
 * out of band (ssh stdin, a file, an environment variable), never argv.
 * Every connection opens with a nonce from each side; each direction of the
 * connection gets its own frame key (AES-128, see `FrameCipher`): HKDF-SHA256
 * of the key the dialer named (the salt or a scoped key), salted with both
 * nonces, under a label that names the direction, the frame mode and the
 * channel. A frame recorded on one connection, or in one direction, therefore
 * fails its tag anywhere else, and a replayed conversation fails as soon as
 * the listener's fresh nonce differs. The mode is in the label so that a mode
 * changed on the way (the listener announces it, `Link`) gives keys that
 * authenticate nothing.
 */
import { hkdfSync } from "node:crypto"
import { FRAME_KEY_BYTES, type FrameKey, frameKey } from "./FrameCipher.ts"

export const SALT_BYTES = 16
export const NONCE_BYTES = 16

/** A fresh session salt for one launch. */
export const newSalt = (): Uint8Array => crypto.getRandomValues(new Uint8Array(SALT_BYTES))

export const newNonce = (): Uint8Array => crypto.getRandomValues(new Uint8Array(NONCE_BYTES))

/** The key of open admission (Hello and Accept only): anyone can compute it, so it proves nothing but integrity. */
export const OPEN_SALT: Uint8Array = new Uint8Array(SALT_BYTES)

export interface ConnectionKeys {
  /** What the dialer sends. */
  readonly dialer: Uint8Array
  /** What the listener sends. */
  readonly listener: Uint8Array
}

/** One key per direction of a connection: HKDF-SHA256(ikm: `salt`, salt: dialer nonce ‖ listener nonce, info: label ‖ channel magic). */
const perDirection = (
  salt: Uint8Array,
  magic: Uint8Array,
  dialerNonce: Uint8Array,
  listenerNonce: Uint8Array,
  label: (direction: "dialer" | "listener") => string,
  bytes: number
): ConnectionKeys => {
  const nonces = Buffer.concat([dialerNonce, listenerNonce])
  const key = (direction: "dialer" | "listener") =>
    new Uint8Array(hkdfSync("sha256", salt, nonces, Buffer.concat([Buffer.from(label(direction)), magic]), bytes))
  return { dialer: key("dialer"), listener: key("listener") }
}

/** A connection's frame keys, one per direction. */
export interface FrameKeys {
  readonly dialer: FrameKey
  readonly listener: FrameKey
}

/**
 * The frame keys of one connection: HKDF-SHA256(ikm: `salt`, salt: dialer nonce ‖ listener nonce,
 * info: "cohort/2 frame key <dialer|listener> <authenticated|encrypted> " ‖ channel magic), 16 bytes each.
 */
export const deriveKeys = (
  salt: Uint8Array,
  magic: Uint8Array,
  dialerNonce: Uint8Array,
  listenerNonce: Uint8Array,
  encrypt = false
): FrameKeys => {
  const mode = encrypt ? "encrypted" : "authenticated"
  const keys = perDirection(salt, magic, dialerNonce, listenerNonce, (direction) => `cohort/2 frame key ${direction} ${mode} `, FRAME_KEY_BYTES)
  return { dialer: frameKey(keys.dialer, encrypt), listener: frameKey(keys.listener, encrypt) }
}

/**
 * The keys that encrypt a connection's secret-bearing messages (`Seal`), one per direction: HKDF-SHA256 of
 * the salt, salted with both nonces, under labels of their own, so they are independent of the MAC keys and
 * of every other connection's.
 */
export const deriveSealKeys = (
  salt: Uint8Array,
  magic: Uint8Array,
  dialerNonce: Uint8Array,
  listenerNonce: Uint8Array
): ConnectionKeys => perDirection(salt, magic, dialerNonce, listenerNonce, (direction) => `cohort/1 seal ${direction} `, 32)

/**
 * The token of `POST /start`: derived from the salt (HKDF-SHA256, its own label), so it opens the join
 * window and nothing else: knowing it gives no frame key, and it never is the salt itself.
 */
export const startToken = (salt: Uint8Array): string =>
  Buffer.from(hkdfSync("sha256", salt, new Uint8Array(0), "cohort/1 start token", 32)).toString("hex")

/**
 * Keys scoped to one party, so that none of the run's children holds the salt (issue 18, item 9): a host's
 * relay gets `hostKey(salt, host)` for its control link, and each rank `rankKey(salt, rank)` for its
 * rendezvous link. Both are HKDF-SHA256 of the salt under a label of their own. Knowing one gives neither the
 * salt nor any other host's or rank's key, so a rank's code cannot register as its relay, speak for another
 * host or join as one; the launcher derives them from the key id a dialer names (`Link.dial`'s `keyId`).
 */
export const SCOPED_KEY_BYTES = 32

const scoped = (salt: Uint8Array, label: string): Uint8Array =>
  new Uint8Array(hkdfSync("sha256", salt, new Uint8Array(0), label, SCOPED_KEY_BYTES))

/** The key of one host's relay (the control channel, key id: the host's name). */
export const hostKey = (salt: Uint8Array, host: string): Uint8Array => scoped(salt, `cohort/1 host key ${host}`)

/** The key of one rank number (the rendezvous channel, key id: the rank in decimal). */
export const rankKey = (salt: Uint8Array, rank: number): Uint8Array => scoped(salt, `cohort/1 rank key ${rank}`)

/** A scoped key as 64 hex digits (a rank's envelope, the relay's IPC message); undefined for anything else. */
export const scopedKeyFromHex = (hex: string): Uint8Array | undefined =>
  /^[0-9a-f]{64}$/i.test(hex) ? new Uint8Array(Buffer.from(hex, "hex")) : undefined

/** Salts travel as 32 hex digits (environment variables, spec files). */
export const saltToHex = (salt: Uint8Array): string => Buffer.from(salt).toString("hex")

export const saltFromHex = (hex: string): Uint8Array | undefined =>
  /^[0-9a-f]{32}$/i.test(hex) ? new Uint8Array(Buffer.from(hex, "hex")) : undefined
