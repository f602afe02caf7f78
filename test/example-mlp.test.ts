/**
 * The training example (examples/train.ts, mlp.ts, spirals.ts) without the
 * launcher: the MLP's gradient against finite differences, the dataset's
 * determinism, and whole data-parallel runs in one process, with a fake
 * context whose allreduce is a shared-memory barrier among the ranks.
 */
import { describe, expect, test } from "bun:test"
import type { AllreduceOptions, EpochPlan, RankContext, SampleRange } from "../src/rank/RankContext.ts"
import { checksum, Mlp, sgdStep } from "../examples/mlp.ts"
import { evaluationSet, spirals } from "../examples/spirals.ts"
import { LAYERS, train, type TrainResult } from "../examples/train.ts"

// ---------------------------------------------------------------------------
// The MLP

const gradientCheck = (activation: "tanh" | "relu") => {
  const model = new Mlp([2, 5, 4, 3], activation)
  const params = model.init(7)
  // Non-zero biases, so they are checked too.
  for (let p = 0; p < params.length; p++) if (params[p] === 0) params[p] = 0.1 * Math.sin(p + 1)
  const data = spirals(12, 3)
  const indices = [0, 1, 2, 3, 5, 8, 11]
  const grads = model.zeros()
  model.forwardBackward(params, grads, data.x, data.y, indices)
  const scratch = model.zeros()
  const lossAt = () => model.forwardBackward(params, scratch, data.x, data.y, indices).loss
  let worst = 0
  for (let p = 0; p < params.length; p++) {
    const original = params[p]!
    params[p] = original + 1e-3
    const up = params[p]!
    const lossUp = lossAt()
    params[p] = original - 1e-3
    const down = params[p]!
    const lossDown = lossAt()
    params[p] = original
    const numeric = (lossUp - lossDown) / (up - down)
    const error = Math.abs(numeric - grads[p]!) / Math.max(1e-3, Math.abs(numeric) + Math.abs(grads[p]!))
    worst = Math.max(worst, error)
  }
  return worst
}

describe("examples/mlp.ts", () => {
  test("the gradient matches finite differences (tanh and ReLU)", () => {
    expect(gradientCheck("tanh")).toBeLessThan(2e-3)
    expect(gradientCheck("relu")).toBeLessThan(2e-3)
  })

  test("the gradient is the batch's mean: two half batches average to the whole", () => {
    const model = new Mlp([2, 6, 3])
    const params = model.init(1)
    const data = spirals(40)
    const whole = model.zeros()
    const first = model.zeros()
    const second = model.zeros()
    const all = Array.from({ length: 40 }, (_, i) => i)
    model.forwardBackward(params, whole, data.x, data.y, all)
    model.forwardBackward(params, first, data.x, data.y, all.slice(0, 10))
    model.forwardBackward(params, second, data.x, data.y, all.slice(10))
    for (let p = 0; p < whole.length; p++) expect(whole[p]!).toBeCloseTo((first[p]! * 10 + second[p]! * 30) / 40, 5)
  })

  test("init is a function of the seed; sgd and checksum", () => {
    const model = new Mlp(LAYERS)
    expect(model.size).toBe(2 * 32 + 32 + 32 * 32 + 32 + 32 * 3 + 3)
    expect(checksum(model.init(42))).toBe(checksum(model.init(42)))
    expect(checksum(model.init(42))).not.toBe(checksum(model.init(43)))
    expect(checksum(new Float32Array([1, 2]))).toMatch(/^[0-9a-f]{8}$/)
    const params = new Float32Array([1, 1])
    const velocity = new Float32Array(2)
    sgdStep(params, new Float32Array([1, -2]), 0.5, velocity, 0.9)
    expect(Array.from(params)).toEqual([0.5, 2])
    sgdStep(params, new Float32Array([0, 0]), 0.5, velocity, 0.5)
    expect(Array.from(params)).toEqual([0.25, 2.5])
  })
})

// ---------------------------------------------------------------------------
// The dataset

describe("examples/spirals.ts", () => {
  test("sample i depends on (i, seed) only; classes interleave; the held-out set differs", () => {
    const small = spirals(30, 5)
    const large = spirals(300, 5)
    expect(Array.from(large.x.subarray(0, 60))).toEqual(Array.from(small.x))
    expect(Array.from(large.y.subarray(0, 30))).toEqual(Array.from(small.y))
    expect(small.classes).toBe(3)
    for (let start = 0; start + 3 <= 300; start += 37) expect(new Set(large.y.subarray(start, start + 3)).size).toBe(3)
    expect(Array.from(spirals(30, 6).x)).not.toEqual(Array.from(small.x))
    expect(Array.from(evaluationSet(30).x)).not.toEqual(Array.from(spirals(30).x))
  })

  test("no linear classifier does well: softmax regression stays under 60%", () => {
    const data = spirals(6000)
    const held = evaluationSet(2000)
    const model = new Mlp([2, 3])
    const params = model.init(1)
    const grads = model.zeros()
    const velocity = model.zeros()
    for (let epoch = 0; epoch < 5; epoch++) {
      for (let start = 0; start < data.count; start += 100) {
        model.forwardBackward(params, grads, data.x, data.y, Array.from({ length: 100 }, (_, i) => start + i))
        sgdStep(params, grads, 0.3, velocity)
      }
    }
    expect(model.evaluate(params, held.x, held.y).accuracy).toBeLessThan(0.6)
  })
})

// ---------------------------------------------------------------------------
// A fake world: W ranks in one process

interface World {
  readonly results: ReadonlyArray<TrainResult>
  readonly lines: ReadonlyArray<ReadonlyArray<string>>
  readonly saved: ReadonlyMap<number, unknown>
  /** Samples reported through `progress`, per rank. */
  readonly progressed: ReadonlyArray<number>
  /** allreduce rounds completed. */
  readonly rounds: number
  readonly seconds: number
}

interface WorldOptions {
  readonly worldSize: number
  readonly datasetSize: number
  readonly epochCount: number
  readonly args?: ReadonlyArray<string>
  /** The checkpoint `load()` returns; epochs then start after its `epoch`. */
  readonly resume?: { readonly epoch: number } | undefined
  /** Abort the shared signal once this many progress calls were made (over all ranks). */
  readonly abortAfter?: number
}

/**
 * Runs examples/train.ts's `train` on `worldSize` ranks concurrently.
 * allreduce completes when every ACTIVE rank has called it (a rank whose
 * ranges are used up waits for the epoch's end and is not active), with the
 * weighted mean (or sum) computed in float64. Each epoch splits
 * [0, datasetSize) into equal contiguous ranges, one per rank.
 */
const runWorld = async (options: WorldOptions): Promise<World> => {
  const { worldSize, datasetSize, epochCount } = options
  const controller = new AbortController()
  const saved = new Map<number, unknown>()
  const progressed = new Array<number>(worldSize).fill(0)
  let progressCalls = 0
  let rounds = 0

  let active = worldSize
  let pending: Array<{ readonly buffer: Float32Array; readonly weight: number; readonly op: string; readonly resolve: () => void }> = []
  const settle = () => {
    if (pending.length === 0 || pending.length < active) return
    const round = pending
    pending = []
    rounds++
    const length = round[0]!.buffer.length
    const total = new Float64Array(length)
    let weights = 0
    for (const { buffer, weight, op } of round) {
      if (buffer.length !== length) throw new Error("allreduce: buffers of different lengths in one round")
      const w = op === "avg" ? weight : 1
      weights += w
      for (let i = 0; i < length; i++) total[i] = total[i]! + w * buffer[i]!
    }
    const scale = round[0]!.op === "avg" ? 1 / weights : 1
    for (const { buffer, resolve } of round) {
      for (let i = 0; i < length; i++) buffer[i] = total[i]! * scale
      resolve()
    }
  }
  const allreduce = (buffer: Float32Array, opts?: AllreduceOptions) =>
    new Promise<void>((resolve) => {
      pending.push({ buffer, weight: opts?.weight ?? 1, op: opts?.op ?? "avg", resolve })
      settle()
    })

  // Per epoch: how many ranks have used up their ranges, and the epoch's end.
  const epochEnds = new Map<number, { arrived: number; readonly done: Promise<void>; readonly resolve: () => void }>()
  const epochEnd = (epoch: number) => {
    let entry = epochEnds.get(epoch)
    if (entry === undefined) {
      let resolve!: () => void
      const done = new Promise<void>((r) => (resolve = r))
      entry = { arrived: 0, done, resolve }
      epochEnds.set(epoch, entry)
    }
    return entry
  }

  const firstEpoch = options.resume === undefined ? 0 : options.resume.epoch + 1
  const rangeOf = (rank: number): SampleRange => ({
    start: Math.floor((rank * datasetSize) / worldSize),
    end: Math.floor(((rank + 1) * datasetSize) / worldSize)
  })

  const context = (rank: number): RankContext => {
    const plan = (epoch: number): EpochPlan => ({
      epoch,
      ranges: [rangeOf(rank)],
      batches: async function*(size: number) {
        for (const { start, end } of [rangeOf(rank)]) {
          for (let s = start; s < end; s += size) {
            yield Array.from({ length: Math.min(size, end - s) }, (_, i) => s + i)
          }
        }
        // Used up: wait, inactive, for every rank to finish the epoch.
        const entry = epochEnd(epoch)
        active--
        entry.arrived++
        if (entry.arrived === worldSize) {
          active = worldSize
          entry.resolve()
        } else {
          settle()
        }
        await entry.done
      }
    })
    return {
      run: "test",
      rank,
      worldSize,
      localRank: rank,
      localWorldSize: worldSize,
      groupRank: 0,
      host: "localhost",
      device: { kind: "cpu", slot: rank },
      args: options.args ?? [],
      backend: "cpu_sync",
      restartCount: 0,
      signal: controller.signal,
      datasetSize,
      epochCount,
      cadence: 1,
      allreduce,
      sync: () => Promise.reject(new Error("not used under cpu_sync")),
      tensor: (length: number) => new Float32Array(length),
      barrier: () => Promise.reject(new Error("not used by the example")),
      broadcast: () => Promise.reject(new Error("not used by the example")),
      epochs: async function*() {
        for (let epoch = firstEpoch; epoch < epochCount; epoch++) yield plan(epoch)
      },
      progress: (samples) => {
        progressed[rank] = progressed[rank]! + samples
        progressCalls++
        if (options.abortAfter !== undefined && progressCalls >= options.abortAfter) controller.abort()
      },
      checkpoint: {
        save: async (state) => {
          if (rank === 0) saved.set((state as { epoch: number }).epoch, state)
        },
        load: async () => options.resume,
        // Read only when a cpu_sync run stops mid-epoch: the coordinator's cut, which training.e2e runs for real.
        provide: () => undefined
      }
    }
  }

  const lines = Array.from({ length: worldSize }, () => new Array<string>())
  const started = performance.now()
  const results = await Promise.all(Array.from({ length: worldSize }, (_, rank) => train(context(rank), (line) => lines[rank]!.push(line))))
  return { results, lines, saved, progressed, rounds, seconds: (performance.now() - started) / 1000 }
}

const accuracyOf = (line: string) => Number(/accuracy ([\d.]+)%/.exec(line)?.[1])

describe("examples/train.ts on a fake in-process world", () => {
  // The configuration recommended for examples/local.yml.
  const datasetSize = 50_000
  const epochCount = 10

  for (const worldSize of [4, 1]) {
    test(`${worldSize} rank(s), ${datasetSize} samples × ${epochCount} epochs: ≥ 95% held out, equal weights everywhere`, async () => {
      const world = await runWorld({ worldSize, datasetSize, epochCount })
      const final = world.results[0]!
      console.log(
        `W=${worldSize}: ${world.seconds.toFixed(2)} s, accuracy ${(final.accuracy * 100).toFixed(2)}%, ` +
          `${final.steps / epochCount + 1} allreduce calls per epoch per rank, checksum ${final.checksum}`
      )
      console.log(world.lines[0]!.join("\n"))
      for (let rank = 0; rank < worldSize; rank++) {
        const { accuracy, checksum: sum, stopped, epochs } = world.results[rank]!
        expect(stopped).toBe(false)
        expect(accuracy).toBeGreaterThanOrEqual(0.95)
        expect(sum).toBe(final.checksum)
        expect(epochs.map((e) => e.epoch)).toEqual(Array.from({ length: epochCount }, (_, e) => e))
        expect(epochs.every((e) => e.samples === datasetSize / worldSize)).toBe(true)
        // The printed lines: one per epoch, and the checksum.
        const printed = world.lines[rank]!.filter((line) => line.startsWith("epoch "))
        expect(printed.length).toBe(epochCount)
        expect(accuracyOf(printed[printed.length - 1]!)).toBeGreaterThanOrEqual(95)
        expect(world.lines[rank]!.at(-1)).toBe(`final weights checksum ${final.checksum}`)
        expect(world.progressed[rank]).toBe((datasetSize / worldSize) * epochCount)
      }
      expect(world.rounds).toBe(final.steps + epochCount)
      expect(world.saved.size).toBe(epochCount)
    }, 60_000)
  }

  test("unequal ranges (3,328 + 3,328 + 3,329 samples, batch 64: 52, 52 and 53 steps): the ranks end equal", async () => {
    const world = await runWorld({ worldSize: 3, datasetSize: 9_985, epochCount: 3, args: ["batch=64", "lr=0.2"] })
    expect(world.results.map((r) => r.steps)).toEqual([156, 156, 159])
    expect(new Set(world.results.map((r) => r.checksum)).size).toBe(1)
    expect(world.progressed.reduce((a, b) => a + b, 0)).toBe(9_985 * 3)
  }, 30_000)

  test("resuming from an epoch's checkpoint ends at the same weights as the uninterrupted run", async () => {
    const config = { worldSize: 2, datasetSize: 8_000, epochCount: 4 }
    const whole = await runWorld(config)
    const checkpoint = whole.saved.get(1) as { epoch: number; params: Float32Array }
    expect(checkpoint.params).toBeInstanceOf(Float32Array)
    const resumed = await runWorld({ ...config, resume: checkpoint })
    expect(resumed.lines[0]![0]).toStartWith("resumed from the checkpoint of epoch 1")
    expect(resumed.results.map((r) => r.epochs.map((e) => e.epoch))).toEqual([[2, 3], [2, 3]])
    expect(resumed.results.map((r) => r.checksum)).toEqual(whole.results.map((r) => r.checksum))
  }, 30_000)

  test("the abort signal stops every rank early", async () => {
    const world = await runWorld({ worldSize: 2, datasetSize: 20_000, epochCount: 5, abortAfter: 30 })
    for (const result of world.results) {
      expect(result.stopped).toBe(true)
      expect(result.steps).toBeLessThan(20)
    }
    expect(world.lines[0]!.at(-1)).toStartWith("stopped early after 0 epochs")
  }, 30_000)

  test("bad args are refused", async () => {
    await expect(runWorld({ worldSize: 1, datasetSize: 100, epochCount: 1, args: ["lr=fast"] })).rejects.toThrow("unknown or invalid argument")
  })
})
