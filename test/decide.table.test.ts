/**
 * `decide`, step by step, against directives written out by hand: the
 * backoff sequence and its jitter, the restart-intensity window's edge,
 * per-child versus group attempt counts, kill_all, elastic limits and their
 * verdicts, the teardown window, growth, aborts and internal failures, a
 * significant child's group, and OTP's restart types. Nothing here computes
 * an expected value with the code it checks; each number says where it
 * comes from.
 */
import { describe, expect, test } from "bun:test"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import {
  backoffBase,
  backoffDelay,
  decide,
  type Directive,
  initialState,
  SupervisionEvent,
  type SupervisorState
} from "../src/kernel/policy/decide.ts"
import { Backoff, Count, Elastic, KillAll, Percent, Phased, Restart, type RestartType, type Strategy } from "../src/kernel/policy/Strategy.ts"
import { Verdict } from "../src/kernel/policy/Verdict.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

const rank = (n: number, restart: RestartType = "transient", extra: Partial<ChildSpec> = {}): ChildSpec => ({
  id: `r${n}`,
  label: `rank ${n}`,
  ranks: [n],
  restart,
  significant: false, shutdown: anyShutdown,
  ...extra
})

const crash = (id: string) => SupervisionEvent.ChildExited({ id, exit: ChildExit.Signaled({ signal: "SIGKILL" }) })
const exits = (id: string, code: number) => SupervisionEvent.ChildExited({ id, exit: ChildExit.Exited({ code }) })
const due = (id: string) => SupervisionEvent.RestartDue({ id })

/** A supervisor under test: feed it events at times, read each step's directives. */
const supervise = (strategy: Strategy, children: ReadonlyArray<ChildSpec>, seed?: number) => {
  let state: SupervisorState = initialState(children, seed)
  const step = (event: SupervisionEvent, now = 0): ReadonlyArray<Directive> => {
    const [directives, next] = decide(strategy, state, event, now)
    state = next
    return directives
  }
  const boot = step(SupervisionEvent.Boot())
  return {
    boot,
    step,
    /** This step's directives without the operator's notes. */
    act: (event: SupervisionEvent, now = 0) => step(event, now).filter((directive) => directive._tag !== "Note"),
    notes: (event: SupervisionEvent, now = 0) =>
      step(event, now).flatMap((directive) => (directive._tag === "Note" ? [directive.message] : [])),
    get state() {
      return state
    }
  }
}

const noJitter = (initial: number, max: number, factor: number) => new Backoff({ initial, max, factor, jitter: 0 })

describe("backoff", () => {
  test("initial × factor^n, capped at max: 100 ms doubling to 1 s", () => {
    const backoff = noJitter(100, 1_000, 2)
    expect([0, 1, 2, 3, 4, 5].map((attempt) => backoffBase(backoff, attempt))).toEqual([100, 200, 400, 800, 1_000, 1_000])
    expect([0, 1, 2].map((attempt) => backoffBase(noJitter(50, 10_000, 3), attempt))).toEqual([50, 150, 450])
    expect([0, 7].map((attempt) => backoffBase(noJitter(250, 250, 1), attempt))).toEqual([250, 250])
  })

  test("initial 0 stays 0, even where factor^n overflows (0 × ∞ is NaN)", () => {
    expect(backoffBase(noJitter(0, 5_000, 100), 0)).toBe(0)
    expect(backoffBase(noJitter(0, 5_000, 100), 1_000)).toBe(0)
    expect(backoffDelay(new Backoff({ initial: 0, max: 5_000, factor: 100, jitter: 0.5 }), 1_000, 0.9)).toBe(0)
  })

  test("jitter dithers both ways, u = 0 the lowest, u → 1 the highest: base × (1 ± jitter)", () => {
    const backoff = new Backoff({ initial: 100, max: 10_000, factor: 2, jitter: 0.5 })
    // 100 × (1 + 0.5 × (2u − 1)): u = 0 → 50, 0.25 → 75, 0.5 → 100, 0.75 → 125, just under 1 → 150.
    expect([0, 0.25, 0.5, 0.75, 0.999_999].map((u) => backoffDelay(backoff, 0, u))).toEqual([50, 75, 100, 125, 150])
    // The second attempt's base is 200: 100 to 300.
    expect([0, 0.999_999].map((u) => backoffDelay(backoff, 1, u))).toEqual([100, 300])
  })

  test("dithered delays are rounded to the nearest millisecond, never above max, never below 0", () => {
    // 100 × (1 − 0.3333) = 66.67 → 67; 100 × (1 − 0.338) = 66.2 → 66 (neither floor nor ceil gives both).
    expect(backoffDelay(new Backoff({ initial: 100, max: 1_000, factor: 2, jitter: 0.3333 }), 0, 0)).toBe(67)
    expect(backoffDelay(new Backoff({ initial: 100, max: 1_000, factor: 2, jitter: 0.338 }), 0, 0)).toBe(66)
    // 800 × 1.4998 = 1,199.8: capped at max 1,000; u = 0 gives 800 × 0.5 = 400.
    const near = new Backoff({ initial: 800, max: 1_000, factor: 1, jitter: 0.5 })
    expect([0.9998, 0].map((u) => backoffDelay(near, 0, u))).toEqual([1_000, 400])
    // jitter 1 at u = 0: 100 × 0 = 0.
    expect(backoffDelay(new Backoff({ initial: 100, max: 1_000, factor: 2, jitter: 1 }), 0, 0)).toBe(0)
  })
})

describe("restart", () => {
  const restart = (maxRestarts: number, within: number, backoff: Backoff, scope: "one" | "all") => new Restart({ maxRestarts, within, backoff, scope })

  test("a crash is restarted after the backoff, and comes back when it is due", () => {
    const run = supervise(restart(5, 60_000, noJitter(100, 1_000, 2), "one"), [rank(0)])
    expect(run.boot).toEqual([{ _tag: "Start", id: "r0" }])
    expect(run.act(crash("r0"), 10)).toEqual([{ _tag: "Restart", id: "r0", after: 100 }])
    expect(run.notes(due("r0"), 110)).toEqual([])
    expect(run.state.children[0]!.status).toBe("running")
    // The second crash doubles the delay: 200.
    expect(run.act(crash("r0"), 500)).toEqual([{ _tag: "Restart", id: "r0", after: 200 }])
  })

  test("the intensity window is (now − within, now]: a restart exactly `within` ago no longer counts (OTP counts it)", () => {
    const run = supervise(restart(1, 1_000, noJitter(0, 0, 1), "one"), [rank(0)])
    expect(run.act(crash("r0"), 0)).toEqual([{ _tag: "Restart", id: "r0", after: 0 }])
    run.step(due("r0"), 0)
    // 1,000 ms after the first restart: it has left the window, so this is the only one in it.
    expect(run.act(crash("r0"), 1_000)).toEqual([{ _tag: "Restart", id: "r0", after: 0 }])
    run.step(due("r0"), 1_000)
    // 999 ms after the second: a second restart within 1,000 ms would exceed max_restarts 1.
    // `within` as a file writes it: 1000 ms is "1s".
    const cause = "rank 0 exited with signal SIGKILL; restart intensity exceeded: rank 0 would be restart 2 within 1s (max_restarts 1)"
    expect(run.act(crash("r0"), 1_999)).toEqual([{ _tag: "Escalate", cause }, { _tag: "Verdict", verdict: Verdict.Failed({ kind: "restart-intensity", message: cause }) }])
  })

  test("max_restarts 0: the first crash escalates; the stop says what it does, not the cause again (the escalation and the verdict carry it)", () => {
    const run = supervise(restart(0, 600_000, noJitter(0, 0, 1), "one"), [rank(0), rank(1)])
    // `within: 10m` is said as written, not as 600000 ms.
    const cause = "rank 1 exited with status 2; restart intensity exceeded: rank 1 would be restart 1 within 10m (max_restarts 0)"
    expect(run.step(exits("r1", 2), 5)).toEqual([
      { _tag: "Escalate", cause },
      { _tag: "Note", message: "restart intensity exceeded: stopping every child" },
      { _tag: "Terminate", ids: ["r0"], mode: "graceful", reason: "restart intensity exceeded: stopping every child" }
    ])
    expect(run.notes(exits("r0", 143), 10)).toEqual([])
    expect(run.state.verdict).toEqual(Verdict.Failed({ kind: "restart-intensity", message: cause }))
  })

  test("a `within` that is no whole unit is said in milliseconds; whole ones in the largest unit", () => {
    const cases: ReadonlyArray<readonly [number, string]> = [[1_500, "1500ms"], [90_000, "90s"], [7_200_000, "2h"], [5_400_000, "90m"]]
    for (const [within, said] of cases) {
      const run = supervise(restart(0, within, noJitter(0, 0, 1), "one"), [rank(0)])
      expect(run.act(crash("r0"), 5)).toEqual([
        { _tag: "Escalate", cause: `rank 0 exited with signal SIGKILL; restart intensity exceeded: rank 0 would be restart 1 within ${said} (max_restarts 0)` },
        { _tag: "Verdict", verdict: Verdict.Failed({ kind: "restart-intensity", message: `rank 0 exited with signal SIGKILL; restart intensity exceeded: rank 0 would be restart 1 within ${said} (max_restarts 0)` }) }
      ])
    }
  })

  test("scope one counts each child's own restarts: two children crashing in turn each start at the initial delay", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0), rank(1)])
    expect(run.act(crash("r0"), 0)).toEqual([{ _tag: "Restart", id: "r0", after: 100 }])
    run.step(due("r0"), 100)
    expect(run.act(crash("r1"), 200)).toEqual([{ _tag: "Restart", id: "r1", after: 100 }])
    run.step(due("r1"), 300)
    expect(run.act(crash("r0"), 400)).toEqual([{ _tag: "Restart", id: "r0", after: 200 }])
    run.step(due("r0"), 600)
    expect(run.act(crash("r1"), 700)).toEqual([{ _tag: "Restart", id: "r1", after: 200 }])
  })

  test("scope all counts the group's restarts, stops the others and brings everyone back in start order", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "all"), [rank(0), rank(1), rank(2)])
    expect(run.step(crash("r1"), 0)).toEqual([
      { _tag: "Restart", id: "r1", after: 100 },
      { _tag: "Note", message: "rank 1 exited with signal SIGKILL: restarting the whole group in 100 ms" },
      { _tag: "Terminate", ids: ["r2", "r0"], mode: "graceful", reason: "rank 1 exited with signal SIGKILL: restarting the whole group in 100 ms" }
    ])
    // The stopped ones exit as asked: each waits for the group's moment (t = 100).
    expect(run.act(exits("r2", 0), 40)).toEqual([{ _tag: "Restart", id: "r2", after: 60 }])
    expect(run.act(crash("r0"), 50)).toEqual([{ _tag: "Restart", id: "r0", after: 50 }])
    // r2's timer fires first; everyone due by now comes back, in the order they first started.
    expect(run.act(due("r2"), 100)).toEqual([{ _tag: "Start", id: "r0" }, { _tag: "Start", id: "r1" }, { _tag: "Start", id: "r2" }])
    // A later crash of another child is the group's second restart: 200.
    expect(run.act(crash("r2"), 1_000)[0]).toEqual({ _tag: "Restart", id: "r2", after: 200 })
  })

  test("jitter draws come from mulberry32 seeded by the state: the same seed, the same delays", () => {
    // mulberry32 as published (Tommy Ettinger), written out here: the test's own source of the draws.
    const mulberry32 = (seed: number) => () => {
      seed = (seed + 0x6d2b79f5) >>> 0
      let t = seed
      t = Math.imul(t ^ (t >>> 15), t | 1)
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
      return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
    }
    for (const seed of [0x5eed, 1, 123_456_789]) {
      const draws = mulberry32(seed)
      const run = supervise(restart(10, 1_000_000, new Backoff({ initial: 1_000, max: 100_000, factor: 2, jitter: 0.5 }), "one"), [rank(0)], seed)
      for (const [attempt, base] of [[0, 1_000], [1, 2_000], [2, 4_000]] as const) {
        const expected = Math.round(base * (1 + 0.5 * (2 * draws() - 1)))
        expect({ seed, attempt, restart: run.act(crash("r0"), attempt * 10_000) }).toEqual({ seed, attempt, restart: [{ _tag: "Restart", id: "r0", after: expected }] })
        run.step(due("r0"), attempt * 10_000 + base * 2)
      }
    }
  })

  test("a timer that fires early still brings its child back (the clock is the interpreter's)", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0)])
    run.step(crash("r0"), 0)
    expect(run.act(due("r0"), 50)).toEqual([{ _tag: "Start", id: "r0" }])
  })

  test("a lost rank's flag goes with its exit: after its restart, a clean exit is clean again", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0), rank(1)])
    run.step(SupervisionEvent.RanksLost({ ranks: [0], reason: "silent" }), 0)
    expect(run.act(exits("r0", 0), 10)).toEqual([{ _tag: "Restart", id: "r0", after: 100 }])
    run.step(due("r0"), 110)
    // Transient, clean: ended for good, not restarted again.
    expect(run.step(exits("r0", 0), 200)).toEqual([])
    expect(run.state.children[0]!.status).toBe("exited")
  })

  test("a lost rank restarts whichever child carries it (an agent carries several), naming why", () => {
    const agent: ChildSpec = { id: "agent", label: "agent of host-a", ranks: [0, 1], restart: "transient", significant: false, shutdown: anyShutdown }
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [agent, rank(2)])
    run.step(SupervisionEvent.RanksLost({ ranks: [1], reason: "silent" }), 0)
    expect(run.act(exits("agent", 0), 10)).toEqual([{ _tag: "Restart", id: "agent", after: 100 }])
    // One that had already exited is restarted at once, and the note says so.
    run.step(exits("r2", 0), 20)
    expect(run.notes(SupervisionEvent.RanksLost({ ranks: [2], reason: "silent" }), 30)).toEqual([
      "rank(s) 2 lost: silent after rank 2 had exited: restarting it in 100 ms"
    ])
  })

  test("a restart that is not due yet waits: its own timer brings it back, not a sibling's", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0), rank(1)])
    run.step(crash("r0"), 0)
    run.step(due("r0"), 100)
    run.step(crash("r0"), 150) // due at 150 + 200 = 350
    run.step(crash("r1"), 200) // due at 300
    expect(run.act(due("r1"), 300)).toEqual([{ _tag: "Start", id: "r1" }])
    expect(run.act(due("r0"), 350)).toEqual([{ _tag: "Start", id: "r0" }])
    // A stale timer (already running) changes nothing.
    expect(run.step(due("r0"), 400)).toEqual([])
  })

  test("OTP's restart types: permanent comes back after a clean exit, transient does not, temporary is never restarted", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0, "permanent"), rank(1, "transient"), rank(2, "temporary"), rank(3)])
    expect(run.step(exits("r0", 0), 0)).toEqual([
      { _tag: "Restart", id: "r0", after: 100 },
      { _tag: "Note", message: "rank 0 exited with status 0 (permanent child): restarting it in 100 ms" }
    ])
    expect(run.step(exits("r1", 0), 0)).toEqual([])
    expect(run.state.children[1]!.status).toBe("exited")
    expect(run.step(crash("r2"), 0)).toEqual([
      { _tag: "ReportDead", ranks: [2], cause: "rank 2 exited with signal SIGKILL (temporary child: not restarted)" },
      { _tag: "Note", message: "rank 2 exited with signal SIGKILL (temporary child: not restarted): reporting rank(s) 2 dead; survivors carry the work" }
    ])
  })

  test("a rank lost to heartbeats is restarted at its exit, even a clean one; one that had exited already at once", () => {
    const run = supervise(restart(10, 1_000_000, noJitter(100, 10_000, 2), "one"), [rank(0), rank(1)])
    expect(run.step(SupervisionEvent.RanksLost({ ranks: [0], reason: "silent" }), 0)).toEqual([])
    expect(run.step(exits("r0", 0), 10)).toEqual([
      { _tag: "Restart", id: "r0", after: 100 },
      { _tag: "Note", message: "rank 0 exited with status 0 with its work unfinished: restarting it in 100 ms" }
    ])
    run.step(exits("r1", 0), 20)
    // r1's own first restart (scope one): the initial 100 ms.
    expect(run.act(SupervisionEvent.RanksLost({ ranks: [1], reason: "silent" }), 30)).toEqual([{ _tag: "Restart", id: "r1", after: 100 }])
  })
})

describe("kill_all", () => {
  const children = [rank(0), rank(1), rank(2)]

  test("the first abnormal exit stops every sibling (in reverse start order) and is the root cause", () => {
    const run = supervise(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}) }), children)
    const reason = "rank 1 exited with status 3: terminating every sibling (kill_all)"
    expect(run.step(exits("r1", 3), 0)).toEqual([
      { _tag: "Note", message: reason },
      { _tag: "Terminate", ids: ["r2", "r0"], mode: "graceful", reason }
    ])
    // A sibling's own crash while it stops changes nothing.
    expect(run.step(crash("r2"), 5)).toEqual([])
    expect(run.act(exits("r0", 0), 10)).toEqual([{ _tag: "Verdict", verdict: Verdict.Failed({ kind: "child-failed", message: "rank 1 exited with status 3" }) }])
    // Nothing after the verdict.
    expect(run.step(SupervisionEvent.Boot(), 20)).toEqual([])
  })

  test("grace 0 kills at once; a grace of its own travels with the stop", () => {
    expect(supervise(new KillAll({ grace: 0 }), children).act(crash("r0"))).toEqual([
      { _tag: "Terminate", ids: ["r2", "r1"], mode: "kill", reason: "rank 0 exited with signal SIGKILL: terminating every sibling (kill_all)" }
    ])
    expect(supervise(new KillAll({ grace: 1_500 }), children).act(crash("r0"))).toEqual([
      { _tag: "Terminate", ids: ["r2", "r1"], mode: "graceful", reason: "rank 0 exited with signal SIGKILL: terminating every sibling (kill_all)", graceMs: 1_500 }
    ])
  })

  test("ranks lost to heartbeats fail it too, naming them", () => {
    const run = supervise(new KillAll(), children)
    expect(run.act(SupervisionEvent.RanksLost({ ranks: [1, 2], reason: "no beat for 30 s" }))).toEqual([
      { _tag: "Terminate", ids: ["r2", "r1", "r0"], mode: "graceful", reason: "rank(s) 1, 2 lost: no beat for 30 s: terminating every child (kill_all)" }
    ])
  })

  test("after formation a phased kill_all still applies; before it an elastic one does not stop anyone", () => {
    const run = supervise(new Phased({ beforeFormation: new Elastic({}), afterFormation: new KillAll() }), children)
    expect(run.act(crash("r0"))).toEqual([{ _tag: "ReportDead", ranks: [0], cause: "rank 0 exited with signal SIGKILL", kind: "signal" }])
    run.step(SupervisionEvent.CohortFormed())
    expect(run.act(crash("r1"))).toEqual([
      { _tag: "Terminate", ids: ["r2"], mode: "graceful", reason: "rank 1 exited with signal SIGKILL: terminating every sibling (kill_all)" }
    ])
  })
})

describe("elastic", () => {
  const world = [rank(0), rank(1), rank(2), rank(3)]

  test("each death is reported once; survivors finish; the verdict is DEGRADED", () => {
    const run = supervise(new Elastic({}), world)
    expect(run.step(crash("r2"))).toEqual([
      { _tag: "ReportDead", ranks: [2], cause: "rank 2 exited with signal SIGKILL", kind: "signal" },
      { _tag: "Note", message: "rank 2 exited with signal SIGKILL: reporting rank(s) 2 dead; survivors carry the work" }
    ])
    for (const id of ["r0", "r1"]) expect(run.step(exits(id, 0))).toEqual([])
    expect(run.step(exits("r3", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Completed({ dead: 1, world: 4, tolerated: 0 }) }])
  })

  test("max_failure 2 of 4: the second death stops the run and fails it, naming the threshold", () => {
    const run = supervise(new Elastic({ maxFailure: new Count({ n: 2 }) }), world)
    run.step(crash("r0"))
    expect(run.act(crash("r3"))).toEqual([
      { _tag: "ReportDead", ranks: [3], cause: "rank 3 exited with signal SIGKILL", kind: "signal" },
      { _tag: "LimitCrossed", message: "max_failure exceeded (2/4 dead, threshold 2)" },
      { _tag: "Terminate", ids: ["r2", "r1"], mode: "graceful", reason: "max_failure exceeded (2/4 dead, threshold 2): stopping the run" }
    ])
    run.step(exits("r1", 0))
    expect(run.act(exits("r2", 0))).toEqual([
      {
        _tag: "Verdict",
        verdict: Verdict.Failed({
          kind: "max-failure",
          // A signal is never an echo of another death: the first one leads, the second follows.
          message: "max_failure exceeded: 2/4 ranks dead, threshold 2; root cause: rank 0 exited with signal SIGKILL; other deaths: rank 3 exited with signal SIGKILL"
        })
      }
    ])
  })

  test("max_failure 50% of 4 is 2 dead; 1 dead is still a completed run", () => {
    const run = supervise(new Elastic({ maxFailure: new Percent({ p: 50 }) }), world)
    run.step(crash("r0"))
    for (const id of ["r1", "r2"]) run.step(exits(id, 0))
    expect(run.act(exits("r3", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Completed({ dead: 1, world: 4, tolerated: 0 }) }])
  })

  test("without a limit, losing every rank fails the run", () => {
    const run = supervise(new Elastic({}), world.slice(0, 2))
    run.step(crash("r0"))
    expect(run.step(crash("r1"))).toEqual([
      { _tag: "ReportDead", ranks: [1], cause: "rank 1 exited with signal SIGKILL", kind: "signal" },
      { _tag: "Note", message: "rank 1 exited with signal SIGKILL: reporting rank(s) 1 dead; survivors carry the work" },
      { _tag: "Note", message: "every rank was lost (2/2): stopping the run" },
      {
        _tag: "Verdict",
        verdict: Verdict.Failed({
          kind: "all-ranks-lost",
          message: "every rank was lost (2/2); root cause: rank 0 exited with signal SIGKILL; other deaths: rank 1 exited with signal SIGKILL"
        })
      }
    ])
  })

  test("ranks lost to heartbeats are dead but not re-reported (membership told us); unknown and repeated ranks count once", () => {
    const run = supervise(new Elastic({ maxFailure: new Count({ n: 3 }) }), world)
    expect(run.act(SupervisionEvent.RanksLost({ ranks: [1, 1, 9], reason: "silent" }))).toEqual([])
    expect(run.state.dead).toEqual([1])
    expect(run.act(crash("r1"))).toEqual([])
    expect(run.state.dead).toEqual([1])
    expect(run.act(crash("r0"))).toEqual([{ _tag: "ReportDead", ranks: [0], cause: "rank 0 exited with signal SIGKILL", kind: "signal" }])
    expect(run.state.dead).toEqual([0, 1])
  })

  test("a significant child takes its group: the others are stopped, every rank of the group reported", () => {
    const agent: ChildSpec = { id: "agent", label: "agent of host-a", ranks: [0, 1], group: "host-a", restart: "transient", significant: true, shutdown: anyShutdown }
    const run = supervise(new Elastic({}), [agent, rank(0, "transient", { group: "host-a" }), rank(1, "transient", { group: "host-a" }), rank(2)])
    expect(run.act(crash("agent"))).toEqual([
      { _tag: "Terminate", ids: ["r1", "r0"], mode: "graceful", reason: "agent of host-a exited with signal SIGKILL: its group host-a goes with it" },
      { _tag: "ReportDead", ranks: [0, 1], cause: "agent of host-a exited with signal SIGKILL", kind: "signal" }
    ])
  })

  test("a group's ranks are reported once each, in ascending order, however its children are listed", () => {
    const agent: ChildSpec = { id: "agent", label: "agent of host-a", ranks: [3, 1], group: "host-a", restart: "transient", significant: true, shutdown: anyShutdown }
    const run = supervise(new Elastic({}), [rank(3, "transient", { group: "host-a" }), agent, rank(1, "transient", { group: "host-a" }), rank(0)])
    expect(run.step(crash("agent"))).toEqual([
      { _tag: "Note", message: "agent of host-a exited with signal SIGKILL: its group host-a goes with it" },
      { _tag: "Terminate", ids: ["r1", "r3"], mode: "graceful", reason: "agent of host-a exited with signal SIGKILL: its group host-a goes with it" },
      { _tag: "ReportDead", ranks: [1, 3], cause: "agent of host-a exited with signal SIGKILL", kind: "signal" },
      { _tag: "Note", message: "agent of host-a exited with signal SIGKILL: reporting rank(s) 1, 3 dead; survivors carry the work" }
    ])
  })

  test("losing every rank stops what is left gracefully (a relay carries none)", () => {
    const relay: ChildSpec = { id: "relay", label: "relay of host-a", ranks: [], restart: "transient", significant: false, shutdown: anyShutdown }
    const run = supervise(new Elastic({}), [relay, rank(0)])
    expect(run.act(crash("r0"))).toEqual([
      { _tag: "ReportDead", ranks: [0], cause: "rank 0 exited with signal SIGKILL", kind: "signal" },
      { _tag: "Terminate", ids: ["relay"], mode: "graceful", reason: "every rank was lost (1/1): stopping the run" }
    ])
  })

  test("after the run drained, abnormal exits are tolerated and counted", () => {
    const run = supervise(new Elastic({ maxFailure: new Count({ n: 1 }) }), world.slice(0, 2))
    run.step(SupervisionEvent.RunDrained())
    expect(run.step(exits("r0", 1))).toEqual([{ _tag: "Note", message: "rank 0 exited with status 1 after the run drained; tolerated" }])
    expect(run.act(exits("r1", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Completed({ dead: 0, world: 2, tolerated: 1 }) }])
    expect(run.state.dead).toEqual([])
  })
})

describe("growth", () => {
  const world = [rank(0), rank(1), rank(2), rank(3)]

  test("children that join the formed cohort start, and the verdict counts both worlds", () => {
    const run = supervise(new Elastic({ maxFailure: new Percent({ p: 50 }), base: "current" }), world)
    // Before formation nothing may join.
    expect(run.step(SupervisionEvent.ChildrenJoined({ children: [rank(4)] }))).toEqual([])
    run.step(SupervisionEvent.CohortFormed())
    expect(run.step(SupervisionEvent.ChildrenJoined({ children: [rank(4), rank(5), rank(1)] }))).toEqual([
      { _tag: "Start", id: "r4" },
      { _tag: "Start", id: "r5" },
      { _tag: "Note", message: "rank 4, rank 5 joined the cohort: 6 rank(s) now" }
    ])
    // 50% of the current 6 is 3: two deaths are not enough.
    run.step(crash("r0"))
    expect(run.act(crash("r4"))).toEqual([{ _tag: "ReportDead", ranks: [4], cause: "rank 4 exited with signal SIGKILL", kind: "signal" }])
    expect(run.act(crash("r5"))).toEqual([
      { _tag: "ReportDead", ranks: [5], cause: "rank 5 exited with signal SIGKILL", kind: "signal" },
      { _tag: "LimitCrossed", message: "max_failure exceeded (3 of 6 (4 at formation, 2 joined since) dead, threshold 3)" },
      { _tag: "Terminate", ids: ["r3", "r2", "r1"], mode: "graceful", reason: "max_failure exceeded (3 of 6 (4 at formation, 2 joined since) dead, threshold 3): stopping the run" }
    ])
  })

  test("a rank number the run has had is never reused, nor is a child id, nor one rank of several", () => {
    const run = supervise(new Elastic({}), world)
    run.step(SupervisionEvent.CohortFormed())
    const clashes = [{ ...rank(9), id: "r0" }, { ...rank(2), id: "new" }, { ...rank(7), id: "pair", ranks: [7, 3] }]
    expect(run.step(SupervisionEvent.ChildrenJoined({ children: clashes }))).toEqual([])
    expect(run.state.joined).toBe(0)
  })

  test("the verdict of a grown world counts every rank it has had", () => {
    const run = supervise(new Elastic({}), world.slice(0, 3))
    run.step(SupervisionEvent.CohortFormed())
    run.step(SupervisionEvent.ChildrenJoined({ children: [rank(3)] }))
    // 2 dead of 4 (3 at formation, 1 joined): degraded, not every rank lost.
    run.step(crash("r0"))
    run.step(crash("r1"))
    run.step(exits("r2", 0))
    expect(run.act(exits("r3", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Completed({ dead: 2, world: 4, tolerated: 0 }) }])
  })
})

describe("stops from outside", () => {
  const world = [rank(0), rank(1)]

  test("an abort stops everyone gracefully; its signal makes the exit status", () => {
    const run = supervise(new KillAll(), world)
    expect(run.act(SupervisionEvent.AbortRequested({ reason: "received SIGINT", signal: "SIGINT" }))).toEqual([
      { _tag: "Terminate", ids: ["r1", "r0"], mode: "graceful", reason: "aborted: received SIGINT: stopping every child" }
    ])
    // A second one changes nothing.
    expect(run.step(SupervisionEvent.AbortRequested({ reason: "again" }))).toEqual([])
    run.step(exits("r0", 0))
    expect(run.act(crash("r1"))).toEqual([
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "aborted", message: "aborted: received SIGINT", signal: "SIGINT" }) }
    ])
  })

  test("an abort without a signal has none in its verdict (exit 130), not an undefined one", () => {
    const run = supervise(new KillAll(), world)
    run.step(SupervisionEvent.AbortRequested({ reason: "asked by code" }))
    run.step(exits("r0", 0))
    const verdict = run.act(exits("r1", 0))[0]
    expect(verdict).toStrictEqual({ _tag: "Verdict", verdict: Verdict.Failed({ kind: "aborted", message: "aborted: asked by code" }) })
  })

  test("max_failure crossed by the last rank still running is said even with no one left to stop, so the checkpoint is written", () => {
    const run = supervise(new Elastic({ maxFailure: new Count({ n: 1 }) }), world.slice(0, 2))
    run.step(exits("r1", 0))
    expect(run.act(crash("r0"))).toEqual([
      { _tag: "ReportDead", ranks: [0], cause: "rank 0 exited with signal SIGKILL", kind: "signal" },
      { _tag: "LimitCrossed", message: "max_failure exceeded (1/2 dead, threshold 1)" },
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "max-failure", message: "max_failure exceeded: 1/2 ranks dead, threshold 1; root cause: rank 0 exited with signal SIGKILL" }) }
    ])
  })

  test("an abort while the run already stops (max_failure tripped) keeps the first root cause and says nothing more", () => {
    const run = supervise(new Elastic({ maxFailure: new Count({ n: 1 }) }), world)
    run.step(crash("r0"))
    expect(run.step(SupervisionEvent.AbortRequested({ reason: "received SIGINT", signal: "SIGINT" }))).toEqual([])
    expect(run.act(exits("r1", 0))).toEqual([
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "max-failure", message: "max_failure exceeded: 1/2 ranks dead, threshold 1; root cause: rank 0 exited with signal SIGKILL" }) }
    ])
  })

  test("an abort after the run drained stops it without failing it", () => {
    const run = supervise(new Elastic({}), world)
    run.step(SupervisionEvent.RunDrained())
    run.step(SupervisionEvent.AbortRequested({ reason: "received SIGTERM", signal: "SIGTERM" }))
    run.step(exits("r0", 0))
    expect(run.act(exits("r1", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Completed({ dead: 0, world: 2, tolerated: 0 }) }])
  })

  test("an actor's death is an internal error, the root cause unless a failure came first", () => {
    const run = supervise(new Elastic({}), world)
    expect(run.act(SupervisionEvent.ActorFailed({ actor: "coordinator", reason: "boom" }))).toEqual([
      { _tag: "Terminate", ids: ["r1", "r0"], mode: "graceful", reason: "internal error: the coordinator failed: boom: stopping every child" }
    ])
    run.step(SupervisionEvent.ActorFailed({ actor: "relay", reason: "later" }))
    run.step(exits("r0", 0))
    expect(run.act(exits("r1", 0))).toEqual([
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "internal", message: "internal error: the coordinator failed: boom" }) }
    ])
  })

  test("a failed coordinator stops everyone, and its first reason is the one the verdict gives", () => {
    const run = supervise(new Elastic({}), world)
    expect(run.step(SupervisionEvent.CoordinatorFailed({ reason: "no quorum" }))).toEqual([
      { _tag: "Note", message: "coordinator failed: no quorum: stopping every child" },
      { _tag: "Terminate", ids: ["r1", "r0"], mode: "graceful", reason: "coordinator failed: no quorum: stopping every child" }
    ])
    // A second report changes nothing, and adds no line.
    expect(run.step(SupervisionEvent.CoordinatorFailed({ reason: "later" }))).toEqual([])
    run.step(exits("r0", 0))
    expect(run.act(exits("r1", 0))).toEqual([{ _tag: "Verdict", verdict: Verdict.Failed({ kind: "coordinator", message: "coordinator failed: no quorum" }) }])
  })

  test("a failed coordinator is the root cause, over an earlier failure", () => {
    const run = supervise(new KillAll(), world)
    run.step(crash("r0"))
    // The run already stops: no second stop, no line.
    expect(run.step(SupervisionEvent.CoordinatorFailed({ reason: "no quorum" }))).toEqual([])
    expect(run.act(exits("r1", 0))).toEqual([
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "coordinator", message: "coordinator failed: no quorum" }) }
    ])
  })

  test("stopping cancels pending restarts: they never start", () => {
    const policy = new Restart({ maxRestarts: 5, within: 60_000, backoff: noJitter(100, 1_000, 2), scope: "one" })
    const run = supervise(policy, world)
    run.step(crash("r0"), 0)
    expect(run.act(SupervisionEvent.AbortRequested({ reason: "stop" }), 10)).toEqual([
      { _tag: "Terminate", ids: ["r1"], mode: "graceful", reason: "aborted: stop: stopping every child" }
    ])
    expect(run.step(due("r0"), 100)).toEqual([])
    // The cancelled one has ended for good: the verdict comes once the other exits.
    expect(run.act(exits("r1", 0), 110)).toEqual([{ _tag: "Verdict", verdict: Verdict.Failed({ kind: "aborted", message: "aborted: stop" }) }])
  })
})

describe("initial state", () => {
  test("an abort before Boot: nothing ever starts, and the verdict is at once", () => {
    const strategy = new Elastic({})
    const [directives, state] = decide(strategy, initialState([rank(0), rank(1)]), SupervisionEvent.AbortRequested({ reason: "received SIGINT", signal: "SIGINT" }), 0)
    expect(directives).toEqual([
      { _tag: "Note", message: "aborted: received SIGINT: stopping every child" },
      { _tag: "Verdict", verdict: Verdict.Failed({ kind: "aborted", message: "aborted: received SIGINT", signal: "SIGINT" }) }
    ])
    expect(decide(strategy, state, SupervisionEvent.Boot(), 1)[0]).toEqual([])
  })

  test("duplicate child ids are a programming error", () => {
    expect(() => initialState([rank(0), { ...rank(1), id: "r0" }])).toThrow('duplicate child id "r0"')
  })

  test("the world is the distinct ranks; nothing starts before Boot, and Boot starts each child once, in order", () => {
    const state = initialState([rank(0), rank(1), { ...rank(1), id: "twin" }])
    expect(state.world).toBe(2)
    expect(state.restarts).toEqual([])
    expect(state.dead).toEqual([])
    expect(state.children.map((child) => child.status)).toEqual(["pending", "pending", "pending"])
    const [directives, booted] = decide(new Elastic({}), state, SupervisionEvent.Boot(), 0)
    expect(directives).toEqual([{ _tag: "Start", id: "r0" }, { _tag: "Start", id: "r1" }, { _tag: "Start", id: "twin" }])
    expect(decide(new Elastic({}), booted, SupervisionEvent.Boot(), 0)[0]).toEqual([])
  })
})
