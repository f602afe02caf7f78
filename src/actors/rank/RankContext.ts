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

/** One generation of the NCCL membership: build a communicator with `id`, `rank` and `worldSize`. */
export interface NcclMembership {
  readonly generation: number
  /** The 128-byte ncclUniqueId shared by every member. */
  readonly id: Uint8Array
  /** The members' global ranks, ascending. */
  readonly members: ReadonlyArray<number>
  /** This rank's NCCL rank: its position in `members`. */
  readonly rank: number
  readonly worldSize: number
}

/**
 * The NCCL rendezvous of a `backend: nccl` job. `next()` waits for the next
 * generation this rank belongs to; `onReform` is told when the current one
 * ends (a member died or came back): abort its communicator, then call
 * `next()` again and carry on with the survivors.
 */
/** A communicator of one generation, built by cohort; aborted by cohort when the generation dissolves. */
export interface RankCommunicator {
  readonly membership: NcclMembership
  /** The native communicator (see `src/native/Native.ts`): all-reduce on device buffers, as Effects. */
  readonly communicator: import("../../native/Native.ts").Communicator
  /** NCCL's asynchronous error of this communicator (0: none): poll it, a dead peer shows here, not as a hang. */
  readonly asyncError: () => Promise<number>
  /** Destroy it (the rank is done with this generation). */
  readonly close: () => Promise<void>
}

export interface Rendezvous {
  readonly next: () => Promise<NcclMembership>
  /**
   * The next generation with this rank's NCCL communicator already built on
   * its device (ncclCommInitRank); when the generation dissolves, cohort
   * aborts it before telling `onReform`.
   */
  readonly communicator: () => Promise<RankCommunicator>
  readonly onReform: (listener: (generation: number, reason: string) => void) => void
  readonly close: () => Promise<void>
}

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
  /** Present for `backend: nccl` jobs. */
  readonly rendezvous?: Rendezvous | undefined
}
