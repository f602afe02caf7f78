/**
 * A mistake in a configuration file, said the way a person can act on it:
 * where (the YAML path, line and column), what was expected, what was found.
 */
import * as Data from "effect/Data"

export class ConfigError extends Data.TaggedError("ConfigError")<{
  /** The file, when there is one. */
  readonly file?: string | undefined
  /** Dotted YAML path, e.g. `failure_policy.after_formation.elastic.max_failure`. */
  readonly path: string
  readonly line?: number | undefined
  readonly col?: number | undefined
  /** The whole complaint after the location, e.g. `expected a duration like "5s", got "soon"`. */
  readonly problem: string
}> {
  override get message(): string {
    // Both or neither: Bun puts a \`line\` of its own (where the Error was made) on every Error.
    const where = typeof this.line === "number" && typeof this.col === "number" ? ` (line ${this.line}, col ${this.col})` : ""
    const file = this.file === undefined ? "" : `${this.file}: `
    // A problem with the file itself (it cannot be read) has no place inside it.
    const place = this.path === "" && where === "" ? "" : `${this.path || "(top level)"}${where}: `
    return `${file}${place}${this.problem}`
  }
}
