/**
 * Actors as supervised children: an actor that stops after `stop` exited
 * cleanly; one that died of a defect crashed, and its Cause travels with the
 * exit to the supervisor.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import type { ActorRef, Message } from "./Actor.ts"
import type { ChildHandle } from "./ChildHandle.ts"
import { ChildExit } from "./ChildExit.ts"

export const fromActor = <M extends Message>(ref: ActorRef<M>): ChildHandle => {
  const exited = Effect.map(ref.await, (exit): ChildExit => {
    if (exit._tag === "Success") return ChildExit.Exited({ code: 0 })
    if (Cause.isInterruptedOnly(exit.cause)) return ChildExit.Signaled({ signal: "interrupt" })
    return ChildExit.Crashed({ detail: Cause.pretty(exit.cause) })
  })
  return {
    describe: `actor ${ref.name}`,
    exited,
    stop: (mode, grace) =>
      mode === "kill"
        ? Effect.zipRight(ref.interrupt, exited)
        : ref.stop.pipe(
          Effect.zipRight(Effect.timeout(exited, grace)),
          Effect.catchTag("TimeoutException", () => Effect.zipRight(ref.interrupt, exited)),
          Effect.asVoid
        )
  }
}
