/**
 * The run's events as Schemas: one struct per kind, told apart by its `event`
 * field, and their union `RunEvent`, the type RunView folds into the state and
 * RunJournal writes to the `--events` file, one JSON object per line. The
 * field names are that file's: a line written by the launcher decodes to the
 * event it wrote.
 *
 * Every `at` (and `diedAt`, `recoveredAt`) is ms since the epoch. Unlike the
 * state (RunStateSchema.ts), an event fills in nothing: a line missing a
 * field, or with one of another shape, is not an event of this version.
 */
import * as Data from "effect/Data"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import { JoinRule, Metrics, Phase, problemOf } from "./RunStateSchema.ts"

const optional = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { exact: true })
const Ranks = Schema.Array(Schema.Number)

export const RunStarted = Schema.Struct({
  event: Schema.tag("run_started"),
  at: Schema.Number,
  run: Schema.String,
  hosts: Schema.Array(Schema.Struct({ host: Schema.String, ranks: Schema.Number })),
  /** This run's id among the checkout's runs (`bun run status --run`). */
  id: optional(Schema.String),
  join: optional(JoinRule)
})

export const Listening = Schema.Struct({ event: Schema.tag("listening"), at: Schema.Number, address: Schema.String, port: Schema.Number })

export const JoinWindow = Schema.Struct({
  event: Schema.tag("join_window"),
  at: Schema.Number,
  windowRemainingMs: Schema.Number,
  capRemainingMs: Schema.Number
})

export const HostJoined = Schema.Struct({ event: Schema.tag("host_joined"), at: Schema.Number, host: Schema.String, ranks: Ranks })

export const JoinRejected = Schema.Struct({ event: Schema.tag("join_rejected"), at: Schema.Number, peer: Schema.String, reason: Schema.String })

export const WorldFormed = Schema.Struct({
  event: Schema.tag("world_formed"),
  at: Schema.Number,
  world: Schema.Number,
  /** Each host's ranks and, slot by slot, its devices (GPU index or `cpu`) and their labels as its agent named them. */
  hosts: Schema.Array(Schema.Struct({ host: Schema.String, ranks: Ranks, devices: Schema.Array(Schema.String), labels: Schema.Array(Schema.String) }))
})

export const WorldGrew = Schema.Struct({
  event: Schema.tag("world_grew"),
  at: Schema.Number,
  world: Schema.Number,
  host: Schema.String,
  ranks: Ranks,
  devices: Schema.Array(Schema.String),
  labels: Schema.Array(Schema.String),
  /** A restarted rank's new number: the number it ran as before. */
  replaces: optional(Schema.Number)
})

export const RanksEntered = Schema.Struct({ event: Schema.tag("ranks_entered"), at: Schema.Number, ranks: Ranks, epoch: Schema.Number })

export const RankStarted = Schema.Struct({ event: Schema.tag("rank_started"), at: Schema.Number, rank: Schema.Number, pid: Schema.Number })

export const CohortFormed = Schema.Struct({ event: Schema.tag("cohort_formed"), at: Schema.Number })

export const RankExited = Schema.Struct({
  event: Schema.tag("rank_exited"),
  at: Schema.Number,
  rank: Schema.Number,
  exit: Schema.String,
  clean: Schema.Boolean
})

export const RankLost = Schema.Struct({
  event: Schema.tag("rank_lost"),
  at: Schema.Number,
  ranks: Ranks,
  cause: Schema.String,
  /** The cause as the failure rules name it, and the rule that decided it (absent: none did). */
  kind: optional(Schema.String),
  rule: optional(Schema.String),
  /** When the death happened (its agent's clock, or a silent rank's last beat), for the time to detect it. */
  diedAt: optional(Schema.Number)
})

/** The policy restarts a rank: a death it carries by restarting (the recovery figures). */
export const RankRestarting = Schema.Struct({
  event: Schema.tag("rank_restarting"),
  at: Schema.Number,
  rank: Schema.Number,
  kind: optional(Schema.String),
  rule: optional(Schema.String),
  diedAt: optional(Schema.Number)
})

/** A failure rule decided a death (`action` as the file writes it). */
export const RuleMatched = Schema.Struct({
  event: Schema.tag("rule_matched"),
  at: Schema.Number,
  rule: Schema.String,
  action: Schema.String,
  ranks: Ranks
})

/** The survivors hold a dead rank's remaining samples (they may not train yet: see `survivors_stepped`). */
export const WorkMoved = Schema.Struct({ event: Schema.tag("work_moved"), at: Schema.Number, rank: Schema.Number, survivors: Ranks })

/**
 * The survivors' next counted step after these ranks died mid-epoch (`rank`'s report, of `epoch`, with more
 * samples): those deaths' recovery (SurvivorsStep).
 */
export const SurvivorsStepped = Schema.Struct({
  event: Schema.tag("survivors_stepped"),
  at: Schema.Number,
  ranks: Ranks,
  rank: Schema.Number,
  epoch: Schema.Number
})

/**
 * A death the policy carried has recovered, with its times (`--events` only, said by the journal from the
 * view's recovery figures).
 */
export const DeathRecovered = Schema.Struct({
  event: Schema.tag("death_recovered"),
  at: Schema.Number,
  recoveredAt: Schema.Number,
  rank: Schema.Number,
  how: Schema.String,
  kind: Schema.NullOr(Schema.String),
  rule: Schema.NullOr(Schema.String),
  detectMs: Schema.Number,
  recoverMs: Schema.Number
})

/** A rank runs user code (an entry rank checked in, a command rank started). */
export const RankRunning = Schema.Struct({ event: Schema.tag("rank_running"), at: Schema.Number, rank: Schema.Number })

export const Decision = Schema.Struct({ event: Schema.tag("decision"), at: Schema.Number, decision: Schema.String, detail: Schema.String })

export const HostGone = Schema.Struct({ event: Schema.tag("host_gone"), at: Schema.Number, host: Schema.String, reason: Schema.String })

export const Progress = Schema.Struct({
  event: Schema.tag("progress"),
  at: Schema.Number,
  epoch: Schema.Number,
  epochs: Schema.Number,
  samplesDone: Schema.Number,
  datasetSize: Schema.Number,
  samplesPerSec: Schema.NullOr(Schema.Number),
  metrics: Metrics
})

/**
 * Ranks' latest reported metrics (`ctx.progress(samples, metrics)`), each rank's own: the ranks that reported
 * since the last such event, at most every PROGRESS_EVERY_MS (training/Coordinator.ts). Bounded as
 * wire/ReportedMetrics.ts says. `progress` carries their averages.
 */
export const RankMetrics = Schema.Struct({
  event: Schema.tag("rank_metrics"),
  at: Schema.Number,
  ranks: Schema.Array(Schema.Struct({ rank: Schema.Number, metrics: Metrics }))
})

export const EpochDone = Schema.Struct({
  event: Schema.tag("epoch_done"),
  at: Schema.Number,
  epoch: Schema.Number,
  epochs: Schema.Number,
  seconds: Schema.Number,
  samples: Schema.Number,
  metrics: Metrics
})

export const Checkpoint = Schema.Struct({
  event: Schema.tag("checkpoint"),
  at: Schema.Number,
  epoch: Schema.Number,
  path: Schema.String,
  reason: Schema.String
})

/** A host's ranks' resource use (RunStateSchema's ResourceSample, stamped with the event's `at`). */
export const Resources = Schema.Struct({
  event: Schema.tag("resources"),
  at: Schema.Number,
  host: Schema.String,
  samples: Schema.Array(Schema.Struct({
    rank: Schema.Number,
    cpu: Schema.Number,
    rssBytes: Schema.Number,
    gpuMemoryBytes: Schema.NullOr(Schema.Number),
    gpuUtilization: Schema.NullOr(Schema.Number)
  }))
})

export const PhaseChanged = Schema.Struct({ event: Schema.tag("phase"), at: Schema.Number, phase: Phase })

export const Verdict = Schema.Struct({
  event: Schema.tag("verdict"),
  at: Schema.Number,
  outcome: Schema.String,
  exitCode: Schema.Number,
  summary: Schema.String
})

/** After the verdict: what is left to do before the launcher exits, and when it is done. */
export const CleanupStarted = Schema.Struct({ event: Schema.tag("cleanup_started"), at: Schema.Number, detail: Schema.String })
export const CleanupDone = Schema.Struct({ event: Schema.tag("cleanup_done"), at: Schema.Number })

/** One thing that happened. */
export const RunEvent = Schema.Union(
  RunStarted,
  Listening,
  JoinWindow,
  HostJoined,
  JoinRejected,
  WorldFormed,
  WorldGrew,
  RanksEntered,
  RankStarted,
  CohortFormed,
  RankExited,
  RankLost,
  RankRestarting,
  RuleMatched,
  WorkMoved,
  SurvivorsStepped,
  DeathRecovered,
  RankRunning,
  Decision,
  HostGone,
  Progress,
  RankMetrics,
  EpochDone,
  Checkpoint,
  Resources,
  PhaseChanged,
  Verdict,
  CleanupStarted,
  CleanupDone
)
export type RunEvent = typeof RunEvent.Type

/** A line of an events file that is not an event this version of cohort writes. */
export class UnreadableEvent extends Data.TaggedError("UnreadableEvent")<{ readonly problem: string }> {
  override get message(): string {
    return `not a run event of this cohort version (${this.problem}); an events file written by another version is read with that version`
  }
}

const decodeJson = Schema.decodeUnknownEither(Schema.parseJson())
const decodeEvent = Schema.decodeUnknownEither(RunEvent)

/** The kinds this version writes: the union's own tags, not a list of them kept apart. */
const kinds: ReadonlySet<unknown> = new Set(
  RunEvent.members.flatMap((member) =>
    AST.getPropertySignatures(member.ast).flatMap((field) => (field.name === "event" && AST.isLiteral(field.type) ? [field.type.literal] : []))
  )
)

/** One line of an `--events` file (without its newline) as the event it records. */
export const decodeEventLine = (line: string): Either.Either<RunEvent, UnreadableEvent> =>
  Either.flatMap(
    Either.mapLeft(decodeJson(line), (error) => new UnreadableEvent({ problem: `not JSON: ${problemOf(error)}` })),
    (json) => {
      if (typeof json !== "object" || json === null || Array.isArray(json)) {
        return Either.left(new UnreadableEvent({ problem: `Expected an object, actual ${JSON.stringify(json)}` }))
      }
      const kind = "event" in json ? json.event : undefined
      if (kind === undefined) return Either.left(new UnreadableEvent({ problem: "event: is missing" }))
      // Said as a name: Schema would list every kind it knows instead.
      if (typeof kind !== "string" || !kinds.has(kind)) return Either.left(new UnreadableEvent({ problem: `unknown event ${JSON.stringify(kind)}` }))
      return Either.mapLeft(decodeEvent(json), (error) => new UnreadableEvent({ problem: `in a ${kind} event, ${problemOf(error)}` }))
    }
  )
