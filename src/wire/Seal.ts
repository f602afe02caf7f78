/**
 * Messages that carry secrets travel encrypted: AES-256-GCM inside the
 * authenticated frame.
 *
 * Frames are authenticated (GCM as a MAC) but readable unless
 * `controller.encrypt` is on, which is right for beats, folds and reports
 * and wrong for what an `Accept` carries (the cluster's and
 * the host's env, where people put tokens; the job's args; under open
 * admission, the salt) and for NCCL's unique id (it admits anyone to a
 * communicator). Those kinds (`sealedTags`, per channel, so both ends agree
 * without a negotiation) are encrypted with a key of their own per direction
 * (`Keys.deriveSealKeys`). The IV is the frame's sequence number, unique per
 * key by construction; the kind is the additional data. A sealed frame's kind
 * has its high bit set, so a reader knows to open it before decoding.
 *
 * Under open admission the keys come from the public open salt: an `Accept`
 * is then hidden from nobody, which is what open admission means (warned).
 */
import { createCipheriv, createDecipheriv } from "node:crypto"
import type { ChannelName } from "./Channel.ts"
import { nonceOf, TAG_BYTES } from "./FrameCipher.ts"

/** The message tags each channel seals. */
export const sealedTags: Readonly<Record<ChannelName, ReadonlySet<string>>> = {
  join: new Set(["Accept"]),
  rendezvous: new Set(["IdProvided", "Ready"]),
  control: new Set(),
  data: new Set()
}

/** Set on a frame's kind byte when its payload is sealed. */
export const SEALED = 0x80

/** Encrypt a payload for the frame `sequence` of kind `kind` (the kind without the SEALED bit): ciphertext ‖ tag. */
export const seal = (key: Uint8Array, kind: number, sequence: bigint, payload: Uint8Array): Uint8Array => {
  const cipher = createCipheriv("aes-256-gcm", key, nonceOf(sequence))
  cipher.setAAD(new Uint8Array([kind]))
  return new Uint8Array(Buffer.concat([cipher.update(payload), cipher.final(), cipher.getAuthTag()]))
}

/** Decrypt what `seal` made; undefined when it does not open (wrong key, altered bytes). */
export const open = (key: Uint8Array, kind: number, sequence: bigint, sealed: Uint8Array): Uint8Array | undefined => {
  if (sealed.length < TAG_BYTES) return undefined
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, nonceOf(sequence))
    decipher.setAAD(new Uint8Array([kind]))
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES))
    return new Uint8Array(Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - TAG_BYTES)), decipher.final()]))
  } catch {
    return undefined
  }
}
