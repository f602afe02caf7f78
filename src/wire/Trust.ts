/**
 * Who may join a run, and with which key the join handshake is checked.
 *
 * - Pre-shared (the default): the salt reaches agents out of band (ssh stdin,
 *   a file, an environment variable), never argv, and `Hello` must carry a
 *   MAC made with it.
 * - Open: `Hello` and `Accept` use a key anyone can compute, and `Accept`
 *   hands the salt to the joiner; everything after is keyed by the salt. Only
 *   `controller.join.open_admission: true` asks for it, always with a warning,
 *   and even then only declared hosts are admitted. A loopback bind is no
 *   reason: every local user can reach 127.0.0.1, and the in-process agent
 *   has the salt in memory anyway.
 *
 * An agent without a salt names the open key in its handshake
 * (`OPEN_KEY_ID`), so a launcher under pre-shared admission can tell it from
 * a dialer with the wrong salt, and answer it with `Reject{needs: "salt"}`
 * under the open key, rather than drop it unanswered (which the agent could
 * only take for a transient failure, and dial again for ever). The answer
 * holds nothing secret, and anyone can forge it: an agent with a salt never
 * dials with the open key, so only one that cannot join anyway can be told
 * to give up.
 */
import { OPEN_SALT } from "./Keys.ts"

export type Admission =
  | { readonly mode: "pre-shared" }
  | { readonly mode: "open"; readonly warning: string | undefined }

export const isLoopbackAddress = (address: string): boolean =>
  address === "localhost" || address === "::1" || address.startsWith("127.") || address.startsWith("::ffff:127.")

export const admission = (options: { readonly bindAddress: string; readonly openAdmission: boolean }): Admission => {
  if (!options.openAdmission) return { mode: "pre-shared" }
  const who = isLoopbackAddress(options.bindAddress) ? "any user of this machine" : "anyone who can reach this port"
  return {
    mode: "open",
    warning: `open admission on ${options.bindAddress}: ${who} can join the run as a declared host and ` +
      "learn its salt. Use it only on a trusted network; otherwise remove `open_admission` and let cohort " +
      "hand the salt to agents itself (ssh) or give it to self-deployed agents out of band."
  }
}

/** The salt that keys `Hello` and `Accept` under an admission mode. */
export const joinSalt = (mode: Admission, salt: Uint8Array): Uint8Array => (mode.mode === "open" ? OPEN_SALT : salt)

/** The key id of the open key on the join channel: an agent that holds no salt asks for open admission. */
export const OPEN_KEY_ID = "open"

/**
 * The join channel's keys by key id: the unnamed one is the run's join key (`joinSalt`); the open key is
 * known under both modes, so that a salt-less agent is answered (under pre-shared admission, refused).
 */
export const joinKeyFor = (mode: Admission, salt: Uint8Array) => (keyId: string): Uint8Array | undefined =>
  keyId === "" ? joinSalt(mode, salt) : keyId === OPEN_KEY_ID ? OPEN_SALT : undefined
