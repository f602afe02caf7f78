/**
 * `bun run demo [cluster.yml]`: the supervision kernel on its own, with local
 * processes standing in for ranks. It reads the file's `failure_policy` and a
 * `demo` section (how many ranks, how long they work, when the cohort forms,
 * which rank fails when), runs them under a Supervisor, and ends with the
 * verdict line and its exit status. The local-cluster launcher replaces it.
 */
import * as Effect from "effect/Effect"
import * as Supervisor from "../actors/Supervisor.ts"
import * as ProcessChild from "../actors/ProcessChild.ts"
import { onSignals } from "../actors/signals.ts"
import { SupervisionEvent } from "../actors/decide.ts"
import { describeVerdict, exitCode } from "../actors/Verdict.ts"
import { strategyToYaml, decodeFailurePolicy, type FailurePolicy } from "../config/FailurePolicy.ts"
import { formatDuration } from "../config/Duration.ts"
import { parse } from "../config/Yaml.ts"
import * as Log from "./logger.ts"

interface Fault {
  readonly rank: number
  readonly at: number
  readonly exit: number
}

interface DemoConfig {
  readonly name: string
  readonly policy: FailurePolicy
  readonly ranks: number
  readonly work: number
  readonly formationAfter: number
  readonly faults: ReadonlyArray<Fault>
}

const decodeDemo = (text: string, file: string) =>
  parse(text, file, (root): DemoConfig => {
    const top = root.map(["name", "failure_policy", "demo"])
    const demo = top.demo!.map(["ranks", "work", "formation_after", "faults"])
    const ranks = demo.ranks!.readOr((f) => f.int(1, 64), 4)
    return {
      name: top.name!.readOr((f) => f.string(), "demo"),
      policy: decodeFailurePolicy(top.failure_policy!),
      ranks,
      work: demo.work!.readOr((f) => f.duration(1), 2_000),
      formationAfter: demo.formation_after!.readOr((f) => f.duration(), 300),
      faults: demo.faults!.list("a list of { rank, at, exit }").flatMap((item) =>
        item.attempt(() => {
          const fault = item.map(["rank", "at", "exit"])
          return [{
            rank: fault.rank!.int(0, ranks - 1, `a rank from 0 to ${ranks - 1}`),
            at: fault.at!.duration(),
            exit: fault.exit!.readOr((f) => f.int(1, 255, "an exit status from 1 to 255"), 1)
          }]
        }) ?? []
      )
    }
  })

const rankEntry = `${import.meta.dir}/../../examples/demo-rank.ts`

const run = (config: DemoConfig) =>
  Effect.gen(function*() {
    yield* Effect.logInfo(
      `${config.name}: ${config.ranks} ranks, failure policy:\n${strategyToYaml(config.policy.strategy).trimEnd()}`
    )
    const children = Array.from({ length: config.ranks }, (_, rank) => {
      const fault = config.faults.find((candidate) => candidate.rank === rank)
      return Supervisor.rankChild(
        rank,
        ProcessChild.spawn({
          cmd: [process.execPath, rankEntry],
          env: {
            COHORT_RANK: String(rank),
            COHORT_DEMO_WORK_MS: String(config.work),
            ...(fault === undefined
              ? {}
              : { COHORT_DEMO_FAIL_AT_MS: String(fault.at), COHORT_DEMO_FAIL_CODE: String(fault.exit) })
          },
          onLine: (line) => console.log(`[rank ${rank}] ${line}`),
          grace: config.policy.grace
        })
      )
    })
    const supervisor = yield* Supervisor.start({
      name: "launcher",
      strategy: config.policy.strategy,
      children,
      grace: config.policy.grace
    })
    yield* onSignals(
      ["SIGINT", "SIGTERM", "SIGHUP"],
      (signal) => supervisor.send(SupervisionEvent.AbortRequested({ reason: `received ${signal}` })),
      () => Effect.sync(() => process.exit(130))
    )
    yield* Effect.sleep(config.formationAfter).pipe(
      Effect.zipRight(Effect.logInfo(`cohort formed after ${formatDuration(config.formationAfter)}: ${config.ranks} ranks`)),
      Effect.zipRight(supervisor.send(SupervisionEvent.CohortFormed())),
      Effect.forkScoped
    )
    const verdict = yield* supervisor.verdict
    yield* Effect.logInfo(describeVerdict(verdict))
    return exitCode(verdict)
  })

const file = process.argv[2] ?? "examples/demo.yml"
const program = Effect.gen(function*() {
  const text = yield* Effect.tryPromise(() => Bun.file(file).text()).pipe(
    Effect.mapError(() => `cannot read ${file}: no such file (give the path of a cluster file)`)
  )
  const config = yield* Effect.mapError(decodeDemo(text, file), (error) => error.message)
  return yield* Effect.scoped(run(config))
}).pipe(
  Effect.catchAll((problem) => Effect.as(Effect.logError(problem), 2)),
  Effect.provide(Log.layer())
)

process.exit(await Effect.runPromise(program))
