/**
 * `ssh:` of a worker: how the launcher reaches it (the target, user, port,
 * key) and ssh's own options, in the file's order.
 *
 * ```yaml
 * ssh: { target: gpu-a.example, user: train, port: 2222, identity_file: ~/.ssh/cohort, options: ["StrictHostKeyChecking=no", "-4"] }
 * ```
 */
import * as Arr from "effect/Array"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { expectedAt, expecting, rangeOf } from "./reading/Expected.ts"
import { keyOr, optionalKey } from "./reading/Mapping.ts"

export interface SshOptions {
  readonly target: string | undefined
  readonly user: string | undefined
  readonly port: number | undefined
  readonly identityFile: string | undefined
  /**
   * ssh's own argv words, in the file's order: an entry written `Key=Value` (flodl's form, and ssh_config's)
   * or `Key Value` (ssh_config's other form) is `-o Key=Value` / `-o "Key Value"` here, one argv word after `-o`;
   * a flag (`-o`, `-oKey=Value`, `-4`) and the word after a flag that takes one are as written.
   */
  readonly options: ReadonlyArray<string>
}

/** ssh's flags that take the next word as their value (OpenSSH's ssh(1)). */
const sshFlagsWithValue = new Set(["-B", "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-P", "-p", "-Q", "-R", "-S", "-W", "-w"])

const takesValue = (word: unknown): word is string => typeof word === "string" && sshFlagsWithValue.has(word)

/**
 * An ssh_config setting: a keyword, then `=` (spaces around it allowed) or spaces alone, then a value. Both are
 * ssh_config's own syntax and `ssh -o`'s ("ProxyJump bastion" as much as "ProxyJump=bastion"). Whether the
 * keyword is one ssh knows is ssh's to say (it names the bad option and exits): the list grows with each release.
 */
const SSH_SETTING = /^\s*[A-Za-z][A-Za-z0-9]*(?:\s*=\s*|\s+)\S/

const sshOptionWhat = `an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value`

/** A message of this decoder's own about the entry at `index`. */
const saidAt = (ast: Schema.Schema.Any["ast"], index: number, entry: unknown, message: string): ParseResult.ParseIssue =>
  new ParseResult.Pointer(index, entry, new ParseResult.Type(ast, entry, message))

/**
 * `options` as ssh's argv words: settings become `-o` options, flags and their values stay as written.
 * Whether an entry is a flag's value depends on the entry before it, so the list is read as one, in order;
 * every entry that is no option is said at once. Written back, the words are options themselves.
 */
const OptionWords = Schema.transformOrFail(
  Schema.Array(Schema.Unknown).pipe(expecting(`a list of ssh options, like ["StrictHostKeyChecking=no"]`)),
  Schema.Array(Schema.String),
  {
    strict: true,
    decode: (entries, _, ast) => {
      const words: Array<string> = []
      const issues: Array<ParseResult.ParseIssue> = []
      entries.forEach((entry, index) => {
        if (typeof entry !== "string" || entry === "") issues.push(expectedAt(sshOptionWhat, [index]))
        else if (takesValue(entries[index - 1]) || entry.startsWith("-")) words.push(entry)
        else if (SSH_SETTING.test(entry)) words.push("-o", entry.trim())
        // As written, not as JSON quotes it: the entry is shown the way the user typed it.
        else issues.push(saidAt(ast, index, entry, `expected ${sshOptionWhat}, got "${entry}"`))
      })
      const last = entries.at(-1)
      if (takesValue(last)) {
        issues.push(saidAt(ast, entries.length - 1, last, `ssh's ${last} takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`))
      }
      return Arr.isNonEmptyArray(issues) ? ParseResult.fail(new ParseResult.Composite(ast, entries, issues)) : ParseResult.succeed(words)
    },
    encode: ParseResult.succeed
  }
)

const text = (what: string) => Schema.NonEmptyString.pipe(expecting(what))

const SshPort = Schema.Int.pipe(Schema.between(1, 65_535))

/** The `ssh` mapping as the file writes it; `sshOptionsOf` makes it the launcher's `SshOptions`. */
export const SshKeys = Schema.Struct({
  target: optionalKey(text("a host name or address")),
  user: optionalKey(text("a user name")),
  port: optionalKey(SshPort.pipe(expecting(`an ssh port from ${rangeOf(SshPort).min} to ${rangeOf(SshPort).max}`))),
  identity_file: optionalKey(text("a path to a private key")),
  options: keyOr(OptionWords, [])
})

export const sshOptionsOf = (written: typeof SshKeys.Type): SshOptions => ({
  target: written.target,
  user: written.user,
  port: written.port,
  identityFile: written.identity_file,
  options: written.options
})
