/**
 * State machines: the kernel under every actor that owns a fact.
 *
 * A machine is data: an `initial` state and a pure `step(state, event)` that
 * returns what must happen (its effects) and the next state. Everything with
 * a side — a child started, an order sent, a checkpoint written, a host's
 * link closed — is an effect value, carried out by an interpreter the owner
 * writes once. The policy (`decide`, `coordinate`, `membership`) is therefore
 * testable as a table of events and expected effects, with no runtime at all.
 *
 * `run` gives the stepper: it keeps the state, applies `step`, and carries
 * each effect out in order, in the stepping fiber, before the next event is
 * stepped. An effect may step the machine again (a checkpoint write reports
 * back whether it worked); that inner step finishes before the next effect of
 * the outer one. `observe` sees each step whole (before, event, effects,
 * after), for bookkeeping that belongs to no single effect.
 * `note` steps an event that has no effects synchronously, for a callback
 * outside Effect whose fact must be there before anything else runs (a
 * rank's last words over IPC, before its exit is read).
 *
 * `spawn` puts a stepper behind an actor's mailbox: every event tag steps the
 * machine in the actor's one fiber, so nobody else can step it, and `ask`
 * returns once the step and all its effects are done. Requests that only read
 * the state can sit beside the events.
 *
 * The state lives in a cell only the stepper writes; `current()` reads it
 * synchronously, for readers whose check cannot wait for a mailbox (a gate
 * deciding on a connection it is holding).
 *
 * `runSync` is the same stepper for an owner on a path that cannot take a
 * mailbox hop or an Effect per event: the relay answers a rank's reduction in
 * the turn its bytes arrive (a hop would add a fiber switch to every small
 * all-reduce). Its effects are carried out by plain functions, in order,
 * before `step` returns; whatever must wait goes to a fiber the interpreter
 * owns.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "./Actor.ts"

export interface Machine<S, E, F> {
  readonly initial: S
  readonly step: (state: S, event: E) => readonly [ReadonlyArray<F>, S]
}

/** One step, whole: what `observe` is shown. */
export interface Stepped<S, E, F> {
  readonly before: S
  readonly event: E
  readonly effects: ReadonlyArray<F>
  readonly after: S
}

export interface Interpreter<S, E, F, R> {
  /** Carry one effect out; `step` feeds an event back into the same machine (finished before this returns). */
  readonly carryOut: (effect: F, step: (event: E) => Effect.Effect<void, never, R>) => Effect.Effect<void, never, R>
  /** Sees every step once its effects are carried out. */
  readonly observe?: (stepped: Stepped<S, E, F>) => Effect.Effect<void, never, R>
}

export interface Stepper<S, E, R = never> {
  /** Step the machine and carry its effects out, in order, in this fiber. */
  readonly step: (event: E) => Effect.Effect<void, never, R>
  /**
   * Step, synchronously, an event whose step has no effects, from a callback that cannot run an Effect
   * (an IPC message, kept before the process's exit is read). One that does return effects is a defect.
   */
  readonly note: (event: E) => void
  /** The state now; only `step` and `note` change it. */
  readonly current: () => S
}

/** A stepper over `machine`: the one place its state changes. */
export const run = <S, E, F, R>(machine: Machine<S, E, F>, interpreter: Interpreter<S, E, F, R>): Stepper<S, E, R> => {
  let state = machine.initial
  const step = (event: E): Effect.Effect<void, never, R> =>
    Effect.suspend(() => {
      const before = state
      const [effects, after] = machine.step(before, event)
      // Written before any effect runs: an effect that reads the state (or steps again) sees this step's result.
      state = after
      const carried = Effect.forEach(effects, (effect) => interpreter.carryOut(effect, step), { discard: true })
      const observe = interpreter.observe
      return observe === undefined ? carried : Effect.zipRight(carried, Effect.suspend(() => observe({ before, event, effects, after })))
    })
  const note = (event: E) => {
    const [effects, after] = machine.step(state, event)
    if (effects.length > 0) throw new Error(`a noted event had effects to carry out: ${effects.length}`)
    state = after
  }
  return { step, note, current: () => state }
}

export interface SyncInterpreter<E, F> {
  /** Carry one effect out, at once; `step` feeds an event back (stepped whole before it returns). */
  readonly carryOut: (effect: F, step: (event: E) => void) => void
}

export interface SyncStepper<S, E> {
  /** Step the machine and carry its effects out before returning. */
  readonly step: (event: E) => void
  /** The state now; only `step` changes it. */
  readonly current: () => S
}

/** A synchronous stepper over `machine` (see the header): the one place its state changes. */
export const runSync = <S, E, F>(machine: Machine<S, E, F>, interpreter: SyncInterpreter<E, F>): SyncStepper<S, E> => {
  let state = machine.initial
  const step = (event: E): void => {
    const [effects, after] = machine.step(state, event)
    // As in `run`: an effect that reads the state, or steps again, sees this step's result.
    state = after
    for (const effect of effects) interpreter.carryOut(effect, step)
  }
  return { step, current: () => state }
}

/** Every tag of the machine's events, once: the compiler checks that none is missing. */
export type EventTags<E extends Actor.Message> = { readonly [K in E["_tag"]]: true }

export interface MachineActorOptions<S, E extends Actor.Message, F, H extends E, Q extends Actor.Message, R> extends Interpreter<S, E, F, R> {
  readonly name: string
  readonly machine: Machine<S, E, F>
  /** The events others may tell it (all of E, or those not kept for the interpreter's own feedback). */
  readonly events: EventTags<H>
  /**
   * Other messages the actor answers (reads of the state, a resource handed over with an event); they run in
   * the actor's fiber, so they may step the machine themselves.
   */
  readonly requests?: (stepper: Stepper<S, E, R>) => Actor.Handlers<Q, R>
  readonly capacity?: number
}

export interface MachineActor<S, H extends Actor.Message, Q extends Actor.Message> {
  readonly ref: Actor.ActorRef<H | Q>
  /** The state now, read synchronously (see the header). */
  readonly current: () => S
}

/** A machine behind a mailbox: its events step it in the actor's fiber, one at a time. */
export const spawn = <S, E extends Actor.Message, F, H extends E = E, Q extends Actor.Message = never, R = never>(
  options: MachineActorOptions<S, E, F, H, Q, R>
): Effect.Effect<MachineActor<S, H, Q>, never, Scope.Scope | Exclude<R, Scope.Scope>> =>
  Effect.gen(function*() {
    const stepper = run(options.machine, options)
    const stepping = Object.fromEntries(Object.keys(options.events).map((tag) => [tag, (event: H) => stepper.step(event)]))
    // Built from the tag list the compiler checked against H, so every event tag has its handler.
    const handlers = { ...stepping, ...options.requests?.(stepper) } as unknown as Actor.Handlers<H | Q, R>
    const ref = yield* Actor.spawn<H | Q, R>({ name: options.name, handlers, ...(options.capacity === undefined ? {} : { capacity: options.capacity }) })
    return { ref, current: stepper.current }
  })
