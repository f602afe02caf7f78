/**
 * A failed rank's signature: what it died of, read from what it last said, so that the policy can tell a
 * bug (the same error on a second rank) from a death that only followed another one (a lost peer).
 *
 * - Python ranks end an uncaught exception with a traceback whose last unindented line is the exception's
 *   class and message (`KeyError: 'column loss_scale'`); chained exceptions print several, and the last
 *   one is what ended the process.
 * - An `entry:` rank says its error itself (`TypeError: …`), before it exits.
 * - Anything else: its last line that reads like an error.
 *
 * Two deaths have the same signature when their exit statuses are equal and their error lines are equal
 * once numbers are taken out: `rank 3 got a NaN in batch 17` and `rank 1 got a NaN in batch 93` are the
 * same bug met on two ranks. A death with no such line is known by its status alone.
 *
 * Everything here is pure; the tables in failure-signature.table.test hold it to literal lines.
 */

/** What a rank died of, as a person reads it, and the key that equal failures share. */
export interface Signature {
  /** `KeyError: 'column loss_scale'`, or `exit status 3` when the rank said nothing that reads like an error. */
  readonly text: string
  /** The status and the text with its numbers taken out: equal keys are the same failure. */
  readonly key: string
}

/** What the signature is read from: a rank's exit as the policy sees it. */
export interface FailureReport {
  /** The exit status; undefined for a crash (a process that could not even start). */
  readonly code?: number | undefined
  /** What an `entry:` rank's code threw, as it said before exiting (`TypeError: …`). */
  readonly error?: string | undefined
  /** A crash's description. */
  readonly detail?: string | undefined
  /** The rank's last lines of output, oldest first. */
  readonly lines?: ReadonlyArray<string> | undefined
}

const TRACEBACK = /^Traceback \(most recent call last\):\s*$/
/** An exception's line: a dotted class name at the start of the line, then its message (or nothing). */
const EXCEPTION_LINE = /^[A-Za-z_][\w.]*(?::\s.*|:)?\s*$/
const ERROR_WORDS = /\b(?:error|exception|fatal|panic|abort(?:ed)?|fail(?:ed|ure)?|traceback)\b/i

/**
 * The rank's error as its lines say it: the last traceback's exception line, with the lines after it (a
 * message may run over several); else its last line that reads like an error. Undefined: none.
 */
export const errorOf = (lines: ReadonlyArray<string>): { readonly line: string; readonly block: ReadonlyArray<string> } | undefined => {
  const traceback = lines.findLastIndex((line) => TRACEBACK.test(line))
  if (traceback !== -1) {
    // Frames and their source lines are indented; the exception's line is the first after them that is not.
    const exception = lines.findIndex((line, at) => at > traceback && EXCEPTION_LINE.test(line))
    if (exception !== -1) return { line: lines[exception]!.trimEnd(), block: lines.slice(exception) }
  }
  const said = lines.findLast((line) => ERROR_WORDS.test(line))?.trim()
  return said === undefined ? undefined : { line: said, block: [said] }
}

/** The text with what differs between two ranks meeting one bug taken out: addresses, then every number. */
export const normalized = (text: string): string =>
  // One pass: an address's own digits must not be read as a number after it became `0x#`.
  text.trim().replace(/(0x[0-9a-f]+)|\d+/gi, (_, address: string | undefined) => (address === undefined ? "#" : "0x#")).replace(/\s+/g, " ")

/** The death's signature: its status and its error, or its status alone when it said none. */
export const signatureOf = (report: FailureReport): Signature => {
  const status = report.code === undefined ? "crash" : `status ${report.code}`
  const said = report.error ?? errorOf(report.lines ?? [])?.line ?? report.detail
  if (said === undefined || said.trim().length === 0) return { text: report.code === undefined ? "a crash" : `exit status ${report.code}`, key: status }
  return { text: said.trim(), key: `${status}|${normalized(said)}` }
}

/**
 * The errors a rank meets when a peer of its group is gone, whatever the rank's own health: torch's gloo
 * when the peer's socket closes, NCCL when a remote rank failed, and the cohort client's own exception
 * for a member lost during a collective.
 */
export const peerLossSignatures: ReadonlyArray<{ readonly name: string; readonly pattern: RegExp }> = [
  { name: "gloo: connection closed by peer", pattern: /Connection closed by peer/i },
  { name: "gloo: connection reset by peer", pattern: /Connection reset by peer/i },
  { name: "NCCL: remote error", pattern: /ncclRemoteError|remote process exited or there was a network error/i },
  { name: "cohort: a member was lost", pattern: /\bcohort\.MemberLost\b/ }
]

/**
 * The peer-loss signature the death carries, by name, if any: searched in what it said it died of (an
 * entry rank's error, else its last traceback's exception and the lines after it, else its last error
 * line), never in lines it printed before (a warning about a peer long since back says nothing).
 */
export const peerLossOf = (report: FailureReport): string | undefined => {
  const said = report.error !== undefined ? [report.error] : errorOf(report.lines ?? [])?.block ?? []
  return peerLossSignatures.find(({ pattern }) => said.some((line) => pattern.test(line)))?.name
}
