/**
 * Waiting on a forked fiber's state rather than for a fixed time.
 */
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberStatus from "effect/FiberStatus"
import { eventually } from "./effect.ts"

/**
 * Waits until a forked fiber is parked: it ran as far as it could and now waits on something outside it (a
 * callback, a Deferred, a queue). A fiber's status is answered by the fiber itself between steps, so
 * "suspended" means it has reached that wait, not merely that it was forked.
 */
export const parked = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, what: string) =>
  eventually(Effect.map(Fiber.status(fiber), FiberStatus.isSuspended), what)
