/**
 * Text a peer sent, made safe to print: what reaches a terminal or a log
 * from the network must not move the cursor, recolour, clear lines or fake
 * a verdict. Control characters (C0, DEL, C1) and the bidirectional
 * overrides become visible `\xNN` / `\uNNNN` escapes, and the text is cut to
 * a length, so a peer's string is read, never obeyed. The lines ranks print
 * get the same escapes, tab excepted and uncut (`printableLine`).
 *
 * Host names get a charset and a length of their own (`isHostName`): they
 * are keys, shown everywhere (prefixes, tables, the live page).
 */

// C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates.
const unsafe = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g
// The same but tab: indentation in tracebacks and tables, which moves nothing but the cursor along its line.
const unsafeInLine = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g

const escape = (char: string): string => {
  const code = char.charCodeAt(0)
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`
}

/** `text` with every unsafe character escaped, cut to `max` characters (then "…"). */
export const printable = (text: string, max = 128): string => {
  const escaped = text.replace(unsafe, escape)
  return escaped.length > max ? `${escaped.slice(0, max)}…` : escaped
}

/**
 * A line a rank, a relay or an agent printed, on its way to the launcher's terminal and log files: escaped
 * as `printable` escapes, but tab kept and nothing cut (a long line is still the rank's line). A rank's output
 * is a peer's text too: an `ESC[2J`, a window title, a `\r` that hides the line's start or a right-to-left
 * override would act on the operator's terminal. The escapes are themselves printable, so escaping twice
 * changes nothing.
 */
export const printableLine = (line: string): string => line.replace(unsafeInLine, escape)

/** A host name as cohort accepts one: 1 to 253 letters, digits, '.', '-', '_' or ':' (IPv6), starting with a letter or digit. */
export const isHostName = (host: string): boolean => /^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$/.test(host)

/** The rule, in words, for an error message. */
export const hostNameRule = "1 to 253 letters, digits, '.', '-', '_' or ':', starting with a letter or digit"
