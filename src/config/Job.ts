/**
 * `job` of a cluster file: the program every rank runs, and how the ranks'
 * models are kept in step.
 *
 * ```yaml
 * job:
 *   entry: examples/train.ts   # or command: [python3, train.py] (any program)
 *   args: []
 *   backend: cpu_sync          # cpu_sync | cpu_cadence | cpu_async | nccl
 *   dataset_size: 50000        # samples per epoch, split by the coordinator (a command: the Python client's `ctx.epochs()`)
 *   epochs: 10
 *   cadence: 8                 # cpu_cadence: steps between averages
 *   outer_optimizer: { kind: diloco, lr: 0.7, momentum: 0.9 }   # cpu_cadence / cpu_async, optional
 *   async_alpha: 0.5           # cpu_async: the elastic averaging's moving rate
 *   checkpoint: .cohort/checkpoints/demo.json   # consensus checkpoint (default: under .cohort/checkpoints)
 *   checkpoint_pickle: false   # Python ranks: torch.save's pickle for states the client's format cannot hold
 * ```
 *
 * `checkpoint_pickle: true` lets any rank's code run on every host: a pickle runs whatever its writer put in
 * it as it loads, and every rank loads the consensus (at `--resume`, and when it restarts or enters
 * mid-run). Without it the Python client saves and loads tensors, numbers, strings and containers only,
 * which run nothing (`python/cohort/_state.py`), and refuses anything else in one line that names this key.
 *
 * Keys checked against each other (entry and command; backend and
 * outer_optimizer) are read as groups of their own (see `Mapping`), so a
 * mistake in another key does not hide theirs.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { OuterOptimizer } from "../launcher/training/ModelRoot.ts"
import { expecting, rangeOf } from "./reading/Expected.ts"
import { keyGroups, keyOr, optionalKey } from "./reading/Mapping.ts"
import { decodeField } from "./reading/SchemaField.ts"
import type { Field } from "./reading/Yaml.ts"

export const Backend = Schema.Literal("cpu_sync", "cpu_cadence", "cpu_async", "nccl")
export type Backend = typeof Backend.Type

/** A TypeScript module run in every rank, or any program (torchrun-style: its world is fixed). */
export const JobProgram = Schema.Union(
  Schema.TaggedStruct("Entry", { entry: Schema.String }),
  Schema.TaggedStruct("Command", { command: Schema.Array(Schema.String) })
)
export type JobProgram = typeof JobProgram.Type

export interface Job {
  readonly program: JobProgram
  readonly args: ReadonlyArray<string>
  readonly backend: Backend
  /** Samples one epoch covers; 0 when the job does not use `ctx.epochs()` (for a `command:`, the Python client's). */
  readonly datasetSize: number
  readonly epochs: number
  /** `cpu_cadence`: steps between averages. */
  readonly cadence: number
  /** Where the consensus checkpoint is written; undefined: `.cohort/checkpoints/<name>.json`. */
  readonly checkpoint: string | undefined
  /** `cpu_cadence`/`cpu_async`: the model sync's outer optimizer (DiLoCo, SlowMo); undefined: plain averaging. */
  readonly outerOptimizer: OuterOptimizer | undefined
  /** `cpu_async`: how far a rank and the centre move toward each other per exchange (EASGD's α). */
  readonly asyncAlpha: number
  /**
   * Python ranks may save (and load) states as torch.save's pickle, which lets any rank's code run on every
   * host; absent or false: never.
   */
  readonly checkpointPickle?: boolean | undefined
}

/**
 * Whether the job's ranks attach to a coordinator (epochs, liveness, checkpoints, elastic membership): every
 * `entry:` job, and a `command:` job that plans epochs (`dataset_size`), whose program then runs the Python
 * client (`python/cohort`: `cohort.init()`). A plain torchrun-style command never attaches and has none.
 */
export const isCoordinated = (job: Pick<Job, "program" | "datasetSize">): boolean => job.program._tag === "Entry" || job.datasetSize > 0

/**
 * Whether the launcher opens NCCL's rendezvous: `backend: nccl` entry jobs, whose ranks dial it. A command's ranks
 * (torchrun's, or the Python client's, whose groups the coordinator forms) never would, and a member that never
 * dials in is counted absent and killed.
 */
export const usesRendezvous = (job: Pick<Job, "program" | "backend">): boolean => job.backend === "nccl" && job.program._tag === "Entry"

const text = (what: string) => Schema.NonEmptyString.pipe(expecting(what))

/** A list of words, each said as the list is: a person reads the list, not its items. */
const words = (what: string) => Schema.Array(text(what)).pipe(expecting(what))

/** A number in the range its schema checks, said as `<what> from <min> to <max><example>`. */
const inRange = <S extends Schema.Schema<number>>(schema: S, what: string, example = "") => {
  const { max, min } = rangeOf(schema)
  return schema.pipe(expecting(`${what} from ${min} to ${max}${example}`))
}

const commandWhat = "a command as a list of words, like [python3, train.py]"

const ProgramKeys = Schema.transformOrFail(
  Schema.Struct({
    entry: optionalKey(text("the path of a TypeScript module")),
    command: optionalKey(
      words(commandWhat).pipe(Schema.filter((command) => command.length > 0 || "expected a command as a list of words, got an empty list"))
    )
  }),
  Schema.typeSchema(JobProgram),
  {
    strict: true,
    decode: ({ command, entry }, _, ast, written) => {
      if (entry !== undefined && command !== undefined) {
        return ParseResult.fail(new ParseResult.Type(ast, written, "give either entry (a TypeScript module) or command (any program), not both"))
      }
      if (entry !== undefined) return ParseResult.succeed({ _tag: "Entry" as const, entry })
      if (command !== undefined) return ParseResult.succeed({ _tag: "Command" as const, command })
      return ParseResult.fail(new ParseResult.Type(ast, written, "expected entry (a TypeScript module run in every rank) or command (any program)"))
    },
    encode: (program) => ParseResult.succeed(program._tag === "Entry" ? { entry: program.entry } : { command: program.command })
  }
)

const OuterOptimizerKeys = Schema.Struct({
  kind: Schema.Literal("diloco", "slowmo"),
  lr: keyOr(inRange(Schema.Number.pipe(Schema.between(0, 10)), "an outer learning rate", ", like 0.7"), 0.7),
  momentum: keyOr(inRange(Schema.Number.pipe(Schema.between(0, 1)), "a momentum", ", like 0.9"), 0.9)
})

const outerOptimizerBackends: ReadonlyArray<Backend> = ["cpu_cadence", "cpu_async"]

/**
 * `backend` as written. torch.distributed's CPU backend is what a torchrun user writes first; cohort's
 * name for the same thing (an all-reduce on the CPU every step) is `cpu_sync`, so `gloo` is refused with
 * that name rather than read as one: a torch script keeps its own `init_process_group(backend=...)`, and
 * a silent alias would suggest cohort changes it.
 */
const backendNames = `one of ${Backend.literals.map((name) => `"${name}"`).join(", ")}`
const BackendKey = Schema.transformOrFail(Schema.Unknown, Backend, {
  strict: true,
  decode: (written, _, ast) =>
    written === "gloo"
      ? ParseResult.fail(new ParseResult.Type(ast, written, `expected ${backendNames}, got "gloo" (gloo is cohort's cpu_sync: write backend: cpu_sync)`))
      : ParseResult.succeed(written as Backend),
  encode: ParseResult.succeed
}).pipe(expecting(backendNames))

const ModelSyncKeys = Schema.Struct({
  backend: keyOr(BackendKey, "cpu_sync"),
  outer_optimizer: optionalKey(OuterOptimizerKeys)
}).pipe(
  Schema.filter(({ backend, outer_optimizer }) =>
    outer_optimizer === undefined || outerOptimizerBackends.includes(backend) || {
      path: ["outer_optimizer"],
      message: `an outer optimizer applies to backend ${outerOptimizerBackends.join(" or ")}, not ${backend}: remove it or change the backend`
    }
  )
)

const PositiveCount = Schema.Int.pipe(Schema.between(1, 1_000_000))

const RunKeys = Schema.Struct({
  args: keyOr(words("a list of arguments"), []),
  dataset_size: keyOr(inRange(Schema.Int.pipe(Schema.between(0, 2 ** 31 - 1)), "a number of samples"), 0),
  epochs: keyOr(inRange(PositiveCount, "a number of epochs"), 1),
  cadence: keyOr(inRange(PositiveCount, "a number of steps between averages"), 8),
  checkpoint: optionalKey(text("the path of the checkpoint file")),
  async_alpha: keyOr(inRange(Schema.Number.pipe(Schema.between(0, 1)), "a fraction", ", like 0.5"), 0.5),
  checkpoint_pickle: optionalKey(Schema.Boolean.pipe(expecting("true or false (true lets any rank's code run on every host)")))
})

const JobKeys = keyGroups(
  { program: ProgramKeys, modelSync: ModelSyncKeys, run: RunKeys },
  ["entry", "command", "args", "backend", "dataset_size", "epochs", "cadence", "checkpoint", "checkpoint_pickle", "outer_optimizer", "async_alpha"]
)

/** Read a present `job` section. */
export const decodeJob = (field: Field): Job => {
  const { modelSync, program, run } = decodeField(field, JobKeys)
  return {
    program,
    args: run.args,
    backend: modelSync.backend,
    datasetSize: run.dataset_size,
    epochs: run.epochs,
    cadence: run.cadence,
    checkpoint: run.checkpoint,
    outerOptimizer: modelSync.outer_optimizer,
    asyncAlpha: run.async_alpha,
    ...(run.checkpoint_pickle === undefined ? {} : { checkpointPickle: run.checkpoint_pickle })
  }
}
