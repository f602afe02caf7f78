/**
 * The door token: a dialer's nonce that shows, in the very first bytes it
 * sends, that it holds the key it names.
 *
 * A listener learns who a dialer is only from its first frame, one round
 * trip after its own nonce. Until then every dialer looks alike, and a
 * stranger can name any key id (host names are guessable, rank numbers are
 * small), so no count of pending connections, by source, by key id or in
 * all, can keep a seat for a real agent that a flood of strangers cannot
 * take first. The dialer's nonce can: its 16 bytes are 8 random ones and the
 * first 8 bytes of HMAC-SHA256(key, "cohort/1 door " ‖ channel magic ‖ key
 * id length ‖ key id ‖ those 8 bytes). Only a holder of the key can make one
 * (2^-64 a guess), so the listener's door (PortMux) can stop counting the
 * connection as a stranger's before it answers. It proves nothing more: a
 * recorded nonce replays (the door remembers recent ones and takes each once),
 * and the connection is only trusted once its first frame has authenticated
 * under keys that the listener's fresh nonce makes new.
 *
 * A key anyone can compute (the open key, `OPEN_SALT`) vouches for nobody.
 * The nonce is still fresh for the key derivation: 64 random bits per
 * connection on the dialer's side, the listener's 128 on its own.
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { NONCE_BYTES, OPEN_SALT } from "./Keys.ts"

const RANDOM_BYTES = 8
const LABEL = new TextEncoder().encode("cohort/1 door ")

const tag = (key: Uint8Array, magic: Uint8Array, keyId: string, random: Uint8Array): Uint8Array => {
  const id = new TextEncoder().encode(keyId)
  return new Uint8Array(
    createHmac("sha256", key).update(LABEL).update(magic).update(new Uint8Array([id.length])).update(id).update(random).digest()
  ).subarray(0, NONCE_BYTES - RANDOM_BYTES)
}

/** A dialer's nonce under `key` (named `keyId`) on the channel of `magic`: fresh random bytes and their tag. */
export const vouchingNonce = (key: Uint8Array, magic: Uint8Array, keyId: string): Uint8Array => {
  const nonce = new Uint8Array(NONCE_BYTES)
  const random = crypto.getRandomValues(new Uint8Array(RANDOM_BYTES))
  nonce.set(random)
  nonce.set(tag(key, magic, keyId, random), RANDOM_BYTES)
  return nonce
}

const isPublic = (key: Uint8Array): boolean => key.length === OPEN_SALT.length && timingSafeEqual(key, OPEN_SALT)

/** Whether `nonce` was made by a holder of `key` for `keyId` on this channel (never for a key anyone can compute). */
export const vouches = (key: Uint8Array, magic: Uint8Array, keyId: string, nonce: Uint8Array): boolean => {
  if (nonce.length !== NONCE_BYTES || isPublic(key)) return false
  return timingSafeEqual(tag(key, magic, keyId, nonce.subarray(0, RANDOM_BYTES)), nonce.subarray(RANDOM_BYTES))
}
