/**
 * A value one part of the run makes and parts made before it must reach.
 *
 * The run is built in phases, and a few reactions of an early phase belong to
 * a later one: a relay's report goes to the coordinator, a stop to the rank
 * supervisor, a rendezvous' failure to the supervisor again. A Handoff names
 * that dependency instead of leaving it to the order in which variables get
 * assigned: it is filled once, by the phase that makes the value, and a
 * reaction asks for it with `ifReady` (act if it is there; before, there is no
 * one to act: a relay cannot report before the world forms, a rank cannot run
 * before the supervisor starts it) or waits with `await`.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"

export interface Handoff<A> {
  /** What the value is, for the defect a second fill raises. */
  readonly name: string
  /** Filled once, by the phase that makes the value. */
  readonly fill: (value: A) => Effect.Effect<void>
  /** Act on the value if it is there; nothing otherwise. */
  readonly ifReady: (act: (value: A) => Effect.Effect<void>) => Effect.Effect<void>
  readonly await: Effect.Effect<A>
  readonly poll: Effect.Effect<Option.Option<A>>
  /** The value now, for a synchronous check (a gate's rule). */
  readonly now: () => Option.Option<A>
}

export const make = <A>(name: string): Effect.Effect<Handoff<A>> =>
  Effect.map(Deferred.make<A>(), (deferred) => {
    // Kept beside the Deferred so that a synchronous reader needs no fiber.
    let filled: Option.Option<A> = Option.none()
    return {
      name,
      fill: (value) =>
        Effect.suspend(() => {
          if (Option.isSome(filled)) return Effect.dieMessage(`${name} was handed over twice`)
          filled = Option.some(value)
          return Deferred.succeed(deferred, value)
        }),
      ifReady: (act) => Effect.suspend(() => (Option.isSome(filled) ? act(filled.value) : Effect.void)),
      await: Deferred.await(deferred),
      poll: Effect.sync(() => filled),
      now: () => filled
    }
  })
