/**
 * Failure reaction: eight children run; one exits 1; how long until every
 * sibling is killed and reaped and the supervisor has its verdict?
 *
 * The clock starts when the harness tells the failing child to exit (one line
 * on its stdin) and stops when the verdict is in hand, so the figure includes
 * the child's own exit, its reaping, the kill-all decision, seven signals and
 * seven more reapings. Three contenders run side by side, interleaved, in one
 * process:
 *  - `cohort`: the Effect Supervisor under `kill_all`: SIGTERM to every sibling
 *    with its grace (the `sh` children end at SIGTERM, as a rank that has
 *    nothing to save does);
 *  - `cohort, grace 0`: `kill_all: { grace: 0s }`, SIGKILL at once;
 *  - `floor`:  bare Bun.spawn + `exited` promises + kill, the least any
 *              supervisor on Bun could do.
 * Children are `sh` (a native process that reads a line and exits with it), so
 * the figure measures the supervisor, not Bun start-up.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ProcessChild from "../src/kernel/ProcessChild.ts"
import { Shutdown } from "../src/kernel/Shutdown.ts"
import { KillAll } from "../src/kernel/policy/Strategy.ts"
import * as Supervisor from "../src/kernel/Supervisor.ts"
import { median, percentile } from "./stats.ts"

const CHILDREN = 8
const RUNS = Number(process.env.BENCH_RUNS ?? 30)
const child = ["sh", "-c", "read code; exit $code"]

const waitUntil = async (check: () => boolean) => {
  while (!check()) await Bun.sleep(1)
}

/** One run of the Effect supervisor; returns milliseconds from the fatal exit to the verdict. */
const cohortRun = (strategy: KillAll) =>
  Effect.runPromise(
    Effect.scoped(Effect.gen(function*() {
      const handles: Array<ProcessChild.ProcessChild> = []
      const children = Array.from({ length: CHILDREN }, (_, rank) =>
        Supervisor.rankChild(
          rank,
          Effect.tap(ProcessChild.spawn({ cmd: child, stdin: "pipe", shutdown: Shutdown.Grace({ grace: Duration.seconds(1) }) }), (handle) => Effect.sync(() => handles.push(handle))),
          undefined,
          Shutdown.Grace({ grace: Duration.seconds(1) })
        ))
      const supervisor = yield* Supervisor.start({ name: "bench", strategy, children })
      yield* Effect.promise(() => waitUntil(() => handles.length === CHILDREN))
      const start = performance.now()
      const stdin = handles[3]!.subprocess.stdin as import("bun").FileSink
      stdin.write("1\n")
      stdin.flush()
      yield* supervisor.verdict
      return performance.now() - start
    })).pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.None)))
  )

/** The same with nothing but Bun.spawn: the floor. */
const floorRun = async () => {
  const procs = Array.from({ length: CHILDREN }, () => Bun.spawn(child, { stdin: "pipe", detached: true }))
  const start = performance.now()
  procs[3]!.stdin.write("1\n")
  procs[3]!.stdin.flush()
  await Promise.race(procs.map((proc) => proc.exited))
  for (const proc of procs) if (proc.exitCode === null) proc.kill("SIGKILL")
  await Promise.all(procs.map((proc) => proc.exited))
  return performance.now() - start
}


export const failureReaction = async () => {
  const cohort: Array<number> = []
  const brutal: Array<number> = []
  const floor: Array<number> = []
  const graceful = new KillAll()
  const atOnce = new KillAll({ grace: 0 })
  await cohortRun(graceful) // warm-up: first imports and JIT
  await floorRun()
  for (let i = 0; i < RUNS; i++) {
    cohort.push(await cohortRun(graceful))
    brutal.push(await cohortRun(atOnce))
    floor.push(await floorRun())
  }
  const row = (name: string, values: ReadonlyArray<number>) =>
    `| ${name} | ${values.length} | ${median(values).toFixed(2)} | ${percentile(values, 0.9).toFixed(2)} | ${Math.min(...values).toFixed(2)} |`
  return [
    `failure reaction: ${CHILDREN} children, one exits 1, until every sibling is reaped and the verdict is in (ms)`,
    "",
    "| contender | runs | median | p90 | min |",
    "|---|---|---|---|---|",
    row("cohort Supervisor (kill_all: SIGTERM, grace)", cohort),
    row("cohort Supervisor (kill_all: { grace: 0s }, SIGKILL)", brutal),
    row("floor: bare Bun.spawn", floor),
    "",
    `ratio cohort / floor (medians): ${(median(cohort) / median(floor)).toFixed(2)}; grace 0 / floor: ${(median(brutal) / median(floor)).toFixed(2)}`
  ].join("\n")
}

if (import.meta.main) console.log(await failureReaction())
