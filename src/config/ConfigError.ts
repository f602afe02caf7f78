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
    const where = this.line === undefined ? "" : ` (line ${this.line}, col ${this.col})`
    const file = this.file === undefined ? "" : `${this.file}: `
    return `${file}${this.path || "(top level)"}${where}: ${this.problem}`
  }
}
