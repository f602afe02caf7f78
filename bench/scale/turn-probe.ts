/**
 * The launcher's long event-loop turns, seen from inside: preloaded into the
 * launcher (`SCALE_LAUNCHER_FLAGS="--preload ./bench/scale/turn-probe.ts"`),
 * a 5 ms timer notes how late each of its ticks comes; a tick more than
 * 20 ms late means a turn (or a collection) held the thread that long. Each
 * such turn is appended to `COHORT_TURN_PROBE_FILE` as a JSON line: when it
 * ended, on the wall clock the benchmark reads too (`performance.timeOrigin +
 * now()`), and how long it held. Written as it is seen, not at exit: the
 * benchmark ends the launcher with a signal.
 */
import { appendFileSync } from "node:fs"

const TICK_MS = 5
const LONG_MS = 20
const file = process.env.COHORT_TURN_PROBE_FILE
let last = performance.now()
const timer = setInterval(() => {
  const now = performance.now()
  const held = now - last - TICK_MS
  if (held > LONG_MS && file !== undefined) appendFileSync(file, `${JSON.stringify({ endedAt: performance.timeOrigin + now, heldMs: held })}\n`)
  last = now
}, TICK_MS)
timer.unref()
