/**
 * A rank's end of the rendezvous channel (backend `nccl`): it joins, makes
 * a unique id when the launcher asks it to (it is then the generator), and
 * hands the rank's code each generation it is a member of, and each
 * dissolution (`Reform`: abort the communicator, wait for the next one).
 *
 * Loaded only by `nccl` ranks: it brings effect and the wire with it.
 */
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import { rendezvousCodec } from "../launcher/RendezvousGate.ts"
import { deadlines, netTimeoutScale, scaled } from "../../config/NetTimeouts.ts"
import { saltFromHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { IdFailed, IdProvided, Join } from "../../wire/RendezvousMessages.ts"
import type { HostEnvelope } from "../agent/Envelope.ts"
import type { NcclMembership, Rendezvous } from "./RankContext.ts"

export interface RendezvousOptions {
  readonly envelope: HostEnvelope
  readonly rank: number
  readonly incarnation: number
  /** A fresh NCCL unique id (production: the native library's `ncclGetUniqueId`). */
  readonly makeId: () => Promise<Uint8Array>
}

/** Join the rendezvous; resolves once the launcher has the rank's link. */
export const connect = async (options: RendezvousOptions): Promise<Rendezvous> => {
  const salt = saltFromHex(options.envelope.saltHex)
  if (salt === undefined) throw new Error("the host envelope's salt is not 32 hex digits")
  const scope = Effect.runSync(Scope.make(ExecutionStrategy.sequential))
  const link = await Effect.runPromise(Link.dial({
    channel: "rendezvous",
    host: options.envelope.controller.host,
    port: options.envelope.controller.port,
    salt,
    inbound: rendezvousCodec,
    outbound: rendezvousCodec,
    handshakeMs: scaled(deadlines.handshakeMs, netTimeoutScale())
  }).pipe(Scope.extend(scope)))
  const generations = Effect.runSync(Queue.unbounded<NcclMembership>())
  const reformListeners: Array<(generation: number, reason: string) => void> = []
  let ended: string | undefined
  const waiting: Array<(error: Error) => void> = []

  const serve = Effect.gen(function*() {
    yield* link.send(new Join({ rank: options.rank, incarnation: options.incarnation }))
    while (true) {
      const message = yield* link.receive
      switch (message._tag) {
        case "ProvideId": {
          const made = yield* Effect.either(Effect.tryPromise(() => options.makeId()))
          yield* link.send(made._tag === "Right"
            ? new IdProvided({ generation: message.generation, id: made.right })
            : new IdFailed({ generation: message.generation, reason: made.left.error instanceof Error ? made.left.error.message : String(made.left.error) }))
          break
        }
        case "Ready": {
          const position = message.members.indexOf(options.rank)
          if (position >= 0) {
            yield* Queue.offer(generations, {
              generation: message.generation,
              id: message.id,
              members: message.members,
              rank: position,
              worldSize: message.members.length
            })
          }
          break
        }
        case "Reform":
          for (const listener of reformListeners) listener(message.generation, message.reason)
          break
        default:
          break
      }
    }
  }).pipe(Effect.catchAll((error) => Effect.sync(() => {
    ended = error.message
    for (const reject of waiting.splice(0)) reject(new Error(`the rendezvous link ended: ${error.message}`))
  })))
  Effect.runFork(serve)

  return {
    next: () =>
      ended !== undefined
        ? Promise.reject(new Error(`the rendezvous link ended: ${ended}`))
        : new Promise<NcclMembership>((resolve, reject) => {
          waiting.push(reject)
          void Effect.runPromise(Queue.take(generations)).then((membership) => {
            waiting.splice(waiting.indexOf(reject), 1)
            resolve(membership)
          })
        }),
    onReform: (listener) => void reformListeners.push(listener),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** The production id source: `ncclGetUniqueId` through the native library; rejects with why not. */
export const ncclUniqueId = async (): Promise<Uint8Array> => {
  const Native = await import("../../native/Native.ts")
  const made = await Effect.runPromise(Effect.either(Effect.flatMap(Native.load(), (native) => native.nccl.uniqueId)))
  if (made._tag === "Left") throw new Error(made.left.message)
  return made.right
}
