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
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { stringify } from "yaml"
import * as Launcher from "./actors/launcher/Launcher.ts"
import { type LaunchInputError, makePlan, type Plan } from "./actors/launcher/Plan.ts"
import type { BindError } from "./actors/PortMux.ts"
import { detectRole, type RoleError } from "./actors/Role.ts"
import { type ClusterConfig, parseCluster } from "./config/ClusterConfig.ts"
import { ConfigError } from "./config/ConfigError.ts"
import { ConfigErrors } from "./config/Yaml.ts"
import * as Log from "./cli/logger.ts"

export class RunInProgress extends Data.TaggedError("RunInProgress")<{}> {
  override get message(): string {
    return "a cohort run is already in progress in this process: wait for its result before launching another"
  }
}

export type LaunchError = ConfigErrors | LaunchInputError | BindError | RoleError | RunInProgress

/** A cluster file's path, or the same content as an object. */
export type ClusterInput = string | Readonly<Record<string, unknown>>

/** Read and check a cluster file (or object) without starting anything. */
export const loadCluster = (input: ClusterInput): Effect.Effect<ClusterConfig, ConfigErrors> =>
  typeof input === "string"
    ? Effect.flatMap(
      Effect.tryPromise({
        try: () => Bun.file(input).text(),
        catch: () =>
          new ConfigErrors({ errors: [new ConfigError({ file: input, path: "", problem: "cannot read the file: does it exist? give the path of a cluster file" })] })
      }),
      (text) => parseCluster(text, input)
    )
    : parseCluster(stringify(input), "<cluster object>")

/** The checked plan of a run: `--dry-run` prints it. */
export const planCluster = (input: ClusterInput): Effect.Effect<Plan, ConfigErrors | LaunchInputError> =>
  Effect.flatMap(loadCluster(input), (config) => Either.match(makePlan(config), { onLeft: Effect.fail, onRight: Effect.succeed }))

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
    const role = detectRole(process.env)
    if (Either.isLeft(role)) return yield* Effect.fail(role.left)
    const plan = yield* planCluster(input)
    return yield* Launcher.run(plan, options)
  }))

/** Run a cluster; resolves with the result, rejects on a mistake of input. Logs `cohort: …` lines on stderr. */
export const launch = async (input: ClusterInput, options: Launcher.LaunchOptions = {}): Promise<Launcher.RunResult> => {
  const outcome = await Effect.runPromise(Effect.either(launchEffect(input, options)).pipe(Effect.provide(Log.layer())))
  // Reject with the error itself (its class and message), not Effect's wrapper.
  if (Either.isLeft(outcome)) throw outcome.left
  return outcome.right
}
