/**
 * The launcher's own lines on stderr: `cohort: …`, one line per message,
 * no timestamps or fibers (the terminal is for people; `--events` files,
 * in a later issue, are for machines).
 */
import * as Cause from "effect/Cause"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { AGENT_ANNOTATION } from "../agent/AgentAnnotation.ts"
import { requestedLogLevelOr } from "../config/LogVerbosity.ts"

const render = (message: unknown): string =>
  Array.isArray(message) ? message.map(render).join(" ") : typeof message === "string" ? message : String(message)

const toStderr = (text: string) => void process.stderr.write(text)

export const lineLogger = (prefix: string, write: (text: string) => void = toStderr) => Logger.make(({ annotations, cause, logLevel, message }) => {
  const level = LogLevel.greaterThanEqual(logLevel, LogLevel.Error)
    ? "error: "
    : LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)
    ? "warning: "
    : ""
  const detail = Cause.isEmpty(cause) ? "" : `\n${Cause.pretty(cause)}`
  const agent = HashMap.get(annotations, AGENT_ANNOTATION)
  const said = Option.isSome(agent) && typeof agent.value === "string" ? `cohort agent ${agent.value}: ` : prefix
  write(`${said}${level}${render(message)}${detail}\n`)
})

/**
 * Replace Effect's default logger with `lineLogger`, showing `minimum` and
 * above (by default what COHORT_LOG_LEVEL asks for, else info). A relay or rank logs with no prefix of its own: its agent prefixes
 * every line it forwards.
 */
export const layer = (minimum: LogLevel.LogLevel = requestedLogLevelOr(LogLevel.Info), prefix = "cohort: ", write: (text: string) => void = toStderr) =>
  Layer.merge(Logger.replace(Logger.defaultLogger, lineLogger(prefix, write)), Logger.minimumLogLevel(minimum))
