/**
 * Launch-latency rank program for a cohort `entry:` job (bench/launch-latency.ts).
 * The moment the rank runtime calls the default export is the moment the rank
 * runs user code: it writes that wall-clock time, when its process started
 * (`performance.timeOrigin`) and its peak RSS so far, then returns (status 0).
 * The peak is VmHWM from /proc/self/status, in KiB: getrusage's ru_maxrss
 * would report the launcher's size, which Linux carries across the exec.
 */
import { readFileSync, writeFileSync } from "node:fs"
import type { RankContext } from "cohort"

export default (ctx: RankContext) => {
  const t = performance.timeOrigin + performance.now()
  const peakKb = Number(/VmHWM:\s*(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))?.[1])
  writeFileSync(`${process.env.LAUNCH_STAMP_DIR}/${process.pid}`, JSON.stringify({ t, origin: performance.timeOrigin, peakKb, rank: ctx.rank }))
}
