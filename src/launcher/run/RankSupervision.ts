/**
 * Rank supervision as the other phases see it: the Supervisor over the
 * world's ranks, and what it is asked to do beyond its children. Kept apart
 * from the phase that makes it (SuperviseRanks), which needs the listeners,
 * the training plane and the run's stops: those need only this, so none of
 * them imports another in a circle.
 */
import type { Cause } from "../../kernel/policy/FailureRules.ts"
import type * as Effect from "effect/Effect"
import type { StopRequest } from "../../kernel/StopRequests.ts"
import type * as Supervisor from "../../kernel/Supervisor.ts"

export interface RankSupervision {
  readonly supervisor: Supervisor.Supervisor
  /**
   * Ranks given up on while their processes may live (silent, or absent from a rendezvous): counted lost,
   * killed, and gone from membership. `cause` is for the failure rules (silence, an absent NCCL member),
   * `diedAt` (rank by rank) their deaths' moments, for the recovery figures.
   */
  readonly giveUp: (ranks: ReadonlyArray<number>, reason: string, cause: Cause, diedAt: ReadonlyArray<number>, fatal?: boolean) => Effect.Effect<void>
  /** Every rank has run user code: the policy after formation is in force from now on. */
  readonly cohortFormed: Effect.Effect<void>
  /** Every epoch is done: the ranks now leave on their own. */
  readonly drained: Effect.Effect<void>
  /**
   * Stop the run in order (Ctrl-C, SIGTERM, the caller's interrupt): the coordinator hears it first, so a run
   * mid-epoch asks the ranks for their state before the supervisor's SIGTERM reaches them.
   */
  readonly abort: (request: StopRequest) => Effect.Effect<void>
}
