/**
 * The training half of a rank's context: collectives through the relay, the
 * coordinator's epoch plans, progress and consensus checkpoints.
 *
 * Plans arrive as orders (`EpochStart`, `EpochExtend`, `EpochEnd`,
 * `TrainingDone`); `epochs()` hands them to user code one epoch at a time,
 * and a plan's `batches` walks its ranges, waiting (and leaving the
 * reduction barrier) when they are used up until more work or the epoch's
 * end arrives.
 *
 * Checkpoints: every rank offers its state after each epoch
 * (`ctx.checkpoint.save`), and the coordinator keeps the one a majority of the
 * epoch's members offered (see CheckpointBallot): ranks that hold one model
 * offer equal text.
 *
 * A `cpu_sync` run that stops mid-epoch keeps what was done: at the next step
 * boundary after the coordinator asks (`OfferCut`) or the rank is stopped,
 * the plan offers the job's state now (`ctx.checkpoint.provide`) with the
 * samples it has learnt from and how many rounds it took part in
 * (`CutOffer`), and hands out no more batches.
 *
 * Effect-free on purpose: it is on every rank's start-up path.
 */
import { lengthOf, take } from "../launcher/training/EpochLedger.ts"
import { bucketOf, emptyCounts } from "../wire/LatencyBuckets.ts"
import { parseState, stringifyState } from "../wire/StateJson.ts"
import type { AllreduceOptions, EpochPlan, RankContext, SampleRange } from "./RankContext.ts"
import { RankCallError } from "./RankContext.ts"
import type { Order, RelayClient, RelayOp } from "./RelayClient.ts"
import { boundedMetrics, droppedLine } from "../wire/ReportedMetrics.ts"
import type { SharedTensors } from "./SharedTensors.ts"

type TrainingContext = Pick<RankContext, "allreduce" | "sync" | "barrier" | "broadcast" | "tensor" | "epochs" | "progress" | "checkpoint">

interface EpochState {
  readonly epoch: number
  readonly ranges: Array<SampleRange>
  ended: boolean
  done: number
  /** Reductions this rank finished in this epoch. */
  rounds: number
  /** It took part in every round of the epoch so far: it never left the barrier to wait for work. */
  steady: boolean
  /** Its cut was offered: it trains no further in this epoch. */
  offered: boolean
}

/** Something to wait on until the next order changes the state. */
class Signal {
  private waiters: Array<() => void> = []
  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve))
  }
  fire(): void {
    const waiters = this.waiters
    this.waiters = []
    for (const wake of waiters) wake()
  }
}


export interface Training {
  readonly context: TrainingContext
  readonly onOrder: (order: Order) => void
  /** The run stopped this rank: pending waits end with this reason. */
  readonly stop: (reason: string) => void
}

export const training = (
  client: Promise<RelayClient>,
  settings: { readonly datasetSize: number; readonly rank: number; readonly backend: string; readonly tensors: SharedTensors },
  abort: (reason: string) => void
): Training => {
  const { datasetSize, rank } = settings
  const epochs = new Map<number, EpochState>()
  const changed = new Signal()
  let welcome: { firstEpoch: number; checkpoint: string | undefined } | undefined
  let finished = false
  let stopped: string | undefined
  let current: EpochState | undefined
  const saved = new Map<number, Array<() => void>>()
  /** Epochs whose cut the coordinator asked for. */
  const cutAsked = new Set<number>()
  /** The coordinator's own `Stop`: it has settled the checkpoint already, so no cut is offered. */
  let stopOrdered = false
  /** The job's state now, between two steps (`ctx.checkpoint.provide`). */
  let snapshot: (() => unknown) | undefined

  const ensureLive = () => {
    if (stopped !== undefined) throw new RankCallError(`the run is stopping: ${stopped}`)
  }
  const until = async (ready: () => boolean) => {
    while (!ready()) {
      ensureLive()
      await changed.wait()
    }
    ensureLive()
  }

  const onOrder = (order: Order) => {
    switch (order._tag) {
      case "Welcome":
        welcome = { firstEpoch: order.firstEpoch as number, checkpoint: order.checkpoint as string | undefined }
        break
      case "EpochStart":
        epochs.set(order.epoch as number, {
          epoch: order.epoch as number,
          ranges: [...(order.ranges as Array<SampleRange>)],
          ended: false,
          done: 0,
          rounds: 0,
          steady: true,
          offered: false
        })
        break
      case "EpochExtend":
        epochs.get(order.epoch as number)?.ranges.push(...(order.ranges as Array<SampleRange>))
        break
      case "EpochEnd": {
        const state = epochs.get(order.epoch as number)
        if (state !== undefined) state.ended = true
        break
      }
      case "TrainingDone":
        finished = true
        break
      case "CheckpointSaved":
        for (const resolve of saved.get(order.epoch as number) ?? []) resolve()
        saved.delete(order.epoch as number)
        break
      case "OfferCut":
        cutAsked.add(order.epoch as number)
        break
      case "Stop":
        stopOrdered = true
        stop(String(order.reason))
        abort(String(order.reason))
        break
    }
    changed.fire()
  }

  const stop = (reason: string) => {
    stopped ??= reason
    changed.fire()
  }

  // A metric out of the bounds of what is shown (ReportedMetrics) is dropped, said once per name: a NaN would
  // travel as JSON's null, and the relay would drop the whole report, its samples with it.
  const warnedMetrics = new Set<string>()
  const shownMetrics = (metrics: Readonly<Record<string, number>>): Record<string, number> => {
    const { dropped, kept } = boundedMetrics(metrics)
    for (const each of dropped) {
      if (warnedMetrics.has(each.name) || warnedMetrics.size >= 64) continue
      warnedMetrics.add(each.name)
      console.error(`cohort rank: ${droppedLine(`ctx.progress() of rank ${rank}`, each)} (said once per name)`)
    }
    return kept
  }

  // Every reduction's latency, told with the next progress report (the launcher's /metrics histogram).
  let latency = emptyCounts()
  const reduce = async (buffer: Float32Array, op: RelayOp, weight: number) => {
    ensureLive()
    const relay = await client
    const started = performance.now()
    const during = current
    // Outside an epoch (before the first, after the last), a round belongs to the epoch the rank starts or last had.
    await relay.reduce(buffer, op, weight, during?.epoch ?? welcome?.firstEpoch ?? 0)
    if (during !== undefined) during.rounds += 1
    const seconds = (performance.now() - started) / 1000
    latency.counts[bucketOf(seconds)]! += 1
    latency.sum += seconds
  }

  /**
   * At a step boundary (every batch handed out so far is processed): offer the cut if it is wanted. Only
   * `cpu_sync` ranks hold one model between them at every step; a stop the coordinator ordered comes after its
   * decision, so it wants none. A rank stopped by its signal offers unasked: the signal and the ask travel
   * different ways, and the signal may come first. A rank whose reports lag its batches (a batch handed out and
   * not reported) is not steady: its state holds samples the coordinator does not know of.
   */
  const offerCut = (state: EpochState, handed: number): void => {
    if (settings.backend !== "cpu_sync" || state.offered || state.ended) return
    if (!cutAsked.has(state.epoch) && (stopped === undefined || stopOrdered)) return
    state.offered = true
    const text = snapshot === undefined ? undefined : stringifyState(snapshot())
    const offer = { _tag: "CutOffer", epoch: state.epoch, done: state.done, rounds: state.rounds, steady: state.steady && handed === state.done }
    void client.then((relay) => relay.report(text === undefined ? offer : { ...offer, state: text }))
  }

  const planOf = (state: EpochState): EpochPlan => {
    let handed = 0
    return {
      epoch: state.epoch,
      get ranges() {
        return state.ranges
      },
      batches: (size: number) => ({
        async *[Symbol.asyncIterator]() {
          if (!Number.isInteger(size) || size < 1) throw new RankCallError(`batches(size) needs a whole number ≥ 1, got ${size}`)
          let last = 0
          try {
            while (true) {
              offerCut(state, handed)
              // A stopped rank is handed nothing more: what it has reported is all it did.
              ensureLive()
              if (state.offered) {
                // Asked for its cut before its stop: out of the rounds (the others reach their own boundaries), waiting for the stop.
                ;(await client).idle(state.epoch)
                await until(() => false)
              }
              if (handed < lengthOf(state.ranges)) {
                const batch = take(state.ranges, handed, size)
                handed += batch.length
                last = batch.length
                yield batch
                continue
              }
              if (state.ended) return
              // Out of work: leave the reduction barrier until more work or the epoch's end (or a cut, or a stop).
              state.steady = false
              ;(await client).idle(state.epoch)
              while (!state.ended && handed >= lengthOf(state.ranges) && !cutAsked.has(state.epoch) && stopped === undefined) await changed.wait()
            }
          } finally {
            // The loop left early, at a batch just handed out: its stop (the signal seen, say) came between two steps.
            // That batch, unreported, counts as not done.
            offerCut(state, state.done === handed ? handed : handed - last)
          }
        }
      })
    }
  }

  const context: TrainingContext = {
    allreduce: (buffer: Float32Array, options: AllreduceOptions = {}) => {
      const weight = options.weight ?? 1
      if (!Number.isFinite(weight) || weight < 0) return Promise.reject(new RankCallError(`allreduce weight must be a finite number ≥ 0, got ${weight}`))
      return reduce(buffer, options.op ?? "avg", weight)
    },
    sync: (params: Float32Array) => reduce(params, settings.backend === "cpu_async" ? "elastic" : "sync", 1),
    barrier: () => reduce(new Float32Array(0), "sum", 1),
    tensor: (length: number) => settings.tensors.tensor(length),
    broadcast: async (buffer: Float32Array, root: number) => {
      // The root's tensor plus everyone else's zeros is the root's tensor.
      if (rank !== root) buffer.fill(0)
      await reduce(buffer, "sum", 1)
    },
    epochs: () => ({
      async *[Symbol.asyncIterator]() {
        if (datasetSize === 0) throw new RankCallError("ctx.epochs() needs job.dataset_size in the cluster file, or --set job.dataset_size=N on the command line: the number of samples an epoch covers")
        await until(() => welcome !== undefined)
        for (let epoch = welcome!.firstEpoch; ; epoch++) {
          await until(() => finished || epochs.has(epoch))
          const state = epochs.get(epoch)
          if (state === undefined) return
          current = state
          // "Begun": any checkpoint of the epoch before is already offered (a newcomer's welcome may wait for it).
          void client.then((relay) => relay.report({ _tag: "Progress", epoch, done: state.done }))
          yield planOf(state)
        }
      }
    }),
    progress: (samples: number, metrics?: Readonly<Record<string, number>>) => {
      if (current === undefined) throw new RankCallError("ctx.progress() is for samples of an epoch plan: call it inside `for await (const plan of ctx.epochs())`")
      if (!Number.isInteger(samples) || samples < 0) throw new RankCallError(`progress(samples) needs a whole number ≥ 0, got ${samples}`)
      current.done += samples
      const state = current
      const shown = metrics === undefined ? undefined : shownMetrics(metrics)
      const allreduce = latency.counts.some((count) => count > 0) ? latency : undefined
      if (allreduce !== undefined) latency = emptyCounts()
      void client.then((relay) =>
        relay.report({ _tag: "Progress", epoch: state.epoch, done: state.done, ...(shown === undefined ? {} : { metrics: shown }), ...(allreduce === undefined ? {} : { allreduce }) })
      )
    },
    checkpoint: {
      save: async (state: unknown) => {
        ensureLive()
        // The coordinator counts an offer only for the epoch just ended, from its members: one made before any
        // epoch would be refused there (and said as if it were planted), so it is refused here, where it is made.
        if (current === undefined) {
          throw new RankCallError("ctx.checkpoint.save(state) offers the state after an epoch: call it once the epoch's batches are done, inside `for await (const plan of ctx.epochs())`")
        }
        const { epoch } = current
        const text = stringifyState(state)
        const acknowledged = new Promise<void>((resolve) => saved.set(epoch, [...(saved.get(epoch) ?? []), resolve]))
        ;(await client).report({ _tag: "CheckpointSave", epoch, state: text })
        await Promise.race([acknowledged, until(() => false)])
      },
      provide: (read: () => unknown) => {
        if (typeof read !== "function") throw new RankCallError("checkpoint.provide(read) needs a function that returns the job's state")
        snapshot = read
      },
      load: async () => {
        await until(() => welcome !== undefined)
        return welcome!.checkpoint === undefined ? undefined : parseState(welcome!.checkpoint)
      }
    }
  }
  return { context, onOrder, stop }
}
