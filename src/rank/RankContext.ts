/**
 * What an `entry:` job's default export receives: who this rank is, where it
 * runs, and a signal that fires when cohort shuts the rank down.
 *
 * ```ts
 * import type { RankContext } from "cohort"
 * export default async (ctx: RankContext) => { … }
 * ```
 * For the CPU backends the context also carries the data plane (collectives
 * through the host's relay, over shared memory) and the coordinator's epoch
 * plans, progress and consensus checkpoints.
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
  /**
   * Present when this generation is generation `generation` less the global ranks `left`, every member
   * the same process as then: its members may shrink that generation's communicator (ncclCommShrink)
   * instead of building one from `id` (`Rendezvous.communicator` does, where NCCL is 2.27 or later).
   */
  readonly shrinkOf?: { readonly generation: number; readonly left: ReadonlyArray<number> } | undefined
}

/**
 * The NCCL rendezvous of a `backend: nccl` job. `next()` waits for the next
 * generation this rank belongs to; `onReform` is told when the current one
 * ends (a member died or came back): abort its communicator, then call
 * `next()` again and carry on with the survivors.
 */
/**
 * A communicator of one generation, built by cohort; aborted by cohort when the generation dissolves (or,
 * where NCCL can shrink, kept until the next generation shrinks it or it is aborted).
 */
export interface RankCommunicator {
  readonly membership: NcclMembership
  /** How cohort made it: ncclCommInitRank from the generation's id, or ncclCommShrink of the last one's. */
  readonly formedBy: "init" | "shrink"
  /** The native communicator (see `src/native/Native.ts`): all-reduce on device buffers, as Effects. */
  readonly communicator: import("../native/Native.ts").Communicator
  /** NCCL's asynchronous error of this communicator (0: none): poll it, a dead peer shows here, not as a hang. */
  readonly asyncError: () => Promise<number>
  /** Destroy it (the rank is done with this generation). */
  readonly close: () => Promise<void>
}

export interface Rendezvous {
  readonly next: () => Promise<NcclMembership>
  /**
   * The next generation with this rank's NCCL communicator already built on
   * its device: ncclCommInitRank from the generation's id, or, when the
   * generation is the last one less the dead (`shrinkOf`) and NCCL is 2.27
   * or later, ncclCommShrink of the last one's communicator (which cohort
   * then releases: destroyed, or aborted after an NCCL_SHRINK_ABORT shrink
   * from 2.31.2). When the generation dissolves, cohort aborts its
   * communicator before telling `onReform`, except where it can shrink: then
   * it keeps it until the next generation says whether to shrink it.
   */
  readonly communicator: () => Promise<RankCommunicator>
  readonly onReform: (listener: (generation: number, reason: string) => void) => void
  /** The first asynchronous NCCL error of a communicator cohort built and has not aborted (0: none). */
  readonly pendingError: () => Promise<number>
  readonly close: () => Promise<void>
}

/** Samples `start` (inclusive) to `end` (exclusive) of the dataset. */
export interface SampleRange {
  readonly start: number
  readonly end: number
}

/**
 * One epoch of this rank's work: the sample ranges the coordinator assigned.
 * The list can grow mid-epoch: when a rank dies, its unprocessed samples are
 * handed to the survivors.
 */
export interface EpochPlan {
  readonly epoch: number
  /** The ranges assigned so far, in the order `batches` hands them out. */
  readonly ranges: ReadonlyArray<SampleRange>
  /**
   * This rank's sample indices in batches of up to `size`, in plan order.
   * When the assigned ranges are used up it waits for redistributed work or
   * for the epoch's end (every sample of the epoch processed somewhere), and
   * then finishes. Report each batch with `ctx.progress` once its step
   * (collectives included) is done.
   */
  readonly batches: (size: number) => AsyncIterable<ReadonlyArray<number>>
}

export type ReduceOp = "sum" | "avg"

export interface AllreduceOptions {
  /** `avg` (default): the weighted mean over the contributing ranks; `sum`: their sum. */
  readonly op?: ReduceOp
  /** This rank's weight in `avg` (default 1): e.g. the samples it processed for this step. */
  readonly weight?: number
}

export interface Checkpoint {
  /**
   * Offer the run's state (JSON-serialisable; Float32Array and Float64Array
   * are kept) as the consensus checkpoint for the epoch just finished: call
   * it on every rank, once per epoch, after the epoch's batches (before any
   * epoch it throws). The coordinator writes the state a majority of the
   * epoch's members offered, byte for byte, atomically (temporary file, then
   * rename) to `job.checkpoint`; ranks that step apart (`cpu_cadence`,
   * `cpu_async`) average their state first, or they agree on none.
   */
  readonly save: (state: unknown) => Promise<void>
  /**
   * How to read the run's state between two steps (the same shape `save` takes). Under `cpu_sync`, when the
   * run stops mid-epoch (max_failure crossed), cohort calls it at each surviving rank's next step boundary and
   * saves it with the samples done so far, so that `--resume` trains only the rest of that epoch instead of
   * all of it. Without it, a stop keeps the last epoch's checkpoint and `--resume` redoes the epoch.
   */
  readonly provide: (read: () => unknown) => void
  /**
   * The state to start from, or undefined: the checkpoint a `--resume` run
   * resumed from (mid-epoch when it was taken through `provide`: the first
   * plan then holds only what is left of that epoch), or, for a rank
   * restarted mid-run, the latest consensus.
   */
  readonly load: () => Promise<unknown>
}

/** A collective or coordinator call that cannot complete. */
export class RankCallError extends Error {
  override readonly name = "RankCallError"
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
  /** `job.dataset_size`: the samples one epoch covers. */
  readonly datasetSize: number
  /** `job.epochs`: how many epochs the run trains. */
  readonly epochCount: number
  /** `job.cadence`: steps between averages under `cpu_cadence` (1 under `cpu_sync`). */
  readonly cadence: number
  /**
   * Reduce `buffer` in place across every active rank (CPU backends). A rank
   * waiting for work in `batches` is not active; a dead rank leaves at once.
   * Every rank of a round must pass the same length.
   */
  readonly allreduce: (buffer: Float32Array, options?: AllreduceOptions) => Promise<void>
  /**
   * Synchronise model parameters in place, the way the backend says:
   * `cpu_cadence` averages every active rank's parameters (call it every
   * `ctx.cadence` steps), through the outer optimizer when
   * `job.outer_optimizer` is set; `cpu_async` exchanges this rank's
   * parameters with the controller's centre variable (elastic averaging)
   * without waiting for the others; `cpu_sync` averages like `cadence`.
   */
  readonly sync: (params: Float32Array) => Promise<void>
  /**
   * A zeroed Float32Array in shared memory, for buffers you reduce often
   * (gradients): collectives on it, or on a view of it, are done where it
   * lies, without the two copies an ordinary array costs.
   */
  readonly tensor: (length: number) => Float32Array
  /** Wait until every active rank has called `barrier`. */
  readonly barrier: () => Promise<void>
  /** Overwrite `buffer` on every active rank with rank `root`'s. */
  readonly broadcast: (buffer: Float32Array, root: number) => Promise<void>
  /** The epochs of the run, from the coordinator: starts after the resumed checkpoint's epoch (or inside it, for a mid-epoch one). */
  readonly epochs: () => AsyncIterable<EpochPlan>
  /** `samples` more samples of the current plan are done (in plan order); `metrics` are shown in progress lines. */
  readonly progress: (samples: number, metrics?: Readonly<Record<string, number>>) => void
  readonly checkpoint: Checkpoint
}
