/**
 * Orderly stop: N ranks that each need 1 s to save on SIGTERM; a terminal's
 * Ctrl-C (SIGINT to the whole process group of `setsid bun run launch`);
 * how long until `bun run` exits, and did every rank save?
 *
 * A stop that goes one rank at a time takes N × 1 s; side by side it takes
 * the slowest rank's time plus the launcher's own teardown. Reported per N:
 * the median stop time, its ratio to one rank's save (1.0 is the floor) and
 * to the one-at-a-time sum, the spread of the ranks' save times (how far
 * apart their SIGTERMs came), and how many runs had every rank save.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { median } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const SAVE_MS = 1_000
const root = resolve(import.meta.dir, "..")

const until = async (check: () => boolean, what: string, timeoutMs = 60_000) => {
  const deadline = performance.now() + timeoutMs
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await Bun.sleep(10)
  }
}

const files = (dir: string, prefix: string) => readdirSync(dir).filter((name) => name.startsWith(prefix))

/** One run: milliseconds from the group SIGINT to `bun run`'s exit, the ranks' save spread, and whether all saved. */
const stopOnce = async (ranks: number) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-bench-stop-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: bench-stop
workers:
  - { host: localhost, devices: ${ranks}, path: ${root}, env: { OMP_NUM_THREADS: "1" } }
job:
  entry: test/fixtures/rank-fixture.ts
  args: ["hold", "save=${SAVE_MS}:${dir}", "pidfile=${dir}"]
failure_policy: { grace: 10s }
`)
  // setsid: `bun run` leads a process group of its own, as a shell's foreground job does.
  const proc = Bun.spawn(["setsid", process.execPath, "run", "launch", file], {
    cwd: root,
    env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}` },
    stdout: "ignore",
    stderr: "ignore"
  })
  try {
    await until(() => files(dir, "rank-").length === ranks, `${ranks} ranks running`)
    const start = performance.now()
    process.kill(-proc.pid, "SIGINT")
    await proc.exited
    const took = performance.now() - start
    const saved = files(dir, "saved-").map((name) => (JSON.parse(readFileSync(join(dir, name), "utf8")) as { at: number }).at)
    return { took, spread: saved.length === 0 ? 0 : Math.max(...saved) - Math.min(...saved), allSaved: saved.length === ranks }
  } finally {
    try {
      process.kill(-proc.pid, "SIGKILL")
    } catch {
      // Already gone.
    }
    rmSync(dir, { recursive: true, force: true })
  }
}

export const orderlyStop = async (): Promise<string> => {
  const lines = [
    `orderly stop: ranks that each take ${SAVE_MS} ms to save on SIGTERM; group SIGINT to \`setsid bun run launch\`; ${RUNS} runs each`,
    "ranks  stop (median)  / one save  / one at a time  save spread (median)  every rank saved"
  ]
  for (const ranks of [4, 16]) {
    const runs: Array<Awaited<ReturnType<typeof stopOnce>>> = []
    for (let run = 0; run < RUNS; run++) runs.push(await stopOnce(ranks))
    const took = median(runs.map((run) => run.took))
    lines.push(
      `${String(ranks).padStart(5)}  ${`${(took / 1000).toFixed(2)} s`.padStart(13)}  ${(took / SAVE_MS).toFixed(2).padStart(10)}  ` +
        `${(took / (ranks * SAVE_MS)).toFixed(2).padStart(14)}  ${`${median(runs.map((run) => run.spread)).toFixed(0)} ms`.padStart(20)}  ` +
        `${runs.filter((run) => run.allSaved).length}/${runs.length}`.padStart(16)
    )
  }
  return lines.join("\n")
}

if (import.meta.main) console.log(await orderlyStop())
