/**
 * cohort as a library: run a cluster from code.
 *
 * ```ts
 * import { launch } from "cohort"
 * const result = await launch("examples/local.yml")   // or a config object
 * if (result.outcome !== "completed") console.log(result.rootCause, result.ranks)
 * ```
 * `launchEffect` is the same run as an Effect, for callers that compose
 * their own. `overrides` change the file's document before it is decoded
 * (the command line's `--set`, `--`, quick form and `--from-slurm`), so
 * they are checked as the file is. A run's mistakes of input (config,
 * environment, a busy port) fail the call; what happens to the ranks is the
 * result. One run at a time per process.
 */
import { existsSync, statSync } from "node:fs"
import { resolve } from "node:path"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { type Document, isScalar, parseDocument, stringify, visit } from "yaml"
import type * as Launcher from "./launcher/run/Launcher.ts"
import { entryPoints } from "./cli/entryPoints.ts"
import { describePlan, LaunchInputError, makePlan, type Plan, sshWorkers } from "./launcher/run/Plan.ts"
import { preflight } from "./launcher/run/Preflight.ts"
import { syncCheckout } from "./launcher/hosts/SyncCheckout.ts"
import type { BindError } from "./launcher/front/PortMux.ts"
import { detectRole, RoleError, roleVariables } from "./kernel/Role.ts"
import { type ClusterConfig, parseCluster } from "./config/ClusterConfig.ts"
import { ConfigError } from "./config/reading/ConfigError.ts"
import { netTimeoutScale } from "./config/NetTimeouts.ts"
import { requestedLogLevel } from "./config/LogVerbosity.ts"
import { ConfigErrors } from "./config/reading/Yaml.ts"
import * as Log from "./cli/logger.ts"
import { fairScheduler } from "./kernel/FairScheduler.ts"
import { applyOverrides, type Override, whoSaid } from "./cli/args/Overrides.ts"

export class RunInProgress extends Data.TaggedError("RunInProgress")<{}> {
  override get message(): string {
    return "a cohort run is already in progress in this process: wait for its result before launching another"
  }
}

export type LaunchError = ConfigErrors | LaunchInputError | BindError | RoleError | RunInProgress

/**
 * This process may launch: it is not one of cohort's own processes (role
 * variables) and its network deadline scale is valid.
 */
export const checkEnvironment = Effect.suspend((): Effect.Effect<void, RoleError | LaunchInputError> => {
  const role = detectRole(process.env)
  if (Either.isLeft(role)) return Effect.fail(role.left)
  if (role.right._tag !== "User") {
    const set = Object.values(roleVariables).filter((name) => process.env[name] !== undefined && process.env[name] !== "")
    return Effect.fail(new RoleError(
      `${set.join(", ")} ${set.length === 1 ? "is" : "are"} set, so this is a cohort ${role.right._tag.toLowerCase()}'s environment, not a launcher's`
    ))
  }
  try {
    netTimeoutScale()
    requestedLogLevel()
    return Effect.void
  } catch (error) {
    return Effect.fail(new LaunchInputError({ problems: [(error as Error).message] }))
  }
})

/** A cluster file's path, or the same content as an object. */
export type ClusterInput = string | Readonly<Record<string, unknown>>

/** What the command line adds to a cluster file: its overrides, and its own checks against the plan. */
export interface InputOptions {
  /** Applied to the parsed document before it is decoded, in order (see `cli/Overrides`). */
  readonly overrides?: ReadonlyArray<Override> | undefined
  /** Problems of the caller's own with the plan (a flag naming ranks the world does not have): input errors, like the file's. */
  readonly checkPlan?: ((plan: Plan) => ReadonlyArray<string>) | undefined
}

/** The document an input stands for, as text, and the name it is known by in errors. */
const sourceOf = (input: ClusterInput): Effect.Effect<{ readonly text: string; readonly file: string }, ConfigErrors> => {
  if (typeof input !== "string") return Effect.succeed({ text: stringify(input), file: "<cluster object>" })
  const unreadable = (problem: string) => new ConfigErrors({ errors: [new ConfigError({ file: input, path: "", problem })] })
  if (!existsSync(input)) return Effect.fail(unreadable(`no such file (looked for ${resolve(input)}): give the path of a cluster file (like examples/local.yml)`))
  if (statSync(input).isDirectory()) return Effect.fail(unreadable("this is a directory: give the path of a cluster file inside it"))
  return Effect.map(
    Effect.tryPromise({
      try: () => Bun.file(input).text(),
      catch: (error) => unreadable(`cannot read the file: ${error instanceof Error ? error.message : String(error)}`)
    }),
    (text) => ({ text, file: input })
  )
}

/** A mistake the decoder found where an override put the value (it has no line in the file) is the flag's. */
const attributed = (errors: ConfigErrors, overrides: ReadonlyArray<Override>): ConfigErrors =>
  new ConfigErrors({
    errors: errors.errors.map((error) => {
      if (typeof error.line === "number") return error
      const who = whoSaid(error.path, error.problem, overrides)
      return who === undefined ? error : new ConfigError({ file: who.said, path: who.below, line: undefined, col: undefined, problem: error.problem })
    })
  })

const refusalsOf = (doc: Document.Parsed, overrides: ReadonlyArray<Override>): ReadonlyArray<ConfigError> =>
  applyOverrides(doc, overrides).map((refusal) => new ConfigError({ file: refusal.said, path: "", line: undefined, col: undefined, problem: refusal.problem }))

/** Read and check a cluster file (or object), with the command line's overrides, without starting anything. */
export const loadCluster = (input: ClusterInput, options: InputOptions = {}): Effect.Effect<ClusterConfig, ConfigErrors> => {
  const overrides = options.overrides ?? []
  return Effect.flatMap(sourceOf(input), ({ file, text }) =>
    overrides.length === 0
      ? parseCluster(text, file)
      : Effect.mapError(parseCluster(text, file, (doc) => refusalsOf(doc, overrides)), (errors) => attributed(errors, overrides)))
}

/**
 * The cluster file an input and its overrides stand for, as YAML a user can save and grow from
 * (`--dry-run` of the quick form prints it). Lists of plain values are written on one line.
 */
export const clusterDocument = async (input: ClusterInput, options: InputOptions = {}): Promise<string> => {
  const source = await Effect.runPromise(Effect.either(sourceOf(input)))
  if (Either.isLeft(source)) throw source.left
  const doc = parseDocument(source.right.text)
  const refused = refusalsOf(doc, options.overrides ?? [])
  if (refused.length > 0) throw new ConfigErrors({ errors: refused })
  visit(doc, {
    Seq: (_, node) => {
      if (node.items.every((item) => isScalar(item))) node.flow = true
    }
  })
  return doc.toString({ flowCollectionPadding: false, lineWidth: 0 })
}

/** The checked plan of a run: `--dry-run` prints it. */
export const planCluster = (input: ClusterInput, options: InputOptions = {}): Effect.Effect<Plan, ConfigErrors | LaunchInputError> =>
  Effect.flatMap(loadCluster(input, options), (config) =>
    Either.match(makePlan(config, entryPoints), {
      // Name the file, as the decoder's errors do.
      onLeft: (error) => Effect.fail(typeof input === "string" ? new LaunchInputError({ problems: error.problems.map((problem) => `${input}: ${problem}`) }) : error),
      onRight: (plan) => {
        const problems = options.checkPlan?.(plan) ?? []
        if (problems.length > 0) return Effect.fail(new LaunchInputError({ problems }))
        // What the plan decided that the file did not say outright, said as the file's own notes are.
        return Effect.as(Effect.forEach(plan.notes, (note) => Effect.logWarning(typeof input === "string" ? `${input}: ${note}` : note), { discard: true }), plan)
      }
    }))

let busy = false
const oneRunAtATime = Effect.acquireRelease(
  Effect.suspend(() => {
    if (busy) return Effect.fail(new RunInProgress())
    busy = true
    return Effect.void
  }),
  () => Effect.sync(() => (busy = false))
)

export const launchEffect = (
  input: ClusterInput,
  options: Launcher.LaunchOptions & InputOptions = {}
): Effect.Effect<Launcher.RunResult, LaunchError> =>
  Effect.scoped(Effect.gen(function*() {
    yield* oneRunAtATime
    yield* checkEnvironment
    const plan = yield* planCluster(input, options)
    if (options.sync === true) yield* syncHosts(plan)
    // The hosts' preflight runs in their agents' sessions (SshSession), one ssh handshake each.
    // Loaded on demand: reading and checking a file should not pay for the whole launcher.
    const { run } = yield* Effect.promise(() => import("./launcher/run/Launcher.ts"))
    return yield* run(plan, options)
  }))

/** `--sync`: the launcher's checkout copied to every host reached over ssh. */
const syncHosts = (plan: Plan): Effect.Effect<void, LaunchInputError> =>
  Effect.flatMap(syncCheckout(sshWorkers(plan)), (failures) => failures.length === 0 ? Effect.void : Effect.fail(new LaunchInputError({ problems: failures })))

/** `--dry-run`'s preflight of every host reached over ssh: every problem at once, as an input error. */
const checkHosts = (plan: Plan): Effect.Effect<void, LaunchInputError> =>
  Effect.flatMap(
    preflight(sshWorkers(plan), plan.config.name),
    (problems) => problems.length === 0 ? Effect.void : Effect.fail(new LaunchInputError({ problems }))
  )

/** Run a cluster; resolves with the result, rejects on a mistake of input. Logs `cohort: …` lines on stderr. */
export const launch = async (input: ClusterInput, options: Launcher.LaunchOptions & InputOptions = {}): Promise<Launcher.RunResult> => {
  const outcome = await Effect.runPromise(
    Effect.either(launchEffect(input, options)).pipe(Effect.withScheduler(fairScheduler), Effect.provide(Log.layer(undefined, undefined, options.logLine)))
  )
  // Reject with the error itself (its class and message), not Effect's wrapper.
  if (Either.isLeft(outcome)) throw outcome.left
  return outcome.right
}

/** `--dry-run`: the plan as text, after the same checks a launch makes; rejects on a mistake of input. */
export const dryRun = async (input: ClusterInput, options: InputOptions = {}): Promise<string> => {
  const outcome = await Effect.runPromise(
    Effect.either(Effect.zipRight(checkEnvironment, Effect.tap(planCluster(input, options), checkHosts))).pipe(Effect.provide(Log.layer()))
  )
  if (Either.isLeft(outcome)) throw outcome.left
  return describePlan(outcome.right)
}
