/**
 * Native kernels against the machine: how close does the average-of-N kernel
 * (`kernels.average("f32", …)`, the Rust cdylib through bun:ffi) come to the
 * streaming bandwidth of this machine, and what does one FFI call cost?
 *
 * Bandwidth contenders, over 64 MiB f32 buffers (16 Mi elements), every
 * buffer allocated and faulted in once before the clock runs and reused:
 *  - `kernels.average` for N = 4 and N = 8 inputs: (N + 1) x 64 MiB of traffic
 *    per call (N reads, 1 write);
 *  - `kernels.add` (acc[i] += x[i]): 3 x 64 MiB per call;
 *  - the streaming reference, `a[i] += b[i]` in C (bench/stream-add.c, built
 *    here with `cc -O3 -march=native -pthread`): as a library called through
 *    bun:ffi on two of the same kind of buffers, starting its threads per call
 *    as the kernels do; and as a subprocess on 1 and on 2 threads that keeps
 *    its threads and times its own passes with CLOCK_MONOTONIC. 3 x 64 MiB;
 *  - a plain TypeScript loop of the average for N = 4, adding in the kernel's
 *    order with the kernel's rounding.
 * The in-process contenders alternate call by call (the order rotating each
 * round), so each of them meets the shared machine's slow and fast moments
 * alike; a run is PASSES rounds and a contender's figure for the run is the
 * median of its PASSES calls. The subprocess runs once per run, between
 * rounds (the median of its own PASSES passes). The table gives the median
 * and p90 of the runs' figures. GB is 1e9 bytes.
 *
 * FFI overhead: CALLS calls of `process.noop()` (one empty call into the
 * library) in a tight loop, next to the raw bun:ffi symbol and a trivial JS
 * function in the same loop shape, also interleaved.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { dlopen, FFIType, ptr } from "bun:ffi"
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
const IN_PROCESS = "C a[i] += b[i], in this process, 2 threads"


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

/** Build bench/stream-add.c as a program and as a library; their paths, or why there are none. */
const buildStreamAdd = (dir: string): { program: string; library: string } | { missing: string } => {
  const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang")
  if (cc === null) return { missing: "no C compiler (cc, gcc, clang) on PATH" }
  const source = join(import.meta.dir, "stream-add.c")
  const program = join(dir, "stream-add")
  const library = join(dir, "stream-add.so")
  for (const [output, extra] of [[program, []], [library, ["-shared", "-fPIC", "-DSTREAM_ADD_LIBRARY"]]] as const) {
    const build = Bun.spawnSync([cc, "-O3", "-march=native", "-pthread", ...extra, "-o", output, source], { stderr: "pipe" })
    if (build.exitCode !== 0) return { missing: `${cc} failed: ${build.stderr.toString().trim()}` }
  }
  return { program, library }
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

/** Nanoseconds per call of `call` over CALLS calls, in the same loop shape for every contender. */
const perCall = (call: () => number): number => {
  let sink = 0
  const start = Bun.nanoseconds()
  for (let i = 0; i < CALLS; i++) sink += call()
  const ns = (Bun.nanoseconds() - start) / CALLS
  if (sink !== 0) throw new Error("a no-op returned something")
  return ns
}

/** A contender called in this process: one call moves `bytes` of array traffic. */
interface Call {
  readonly name: string
  readonly bytes: number
  readonly call: () => void
}

/** A contender in its own process: one run gives its GB/s. */
interface Subprocess {
  readonly name: string
  readonly bytes: number
  readonly run: () => Promise<number>
}

/** Seconds taken by one call. */
const seconds = (call: () => void): number => {
  const start = performance.now()
  call()
  return (performance.now() - start) / 1000
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

    const calls: Array<Call> = [
      { name: "native average, N = 4", bytes: 5 * BYTES, call: () => native.kernels.average("f32", four, out) },
      { name: "native average, N = 8", bytes: 9 * BYTES, call: () => native.kernels.average("f32", inputs, out) },
      { name: "native add (acc += x)", bytes: 3 * BYTES, call: () => native.kernels.add("f32", acc, x) },
      { name: "TypeScript loop average, N = 4", bytes: 5 * BYTES, call: () => tsAverage(four, out) }
    ]
    const subprocesses: Array<Subprocess> = []
    if ("program" in reference) {
      const c = dlopen(reference.library, {
        stream_add: { args: [FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.void }
      }).symbols
      const [a, b] = [new Float32Array(ELEMENTS).fill(1), new Float32Array(ELEMENTS).fill(2 ** -20)]
      calls.push({ name: IN_PROCESS, bytes: 3 * BYTES, call: () => c.stream_add(ptr(a), ptr(b), ELEMENTS, 2) })
      for (const threads of [1, 2]) {
        subprocesses.push({
          name: `C a[i] += b[i], own process, ${threads} thread${threads > 1 ? "s" : ""}`,
          bytes: 3 * BYTES,
          run: () => streamAdd(reference.program, threads)
        })
      }
    }
    // Warm-up: a round of each (JIT, the C program's first exec, the kernel's threads).
    for (const { call } of calls) call()
    for (const { run } of subprocesses) await run()
    const figures = new Map([...calls, ...subprocesses].map(({ name }) => [name, [] as Array<number>]))
    for (let run = 0; run < RUNS; run++) {
      const taken = new Map(calls.map(({ name }) => [name, [] as Array<number>]))
      for (let round = 0; round < PASSES; round++) {
        for (let k = 0; k < calls.length; k++) {
          const { call, name } = calls[(run * PASSES + round + k) % calls.length]!
          taken.get(name)!.push(seconds(call))
        }
      }
      for (const { bytes, name } of calls) figures.get(name)!.push(bytes / median(taken.get(name)!) / 1e9)
      for (const { name, run } of subprocesses) figures.get(name)!.push(await run())
    }

    // FFI overhead, interleaved the same way.
    const noop = raw.symbols.cohort_noop
    const trivial = () => 0
    const noops: Array<[string, () => number]> = [
      ["process.noop() (cohort's binding)", native.process.noop],
      ["raw bun:ffi symbol cohort_noop()", noop],
      ["trivial JS function () => 0", trivial]
    ]
    for (const [, call] of noops) perCall(call)
    const overhead = new Map(noops.map(([name]) => [name, [] as Array<number>]))
    for (let run = 0; run < RUNS; run++) {
      for (let k = 0; k < noops.length; k++) {
        const [name, call] = noops[(run + k) % noops.length]!
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
    for (const { bytes, name } of [...calls, ...subprocesses]) {
      const values = figures.get(name)!
      const ms = values.map((value) => (bytes / value / 1e9) * 1000)
      lines.push(
        `| ${name} | ${bytes / BYTES} x 64 MiB | ${values.length} | ${median(values).toFixed(2)} | ${percentile(values, 0.1).toFixed(2)} | ` +
          `${median(ms).toFixed(2)} | ${percentile(ms, 0.9).toFixed(2)} |`
      )
    }
    lines.push("")
    if ("program" in reference) {
      // Each run's kernel figure against the reference's in the same rounds: the machine's drift cancels.
      const reference = figures.get(IN_PROCESS)!
      const ratio = (name: string) => median(figures.get(name)!.map((value, run) => value / reference[run]!))
      const own = Math.max(...[1, 2].map((threads) => gbps(subprocesses[threads - 1]!.name)))
      const ratioToOwn = (name: string) => gbps(name) / own
      lines.push(
        `streaming reference: C a[i] += b[i] in this process, ${gbps(IN_PROCESS).toFixed(2)} GB/s (median)`,
        `ratio to it (median of the runs' ratios): average N = 4 ${ratio("native average, N = 4").toFixed(2)}, ` +
          `N = 8 ${ratio("native average, N = 8").toFixed(2)}, add ${ratio("native add (acc += x)").toFixed(2)}, ` +
          `TypeScript N = 4 ${ratio("TypeScript loop average, N = 4").toFixed(2)} (target: average ≥ 0.80)`,
        `against the better own-process C median (${own.toFixed(2)} GB/s, other time slots): average N = 4 ` +
          `${ratioToOwn("native average, N = 4").toFixed(2)}, N = 8 ${ratioToOwn("native average, N = 8").toFixed(2)}`
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
    for (const [name] of noops) {
      const values = overhead.get(name)!
      lines.push(`| ${name} | ${values.length} | ${median(values).toFixed(2)} | ${percentile(values, 0.9).toFixed(2)} | ${Math.min(...values).toFixed(2)} |`)
    }
    return lines.join("\n")
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) console.log(await nativeKernels())
