/**
 * The run's verdict: what the launcher prints last and what its exit status says.
 *
 * The rules, in order (first match wins):
 * 1. a coordinator that failed while the cohort formed is the root cause;
 * 2. else a fatal child exit (kill-all), an escalation or an abort is;
 * 3. else every rank lost → failed;
 * 4. else dead ≥ the max_failure limit → failed;
 * 5. else some deaths under the limit → completed, DEGRADED;
 * 6. else non-zero exits only after the run drained → completed, tolerated.
 */
import * as Data from "effect/Data"
import { exitStatusFor, type StopSignal } from "../StopRequests.ts"

export type FailureKind =
  | "join"
  | "coordinator"
  | "child-failed"
  | "restart-intensity"
  | "aborted"
  | "all-ranks-lost"
  | "max-failure"
  | "internal"

export type Verdict = Data.TaggedEnum<{
  Completed: {
    /** Ranks lost along the way and tolerated by elastic membership. */
    readonly dead: number
    readonly world: number
    /** Abnormal exits in the teardown window, after the run drained. */
    readonly tolerated: number
  }
  Failed: {
    readonly kind: FailureKind
    readonly message: string
    /** An abort asked by a signal: the exit status is 128 + its number, as shells and schedulers expect. */
    readonly signal?: StopSignal | undefined
  }
}>

export const Verdict = Data.taggedEnum<Verdict>()

/**
 * The launcher's exit status for a verdict: 0 for any completion, 1 for failure; an abort is 128 + the
 * signal that asked for it (129 SIGHUP, 130 SIGINT, 143 SIGTERM), and 130 when code asked.
 */
export const exitCode = (verdict: Verdict): number =>
  verdict._tag === "Completed" ? 0 : verdict.kind !== "aborted" ? 1 : verdict.signal === undefined ? 130 : exitStatusFor(verdict.signal)

/** A rank lost along the way, and why: "rank 2 exited with status 3". */
export interface Loss {
  readonly ranks: ReadonlyArray<number>
  readonly cause: string
}

/**
 * The one line a person reads at the end of a run (after `cohort: `):
 * `run completed`, `run completed DEGRADED (d of w ranks lost: …)` or
 * `run failed: <root cause>`.
 */
export const describeVerdict = (verdict: Verdict, losses: ReadonlyArray<Loss> = []): string =>
  Verdict.$match(verdict, {
    Failed: ({ message }) => `run failed: ${message}`,
    Completed: ({ dead, tolerated, world }) => {
      if (dead > 0) {
        const why = losses.length === 0 ? "" : `: ${losses.map((loss) => loss.cause).join("; ")}`
        return `run completed DEGRADED (${dead} of ${world} ranks lost${why})`
      }
      if (tolerated > 0) {
        return `run completed (${tolerated} non-zero exit(s) after the run drained were tolerated)`
      }
      return "run completed"
    }
  })
