/**
 * GroupRendezvous: the actor that keeps the process groups' rendezvous store (groupStore.ts) for a job whose
 * ranks keep their own groups (the Python client's torch.distributed).
 *
 * It learns each generation from the coordinator's announcement itself (the `Group` order, told here before
 * it leaves for the ranks, so no member's call can come first), serves the members' store calls that arrive
 * up the relays' control links, and answers each down the same way. Every beat interval it asks the store
 * whether the generation is overdue; its laggards then go to `lose`, which gives them up with cause
 * `rendezvous` for the failure policy to judge. It holds no policy of its own: every event is stamped with the
 * time it was heard (`Clock`) and goes through the pure `step`.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Actor from "../../kernel/Actor.ts"
import type { StoreAnswer, StoreCall } from "../../wire/messages/CoordinatorMessages.ts"
import { initialState, step, type StoreEvent, type StoreInstruction } from "./groupStore.ts"

export interface GroupRendezvousOptions {
  /** How long after its announcement a generation must have formed (`deadlines.groupFormMs`, scaled). */
  readonly formWithinMs: number
  /** How often the deadline is checked. */
  readonly checkEveryMs: number
  readonly answer: (rank: number, answer: StoreAnswer) => Effect.Effect<void>
  /** Give up on these ranks (cause `rendezvous`): the failure policy decides what follows. */
  readonly lose: (ranks: ReadonlyArray<number>, reason: string) => Effect.Effect<void>
}

export interface GroupRendezvous {
  /** The coordinator announced this generation: from now on only its members' calls on its keys count. */
  readonly announce: (generation: number, members: ReadonlyArray<number>) => Effect.Effect<void>
  readonly call: (rank: number, call: StoreCall) => Effect.Effect<void>
  /** The rank formed the generation's groups. */
  readonly formed: (rank: number, generation: number) => Effect.Effect<void>
}

class Heard extends Data.TaggedClass("Heard")<{ readonly event: StoreEvent }> {}

export const make = (options: GroupRendezvousOptions): Effect.Effect<GroupRendezvous, never, Scope.Scope> =>
  Effect.gen(function*() {
    const state = yield* Ref.make(initialState({ formWithinMs: options.formWithinMs }))

    const execute = (instruction: StoreInstruction): Effect.Effect<void> => {
      switch (instruction._tag) {
        case "Answer":
          return options.answer(instruction.rank, instruction.answer)
        case "Lose":
          return Effect.zipRight(
            Effect.logWarning(`rank(s) ${instruction.ranks.join(", ")} lost: ${instruction.reason}`),
            options.lose(instruction.ranks, instruction.reason)
          )
        case "Warn":
          return Effect.logWarning(instruction.message)
      }
    }

    const actor = yield* Actor.spawn<Heard, never>({
      name: "group-rendezvous",
      handlers: {
        Heard: ({ event }) =>
          Effect.gen(function*() {
            const [instructions, next] = step(yield* Ref.get(state), event)
            yield* Ref.set(state, next)
            for (const instruction of instructions) yield* execute(instruction)
          })
      }
    })
    const hear = (event: (at: number) => StoreEvent): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (at) => Effect.ignore(actor.tell(new Heard({ event: event(at) }))))

    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(
      Effect.sleep(Duration.millis(options.checkEveryMs)),
      hear((at) => ({ _tag: "Tick", at }))
    )))
    return {
      announce: (generation, members) => hear((at) => ({ _tag: "Announced", generation, members, at })),
      call: (rank, call) => hear((at) => ({ _tag: "Called", rank, call, at })),
      formed: (rank, generation) => hear((at) => ({ _tag: "Formed", rank, generation, at }))
    }
  })
