/**
 * Native kernels against the machine: how close does the average-of-N kernel
 * (`kernels.average("f32", …)`, the Rust cdylib through bun:ffi) come to the
 * streaming bandwidth of this machine, and what does one FFI call cost?
 *
 * Bandwidth contenders, interleaved run by run (the order rotates each run),
 * over 64 MiB f32 buffers (16 Mi elements), every buffer allocated and
 * faulted in once before the clock runs and reused by every run:
 *  - `kernels.average` for N = 4 and N = 8 inputs: (N + 1) x 64 MiB of traffic
 *    per call (N reads, 1 write);
 *  - `kernels.add` (acc[i] += x[i]): 3 x 64 MiB per call;
 *  - the streaming reference, `a[i] += b[i]` in C (bench/stream-add.c, built
 *    here with `cc -O3 -march=native -pthread`), run as a subprocess on 1 and
 *    on 2 threads; it faults its arrays in, warms up, and times its own
 *    passes with CLOCK_MONOTONIC: 3 x 64 MiB per pass;
 *  - a plain TypeScript loop of the average for N = 4, adding in the kernel's
 *    order with the kernel's rounding.
 * A run's figure for each contender is the median of its PASSES back-to-back
 * calls (the C program's median of its own PASSES passes); the table gives
 * the median and p90 of those over the runs. GB is 1e9 bytes.
 *
 * FFI overhead: CALLS calls of `process.noop()` (one empty call into the
 * library) in a tight loop, next to the raw bun:ffi symbol and a trivial JS
 * function in the same loop shape, also interleaved.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import { openLibrary } from "../src/native/library.ts"
import * as Native from "../src/native/Native.ts"
import { median, percentile } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 10)
const PASSES = 5
const MIB = 64
const ELEMENTS = (MIB << 20) / 4
const BYTES = MIB << 20
const CALLS = 1_000_000


/** The average as a TypeScript loop: the kernel's order of additions and its f32 rounding. */
const tsAverage = (inputs: ReadonlyArray<Float32Array>, out: Float32Array) => {
  const f = Math.fround
  const count = inputs.length
  const first = inputs[0]!
  for (let i = 0; i < out.length; i++) {
    let acc = first[i]!
    for (let k = 1; k < count; k++) acc = f(acc + inputs[k]![i]!)
    out[i] = f(acc / count)
  }
}

/** Build bench/stream-add.c; the path of the program, or why there is none. */
const buildStreamAdd = (dir: string): { program: string } | { missing: string } => {
  const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang")
  if (cc === null) return { missing: "no C compiler (cc, gcc, clang) on PATH" }
  const program = join(dir, "stream-add")
  const build = Bun.spawnSync([cc, "-O3", "-march=native", "-pthread", "-o", program, join(import.meta.dir, "stream-add.c")], { stderr: "pipe" })
  if (build.exitCode !== 0) return { missing: `${cc} failed: ${build.stderr.toString().trim()}` }
  return { program }
}

/** One run of the C reference: the median GB/s of its own passes. */
const streamAdd = async (program: string, threads: number): Promise<number> => {
  const child = Bun.spawn([program, String(threads), String(MIB), String(PASSES)], { stdout: "pipe" })
  const output = await new Response(child.stdout).text()
  if ((await child.exited) !== 0) throw new Error(`stream-add exited with ${child.exitCode}`)
  const match = /^median_gbps ([\d.]+)/.exec(output)
  if (match === null) throw new Error(`stream-add said: ${output}`)
  return Number(match[1])
}

/** The median seconds of PASSES back-to-back calls. */
const timed = (call: () => void): number => {
  const seconds: Array<number> = []
  for (let pass = 0; pass < PASSES; pass++) {
    const start = performance.now()
    call()
    seconds.push((performance.now() - start) / 1000)
  }
  return median(seconds)
}

/** Nanoseconds per call of `call` over CALLS calls, in the same loop shape for every contender. */
const perCall = (call: () => number): number => {
  let sink = 0
  const start = Bun.nanoseconds()
  for (let i = 0; i < CALLS; i++) sink += call()
  const ns = (Bun.nanoseconds() - start) / CALLS
  if (sink !== 0) throw new Error("a no-op returned something")
  return ns
}

interface Contender {
  readonly name: string
  /** Bytes of array traffic per call. */
  readonly bytes: number
  /** One run: GB/s. */
  readonly run: () => Promise<number>
}

export const nativeKernels = async (): Promise<string> => {
  const loaded = await Effect.runPromise(Effect.either(Native.load()))
  if (loaded._tag === "Left") return `native kernels: skipped, ${loaded.left.message}`
  const native = loaded.right
  const raw = openLibrary()
  if ("_tag" in raw) return `native kernels: skipped, the library cannot be opened (${raw._tag})`
  const dir = mkdtempSync(join(tmpdir(), "cohort-bench-"))
  const loadBefore = loadavg()[0]!
  try {
    const reference = buildStreamAdd(dir)

    // Every buffer is written once here: its pages are faulted in before any clock runs.
    const inputs = Array.from({ length: 8 }, (_, k) => new Float32Array(ELEMENTS).fill(1 + k / 8))
    const out = new Float32Array(ELEMENTS).fill(0)
    const acc = new Float32Array(ELEMENTS).fill(1)
    const x = new Float32Array(ELEMENTS).fill(2 ** -20)
    const four = inputs.slice(0, 4)

    // The TypeScript loop must agree with the kernel bit for bit (a check, and its warm-up).
    native.kernels.average("f32", four, out)
    const expected = out.slice(0, 1 << 16)
    tsAverage(four.map((input) => input.subarray(0, 1 << 16)), out.subarray(0, 1 << 16))
    if (!expected.every((value, i) => Object.is(value, out[i]))) throw new Error("the TypeScript average disagrees with the kernel")

    const kernel = (name: string, bytes: number, call: () => void): Contender => ({
      name,
      bytes,
      run: async () => bytes / timed(call) / 1e9
    })
    const contenders: Array<Contender> = [
      kernel("native average, N = 4", 5 * BYTES, () => native.kernels.average("f32", four, out)),
      kernel("native average, N = 8", 9 * BYTES, () => native.kernels.average("f32", inputs, out)),
      kernel("native add (acc += x)", 3 * BYTES, () => native.kernels.add("f32", acc, x)),
      kernel("TypeScript loop average, N = 4", 5 * BYTES, () => tsAverage(four, out))
    ]
    if ("program" in reference) {
      for (const threads of [1, 2]) {
        contenders.push({
          name: `C a[i] += b[i], ${threads} thread${threads > 1 ? "s" : ""}`,
          bytes: 3 * BYTES,
          run: () => streamAdd(reference.program, threads)
        })
      }
    }
    // Warm-up: one run of each (JIT, the C program's first exec, the kernel's threads).
    for (const contender of contenders) await contender.run()
    const figures = new Map(contenders.map((contender) => [contender.name, [] as Array<number>]))
    for (let run = 0; run < RUNS; run++) {
      for (let k = 0; k < contenders.length; k++) {
        const contender = contenders[(run + k) % contenders.length]!
        figures.get(contender.name)!.push(await contender.run())
      }
    }

    // FFI overhead, interleaved the same way.
    const noop = raw.symbols.cohort_noop
    const trivial = () => 0
    const calls: Array<[string, () => number]> = [
      ["process.noop() (cohort's binding)", native.process.noop],
      ["raw bun:ffi symbol cohort_noop()", noop],
      ["trivial JS function () => 0", trivial]
    ]
    for (const [, call] of calls) perCall(call)
    const overhead = new Map(calls.map(([name]) => [name, [] as Array<number>]))
    for (let run = 0; run < RUNS; run++) {
      for (let k = 0; k < calls.length; k++) {
        const [name, call] = calls[(run + k) % calls.length]!
        overhead.get(name)!.push(perCall(call))
      }
    }

    const gbps = (name: string) => median(figures.get(name) ?? [Number.NaN])
    const lines = [
      `native kernels: 64 MiB f32 buffers, GB/s of array traffic (1e9 bytes/s); ${RUNS} runs, each the median of ${PASSES} calls or passes; ` +
        `1-minute load average ${loadBefore.toFixed(1)} → ${loadavg()[0]!.toFixed(1)}`,
      "",
      "| contender | traffic per call | runs | median GB/s | p90 GB/s (slow tail) | median ms | p90 ms |",
      "|---|---|---|---|---|---|---|"
    ]
    for (const { bytes, name } of contenders) {
      const values = figures.get(name)!
      const ms = values.map((value) => (bytes / value / 1e9) * 1000)
      lines.push(
        `| ${name} | ${bytes / BYTES} x 64 MiB | ${values.length} | ${median(values).toFixed(2)} | ${percentile(values, 0.1).toFixed(2)} | ` +
          `${median(ms).toFixed(2)} | ${percentile(ms, 0.9).toFixed(2)} |`
      )
    }
    lines.push("")
    if ("program" in reference) {
      const [one, two] = [gbps("C a[i] += b[i], 1 thread"), gbps("C a[i] += b[i], 2 threads")]
      const best = Math.max(one, two)
      const which = two >= one ? "2 threads" : "1 thread"
      const ratio = (name: string) => gbps(name) / best
      lines.push(
        `streaming reference: the better of the C medians, ${best.toFixed(2)} GB/s (${which})`,
        `ratio to it (medians): average N = 4 ${ratio("native average, N = 4").toFixed(2)}, ` +
          `N = 8 ${ratio("native average, N = 8").toFixed(2)}, add ${ratio("native add (acc += x)").toFixed(2)}, ` +
          `TypeScript N = 4 ${ratio("TypeScript loop average, N = 4").toFixed(2)} (target: average ≥ 0.80)`
      )
    } else {
      lines.push(`streaming reference: not measured, ${reference.missing}`)
    }
    lines.push(
      "",
      `FFI overhead: ${CALLS.toLocaleString("en")} calls in one loop (ns per call)`,
      "",
      "| call | runs | median | p90 | min |",
      "|---|---|---|---|---|"
    )
    for (const [name] of calls) {
      const values = overhead.get(name)!
      lines.push(`| ${name} | ${values.length} | ${median(values).toFixed(2)} | ${percentile(values, 0.9).toFixed(2)} | ${Math.min(...values).toFixed(2)} |`)
    }
    return lines.join("\n")
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) console.log(await nativeKernels())
