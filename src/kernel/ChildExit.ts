/**
 * How a supervised child ended, in the terms the policy needs.
 *
 * An OS process either exits with a code or is ended by a signal; an actor
 * (or a process that could not even be started) crashes with a description of
 * its cause. Only `Exited { code: 0 }` is a clean exit.
 */
import * as Data from "effect/Data"
import type { Cause } from "./policy/FailureRules.ts"

/**
 * `cause`, where the one who saw the exit knows more than its form says (a lost host, an exception);
 * `lines`, a rank's last lines of output, for the failure rules' `log`; `stderr`, those of them it wrote on
 * stderr, for its failure signature; `at`, when it ended as whoever saw it end says (a remote rank's agent),
 * for the time cohort took to know.
 */
export type ChildExit = Data.TaggedEnum<{
  /** `error`: what an `entry:` rank's code threw, as it said before exiting ("TypeError: …"). */
  Exited: {
    readonly code: number
    readonly cause?: Cause | undefined
    readonly error?: string | undefined
    readonly lines?: ReadonlyArray<string> | undefined
    readonly stderr?: ReadonlyArray<string> | undefined
    readonly at?: number | undefined
  }
  Signaled: { readonly signal: string; readonly cause?: Cause | undefined; readonly lines?: ReadonlyArray<string> | undefined; readonly stderr?: ReadonlyArray<string> | undefined; readonly at?: number | undefined }
  Crashed: { readonly detail: string; readonly cause?: Cause | undefined; readonly lines?: ReadonlyArray<string> | undefined; readonly stderr?: ReadonlyArray<string> | undefined; readonly at?: number | undefined }
}>

export const ChildExit = Data.taggedEnum<ChildExit>()

/** A death's cause as the failure rules name it: what the exit's reporter said, else its form. */
export const causeOf = (exit: ChildExit): Cause => exit.cause ?? (exit._tag === "Signaled" ? "signal" : "exit")

/** A status of 0 with nothing said against it (a rank stopped for its relay's loss exits 0, and is lost). */
export const isClean = (exit: ChildExit): boolean => exit._tag === "Exited" && exit.code === 0 && exit.cause === undefined

/** "status 1", "signal SIGKILL", "crash: ..." — short enough for a verdict line. */
export const describe = (exit: ChildExit): string =>
  ChildExit.$match(exit, {
    Exited: ({ cause, code, error }) =>
      error !== undefined ? `status ${code} (${error})` : cause === "relay_lost" ? `status ${code} (its host's relay was lost)` : `status ${code}`,
    Signaled: ({ cause, signal }) =>
      cause === "oom" ? `signal ${signal} (the OOM killer)` : cause === "relay_lost" ? `signal ${signal} (its host's relay was lost)` : `signal ${signal}`,
    Crashed: ({ detail }) => `crash: ${detail}`
  })
