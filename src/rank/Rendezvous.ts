/**
 * A rank's end of the rendezvous channel (backend `nccl`): it joins, makes
 * a unique id when the launcher asks it to (it is then the generator), and
 * hands the rank's code each generation it is a member of, and each
 * dissolution (`Reform`: abort the communicator, wait for the next one; or,
 * where NCCL can shrink, keep it until the next generation says whether it
 * is to be shrunk: see `GenerationCommunicator`).
 *
 * Loaded only by `nccl` ranks: it brings effect and the wire with it.
 */
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import { deadlines, netTimeoutScale, scaled } from "../config/NetTimeouts.ts"
import { scopedKeyFromHex } from "../wire/Keys.ts"
import * as Link from "../wire/Link.ts"
import { IdFailed, IdProvided, Join, rendezvousCodec } from "../wire/messages/RendezvousMessages.ts"
import type { HostEnvelope } from "../wire/messages/Envelope.ts"
import { build, type Built, discard } from "./GenerationCommunicator.ts"
import type { NcclMembership, RankCommunicator, Rendezvous } from "./RankContext.ts"

export interface RendezvousOptions {
  readonly envelope: HostEnvelope
  readonly rank: number
  readonly incarnation: number
  /** A fresh NCCL unique id (production: the native library's `ncclGetUniqueId`). */
  readonly makeId: () => Promise<Uint8Array>
}

/** Join the rendezvous; resolves once the launcher has the rank's link. */
export const connect = async (options: RendezvousOptions): Promise<Rendezvous> => {
  // The rank's own key, named by its number: it can join as this rank and as nothing else.
  const key = scopedKeyFromHex(options.envelope.rankKeyHex)
  if (key === undefined) throw new Error("the rank envelope's key is not 64 hex digits")
  const scope = Effect.runSync(Scope.make(ExecutionStrategy.sequential))
  const link = await Effect.runPromise(Link.dial({
    channel: "rendezvous",
    host: options.envelope.controller.host,
    port: options.envelope.controller.port,
    salt: key,
    keyId: String(options.rank),
    inbound: rendezvousCodec,
    outbound: rendezvousCodec,
    handshakeMs: scaled(deadlines.handshakeMs, netTimeoutScale())
  }).pipe(Scope.extend(scope)))
  const generations = Effect.runSync(Queue.unbounded<NcclMembership>())
  const reformListeners: Array<(generation: number, reason: string) => void> = []
  // Communicators cohort built, by generation: aborted when their generation dissolves, unless shrinkable.
  const built = new Map<number, Built>()
  /** A dissolved generation's communicator, kept (not aborted) for the next generation to shrink. */
  let held: RankCommunicator | undefined
  /** Abort what was held for a shrink that will not come (its generation is over, its peers may be dead). */
  const letGo = Effect.suspend(() => {
    const previous = held
    held = undefined
    return previous === undefined ? Effect.void : discard(previous)
  })
  /** What the rank's stderr says of its communicators (the shrink's line is what gpu-check looks for). */
  const say = (line: string) => console.error(`cohort rank ${options.rank}: ${line}`)
  const ended = Effect.runSync(Deferred.make<never, Error>())

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
              worldSize: message.members.length,
              shrinkOf: message.shrinkOf
            })
          }
          break
        }
        case "Reform": {
          const dissolved = built.get(message.generation)
          built.delete(message.generation)
          if (dissolved?.shrinkable === true) {
            // Kept for the next generation: if it is this one less the dead, the survivors shrink it.
            yield* letGo
            held = dissolved.communicator
          } else if (dissolved !== undefined) {
            yield* Effect.ignore(dissolved.communicator.communicator.abort)
          }
          for (const listener of reformListeners) listener(message.generation, message.reason)
          break
        }
        default:
          break
      }
    }
  }).pipe(Effect.catchAllCause((cause) => {
    const failure = Cause.failureOption(cause)
    const why = failure._tag === "Some" ? failure.value.message : Cause.pretty(cause).split("\n")[0]
    return Deferred.fail(ended, new Error(`the rendezvous link ended: ${why}`))
  }))
  // Owned by the link's scope (closed by `close`): a defect ends the rendezvous like a lost link, never unseen.
  Effect.runSync(Effect.forkIn(serve, scope))

  /** The next generation, or why none will come. */
  const next = (): Promise<NcclMembership> =>
    Effect.runPromise(Effect.raceFirst(Queue.take(generations), Deferred.await(ended)))

  return {
    next,
    communicator: async () => {
      const membership = await next()
      const parent = held
      held = undefined
      const made = await build(membership, parent, say)
      built.set(membership.generation, made)
      return made.communicator
    },
    onReform: (listener) => void reformListeners.push(listener),
    pendingError: async () => {
      for (const { communicator } of built.values()) {
        const code = await communicator.asyncError().catch(() => 0)
        if (code !== 0) return code
      }
      return 0
    },
    close: async () => {
      for (const { communicator } of built.values()) await communicator.close()
      await Effect.runPromise(letGo)
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  }
}

/** The production id source: `ncclGetUniqueId` through the native library; rejects with why not. */
export const ncclUniqueId = async (): Promise<Uint8Array> => {
  const Native = await import("../native/Native.ts")
  const made = await Effect.runPromise(Effect.either(Effect.flatMap(Native.load(), (native) => native.nccl.uniqueId)))
  if (made._tag === "Left") throw new Error(made.left.message)
  return made.right
}
