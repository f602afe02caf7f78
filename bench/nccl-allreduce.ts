/**
 * NCCL all-reduce through cohort's binding (`src/native`): a world of one
 * rank on GPU 0, f32 sum, out of place and in place, sizes 1 MiB to 1 GiB
 * by ×4. Each figure is the median of 10 iterations after 3 warm-ups; one
 * iteration is the enqueue on a stream plus the stream's synchronize, timed
 * on the host, so the small sizes are mostly launch and FFI latency.
 *
 * algbw is bytes / time. busbw is nccl-tests' figure, algbw × 2(n−1)/n: 0
 * for a world of one, where NCCL moves no data between GPUs (out of place it
 * copies send to receive on the device; in place it has nothing to do).
 *
 *   bun bench/nccl-allreduce.ts            the table
 *   bun bench/nccl-allreduce.ts --probe    which NCCL and libcudart the library finds, or why none
 *
 * Without NCCL or a GPU it says why and exits 0.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Native from "../src/native/Native.ts"
import { median } from "./stats.ts"

const MiB = 1 << 20
const SIZES = [1, 4, 16, 64, 256, 1024].map((mib) => mib * MiB)
const WARMUP = 3
const ITERATIONS = 10
const WORLD = 1


const label = (bytes: number) => (bytes >= 1 << 30 ? `${bytes / (1 << 30)} GiB` : `${bytes / MiB} MiB`)

/** Why the benchmark cannot run here, or the library with NCCL's version and path. */
const prepare = Effect.gen(function*() {
  const native = yield* Native.load()
  const devices = yield* native.cuda.deviceCount
  if (devices === 0) return yield* Effect.fail({ message: "CUDA sees no device" })
  const version = yield* native.nccl.version
  const path = yield* native.nccl.libraryPath
  const device = yield* native.cuda.device(0)
  return { native, version, path, device }
})

/**
 * The milliseconds `run` takes. It is a thunk on purpose: the binding's
 * allReduce, synchronize, upload and download call the library when they are
 * called, not when their Effect runs, so the clock must start before that.
 */
const timeOne = <E>(run: () => Effect.Effect<void, E>) =>
  Effect.gen(function*() {
    const start = performance.now()
    yield* Effect.suspend(run)
    return performance.now() - start
  })

const measure = (native: Native.NativeLibrary, communicator: Native.Communicator, stream: bigint, bytes: number) =>
  Effect.scoped(Effect.gen(function*() {
    const send = yield* native.cuda.allocate(0, bytes)
    const receive = yield* native.cuda.allocate(0, bytes)
    const once = (to: Native.DeviceBuffer) =>
      Effect.gen(function*() {
        yield* communicator.allReduce(send, to, "f32", "sum", stream)
        yield* native.cuda.synchronize(stream)
      })
    const series = (to: Native.DeviceBuffer) =>
      Effect.gen(function*() {
        for (let i = 0; i < WARMUP; i++) yield* once(to)
        const times: Array<number> = []
        for (let i = 0; i < ITERATIONS; i++) times.push(yield* timeOne(() => once(to)))
        return median(times)
      })
    return { outOfPlace: yield* series(receive), inPlace: yield* series(send) }
  }))

const row = (bytes: number, ms: number) => {
  const algbw = bytes / (ms / 1000) / 1e9
  const busbw = (algbw * 2 * (WORLD - 1)) / WORLD
  return `${(ms * 1000).toFixed(1)} | ${algbw.toFixed(2)} | ${busbw.toFixed(2)}`
}

export const ncclAllReduce = (): Promise<string> =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const ready = yield* Effect.either(prepare)
    if (Either.isLeft(ready)) return `NCCL all-reduce benchmark not run: ${ready.left.message}`
    const { device, native, path, version } = ready.right
    yield* native.cuda.allocate(0, 4096) // device 0 current before the communicator
    const stream = yield* native.cuda.stream
    const id = yield* native.nccl.uniqueId
    const initStart = performance.now()
    const communicator = yield* native.nccl.communicator(0, WORLD, id)
    const initMs = performance.now() - initStart
    const lines = [
      `## NCCL all-reduce through the binding (bench/nccl-allreduce.ts)`,
      ``,
      `${device.name} (${device.uuid}), NCCL ${version} from ${path}, world size ${WORLD}, f32 sum, bun ${Bun.version}`,
      `communicator init: ${initMs.toFixed(0)} ms; median of ${ITERATIONS} after ${WARMUP} warm-ups; time = enqueue + stream synchronize, on the host`,
      ``,
      `| size | out-of-place time (µs) | algbw (GB/s) | busbw (GB/s) | in-place time (µs) | algbw (GB/s) | busbw (GB/s) |`,
      `|---|---|---|---|---|---|---|`
    ]
    for (const bytes of SIZES) {
      const { inPlace, outOfPlace } = yield* measure(native, communicator, stream, bytes)
      const line = `| ${label(bytes)} | ${row(bytes, outOfPlace)} | ${row(bytes, inPlace)} |`
      console.error(`nccl-allreduce: measured ${label(bytes)}`)
      lines.push(line)
    }
    const asyncError = yield* communicator.asyncError
    lines.push(``, `asyncError after the run: ${asyncError}`)
    return lines.join("\n")
  })).pipe(Effect.catchAll((error) => Effect.succeed(`NCCL all-reduce benchmark failed: ${error instanceof Error ? error.message : (error as { message?: string }).message ?? String(error)}`))))

/** Which NCCL (and whether CUDA) the library finds, or why not. */
const probe = (): string => {
  const loaded = Effect.runSync(Effect.either(Native.load()))
  if (Either.isLeft(loaded)) return `native library: ${loaded.left.message}`
  const native = loaded.right
  const count = Effect.runSync(Effect.either(native.cuda.deviceCount))
  const nccl = Effect.runSync(Effect.either(Effect.all({ version: native.nccl.version, path: native.nccl.libraryPath })))
  return [
    `native library: ${native.path}`,
    `CUDA: ${Either.isRight(count) ? `${count.right} device(s)` : count.left.message}`,
    `NCCL: ${Either.isRight(nccl) ? `${nccl.right.version} from ${nccl.right.path}` : nccl.left.message}`
  ].join("\n")
}

if (import.meta.main) {
  console.log(process.argv.includes("--probe") ? probe() : await ncclAllReduce())
}
