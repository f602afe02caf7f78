/**
 * The checkout's runs (RunRegistry): each run's own entry under its id, its
 * claim on the checkpoint it writes, the refusal of a second run of the same
 * checkpoint while the first lives, and entries of launchers that are gone
 * (dead pids, pids reused since) ignored and removed.
 *
 * "Another launcher" is a real process here (`sleep`): its pid is alive, and
 * its start time in /proc is its own.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join, relative, resolve } from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Scope from "effect/Scope"
import * as Exit from "effect/Exit"
import { claim, isLive, readEntries, runId } from "../src/launcher/run/RunRegistry.ts"
import { startTimeOf } from "../src/kernel/ProcessLiveness.ts"

const dirs: Array<string> = []
const others: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of others.splice(0)) proc.kill("SIGKILL")
})
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const runsDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-registry-"))
  dirs.push(dir)
  return join(dir, ".cohort", "runs")
}

/** A live process standing in for another launcher. */
const anotherLauncher = () => {
  const proc = Bun.spawn(["sleep", "60"])
  others.push(proc)
  return proc.pid
}

/** A pid that was a process and has ended. */
const deadPid = async () => {
  const proc = Bun.spawn(["true"])
  await proc.exited
  return proc.pid
}

const files = (dir: string) => (existsSync(dir) ? readdirSync(dir).sort() : [])
const json = (dir: string, name: string) => JSON.parse(readFileSync(join(dir, name), "utf8")) as Record<string, unknown>

/** Claim in a scope the test closes itself; the claim's failure, if any, as an Either. */
const claimIn = (options: Parameters<typeof claim>[0]) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const result = yield* Effect.either(Scope.extend(claim(options), scope))
    return { result, close: Scope.close(scope, Exit.void) }
  })

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

describe("a run's entry", () => {
  test("written at the claim under <name>-<pid>, told the port once it listens, removed when the run ends", async () => {
    const dir = runsDir()
    const { close, result } = await run(claimIn({ run: "local", checkpoint: ".cohort/checkpoints/local.json", startedAt: 1_000, startToken: "ab".repeat(32), dir }))
    expect(Either.isRight(result)).toBe(true)
    const registration = Either.getOrThrow(result)
    expect(registration.id).toBe(`local-${process.pid}`)
    expect(files(dir)).toEqual([`local-${process.pid}.json`])
    expect(json(dir, `local-${process.pid}.json`)).toEqual({
      id: `local-${process.pid}`,
      run: "local",
      address: "",
      port: 0,
      page: "",
      pid: process.pid,
      pidStart: startTimeOf(process.pid),
      host: hostname(),
      startedAt: 1_000,
      checkpoint: resolve(".cohort/checkpoints/local.json"),
      startToken: "ab".repeat(32)
    })
    await run(registration.listening({ address: "127.0.0.1", port: 41_235, page: "http://127.0.0.1:41235/" }))
    expect(json(dir, `local-${process.pid}.json`)).toMatchObject({ address: "127.0.0.1", port: 41_235, page: "http://127.0.0.1:41235/" })
    await run(close)
    expect(files(dir)).toEqual([])
  })

  test("the id is the name and the pid", () => {
    expect(runId("local", 4242)).toBe("local-4242")
    expect(runId("run-2.v1", 7)).toBe("run-2.v1-7")
  })
})

describe("one checkpoint, one live run", () => {
  test("a second run of the same checkpoint is refused, naming the first: its id, pid, start and page", async () => {
    const dir = runsDir()
    const other = anotherLauncher()
    const first = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: Date.UTC(2026, 0, 1, 12, 1, 7), startToken: "", dir, pid: other }))
    await run(Either.getOrThrow(first.result).listening({ address: "127.0.0.1", port: 41_235, page: "http://127.0.0.1:41235/" }))
    const second = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: Date.now(), startToken: "", dir }))
    expect(Either.isLeft(second.result)).toBe(true)
    const refusal = Either.isLeft(second.result) ? second.result.left : undefined
    const started = new Date(Date.UTC(2026, 0, 1, 12, 1, 7)).toTimeString().slice(0, 8)
    expect(refusal?.message).toBe(
      `the checkpoint /ckpt/local.json belongs to run local-${other}, which is running (pid ${other}, started ${started}, page http://127.0.0.1:41235/): ` +
        `a second run would overwrite it. To run both, give this one its own checkpoint with --set job.checkpoint=PATH; or wait for that run to end (stop it with kill -TERM ${other})`
    )
    // The refused run leaves nothing behind once its scope closes; the first keeps its entry.
    await run(second.close)
    expect(files(dir)).toEqual([`local-${other}.json`])
    // A relative path is the same checkpoint as its absolute spelling.
    const spelled = await run(claimIn({ run: "local", checkpoint: relative(process.cwd(), "/ckpt/local.json"), startedAt: 0, startToken: "", dir }))
    expect(Either.isLeft(spelled.result)).toBe(true)
    await run(spelled.close)
    await run(first.close)
  })

  test("another checkpoint (another name, or job.checkpoint), or a run that writes none, is no conflict", async () => {
    const dir = runsDir()
    const other = anotherLauncher()
    const first = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir, pid: other }))
    const elsewhere = await run(claimIn({ run: "local", checkpoint: "/ckpt/other.json", startedAt: 0, startToken: "", dir }))
    expect(Either.isRight(elsewhere.result)).toBe(true)
    await run(elsewhere.close)
    const none = await run(claimIn({ run: "local", checkpoint: undefined, startedAt: 0, startToken: "", dir }))
    expect(Either.isRight(none.result)).toBe(true)
    expect(json(dir, `local-${process.pid}.json`).checkpoint).toBe("")
    await run(none.close)
    // And two runs that write none never conflict with each other.
    const quiet = await run(claimIn({ run: "cmd", checkpoint: undefined, startedAt: 0, startToken: "", dir, pid: anotherLauncher() }))
    const quiet2 = await run(claimIn({ run: "cmd", checkpoint: undefined, startedAt: 0, startToken: "", dir }))
    expect([Either.isRight(quiet.result), Either.isRight(quiet2.result)]).toEqual([true, true])
    for (const each of [quiet, quiet2, first]) await run(each.close)
  })

  test("two claims made together: never both go on (each writes before it reads, and one that sees a rival steps back)", async () => {
    for (let attempt = 0; attempt < 20; attempt++) {
      const dir = runsDir()
      const [a, b] = await run(Effect.all([
        claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir, pid: anotherLauncher() }),
        claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir })
      ], { concurrency: "unbounded" }))
      expect(Either.isRight(a!.result) && Either.isRight(b!.result)).toBe(false)
      await run(Effect.all([a!.close, b!.close]))
      expect(files(dir)).toEqual([])
    }
  })

  test("an entry on another host cannot be checked from here: it counts as live, and the refusal says which file to remove", async () => {
    const dir = runsDir()
    const first = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir, pid: anotherLauncher() }))
    await run(first.close)
    writeFileSync(join(dir, "local-1.json"), JSON.stringify({ id: "local-1", run: "local", pid: 1, host: "elsewhere.example", startedAt: 0, checkpoint: "/ckpt/local.json" }))
    expect(isLive({ host: "elsewhere.example", pid: 999_999_999, pidStart: "1" })).toBe(true)
    const refused = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir }))
    expect(Either.isLeft(refused.result) && refused.result.left.message).toContain(
      "To run both, give this one its own checkpoint with --set job.checkpoint=PATH; or wait for that run to end (it runs on elsewhere.example; if that launcher is gone, remove .cohort/runs/local-1.json)"
    )
    await run(refused.close)
  })
})

describe("entries of launchers that are gone", () => {
  test("a dead pid's entry, or one whose pid another process has since, is ignored and removed by the next claim", async () => {
    const dir = runsDir()
    const gone = await deadPid()
    const reused = anotherLauncher()
    const write = (name: string, entry: Record<string, unknown>) =>
      writeFileSync(join(dir, name), JSON.stringify({ run: "local", host: hostname(), startedAt: 0, checkpoint: "/ckpt/local.json", ...entry }))
    await run(claimIn({ run: "seed", checkpoint: undefined, startedAt: 0, startToken: "", dir }).pipe(Effect.flatMap(({ close }) => close)))
    write(`local-${gone}.json`, { id: `local-${gone}`, pid: gone })
    write(`local-${reused}.json`, { id: `local-${reused}`, pid: reused, pidStart: "1" })
    expect(isLive({ host: hostname(), pid: gone, pidStart: undefined })).toBe(false)
    expect(isLive({ host: hostname(), pid: reused, pidStart: "1" })).toBe(false)
    expect(isLive({ host: hostname(), pid: reused, pidStart: startTimeOf(reused) as string })).toBe(true)
    const claimed = await run(claimIn({ run: "local", checkpoint: "/ckpt/local.json", startedAt: 0, startToken: "", dir }))
    expect(Either.isRight(claimed.result)).toBe(true)
    expect(files(dir)).toEqual([`local-${process.pid}.json`])
    await run(claimed.close)
  })

  test("an older launcher's entry (<run>.json, no id, host or checkpoint) still reads, under its file's name", async () => {
    const dir = runsDir()
    await run(claimIn({ run: "seed", checkpoint: undefined, startedAt: 0, startToken: "", dir }).pipe(Effect.flatMap(({ close }) => close)))
    writeFileSync(join(dir, "old.json"), JSON.stringify({ run: "old", address: "127.0.0.1", port: 4000, pid: process.pid, startedAt: 5, startToken: "t" }))
    writeFileSync(join(dir, "broken.json"), "{\"run\": ")
    writeFileSync(join(dir, "group.json"), JSON.stringify({ run: "g", pid: 0, startedAt: 0 }))
    expect(readEntries(dir).map(({ entry }) => entry)).toEqual([{
      id: "old",
      run: "old",
      address: "127.0.0.1",
      port: 4000,
      page: "",
      pid: process.pid,
      pidStart: undefined,
      host: hostname(),
      startedAt: 5,
      checkpoint: "",
      startToken: "t"
    }])
  })
})
