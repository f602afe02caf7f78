/**
 * What an `entry:` job's default export receives: who this rank is, where it
 * runs, and a signal that fires when cohort shuts the rank down.
 *
 * ```ts
 * import type { RankContext } from "cohort"
 * export default async (ctx: RankContext) => { … }
 * ```
 * The coordinator (epochs, shards) and the data plane join this context in
 * the training issue.
 */
export type RankDevice = { readonly kind: "cpu"; readonly slot: number } | { readonly kind: "gpu"; readonly index: number }

export interface RankContext {
  readonly run: string
  readonly rank: number
  readonly worldSize: number
  readonly localRank: number
  readonly localWorldSize: number
  /** The host's position among the hosts (torchrun's GROUP_RANK). */
  readonly groupRank: number
  readonly host: string
  readonly device: RankDevice
  /** The job's `args:`. */
  readonly args: ReadonlyArray<string>
  readonly backend: string
  /** How many times this rank has been restarted (0 on the first start). */
  readonly restartCount: number
  /**
   * Fires when cohort stops the rank (SIGTERM: the run is ending or failing).
   * Reading it means your code handles the shutdown: the rank then exits when
   * your function returns (or when cohort kills it after the grace period).
   * Code that never reads it is ended at once.
   */
  readonly signal: AbortSignal
}
