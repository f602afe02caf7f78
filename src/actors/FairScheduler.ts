/**
 * The launcher's Effect scheduler: Effect's own (each fiber's work runs in
 * rounds of microtasks), except that it gives the thread back to the event
 * loop every few rounds. Effect's default runs up to 2,048 rounds before it
 * does: while a thousand hosts' fibers kept each other busy, the event loop
 * (new connections, the status endpoint, every socket's reads) waited seconds.
 */
import * as Scheduler from "effect/Scheduler"

/** Microtask rounds a fiber's tasks may run before the event loop gets a turn (`setImmediate`: after pending I/O). */
const ROUNDS_BEFORE_EVENT_LOOP = 32

const runnerOf = Scheduler.SchedulerRunner.cached((depth, drain) => {
  if (depth >= ROUNDS_BEFORE_EVENT_LOOP) setImmediate(() => drain(0))
  else queueMicrotask(() => drain(depth + 1))
})

export const fairScheduler: Scheduler.Scheduler = Scheduler.make((task, priority, fiber) => runnerOf(fiber).scheduleTask(task, priority))
