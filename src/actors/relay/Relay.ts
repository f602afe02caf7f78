/**
 * The relay: one per host, started by its agent before the ranks.
 *
 * It registers the host's ranks with the launcher over the control channel
 * and holds that link for the run. The byte routing and the per-host fold of
 * the CPU data plane build on this link (training issue). The relay leaves
 * when the launcher closes the link (the run is over), when its agent goes
 * (IPC disconnect) or on SIGTERM.
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { controlCodec } from "../launcher/ControlGate.ts"
import { RelayHello } from "../../wire/ControlMessages.ts"
import { saltFromHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import type { RelaySpec } from "../agent/Envelope.ts"

export class RelayError extends Data.TaggedError("RelayError")<{ readonly reason: string }> {
  override get message(): string {
    return this.reason
  }
}

/** Register with the launcher, then serve until the link ends. */
export const run = (spec: RelaySpec, handshakeMs: number): Effect.Effect<void, RelayError | Link.LinkError, Scope.Scope> =>
  Effect.gen(function*() {
    const salt = saltFromHex(spec.saltHex)
    if (salt === undefined) return yield* new RelayError({ reason: "the relay spec's salt is not 32 hex digits" })
    const link = yield* Link.dial({
      channel: "control",
      host: spec.controller.host,
      port: spec.controller.port,
      salt,
      inbound: controlCodec,
      outbound: controlCodec,
      handshakeMs
    })
    yield* link.send(new RelayHello({ host: spec.host, ranks: spec.ranks }))
    const answer = yield* link.receive.pipe(
      Effect.timeoutFail({
        duration: Duration.millis(handshakeMs),
        onTimeout: () => new RelayError({ reason: `the launcher did not answer the relay's registration within ${handshakeMs} ms` })
      })
    )
    if (answer._tag !== "RelayAccepted") {
      return yield* new RelayError({ reason: `the launcher refused the relay: ${answer._tag === "RelayRejected" ? answer.reason : answer._tag}` })
    }
    yield* Effect.logDebug(`registered ranks ${spec.ranks.join(", ")} with the launcher`)
    // Served until the launcher closes the link: that is the end of the run, not an error.
    yield* Effect.flip(Effect.forever(link.receive))
  })
