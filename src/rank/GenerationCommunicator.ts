/**
 * A rank's NCCL communicator for one generation, on its device (the only one
 * it sees: index 0). Where the generation is the one this rank holds less the
 * dead (`shrinkOf`) and NCCL can (2.27 or later), the held communicator is
 * shrunk (ncclCommShrink) and then released as NCCL's version requires
 * (`ShrinkRules.parentRelease`); otherwise, or when the shrink fails, the
 * held one is aborted and a new one built from the generation's unique id
 * (ncclCommInitRank), as before NCCL had shrink.
 *
 * Loaded only by `nccl` ranks, and the native library only once a
 * communicator is asked for.
 */
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import type { Communicator, NativeLibrary } from "../native/Native.ts"
import { parentRelease, shrinkFlag, shrinkFlagCode } from "../native/ShrinkRules.ts"
import type { NcclMembership, RankCommunicator } from "./RankContext.ts"
import { shrinkPlan } from "./ShrinkPlan.ts"

/** A communicator cohort built, and whether it may be kept past its generation for a shrink. */
export interface Built {
  readonly communicator: RankCommunicator
  /** The loaded NCCL has ncclCommShrink (2.27 or later): keep this past a `Reform` until the next `Ready`. */
  readonly shrinkable: boolean
}

/** A communicator and the Scope that destroys it (unless it was aborted). */
const wrap = (membership: NcclMembership, formedBy: RankCommunicator["formedBy"], communicator: Communicator, scope: Scope.CloseableScope): RankCommunicator => ({
  membership,
  formedBy,
  communicator,
  asyncError: () => Effect.runPromise(Effect.orDie(communicator.asyncError)),
  close: () => Effect.runPromise(Scope.close(scope, Exit.void))
})

/**
 * Abort a communicator held for nothing (its generation is over, its peers may be dead), then free its Scope
 * (a failure to, a defect, is the caller's to see).
 */
export const discard = (held: RankCommunicator): Effect.Effect<void> =>
  Effect.zipRight(Effect.ignore(held.communicator.abort), Effect.promise(held.close))

/**
 * The NCCL flag names, for the line a shrink prints (`scripts/gpu-check.sh` looks for it).
 */
const flagName = { default: "NCCL_SHRINK_DEFAULT", abort: "NCCL_SHRINK_ABORT" } as const

/**
 * ncclCommShrink of `held` into `membership`'s communicator, or why not (then `held` is still the
 * caller's). On success `held` is released: destroyed, or aborted where destroying would block.
 */
const shrink = (native: NativeLibrary, held: RankCommunicator, membership: NcclMembership, say: (line: string) => void) =>
  Effect.gen(function*() {
    const plan = shrinkPlan(held.membership, membership)
    if (plan._tag === "Refused") return yield* Effect.fail(plan.reason)
    const version = yield* native.nccl.version
    const parentError = yield* Effect.option(held.communicator.asyncError)
    const flag = shrinkFlag(parentError._tag === "Some" ? parentError.value : undefined)
    const scope = yield* Scope.make(ExecutionStrategy.sequential)
    const child = yield* Effect.onError(held.communicator.shrink(plan.excluded, flag).pipe(Scope.extend(scope)), () => Scope.close(scope, Exit.void))
    const release = parentRelease(version, flag)
    if (release === "abort") yield* Effect.ignore(held.communicator.abort)
    yield* Effect.promise(held.close)
    say(
      `generation ${membership.generation}: shrank generation ${held.membership.generation}'s NCCL communicator ` +
        `(excluded NCCL rank(s) ${plan.excluded.join(", ")}, ${flagName[flag]} = ${shrinkFlagCode[flag]}; parent ${release === "abort" ? "aborted" : "destroyed"}) ` +
        `to NCCL rank ${child.rank} of ${child.worldSize}`
    )
    return wrap(membership, "shrink", child, scope)
  }).pipe(Effect.mapError((error) => (typeof error === "string" ? error : error.message)))

/** ncclCommInitRank from the generation's id. */
const init = (native: NativeLibrary, membership: NcclMembership) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make(ExecutionStrategy.sequential)
    const communicator = yield* Effect.onError(
      native.nccl.communicator(membership.rank, membership.worldSize, membership.id).pipe(Scope.extend(scope)),
      () => Scope.close(scope, Exit.void)
    )
    return wrap(membership, "init", communicator, scope)
  })

/**
 * The communicator of `membership`; `held` is the last generation's, kept for a shrink (it is released
 * either way: shrunk, or aborted). Rejects with why no communicator could be had.
 */
export const build = async (membership: NcclMembership, held: RankCommunicator | undefined, say: (line: string) => void): Promise<Built> => {
  const Native = await import("../native/Native.ts")
  const made = await Effect.runPromise(Effect.either(Effect.gen(function*() {
    const native = yield* Native.load()
    yield* native.cuda.setDevice(0)
    // Asked of the library, never assumed: an NCCL that cannot answer cannot shrink either.
    const shrinkable = yield* Effect.orElseSucceed(native.nccl.shrinkSupport, () => false)
    if (held !== undefined) {
      // A generation that is no shrink simply builds anew; a shrink that fails says why first.
      if (shrinkable && membership.shrinkOf !== undefined) {
        const shrunk = yield* Effect.either(shrink(native, held, membership, say))
        if (shrunk._tag === "Right") return { communicator: shrunk.right, shrinkable }
        say(`generation ${membership.generation}: cannot shrink generation ${held.membership.generation}'s NCCL communicator (${shrunk.left}); building a new one from the generation's id`)
      }
      yield* discard(held)
    }
    return { communicator: yield* init(native, membership), shrinkable }
  })))
  if (made._tag === "Left") throw new Error(`cannot build the NCCL communicator of generation ${membership.generation}: ${made.left.message}`)
  return made.right
}
