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
 * Effect-free on purpose: it is on every rank's start-up path.
 */
import { lengthOf, take } from "../launcher/EpochLedger.ts"
import { bucketOf, emptyCounts } from "../../wire/LatencyBuckets.ts"
import { parseState, stringifyState } from "../../wire/StateJson.ts"
import type { AllreduceOptions, EpochPlan, RankContext, SampleRange } from "./RankContext.ts"
import { RankCallError } from "./RankContext.ts"
import type { Order, RelayClient, RelayOp } from "./RelayClient.ts"
import type { SharedTensors } from "./SharedTensors.ts"

type TrainingContext = Pick<RankContext, "allreduce" | "sync" | "barrier" | "broadcast" | "tensor" | "epochs" | "progress" | "checkpoint">

interface EpochState {
  readonly epoch: number
  readonly ranges: Array<SampleRange>
  ended: boolean
  done: number
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
        epochs.set(order.epoch as number, { epoch: order.epoch as number, ranges: [...(order.ranges as Array<SampleRange>)], ended: false, done: 0 })
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
      case "Stop":
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

  // Every reduction's latency, told with the next progress report (the launcher's /metrics histogram).
  let latency = emptyCounts()
  const reduce = async (buffer: Float32Array, op: RelayOp, weight: number) => {
    ensureLive()
    const relay = await client
    const started = performance.now()
    // Outside an epoch (before the first, after the last), a round belongs to the epoch the rank starts or last had.
    await relay.reduce(buffer, op, weight, current?.epoch ?? welcome?.firstEpoch ?? 0)
    const seconds = (performance.now() - started) / 1000
    latency.counts[bucketOf(seconds)]! += 1
    latency.sum += seconds
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
          while (true) {
            if (handed < lengthOf(state.ranges)) {
              const batch = take(state.ranges, handed, size)
              handed += batch.length
              yield batch
              continue
            }
            if (state.ended) return
            // Out of work: leave the reduction barrier until more work or the epoch's end.
            ;(await client).idle(state.epoch)
            await until(() => state.ended || handed < lengthOf(state.ranges))
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
        if (datasetSize === 0) throw new RankCallError("ctx.epochs() needs job.dataset_size in the cluster file: the number of samples an epoch covers")
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
      const allreduce = latency.counts.some((count) => count > 0) ? latency : undefined
      if (allreduce !== undefined) latency = emptyCounts()
      void client.then((relay) =>
        relay.report({ _tag: "Progress", epoch: state.epoch, done: state.done, ...(metrics === undefined ? {} : { metrics }), ...(allreduce === undefined ? {} : { allreduce }) })
      )
    },
    checkpoint: {
      save: async (state: unknown) => {
        ensureLive()
        const epoch = current?.epoch ?? (welcome?.firstEpoch ?? 1) - 1
        const text = stringifyState(state)
        const acknowledged = new Promise<void>((resolve) => saved.set(epoch, [...(saved.get(epoch) ?? []), resolve]))
        ;(await client).report({ _tag: "CheckpointSave", epoch: Math.max(0, epoch), state: text })
        await Promise.race([acknowledged, until(() => false)])
      },
      load: async () => {
        await until(() => welcome !== undefined)
        return welcome!.checkpoint === undefined ? undefined : parseState(welcome!.checkpoint)
      }
    }
  }
  return { context, onOrder, stop }
}
