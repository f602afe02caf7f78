/**
 * The keys the door (PortMux) tests a dialer's nonce against (`DoorToken`),
 * by channel: the ones the channels' owners take. The join channel's are
 * `Trust.joinKeyFor`'s (the salt, or a public key that vouches for nobody),
 * a relay's is its host's key named by the host (ControlGate), a rank's its
 * rank's key named by the number (RendezvousGate).
 *
 * The door only reads nonces with them, to count a key holder's dial out of
 * the strangers before any owner spends anything on it; the owners still
 * check every frame with their own. Were the two to disagree, a key holder's
 * dial would only be counted as a stranger's, and still be admitted.
 *
 * Scoped keys are derived once per id (HKDF) and kept for a bounded number
 * of ids: a flood naming made-up ids costs one derivation each.
 */
import type { ChannelName } from "../../wire/Channel.ts"
import { hostKey, rankKey } from "../../wire/Keys.ts"
import { isHostName } from "../../wire/Printable.ts"
import { type Admission, joinKeyFor } from "../../wire/Trust.ts"

/** For each channel the door reads nonces on: the key of a key id, or undefined for one that names none. */
export type DoorKeys = Partial<Record<ChannelName, (keyId: string) => Uint8Array | undefined>>

/** Scoped keys kept per channel; past it, the memory starts afresh (it only saves derivations). */
const KEPT = 4_096

const kept = (derive: (keyId: string) => Uint8Array | undefined) => {
  const keys = new Map<string, Uint8Array | undefined>()
  return (keyId: string): Uint8Array | undefined => {
    if (keys.has(keyId)) return keys.get(keyId)
    if (keys.size >= KEPT) keys.clear()
    const key = derive(keyId)
    keys.set(keyId, key)
    return key
  }
}

export const doorKeys = (salt: Uint8Array, admission: Admission): DoorKeys => ({
  join: joinKeyFor(admission, salt),
  control: kept((keyId) => (isHostName(keyId) ? hostKey(salt, keyId) : undefined)),
  rendezvous: kept((keyId) => (/^(0|[1-9]\d{0,8})$/.test(keyId) ? rankKey(salt, Number(keyId)) : undefined))
})
