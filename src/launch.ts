/**
 * cohort as a library: run a cluster from code.
 *
 * ```ts
 * import { launch } from "cohort"
 * const result = await launch("examples/local.yml")   // or a config object
 * if (result.outcome !== "completed") console.log(result.rootCause, result.ranks)
 * ```
 * `launchEffect` is the same run as an Effect, for callers that compose
 * their own. A run's mistakes of input (config, environment, a busy port)
 * fail the call; what happens to the ranks is the result. One run at a time
 * per process.
 */
import { existsSync, statSync } from "node:fs"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { stringify } from "yaml"
import type * as Launcher from "./actors/launcher/Launcher.ts"
import { describePlan, LaunchInputError, makePlan, type Plan, sshWorkers } from "./actors/launcher/Plan.ts"
import { preflight } from "./actors/launcher/Preflight.ts"
import { syncCheckout } from "./actors/launcher/SyncCheckout.ts"
import type { BindError } from "./actors/launcher/PortMux.ts"
import { detectRole, RoleError, roleVariables } from "./actors/Role.ts"
import { type ClusterConfig, parseCluster } from "./config/ClusterConfig.ts"
import { ConfigError } from "./config/ConfigError.ts"
import { netTimeoutScale } from "./config/NetTimeouts.ts"
import { ConfigErrors } from "./config/Yaml.ts"
import * as Log from "./cli/logger.ts"
import { fairScheduler } from "./actors/FairScheduler.ts"

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
    return Effect.void
  } catch (error) {
    return Effect.fail(new LaunchInputError({ problems: [(error as Error).message] }))
  }
})

/** A cluster file's path, or the same content as an object. */
export type ClusterInput = string | Readonly<Record<string, unknown>>

/** Read and check a cluster file (or object) without starting anything. */
export const loadCluster = (input: ClusterInput): Effect.Effect<ClusterConfig, ConfigErrors> => {
  if (typeof input !== "string") return parseCluster(stringify(input), "<cluster object>")
  const unreadable = (problem: string) => new ConfigErrors({ errors: [new ConfigError({ file: input, path: "", problem })] })
  if (!existsSync(input)) return Effect.fail(unreadable("no such file: give the path of a cluster file (like examples/local.yml)"))
  if (statSync(input).isDirectory()) return Effect.fail(unreadable("this is a directory: give the path of a cluster file inside it"))
  return Effect.flatMap(
    Effect.tryPromise({
      try: () => Bun.file(input).text(),
      catch: (error) => unreadable(`cannot read the file: ${error instanceof Error ? error.message : String(error)}`)
    }),
    (text) => parseCluster(text, input)
  )
}

/** The checked plan of a run: `--dry-run` prints it. */
export const planCluster = (input: ClusterInput): Effect.Effect<Plan, ConfigErrors | LaunchInputError> =>
  Effect.flatMap(loadCluster(input), (config) =>
    Either.match(makePlan(config), {
      // Name the file, as the decoder's errors do.
      onLeft: (error) => Effect.fail(typeof input === "string" ? new LaunchInputError({ problems: error.problems.map((problem) => `${input}: ${problem}`) }) : error),
      onRight: Effect.succeed
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
  options: Launcher.LaunchOptions = {}
): Effect.Effect<Launcher.RunResult, LaunchError> =>
  Effect.scoped(Effect.gen(function*() {
    yield* oneRunAtATime
    yield* checkEnvironment
    const plan = yield* planCluster(input)
    if (options.sync === true) yield* syncHosts(plan)
    // The hosts' preflight runs in their agents' sessions (SshSession), one ssh handshake each.
    // Loaded on demand: reading and checking a file should not pay for the whole launcher.
    const { run } = yield* Effect.promise(() => import("./actors/launcher/Launcher.ts"))
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
export const launch = async (input: ClusterInput, options: Launcher.LaunchOptions = {}): Promise<Launcher.RunResult> => {
  const outcome = await Effect.runPromise(
    Effect.either(launchEffect(input, options)).pipe(Effect.withScheduler(fairScheduler), Effect.provide(Log.layer(undefined, undefined, options.logLine)))
  )
  // Reject with the error itself (its class and message), not Effect's wrapper.
  if (Either.isLeft(outcome)) throw outcome.left
  return outcome.right
}

/** `--dry-run`: the plan as text, after the same checks a launch makes; rejects on a mistake of input. */
export const dryRun = async (input: ClusterInput): Promise<string> => {
  const outcome = await Effect.runPromise(
    Effect.either(Effect.zipRight(checkEnvironment, Effect.tap(planCluster(input), checkHosts))).pipe(Effect.provide(Log.layer()))
  )
  if (Either.isLeft(outcome)) throw outcome.left
  return describePlan(outcome.right)
}
