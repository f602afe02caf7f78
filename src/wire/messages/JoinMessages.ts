/**
 * The join channel's messages. The join connection stays open after
 * admission as the host's control link. Down it go `WorldFormed`, the orders
 * for each rank (`StartRank`, `StopRank`), `RunEnded` and `Abort`; up it come
 * what became of each rank (`RankStarted`, `RankRunning`, `RankExited`), its
 * ranks' resource use (`RankResources`) and, from a self-deployed agent, its
 * ranks' output (`RankOutput`). Its EOF means the host is gone.
 *
 * The launcher holds the failure policy; an agent only carries out orders and
 * reports. Every rank message names the incarnation it is about, so a late
 * report from a rank that was restarted is never taken for its successor.
 */
import * as Schema from "effect/Schema"
import * as Codec from "../Codec.ts"

/** An agent asks to join: who it is and what it brings. */
export class Hello extends Schema.TaggedClass<Hello>()("Hello", {
  host: Schema.NonEmptyString,
  /** Device indices on that host (GPU ordinals, or CPU slots). */
  devices: Schema.Array(Schema.Int.pipe(Schema.nonNegative())),
  deviceLabels: Schema.Array(Schema.String),
  /** The agent's process id on its host, for status and cleanup. */
  pid: Schema.Int,
  /** cohort's version on the agent: skew is refused. */
  version: Schema.String
}) {}

const Count = Schema.Int.pipe(Schema.nonNegative())

/** What an admitted host runs: everything an agent needs of the cluster file, so it needs no copy of it. */
export const HostRunSpec = Schema.Struct({
  run: Schema.String,
  program: Schema.Union(
    Schema.TaggedStruct("Entry", { entry: Schema.String }),
    Schema.TaggedStruct("Command", { command: Schema.Array(Schema.String) })
  ),
  args: Schema.Array(Schema.String),
  backend: Schema.Literal("cpu_sync", "cpu_cadence", "cpu_async", "nccl"),
  datasetSize: Count,
  epochs: Count,
  /** Steps between model syncs (1 unless the backend syncs on a cadence). */
  cadence: Count,
  /** `job.checkpoint_pickle`: Python ranks may load torch.save's pickle (any rank's code runs on every host). */
  checkpointPickle: Schema.optional(Schema.Boolean),
  /** The cluster's env, then the host's, merged. */
  env: Schema.Record({ key: Schema.String, value: Schema.String }),
  graceMs: Count,
  heartbeatTimeoutMs: Count
})
export type HostRunSpec = typeof HostRunSpec.Type

/** Admitted: these global ranks are the host's, and this is what it runs. */
export class Accept extends Schema.TaggedClass<Accept>()("Accept", {
  ranks: Schema.Array(Schema.Int.pipe(Schema.nonNegative())),
  /** Only under open admission: the run's salt, 32 hex digits. */
  saltHex: Schema.optional(Schema.String),
  /** How long the agent should wait for the world to form. */
  formationWaitMs: Schema.Int.pipe(Schema.nonNegative()),
  spec: HostRunSpec
}) {}

export class Reject extends Schema.TaggedClass<Reject>()("Reject", {
  reason: Schema.String,
  /**
   * `salt`: this run admits only agents that hold its salt, and this one dialled without (`Trust.OPEN_KEY_ID`).
   * Sent under the public open key, so anyone could forge it: an agent acts on it only when it has no salt
   * (see `Trust`), and then it only stops an agent that could not have joined.
   */
  needs: Schema.optional(Schema.Literal("salt"))
}) {}

const Rank = Schema.Int.pipe(Schema.nonNegative())
const Incarnation = Schema.Int.pipe(Schema.nonNegative())

/** The join window closed: the world as formed, and where rank 0's store (torchrun's MASTER) listens. */
export class WorldFormed extends Schema.TaggedClass<WorldFormed>()("WorldFormed", {
  worldSize: Schema.Int.pipe(Schema.positive()),
  hosts: Schema.Array(Schema.Struct({ host: Schema.String, ranks: Schema.Array(Schema.Int) })),
  master: Schema.Struct({ addr: Schema.String, port: Schema.Int.pipe(Schema.between(1, 65_535)) })
}) {}

/**
 * How a rank ended: an exit status, a signal, or (`detail`) why it could not even start. `error`: the
 * exception an `entry:` rank's code threw ("TypeError: x is not a function"), when it said so before exiting.
 */
export class RankExited extends Schema.TaggedClass<RankExited>()("RankExited", {
  rank: Rank,
  incarnation: Incarnation,
  code: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String),
  detail: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String.pipe(Schema.maxLength(600))),
  /**
   * What the host saw that the status does not say: `oom`, a SIGKILL of the kernel's OOM killer;
   * `relay_lost`, a rank stopped because its host's relay ended; `nccl`, its code threw while a communicator
   * held an asynchronous NCCL error.
   */
  cause: Schema.optional(Schema.Literal("oom", "relay_lost", "nccl")),
  /** When the agent saw the rank end (ms since the epoch, its host's clock): the death's moment, for the time to detect it. */
  at: Schema.optional(Schema.Number)
}) {}

export class Abort extends Schema.TaggedClass<Abort>()("Abort", {
  reason: Schema.String
}) {}

/** Start (or restart) one of the host's ranks. */
export class StartRank extends Schema.TaggedClass<StartRank>()("StartRank", {
  rank: Rank,
  incarnation: Incarnation,
  /**
   * The host's device slot, when the rank number is not one the host was admitted with: a restarted
   * rank comes back under a new number on its old device. With it, the world's size as of now.
   */
  slot: Schema.optional(Schema.Int.pipe(Schema.between(0, 255))),
  worldSize: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

/** Stop one rank: `kill` at once, or `graceful` (SIGTERM, SIGKILL after `graceMs`). */
export class StopRank extends Schema.TaggedClass<StopRank>()("StopRank", {
  rank: Rank,
  incarnation: Incarnation,
  mode: Schema.Literal("kill", "graceful"),
  graceMs: Schema.Int.pipe(Schema.nonNegative())
}) {}

/** The rank's process exists. */
export class RankStarted extends Schema.TaggedClass<RankStarted>()("RankStarted", {
  rank: Rank,
  incarnation: Incarnation,
  pid: Schema.Int
}) {}

/** The rank runs the user's code (an `entry:` rank checked in; a `command:` rank was started). */
export class RankRunning extends Schema.TaggedClass<RankRunning>()("RankRunning", {
  rank: Rank,
  incarnation: Incarnation
}) {}

/** Every rank has ended and the verdict is in: the agent stops its relay and leaves. */
export class RunEnded extends Schema.TaggedClass<RunEnded>()("RunEnded", {
  verdict: Schema.String
}) {}

/** The host's ranks' resource use, sampled by the agent every few seconds (the status page and /metrics). */
export class RankResources extends Schema.TaggedClass<RankResources>()("RankResources", {
  samples: Schema.Array(Schema.Struct({
    rank: Rank,
    /** Share of one core since the previous sample. */
    cpu: Schema.Number.pipe(Schema.nonNegative()),
    rssBytes: Schema.Number.pipe(Schema.nonNegative()),
    gpuMemoryBytes: Schema.NullOr(Schema.Number.pipe(Schema.nonNegative())),
    /** 0–1. */
    gpuUtilization: Schema.NullOr(Schema.Number.pipe(Schema.between(0, 1)))
  }))
}) {}

/**
 * Lines its ranks and relay printed, from an agent no ssh session carries (a self-deployed one), for the
 * launcher's terminal, `--quiet`, `--ranks` and `--log-dir` like every other host's. Each line has its
 * prefix (`[host:dev:rN] `, `[host:relay] `). Batched: a chatty rank is not one frame per line.
 * `dropped`: lines the agent could not hold since its last batch (the link fell behind), counted.
 */
export class RankOutput extends Schema.TaggedClass<RankOutput>()("RankOutput", {
  lines: Schema.Array(Schema.Struct({
    stream: Schema.Literal("stdout", "stderr"),
    line: Schema.String
  })),
  dropped: Count
}) {}

/** In kind order: a message's kind byte is its index here, so never reorder, only append. */
export const JoinMessage = Schema.Union(
  Hello,
  Accept,
  Reject,
  WorldFormed,
  RankExited,
  Abort,
  StartRank,
  StopRank,
  RankStarted,
  RankRunning,
  RunEnded,
  RankResources,
  RankOutput
)
export type JoinMessage = typeof JoinMessage.Type

/** The join channel's messages on the wire. */
export const joinCodec = Codec.make("join", JoinMessage)
