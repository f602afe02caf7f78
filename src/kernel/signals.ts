/**
 * The process's stop signals as stop requests.
 *
 * `listenForStops` turns SIGINT, SIGTERM and SIGHUP into one orderly stop
 * (`StopRequests.react` tells copies of one stop from an operator insisting),
 * and optionally watches the parent process: a launcher whose `bun run` or
 * wrapper script died (even by SIGKILL) stops as for SIGTERM instead of
 * running on with nobody to report to.
 *
 * SIGHUP that was ignored when the process started (`nohup`) stays ignored:
 * listening for it would undo what the user asked for. Node has no way to
 * ask a signal's disposition, so it is read from /proc/self/status.
 *
 * Plain callbacks, not Effects, and nothing of effect imported: the CLI
 * listens before the launcher (and effect) has even loaded, so a Ctrl-C
 * during start-up is not lost. `ScopedStops` is the same for a Scope.
 */
import { readFileSync } from "node:fs"
import { type Delivery, react, type StopRequest, type StopSignal, stopSignals } from "./StopRequests.ts"

/** Whether this process started with SIGHUP ignored (`nohup`); false where /proc cannot say. */
export const hangupIgnored = (): boolean => {
  try {
    const mask = /^SigIgn:\s*([0-9a-f]+)$/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1]
    // SIGHUP is signal 1: the lowest bit of the mask.
    return mask !== undefined && (parseInt(mask.slice(-1), 16) & 1) === 1
  } catch {
    return false
  }
}

/** How often the parent is looked at: a killed wrapper is noticed within this. */
const PARENT_CHECK_MS = 200

export interface StopListeners {
  /** The first delivery of a stop (or the parent's death): stop in order. */
  readonly stop: (request: StopRequest) => void
  /** A deliberate later signal: the operator wants out now. */
  readonly insist: (signal: StopSignal) => void
  /** Also stop when the parent process exits (default false). Off under `nohup` and for a child of init. */
  readonly watchParent?: boolean
}

/** Start listening; returns the function that stops listening. */
export const listenForStops = (listeners: StopListeners): () => void => {
  let first: Delivery | undefined
  const listened = stopSignals.filter((signal) => signal !== "SIGHUP" || !hangupIgnored())
  const onSignal = (signal: NodeJS.Signals) => {
    const delivery: Delivery = { signal: signal as StopSignal, at: performance.now() }
    const reaction = react(first, delivery)
    first ??= delivery
    if (reaction._tag === "Stop") listeners.stop({ reason: `received ${reaction.signal}`, signal: reaction.signal })
    else if (reaction._tag === "Insist") listeners.insist(reaction.signal)
  }
  for (const signal of listened) process.on(signal, onSignal)
  // A parent that is init (or none: PID 1 in a container) is not a launcher's wrapper; nohup asks to outlive it.
  const parent = process.ppid
  const watch = listeners.watchParent === true && parent > 1 && listened.includes("SIGHUP")
  const timer = watch
    ? setInterval(() => {
      if (process.ppid === parent) return
      clearInterval(timer)
      // Like SIGTERM: what started the run is gone, and nobody is left to press Ctrl-C.
      if (first === undefined) {
        first = { signal: "SIGTERM", at: performance.now() }
        listeners.stop({ reason: `its parent process (pid ${parent}) exited`, signal: "SIGTERM" })
      }
    }, PARENT_CHECK_MS)
    : undefined
  timer?.unref()
  return () => {
    for (const signal of listened) process.off(signal, onSignal)
    if (timer !== undefined) clearInterval(timer)
  }
}
