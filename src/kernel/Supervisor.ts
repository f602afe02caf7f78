/**
 * The supervisor: an actor that owns children and carries out what `decide`
 * tells it.
 *
 * It holds no policy of its own: `decide` is its machine on the kernel
 * (Machine.ts). Every event (a child's exit, formation, an abort, a restart
 * timer) goes through the pure `decide`, and the directives that come back
 * are executed here: start a child, stop some, schedule a
 * restart, report deaths, deliver the verdict. Time comes from `Clock`, so a
 * `TestClock` drives restarts in tests.
 *
 * Children start in order, each in a Scope of its own (one per incarnation).
 * Stops run side by side: closing the supervisor's Scope stops the children
 * that are left all at once, gracefully. Stops always go through the
 * child's handle, as its spec's `shutdown` says (a grace, or a brutal kill).
 *
 * The verdict is tied to the supervisor's own fiber: if the actor dies of a
 * defect (a bug in cohort, in `decide` or a directive's hook), its children
 * are stopped side by side and the verdict names the defect, so a dying
 * supervisor never leaves its caller waiting.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Actor from "./Actor.ts"
import * as Machine from "./Machine.ts"
import type { ChildHandle } from "./ChildHandle.ts"
import { ChildExit } from "./ChildExit.ts"
import type { ChildSpec } from "./ChildSpec.ts"
import { decide, Directive, initialState, SupervisionEvent, type SupervisorState } from "./policy/decide.ts"
import * as Shutdown from "./Shutdown.ts"
import type { Strategy } from "./policy/Strategy.ts"
import { Verdict } from "./policy/Verdict.ts"

export interface SupervisedChild extends ChildSpec {
  /** Start one incarnation; what it acquires lives in the incarnation's Scope. */
  readonly start: Effect.Effect<ChildHandle, unknown, Scope.Scope>
}

/** A child that carries exactly one rank: id `rank-N`, label `rank N`, transient, not significant. */
export const rankChild = (
  rank: number,
  start: SupervisedChild["start"],
  host: string | undefined,
  shutdown: Shutdown.Shutdown
): SupervisedChild => ({
  id: `rank-${rank}`,
  label: host === undefined ? `rank ${rank}` : `rank ${rank} of ${host}`,
  ranks: [rank],
  group: host,
  restart: "transient",
  significant: false,
  shutdown,
  start
})

export interface SupervisorOptions {
  readonly name: string
  readonly strategy: Strategy
  readonly children: ReadonlyArray<SupervisedChild>
  /** Seed of the backoff jitter (default: fixed, so runs are reproducible). */
  readonly seed?: number
  /** Sees every directive once it has been carried out: membership hooks, progress, tests. */
  readonly onDirective?: (directive: Directive) => Effect.Effect<void>
}

/** The events someone outside the supervisor may send it. */
export type ExternalEvent = Extract<
  SupervisionEvent,
  { readonly _tag: "CohortFormed" | "RanksLost" | "CoordinatorFailed" | "ActorFailed" | "RunDrained" | "AbortRequested" }
>

export interface Supervisor {
  readonly send: (event: ExternalEvent) => Effect.Effect<void>
  /** Elastic growth: these children carry ranks that joined the formed cohort; they start unless `decide` refuses them. */
  readonly join: (children: ReadonlyArray<SupervisedChild>) => Effect.Effect<void>
  /** Waits for the verdict: every child has ended for good. */
  readonly verdict: Effect.Effect<Verdict>
  readonly state: Effect.Effect<SupervisorState>
  /** The handle of a child's current incarnation, if it has one. */
  readonly handle: (id: string) => Effect.Effect<ChildHandle | undefined>
}

/** An event as `decide` takes it: with the moment it was stepped, from `Clock`. */
interface Stamped {
  readonly event: SupervisionEvent
  readonly now: number
}

export const start = (options: SupervisorOptions): Effect.Effect<Supervisor, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { strategy } = options
    const specs = new Map(options.children.map((child) => [child.id, child]))
    const handles = new Map<string, ChildHandle>()
    const verdict = yield* Deferred.make<Verdict>()
    // Parallel: closing it (the run interrupted, the supervisor gone) stops every child that is left side by side.
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.parallel)
    const background = <A, E>(effect: Effect.Effect<A, E>) => Effect.asVoid(Effect.forkIn(effect, scope))

    // Bound late: handlers send events to their own actor, always from a
    // background fiber, so a full mailbox can never block the actor on itself.
    let self: Actor.ActorRef<SupervisionEvent> | undefined
    const enqueue = (event: SupervisionEvent) =>
      self === undefined ? Effect.void : Effect.ignore(self.tell(event))

    const startChild = (id: string) =>
      Effect.gen(function*() {
        const spec = specs.get(id)!
        const incarnation = yield* Scope.fork(scope, ExecutionStrategy.sequential)
        const started = yield* spec.start.pipe(Scope.extend(incarnation), Effect.either)
        if (started._tag === "Left") {
          yield* Scope.close(incarnation, Exit.void)
          const detail = started.left instanceof Error ? started.left.message : String(started.left)
          yield* background(enqueue(SupervisionEvent.ChildExited({ id, exit: ChildExit.Crashed({ detail }) })))
          return
        }
        const handle = started.right
        handles.set(id, handle)
        const ended = (exit: ChildExit) =>
          Effect.sync(() => handles.get(id) === handle && handles.delete(id)).pipe(
            Effect.zipRight(Scope.close(incarnation, Exit.void)),
            Effect.zipRight(enqueue(SupervisionEvent.ChildExited({ id, exit })))
          )
        // Either way the reaction runs in a background fiber of `scope`; with
        // `onExit` that fiber exists only once the child has ended.
        yield* handle.onExit === undefined
          ? background(Effect.flatMap(handle.exited, ended))
          : handle.onExit((exit) => background(ended(exit)))
      })

    /** A child's own shutdown, from its spec (a handle exists only for a started child, whose spec is known). */
    const shutdownOf = (id: string): Shutdown.Shutdown => specs.get(id)!.shutdown
    const stopChildren = (ids: ReadonlyArray<string>, mode: "kill" | "graceful", graceMs: number | undefined) => {
      const policyGrace = graceMs === undefined ? undefined : Duration.millis(graceMs)
      const targets = ids.flatMap((id) => {
        const handle = handles.get(id)
        return handle === undefined ? [] : [{ handle, shutdown: Shutdown.inForce(shutdownOf(id), mode, policyGrace) }]
      })
      // Side by side, kill or graceful: a stop takes as long as the slowest child (at most its grace),
      // never the sum of their times. Ranks are peers; nothing here waits on another's end.
      return background(
        Effect.forEach(targets, ({ handle, shutdown }) => Shutdown.stop(handle, shutdown), {
          concurrency: "unbounded",
          discard: true
        })
      )
    }

    const execute = (directive: Directive): Effect.Effect<void> =>
      Directive.$match(directive, {
        Start: ({ id }) => startChild(id),
        Terminate: ({ graceMs, ids, mode }) => stopChildren(ids, mode, graceMs),
        Restart: ({ after, id }) =>
          background(Effect.zipRight(Effect.sleep(Duration.millis(after)), enqueue(SupervisionEvent.RestartDue({ id })))),
        ReportDead: ({ cause, ranks }) => Effect.logDebug(`rank(s) ${ranks.join(", ")} dead: ${cause}`),
        LimitCrossed: ({ message }) => Effect.logDebug(message),
        // The verdict carries the cause to the operator; said here too, it would be read twice.
        Escalate: ({ cause }) => Effect.logDebug(`escalating: ${cause}`),
        RuleMatched: () => Effect.void,
        Note: ({ message }) => Effect.logInfo(message),
        Verdict: ({ verdict: value }) => Deferred.succeed(verdict, value)
      })

    // The policy on the kernel: `decide` is the machine, each directive carried out (then shown to
    // `onDirective`) before the next. Events are stamped with the moment they are stepped.
    const stepper = Machine.run<SupervisorState, Stamped, Directive, never>(
      { initial: initialState(options.children, options.seed), step: (state, { event, now }) => decide(strategy, state, event, now) },
      {
        carryOut: (directive) =>
          options.onDirective === undefined ? execute(directive) : Effect.zipRight(execute(directive), options.onDirective(directive))
      }
    )
    const step = (event: SupervisionEvent) =>
      Effect.gen(function*() {
        // A joining child's start effect must be known before `decide` can ask for it.
        if (event._tag === "ChildrenJoined") {
          for (const child of event.children as ReadonlyArray<SupervisedChild>) if (!specs.has(child.id)) specs.set(child.id, child)
        }
        yield* stepper.step({ event, now: yield* Clock.currentTimeMillis })
      })

    self = yield* Actor.spawn<SupervisionEvent, never>({
      name: options.name,
      handlers: {
        Boot: step,
        ChildExited: step,
        CohortFormed: step,
        RanksLost: step,
        CoordinatorFailed: step,
        ActorFailed: step,
        RunDrained: step,
        AbortRequested: step,
        RestartDue: step,
        ChildrenJoined: step
      }
    })
    yield* self.tell(SupervisionEvent.Boot()).pipe(Effect.orDie)

    const ref = self
    /** The actor ended without a verdict: its children go, gracefully and together, and the defect is the verdict. */
    const died = Effect.flatMap(ref.await, (exit) =>
      Deferred.isDone(verdict).pipe(Effect.flatMap((done) =>
        done ? Deferred.await(verdict) : Effect.gen(function*() {
          const reason = Exit.isFailure(exit) ? Actor.describeDefect(exit.cause) : "it stopped without a verdict"
          yield* Effect.logError(`the supervisor ${options.name} failed: ${reason}: stopping every child`)
          yield* Effect.forEach(handles, ([id, handle]) => Shutdown.stop(handle, shutdownOf(id)), { concurrency: "unbounded", discard: true })
          return Verdict.Failed({ kind: "internal", message: `internal error: the supervisor ${options.name} failed: ${reason}` })
        })
      )))
    const supervisor: Supervisor = {
      send: (event) => Effect.ignore(ref.tell(event)),
      join: (children) => Effect.ignore(ref.tell(SupervisionEvent.ChildrenJoined({ children }))),
      verdict: Effect.raceFirst(Deferred.await(verdict), died),
      state: Effect.sync(stepper.current),
      handle: (id) => Effect.sync(() => handles.get(id))
    }
    return supervisor
  }).pipe(Effect.annotateLogs({ module: "actors", actor: options.name }))
