/**
 * The run's state as the status endpoint serves it (`GET /state.json`, the
 * `/events` stream's `state` messages), as a Schema: its decoded type is the
 * `RunState` that RunView folds events into, and decoding it is how
 * `bun run status` reads what a launcher served.
 *
 * Decoding fills in what an older launcher left out, with the value that
 * means "not known" (0, "", "?", null, an empty list): the status of a run
 * started from an older checkout still shows. A field that is there with a
 * value this version does not know (a phase it has never heard of, a rank
 * number that is a string) does not decode: shown anyway, it would mislead.
 * Only the phase and the ranks, which every launcher has served, must be
 * there.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"

/** A field an older launcher may not have served, read as `fallback` when absent. */
const withDefault = <S extends Schema.Schema.Any>(schema: S, fallback: () => Schema.Schema.Type<S>) =>
  Schema.optionalWith(schema, { exact: true, default: fallback })

/** A field that is optional in the state itself (a state built by hand, or by an older launcher, has none). */
const optional = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { exact: true })

const none = () => null

/**
 * A measured number (a reported loss, a throughput) as JSON carries it: `JSON.stringify` writes NaN
 * and ±Infinity as null, so null reads back as NaN. A diverged loss is still shown, not a reason to refuse
 * the whole state or the events line.
 */
export const Measured = Schema.transform(Schema.NullOr(Schema.Number), Schema.Number, {
  strict: true,
  decode: (value) => value ?? Number.NaN,
  encode: (value) => value
})

/** The ranks' latest reported metrics (loss, accuracy, …), by name. */
export const Metrics = Schema.Record({ key: Schema.String, value: Measured })

export const Phase = Schema.Literal("waiting", "forming", "training", "done", "failed")
export type Phase = typeof Phase.Type

export const RankState = Schema.Literal("starting", "running", "exited", "dead")
export type RankState = typeof RankState.Type

/** A rank's resource use, sampled by its agent every few seconds. */
export const ResourceSample = Schema.Struct({
  /** Share of one core over the last interval (1 = one core busy). */
  cpu: withDefault(Schema.Number, () => 0),
  rssBytes: withDefault(Schema.Number, () => 0),
  /** Its device's memory in use and utilisation (0–1), on GPU hosts that can tell; null elsewhere. */
  gpuMemoryBytes: withDefault(Schema.NullOr(Schema.Number), none),
  gpuUtilization: withDefault(Schema.NullOr(Schema.Number), none),
  at: withDefault(Schema.Number, () => 0)
})
export type ResourceSample = typeof ResourceSample.Type

export const RankStatus = Schema.Struct({
  rank: Schema.Number,
  host: withDefault(Schema.String, () => "?"),
  /** The device index, or `cpu`. */
  device: withDefault(Schema.String, () => "?"),
  pid: withDefault(Schema.NullOr(Schema.Number), none),
  state: RankState,
  /** "status 0", "signal SIGKILL", … once an incarnation has ended. */
  exit: withDefault(Schema.NullOr(Schema.String), none),
  /** Restarts of its seat so far: a restart under a new number carries the count of the number it replaces. */
  restarts: withDefault(Schema.Number, () => 0),
  /** The number this rank restarted as (it is history from then on); absent while it is the seat's current one. */
  replacedBy: Schema.optional(Schema.Number),
  /** When its current (or last) incarnation started and ended, ms since the epoch. */
  startedAt: withDefault(Schema.NullOr(Schema.Number), none),
  endedAt: withDefault(Schema.NullOr(Schema.Number), none),
  /** Its use now, while it runs: null once it has ended (an ended rank uses nothing). */
  resources: withDefault(Schema.NullOr(ResourceSample), none),
  /** Its last sample before it ended (what a rank killed for its memory was using), once it has ended. */
  lastResources: optional(Schema.NullOr(ResourceSample)),
  /** Its latest reported metrics (`ctx.progress`), by name; absent before it reported any. Kept once it has ended. */
  metrics: optional(Metrics)
})
export type RankStatus = typeof RankStatus.Type

export const HostStatus = Schema.Struct({
  host: Schema.String,
  /** Ranks the cluster file declares for it (devices). */
  declaredRanks: withDefault(Schema.Number, () => 0),
  state: Schema.Literal("waiting", "joined", "gone"),
  /** Why it is gone, once it is. */
  reason: withDefault(Schema.NullOr(Schema.String), none)
})
export type HostStatus = typeof HostStatus.Type

export const Death = Schema.Struct({
  rank: Schema.Number,
  host: withDefault(Schema.String, () => "?"),
  cause: withDefault(Schema.String, () => "?"),
  at: withDefault(Schema.Number, () => 0),
  /** The cause as the failure rules name it (`exit`, `oom`, `heartbeat`, …), when the policy said it. */
  kind: optional(Schema.NullOr(Schema.String)),
  /** The failure rule that decided the death, if one did. */
  rule: optional(Schema.NullOr(Schema.String))
})
export type Death = typeof Death.Type


export const Training = Schema.Struct({
  epoch: Schema.Number,
  epochs: withDefault(Schema.Number, () => 0),
  /** Samples processed in the current epoch, across ranks, and the epoch's size. */
  samplesDone: withDefault(Schema.Number, () => 0),
  datasetSize: withDefault(Schema.Number, () => 0),
  /** Across ranks, over the last progress interval; null before the first. */
  samplesPerSec: withDefault(Schema.NullOr(Schema.Number), none),
  /** The ranks' latest reported metrics, averaged. */
  metrics: withDefault(Metrics, () => ({}))
})
export type Training = typeof Training.Type

/** What forms the join window: the quorum (`controller.join.min_ranks`) and how it starts. */
export const JoinRule = Schema.Struct({
  quorum: Schema.Number,
  start: Schema.Literal("auto", "manual", "hybrid")
})
export type JoinRule = typeof JoinRule.Type

export const Cleanup = Schema.Struct({
  since: withDefault(Schema.Number, () => 0),
  detail: Schema.String
})
export type Cleanup = typeof Cleanup.Type

/** A point of the world's size over time: every rank the run has had, and those not lost. */
export const WorldSize = Schema.transform(
  // An older launcher's points had no `alive`: none were lost then, as far as it said.
  Schema.Struct({ at: Schema.Number, ranks: Schema.Number, alive: optional(Schema.Number) }),
  Schema.Struct({ at: Schema.Number, ranks: Schema.Number, alive: Schema.Number }),
  { strict: true, decode: (point) => ({ ...point, alive: point.alive ?? point.ranks }), encode: (point) => point }
)
export type WorldSize = typeof WorldSize.Type

/** Inventory.ts's `Inventory`: every admitted host's devices as its agent named them, with their ranks. */
const InventoryDevice = Schema.Struct({
  device: withDefault(Schema.String, () => "?"),
  label: withDefault(Schema.String, () => "?"),
  ranks: withDefault(Schema.Array(Schema.Number), () => [])
})
const HostInventory = Schema.Struct({ host: Schema.String, devices: withDefault(Schema.Array(InventoryDevice), () => []) })
export const Inventory = Schema.Array(HostInventory)

/** RecoveryFigures.ts's `RecoveryState`: each death the policy carried, with its times. */
const DeathFigures = Schema.Struct({
  rank: Schema.Number,
  kind: Schema.NullOr(Schema.String),
  rule: Schema.NullOr(Schema.String),
  how: Schema.Literal("dropped", "restarted"),
  diedAt: Schema.Number,
  knownAt: Schema.Number,
  recoveredAt: Schema.NullOr(Schema.Number),
  entered: optional(Schema.Boolean)
})
export const RecoveryState = Schema.Struct({
  deaths: Schema.Array(DeathFigures),
  /** A restarted rank's new number → the number it died under (JSON's keys are text). */
  replacing: Schema.Record({ key: Schema.String, value: Schema.Number }),
  seats: optional(Schema.Array(Schema.Struct({ at: Schema.Number, seats: Schema.Number })))
})

export const RunState = Schema.Struct({
  run: withDefault(Schema.String, () => ""),
  phase: Phase,
  startedAt: withDefault(Schema.Number, () => 0),
  updatedAt: withDefault(Schema.Number, () => 0),
  /** Ranks the file declares, and once formed, the world's size. */
  world: withDefault(Schema.Number, () => 0),
  joinedRanks: withDefault(Schema.Number, () => 0),
  joinedHosts: withDefault(Schema.Number, () => 0),
  /** Join-window countdowns in ms; frozen at formation, null once irrelevant. */
  windowRemainingMs: withDefault(Schema.NullOr(Schema.Number), none),
  capRemainingMs: withDefault(Schema.NullOr(Schema.Number), none),
  /** When the window closes and when its hard cap falls, ms since the epoch, as of the last countdown; null before it. */
  windowClosesAt: optional(Schema.NullOr(Schema.Number)),
  hardCapAt: optional(Schema.NullOr(Schema.Number)),
  /** The join window's rule, as the run started with it; null from a launcher that did not say. */
  joinRule: optional(Schema.NullOr(JoinRule)),
  hosts: withDefault(Schema.Array(HostStatus), () => []),
  ranks: Schema.Array(RankStatus),
  deaths: withDefault(Schema.Array(Death), () => []),
  training: withDefault(Schema.NullOr(Training), none),
  /** Samples per second across ranks over time, newest last (at most RunView's THROUGHPUT_POINTS). */
  throughput: withDefault(Schema.Array(Schema.Struct({ at: Schema.Number, samplesPerSec: Measured })), () => []),
  /** The verdict line once the run has ended. */
  verdict: withDefault(Schema.NullOr(Schema.String), none),
  /** Ranks that joined after formation (elastic growth). */
  joinedAfterFormation: withDefault(Schema.Number, () => 0),
  /** The world over time, newest last: at formation and at each join or loss. */
  worldSizes: withDefault(Schema.Array(WorldSize), () => []),
  /** Every admitted host's devices with the ranks that ran on each (Inventory.ts); empty before formation. */
  inventory: optional(Inventory),
  /**
   * What the launcher is still doing after the verdict (telling the hosts, waiting out the agents' grace,
   * ending what is left on remote hosts), while it does it; null otherwise. The verdict does not wait for it.
   */
  cleanup: optional(Schema.NullOr(Cleanup)),
  /** Each death the policy carried (dropped or restarted) with its times to detect and recover (RecoveryFigures). */
  recovery: optional(RecoveryState),
  /** When the verdict was said: the end of the run's wall time for its ETTR. */
  endedAt: optional(Schema.NullOr(Schema.Number)),
  /** How many deaths each failure rule decided, whatever its action. */
  ruleMatches: optional(Schema.Record({ key: Schema.String, value: Schema.Number })),
  /** The effective training ratio as of the latest membership change, training tick or verdict (RecoveryFigures). */
  effectiveTraining: optional(Schema.NullOr(Schema.Number))
})
export type RunState = typeof RunState.Type

/**
 * What is wrong in a value that did not decode, in one line: where (`ranks[3].state`) and what was expected
 * there. The first problem only: one is enough to know the value is not this version's. (Effect's own
 * formatters say a union's mismatch once per member, and on many lines.)
 */
export const problemOf = (error: ParseResult.ParseError): string => {
  const { message, path } = firstProblem(error.issue, [])
  const where = path.map((key, index) => (typeof key === "number" ? `[${key}]` : index === 0 ? String(key) : `.${String(key)}`)).join("")
  return where === "" ? message : `${where}: ${message}`
}

const firstProblem = (issue: ParseResult.ParseIssue, path: ReadonlyArray<PropertyKey>): { readonly path: ReadonlyArray<PropertyKey>; readonly message: string } => {
  switch (issue._tag) {
    case "Pointer":
      return firstProblem(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path])])
    case "Refinement":
    case "Transformation":
      return firstProblem(issue.issue, path)
    case "Composite": {
      const issues = Array.isArray(issue.issues) ? issue.issues : [issue.issues]
      // A union's members that failed on the value's own type say nothing one by one: the union is what was
      // expected. A member that got further (the value is that struct, with a wrong field) says where.
      const deeper = issues.find((each: ParseResult.ParseIssue) => each._tag !== "Type")
      if (AST.isUnion(issue.ast) && deeper === undefined) return { path, message: `Expected ${String(issue.ast)}, actual ${shown(issue.actual)}` }
      return firstProblem(deeper ?? issues[0]!, path)
    }
    case "Missing":
      return { path, message: "is missing" }
    case "Type":
      // A struct's own name is Effect's ("Struct (Encoded side)"), not one the reader would know.
      return AST.isTypeLiteral(issue.ast) || AST.isTransformation(issue.ast) && AST.isTypeLiteral(issue.ast.from)
        ? { path, message: `Expected an object, actual ${shown(issue.actual)}` }
        : { path, message: ParseResult.TreeFormatter.formatIssueSync(issue) }
    default:
      return { path, message: ParseResult.TreeFormatter.formatIssueSync(issue) }
  }
}

const shown = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** The state in a JSON value as served, or why it is not one (`problemOf` says it in a line). */
export const decodeRunState = Schema.decodeUnknownEither(RunState)
