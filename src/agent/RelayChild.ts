/**
 * The host's relay as a child of the agent's supervisor.
 *
 * It is a child from the start, so the policy (`HostPolicy`: it is
 * significant) applies to it from the start. Its process starts only once
 * `ready`, when every rank of the host runs user code: loading a relay takes
 * a few hundred milliseconds of CPU that the ranks need more for their own
 * start-up. A relay stopped before then never starts, and ends cleanly.
 *
 * It is stopped last. The ranks talk to it until they end, and the relay is
 * only ever stopped together with the host's ranks (the policy stops every
 * child at once, and so does closing the Scope). So it waits for the ranks
 * before it is signalled.
 */
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import type { ChildHandle, StopMode } from "../kernel/ChildHandle.ts"
import { ChildExit } from "../kernel/ChildExit.ts"
import * as ProcessChild from "../kernel/ProcessChild.ts"
import type { SupervisedChild } from "../kernel/Supervisor.ts"
import type { HostKeyMessage } from "../wire/messages/Envelope.ts"
import { relaySpec } from "./HostPolicy.ts"

/** How a relay ended on its own: it could not be started, or its process exited. */
export type RelayEnd = Data.TaggedEnum<{
  NotStarted: { readonly reason: string }
  Exited: { readonly exit: ChildExit }
}>
export const RelayEnd = Data.taggedEnum<RelayEnd>()

export interface RelayOptions {
  readonly host: string
  readonly process: ProcessChild.ProcessSpec
  /** Sent over IPC, not put in its environment: the ranks can read /proc/<pid>/environ. */
  readonly key: HostKeyMessage
  /** Completes once every rank of the host runs user code. */
  readonly ready: Effect.Effect<void>
  /** Completes once every rank of the host that is running now has ended. */
  readonly ranksEnded: Effect.Effect<void>
  /**
   * Runs when the relay ends on its own (not when it is stopped), before its
   * supervisor hears of it. The agent uses it for its own log lines and for
   * its wait for RunEnded.
   */
  readonly endedAlone: (end: RelayEnd) => Effect.Effect<void>
}

export const relayChild = (options: RelayOptions): SupervisedChild => ({
  // The supervisor stops it as its process is stopped when its Scope closes.
  ...relaySpec(options.host, options.process.shutdown),
  start: Effect.gen(function*() {
    const incarnation = yield* Effect.scope
    const exited = yield* Deferred.make<ChildExit>()
    let relay: ProcessChild.ProcessChild | undefined
    let stopping = false
    const launch = Effect.gen(function*() {
      yield* options.ready
      const spawned = yield* ProcessChild.spawn({ ...options.process, label: `the relay of ${options.host}` })
      relay = spawned
      // Added after the process's own release, so it runs first: a relay still running when its Scope
      // closes outlives the ranks. One that has ended already (its Scope closes as its end is handled) waits for nothing.
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(Deferred.isDone(exited), (ended) =>
          ended ? Effect.void : Effect.zipRight(Effect.sync(() => (stopping = true)), options.ranksEnded)
        )
      )
      yield* Effect.try({
        try: () => spawned.subprocess.send(options.key),
        catch: (error) => new Error(`cannot hand the relay its key: ${String(error)}`)
      })
      return spawned
    })
    const endedAlone = (end: RelayEnd) => (stopping ? Effect.void : options.endedAlone(end))
    const life = launch.pipe(
      Effect.matchEffect({
        onFailure: (error) => Effect.as(endedAlone(RelayEnd.NotStarted({ reason: error.message })), ChildExit.Crashed({ detail: error.message })),
        onSuccess: (spawned) => Effect.tap(spawned.exited, (exit) => endedAlone(RelayEnd.Exited({ exit })))
      }),
      Effect.flatMap((exit) => Deferred.succeed(exited, exit)),
      Scope.extend(incarnation)
    )
    const living = yield* Effect.forkIn(life, incarnation)

    const stop = (mode: StopMode, grace: Duration.DurationInput) =>
      Effect.gen(function*() {
        stopping = true
        // A relay that has not started yet never will.
        if (relay === undefined) yield* Fiber.interrupt(living)
        yield* options.ranksEnded
        if (relay === undefined) return yield* Effect.asVoid(Deferred.succeed(exited, ChildExit.Exited({ code: 0 })))
        yield* relay.stop(mode, grace)
        // The living fiber may have been interrupted just after the spawn: the exit is settled here too.
        yield* Deferred.succeed(exited, yield* relay.exited)
      })
    const handle: ChildHandle = { describe: `relay of ${options.host}`, exited: Deferred.await(exited), stop }
    return handle
  })
})
