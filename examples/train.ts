/**
 * Data-parallel training of a small MLP on a synthetic spirals dataset, one
 * copy per rank. Run it with `bun run launch examples/local.yml`.
 *
 * Every rank builds the same `job.dataset_size` samples (`spirals.ts`,
 * deterministic) and the same initial weights (`mlp.ts`, one seed). Per
 * epoch, the coordinator hands each rank its sample ranges; per batch, a rank
 * computes the mean gradient of its samples, `ctx.allreduce` turns it into
 * the weighted mean over every rank's batch (weight: the batch's size, so
 * unequal batches average correctly), and every rank takes the same SGD step
 * (momentum 0.9, cosine learning-rate decay over `job.epochs`). The weights
 * therefore stay identical on all ranks, which the closing line
 * `final weights checksum <hex>` shows. One more allreduce at each epoch's end
 * averages weights and momentum: a no-op when the ranks took the same steps,
 * a repair when they did not (a rank whose ranges ran out early is inactive
 * while it waits, and misses the others' last updates).
 *
 * At each epoch's end every rank evaluates the held-out set and prints
 *   epoch E: loss L accuracy A% (samples processed by this rank N)
 * and offers `{ epoch, epochsDone, params, velocity }` as the checkpoint; a
 * run started with `--resume` continues from the saved weights. Between two
 * steps the same state can be read (`ctx.checkpoint.provide`, with `within`:
 * the epoch it is part-way through), so a run stopped mid-epoch resumes
 * where its work stopped.
 *
 * `args` (all optional, `key=value`):
 *   lr=0.3      peak learning rate (decays to 0 by the last epoch)
 *   batch=128   samples per rank per step (so worldSize × batch per step)
 * With 4 ranks, `dataset_size: 50000` and `epochs: 10` it reaches about 99%
 * held-out accuracy: 98 steps per epoch per rank, so 99 allreduce calls
 * (98 gradients, 1 weight average).
 *
 * `ctx.signal` is honoured: when cohort stops the rank it finishes the
 * current step and returns.
 */
import type { RankContext } from "cohort"
import { checksum, Mlp, sgdStep } from "./mlp.ts"
import { evaluationSet, spirals } from "./spirals.ts"

/** The network: 2 inputs, two hidden ReLU layers of 32, 3 classes (1,251 parameters). */
export const LAYERS = [2, 32, 32, 3] as const
/** The seed of the initial weights: the same on every rank. */
export const INIT_SEED = 42
/** Held-out samples evaluated at every epoch's end. */
export const EVAL_SIZE = 3000
export const MOMENTUM = 0.9

export interface Options {
  /** Peak learning rate. */
  readonly lr: number
  /** Samples per rank per step. */
  readonly batch: number
}

export const DEFAULTS: Options = { lr: 0.3, batch: 128 }

/** Reads `key=value` args over the defaults; an unknown key or a bad value throws. */
export const parseArgs = (args: ReadonlyArray<string>): Options => {
  let { lr, batch } = DEFAULTS
  for (const arg of args) {
    const [key, raw = ""] = arg.split("=", 2)
    const value = Number(raw)
    if (key === "lr" && value > 0) lr = value
    else if (key === "batch" && Number.isInteger(value) && value > 0) batch = value
    else throw new Error(`examples/train.ts: unknown or invalid argument "${arg}" (expected lr=<number> or batch=<integer>)`)
  }
  return { lr, batch }
}

export interface EpochReport {
  readonly epoch: number
  /** Held-out loss and accuracy (in [0, 1]) after the epoch. */
  readonly loss: number
  readonly accuracy: number
  /** Samples this rank processed during the epoch. */
  readonly samples: number
}

export interface TrainResult {
  readonly epochs: ReadonlyArray<EpochReport>
  /** Held-out accuracy of the final weights (in [0, 1]). */
  readonly accuracy: number
  readonly checksum: string
  /** True when `ctx.signal` stopped the run early. */
  readonly stopped: boolean
  /** SGD steps (gradient allreduce calls) this rank made; one more allreduce per epoch equalises the weights. */
  readonly steps: number
  readonly params: Float32Array
}

interface Saved {
  readonly epoch?: unknown
  /** A state read part-way through this epoch. */
  readonly within?: unknown
  readonly epochsDone?: unknown
  readonly params?: unknown
  readonly velocity?: unknown
}

/** Cosine decay from `peak` at the first epoch towards 0 at the last. */
const learningRate = (peak: number, epochsDone: number, epochCount: number): number =>
  peak * 0.5 * (1 + Math.cos(Math.PI * Math.min(1, epochsDone / Math.max(1, epochCount))))

/** The training loop; `log` receives the printed lines. */
export const train = async (ctx: RankContext, log: (line: string) => void = console.log): Promise<TrainResult> => {
  const options = parseArgs(ctx.args)
  if (!(ctx.datasetSize > 0)) throw new Error("examples/train.ts needs job.dataset_size (e.g. 50000)")
  const data = spirals(ctx.datasetSize)
  const held = evaluationSet(EVAL_SIZE)
  const model = new Mlp(LAYERS, "relu")
  const params = model.init(INIT_SEED)
  // Reduced every step: in shared memory, so the relay reduces them where they lie.
  const grads = ctx.tensor(model.size)
  const velocity = model.zeros()
  /** Weights and momentum side by side, for the one allreduce that equalises them at an epoch's end. */
  const state = ctx.tensor(2 * model.size)

  let epochsDone = 0
  const resumed = (await ctx.checkpoint.load()) as Saved | undefined
  if (typeof resumed === "object" && resumed !== null && resumed.params instanceof Float32Array) {
    if (resumed.params.length !== model.size) throw new Error(`the checkpoint holds ${resumed.params.length} parameters, this model has ${model.size}`)
    params.set(resumed.params)
    if (resumed.velocity instanceof Float32Array && resumed.velocity.length === model.size) velocity.set(resumed.velocity)
    if (typeof resumed.epochsDone === "number") epochsDone = resumed.epochsDone
    const within = typeof resumed.within === "number" ? `, part-way through epoch ${resumed.within}` : ""
    log(`resumed from the checkpoint of epoch ${String(resumed.epoch)}${within} (weights ${checksum(params)})`)
  }
  if (ctx.rank === 0) {
    log(`spirals: ${ctx.datasetSize} samples × ${ctx.epochCount} epochs, MLP ${LAYERS.join("-")} (${model.size} parameters), ` +
      `batch ${options.batch} per rank × ${ctx.worldSize} ranks, lr ${options.lr}`)
  }

  const local = ctx.backend === "cpu_cadence" || ctx.backend === "cpu_async"
  // The state between two steps: read by cohort when a cpu_sync run stops mid-epoch.
  let within = 0
  ctx.checkpoint.provide(() => ({ epoch: within - 1, within, epochsDone, params: params.slice(), velocity: velocity.slice() }))
  const reports: Array<EpochReport> = []
  let stopped = false
  let steps = 0
  try {
    epochs: for await (const plan of ctx.epochs()) {
      within = plan.epoch
      const lr = learningRate(options.lr, epochsDone, ctx.epochCount)
      let samples = 0
      for await (const batch of plan.batches(options.batch)) {
        if (ctx.signal.aborted) {
          stopped = true
          break epochs
        }
        if (batch.length === 0) continue
        const { loss } = model.forwardBackward(params, grads, data.x, data.y, batch)
        // cpu_sync: average every step's gradients. cpu_cadence / cpu_async: local steps, and
        // the model synced every `ctx.cadence` steps (averaged, or exchanged with the centre).
        if (!local) await ctx.allreduce(grads, { op: "avg", weight: batch.length })
        steps++
        sgdStep(params, grads, lr, velocity, MOMENTUM)
        if (local && steps % ctx.cadence === 0) await ctx.sync(params)
        samples += batch.length
        ctx.progress(batch.length, { loss })
      }
      if (ctx.signal.aborted) {
        stopped = true
        break
      }
      // Equalise the ranks. Under an even plan they already agree (every rank
      // took the same steps) and this changes nothing; but a rank whose ranges
      // ran out early waited, inactive, through the others' last steps (or
      // through redistributed work after a failure) and missed their updates.
      state.set(params, 0)
      state.set(velocity, model.size)
      await ctx.allreduce(state, { op: "avg" })
      params.set(state.subarray(0, model.size))
      velocity.set(state.subarray(model.size))
      epochsDone++
      const { loss, accuracy } = model.evaluate(params, held.x, held.y)
      reports.push({ epoch: plan.epoch, loss, accuracy, samples })
      log(`epoch ${plan.epoch}: loss ${loss.toFixed(4)} accuracy ${(accuracy * 100).toFixed(2)}% (samples processed by this rank ${samples})`)
      await ctx.checkpoint.save({ epoch: plan.epoch, epochsDone, params: params.slice(), velocity: velocity.slice() })
    }
  } catch (error) {
    // A collective cut short by the shutdown is the shutdown, not a failure.
    if (!ctx.signal.aborted) throw error
    stopped = true
  }

  const final = reports.length > 0 ? reports[reports.length - 1]!.accuracy : model.evaluate(params, held.x, held.y).accuracy
  const sum = checksum(params)
  if (stopped) log(`stopped early after ${epochsDone} epochs: weights checksum ${sum}`)
  else log(`final weights checksum ${sum}`)
  return { epochs: reports, accuracy: final, checksum: sum, stopped, steps, params }
}

export default async (ctx: RankContext): Promise<void> => {
  await train(ctx)
}
