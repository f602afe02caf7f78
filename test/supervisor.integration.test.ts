/**
 * The supervisor with real processes: eight or more children, real signals,
 * and the process table read through /proc.
 */
import { describe, expect, test } from "bun:test"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Request from "effect/Request"
import * as Actor from "../src/kernel/Actor.ts"
import { fromActor } from "../src/kernel/ActorChild.ts"
import * as ProcessChild from "../src/kernel/ProcessChild.ts"
import { Shutdown } from "../src/kernel/Shutdown.ts"
import { Count, Elastic, KillAll, Phased } from "../src/kernel/policy/Strategy.ts"
import * as Supervisor from "../src/kernel/Supervisor.ts"
import { SupervisionEvent } from "../src/kernel/policy/decide.ts"
import { Verdict } from "../src/kernel/policy/Verdict.ts"
import { effect, eventually } from "./support/effect.ts"
import { collectLines, isGone, isRunning, jsonLines, waitFor } from "./support/processes.ts"

const childFixture = `${import.meta.dir}/fixtures/child-fixture.ts`
/** How a closing Scope stops these children's processes (the supervisor's own stops use each child spec's shutdown). */
const fiveSeconds = Shutdown.Grace({ grace: Duration.seconds(5) })
/** A child spec's shutdown: SIGTERM, then SIGKILL after `grace`. */
const graceOf = (grace: Duration.DurationInput) => Shutdown.Grace({ grace: Duration.decode(grace) })
const supervisorFixture = `${import.meta.dir}/fixtures/supervisor-fixture.ts`

/** `n` rank children running child-fixture.ts, each holding its stdin open. */
const ranks = (n: number, extra: (rank: number) => ReadonlyArray<string> = () => [], grace: Duration.DurationInput = "2 seconds") => {
  const pids = new Map<string, number>()
  const children = Array.from({ length: n }, (_, rank) =>
    Supervisor.rankChild(
      rank,
      ProcessChild.spawn({ cmd: [process.execPath, childFixture, ...extra(rank)], stdin: "pipe", stdout: "ignore", shutdown: fiveSeconds })
        .pipe(Effect.tap((child) => Effect.sync(() => pids.set(`rank-${rank}`, child.pid)))),
      undefined,
      graceOf(grace)
    ))
  return { children, pids }
}

/**
 * A child slow to stop, like a rank that saves a checkpoint on SIGTERM: it prints "ready <pid>", and
 * "term <Date.now()>" when SIGTERM arrives, then exits 143 `stopMs` later. `exit N` on stdin exits N at once.
 */
const slowToStop = (stopMs: number) => `
process.on("SIGTERM", () => {
  console.log("term " + Date.now())
  setTimeout(() => process.exit(143), ${stopMs})
})
console.log("ready " + process.pid)
setInterval(() => {}, 1 << 30)
for await (const chunk of Bun.stdin.stream()) {
  const asked = /exit (\\d+)/.exec(new TextDecoder().decode(chunk))
  if (asked !== null) process.exit(Number(asked[1]))
}
`

/** What the test saw of one slow child's process: its output, and when and how it ended (parent's view). */
interface Slow {
  readonly pid: number
  readonly lines: ReadonlyArray<string>
  exitedAt: number | undefined
  /** Its exit status, or null when a signal ended it. */
  code: number | null | undefined
  signal: string | null | undefined
}

/** When SIGTERM reached a slow child, by its own clock (`Date.now()`), if it did. */
const termAt = (slow: Slow): number | undefined => {
  const line = slow.lines.find((each) => each.startsWith("term "))
  return line === undefined ? undefined : Number(line.slice("term ".length))
}

/** `n` rank children that each take `stopMs` to exit after SIGTERM; `log` gets "start rank-N" and "stop rank-N". */
const slowRanks = (n: number, stopMs: number, log: Array<string> = [], grace: Duration.DurationInput = "5 seconds") => {
  const procs = new Map<string, Slow>()
  const children = Array.from({ length: n }, (_, rank) =>
    Supervisor.rankChild(
      rank,
      ProcessChild.spawn({ cmd: [process.execPath, "-e", slowToStop(stopMs)], stdin: "pipe", stdout: "pipe", shutdown: fiveSeconds }).pipe(
        Effect.tap((child) =>
          Effect.sync(() => {
            const output = collectLines(child.subprocess.stdout as ReadableStream<Uint8Array>)
            output.done.catch(() => undefined)
            const slow: Slow = { pid: child.pid, lines: output.lines, exitedAt: undefined, code: undefined, signal: undefined }
            void child.subprocess.exited.then(() => {
              slow.exitedAt = Date.now()
              slow.signal = child.subprocess.signalCode === null ? null : String(child.subprocess.signalCode)
              slow.code = child.subprocess.signalCode === null ? child.subprocess.exitCode : null
              log.push(`stop rank-${rank}`)
            })
            procs.set(`rank-${rank}`, slow)
            log.push(`start rank-${rank}`)
          })
        )
      ),
      undefined,
      graceOf(grace)
    ))
  const ready = () => procs.size === n && [...procs.values()].every((slow) => slow.lines.includes(`ready ${slow.pid}`))
  return { children, procs, ready }
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
  effect.live("kill_all: one of eight exits 1, every sibling is stopped and reaped, no zombie is left", () =>
    Effect.gen(function*() {
      const { children, pids } = ranks(8)
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children })
      yield* eventually(Effect.sync(() => pids.size === 8), "eight children started")
      yield* command(supervisor, "rank-5", "exit 1")
      const verdict = yield* supervisor.verdict
      expect(verdict).toEqual(Verdict.Failed({ kind: "child-failed", message: "rank 5 exited with status 1" }))
      // Reaped means gone from the process table, not a zombie.
      for (const pid of pids.values()) expect(isGone(pid)).toBe(true)
    }), 10_000)

  // Siblings take 300 ms to exit after SIGTERM: the grace in force decides whether they may.
  const killAllCases = [
    { name: "kill_all: the siblings get SIGTERM and their own grace", strategy: new KillAll(), term: true, exit: { code: 143, signal: null } },
    { name: "kill_all { grace: 100 ms }: the siblings get SIGTERM, and SIGKILL after that grace, not their own", strategy: new KillAll({ grace: 100 }), term: true, exit: { code: null, signal: "SIGKILL" } },
    { name: "kill_all { grace: 0 }: the siblings are killed at once, no SIGTERM", strategy: new KillAll({ grace: 0 }), term: false, exit: { code: null, signal: "SIGKILL" } }
  ]
  for (const { exit, name, strategy, term } of killAllCases) {
    effect.live(name, () =>
      Effect.gen(function*() {
        const slow = slowRanks(4, 300, [], "10 seconds")
        const supervisor = yield* Supervisor.start({ name: "test", strategy, children: slow.children })
        yield* eventually(Effect.sync(slow.ready), "four children started")
        const asked = Date.now()
        yield* command(supervisor, "rank-1", "exit 1")
        expect(yield* supervisor.verdict).toEqual(Verdict.Failed({ kind: "child-failed", message: "rank 1 exited with status 1" }))
        // Never the children's own 10 s grace: at most the siblings' 300 ms.
        expect(Date.now() - asked).toBeLessThan(2_000)
        for (const [id, proc] of slow.procs) {
          expect(isGone(proc.pid)).toBe(true)
          if (id === "rank-1") continue
          expect({ id, term: termAt(proc) !== undefined, code: proc.code, signal: proc.signal }).toEqual({ id, term, ...exit })
        }
        // Side by side: every sibling had its SIGTERM before the first of them ended.
        const siblings = [...slow.procs.entries()].filter(([id]) => id !== "rank-1").map(([, proc]) => proc)
        if (term) expect(Math.max(...siblings.map((proc) => termAt(proc)!))).toBeLessThan(Math.min(...siblings.map((proc) => proc.exitedAt!)))
      }), 10_000)
  }

  effect.live("an abort stops every child side by side: it takes the slowest child's time, not the sum of theirs", () =>
    Effect.gen(function*() {
      const STOP_MS = 300
      const slow = slowRanks(6, STOP_MS)
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children: slow.children })
      yield* eventually(Effect.sync(slow.ready), "six children started")
      const asked = Date.now()
      yield* supervisor.send(SupervisionEvent.AbortRequested({ reason: "test", signal: "SIGTERM" }))
      expect(yield* supervisor.verdict).toEqual(Verdict.Failed({ kind: "aborted", message: "aborted: test", signal: "SIGTERM" }))
      const took = Date.now() - asked
      const procs = [...slow.procs.values()]
      for (const proc of procs) {
        expect(isGone(proc.pid)).toBe(true)
        expect(proc.code).toBe(143)
      }
      expect(Math.max(...procs.map((proc) => termAt(proc)!))).toBeLessThan(Math.min(...procs.map((proc) => proc.exitedAt!)))
      // One after another would take 1.8 s.
      expect(took).toBeGreaterThanOrEqual(STOP_MS - 20)
      expect(took).toBeLessThan(3 * STOP_MS)
    }), 10_000)

  effect.live("elastic after formation: killed ranks are reported dead, survivors run on, the verdict is DEGRADED", () =>
    Effect.gen(function*() {
      const { children, pids } = ranks(8)
      const supervisor = yield* Supervisor.start({
        name: "test",
        strategy: new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Count({ n: 3 }) }) }),
        children
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
      const { children, pids } = ranks(8, (rank) => (rank === 0 ? ["--ignore-term"] : []), "300 millis")
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children })
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
        shutdown: graceOf("2 seconds"),
        start: Effect.gen(function*() {
          const child = yield* ProcessChild.spawn({
            cmd: [process.execPath, childFixture, "--grandchild"],
            stdin: "pipe",
            stdout: "pipe",
            shutdown: fiveSeconds
          })
          const output = collectLines(child.subprocess.stdout as ReadableStream<Uint8Array>)
          yield* eventually(Effect.sync(() => jsonLines(output.lines).length > 0), "grandchild started")
          grandchildren.push(jsonLines(output.lines)[0]!.grandchild as number)
          return child
        })
      }))
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children })
      yield* eventually(Effect.sync(() => grandchildren.length === 8), "eight grandchildren started")
      yield* command(supervisor, "rank-0", "exit 3")
      yield* supervisor.verdict
      yield* Effect.promise(() => waitFor(() => grandchildren.every((pid) => !isRunning(pid)), "grandchildren gone", 2_000))
    }), 15_000)
})

describe("a supervisor that dies", () => {
  effect.live("of a defect in a directive's hook: its verdict names it, and every child is stopped gracefully, side by side", () =>
    Effect.gen(function*() {
      const STOP_MS = 300
      const slow = slowRanks(6, STOP_MS)
      // A bug in the hook that sees each directive: the supervisor actor dies carrying out a ReportDead.
      const supervisor = yield* Supervisor.start({
        name: "test",
        strategy: new Elastic({}),
        children: slow.children,
        onDirective: (directive) => (directive._tag === "ReportDead" ? Effect.die(new Error("the hook exploded")) : Effect.void)
      })
      yield* eventually(Effect.sync(slow.ready), "six children started")
      const asked = Date.now()
      // Under elastic, a rank that exits 3 is reported dead, and its siblings would run on.
      yield* command(supervisor, "rank-2", "exit 3")
      const verdict = yield* Effect.raceFirst(
        supervisor.verdict,
        Effect.zipRight(Effect.sleep("5 seconds"), Effect.dieMessage("the verdict never came: the caller was left waiting"))
      )
      const took = Date.now() - asked
      expect(verdict._tag).toBe("Failed")
      if (verdict._tag === "Failed") {
        expect(verdict.kind).toBe("internal")
        expect(verdict.message).toStartWith("internal error: the supervisor test failed:")
        expect(verdict.message).toContain("the hook exploded")
      }
      // Asked again, the same answer, at once.
      expect(yield* supervisor.verdict).toEqual(verdict)
      const survivors = [...slow.procs.entries()].filter(([id]) => id !== "rank-2").map(([, proc]) => proc)
      expect(slow.procs.get("rank-2")!.code).toBe(3)
      for (const proc of [...slow.procs.values()]) expect(isGone(proc.pid)).toBe(true)
      // Gracefully: each survivor got SIGTERM and exited 143 on it, none was killed.
      for (const proc of survivors) expect(proc.code).toBe(143)
      // Side by side: each had its SIGTERM before the first of them ended, and it all took about one
      // child's time, not the five's sum (1.5 s).
      const began = survivors.map((proc) => termAt(proc)!)
      expect(began.every((at) => Number.isFinite(at))).toBe(true)
      expect(Math.max(...began)).toBeLessThan(Math.min(...survivors.map((proc) => proc.exitedAt!)))
      expect(took).toBeLessThan(3 * STOP_MS)
    }), 10_000)
})

/** An actor child that logs its start and its release, and crashes when asked. */
class Crash extends Request.TaggedClass("Crash")<void, never, {}> {}

/** When an actor child's release began and ended (`Date.now()`). */
interface Release {
  readonly id: string
  readonly from: number
  readonly to: number
}

const loggingActor = (
  id: string,
  log: Array<string>,
  options: {
    readonly crash?: (ref: Actor.ActorRef<Crash>) => void
    /** Its release takes this long (real time), and is recorded in `releases`. */
    readonly releaseMs?: number
    readonly releases?: Array<Release>
  } = {}
): Supervisor.SupervisedChild => ({
  id,
  label: `actor ${id}`,
  ranks: [],
  restart: "transient",
  significant: false,
  shutdown: fiveSeconds,
  start: Effect.gen(function*() {
    yield* Effect.acquireRelease(Effect.sync(() => log.push(`start ${id}`)), () =>
      Effect.gen(function*() {
        const from = Date.now()
        if (options.releaseMs !== undefined) yield* Effect.sleep(options.releaseMs)
        log.push(`stop ${id}`)
        options.releases?.push({ id, from, to: Date.now() })
      }))
    const ref = yield* Actor.spawn<Crash, never>({ name: id, handlers: { Crash: () => Effect.die(new Error(`${id} gave up`)) } })
    options.crash?.(ref)
    return fromActor(ref)
  })
})

describe("supervisor with actor and process children together", () => {
  effect.live("children start in order and a closing scope stops them all, side by side", () =>
    Effect.gen(function*() {
      // Every child takes STOP_MS to stop: the processes after SIGTERM, the actors in their release.
      const STOP_MS = 300
      const log: Array<string> = []
      const releases: Array<Release> = []
      const slow = slowRanks(3, STOP_MS, log)
      const actor = (id: string) => loggingActor(id, log, { releaseMs: STOP_MS, releases })
      const children = [actor("a"), slow.children[0]!, actor("b"), slow.children[1]!, actor("c"), slow.children[2]!]
      let closing = 0
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Supervisor.start({ name: "test", strategy: new KillAll(), children })
        yield* eventually(Effect.sync(() => slow.ready() && log.length === 6), "every child started")
        expect(log).toEqual(["start a", "start rank-0", "start b", "start rank-1", "start c", "start rank-2"])
        closing = Date.now()
      }))
      const took = Date.now() - closing
      // Every child was stopped, each as it should be: the processes by SIGTERM (they exit 143 on it), none killed.
      expect(log.slice(6).sort()).toEqual(["stop a", "stop b", "stop c", "stop rank-0", "stop rank-1", "stop rank-2"])
      const procs = [...slow.procs.values()]
      for (const proc of procs) {
        expect(isGone(proc.pid)).toBe(true)
        expect(proc.code).toBe(143)
      }
      // Side by side: every stop had begun before the first one ended, and the close took about one
      // child's time, not the sum of the six (1.8 s one after another).
      const began = [...procs.map((proc) => termAt(proc)!), ...releases.map((release) => release.from)]
      const ended = [...procs.map((proc) => proc.exitedAt!), ...releases.map((release) => release.to)]
      expect(began.every((at) => Number.isFinite(at))).toBe(true)
      expect(ended).toHaveLength(6)
      expect(Math.max(...began)).toBeLessThan(Math.min(...ended))
      expect(took).toBeGreaterThanOrEqual(STOP_MS - 20)
      expect(took).toBeLessThan(3 * STOP_MS)
    }), 10_000)

  effect.live("an actor's defect reaches the supervisor with its cause and kill_all takes the processes down", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      let crasher: Actor.ActorRef<Crash> | undefined
      const { children: processes, pids } = ranks(8)
      const children = [...processes, loggingActor("worker", log, { crash: (ref) => (crasher = ref) })]
      const supervisor = yield* Supervisor.start({ name: "test", strategy: new KillAll(), children })
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

  // The abort status is 128 + the signal's number, as shells and schedulers expect.
  for (const [signal, status] of [["SIGTERM", 143], ["SIGINT", 130]] as const) {
    test(`${signal} tears its children down, then it exits with the abort status ${status}`, async () => {
      const { output, pids, proc } = await startFixture(8)
      proc.kill(signal)
      expect(await proc.exited).toBe(status)
      await output.done
      expect(pids.filter(isRunning)).toEqual([])
      const verdict = jsonLines(output.lines).find((line) => "verdict" in line)?.verdict
      expect(verdict).toMatchObject({ _tag: "Failed", kind: "aborted", signal })
    }, 10_000)
  }

  test("SIGKILL of the supervising process leaves no child alive within 2 s", async () => {
    // --hold: the children ignore their stdin closing, so only the parent-death signal can end them.
    const { pids, proc } = await startFixture(8, "--hold")
    proc.kill("SIGKILL")
    await proc.exited
    await waitFor(() => pids.every((pid) => !isRunning(pid)), "every orphaned child dead", 2_000)
  }, 10_000)
})
