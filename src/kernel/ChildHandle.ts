/**
 * A running child as the supervisor holds it: something that ends, and that
 * can be told to end. OS processes (`ProcessChild`) and actors (`ActorChild`)
 * both fit.
 *
 * Every signal goes through the handle, never through a pid copied out of it:
 * a handle refuses to signal a child that has already been reaped, so a
 * recycled pid can never be hit.
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { ChildExit } from "./ChildExit.ts"

export type StopMode = "kill" | "graceful"

export interface ChildHandle {
  /** For logs: "pid 4242", "actor coordinator". */
  readonly describe: string
  /** Completes when the child has ended, with how it ended. Never fails. */
  readonly exited: Effect.Effect<ChildExit>
  /**
   * End the child. `kill` is immediate; `graceful` asks first (SIGTERM, or the
   * end of an actor's mailbox) and kills after `grace`. Returns once the child
   * has ended; does nothing to a child that already has.
   */
  readonly stop: (mode: StopMode, grace: Duration.DurationInput) => Effect.Effect<void>
  /**
   * Optional: have `react` run once the child has ended (at once if it has),
   * by whoever ends it. Where given, the supervisor watches the child with it
   * instead of a fiber waiting on `exited` for the child's whole life (~4 KB
   * each: thousands of remote ranks). `react` must not wait for long.
   */
  readonly onExit?: (react: (exit: ChildExit) => Effect.Effect<void>) => Effect.Effect<void>
}
