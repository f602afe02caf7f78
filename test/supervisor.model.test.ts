/**
 * Model-based tests of the `Supervisor` with real processes.
 *
 * The pure `decide` is the model, the `Supervisor` running real child
 * processes (test/fixtures/child-fixture.ts) is the system. fast-check
 * generates a strategy, 3–5 children and a sequence of commands; every command
 * causes exactly one event in the system (a child told to `exit 3` gives
 * `ChildExited { Exited 3 }`, a SIGKILL from outside `Signaled SIGKILL`, a
 * SIGTERM from outside `Exited 143`: the fixture exits 143 on SIGTERM, …) and
 * the model is fed the same event, plus the exits that the `Terminate`
 * directives it returns will cause (graceful: `Exited 143`; kill: `Signaled
 * SIGKILL`) and the `RestartDue` events that the `Restart` directives
 * schedule once `TestClock` passes their time. The supervisor stops children
 * side by side, so those exits reach it in no fixed order: the model feeds
 * them in the order given, and the directives they give may come in any order.
 *
 * After each command the test waits (real-time polling, the processes run on
 * real time) until the system has settled, then holds it to the model:
 * - the directives the system executed (`onDirective`) equal the model's,
 *   in order, Notes included, except that the directives of exits caused
 *   together by one event (stops side by side) may come in any order;
 * - `supervisor.state` equals the model's state (statuses, restartAt, dead
 *   ranks, flags, failure, restart log, jitter seed, verdict);
 * - each child the model says runs has exactly one live, ready process (the
 *   latest of its incarnations, which is what `supervisor.handle` returns);
 *   every other process the child ever had is gone (reaped, no zombie), so a
 *   child waiting to restart has no live process until the clock passes its
 *   restart, and then runs under a new pid;
 * - `TestClock` holds a sleep for every restart the model still expects.
 * At the end (when the model reaches a verdict, or after a teardown: abort, or
 * drain and clean exits) the system's verdict equals the model's and no process
 * of the run is left, before and after the supervisor's Scope closes.
 *
 * Time: each run has its own TestContext, so restarts fire only on
 * `TestClock.adjust`, and `now` in the model is the TestClock time. Every
 * `fc.assert` is seeded.
 */
import { describe, expect, test } from "bun:test"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import * as TestContext from "effect/TestContext"
import * as fc from "fast-check"
import { ChildExit } from "../src/actors/ChildExit.ts"
import type { ChildSpec } from "../src/actors/ChildSpec.ts"
import { decide, type Directive, initialState, SupervisionEvent, type SupervisorState } from "../src/actors/decide.ts"
import * as ProcessChild from "../src/actors/ProcessChild.ts"
import {
  Backoff,
  Count,
  Elastic,
  KillAll,
  Percent,
  Phased,
  Restart,
  type RestartType,
  type Simple,
  type Strategy
} from "../src/actors/Strategy.ts"
import * as Supervisor from "../src/actors/Supervisor.ts"
import { eventually } from "./support/effect.ts"
import { collectLines, isGone, isRunning } from "./support/processes.ts"

const childFixture = `${import.meta.dir}/fixtures/child-fixture.ts`

/** How long the system may take to settle after one command (real time). */
const SETTLE_MS = 5_000
const TEST_TIMEOUT = 120_000
const MAX_COMMANDS = 15
const RUNS = 60

/** Seeded; a failure stops being shrunk after 90 s (each failing run waits SETTLE_MS) and is reported as it stands. */
const seeded = (seed: number, numRuns: number): fc.Parameters<unknown> => ({
  seed,
  numRuns,
  includeErrorInReport: true,
  plugins: [fc.interruptAfterTimeLimit(90_000, { failOnInterrupt: true })]
})

const quiet = process.env.COHORT_TEST_LOGS ? Logger.pretty : Logger.minimumLogLevel(LogLevel.None)

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** Sleep in real time (not the TestClock). */
const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

// ---------------------------------------------------------------------------
// Setup: strategy and children
// ---------------------------------------------------------------------------

interface Setup {
  readonly strategy: Strategy
  /** One per child, in start order: 3–5 children. */
  readonly restartTypes: ReadonlyArray<RestartType>
  /** Children c0 and c1 form group "g", c0 is significant (it takes the group with it under Elastic). */
  readonly grouped: boolean
  /** The backoff jitter seed. */
  readonly seed: number
  /** How a run that has not ended by itself is ended. */
  readonly teardown: "abort" | "drain"
}

const specsOf = (setup: Setup): ReadonlyArray<ChildSpec> =>
  setup.restartTypes.map((restart, i) => ({
    id: `c${i}`,
    label: `child ${i}`,
    ranks: [i],
    group: setup.grouped && i < 2 ? "g" : undefined,
    restart,
    significant: setup.grouped && i === 0
  }))

/**
 * kill_all without a grace (the supervisor's), with `grace: 0` (SIGKILL at once), and with a grace of its
 * own: the fixture ends at SIGTERM at once, and under TestClock no grace runs out anyway.
 */
const killAllArb: fc.Arbitrary<Simple> = fc.oneof(
  fc.constant(new KillAll()),
  fc.constant(new KillAll({ grace: 0 })),
  fc.integer({ min: 1, max: 30_000 }).map((grace) => new KillAll({ grace }))
)

const elasticArb: fc.Arbitrary<Simple> = fc
  .option(
    fc.oneof(
      fc.integer({ min: 0, max: 4 }).map((n) => new Count({ n })),
      fc.constantFrom(0, 20, 34, 50, 75, 100).map((p) => new Percent({ p }))
    ),
    { nil: undefined }
  )
  .map((maxFailure) => (maxFailure === undefined ? new Elastic({}) : new Elastic({ maxFailure })))

const restartArb: fc.Arbitrary<Simple> = fc
  .record({
    maxRestarts: fc.integer({ min: 1, max: 3 }),
    within: fc.integer({ min: 1_000, max: 10_000 }),
    initial: fc.integer({ min: 10, max: 500 }),
    extra: fc.integer({ min: 0, max: 1_500 }),
    factor: fc.double({ min: 1, max: 3, noNaN: true }),
    jitter: fc.double({ min: 0, max: 0.5, noNaN: true }),
    scope: fc.constantFrom("one" as const, "all" as const)
  })
  .map(({ extra, factor, initial, jitter, ...rest }) =>
    new Restart({ ...rest, backoff: new Backoff({ initial, max: initial + extra, factor, jitter }) })
  )

const simpleArb: fc.Arbitrary<Simple> = fc.oneof(killAllArb, elasticArb, restartArb)

const phasedArb: fc.Arbitrary<Strategy> = fc
  .record({ beforeFormation: simpleArb, afterFormation: simpleArb })
  .map((phases) => new Phased(phases))

const setupArb = (strategy: fc.Arbitrary<Strategy>): fc.Arbitrary<Setup> =>
  fc.record({
    strategy,
    restartTypes: fc.array(
      fc.oneof(
        { arbitrary: fc.constant<RestartType>("transient"), weight: 3 },
        { arbitrary: fc.constant<RestartType>("permanent"), weight: 2 },
        { arbitrary: fc.constant<RestartType>("temporary"), weight: 1 }
      ),
      { minLength: 3, maxLength: 5 }
    ),
    grouped: fc.boolean(),
    seed: fc.integer({ min: 0, max: 0x7fffffff }),
    teardown: fc.constantFrom("abort" as const, "drain" as const)
  })

// ---------------------------------------------------------------------------
// The model: decide, fed the events the system receives
// ---------------------------------------------------------------------------

interface Timer {
  readonly id: string
  readonly due: number
  /** Registration order: TestClock fires sleeps due at the same time newest first. */
  readonly seq: number
}

class Model {
  state: SupervisorState
  /** TestClock time, ms. */
  now = 0
  /** Restart directives whose RestartDue has not fired yet. */
  timers: Array<Timer> = []
  private seq = 0
  readonly directives: Array<Directive> = []
  /**
   * Ranges `[from, to)` of `directives` given by exits that one event's stops caused together: the
   * supervisor stops children side by side, so their exits (and these directives) come in any order.
   */
  readonly unordered: Array<{ readonly from: number; readonly to: number }> = []
  /** Start directives per child: the number of incarnations it must have had. */
  readonly starts = new Map<string, number>()
  /** How each ended incarnation of each child ended, oldest first. */
  readonly exits = new Map<string, Array<ChildExit>>()

  constructor(readonly strategy: Strategy, children: ReadonlyArray<ChildSpec>, seed: number) {
    this.state = initialState(children, seed)
  }

  get done(): boolean {
    return this.state.verdict !== undefined
  }

  /**
   * Feed one event, then the exits its Terminate directives cause: the
   * children stopped gracefully end with 143 (the fixture's SIGTERM handler),
   * killed ones with SIGKILL. Every stop runs side by side, so the exits come
   * in no fixed order: they are fed in the order given, and what they give
   * (a restart each in a group restart, the verdict last) is marked unordered.
   * The exit of a child being stopped never stops another, so these are all.
   */
  feed(event: SupervisionEvent): void {
    const queue: Array<SupervisionEvent> = []
    this.decideOne(event, queue)
    // What follows is the stops' exits: they all run at once.
    const from = this.directives.length
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) this.decideOne(next, queue)
    if (this.directives.length - from > 1) this.unordered.push({ from, to: this.directives.length })
  }

  /** Decide one event; the exits its Terminate directives will cause go on `queue`. */
  private decideOne(event: SupervisionEvent, queue: Array<SupervisionEvent>): void {
    // Every exit fed here is a real process ending (of a child running or being stopped).
    if (event._tag === "ChildExited") this.exits.set(event.id, [...(this.exits.get(event.id) ?? []), event.exit])
    const [directives, state] = decide(this.strategy, this.state, event, this.now)
    this.state = state
    for (const directive of directives) {
      this.directives.push(directive)
      if (directive._tag === "Start") {
        this.starts.set(directive.id, (this.starts.get(directive.id) ?? 0) + 1)
      } else if (directive._tag === "Restart") {
        // A zero delay would fire at once, without the clock: the generators never give one.
        if (directive.after <= 0) throw new Error(`model: restart of ${directive.id} with a delay of ${directive.after}`)
        this.timers.push({ id: directive.id, due: this.now + directive.after, seq: this.seq++ })
      } else if (directive._tag === "Terminate") {
        const exit = directive.mode === "kill"
          ? ChildExit.Signaled({ signal: "SIGKILL" })
          : ChildExit.Exited({ code: 143 })
        for (const id of directive.ids) queue.push(SupervisionEvent.ChildExited({ id, exit }))
      }
    }
  }

  /**
   * Move the clock; restarts fall due by due time and, among restarts due at
   * the same time, the latest scheduled first. That is how TestClock runs
   * sleeps (newest first, sorted stably by wake time). The order of the timers
   * does not decide the order of the starts: the first `RestartDue` of a group
   * restart brings back every member that is due, in start order.
   */
  advance(ms: number): void {
    const target = this.now + ms
    for (;;) {
      const due = this.timers
        .filter((timer) => timer.due <= target)
        .sort((a, b) => a.due - b.due || b.seq - a.seq)[0]
      if (due === undefined) break
      this.timers = this.timers.filter((timer) => timer !== due)
      this.now = due.due
      this.feed(SupervisionEvent.RestartDue({ id: due.id }))
    }
    this.now = target
  }
}

// ---------------------------------------------------------------------------
// The system: a Supervisor of real processes
// ---------------------------------------------------------------------------

interface Incarnation {
  readonly pid: number
  readonly lines: ReadonlyArray<string>
  /** How the process ended, seen from outside the supervisor; undefined while it runs. */
  exit: ChildExit | undefined
}

interface Real {
  readonly run: <A>(effect: Effect.Effect<A>) => Promise<A>
  readonly supervisor: Supervisor.Supervisor
  /** Every process each child was started as, oldest first. */
  readonly incarnations: Map<string, Array<Incarnation>>
  /** What the supervisor carried out, as `onDirective` saw it. */
  readonly directives: Array<Directive>
  /** The commands so far, with the children they acted on (for failure reports). */
  readonly trace: Array<string>
}

const isReady = (incarnation: Incarnation) => incarnation.lines.includes(`ready ${incarnation.pid}`)

/** The state without the children's specs (the system's carry a `start` effect): everything else compared whole. */
const project = (state: SupervisorState) => ({
  ...state,
  children: state.children.map((child) => ({ id: child.spec.id, status: child.status, restartAt: child.restartAt }))
})

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

const key = (directive: Directive) => JSON.stringify(directive)

/** The directives with each unordered range (as far as it goes) sorted: any order of one compares equal. */
const canonical = (directives: ReadonlyArray<Directive>, unordered: Model["unordered"]): Array<Directive> => {
  const out = [...directives]
  for (const { from, to } of unordered) {
    if (from >= out.length) break
    const end = Math.min(to, out.length)
    out.splice(from, end - from, ...out.slice(from, end).sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0)))
  }
  return out
}

/**
 * Do the directives executed so far follow the model's: the same, in order, except within an unordered
 * range, where those executed must be some of the range's (counting repeats), in any order?
 */
const follows = (executed: ReadonlyArray<Directive>, model: Model): boolean => {
  if (executed.length > model.directives.length) return false
  const pools = new Map<number, { readonly to: number; readonly left: Array<string> }>()
  for (const { from, to } of model.unordered) pools.set(from, { to, left: model.directives.slice(from, to).map(key) })
  let pool: { readonly to: number; readonly left: Array<string> } | undefined
  for (let at = 0; at < executed.length; at++) {
    if (pool !== undefined && at >= pool.to) pool = undefined
    pool ??= pools.get(at)
    if (pool === undefined) {
      if (!same(executed[at], model.directives[at])) return false
      continue
    }
    const found = pool.left.indexOf(key(executed[at]!))
    if (found === -1) return false
    pool.left.splice(found, 1)
  }
  return true
}

/** Does `haystack` contain every element of `needles`, counting repeats? */
const containsAll = (haystack: ReadonlyArray<number>, needles: ReadonlyArray<number>) => {
  const left = [...haystack]
  return needles.every((needle) => {
    const at = left.indexOf(needle)
    if (at === -1) return false
    left.splice(at, 1)
    return true
  })
}

/** What still differs between system and model; empty once settled. */
const mismatches = (model: Model, real: Real) =>
  Effect.gen(function*() {
    const problems: Array<string> = []
    // A directive the model does not have (or has differently) is never going to go away.
    const executed = real.directives.length
    if (!follows(real.directives, model)) {
      expect(canonical(real.directives, model.unordered)).toEqual(canonical(model.directives.slice(0, executed), model.unordered))
      expect(executed).toBeLessThanOrEqual(model.directives.length)
      throw new Error(`directives out of order: ${JSON.stringify(real.directives)}; model: ${JSON.stringify(model.directives)}`)
    }
    if (executed < model.directives.length) problems.push(`directives: ${executed} of ${model.directives.length} executed`)

    const state = yield* real.supervisor.state
    if (!same(project(state), project(model.state))) problems.push("supervisor.state differs from the model's")

    for (const child of model.state.children) {
      const id = child.spec.id
      const incarnations = real.incarnations.get(id) ?? []
      const starts = model.starts.get(id) ?? 0
      if (incarnations.length !== starts) {
        problems.push(`${id}: ${incarnations.length} processes started, model says ${starts}`)
        continue
      }
      const live = child.status === "running" ? incarnations.at(-1) : undefined
      // How the ended ones ended: told to exit, signalled from outside, killed or SIGTERMed by the supervisor.
      const ended = incarnations.filter((incarnation) => incarnation !== live).map((incarnation) => incarnation.exit)
      if (!same(ended, model.exits.get(id) ?? [])) {
        problems.push(`${id}: processes ended with ${JSON.stringify(ended)}, model says ${JSON.stringify(model.exits.get(id) ?? [])}`)
      }
      for (const incarnation of incarnations) {
        if (incarnation !== live && !isGone(incarnation.pid)) {
          problems.push(`${id} (${child.status}): pid ${incarnation.pid} not gone`)
        }
      }
      const handle = (yield* real.supervisor.handle(id)) as ProcessChild.ProcessChild | undefined
      if (live === undefined) {
        if (handle !== undefined) problems.push(`${id} (${child.status}) still has a handle (pid ${handle.pid})`)
      } else {
        if (!isRunning(live.pid)) problems.push(`${id} running, but pid ${live.pid} is not`)
        if (!isReady(live)) problems.push(`${id}: pid ${live.pid} not ready yet`)
        if (handle?.pid !== live.pid) problems.push(`${id}: handle is ${handle?.pid}, latest process ${live.pid}`)
      }
    }

    const sleeps = Chunk.toReadonlyArray(yield* TestClock.sleeps())
    const expected = model.timers.map((timer) => timer.due)
    if (!containsAll(sleeps, expected)) {
      problems.push(`TestClock sleeps ${JSON.stringify(sleeps)} lack restarts due at ${JSON.stringify(expected)}`)
    }
    return problems
  })

/** The whole comparison as assertions (for diffs). */
const assertMatches = (model: Model, real: Real) =>
  Effect.gen(function*() {
    expect(canonical(real.directives, model.unordered)).toEqual(canonical(model.directives, model.unordered))
    expect(project(yield* real.supervisor.state)).toEqual(project(model.state))
    for (const child of model.state.children) {
      const incarnations = real.incarnations.get(child.spec.id) ?? []
      const ended = child.status === "running" ? incarnations.slice(0, -1) : incarnations
      expect({ id: child.spec.id, exits: ended.map((incarnation) => incarnation.exit) })
        .toEqual({ id: child.spec.id, exits: model.exits.get(child.spec.id) ?? [] })
    }
  })

/** Wait until the system has caught up with the model, then check that it matches it. */
const settle = (model: Model, real: Real, after: string) =>
  Effect.gen(function*() {
    // Between commands nothing is on its way out: every stop the model asked for has completed.
    expect(model.state.children.filter((child) => child.status === "stopping")).toEqual([])
    const deadline = performance.now() + SETTLE_MS
    for (;;) {
      const problems = yield* mismatches(model, real)
      if (problems.length === 0) break
      if (performance.now() > deadline) {
        // The assertions give diffs of what differs in the state or the directives.
        const diff = yield* Effect.exit(assertMatches(model, real))
        const detail = Exit.isFailure(diff) ? `\n${messageOf(Cause.squash(diff.cause))}` : ""
        return yield* Effect.dieMessage(`not settled ${SETTLE_MS} ms after ${after}:\n  ${problems.join("\n  ")}${detail}`)
      }
      yield* realSleep(5)
    }
    yield* assertMatches(model, real)
    // A child waiting for its restart has no process at all; the others are accounted for above.
    for (const child of model.state.children) {
      if (child.status !== "restarting") continue
      for (const incarnation of real.incarnations.get(child.spec.id) ?? []) expect(isRunning(incarnation.pid)).toBe(false)
    }
  })

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

type Command = fc.AsyncCommand<Model, Real>

abstract class Step implements Command {
  abstract check(model: Readonly<Model>): boolean
  abstract toString(): string
  /** Make the event happen in the system and feed it to the model. */
  abstract act(model: Model, real: Real): Effect.Effect<void>

  perform(model: Model, real: Real): Effect.Effect<void> {
    return Effect.zipRight(this.act(model, real), settle(model, real, this.toString()))
  }

  run(model: Model, real: Real): Promise<void> {
    return real.run(this.perform(model, real))
  }
}

/**
 * The child a command acts on: the `pick`-th of the children the model says
 * are running (modulo their number), so a command applies whenever any runs.
 */
const target = (model: Readonly<Model>, pick: number): string | undefined => {
  const running = model.state.children.filter((child) => child.status === "running")
  return running.length === 0 ? undefined : running[pick % running.length]!.spec.id
}

/** The running incarnation of child `id`, as the supervisor holds it: the latest process started for it. */
const current = (real: Real, id: string) =>
  Effect.gen(function*() {
    const handle = (yield* real.supervisor.handle(id)) as ProcessChild.ProcessChild | undefined
    if (handle === undefined) return yield* Effect.dieMessage(`${id} has no running incarnation`)
    expect(handle.pid).toBe(real.incarnations.get(id)!.at(-1)!.pid)
    return handle
  })

class ChildExits extends Step {
  constructor(readonly pick: number, readonly code: number) {
    super()
  }
  check(model: Readonly<Model>) {
    return !model.done && target(model, this.pick) !== undefined
  }
  toString() {
    return `ChildExits(running[${this.pick}], ${this.code})`
  }
  act(model: Model, real: Real) {
    return Effect.gen(this, function*() {
      const id = target(model, this.pick)!
      real.trace.push(`ChildExits(${id}, ${this.code})`)
      const handle = yield* current(real, id)
      const stdin = handle.subprocess.stdin as import("bun").FileSink
      stdin.write(`exit ${this.code}\n`)
      stdin.flush()
      model.feed(SupervisionEvent.ChildExited({ id, exit: ChildExit.Exited({ code: this.code }) }))
    })
  }
}

class ChildKilled extends Step {
  constructor(readonly pick: number, readonly signal: "SIGKILL" | "SIGTERM") {
    super()
  }
  check(model: Readonly<Model>) {
    return !model.done && target(model, this.pick) !== undefined
  }
  toString() {
    return `ChildKilled(running[${this.pick}], ${this.signal})`
  }
  act(model: Model, real: Real) {
    return Effect.gen(this, function*() {
      const id = target(model, this.pick)!
      real.trace.push(`ChildKilled(${id}, ${this.signal})`)
      const handle = yield* current(real, id)
      process.kill(handle.pid, this.signal)
      // The fixture handles SIGTERM by exiting 143 itself.
      const exit = this.signal === "SIGKILL" ? ChildExit.Signaled({ signal: "SIGKILL" }) : ChildExit.Exited({ code: 143 })
      model.feed(SupervisionEvent.ChildExited({ id, exit }))
    })
  }
}

/** An event sent to the supervisor from outside. */
class External extends Step {
  constructor(readonly event: Supervisor.ExternalEvent) {
    super()
  }
  check(model: Readonly<Model>) {
    if (model.done) return false
    if (this.event._tag === "CohortFormed") return !model.state.formed
    if (this.event._tag === "RunDrained") return !model.state.drained
    return true
  }
  toString() {
    const { _tag, ...fields } = this.event
    return Object.keys(fields).length === 0 ? _tag : `${_tag}(${JSON.stringify(fields)})`
  }
  act(model: Model, real: Real) {
    return Effect.gen(this, function*() {
      real.trace.push(this.toString())
      yield* real.supervisor.send(this.event)
      model.feed(this.event)
    })
  }
}

class AdvanceClock extends Step {
  constructor(readonly ms: number) {
    super()
  }
  check(model: Readonly<Model>) {
    return !model.done
  }
  toString() {
    return `AdvanceClock(${this.ms})`
  }
  act(model: Model, real: Real) {
    return Effect.gen(this, function*() {
      real.trace.push(this.toString())
      yield* TestClock.adjust(this.ms)
      model.advance(this.ms)
    })
  }
}

/**
 * Move the clock to just before (`offset` -1) or exactly onto (0) the next
 * restart the model expects: the boundary where a child waiting to restart
 * must still have no process, or must have a new one.
 */
class AdvanceToRestart extends Step {
  constructor(readonly offset: -1 | 0) {
    super()
  }
  private ms(model: Readonly<Model>): number | undefined {
    if (model.timers.length === 0) return undefined
    const ms = Math.min(...model.timers.map((timer) => timer.due)) - model.now + this.offset
    return ms > 0 ? ms : undefined
  }
  check(model: Readonly<Model>) {
    return !model.done && this.ms(model) !== undefined
  }
  toString() {
    return this.offset === 0 ? "AdvanceToRestart" : `AdvanceToRestart(${this.offset})`
  }
  act(model: Model, real: Real) {
    return Effect.gen(this, function*() {
      const ms = this.ms(model)!
      real.trace.push(`AdvanceClock(${ms})`)
      yield* TestClock.adjust(ms)
      model.advance(ms)
    })
  }
}

const pick = fc.nat({ max: 4 })

/** Exits, kills and time most often; the events that end a run rarely. */
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({ pick, code: fc.integer({ min: 1, max: 255 }) }).map(({ code, pick }) => new ChildExits(pick, code))
  },
  { weight: 2, arbitrary: pick.map((pick) => new ChildExits(pick, 0)) },
  {
    weight: 6,
    arbitrary: fc.record({ pick, signal: fc.constantFrom("SIGKILL" as const, "SIGTERM" as const) })
      .map(({ pick, signal }) => new ChildKilled(pick, signal))
  },
  {
    weight: 6,
    arbitrary: fc.oneof(
      fc.integer({ min: 1, max: 100 }),
      fc.integer({ min: 100, max: 2_500 }),
      fc.integer({ min: 2_500, max: 12_000 })
    ).map((ms) => new AdvanceClock(ms))
  },
  { weight: 6, arbitrary: fc.constantFrom(new AdvanceToRestart(0), new AdvanceToRestart(-1)) },
  { weight: 2, arbitrary: fc.constant(new External(SupervisionEvent.CohortFormed())) },
  { weight: 1, arbitrary: fc.constant(new External(SupervisionEvent.RunDrained())) },
  {
    weight: 2,
    arbitrary: fc.uniqueArray(fc.nat({ max: 5 }), { minLength: 1, maxLength: 2 })
      .map((ranks) => new External(SupervisionEvent.RanksLost({ ranks, reason: "heartbeat stale" })))
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      new External(SupervisionEvent.AbortRequested({ reason: "operator" })),
      new External(SupervisionEvent.AbortRequested({ reason: "operator", signal: "SIGINT" })),
      new External(SupervisionEvent.AbortRequested({ reason: "scheduler", signal: "SIGTERM" })),
      new External(SupervisionEvent.CoordinatorFailed({ reason: "lost quorum" })),
      new External(SupervisionEvent.ActorFailed({ actor: "join gate", reason: "boom" }))
    )
  }
)

const commandsArb = fc.commands<Model, Real, false>([commandArb], { maxCommands: MAX_COMMANDS, size: "max" })

// ---------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------

const runOnce = (setup: Setup, commands: Iterable<Command>) => {
  const trace: Array<string> = []
  return Effect.gen(function*() {
    const run = Runtime.runPromise(yield* Effect.runtime<never>())
    // The supervisor's own Scope, closed explicitly at the end (and by the outer one on failure).
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const specs = specsOf(setup)
    const incarnations = new Map<string, Array<Incarnation>>()
    const directives: Array<Directive> = []
    const children = specs.map((spec): Supervisor.SupervisedChild => ({
      ...spec,
      start: ProcessChild.spawn({ cmd: [process.execPath, childFixture], stdin: "pipe", stdout: "pipe" }).pipe(
        Effect.tap((child) =>
          Effect.sync(() => {
            const output = collectLines(child.subprocess.stdout as ReadableStream<Uint8Array>)
            output.done.catch(() => undefined)
            const incarnation: Incarnation = { pid: child.pid, lines: output.lines, exit: undefined }
            void child.subprocess.exited.then(() => {
              const { exitCode, signalCode } = child.subprocess
              incarnation.exit = signalCode !== null
                ? ChildExit.Signaled({ signal: String(signalCode) })
                : ChildExit.Exited({ code: exitCode ?? -1 })
            })
            incarnations.set(spec.id, [...(incarnations.get(spec.id) ?? []), incarnation])
          })
        )
      )
    }))
    const supervisor = yield* Supervisor.start({
      name: "model",
      strategy: setup.strategy,
      children,
      grace: "2 seconds",
      seed: setup.seed,
      onDirective: (directive) => Effect.sync(() => directives.push(directive))
    }).pipe(Scope.extend(scope))

    const model = new Model(setup.strategy, specs, setup.seed)
    const real: Real = { run, supervisor, incarnations, directives, trace }
    model.feed(SupervisionEvent.Boot())
    yield* settle(model, real, "Boot")

    yield* Effect.promise(() => fc.asyncModelRun(() => ({ model, real }), commands))

    // Teardown, unless the run already ended on its own.
    if (!model.done && setup.teardown === "abort") {
      yield* new External(SupervisionEvent.AbortRequested({ reason: "teardown" })).perform(model, real)
    } else if (!model.done) {
      if (!model.state.drained) yield* new External(SupervisionEvent.RunDrained()).perform(model, real)
      // The work is done: every child still running exits cleanly, first to last.
      while (target(model, 0) !== undefined) yield* new ChildExits(0, 0).perform(model, real)
    }
    expect(model.done).toBe(true)
    const verdict = yield* Effect.raceFirst(
      Effect.map(supervisor.verdict, Option.some),
      Effect.as(realSleep(SETTLE_MS), Option.none())
    )
    expect(verdict).toEqual(Option.some(model.state.verdict!))

    const pids = [...incarnations.values()].flat().map((incarnation) => incarnation.pid)
    expect(pids.filter((pid) => !isGone(pid))).toEqual([])
    yield* Scope.close(scope, Exit.void)
    // Nothing happened after the verdict.
    expect(canonical(real.directives, model.unordered)).toEqual(canonical(model.directives, model.unordered))
    yield* eventually(Effect.sync(() => pids.every((pid) => !isRunning(pid))), "no process of the run left running")
  }).pipe(
    // Name the children the commands acted on: the counterexample only says `running[k]`.
    Effect.catchAllDefect((defect) => Effect.dieMessage(`after ${["Boot", ...trace].join(", ")}:\n${messageOf(defect)}`))
  )
}

const property = (strategy: fc.Arbitrary<Strategy>) =>
  fc.asyncProperty(setupArb(strategy), commandsArb, (setup, commands) =>
    Effect.runPromise(
      runOnce(setup, commands).pipe(
        Effect.scoped,
        Effect.provide(TestContext.TestContext),
        Effect.provide(quiet)
      )
    )
  )

describe("Supervisor with real processes follows decide (model-based)", () => {
  test("kill_all and elastic", () => fc.assert(property(fc.oneof(killAllArb, elasticArb)), seeded(0x5e1f, RUNS)), TEST_TIMEOUT)

  test("restart, one and all", () => fc.assert(property(restartArb), seeded(0x7e57a, RUNS)), TEST_TIMEOUT)

  test("phased", () => fc.assert(property(phasedArb), seeded(0xfa5ed, RUNS)), TEST_TIMEOUT)
})
