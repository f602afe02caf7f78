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
