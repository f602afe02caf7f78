/**
 * Model-based tests of the `Supervisor` with real processes.
 *
 * The model is a small reference of the documented policy, written in this
 * file (see "The model" below; it never calls `decide`); the `Supervisor`
 * running real child processes (test/fixtures/child-fixture.ts) is the
 * system. fast-check generates a strategy, 3–5 children and a sequence of
 * commands; every command causes exactly one event in the system (a child told
 * to `exit 3` gives `ChildExited { Exited 3 }`, a SIGKILL from outside
 * `Signaled SIGKILL`, a SIGTERM from outside `Exited 143`: the fixture exits
 * 143 on SIGTERM, …) and the model is fed the same event, plus the exits that
 * the stops it expects will cause (graceful: `Exited 143`; kill: `Signaled
 * SIGKILL`) and the restarts that fall due once `TestClock` passes their time.
 * The supervisor stops children side by side, so those exits reach it in no
 * fixed order: the model feeds them in the order given, and the directives
 * they give may come in any order.
 *
 * After each command the test waits (real-time polling, the processes run on
 * real time) until the system has settled, then holds it to the model:
 * - the directives the system executed (`onDirective`, Notes aside) are the
 *   model's, in order: which children start, which are stopped (in what order,
 *   killed or with which grace), which ranks are reported dead, when the limit
 *   is crossed, which child restarts after a delay within the backoff's bounds
 *   (the same delay for a whole group), when the run escalates, and the
 *   verdict (its kind and signal, the cause its message starts with, the counts
 *   it names), last; the directives of exits caused together by one event
 *   (stops side by side) may come in any order;
 * - `supervisor.state` agrees: every child's status and when a waiting one
 *   comes back, the dead ranks, formed, drained, stopping, the failure's kind,
 *   the exits tolerated;
 * - each child the model says runs has exactly one live, ready process (the
 *   latest of its incarnations, which is what `supervisor.handle` returns);
 *   every other process the child ever had is gone (reaped, no zombie), so a
 *   child waiting to restart has no live process until the clock passes its
 *   restart, and then runs under a new pid;
 * - `TestClock` holds a sleep for every restart the model still expects.
 * At the end (when the model reaches a verdict, or after a teardown: abort, or
 * drain and clean exits) the system's verdict is the model's and no process of
 * the run is left, before and after the supervisor's Scope closes.
 *
 * Time: each run has its own TestContext, so restarts fire only on
 * `TestClock.adjust`, and `now` in the model is the TestClock time. Every
 * `fc.assert` is seeded.
 */
import { describe, expect, test } from "bun:test"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
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
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import { type Directive, SupervisionEvent, type SupervisorState } from "../src/kernel/policy/decide.ts"
import * as ProcessChild from "../src/kernel/ProcessChild.ts"
import { Shutdown } from "../src/kernel/Shutdown.ts"
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
} from "../src/kernel/policy/Strategy.ts"
import * as Supervisor from "../src/kernel/Supervisor.ts"
import type { FailureKind, Verdict } from "../src/kernel/policy/Verdict.ts"
import { eventually } from "./support/effect.ts"
import { collectLines, isGone, isRunning } from "./support/processes.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

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
    significant: setup.grouped && i === 0, shutdown: anyShutdown
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
    // Without jitter the delay is exact, so the model's bounds pin the attempt number.
    jitter: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 0.5, noNaN: true })),
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
// The model: the documented policy, written out for the strategies generated here
// ---------------------------------------------------------------------------
//
// Written from the documentation (decide.ts, Strategy.ts, RestartStrategy.ts, Verdict.ts), not from
// `decide`: no failure rules, no growth, one rank per child, so secondary deaths change words only.
// - kill_all: the first abnormal exit (or a lost rank) fails the run; every other running child is
//   stopped (SIGTERM and the strategy's grace, or at once with SIGKILL when its grace is 0).
// - elastic: an abnormal exit reports its child's ranks dead (a significant child's whole group, whose
//   running members are stopped and waiting ones stay down); ranks lost by heartbeat are dead but not
//   reported (membership said it). Once the dead reach max_failure (at least 1; a percentage is
//   rounded up) the limit is crossed and the run stops; once every rank is dead it stops too.
// - restart: permanent children come back after any exit, transient ones after an abnormal one,
//   temporary ones never (an abnormal exit of one is a death, as under elastic). More than
//   max_restarts restarts within the window (now − within, now] escalates and fails the run. The
//   delay of restart n (the child's own n under scope one, everyone's under all) is
//   min(max, initial × factor^n) ± jitter of itself, never above max: the jitter is the system's
//   randomness, so the model holds the delay it drew to those bounds and then goes by it. Scope all
//   stops every other running child, and each comes back when the one that failed does. A lost rank
//   marks its running child: its next exit is a failure, clean or not.
// - every event: a drained run tolerates (counts) abnormal exits and restarts nothing; an abort, a
//   coordinator's or an actor's failure stops every child gracefully; the first failure is the root
//   cause; the verdict comes once nothing runs, stops or waits, by the rules of Verdict.ts.

/** A restart the model expects: the bounds of its delay, and the delay the system drew once seen. */
interface PendingRestart {
  /** TestClock time it was decided at. */
  readonly decidedAt: number
  readonly min: number
  readonly max: number
  after: number | undefined
}

const dueOf = (restart: PendingRestart): number | undefined =>
  restart.after === undefined ? undefined : restart.decidedAt + restart.after

interface ModelChild {
  readonly spec: ChildSpec
  status: "pending" | "running" | "stopping" | "restarting" | "exited"
  /** The restart it waits for: while restarting, and while stopped for a group restart. */
  restart: PendingRestart | undefined
  /** Its ranks were lost under restart: its next exit is a failure, clean or not. */
  lost: boolean
}

/** What the verdict must say: a failure's kind, and the words its message starts with and holds. */
type ExpectedVerdict =
  | { readonly _tag: "Completed"; readonly dead: number; readonly world: number; readonly tolerated: number }
  | {
    readonly _tag: "Failed"
    readonly kind: FailureKind
    readonly signal?: string | undefined
    readonly startsWith: string
    readonly contains: ReadonlyArray<string>
  }

/** A directive the supervisor must carry out; Notes and the words of a reason are not held to anything. */
type Expected =
  | { readonly _tag: "Start"; readonly id: string }
  | {
    readonly _tag: "Terminate"
    readonly ids: ReadonlyArray<string>
    readonly mode: "kill" | "graceful"
    readonly graceMs?: number | undefined
  }
  | { readonly _tag: "ReportDead"; readonly ranks: ReadonlyArray<number> }
  | { readonly _tag: "LimitCrossed" }
  | { readonly _tag: "Restart"; readonly id: string; readonly restart: PendingRestart }
  | { readonly _tag: "Escalate" }
  | { readonly _tag: "Verdict"; readonly verdict: ExpectedVerdict }

/** The run's root cause: its kind, the words its message starts with, and what else it must name. */
interface Failure {
  readonly kind: FailureKind
  readonly message: string
  readonly contains?: ReadonlyArray<string>
  readonly signal?: string | undefined
}

interface Timer {
  readonly id: string
  readonly restart: PendingRestart
  /** Registration order: TestClock fires sleeps due at the same time newest first. */
  readonly seq: number
}

/** "status 3", "signal SIGKILL": how a verdict names an exit. */
const describeExit = (exit: ChildExit) =>
  exit._tag === "Exited" ? `status ${exit.code}` : exit._tag === "Signaled" ? `signal ${exit.signal}` : exit._tag

class Model {
  readonly children: Array<ModelChild>
  readonly world: number
  formed = false
  drained = false
  /** A run-wide stop is under way: no restarts, no new failures. */
  stopping = false
  failure: Failure | undefined
  coordinatorFailure: string | undefined
  /** Dead ranks, ascending. */
  dead: Array<number> = []
  tolerated = 0
  /** When each restart the strategy counts was decided, and whose. */
  private restartLog: Array<{ readonly at: number; readonly id: string }> = []
  verdict: ExpectedVerdict | undefined
  /** TestClock time, ms. */
  now = 0
  /** Restarts whose RestartDue has not fired yet. */
  timers: Array<Timer> = []
  private seq = 0
  readonly directives: Array<Expected> = []
  /**
   * Ranges `[from, to)` of `directives` given by exits that one event's stops caused together: the
   * supervisor stops children side by side, so their exits (and these directives) come in any order.
   */
  readonly unordered: Array<{ readonly from: number; readonly to: number }> = []
  /** Start directives per child: the number of incarnations it must have had. */
  readonly starts = new Map<string, number>()
  /** How each ended incarnation of each child ended, oldest first. */
  readonly exits = new Map<string, Array<ChildExit>>()
  /** The exits the stops of the event being fed will cause. */
  private queue: Array<SupervisionEvent> = []

  constructor(readonly strategy: Strategy, specs: ReadonlyArray<ChildSpec>) {
    this.children = specs.map((spec) => ({ spec, status: "pending", restart: undefined, lost: false }))
    this.world = new Set(specs.flatMap((spec) => spec.ranks)).size
  }

  get done(): boolean {
    return this.verdict !== undefined
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
    this.react(event)
    const from = this.directives.length
    for (let next = this.queue.shift(); next !== undefined; next = this.queue.shift()) this.react(next)
    if (this.directives.length - from > 1) this.unordered.push({ from, to: this.directives.length })
  }

  /**
   * Move the clock; restarts fall due by due time and, among restarts due at
   * the same time, the latest scheduled first. That is how TestClock runs
   * sleeps (newest first, sorted stably by wake time). Which fires first does
   * not decide the order of the starts: a restart that falls due brings back
   * every child whose restart is due, in start order.
   */
  advance(ms: number): void {
    const target = this.now + ms
    for (;;) {
      const due = this.timers
        .map((timer) => ({ timer, due: this.dueOrThrow(timer.restart) }))
        .filter(({ due }) => due <= target)
        .sort((a, b) => a.due - b.due || b.timer.seq - a.timer.seq)[0]
      if (due === undefined) break
      this.timers = this.timers.filter((timer) => timer !== due.timer)
      this.now = due.due
      this.feed(SupervisionEvent.RestartDue({ id: due.timer.id }))
    }
    this.now = target
  }

  private dueOrThrow(restart: PendingRestart): number {
    const due = dueOf(restart)
    // Every command settles first, and settling binds each restart to the delay the system drew.
    if (due === undefined) throw new Error("model: a restart's delay is not known yet")
    return due
  }

  child(id: string): ModelChild {
    const child = this.children.find((each) => each.spec.id === id)
    if (child === undefined) throw new Error(`model: no child ${id}`)
    return child
  }

  /**
   * When the oldest restart still counted leaves the intensity window of the restart strategy in force:
   * a failure then is the first that it no longer counts against.
   */
  windowEdge(): number | undefined {
    const current = this.inForce()
    if (current._tag !== "Restart") return undefined
    const counted = this.restartLog.filter((entry) => entry.at > this.now - current.within)
    return counted.length === 0 ? undefined : Math.min(...counted.map((entry) => entry.at)) + current.within
  }

  private inForce(): Simple {
    return this.strategy._tag === "Phased" ? (this.formed ? this.strategy.afterFormation : this.strategy.beforeFormation) : this.strategy
  }

  /** The dead ranks that fail the run under the elastic strategy in force, if it has a max_failure. */
  private limit(): number | undefined {
    const current = this.inForce()
    if (current._tag !== "Elastic" || current.maxFailure === undefined) return undefined
    const { maxFailure } = current
    // p × world is a whole number here (p is), so the ceiling sees no float noise.
    const limit = maxFailure._tag === "Count" ? maxFailure.n : Math.ceil((maxFailure.p * this.world) / 100)
    return Math.max(1, limit)
  }

  private react(event: SupervisionEvent): void {
    // Every exit fed here is a real process ending (of a child running or being stopped).
    if (event._tag === "ChildExited") this.exits.set(event.id, [...(this.exits.get(event.id) ?? []), event.exit])
    if (this.verdict !== undefined) return
    switch (event._tag) {
      case "Boot":
        for (const child of this.children) if (child.status === "pending") this.start(child)
        break
      case "ChildExited":
        this.childExited(this.child(event.id), event.exit)
        break
      case "CohortFormed":
        this.formed = true
        break
      case "RanksLost":
        this.ranksLost(event.ranks, event.reason)
        break
      case "CoordinatorFailed":
        if (this.coordinatorFailure === undefined) {
          this.coordinatorFailure = event.reason
          this.stopAll("graceful")
        }
        break
      case "ActorFailed":
        this.fail({ kind: "internal", message: `internal error: the ${event.actor} failed: ${event.reason}` }, "graceful")
        break
      case "RunDrained":
        this.drained = true
        for (const child of this.children) if (child.status === "restarting") this.exit(child)
        break
      case "AbortRequested":
        if (this.stopping) break
        if (!this.drained && this.failure === undefined) {
          this.failure = { kind: "aborted", message: `aborted: ${event.reason}`, signal: event.signal }
        }
        this.stopAll("graceful")
        break
      case "RestartDue":
        this.restartDue(this.child(event.id))
        break
      default:
        throw new Error(`model: ${event._tag} is not generated here`)
    }
    if (this.children.every((child) => child.status === "exited")) {
      this.verdict = this.verdictNow()
      this.directives.push({ _tag: "Verdict", verdict: this.verdict })
    }
  }

  private start(child: ModelChild): void {
    child.status = "running"
    child.restart = undefined
    this.directives.push({ _tag: "Start", id: child.spec.id })
    this.starts.set(child.spec.id, (this.starts.get(child.spec.id) ?? 0) + 1)
  }

  private exit(child: ModelChild): void {
    child.status = "exited"
    child.restart = undefined
  }

  private childExited(child: ModelChild, exit: ChildExit): void {
    if (child.status !== "running" && child.status !== "stopping") return
    const clean = exit._tag === "Exited" && exit.code === 0
    const abnormal = !clean || child.lost
    const what = `${child.spec.label} exited with ${describeExit(exit)}${child.lost && clean ? " with its work unfinished" : ""}`
    child.lost = false
    if (child.status === "stopping") {
      // An exit the supervisor asked for: the child comes back only for a group restart still wanted.
      if (child.restart !== undefined && !this.stopping && !this.drained) this.scheduled(child, child.restart)
      else this.exit(child)
      return
    }
    if (this.drained) {
      this.exit(child)
      if (abnormal) this.tolerated++
      return
    }
    const current = this.inForce()
    if (!abnormal) {
      if (current._tag === "Restart" && child.spec.restart === "permanent") this.restart(child, current, what)
      else this.exit(child)
      return
    }
    switch (current._tag) {
      case "KillAll":
        this.exit(child)
        this.failKillAll(current, what)
        return
      case "Elastic":
        this.exit(child)
        this.loseMembers(child)
        return
      case "Restart":
        if (child.spec.restart === "temporary") {
          this.exit(child)
          this.loseMembers(child)
        } else {
          this.restart(child, current, what)
        }
        return
    }
  }

  private ranksLost(ranks: ReadonlyArray<number>, reason: string): void {
    if (this.stopping || this.drained) return
    const current = this.inForce()
    const what = `rank(s) ${ranks.join(", ")} lost: ${reason}`
    if (current._tag === "KillAll") this.failKillAll(current, what)
    if (current._tag === "Restart") {
      // Restarted like a failure: at its exit if it still runs, at once if it has already gone, whatever
      // its restart type or however it ended (decide.ts says so of a lost rank).
      for (const child of this.children.filter((each) => each.spec.ranks.some((rank) => ranks.includes(rank)))) {
        if (child.status === "running") child.lost = true
        else if (child.status === "exited") this.restart(child, current, what)
      }
      return
    }
    this.markDead(ranks, false)
  }

  private failKillAll(strategy: KillAll, what: string): void {
    if (strategy.grace === 0) this.fail({ kind: "child-failed", message: what }, "kill")
    else this.fail({ kind: "child-failed", message: what }, "graceful", strategy.grace)
  }

  /** Elastic loss of a child: its ranks, or a significant child's whole group's, are dead. */
  private loseMembers(child: ModelChild): void {
    const { group } = child.spec
    if (!child.spec.significant || group === undefined) return this.markDead(child.spec.ranks, true)
    const members = this.children.filter((each) => each.spec.group === group)
    this.terminate(members, "graceful")
    for (const member of members) {
      if (member.status === "restarting" || member.status === "pending") this.exit(member)
      else if (member.status === "stopping") member.restart = undefined
    }
    this.markDead(members.flatMap((member) => member.spec.ranks), true)
  }

  private markDead(ranks: ReadonlyArray<number>, report: boolean): void {
    const inWorld = new Set(this.children.flatMap((child) => child.spec.ranks))
    const fresh = [...new Set(ranks)].filter((rank) => inWorld.has(rank) && !this.dead.includes(rank)).sort((a, b) => a - b)
    if (fresh.length === 0) return
    this.dead = [...this.dead, ...fresh].sort((a, b) => a - b)
    if (report) this.directives.push({ _tag: "ReportDead", ranks: fresh })
    if (this.stopping) return
    const limit = this.limit()
    if (this.dead.length >= this.world) {
      this.stopAll("graceful")
    } else if (limit !== undefined && this.dead.length >= limit) {
      this.directives.push({ _tag: "LimitCrossed" })
      this.stopAll("graceful")
    }
  }

  private restart(child: ModelChild, policy: Restart, what: string): void {
    const id = child.spec.id
    // The window is (now − within, now]: a restart exactly `within` ago has left it.
    const recent = this.restartLog.filter((entry) => entry.at > this.now - policy.within)
    this.restartLog = recent
    if (recent.length >= policy.maxRestarts) {
      this.exit(child)
      this.directives.push({ _tag: "Escalate" })
      const contains = [child.spec.label, `restart ${recent.length + 1} within`, `(max_restarts ${policy.maxRestarts})`]
      this.fail({ kind: "restart-intensity", message: what, contains }, "graceful")
      return
    }
    const attempt = policy.scope === "one" ? recent.filter((entry) => entry.id === id).length : recent.length
    const { factor, initial, jitter, max } = policy.backoff
    const base = Math.min(max, initial * factor ** attempt)
    const restart: PendingRestart = {
      decidedAt: this.now,
      min: Math.max(0, Math.floor(base * (1 - jitter))),
      max: Math.min(max, Math.ceil(base * (1 + jitter))),
      after: undefined
    }
    this.restartLog.push({ at: this.now, id })
    this.scheduled(child, restart)
    if (policy.scope === "all") this.terminate(this.children, "graceful", restart)
  }

  /** The child waits for `restart`: the supervisor sleeps until it is due. */
  private scheduled(child: ModelChild, restart: PendingRestart): void {
    child.status = "restarting"
    child.restart = restart
    this.directives.push({ _tag: "Restart", id: child.spec.id, restart })
    this.timers.push({ id: child.spec.id, restart, seq: this.seq++ })
  }

  private restartDue(child: ModelChild): void {
    if (child.status !== "restarting" || this.stopping) return
    for (const other of this.children) {
      if (other.status !== "restarting") continue
      const due = other.restart === undefined ? undefined : dueOf(other.restart)
      if (other === child || (due !== undefined && due <= this.now)) this.start(other)
    }
  }

  private fail(failure: Failure, mode: "kill" | "graceful", graceMs?: number): void {
    // The first failure is the root cause.
    this.failure ??= failure
    this.stopAll(mode, graceMs)
  }

  private stopAll(mode: "kill" | "graceful", graceMs?: number): void {
    if (this.stopping) return
    this.stopping = true
    for (const child of this.children) {
      if (child.status === "pending" || child.status === "restarting") this.exit(child)
      else if (child.status === "stopping") child.restart = undefined
    }
    this.terminate(this.children, mode, undefined, graceMs)
  }

  /** Stop those of `children` that run, side by side, listed last started first. */
  private terminate(children: ReadonlyArray<ModelChild>, mode: "kill" | "graceful", restart?: PendingRestart, graceMs?: number): void {
    const targets = children.filter((child) => child.status === "running").reverse()
    if (targets.length === 0) return
    for (const child of targets) {
      child.status = "stopping"
      child.restart = restart
    }
    const ids = targets.map((child) => child.spec.id)
    this.directives.push({ _tag: "Terminate", ids, mode, ...(graceMs === undefined ? {} : { graceMs }) })
    const exit = mode === "kill" ? ChildExit.Signaled({ signal: "SIGKILL" }) : ChildExit.Exited({ code: 143 })
    for (const child of targets) this.queue.push(SupervisionEvent.ChildExited({ id: child.spec.id, exit }))
  }

  /** Verdict.ts's rules, first match wins. */
  private verdictNow(): ExpectedVerdict {
    if (this.coordinatorFailure !== undefined) {
      return { _tag: "Failed", kind: "coordinator", startsWith: `coordinator failed: ${this.coordinatorFailure}`, contains: [] }
    }
    if (this.failure !== undefined) {
      const { contains = [], kind, message, signal } = this.failure
      return { _tag: "Failed", kind, signal, startsWith: message, contains }
    }
    if (this.dead.length >= this.world) {
      return { _tag: "Failed", kind: "all-ranks-lost", startsWith: "every rank was lost", contains: [`${this.dead.length}/${this.world}`] }
    }
    const limit = this.limit()
    if (limit !== undefined && this.dead.length >= limit) {
      const contains = [`${this.dead.length}/${this.world}`, `threshold ${limit}`]
      return { _tag: "Failed", kind: "max-failure", startsWith: "max_failure exceeded", contains }
    }
    return { _tag: "Completed", dead: this.dead.length, world: this.world, tolerated: this.tolerated }
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

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

/** Does the system's verdict say what the model's does? */
const verdictMatches = (verdict: Verdict | undefined, expected: ExpectedVerdict | undefined): boolean => {
  if (verdict === undefined || expected === undefined) return verdict === expected
  if (verdict._tag === "Completed") {
    return expected._tag === "Completed" && verdict.dead === expected.dead && verdict.world === expected.world &&
      verdict.tolerated === expected.tolerated
  }
  return expected._tag === "Failed" && verdict.kind === expected.kind && verdict.signal === expected.signal &&
    verdict.message.startsWith(expected.startsWith) && expected.contains.every((part) => verdict.message.includes(part))
}

/**
 * Does the supervisor's directive carry out the model's? A restart's delay must lie in the model's bounds
 * and be the same for every child of one group restart (`drawn` holds the delays seen so far).
 */
const carriesOut = (directive: Directive, expected: Expected, drawn: Map<PendingRestart, number>): boolean => {
  if (directive._tag !== expected._tag) return false
  switch (expected._tag) {
    case "Start":
      return (directive as Extract<Directive, { _tag: "Start" }>).id === expected.id
    case "Terminate": {
      const { graceMs, ids, mode } = directive as Extract<Directive, { _tag: "Terminate" }>
      return same({ ids, mode, graceMs }, { ids: expected.ids, mode: expected.mode, graceMs: expected.graceMs })
    }
    case "ReportDead":
      return same((directive as Extract<Directive, { _tag: "ReportDead" }>).ranks, expected.ranks)
    case "LimitCrossed":
    case "Escalate":
      return true
    case "Restart": {
      const { after, id } = directive as Extract<Directive, { _tag: "Restart" }>
      const { restart } = expected
      const known = restart.after ?? drawn.get(restart)
      if (id !== expected.id || after < restart.min || after > restart.max || (known !== undefined && after !== known)) return false
      drawn.set(restart, after)
      return true
    }
    case "Verdict":
      return verdictMatches((directive as Extract<Directive, { _tag: "Verdict" }>).verdict, expected.verdict)
  }
}

/** The directives that carry policy: Notes are words for the operator. */
const executedOf = (real: Real) => real.directives.filter((directive) => directive._tag !== "Note")

/**
 * Do the directives executed so far carry out the model's: in order, except within an unordered range,
 * where those executed must be some of the range's, in any order? The delays drawn, if they do.
 */
const follows = (executed: ReadonlyArray<Directive>, model: Model): Map<PendingRestart, number> | undefined => {
  if (executed.length > model.directives.length) return undefined
  const drawn = new Map<PendingRestart, number>()
  const pools = new Map<number, { readonly to: number; readonly left: Array<Expected> }>()
  for (const { from, to } of model.unordered) pools.set(from, { to, left: model.directives.slice(from, to) })
  let pool: { readonly to: number; readonly left: Array<Expected> } | undefined
  for (let at = 0; at < executed.length; at++) {
    if (pool !== undefined && at >= pool.to) pool = undefined
    pool ??= pools.get(at)
    if (pool === undefined) {
      if (!carriesOut(executed[at]!, model.directives[at]!, drawn)) return undefined
      continue
    }
    const found = pool.left.findIndex((expected) => carriesOut(executed[at]!, expected, drawn))
    if (found === -1) return undefined
    pool.left.splice(found, 1)
  }
  return drawn
}

/** The model's directives, readable: a restart's delay as its bounds until the system drew it. */
const shown = (model: Model) =>
  model.directives.map((expected) =>
    expected._tag !== "Restart" ? expected : {
      _tag: "Restart",
      id: expected.id,
      after: expected.restart.after ?? `${expected.restart.min}..${expected.restart.max}`
    }
  )

/** The supervisor's state as the model sees it: statuses, when each waiting child comes back, dead ranks, flags, failure. */
const stateOf = (state: SupervisorState) => ({
  children: state.children.map((child) => ({ id: child.spec.id, status: child.status, restartAt: child.restartAt })),
  dead: state.dead,
  formed: state.formed,
  drained: state.drained,
  stopping: state.stopping,
  failure: state.coordinatorFailure !== undefined ? "coordinator" : state.failure?.kind,
  tolerated: state.tolerated
})

const modelStateOf = (model: Model) => ({
  children: model.children.map((child) => ({
    id: child.spec.id,
    status: child.status,
    restartAt: child.restart === undefined ? undefined : dueOf(child.restart)
  })),
  dead: model.dead,
  formed: model.formed,
  drained: model.drained,
  stopping: model.stopping,
  failure: model.coordinatorFailure !== undefined ? "coordinator" : model.failure?.kind,
  tolerated: model.tolerated
})

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
    const executed = executedOf(real)
    const drawn = follows(executed, model)
    if (drawn === undefined) {
      const detail = `executed ${JSON.stringify(executed)}\n  model    ${JSON.stringify(shown(model))}`
      throw new Error(`directives differ from the model's:\n  ${detail}`)
    }
    if (executed.length < model.directives.length) {
      problems.push(`directives: ${executed.length} of ${model.directives.length} executed`)
    } else {
      // All carried out: from now on the model goes by the delays the system drew.
      for (const [restart, after] of drawn) restart.after = after
    }

    const state = yield* real.supervisor.state
    if (!same(stateOf(state), modelStateOf(model))) problems.push("supervisor.state differs from the model's")
    if (!verdictMatches(state.verdict, model.verdict)) {
      problems.push(`verdict ${JSON.stringify(state.verdict)}, model says ${JSON.stringify(model.verdict)}`)
    }

    for (const child of model.children) {
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
    const expected = model.timers.flatMap((timer) => dueOf(timer.restart) ?? [])
    if (!containsAll(sleeps, expected)) {
      problems.push(`TestClock sleeps ${JSON.stringify(sleeps)} lack restarts due at ${JSON.stringify(expected)}`)
    }
    return problems
  })

/** The whole comparison as assertions (for diffs). */
const assertMatches = (model: Model, real: Real) =>
  Effect.gen(function*() {
    expect(executedOf(real).length).toBe(model.directives.length)
    expect(stateOf(yield* real.supervisor.state)).toEqual(modelStateOf(model))
    for (const child of model.children) {
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
    expect(model.children.filter((child) => child.status === "stopping")).toEqual([])
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
    for (const child of model.children) {
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
  const running = model.children.filter((child) => child.status === "running")
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
    if (this.event._tag === "CohortFormed") return !model.formed
    if (this.event._tag === "RunDrained") return !model.drained
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
    const dues = model.timers.flatMap((timer) => dueOf(timer.restart) ?? [])
    if (dues.length === 0) return undefined
    const ms = Math.min(...dues) - model.now + this.offset
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

/**
 * Move the clock to just before (`offset` -1) or exactly onto (0) the time the
 * oldest restart counted leaves the intensity window: a failure there tells a
 * window of (now − within, now] from one that still counts that restart.
 */
class AdvanceToWindowEdge extends Step {
  constructor(readonly offset: -1 | 0) {
    super()
  }
  private ms(model: Readonly<Model>): number | undefined {
    const edge = model.windowEdge()
    const ms = edge === undefined ? undefined : edge - model.now + this.offset
    return ms !== undefined && ms > 0 ? ms : undefined
  }
  check(model: Readonly<Model>) {
    return !model.done && this.ms(model) !== undefined
  }
  toString() {
    return this.offset === 0 ? "AdvanceToWindowEdge" : `AdvanceToWindowEdge(${this.offset})`
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
  { weight: 2, arbitrary: fc.constantFrom(new AdvanceToWindowEdge(0), new AdvanceToWindowEdge(-1)) },
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
      shutdown: Shutdown.Grace({ grace: Duration.seconds(2) }),
      start: ProcessChild.spawn({ cmd: [process.execPath, childFixture], stdin: "pipe", stdout: "pipe", shutdown: Shutdown.Grace({ grace: Duration.seconds(5) }) }).pipe(
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
      seed: setup.seed,
      onDirective: (directive) => Effect.sync(() => directives.push(directive))
    }).pipe(Scope.extend(scope))

    const model = new Model(setup.strategy, specs)
    const real: Real = { run, supervisor, incarnations, directives, trace }
    model.feed(SupervisionEvent.Boot())
    yield* settle(model, real, "Boot")

    yield* Effect.promise(() => fc.asyncModelRun(() => ({ model, real }), commands))

    // Teardown, unless the run already ended on its own.
    if (!model.done && setup.teardown === "abort") {
      yield* new External(SupervisionEvent.AbortRequested({ reason: "teardown" })).perform(model, real)
    } else if (!model.done) {
      if (!model.drained) yield* new External(SupervisionEvent.RunDrained()).perform(model, real)
      // The work is done: every child still running exits cleanly, first to last.
      while (target(model, 0) !== undefined) yield* new ChildExits(0, 0).perform(model, real)
    }
    expect(model.done).toBe(true)
    const verdict = yield* Effect.raceFirst(
      Effect.map(supervisor.verdict, Option.some),
      Effect.as(realSleep(SETTLE_MS), Option.none())
    )
    if (Option.isNone(verdict) || !verdictMatches(verdict.value, model.verdict)) {
      throw new Error(`verdict ${JSON.stringify(verdict)}, model says ${JSON.stringify(model.verdict)}`)
    }

    const pids = [...incarnations.values()].flat().map((incarnation) => incarnation.pid)
    expect(pids.filter((pid) => !isGone(pid))).toEqual([])
    yield* Scope.close(scope, Exit.void)
    // Nothing happened after the verdict.
    expect(executedOf(real).length).toBe(model.directives.length)
    expect(follows(executedOf(real), model)).toBeDefined()
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

describe("Supervisor with real processes follows the documented policy (model-based)", () => {
  test("kill_all and elastic", () => fc.assert(property(fc.oneof(killAllArb, elasticArb)), seeded(0x5e1f, RUNS)), TEST_TIMEOUT)

  test("restart, one and all", () => fc.assert(property(restartArb), seeded(0x7e57a, RUNS)), TEST_TIMEOUT)

  test("phased", () => fc.assert(property(phasedArb), seeded(0xfa5ed, RUNS)), TEST_TIMEOUT)
})
