/**
 * Text a peer sent, made safe to print: what reaches a terminal or a log
 * from the network must not move the cursor, recolour, clear lines or fake
 * a verdict. Control characters (C0, DEL, C1) and the bidirectional
 * overrides become visible `\xNN` / `\uNNNN` escapes, and the text is cut to
 * a length, so a peer's string is read, never obeyed.
 *
 * Host names get a charset and a length of their own (`isHostName`): they
 * are keys, shown everywhere (prefixes, tables, the live page).
 */

// C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates.
const unsafe = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g

/** `text` with every unsafe character escaped, cut to `max` characters (then "…"). */
export const printable = (text: string, max = 128): string => {
  const escaped = text.replace(unsafe, (char) => {
    const code = char.charCodeAt(0)
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`
  })
  return escaped.length > max ? `${escaped.slice(0, max)}…` : escaped
}

/** A host name as cohort accepts one: 1 to 253 letters, digits, '.', '-', '_' or ':' (IPv6), starting with a letter or digit. */
export const isHostName = (host: string): boolean => /^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$/.test(host)

/** The rule, in words, for an error message. */
export const hostNameRule = "1 to 253 letters, digits, '.', '-', '_' or ':', starting with a letter or digit"
