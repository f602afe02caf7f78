/**
 * The supervisor with real processes: eight or more children, real signals,
 * and the process table read through /proc.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Request from "effect/Request"
import * as Actor from "../src/actors/Actor.ts"
import { fromActor } from "../src/actors/ActorChild.ts"
import * as ProcessChild from "../src/actors/ProcessChild.ts"
import { Count, Elastic, KillAll, Phased } from "../src/actors/Strategy.ts"
import * as Supervisor from "../src/actors/Supervisor.ts"
import { SupervisionEvent } from "../src/actors/decide.ts"
import { Verdict } from "../src/actors/Verdict.ts"
import { effect, eventually } from "./support/effect.ts"
import { collectLines, isGone, isRunning, jsonLines, waitFor } from "./support/processes.ts"

const childFixture = `${import.meta.dir}/fixtures/child-fixture.ts`
const supervisorFixture = `${import.meta.dir}/fixtures/supervisor-fixture.ts`

/** `n` rank children running child-fixture.ts, each holding its stdin open. */
const ranks = (n: number, extra: (rank: number) => ReadonlyArray<string> = () => []) => {
  const pids = new Map<string, number>()
  const children = Array.from({ length: n }, (_, rank) =>
    Supervisor.rankChild(
      rank,
      ProcessChild.spawn({ cmd: [process.execPath, childFixture, ...extra(rank)], stdin: "pipe", stdout: "ignore" })
        .pipe(Effect.tap((child) => Effect.sync(() => pids.set(`rank-${rank}`, child.pid))))
    ))
  return { children, pids }
}

/** Tell a supervised fixture child what to do through its stdin. */
const command = (supervisor: Supervisor.Supervisor, id: string, line: string) =>
  Effect.gen(function*() {
    const handle = (yield* supervisor.handle(id)) as ProcessChild.ProcessChild | undefined
    if (handle === undefined) return yield* Effect.dieMessage(`${id} has no running incarnation`)
    const stdin = handle.subprocess.stdin as import("bun").FileSink
    stdin.write(`${line}\n`)
    stdin.flush()
  })

describe("supervisor with real processes", () => {
  effect.live("kill_all: one of eight exits 1, every sibling is killed and reaped, no zombie is left", () =>
    Effect.gen(function*() {
      const { children, pids } = ranks(8)
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children, grace: "2 seconds" })
      yield* eventually(Effect.sync(() => pids.size === 8), "eight children started")
      yield* command(supervisor, "rank-5", "exit 1")
      const verdict = yield* supervisor.verdict
      expect(verdict).toEqual(Verdict.Failed({ kind: "child-failed", message: "rank 5 exited with status 1" }))
      // Reaped means gone from the process table, not a zombie.
      for (const pid of pids.values()) expect(isGone(pid)).toBe(true)
    }), 10_000)

  effect.live("elastic after formation: killed ranks are reported dead, survivors run on, the verdict is DEGRADED", () =>
    Effect.gen(function*() {
      const { children, pids } = ranks(8)
      const supervisor = yield* Supervisor.start({
        name: "test",
        strategy: new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Count({ n: 3 }) }) }),
        children,
        grace: "2 seconds"
      })
      yield* eventually(Effect.sync(() => pids.size === 8), "eight children started")
      yield* supervisor.send(SupervisionEvent.CohortFormed())
      process.kill(pids.get("rank-2")!, "SIGKILL")
      process.kill(pids.get("rank-6")!, "SIGKILL")
      yield* eventually(Effect.map(supervisor.state, (state) => state.dead.length === 2), "two ranks dead")
      expect((yield* supervisor.state).dead).toEqual([2, 6])
      const survivors = [...pids.entries()].filter(([id]) => id !== "rank-2" && id !== "rank-6")
      for (const [, pid] of survivors) expect(isRunning(pid)).toBe(true)
      // The work is done: survivors exit cleanly.
      yield* supervisor.send(SupervisionEvent.RunDrained())
      for (const [id] of survivors) yield* command(supervisor, id, "exit 0")
      expect(yield* supervisor.verdict).toEqual(Verdict.Completed({ dead: 2, world: 8, tolerated: 0 }))
    }), 10_000)

  effect.live("a child that ignores SIGTERM is killed after the grace", () =>
    Effect.gen(function*() {
      const { children, pids } = ranks(8, (rank) => (rank === 0 ? ["--ignore-term"] : []))
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children, grace: "300 millis" })
      yield* eventually(Effect.sync(() => pids.size === 8), "eight children started")
      yield* supervisor.send(SupervisionEvent.AbortRequested({ reason: "test" }))
      const verdict = yield* supervisor.verdict
      expect(verdict).toEqual(Verdict.Failed({ kind: "aborted", message: "aborted: test" }))
      for (const pid of pids.values()) expect(isGone(pid)).toBe(true)
    }), 10_000)

  effect.live("a stop reaches the child's whole process group", () =>
    Effect.gen(function*() {
      const grandchildren: Array<number> = []
      const children = Array.from({ length: 8 }, (_, rank): Supervisor.SupervisedChild => ({
        id: `rank-${rank}`,
        label: `rank ${rank}`,
        ranks: [rank],
        restart: "transient",
        significant: false,
        start: Effect.gen(function*() {
          const child = yield* ProcessChild.spawn({
            cmd: [process.execPath, childFixture, "--grandchild"],
            stdin: "pipe",
            stdout: "pipe"
          })
          const output = collectLines(child.subprocess.stdout as ReadableStream<Uint8Array>)
          yield* eventually(Effect.sync(() => jsonLines(output.lines).length > 0), "grandchild started")
          grandchildren.push(jsonLines(output.lines)[0]!.grandchild as number)
          return child
        })
      }))
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children, grace: "2 seconds" })
      yield* eventually(Effect.sync(() => grandchildren.length === 8), "eight grandchildren started")
      yield* command(supervisor, "rank-0", "exit 3")
      yield* supervisor.verdict
      yield* Effect.promise(() => waitFor(() => grandchildren.every((pid) => !isRunning(pid)), "grandchildren gone", 2_000))
    }), 15_000)
})

/** An actor child that logs its start and its release, and crashes when asked. */
class Crash extends Request.TaggedClass("Crash")<void, never, {}> {}

const loggingActor = (id: string, log: Array<string>, crash?: (ref: Actor.ActorRef<Crash>) => void): Supervisor.SupervisedChild => ({
  id,
  label: `actor ${id}`,
  ranks: [],
  restart: "transient",
  significant: false,
  start: Effect.gen(function*() {
    yield* Effect.acquireRelease(Effect.sync(() => log.push(`start ${id}`)), () => Effect.sync(() => log.push(`stop ${id}`)))
    const ref = yield* Actor.spawn<Crash, never>({ name: id, handlers: { Crash: () => Effect.die(new Error(`${id} gave up`)) } })
    crash?.(ref)
    return fromActor(ref)
  })
})

describe("supervisor with actor and process children together", () => {
  effect.live("children start in order and a closing scope stops them in reverse order", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const { children: processes, pids } = ranks(2)
      const children = [loggingActor("a", log), processes[0]!, loggingActor("b", log), processes[1]!, loggingActor("c", log)]
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Supervisor.start({ name: "test", strategy: new KillAll(), children, grace: "2 seconds" })
        yield* eventually(Effect.sync(() => pids.size === 2 && log.length === 3), "every child started")
        expect(log).toEqual(["start a", "start b", "start c"])
      }))
      expect(log).toEqual(["start a", "start b", "start c", "stop c", "stop b", "stop a"])
      for (const pid of pids.values()) expect(isGone(pid)).toBe(true)
    }), 10_000)

  effect.live("an actor's defect reaches the supervisor with its cause and kill_all takes the processes down", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      let crasher: Actor.ActorRef<Crash> | undefined
      const { children: processes, pids } = ranks(8)
      const children = [...processes, loggingActor("worker", log, (ref) => (crasher = ref))]
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children, grace: "2 seconds" })
      yield* eventually(Effect.sync(() => pids.size === 8 && crasher !== undefined), "every child started")
      yield* Effect.ignore(crasher!.tell(new Crash()))
      const verdict = yield* supervisor.verdict
      expect(verdict._tag).toBe("Failed")
      if (verdict._tag === "Failed") {
        expect(verdict.kind).toBe("child-failed")
        expect(verdict.message).toStartWith("actor worker exited with crash: Error: worker gave up")
      }
      for (const pid of pids.values()) expect(isGone(pid)).toBe(true)
      expect(log).toEqual(["start worker", "stop worker"])
    }), 10_000)
})

describe("the supervising process", () => {
  /** Start supervisor-fixture.ts and wait until all its children run. */
  const startFixture = async (children: number, childArgs = "") => {
    const proc = Bun.spawn([process.execPath, supervisorFixture, "--children", String(children), "--child-args", childArgs], {
      stdout: "pipe",
      stderr: "inherit"
    })
    const output = collectLines(proc.stdout)
    await waitFor(() => jsonLines(output.lines).filter((line) => "started" in line).length === children, "children started")
    // "ready" comes from the child program itself, so setpriv has already set the
    // parent-death signal and exec'd it: killing the parent earlier races that prctl.
    await waitFor(() => output.lines.filter((line) => line.startsWith("ready ")).length === children, "children ready")
    const pids = jsonLines(output.lines).flatMap((line) => ("pid" in line ? [line.pid as number] : []))
    expect(pids.every(isRunning)).toBe(true)
    return { proc, output, pids }
  }

  test("SIGTERM tears its children down, then it exits with the abort status", async () => {
    const { output, pids, proc } = await startFixture(8)
    proc.kill("SIGTERM")
    expect(await proc.exited).toBe(130)
    await output.done
    expect(pids.filter(isRunning)).toEqual([])
    const verdict = jsonLines(output.lines).find((line) => "verdict" in line)?.verdict as { kind: string }
    expect(verdict.kind).toBe("aborted")
  }, 10_000)

  test("SIGKILL of the supervising process leaves no child alive within 2 s", async () => {
    // --hold: the children ignore their stdin closing, so only the parent-death signal can end them.
    const { pids, proc } = await startFixture(8, "--hold")
    proc.kill("SIGKILL")
    await proc.exited
    await waitFor(() => pids.every((pid) => !isRunning(pid)), "every orphaned child dead", 2_000)
  }, 10_000)
})
