/**
 * Failure rules: what to do with a death, by its cause, before the phase's strategy is asked.
 *
 * A rule is a `when` (every field given must match) and a `then` (`fail`, `elastic`, `restart { … }`
 * or `ignore`). The rules are tried in order and the first that matches decides; a death no rule
 * matches goes to the strategy in force, as before rules existed. Kubernetes' `podFailurePolicy`
 * works the same way (first match wins, `onExitCodes`, `onPodConditions`), without ranks, hosts,
 * heartbeats or elastic membership, which these rules know.
 *
 * Everything here is data and pure functions: `decide` matches a `Death` against the rules, and the
 * property tests hold `firstMatch` to an independent oracle.
 */
import * as Schema from "effect/Schema"
import { Restart } from "./RestartStrategy.ts"
import { ExpectedId } from "../../config/reading/Expected.ts"

/**
 * Why a rank died, as cohort can tell it:
 * - `exit`: it exited with a non-zero status (or a clean one with its work unfinished);
 * - `signal`: a signal cohort did not send ended it;
 * - `exception`: an `entry:` rank's code threw;
 * - `oom`: the kernel's OOM killer ended it;
 * - `heartbeat`: it was silent for the heartbeat timeout;
 * - `host_lost`: its host's agent, or the link to it, is gone;
 * - `relay_lost`: its host's relay is gone;
 * - `nccl`: an asynchronous NCCL error;
 * - `rendezvous`: its process group's generation did not form in time (GroupRendezvous);
 * - `peer_lost`: a secondary death, one that followed another and is explained by it (SecondaryDeaths).
 */
export const Cause = Schema.Literal("exit", "signal", "exception", "oom", "heartbeat", "host_lost", "relay_lost", "nccl", "rendezvous", "peer_lost")
export type Cause = typeof Cause.Type
export const causes: ReadonlyArray<Cause> = Cause.literals

export const PolicyPhase = Schema.Literal("before_formation", "after_formation")
export type PolicyPhase = typeof PolicyPhase.Type

/** Linux's signal names, as a rule writes them (`SIGTERM`). */
export const signalNames = [
  "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGIOT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV",
  "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU",
  "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPOLL", "SIGPWR", "SIGSYS"
] as const
export const SignalName = Schema.Literal(...signalNames)

/** An exit status, 0 to 255. */
export const ExitCode = Schema.Int.pipe(Schema.between(0, 255), Schema.annotations({ [ExpectedId]: "an exit code from 0 to 255" }))

/** `exit_code: [1, 2]` (in) or `{ not_in: [0, 143] }`. */
export class ExitCodes extends Schema.Class<ExitCodes>("ExitCodes")({
  op: Schema.Literal("in", "not_in"),
  values: Schema.Array(ExitCode).pipe(Schema.minItems(1))
}) {}

/** Consecutive runs of statuses, in the list's order: `[1, 2, 3, 7]` is `[[1, 3], [7, 7]]`. */
export const codeRuns = (codes: ReadonlyArray<number>): Array<readonly [number, number]> => {
  const runs: Array<readonly [number, number]> = []
  for (let at = 0; at < codes.length;) {
    let end = at
    while (end + 1 < codes.length && codes[end + 1] === codes[end]! + 1) end++
    runs.push([codes[at]!, codes[end]!] as const)
    at = end + 1
  }
  return runs
}

/** Statuses as people write them: runs of three or more as ranges (`1-127`), the others one by one. */
export const codesText = (codes: ReadonlyArray<number>): string =>
  codeRuns(codes).flatMap(([first, last]) => (last - first >= 2 ? [`${first}-${last}`] : Array.from({ length: last - first + 1 }, (_, offset) => String(first + offset)))).join(", ")

/** A pattern over rank numbers or host names: `*` any run of characters, `?` one. */
export const Glob = Schema.String.pipe(Schema.minLength(1))

/** A regular expression's source that compiles (JavaScript syntax, searched anywhere in a line). */
export const Pattern = Schema.String.pipe(
  Schema.minLength(1),
  Schema.filter((source) => {
    try {
      new RegExp(source)
      return true
    } catch (error) {
      return `expected a regular expression, got ${JSON.stringify(source)} (${(error as Error).message.replace(/^Invalid regular expression: (\/.*\/[a-z]*: )?/, "")})`
    }
  })
)

/** How many ranks a `same_error_on` asks for: a second one at least (one rank's error is every failure). */
export const SameErrorOn = Schema.Int.pipe(Schema.between(2, 1_000_000), Schema.annotations({ [ExpectedId]: "a number of ranks from 2 to 1000000" }))

/** What a death must be for the rule to apply: every field given must match. */
export class RuleWhen extends Schema.Class<RuleWhen>("RuleWhen")({
  exitCodes: Schema.optional(ExitCodes),
  signals: Schema.optional(Schema.Array(SignalName).pipe(Schema.minItems(1))),
  causes: Schema.optional(Schema.Array(Cause).pipe(Schema.minItems(1))),
  ranks: Schema.optional(Schema.Array(Glob).pipe(Schema.minItems(1))),
  hosts: Schema.optional(Schema.Array(Glob).pipe(Schema.minItems(1))),
  phase: Schema.optional(PolicyPhase),
  /** Searched in the rank's last lines of output. */
  log: Schema.optional(Pattern),
  /**
   * The death's failure signature is the same as that of this many ranks' deaths, it included, none of them
   * secondary (`repeated-error`: 2, a bug met on a second rank).
   */
  sameErrorOn: Schema.optional(SameErrorOn)
}) {}

/** The run fails with this death as its root cause; the siblings get their grace. */
export class FailRun extends Schema.TaggedClass<FailRun>()("FailRun", {}) {}
/** The ranks are dropped and the survivors carry the work; the death counts toward max_failure. */
export class DropRanks extends Schema.TaggedClass<DropRanks>()("DropRanks", {}) {}
/** Not a death: the child has ended, nothing is counted or reported. */
export class IgnoreExit extends Schema.TaggedClass<IgnoreExit>()("IgnoreExit", {}) {}

export const RuleAction = Schema.Union(FailRun, DropRanks, IgnoreExit, Restart)
export type RuleAction = typeof RuleAction.Type

export class FailureRule extends Schema.Class<FailureRule>("FailureRule")({
  name: Schema.String.pipe(Schema.minLength(1)),
  when: RuleWhen,
  then: RuleAction
}) {}

/** Whether a rule's `when` says nothing: it matches every death, and the rules after it can never decide. */
export const matchesEverything = (when: RuleWhen): boolean =>
  when.exitCodes === undefined && when.signals === undefined && when.causes === undefined && when.ranks === undefined &&
  when.hosts === undefined && when.phase === undefined && when.log === undefined && when.sameErrorOn === undefined

/** Rules in order, none of them after one that matches every death (it could never decide). */
export const RuleList = Schema.Array(FailureRule).pipe(
  Schema.filter((rules) => {
    const everything = rules.findIndex((rule) => matchesEverything(rule.when))
    return everything === -1 || everything === rules.length - 1 || `rules after rules[${everything}] can never match: its empty when matches every death`
  })
)

/** A death, as the rules see it. */
export interface Death {
  readonly cause: Cause
  readonly exitCode?: number | undefined
  readonly signal?: string | undefined
  readonly ranks: ReadonlyArray<number>
  readonly host?: string | undefined
  readonly phase: PolicyPhase
  /** The rank's last lines of output, oldest first, when they are known. */
  readonly lines?: ReadonlyArray<string> | undefined
  /** When it died, when whoever saw it end said (not matched: carried to the death's report). */
  readonly diedAt?: number | undefined
  /** How many ranks, it included, died of its failure signature without being secondary (unset: it has none, or is secondary). */
  readonly sameErrorOn?: number | undefined
}

const globCache = new Map<string, RegExp>()

/** Whether `text` matches the glob `pattern` (whole text; `*` and `?` are the only wildcards). */
export const globMatches = (pattern: string, text: string): boolean => {
  let compiled = globCache.get(pattern)
  if (compiled === undefined) {
    const body = [...pattern].map((char) => (char === "*" ? ".*" : char === "?" ? "." : char.replace(/[.+^${}()|[\]\\]/g, "\\$&"))).join("")
    compiled = new RegExp(`^${body}$`)
    globCache.set(pattern, compiled)
  }
  return compiled.test(text)
}

/** Whether the death is what `when` describes. */
export const matches = (when: RuleWhen, death: Death): boolean => {
  if (when.phase !== undefined && when.phase !== death.phase) return false
  if (when.causes !== undefined && !when.causes.includes(death.cause)) return false
  if (when.exitCodes !== undefined) {
    if (death.exitCode === undefined) return false
    const listed = when.exitCodes.values.includes(death.exitCode)
    if (listed !== (when.exitCodes.op === "in")) return false
  }
  if (when.signals !== undefined && (death.signal === undefined || !when.signals.some((name) => name === death.signal))) return false
  if (when.ranks !== undefined && !death.ranks.some((rank) => when.ranks!.some((pattern) => globMatches(pattern, String(rank))))) return false
  if (when.hosts !== undefined && (death.host === undefined || !when.hosts.some((pattern) => globMatches(pattern, death.host!)))) return false
  if (when.log !== undefined) {
    const pattern = new RegExp(when.log)
    if (!(death.lines ?? []).some((line) => pattern.test(line))) return false
  }
  if (when.sameErrorOn !== undefined && (death.sameErrorOn ?? 0) < when.sameErrorOn) return false
  return true
}

/** The first rule that matches the death, with its position; undefined when none does. */
export const firstMatch = (rules: ReadonlyArray<FailureRule>, death: Death): { readonly rule: FailureRule; readonly index: number } | undefined => {
  const index = rules.findIndex((rule) => matches(rule.when, death))
  return index === -1 ? undefined : { rule: rules[index]!, index }
}

/** A rule's action as the file writes it: `fail`, `elastic`, `ignore` or `restart`. */
export const actionName = (action: RuleAction): "fail" | "elastic" | "ignore" | "restart" =>
  action._tag === "FailRun" ? "fail" : action._tag === "DropRanks" ? "elastic" : action._tag === "IgnoreExit" ? "ignore" : "restart"
