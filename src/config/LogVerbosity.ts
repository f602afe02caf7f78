/**
 * How much cohort says: `COHORT_LOG_LEVEL` (`trace`, `debug`, `info`,
 * `warning` or `error`; `-v`/`--verbose` on the launcher means `debug`;
 * `trace` is `debug` and, in the Python client, every step's line). The launcher's
 * value travels to every process of the run (agents in-process, over ssh,
 * relays and ranks), as flodl's FLODL_VERBOSITY does, so one knob turns the
 * whole run up. A value that is not a level is an error naming the variable,
 * never a silent default.
 */
import * as Data from "effect/Data"
import * as LogLevel from "effect/LogLevel"

export const LOG_LEVEL_VARIABLE = "COHORT_LOG_LEVEL"

const levels: Record<string, LogLevel.LogLevel> = {
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  warn: LogLevel.Warning,
  error: LogLevel.Error
}

export class LogLevelError extends Data.TaggedError("LogLevelError")<{ readonly value: string }> {
  override get message(): string {
    return `${LOG_LEVEL_VARIABLE} must be one of trace, debug, info, warning or error, got "${this.value}"`
  }
}

/** The level the environment asks for; undefined when it asks for none (each process keeps its own default). */
export const requestedLogLevel = (env: Readonly<Record<string, string | undefined>> = process.env): LogLevel.LogLevel | undefined => {
  const raw = env[LOG_LEVEL_VARIABLE]
  if (raw === undefined || raw.trim() === "") return undefined
  const level = levels[raw.trim().toLowerCase()]
  if (level === undefined) throw new LogLevelError({ value: raw })
  return level
}

/** The requested level, or `fallback` when none is asked for or the value is wrong (which the entry points refuse, naming it). */
export const requestedLogLevelOr = (fallback: LogLevel.LogLevel, env: Readonly<Record<string, string | undefined>> = process.env): LogLevel.LogLevel => {
  try {
    return requestedLogLevel(env) ?? fallback
  } catch {
    return fallback
  }
}

/**
 * A relay's level: its informational lines are noise on the run's terminal, so it says warnings and errors
 * unless the run is turned up to debug, or down to errors only.
 */
export const relayLogLevel = (requested: LogLevel.LogLevel | undefined): LogLevel.LogLevel =>
  requested !== undefined && (LogLevel.lessThan(requested, LogLevel.Info) || LogLevel.greaterThan(requested, LogLevel.Warning)) ? requested : LogLevel.Warning
