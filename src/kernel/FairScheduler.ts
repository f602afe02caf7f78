/**
 * The launcher's Effect scheduler: Effect's own (each fiber's work runs in
 * rounds of microtasks), except that it gives the thread back to the event
 * loop every few rounds, and whenever the Effect work of one turn of the event
 * loop has taken TURN_BUDGET_MS. Effect's default runs up to 2,048 rounds
 * before it does: while a thousand hosts' fibers kept each other busy, the
 * event loop (new connections, the status endpoint, every socket's reads)
 * waited seconds. A count of rounds per fiber alone still let a thousand busy
 * fibers hold the thread for one to two seconds at a time (each had its 32
 * rounds, one after the other, within one turn): the budget is for all of
 * them together.
 */
import * as Scheduler from "effect/Scheduler"

/** Microtask rounds a fiber's tasks may run before the event loop gets a turn (`setImmediate`: after pending I/O). */
const ROUNDS_BEFORE_EVENT_LOOP = 32

/** Effect work, all fibers together, after which the rest waits for the event loop's next turn. */
export const TURN_BUDGET_MS = 4

/** When this turn's Effect work began; `turnOpen` until the event loop has had its next turn. */
let turnStartedAt = 0
let turnOpen = false
const endTurn = () => {
  turnOpen = false
}

const runnerOf = Scheduler.SchedulerRunner.cached((depth, drain) => {
  const now = performance.now()
  if (!turnOpen) {
    // The first drain since the event loop's last turn: the budget starts now, and ends once the loop comes round
    // (an immediate queued now runs before any queued after it, so the deferred drains find a fresh budget).
    turnOpen = true
    turnStartedAt = now
    setImmediate(endTurn)
  }
  if (depth >= ROUNDS_BEFORE_EVENT_LOOP || now - turnStartedAt >= TURN_BUDGET_MS) setImmediate(() => drain(0))
  else queueMicrotask(() => drain(depth + 1))
})

export const fairScheduler: Scheduler.Scheduler = Scheduler.make((task, priority, fiber) => runnerOf(fiber).scheduleTask(task, priority))
