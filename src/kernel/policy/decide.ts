/**
 * All supervision policy, as one pure function.
 *
 * `decide(strategy, state, event, now)` returns the directives the interpreter
 * must carry out and the next state. It reads no clock, spawns nothing and
 * draws randomness (backoff jitter) from a seed carried in the state, so the
 * same events at the same times always give the same directives. That is what
 * lets the property tests hammer it and the model-based tests hold the
 * effectful `Supervisor` to it.
 */
import * as Data from "effect/Data"
import * as ChildExitModule from "../ChildExit.ts"
import type { ChildExit } from "../ChildExit.ts"
import { type ChildSpec, worldOf } from "../ChildSpec.ts"
import { formatDuration } from "../../config/reading/Duration.ts"
import { type Backoff, elasticLimit, inForce, killAllStop, type Restart, type Strategy } from "./Strategy.ts"
import { actionName, type Cause, type Death, type FailureRule, firstMatch } from "./FailureRules.ts"
import { errorOf, peerLossOf, type Signature, signatureOf } from "./FailureSignature.ts"
import { chainText, type Classification, classify, type DeathRecord, firstRoot, followedText, rootOf } from "./SecondaryDeaths.ts"
import type { StopSignal } from "../StopRequests.ts"
import { Verdict } from "./Verdict.ts"

export type SupervisionEvent = Data.TaggedEnum<{
  /** Start every child, in order. The interpreter sends it once. */
  Boot: {}
  ChildExited: { readonly id: string; readonly exit: ChildExit }
  /** The cohort formed: from now on the after-formation strategy is in force. One-way. */
  CohortFormed: {}
  /** Ranks declared dead by someone other than a child exit (heartbeat staleness); `cause` for the rules (default heartbeat). */
  RanksLost: {
    readonly ranks: ReadonlyArray<number>
    readonly reason: string
    readonly cause?: Cause | undefined
    /** The job's mistake, not a death (ranks of a coordinated job that never attached): the run fails with it, rules or not. */
    readonly fatal?: boolean | undefined
  }
  CoordinatorFailed: { readonly reason: string }
  /** One of the run's own actors died of a defect: a bug in cohort, the root cause unless one came first. */
  ActorFailed: { readonly actor: string; readonly reason: string }
  /** The work is done; children are expected to exit on their own now. */
  RunDrained: {}
  /** Stop the run in order; `signal` is the one that asked, when one did (the exit status follows it). */
  AbortRequested: { readonly reason: string; readonly signal?: StopSignal | undefined }
  /** A restart scheduled by a `Restart` directive is due. */
  RestartDue: { readonly id: string }
  /** Children carrying new ranks joined the formed cohort (elastic growth): start them; the world grows. */
  ChildrenJoined: { readonly children: ReadonlyArray<ChildSpec> }
}>
export const SupervisionEvent = Data.taggedEnum<SupervisionEvent>()

export type Directive = Data.TaggedEnum<{
  Start: { readonly id: string }
  /**
   * Stop these children, side by side: `kill` at once, or `graceful` (SIGTERM, then SIGKILL after the grace:
   * `graceMs` where the strategy names one, else the supervisor's).
   */
  Terminate: {
    readonly ids: ReadonlyArray<string>
    readonly mode: "kill" | "graceful"
    readonly reason: string
    readonly graceMs?: number | undefined
  }
  /**
   * Tell membership (the coordinator) that these ranks are gone: `cause` says it for people; `kind` is the
   * death's cause as the failure rules name it, and `rule` the rule that decided it, if one did.
   */
  ReportDead: {
    readonly ranks: ReadonlyArray<number>
    readonly cause: string
    readonly kind?: Cause | undefined
    readonly rule?: string | undefined
    /** When it died, as whoever saw it end said (for the time to detect it). */
    readonly diedAt?: number | undefined
  }
  /**
   * The deaths crossed the elastic policy's max_failure: the run stops (the Terminate that follows). Said
   * once, even when nothing is left running, so the coordinator writes the consensus checkpoint: `decide` is
   * the one judge of the limit.
   */
  LimitCrossed: { readonly message: string }
  /** Send `RestartDue { id }` after `after` milliseconds. */
  Restart: { readonly id: string; readonly after: number }
  Escalate: { readonly cause: string }
  /** A failure rule decided a death (every match, whatever its action: the run's rule counts). */
  RuleMatched: { readonly rule: string; readonly action: "fail" | "elastic" | "ignore" | "restart"; readonly ranks: ReadonlyArray<number> }
  /** A line for the operator. */
  Note: { readonly message: string }
  /** Everything has ended; emitted exactly once, last. */
  Verdict: { readonly verdict: Verdict }
}>
export const Directive = Data.taggedEnum<Directive>()

export type ChildStatus =
  | "pending" //     not started yet
  | "running"
  | "stopping" //    told to stop; its exit is expected
  | "restarting" //  ended; a restart is scheduled
  | "exited" //      ended for good

export interface ChildState {
  readonly spec: ChildSpec
  readonly status: ChildStatus
  /**
   * When the child comes back (ms, absolute): set while it waits to restart,
   * and while it is being stopped on behalf of a group restart.
   */
  readonly restartAt?: number | undefined
  /** Membership gave up on it (silent, or it returned with work left): its next exit is a failure, clean or not. */
  readonly lost?: boolean | undefined
  /**
   * A failure rule already judged its ranks' loss (`RanksLost`): its exit is that loss ending, not a new
   * death, and is carried out as the rule said (the rule's position).
   */
  readonly ruledBy?: number | undefined
}

/**
 * A child's abnormal exit as the policy judged it: the death the rules see (`peer_lost` when secondary,
 * with how many ranks share its signature), what it is called, and its record for the deaths to come.
 */
interface Judged {
  readonly death: Death
  readonly what: string
  readonly record: DeathRecord
  readonly classification: Classification
  readonly signature: Signature | undefined
}

/** A death's cause as the rules name it, and the rule that decided it. */
type DeathKind = { readonly kind?: Cause | undefined; readonly rule?: string | undefined; readonly diedAt?: number | undefined }

type Failure = {
  readonly kind: "child-failed" | "restart-intensity" | "aborted" | "internal"
  readonly message: string
  readonly signal?: StopSignal | undefined
}

export interface SupervisorState {
  readonly children: ReadonlyArray<ChildState>
  /** Ranks in the world at formation. */
  readonly world: number
  /** Ranks that joined after formation: the current world is `world + joined`. */
  readonly joined: number
  readonly formed: boolean
  readonly drained: boolean
  /** A run-wide stop is under way: no restarts, no new failures. */
  readonly stopping: boolean
  readonly failure: Failure | undefined
  readonly coordinatorFailure: string | undefined
  /** Dead ranks, ascending, each once. */
  readonly dead: ReadonlyArray<number>
  /** Every death the policy judged (not an ignored one), in the order it met them: for secondary deaths and the root cause. */
  readonly deaths: ReadonlyArray<DeathRecord>
  readonly tolerated: number
  /**
   * When each restart happened, oldest first; pruned to the intensity window. `rule`: a failure rule's
   * restart, counted against that rule's own intensity (absent: the strategy's).
   */
  readonly restarts: ReadonlyArray<{ readonly at: number; readonly id: string; readonly rule?: number | undefined }>
  /** Jitter source (mulberry32 state). */
  readonly seed: number
  readonly verdict: Verdict | undefined
}

export const initialState = (children: ReadonlyArray<ChildSpec>, seed = 0x5eed): SupervisorState => {
  const ids = new Set<string>()
  for (const child of children) {
    if (ids.has(child.id)) throw new Error(`duplicate child id "${child.id}"`)
    ids.add(child.id)
  }
  return {
    children: children.map((spec) => ({ spec, status: "pending" })),
    world: worldOf(children),
    joined: 0,
    formed: false,
    drained: false,
    stopping: false,
    failure: undefined,
    coordinatorFailure: undefined,
    dead: [],
    deaths: [],
    tolerated: 0,
    restarts: [],
    seed: seed >>> 0,
    verdict: undefined
  }
}

/** The limit of the elastic strategy in force, if it has one. */
export const deathLimit = (strategy: Strategy, state: SupervisorState): number | undefined => {
  const current = inForce(strategy, state.formed)
  return current._tag === "Elastic" ? elasticLimit(current, state.world, state.world + state.joined) : undefined
}

/** "3/4", or once ranks have joined "3 of 6 (4 at formation)": the verdict names both worlds. */
export const deadOfWorld = (state: SupervisorState): string =>
  state.joined === 0
    ? `${state.dead.length}/${state.world}`
    : `${state.dead.length} of ${state.world + state.joined} (${state.world} at formation, ${state.joined} joined since)`

/** The verdict the state calls for, by the rules in `Verdict.ts`. */
export const verdictOf = (strategy: Strategy, state: SupervisorState): Verdict => {
  if (state.coordinatorFailure !== undefined) {
    return Verdict.Failed({ kind: "coordinator", message: `coordinator failed: ${state.coordinatorFailure}` })
  }
  if (state.failure !== undefined) return Verdict.Failed(state.failure)
  const dead = state.dead.length
  // The deaths that led here, the first that was not secondary leading: no echo of a loss is blamed.
  const chain = chainText(state.deaths, firstRoot(state.deaths), [])
  if (state.world > 0 && dead >= state.world + state.joined) {
    return Verdict.Failed({ kind: "all-ranks-lost", message: `every rank was lost (${deadOfWorld(state)})${chain}` })
  }
  const limit = deathLimit(strategy, state)
  if (limit !== undefined && dead >= limit) {
    return Verdict.Failed({
      kind: "max-failure",
      message: `max_failure exceeded: ${deadOfWorld(state)} ranks dead, threshold ${limit}${chain}`
    })
  }
  return Verdict.Completed({ dead, world: state.world + state.joined, tolerated: state.tolerated })
}

/** mulberry32: a tiny, well-mixed 32-bit generator; returns a draw in [0, 1) and the next seed. */
const nextRandom = (seed: number): readonly [number, number] => {
  const next = (seed + 0x6d2b79f5) >>> 0
  let t = next
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return [((t ^ (t >>> 14)) >>> 0) / 4294967296, next]
}

/** The undithered delay before restart number `attempt` (0-based). */
export const backoffBase = (backoff: Backoff, attempt: number): number =>
  // initial 0 stays 0 however large factor^attempt grows (0 × ∞ would be NaN).
  backoff.initial === 0 ? 0 : Math.min(backoff.max, backoff.initial * Math.pow(backoff.factor, attempt))

/** The delay before restart number `attempt`, dithered by `jitter` with draw `u` ∈ [0, 1), never above `max`. */
export const backoffDelay = (backoff: Backoff, attempt: number, u: number): number => {
  const base = backoffBase(backoff, attempt)
  const dithered = base * (1 + backoff.jitter * (2 * u - 1))
  return Math.max(0, Math.min(backoff.max, Math.round(dithered)))
}

/**
 * One step of supervision. Events about children that already ended, or that
 * the state does not know, change nothing: duplicate exit reports are harmless.
 */
export const decide = (
  strategy: Strategy,
  state: SupervisorState,
  event: SupervisionEvent,
  now: number
): readonly [ReadonlyArray<Directive>, SupervisorState] => {
  if (state.verdict !== undefined) return [[], state]
  const step = new Step(strategy, state, now)
  SupervisionEvent.$match(event, {
    Boot: () => step.boot(),
    ChildExited: ({ exit, id }) => step.childExited(id, exit),
    CohortFormed: () => step.update({ formed: true }),
    RanksLost: ({ cause, fatal, ranks, reason }) => step.ranksLost(ranks, reason, cause ?? "heartbeat", fatal === true),
    CoordinatorFailed: ({ reason }) => step.coordinatorFailed(reason),
    ActorFailed: ({ actor, reason }) => step.actorFailed(actor, reason),
    RunDrained: () => step.drain(),
    AbortRequested: ({ reason, signal }) => step.abort(reason, signal),
    RestartDue: ({ id }) => step.restartDue(id),
    ChildrenJoined: ({ children }) => step.join(children)
  })
  step.settle()
  return [step.directives, step.state]
}

/**
 * Each children array's positions by id. A step copies the array once and keeps the positions, so at
 * thousands of children finding and replacing one is not a scan (booting 8,000 ranks was quadratic).
 */
const positions = new WeakMap<ReadonlyArray<ChildState>, ReadonlyMap<string, number>>()

const positionsOf = (children: ReadonlyArray<ChildState>): ReadonlyMap<string, number> => {
  let index = positions.get(children)
  if (index === undefined) {
    index = new Map(children.map((child, at) => [child.spec.id, at]))
    positions.set(children, index)
  }
  return index
}

/** The mutable scratch of one `decide` call; nothing of it escapes but the result. */
class Step {
  readonly directives: Array<Directive> = []
  /** This step's own copy of the children, made at its first change; the input's array is never written. */
  private ownChildren: Array<ChildState> | undefined
  constructor(readonly strategy: Strategy, public state: SupervisorState, readonly now: number) {}

  update(patch: Partial<SupervisorState>): void {
    this.state = { ...this.state, ...patch }
  }

  child(id: string): ChildState | undefined {
    const at = positionsOf(this.state.children).get(id)
    return at === undefined ? undefined : this.state.children[at]
  }

  setChild(id: string, patch: Partial<ChildState>): void {
    const index = positionsOf(this.state.children)
    const at = index.get(id)
    if (at === undefined) return
    if (this.ownChildren === undefined) {
      this.ownChildren = [...this.state.children]
      positions.set(this.ownChildren, index)
      this.update({ children: this.ownChildren })
    }
    this.ownChildren[at] = { ...this.ownChildren[at]!, ...patch }
  }

  boot(): void {
    for (const child of this.state.children) {
      if (child.status !== "pending") continue
      this.setChild(child.spec.id, { status: "running" })
      this.directives.push(Directive.Start({ id: child.spec.id }))
    }
  }

  childExited(id: string, exit: ChildExit): void {
    const child = this.child(id)
    if (child === undefined || (child.status !== "running" && child.status !== "stopping")) return
    const { spec } = child
    const abnormal = !ChildExitModule.isClean(exit) || child.lost === true
    const what = `${spec.label} exited with ${ChildExitModule.describe(exit)}${child.lost === true && ChildExitModule.isClean(exit) ? " with its work unfinished" : ""}`
    if (child.lost === true) this.setChild(id, { lost: undefined })

    if (child.status === "stopping") {
      // We asked for this exit; it says nothing about the child's health. A rule's judgement of a loss ends with
      // it too: a child a group restart brings back is a new incarnation, whose next death is judged afresh.
      if (child.restartAt !== undefined && !this.state.stopping && !this.state.drained) {
        this.setChild(id, { status: "restarting", ruledBy: undefined })
        this.directives.push(Directive.Restart({ id, after: Math.max(0, child.restartAt - this.now) }))
      } else {
        this.setChild(id, { status: "exited", restartAt: undefined, ruledBy: undefined })
      }
      return
    }

    if (this.state.drained) {
      this.setChild(id, { status: "exited" })
      if (abnormal) {
        this.update({ tolerated: this.state.tolerated + 1 })
        this.note(`${what} after the run drained; tolerated`)
      }
      return
    }

    // The end of a loss a rule already judged: carried out as that rule said, not judged again.
    if (child.ruledBy !== undefined) {
      const rule = this.rules[child.ruledBy]
      this.setChild(id, { ruledBy: undefined })
      if (rule !== undefined && rule.then._tag === "Restart") this.restart(child, rule.then, `${what} (rule ${rule.name})`, child.ruledBy)
      else this.setChild(id, { status: "exited" })
      return
    }

    const current = inForce(this.strategy, this.state.formed)
    if (!abnormal) {
      if (current._tag === "Restart" && spec.restart === "permanent") {
        this.restart(child, current, `${what} (permanent child)`)
      } else {
        this.setChild(id, { status: "exited" })
      }
      return
    }

    const judged = this.judge(child, exit, what)
    const ruled = firstMatch(this.rules, judged.death)
    // An ignored exit is not a death: it explains no other, and repeats no error.
    if (ruled?.rule.then._tag !== "IgnoreExit") this.update({ deaths: [...this.state.deaths, judged.record] })
    if (ruled !== undefined) {
      this.applyRule(child, ruled.rule, ruled.index, judged)
      return
    }

    switch (current._tag) {
      case "KillAll": {
        this.setChild(id, { status: "exited" })
        const { graceMs, mode } = killAllStop(current)
        this.fail({ kind: "child-failed", message: this.led(judged.what, judged.record) }, mode, `${judged.what}: terminating every sibling (kill_all)`, graceMs)
        return
      }
      case "Elastic": {
        this.setChild(id, { status: "exited" })
        this.loseMembers(child, judged.what, { kind: judged.death.cause, diedAt: exit.at })
        return
      }
      case "Restart": {
        if (spec.restart === "temporary") {
          this.setChild(id, { status: "exited" })
          this.loseMembers(child, `${judged.what} (temporary child: not restarted)`)
          return
        }
        this.restart(child, current, judged.what)
        return
      }
    }
  }

  /** The failure rules of the strategy, tried before the phase's strategy. */
  get rules(): ReadonlyArray<FailureRule> {
    return this.strategy._tag === "Phased" ? this.strategy.rules ?? [] : []
  }

  /** A child's abnormal exit as the rules see it: its cause (what the exit's reporter knew, else its form), ranks, host and phase. */
  deathOf(child: ChildState, exit: ChildExit): Death {
    return {
      cause: ChildExitModule.causeOf(exit),
      exitCode: exit._tag === "Exited" ? exit.code : undefined,
      signal: exit._tag === "Signaled" ? exit.signal : undefined,
      ranks: child.spec.ranks,
      host: child.spec.group,
      phase: this.state.formed ? "after_formation" : "before_formation",
      lines: exit.lines,
      diedAt: exit.at
    }
  }

  /**
   * The death judged: its signature (a rank's own end only: an exit, an exception, a crash; a signal, an OOM
   * kill or a lost relay says nothing of the code), whether it is secondary, and the words for it.
   */
  judge(child: ChildState, exit: ChildExit, what: string): Judged {
    const base = this.deathOf(child, exit)
    const at = exit.at ?? this.now
    const ownEnd = (base.cause === "exit" || base.cause === "exception" || base.cause === "nccl") &&
      (exit._tag === "Crashed" || (exit._tag === "Exited" && exit.code !== 0))
    // What it wrote on stderr, where a program says what it died of (every way a rank's lines come keeps the two
    // streams apart); all its lines only where nobody kept them apart.
    const said = exit.stderr ?? exit.lines
    const report = {
      code: exit._tag === "Exited" ? exit.code : undefined,
      error: exit._tag === "Exited" ? exit.error : undefined,
      detail: exit._tag === "Crashed" ? exit.detail : undefined,
      lines: said
    }
    const signature = ownEnd ? signatureOf(report) : undefined
    const peerLoss = ownEnd ? peerLossOf(report) : undefined
    const classification = classify(this.state.deaths, { ranks: child.spec.ranks, at, cause: base.cause, signature, peerLoss })
    // The error it said, when its exit's own words do not (an entry rank's error and a crash's detail already do).
    const errorLine = ownEnd && exit._tag === "Exited" && exit.error === undefined ? errorOf(said ?? [])?.line : undefined
    const named = `${what}${errorLine === undefined ? "" : ` (${errorLine})`}`
    const secondary = classification._tag === "Secondary"
    const judgedWhat = secondary ? `${named} (${followedText(classification, (ranks) => this.labelOf(ranks))})` : named
    const record: DeathRecord = {
      ranks: child.spec.ranks,
      what: judgedWhat,
      at,
      cause: secondary ? "peer_lost" : base.cause,
      signature,
      followed: secondary ? classification.followed : undefined,
      secondary
    }
    const death: Death = {
      ...base,
      cause: record.cause,
      ...(secondary || signature === undefined ? {} : { sameErrorOn: classification.sameError.length + 1 })
    }
    return { death, what: judgedWhat, record, classification, signature }
  }

  /** "rank 2 of gpu-a": the label of the child carrying these ranks, else the ranks' numbers. */
  labelOf(ranks: ReadonlyArray<number>): string {
    return this.state.children.find((child) => child.spec.ranks.some((rank) => ranks.includes(rank)))?.spec.label ?? `rank(s) ${ranks.join(", ")}`
  }

  /** A failure's words led by its root cause: `lead` names `record`; the root, when another, and the other deaths follow. */
  led(lead: string, record: DeathRecord, named: ReadonlyArray<DeathRecord> = [record]): string {
    const root = rootOf(record)
    return `${lead}${chainText(this.state.deaths, root, named)}`
  }

  /** Carry out a rule's action on a child's abnormal exit. */
  applyRule(child: ChildState, rule: FailureRule, index: number, judged: Judged): void {
    const id = child.spec.id
    const { death, what } = judged
    const why = `${what} (rule ${rule.name})`
    this.directives.push(Directive.RuleMatched({ rule: rule.name, action: actionName(rule.then), ranks: child.spec.ranks }))
    switch (rule.then._tag) {
      case "FailRun": {
        this.setChild(id, { status: "exited" })
        const { classification, record, signature } = judged
        if (rule.when.sameErrorOn !== undefined && classification._tag === "Primary" && signature !== undefined) {
          // A bug met on several ranks: named by the first of them and its error.
          const named = [...classification.sameError, record]
          const ranks = named.flatMap((each) => each.ranks)
          // In the first rank's words: the error as it was first met (the others' differ in their numbers at most).
          const lead = `the same error on ${named.length} ranks (${ranks.join(", ")}): ${(named[0]!.signature ?? signature).text} (rule ${rule.name})`
          this.fail({ kind: "child-failed", message: this.led(lead, named[0]!, named) }, "graceful", `${lead}: stopping every sibling`)
          return
        }
        this.fail({ kind: "child-failed", message: this.led(why, record) }, "graceful", `${why}: stopping every sibling`)
        return
      }
      case "DropRanks":
        this.setChild(id, { status: "exited" })
        this.loseMembers(child, why, { kind: death.cause, rule: rule.name, diedAt: death.diedAt })
        return
      case "IgnoreExit":
        this.setChild(id, { status: "exited" })
        this.note(`${what}: ignored, not counted (rule ${rule.name})`)
        return
      case "Restart":
        this.restart(child, rule.then, why, index)
        return
    }
  }

  /** Carry out a rule's action on ranks lost without an exit (silence, a lost host); their children's exits follow the rule. */
  applyLossRule(ranks: ReadonlyArray<number>, rule: FailureRule, index: number, what: string): void {
    const why = `${what} (rule ${rule.name})`
    this.directives.push(Directive.RuleMatched({ rule: rule.name, action: actionName(rule.then), ranks }))
    const carrying = this.state.children.filter((child) => child.spec.ranks.some((rank) => ranks.includes(rank)))
    for (const child of carrying) if (child.status === "running") this.setChild(child.spec.id, { ruledBy: index })
    switch (rule.then._tag) {
      case "FailRun":
        this.fail({ kind: "child-failed", message: why }, "graceful", `${why}: stopping every child`)
        return
      case "DropRanks":
        this.markDead(ranks, why, false)
        return
      case "IgnoreExit":
        this.note(`${what}: ignored, not counted (rule ${rule.name})`)
        return
      case "Restart": {
        const policy = rule.then
        // Running ones come back at their exit (ruledBy); one already gone, at once.
        for (const child of carrying) if (child.status === "exited") this.restart(child, policy, `${why} after ${child.spec.label} had exited`, index)
        return
      }
    }
  }

  /** Elastic membership: the child's ranks (its whole group's, if significant) are dead; survivors carry on. */
  loseMembers(child: ChildState, what: string, how?: DeathKind): void {
    const { spec } = child
    let ranks = spec.ranks
    if (spec.significant && spec.group !== undefined) {
      const group = this.state.children.filter((other) => other.spec.group === spec.group)
      ranks = group.flatMap((member) => member.spec.ranks)
      const running = group.filter((member) => member.status === "running")
      this.terminate(running, "graceful", `${what}: its group ${spec.group} goes with it`)
      // Members waiting to come back (a pending restart) stay down with their group.
      for (const member of group) {
        if (member.status === "restarting" || member.status === "pending") {
          this.setChild(member.spec.id, { status: "exited", restartAt: undefined })
        } else if (member.status === "stopping") {
          this.setChild(member.spec.id, { restartAt: undefined })
        }
      }
    }
    this.markDead(ranks, what, true, how)
  }

  ranksLost(ranks: ReadonlyArray<number>, reason: string, cause: Cause, fatal = false): void {
    if (this.state.stopping || this.state.drained) return
    const current = inForce(this.strategy, this.state.formed)
    const what = `rank(s) ${ranks.join(", ")} lost: ${reason}`
    if (fatal) {
      this.update({ deaths: [...this.state.deaths, { ranks, what, at: this.now, cause, secondary: false }] })
      this.fail({ kind: "child-failed", message: what }, "graceful", `${what}: stopping every child`)
      return
    }
    const host = this.state.children.find((child) => child.spec.ranks.some((rank) => ranks.includes(rank)))?.spec.group
    const ruled = firstMatch(this.rules, { cause, ranks, host, phase: this.state.formed ? "after_formation" : "before_formation" })
    // Silence, a lost host or relay, a group that never formed: never an echo of another death, but one others may echo.
    const fresh = ranks.filter((rank) => !this.state.dead.includes(rank))
    if (ruled?.rule.then._tag !== "IgnoreExit" && fresh.length > 0) {
      this.update({ deaths: [...this.state.deaths, { ranks: fresh, what, at: this.now, cause, secondary: false }] })
    }
    if (ruled !== undefined) {
      this.applyLossRule(ranks, ruled.rule, ruled.index, what)
      return
    }
    if (current._tag === "KillAll") {
      // Fail first: kill_all stops every child at once, even when these were the last ranks.
      const { graceMs, mode } = killAllStop(current)
      this.fail({ kind: "child-failed", message: what }, mode, `${what}: terminating every child (kill_all)`, graceMs)
    }
    // Under restart a lost rank is restarted like any failure: at its exit if it still runs (it is being
    // killed), at once if it has already gone.
    if (current._tag === "Restart") {
      for (const child of this.state.children.filter((each) => each.spec.ranks.some((rank) => ranks.includes(rank)))) {
        if (child.status === "running") this.setChild(child.spec.id, { lost: true })
        else if (child.status === "exited") this.restart(child, current, `${what} after ${child.spec.label} had exited`)
      }
      return
    }
    this.markDead(ranks, what, false)
  }

  /** Record deaths of ranks in the world, report the new ones, and stop the run once the threshold is crossed. */
  markDead(ranks: ReadonlyArray<number>, cause: string, report = true, how?: DeathKind): void {
    const known = new Set(this.state.dead)
    const world = new Set(this.state.children.flatMap((child) => child.spec.ranks))
    const fresh = [...new Set(ranks)].filter((rank) => world.has(rank) && !known.has(rank)).sort((a, b) => a - b)
    if (fresh.length === 0) return
    this.update({ dead: [...this.state.dead, ...fresh].sort((a, b) => a - b) })
    if (report) {
      this.directives.push(Directive.ReportDead({
        ranks: fresh,
        cause,
        ...(how?.kind === undefined ? {} : { kind: how.kind }),
        ...(how?.rule === undefined ? {} : { rule: how.rule }),
        ...(how?.diedAt === undefined ? {} : { diedAt: how.diedAt })
      }))
      this.note(`${cause}: reporting rank(s) ${fresh.join(", ")} dead; survivors carry the work`)
    }
    if (this.state.stopping) return
    const dead = this.state.dead.length
    const limit = deathLimit(this.strategy, this.state)
    if (this.state.world > 0 && dead >= this.state.world + this.state.joined) {
      this.stopAll("graceful", `every rank was lost (${deadOfWorld(this.state)}): stopping the run`)
    } else if (limit !== undefined && dead >= limit) {
      const message = `max_failure exceeded (${deadOfWorld(this.state)} dead, threshold ${limit})`
      this.directives.push(Directive.LimitCrossed({ message }))
      this.stopAll("graceful", `${message}: stopping the run`)
    }
  }

  /** Restart a child under `policy`: the strategy's, or (`rule`) a failure rule's, with that rule's own intensity. */
  restart(child: ChildState, policy: Restart, what: string, rule?: number): void {
    const id = child.spec.id
    const windowStart = this.now - policy.within
    const counted = (entry: SupervisorState["restarts"][number]) => entry.rule === rule
    const recent = this.state.restarts.filter((entry) => counted(entry) && entry.at > windowStart)
    this.update({ restarts: this.state.restarts.filter((entry) => !counted(entry) || entry.at > windowStart) })
    if (recent.length >= policy.maxRestarts) {
      this.setChild(id, { status: "exited" })
      // `within` as the file wrote it (10m, not 600000 ms).
      const cause = `${what}; restart intensity exceeded: ${child.spec.label} would be restart ` +
        `${recent.length + 1} within ${formatDuration(policy.within)} (max_restarts ${policy.maxRestarts})`
      this.directives.push(Directive.Escalate({ cause }))
      // The cause is the escalation's and the verdict's: the stop's own line only says what it does.
      this.fail({ kind: "restart-intensity", message: cause }, "graceful", "restart intensity exceeded: stopping every child")
      return
    }
    const attempt = policy.scope === "one" ? recent.filter((entry) => entry.id === id).length : recent.length
    const [u, seed] = nextRandom(this.state.seed)
    const after = backoffDelay(policy.backoff, attempt, u)
    this.update({ seed, restarts: [...this.state.restarts, { at: this.now, id, ...(rule === undefined ? {} : { rule }) }] })
    this.setChild(id, { status: "restarting", restartAt: this.now + after })
    this.directives.push(Directive.Restart({ id, after }))
    if (policy.scope === "all") {
      const running = this.state.children.filter((other) => other.status === "running")
      this.terminate(running, "graceful", `${what}: restarting the whole group in ${after} ms`, this.now + after)
    } else {
      this.note(`${what}: restarting it in ${after} ms`)
    }
  }

  /**
   * Bring back the child whose restart is due, and with it every other child
   * whose restart is due by now, in start order: a group restarted together
   * comes back in the order it first started (a relay before its ranks),
   * whichever timer fires first.
   */
  restartDue(id: string): void {
    const child = this.child(id)
    if (child === undefined || child.status !== "restarting" || this.state.stopping) return
    for (const other of this.state.children) {
      const due = other.spec.id === id || (other.restartAt !== undefined && other.restartAt <= this.now)
      if (other.status !== "restarting" || !due) continue
      this.setChild(other.spec.id, { status: "running", restartAt: undefined })
      this.directives.push(Directive.Start({ id: other.spec.id }))
    }
  }

  /**
   * Growth: children with ranks new to the run join the formed cohort and start
   * at once. Refused (nothing changes) before formation, once the run is
   * stopping or drained, and for an id or a rank the run has already had:
   * rank numbers are never reused.
   */
  join(children: ReadonlyArray<ChildSpec>): void {
    if (!this.state.formed || this.state.stopping || this.state.drained) return
    const ids = positionsOf(this.state.children)
    const ranks = new Set(this.state.children.flatMap((child) => child.spec.ranks))
    const seen = new Set<string>()
    const fresh = children.filter((child) => {
      if (ids.has(child.id) || seen.has(child.id) || child.ranks.some((rank) => ranks.has(rank))) return false
      seen.add(child.id)
      for (const rank of child.ranks) ranks.add(rank)
      return true
    })
    if (fresh.length === 0) return
    const joined = new Set(fresh.flatMap((child) => child.ranks)).size
    this.update({
      children: [...this.state.children, ...fresh.map((spec): ChildState => ({ spec, status: "running" }))],
      joined: this.state.joined + joined
    })
    this.ownChildren = undefined
    for (const child of fresh) this.directives.push(Directive.Start({ id: child.id }))
    this.note(`${fresh.map((child) => child.label).join(", ")} joined the cohort: ${this.state.world + this.state.joined} rank(s) now`)
  }

  coordinatorFailed(reason: string): void {
    if (this.state.coordinatorFailure !== undefined) return
    this.update({ coordinatorFailure: reason })
    this.stopAll("graceful", `coordinator failed: ${reason}: stopping every child`)
  }

  /** A bug in cohort: the root cause unless one came first; every child is stopped in order. */
  actorFailed(actor: string, reason: string): void {
    const message = `internal error: the ${actor} failed: ${reason}`
    this.fail({ kind: "internal", message }, "graceful", `${message}: stopping every child`)
  }

  drain(): void {
    this.update({ drained: true })
    for (const child of this.state.children) {
      if (child.status === "restarting") this.setChild(child.spec.id, { status: "exited", restartAt: undefined })
    }
  }

  abort(reason: string, signal: StopSignal | undefined): void {
    if (this.state.stopping) return
    if (!this.state.drained && this.state.failure === undefined) {
      this.update({ failure: { kind: "aborted", message: `aborted: ${reason}`, ...(signal === undefined ? {} : { signal }) } })
    }
    this.stopAll("graceful", `aborted: ${reason}: stopping every child`)
  }

  /** Record the root cause (the first one wins) and stop everything. */
  fail(failure: Failure, mode: "kill" | "graceful", message: string, graceMs?: number): void {
    if (this.state.failure === undefined) this.update({ failure })
    this.stopAll(mode, message, graceMs)
  }

  stopAll(mode: "kill" | "graceful", reason: string, graceMs?: number): void {
    if (this.state.stopping) return
    this.update({ stopping: true })
    for (const child of this.state.children) {
      if (child.status === "pending" || child.status === "restarting") {
        this.setChild(child.spec.id, { status: "exited", restartAt: undefined })
      } else if (child.status === "stopping") {
        // Already on its way out (a group restart): it must not come back.
        this.setChild(child.spec.id, { restartAt: undefined })
      }
    }
    const running = this.state.children.filter((child) => child.status === "running")
    this.terminate(running, mode, reason, undefined, graceMs)
  }

  /** Stop children (listed in reverse start order), each exactly once. */
  terminate(children: ReadonlyArray<ChildState>, mode: "kill" | "graceful", reason: string, restartAt?: number, graceMs?: number): void {
    const targets = children.filter((child) => child.status === "running").reverse()
    for (const child of targets) this.setChild(child.spec.id, { status: "stopping", restartAt })
    this.note(reason)
    if (targets.length > 0) {
      this.directives.push(Directive.Terminate({ ids: targets.map((child) => child.spec.id), mode, reason, ...(graceMs === undefined ? {} : { graceMs }) }))
    }
  }

  note(message: string): void {
    this.directives.push(Directive.Note({ message }))
  }

  /** Once nothing runs, stops or waits to restart, the verdict is due. */
  settle(): void {
    const live = this.state.children.some((child) => child.status !== "exited")
    if (live) return
    const verdict = verdictOf(this.strategy, this.state)
    this.update({ verdict })
    this.directives.push(Directive.Verdict({ verdict }))
  }
}
