/**
 * Stops asked of the run: signals (with `handleSignals`) and the caller's `interrupt`.
 *
 * Before the rank supervisor exists a stop ends the join window (`beforeRanks`);
 * from then on the supervisor stops the ranks in order, each with its grace.
 * A deliberate second signal while stopping is an insistence: by default the
 * process exits at once.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { onStops } from "../../kernel/ScopedStops.ts"
import { exitStatusFor, type StopRequest, type StopSignal } from "../../kernel/StopRequests.ts"
import type { Handoff } from "./Handoff.ts"
import type { RankSupervision } from "./RankSupervision.ts"
import type { LaunchOptions } from "./LaunchOptions.ts"

export interface RunStops {
  /** The stop asked for before the ranks were supervised, if one was. */
  readonly beforeRanks: Deferred.Deferred<StopRequest>
  /** Has anyone asked the run to stop? The stopping line then says how to insist. */
  readonly asked: () => boolean
  /** How to insist, for the stopping line ("press Ctrl-C again to exit at once"). */
  readonly hint: string | undefined
}

export const wire = (options: LaunchOptions, supervision: Handoff<RankSupervision>): Effect.Effect<RunStops, never, Scope.Scope> =>
  Effect.gen(function*() {
    const beforeRanks = yield* Deferred.make<StopRequest>()
    let asked = false
    const stop = (request: StopRequest) =>
      Effect.suspend(() => {
        asked = true
        return Effect.flatMap(supervision.poll, (ready) =>
          ready._tag === "Some"
            ? ready.value.abort(request)
            : Effect.asVoid(Deferred.succeed(beforeRanks, request)))
      })
    if (options.handleSignals === true) {
      const insist = options.onInsist ?? ((signal: StopSignal) => {
        process.stderr.write("cohort: run failed: interrupted again: exiting now without waiting for the ranks\n")
        process.exit(exitStatusFor(signal))
      })
      yield* onStops(stop, (signal) => Effect.sync(() => insist(signal)))
    }
    const { interrupt } = options
    if (interrupt !== undefined) {
      yield* Effect.forkScoped(Effect.flatMap(
        Effect.promise(() => interrupt),
        (request) => stop(typeof request === "string" ? { reason: request } : request)
      ))
    }
    return {
      beforeRanks,
      asked: () => asked,
      hint: options.stopHint ?? (options.handleSignals === true ? "press Ctrl-C again to exit at once" : undefined)
    }
  })
