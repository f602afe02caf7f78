/**
 * How a supervised child ended, in the terms the policy needs.
 *
 * An OS process either exits with a code or is ended by a signal; an actor
 * (or a process that could not even be started) crashes with a description of
 * its cause. Only `Exited { code: 0 }` is a clean exit.
 */
import * as Data from "effect/Data"
import type { Cause } from "./FailureRules.ts"

/** `cause`, where the one who saw the exit knows more than its form says (a lost host, an exception). */
export type ChildExit = Data.TaggedEnum<{
  /** `error`: what an `entry:` rank's code threw, as it said before exiting ("TypeError: …"). */
  Exited: { readonly code: number; readonly cause?: Cause | undefined; readonly error?: string | undefined }
  Signaled: { readonly signal: string; readonly cause?: Cause | undefined }
  Crashed: { readonly detail: string; readonly cause?: Cause | undefined }
}>

export const ChildExit = Data.taggedEnum<ChildExit>()

export const isClean = (exit: ChildExit): boolean => exit._tag === "Exited" && exit.code === 0

/** "status 1", "signal SIGKILL", "crash: ..." — short enough for a verdict line. */
export const describe = (exit: ChildExit): string =>
  ChildExit.$match(exit, {
    Exited: ({ code, error }) => (error === undefined ? `status ${code}` : `status ${code} (${error})`),
    Signaled: ({ cause, signal }) => (cause === "oom" ? `signal ${signal} (the OOM killer)` : `signal ${signal}`),
    Crashed: ({ detail }) => `crash: ${detail}`
  })
