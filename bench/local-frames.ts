/**
 * The relay's local frames: what one large frame from a rank (a checkpoint's
 * JSON in a `report`) costs the process that reads it.
 *
 * Each measurement is a fresh process (`--reader-side`) that listens on a
 * Unix socket, as the relay does, and feeds every read to a
 * `LocalFrameReader`; this process connects and writes one frame of a JSON
 * string of SIZE bytes. The reader side says its CPU time (user + system)
 * from the first byte to the decoded message, how many reads the frame took,
 * its peak resident memory (VmHWM) before the first byte and after the
 * message, and the bytes its reader copied when the reader counts them
 * (`copiedBytes`). A fresh process per measurement: VmHWM only grows.
 *
 * `--before FILE` measures a second LocalFrames.ts (another checkout's, e.g.
 * `git show HEAD:src/wire/LocalFrames.ts > /tmp/before/LocalFrames.ts`)
 * alternating with this checkout's; `BENCH_RUNS` (default 3) runs of each.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { encodeLocal } from "../src/wire/LocalFrames.ts"
import { median } from "./stats.ts"

const SIZES = [8 << 20, 32 << 20]
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const OWN_READER = resolve(import.meta.dir, "../src/wire/LocalFrames.ts")

interface Sample {
  readonly cpuMs: number
  readonly reads: number
  readonly hwmBeforeMb: number
  readonly hwmAfterMb: number
  readonly copiedBytes: number | undefined
}

const vmHwmMb = (): number => {
  const line = readFileSync("/proc/self/status", "utf8").split("\n").find((each) => each.startsWith("VmHWM:"))
  return Number(/(\d+)/.exec(line ?? "")?.[1] ?? Number.NaN) / 1024
}

/** The reading side: listen, read one frame, say what it cost (one JSON line on stdout), exit. */
const readerSide = async (socketPath: string, readerFile: string, size: number) => {
  const { LocalFrameReader } = (await import(readerFile)) as typeof import("../src/wire/LocalFrames.ts")
  const reader = new LocalFrameReader()
  const hwmBefore = vmHwmMb()
  let reads = 0
  let started: NodeJS.CpuUsage | undefined
  Bun.listen({
    unix: socketPath,
    socket: {
      data: (_socket, chunk) => {
        started ??= process.cpuUsage()
        reads += 1
        const messages = reader.push(chunk)
        if (messages.length === 0) return
        const spent = process.cpuUsage(started)
        if (typeof messages[0] !== "string" || messages[0].length !== size - 2) throw new Error("the frame came back wrong")
        const copied = (reader as { copiedBytes?: number }).copiedBytes
        const sample: Sample = { cpuMs: (spent.user + spent.system) / 1000, reads, hwmBeforeMb: hwmBefore, hwmAfterMb: vmHwmMb(), copiedBytes: copied }
        process.stdout.write(`${JSON.stringify(sample)}\n`, () => process.exit(0))
      }
    }
  })
  process.stdout.write("ready\n")
}

/** One measurement: a fresh reader process, one frame of `size` bytes of JSON written to it. */
const measure = async (readerFile: string, size: number): Promise<Sample> => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-local-frames-"))
  const socketPath = join(dir, "relay.sock")
  try {
    const child = Bun.spawn([process.execPath, import.meta.path, "--reader-side", socketPath, readerFile, String(size)], { stdout: "pipe", stderr: "inherit" })
    const lines = (async function*() {
      let text = ""
      for await (const chunk of child.stdout) {
        text += new TextDecoder().decode(chunk)
        let newline: number
        while ((newline = text.indexOf("\n")) !== -1) {
          yield text.slice(0, newline)
          text = text.slice(newline + 1)
        }
      }
    })()
    if ((await lines.next()).value !== "ready") throw new Error("the reader side did not start")
    // A JSON string of `size` bytes, quotes included: a checkpoint's state is one.
    const frame = encodeLocal("x".repeat(size - 2))
    let written = 0
    let drained: (() => void) | undefined
    const socket = await Bun.connect({ unix: socketPath, socket: { data: () => {}, drain: () => drained?.() } })
    while (written < frame.length) {
      written += socket.write(frame.subarray(written))
      if (written < frame.length) await new Promise<void>((resolve) => (drained = resolve))
    }
    const answer = (await lines.next()).value
    socket.end()
    await child.exited
    if (typeof answer !== "string") throw new Error("the reader side said nothing")
    return JSON.parse(answer) as Sample
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

export const localFrames = async (before?: string): Promise<string> => {
  const contenders = [{ label: "this checkout", file: OWN_READER }, ...(before === undefined ? [] : [{ label: "before", file: resolve(before) }])]
  const samples = new Map<string, Array<Sample>>()
  for (let run = 0; run < RUNS; run++) {
    for (const size of SIZES) {
      for (const { file, label } of contenders) {
        const key = `${label}|${size}`
        samples.set(key, [...(samples.get(key) ?? []), await measure(file, size)])
      }
    }
  }
  const rows = [...samples].map(([key, each]) => {
    const [label, size] = key.split("|")
    const copied = each[0]!.copiedBytes
    return `| ${Number(size) >> 20} MiB | ${label} | ${median(each.map((s) => s.cpuMs)).toFixed(0)} ms (${each.map((s) => s.cpuMs.toFixed(0)).join(", ")}) | ` +
      `${median(each.map((s) => s.reads))} | ${median(each.map((s) => s.hwmBeforeMb)).toFixed(0)} → ${median(each.map((s) => s.hwmAfterMb)).toFixed(0)} MB | ` +
      `${copied === undefined ? "–" : `${(copied / (1 << 20)).toFixed(1)} MiB`} |`
  })
  return [
    `Local frames, one frame per fresh reader process, ${RUNS} run(s), medians (each run's figure in brackets):`,
    "| frame | reader | CPU from first byte to message | reads | VmHWM before → after | copied by the reader |",
    "|---|---|---|---:|---|---|",
    ...rows
  ].join("\n")
}

if (import.meta.main) {
  const args = process.argv.slice(2)
  if (args[0] === "--reader-side") await readerSide(args[1]!, args[2]!, Number(args[3]))
  else console.log(await localFrames(args[0] === "--before" ? args[1] : undefined))
}
