/**
 * Secondary deaths, repeated errors and the root cause, as literal tables: `classify` over hand-written
 * histories, then `decide` under the default policy a file gets (kill_all, elastic 50%, the rule
 * repeated-error), with the verdicts written out as a person should read them.
 */
import { describe, expect, test } from "bun:test"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import { decide, type Directive, initialState, SupervisionEvent, type SupervisorState } from "../src/kernel/policy/decide.ts"
import { FailRun, FailureRule, RuleWhen } from "../src/kernel/policy/FailureRules.ts"
import { chainText, classify, type DeathRecord, firstRoot, hostLostDetail, rootOf, sayHostsOnce } from "../src/kernel/policy/SecondaryDeaths.ts"
import { Elastic, KillAll, Percent, Phased, type Strategy } from "../src/kernel/policy/Strategy.ts"
import { describeVerdict, Verdict } from "../src/kernel/policy/Verdict.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

const record = (ranks: ReadonlyArray<number>, at: number, extra: Partial<DeathRecord> = {}): DeathRecord => ({
  ranks,
  what: `rank ${ranks.join(", ")} died`,
  at,
  cause: "exit",
  secondary: false,
  ...extra
})

const keyError = { text: "KeyError: 'loss_scale'", key: "status 1|KeyError: 'loss_scale'" }

describe("classify: a new death against the deaths before it", () => {
  const killed = record([2], 1_000, { cause: "signal" })

  test("a rank's own end 200 ms after another's SIGKILL: secondary by the window, following it", () => {
    expect(classify([killed], { ranks: [1], at: 1_200, cause: "exit", signature: { text: "exit status 1", key: "status 1" } }))
      .toEqual({ _tag: "Secondary", followed: killed, by: "window" })
  })

  test("the window's edges: 10 s after is inside, 10.001 s is not; 10 s before (another host's clock) is inside", () => {
    expect(classify([killed], { ranks: [1], at: 11_000, cause: "exit" })._tag).toBe("Secondary")
    expect(classify([killed], { ranks: [1], at: 11_001, cause: "exit" })).toEqual({ _tag: "Primary", sameError: [] })
    expect(classify([record([2], 20_000)], { ranks: [1], at: 10_000, cause: "exit" })._tag).toBe("Secondary")
    expect(classify([record([2], 20_000)], { ranks: [1], at: 9_999, cause: "exit" })._tag).toBe("Primary")
  })

  test("a window of its own: 500 ms", () => {
    expect(classify([killed], { ranks: [1], at: 1_500, cause: "exit" }, 500)._tag).toBe("Secondary")
    expect(classify([killed], { ranks: [1], at: 1_501, cause: "exit" }, 500)._tag).toBe("Primary")
  })

  test("only a rank's own end is an echo by timing: a signal, an OOM kill, silence or a lost host is not", () => {
    for (const cause of ["signal", "oom", "heartbeat", "host_lost", "relay_lost", "rendezvous"] as const) {
      expect(classify([killed], { ranks: [1], at: 1_100, cause })).toEqual({ _tag: "Primary", sameError: [] })
    }
    for (const cause of ["exit", "exception", "nccl"] as const) expect(classify([killed], { ranks: [1], at: 1_100, cause })._tag).toBe("Secondary")
  })

  test("a peer-loss signature is secondary at any distance, following the latest death in the window, else the latest", () => {
    const silent = record([0], 50_000, { cause: "heartbeat" })
    const peerLoss = "gloo: connection closed by peer"
    // At 5 s only the SIGKILL (1 s) is in the window; at 55 s only the silence (50 s); at 200 s neither: the latest.
    expect(classify([killed, silent], { ranks: [1], at: 5_000, cause: "exit", peerLoss })).toEqual({ _tag: "Secondary", followed: killed, by: "signature" })
    expect(classify([killed, silent], { ranks: [1], at: 55_000, cause: "exit", peerLoss })).toEqual({ _tag: "Secondary", followed: silent, by: "signature" })
    expect(classify([killed, silent], { ranks: [1], at: 200_000, cause: "exit", peerLoss })).toEqual({ _tag: "Secondary", followed: silent, by: "signature" })
  })

  test("a peer-loss signature before cohort knew of any death: secondary, following none", () => {
    expect(classify([], { ranks: [1], at: 0, cause: "exit", peerLoss: "NCCL: remote error" })).toEqual({ _tag: "Secondary", followed: undefined, by: "signature" })
  })

  test("the same error as an earlier primary death is a repeat, inside the window too", () => {
    const first = record([1], 1_000, { signature: keyError })
    expect(classify([first], { ranks: [3], at: 1_300, cause: "exit", signature: keyError })).toEqual({ _tag: "Primary", sameError: [first] })
  })

  test("the same error as a secondary death is not a repeat: both survivors echo one loss", () => {
    const echo = record([1], 1_200, { signature: keyError, secondary: true, cause: "peer_lost", followed: killed })
    expect(classify([killed, echo], { ranks: [3], at: 1_400, cause: "exit", signature: keyError })).toEqual({ _tag: "Secondary", followed: echo, by: "window" })
  })

  test("a rank's earlier incarnation explains nothing of its own, and repeats nothing: only other ranks count", () => {
    const before = record([1], 1_000, { signature: keyError })
    expect(classify([before], { ranks: [1], at: 1_100, cause: "exit", signature: keyError })).toEqual({ _tag: "Primary", sameError: [] })
  })

  test("one rank met twice counts once among the ranks that share an error", () => {
    const one = record([1], 0, { signature: keyError })
    const again = record([1], 30_000, { signature: keyError })
    const three = record([3], 60_000, { signature: keyError })
    expect(classify([one, again, three], { ranks: [0], at: 90_000, cause: "exit", signature: keyError })).toEqual({ _tag: "Primary", sameError: [one, three] })
  })

  test("at the window's edge a peer-loss signature follows the death in it, even when another came later", () => {
    const silent = record([0], 50_000, { cause: "heartbeat" })
    const peerLoss = "gloo: connection reset by peer"
    // At 60 s the silence (50 s) is 10 s away, inside; the SIGKILL met after it (1 s) is not.
    expect(classify([silent, killed], { ranks: [1], at: 60_000, cause: "exit", peerLoss })).toEqual({ _tag: "Secondary", followed: silent, by: "signature" })
    expect(classify([silent, killed], { ranks: [1], at: 60_001, cause: "exit", peerLoss })).toEqual({ _tag: "Secondary", followed: killed, by: "signature" })
  })

  test("none in the window: the latest death of all three", () => {
    const history = [record([0], 0), record([2], 1_000), record([3], 2_000)]
    expect(classify(history, { ranks: [1], at: 100_000, cause: "exit", peerLoss: "NCCL: remote error" })).toEqual({ _tag: "Secondary", followed: history[2], by: "signature" })
  })

  test("a death sharing any one of its ranks with a record is the same child's: a group of ranks 1 and 2 after rank 2's death", () => {
    const group = record([2, 5], 1_000)
    expect(classify([group], { ranks: [1, 2], at: 1_100, cause: "exit" })).toEqual({ _tag: "Primary", sameError: [] })
    expect(classify([group], { ranks: [1, 3], at: 1_100, cause: "exit" })._tag).toBe("Secondary")
  })

  test("firstRoot: the first death that was not secondary; when every one was, the first", () => {
    const echo = record([1], 1_200, { secondary: true })
    const lone = record([3], 60_000)
    expect(firstRoot([echo, lone])).toBe(lone)
    expect(firstRoot([echo, record([2], 1_300, { secondary: true })])).toBe(echo)
    expect(firstRoot([])).toBeUndefined()
  })

  test("chainText: nothing without deaths; the root unless named; every other death, in order, separated", () => {
    const one = record([1], 0)
    const two = record([2], 1)
    const three = record([3], 2)
    expect(chainText([], undefined, [])).toBe("")
    expect(chainText([one, two, three], one, [])).toBe("; root cause: rank 1 died; other deaths: rank 2 died; rank 3 died")
    expect(chainText([one, two, three], one, [one, three])).toBe("; other deaths: rank 2 died")
    expect(chainText([one], one, [one])).toBe("")
  })

  test("rootOf follows a chain of echoes back to the death that was not one", () => {
    const echo = record([1], 1_200, { secondary: true, followed: killed })
    const echoOfEcho = record([3], 1_400, { secondary: true, followed: echo })
    expect(rootOf(echoOfEcho)).toBe(killed)
    expect(rootOf(killed)).toBe(killed)
    expect(rootOf(record([1], 0, { secondary: true }))).toEqual(record([1], 0, { secondary: true }))
  })
})

// ---------------------------------------------------------------------------------------------------------
// decide, under the policy a file without failure_policy gets.
// ---------------------------------------------------------------------------------------------------------

const repeatedError = new FailureRule({ name: "repeated-error", when: new RuleWhen({ sameErrorOn: 2, phase: "after_formation" }), then: new FailRun() })
const fileDefaults = (maxFailure = 50): Strategy =>
  new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: maxFailure }) }), rules: [repeatedError] })

const rank = (n: number): ChildSpec => ({ id: `rank-${n}`, label: `rank ${n} of localhost`, ranks: [n], group: "localhost", restart: "temporary", significant: false, shutdown: anyShutdown })

const traceback = (line: string) => ["step 20", "Traceback (most recent call last):", "  File \"train.py\", line 9, in <module>", line]
const gloo = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41234"

const exited = (n: number, code: number, at: number, lines: ReadonlyArray<string> = []) =>
  SupervisionEvent.ChildExited({ id: `rank-${n}`, exit: ChildExit.Exited({ code, lines, at }) })
const killed = (n: number, at: number) => SupervisionEvent.ChildExited({ id: `rank-${n}`, exit: ChildExit.Signaled({ signal: "SIGKILL", at }) })
const threw = (n: number, error: string, at: number) => SupervisionEvent.ChildExited({ id: `rank-${n}`, exit: ChildExit.Exited({ code: 1, cause: "exception", error, at }) })

const run = (world: number, strategy = fileDefaults()) => {
  let state: SupervisorState = initialState(Array.from({ length: world }, (_, n) => rank(n)))
  const directives: Array<Directive> = []
  const step = (event: SupervisionEvent, now: number) => {
    const [out, next] = decide(strategy, state, event, now)
    state = next
    directives.push(...out)
    return out
  }
  step(SupervisionEvent.Boot(), 0)
  step(SupervisionEvent.CohortFormed(), 0)
  /** Every rank still running exits cleanly (the run drained, or its stop): the verdict. */
  const finish = (now: number) => {
    step(SupervisionEvent.RunDrained(), now)
    for (const child of state.children) if (child.status === "running" || child.status === "stopping") step(exited(Number(child.spec.id.slice(5)), 0, now), now)
    return state.verdict
  }
  return {
    step,
    finish,
    get state() {
      return state
    },
    reported: () => directives.flatMap((directive) => (directive._tag === "ReportDead" ? [[directive.ranks, directive.kind, directive.cause] as const] : [])),
    rules: () => directives.flatMap((directive) => (directive._tag === "RuleMatched" ? [[directive.rule, directive.action, directive.ranks] as const] : []))
  }
}

describe("decide under the file's defaults: a bug is what repeats, an echo is never blamed", () => {
  test("a lone exit (one rank of 4 exits 3) stays elastic: DEGRADED, naming its last error line", () => {
    const cohort = run(4)
    cohort.step(exited(2, 3, 1_000, ["rank 2: simulated failure, exiting 3"]), 1_000)
    expect(cohort.reported()).toEqual([[[2], "exit", "rank 2 of localhost exited with status 3 (rank 2: simulated failure, exiting 3)"]])
    const verdict = cohort.finish(5_000)!
    expect(verdict).toEqual(Verdict.Completed({ dead: 1, world: 4, tolerated: 0 }))
  })

  test("the error line is read from what the rank wrote on stderr: not stdout's progress", () => {
    const cohort = run(8)
    const exit = ChildExit.Exited({ code: 3, lines: ["communicator 0: async error 0", "fatal: shard 2 is unreadable", "step 9"], stderr: ["fatal: shard 2 is unreadable"], at: 1_000 })
    cohort.step(SupervisionEvent.ChildExited({ id: "rank-2", exit }), 1_000)
    // Nothing on stderr: no error line, whatever stdout said; no stderr kept at all (the agent's own policy): its lines.
    const quiet = ChildExit.Exited({ code: 3, lines: ["fatal: no shard"], stderr: [], at: 60_000 })
    cohort.step(SupervisionEvent.ChildExited({ id: "rank-0", exit: quiet }), 60_000)
    const unkept = ChildExit.Exited({ code: 4, lines: ["fatal: no shard"], at: 120_000 })
    cohort.step(SupervisionEvent.ChildExited({ id: "rank-1", exit: unkept }), 120_000)
    expect(cohort.reported().map(([, , what]) => what)).toEqual([
      "rank 2 of localhost exited with status 3 (fatal: shard 2 is unreadable)",
      "rank 0 of localhost exited with status 3",
      "rank 1 of localhost exited with status 4 (fatal: no shard)"
    ])
  })

  test("a lone exception of an entry rank stays elastic too", () => {
    const cohort = run(4)
    cohort.step(threw(1, "TypeError: x is not a function", 1_000), 1_000)
    expect(cohort.reported()).toEqual([[[1], "exception", "rank 1 of localhost exited with status 1 (TypeError: x is not a function)"]])
    expect(cohort.finish(5_000)).toEqual(Verdict.Completed({ dead: 1, world: 4, tolerated: 0 }))
  })

  test("the same KeyError on ranks 1 and 3: the run fails at the second, naming both and the error (rule repeated-error)", () => {
    const cohort = run(4)
    cohort.step(exited(1, 1, 1_000, traceback("KeyError: 'column loss_scale'")), 1_000)
    const second = cohort.step(exited(3, 1, 1_500, traceback("KeyError: 'column loss_scale'")), 1_500)
    expect(second.filter((directive) => directive._tag === "Terminate").map((directive) => (directive as { ids: ReadonlyArray<string> }).ids)).toEqual([["rank-2", "rank-0"]])
    expect(cohort.rules()).toEqual([["repeated-error", "fail", [3]]])
    const verdict = cohort.finish(3_000)!
    expect(describeVerdict(verdict)).toBe("run failed: the same error on 2 ranks (1, 3): KeyError: 'column loss_scale' (rule repeated-error)")
  })

  test("the same error with other numbers in it (each rank's own batch) is the same error", () => {
    const cohort = run(4)
    cohort.step(exited(0, 1, 1_000, traceback("ValueError: NaN in batch 17")), 1_000)
    cohort.step(exited(2, 1, 40_000, traceback("ValueError: NaN in batch 93")), 40_000)
    expect(describeVerdict(cohort.finish(41_000)!)).toBe("run failed: the same error on 2 ranks (0, 2): ValueError: NaN in batch 17 (rule repeated-error)")
  })

  test("two different errors on two ranks, far apart: both elastic, DEGRADED at 2 of 6", () => {
    const cohort = run(6)
    cohort.step(exited(0, 1, 1_000, traceback("KeyError: 'a'")), 1_000)
    cohort.step(exited(4, 1, 60_000, traceback("OSError: [Errno 5] Input/output error")), 60_000)
    expect(cohort.finish(61_000)).toEqual(Verdict.Completed({ dead: 2, world: 6, tolerated: 0 }))
  })

  test("two ranks exiting 3 and saying nothing: the status alone is their error", () => {
    const cohort = run(6)
    cohort.step(exited(1, 3, 1_000), 1_000)
    cohort.step(exited(2, 3, 30_000), 30_000)
    expect(describeVerdict(cohort.finish(31_000)!)).toBe("run failed: the same error on 2 ranks (1, 2): exit status 3 (rule repeated-error)")
  })

  test("SIGKILL, then a survivor's gloo error 200 ms later: the survivor is peer_lost; max_failure names the SIGKILL as root cause", () => {
    const cohort = run(4)
    cohort.step(killed(2, 1_000), 1_000)
    cohort.step(exited(1, 1, 1_200, traceback(gloo)), 1_200)
    expect(cohort.reported()).toEqual([
      [[2], "signal", "rank 2 of localhost exited with signal SIGKILL"],
      [[1], "peer_lost", `rank 1 of localhost exited with status 1 (${gloo}) (peer_lost, after rank 2 of localhost's death)`]
    ])
    expect(describeVerdict(cohort.finish(2_000)!)).toBe(
      "run failed: max_failure exceeded: 2/4 ranks dead, threshold 2; root cause: rank 2 of localhost exited with signal SIGKILL; " +
        `other deaths: rank 1 of localhost exited with status 1 (${gloo}) (peer_lost, after rank 2 of localhost's death)`
    )
  })

  test("the same, under max_failure 75%: DEGRADED, the loss listing the SIGKILL first and the echo as peer_lost", () => {
    const cohort = run(4, fileDefaults(75))
    cohort.step(killed(2, 1_000), 1_000)
    cohort.step(exited(1, 1, 1_200, traceback(gloo)), 1_200)
    expect(cohort.finish(2_000)).toEqual(Verdict.Completed({ dead: 2, world: 4, tolerated: 0 }))
  })

  test("two survivors echoing one SIGKILL with the same gloo error are not a repeated error", () => {
    const cohort = run(8)
    cohort.step(killed(5, 1_000), 1_000)
    cohort.step(exited(1, 1, 3_600, traceback(gloo)), 3_600)
    cohort.step(exited(3, 1, 3_900, traceback(gloo.replace("41234", "41240"))), 3_900)
    expect(cohort.rules()).toEqual([])
    expect(cohort.reported().map(([ranks, kind]) => [ranks, kind])).toEqual([[[5], "signal"], [[1], "peer_lost"], [[3], "peer_lost"]])
    expect(cohort.finish(5_000)).toEqual(Verdict.Completed({ dead: 3, world: 8, tolerated: 0 }))
  })

  test("a survivor that fails with its own words 200 ms after the SIGKILL is secondary by the window; 20 s later it is not", () => {
    const soon = run(8)
    soon.step(killed(2, 1_000), 1_000)
    soon.step(exited(1, 1, 1_200, ["fatal: lost the data loader"]), 1_200)
    expect(soon.reported()[1]).toEqual([[1], "peer_lost", "rank 1 of localhost exited with status 1 (fatal: lost the data loader) (peer_lost, after rank 2 of localhost's death)"])
    const late = run(8)
    late.step(killed(2, 1_000), 1_000)
    late.step(exited(1, 1, 21_000, ["fatal: lost the data loader"]), 21_000)
    expect(late.reported()[1]).toEqual([[1], "exit", "rank 1 of localhost exited with status 1 (fatal: lost the data loader)"])
  })

  test("a rule of the user's that fails on exit status 1 still fails on the echo, and the verdict leads with the SIGKILL", () => {
    const userRule = new FailureRule({ name: "any-exit", when: new RuleWhen({ causes: ["exit", "peer_lost"] }), then: new FailRun() })
    const strategy = new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [userRule] })
    const cohort = run(4, strategy)
    cohort.step(killed(2, 1_000), 1_000)
    cohort.step(exited(1, 1, 1_200, traceback(gloo)), 1_200)
    expect(describeVerdict(cohort.finish(2_000)!)).toBe(
      `run failed: rank 1 of localhost exited with status 1 (${gloo}) (peer_lost, after rank 2 of localhost's death) (rule any-exit); ` +
        "root cause: rank 2 of localhost exited with signal SIGKILL"
    )
  })

  test("a rule may match cause peer_lost: one that fails the run on an echo leaves the SIGKILL before it alone", () => {
    const failOnEchoes = new FailureRule({ name: "echoes", when: new RuleWhen({ causes: ["peer_lost"] }), then: new FailRun() })
    const cohort = run(4, new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [failOnEchoes] }))
    cohort.step(killed(2, 1_000), 1_000)
    expect(cohort.rules()).toEqual([])
    cohort.step(exited(3, 1, 1_100, traceback(gloo)), 1_100)
    expect(cohort.rules()).toEqual([["echoes", "fail", [3]]])
  })

  test("rules: [] works as before: every death elastic, whatever repeats", () => {
    const cohort = run(6, new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [] }))
    cohort.step(exited(1, 1, 1_000, traceback("KeyError: 'x'")), 1_000)
    cohort.step(exited(2, 1, 30_000, traceback("KeyError: 'x'")), 30_000)
    expect(cohort.finish(31_000)).toEqual(Verdict.Completed({ dead: 2, world: 6, tolerated: 0 }))
  })

  test("same_error_on: 3 lets a second rank's error pass and fails at the third, naming all three", () => {
    const thrice = new FailureRule({ name: "thrice", when: new RuleWhen({ sameErrorOn: 3 }), then: new FailRun() })
    const cohort = run(8, new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [thrice] }))
    cohort.step(exited(1, 1, 1_000, traceback("KeyError: 'x'")), 1_000)
    cohort.step(exited(2, 1, 30_000, traceback("KeyError: 'x'")), 30_000)
    expect(cohort.rules()).toEqual([])
    cohort.step(exited(6, 1, 60_000, traceback("KeyError: 'x'")), 60_000)
    expect(describeVerdict(cohort.finish(61_000)!)).toBe("run failed: the same error on 3 ranks (1, 2, 6): KeyError: 'x' (rule thrice)")
  })

  test("a repeated error after an unrelated SIGKILL: the verdict names the error, the SIGKILL among the other deaths", () => {
    const cohort = run(8)
    cohort.step(killed(0, 1_000), 1_000)
    cohort.step(exited(1, 1, 30_000, traceback("KeyError: 'x'")), 30_000)
    cohort.step(exited(3, 1, 30_400, traceback("KeyError: 'x'")), 30_400)
    expect(describeVerdict(cohort.finish(31_000)!)).toBe(
      "run failed: the same error on 2 ranks (1, 3): KeyError: 'x' (rule repeated-error); other deaths: rank 0 of localhost exited with signal SIGKILL"
    )
  })

  test("every rank lost: the first death that was not secondary leads, the echoes follow in order", () => {
    const cohort = run(2, new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [repeatedError] }))
    cohort.step(killed(1, 1_000), 1_000)
    cohort.step(exited(0, 1, 1_300, traceback(gloo)), 1_300)
    expect(describeVerdict(cohort.state.verdict!)).toBe(
      "run failed: every rank was lost (2/2); root cause: rank 1 of localhost exited with signal SIGKILL; " +
        `other deaths: rank 0 of localhost exited with status 1 (${gloo}) (peer_lost, after rank 1 of localhost's death)`
    )
  })

  test("a gloo error before cohort knew of any death: peer_lost, following none (the death it echoes is on its way)", () => {
    const cohort = run(4)
    cohort.step(exited(1, 1, 1_000, traceback(gloo)), 1_000)
    expect(cohort.reported()).toEqual([[[1], "peer_lost", `rank 1 of localhost exited with status 1 (${gloo}) (peer_lost: it lost a peer before cohort knew of any death)`]])
  })

  test("a fatal loss (ranks of a coordinated job that never attached) fails the run, whatever the rules and the limit", () => {
    const cohort = run(4, new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}), rules: [] }))
    cohort.step(SupervisionEvent.RanksLost({ ranks: [1], reason: "exited with status 0 without attaching: call cohort.init()", cause: "exit", fatal: true }), 2_000)
    expect(describeVerdict(cohort.finish(3_000)!)).toBe("run failed: rank(s) 1 lost: exited with status 0 without attaching: call cohort.init()")
  })

  test("a lost host, its ranks given up together then ended one by one, is one death of the chain, with its cause", () => {
    const why = "its ssh session ended with signal SIGKILL"
    const cohort = run(6)
    cohort.step(SupervisionEvent.RanksLost({ ranks: [2, 3], reason: `host localhost lost (${why})`, cause: "host_lost" }), 1_000)
    for (const n of [2, 3]) {
      cohort.step(SupervisionEvent.ChildExited({ id: `rank-${n}`, exit: ChildExit.Crashed({ detail: `host localhost lost (${why})`, cause: "host_lost", at: 1_000 }) }), 1_200)
    }
    cohort.step(killed(0, 5_000), 5_000)
    expect(describeVerdict(cohort.finish(6_000)!)).toBe(
      `run failed: max_failure exceeded: 3/6 ranks dead, threshold 3; root cause: host localhost lost with ranks 2, 3 (${why}); ` +
        "other deaths: rank 0 of localhost exited with signal SIGKILL"
    )
  })

  test("sayHostsOnce: a host's deaths of one cause become one at the first one's place; another cause, host or a rule's death stays", () => {
    const why = "its agent ended with status 1: bind (port 29500) refused"
    expect(sayHostsOnce([
      { ranks: [0], what: "rank 0 of a exited with status 3" },
      { ranks: [2], what: `rank 2 of b exited with crash: host b lost (${why})` },
      { ranks: [4], what: "rank 4 of c exited with crash: host c lost (the peer closed the connection)" },
      { ranks: [3, 2], what: `rank(s) 3, 2 lost: host b lost (${why})` },
      { ranks: [5], what: "rank 5 of c exited with crash: host c lost (its ssh connection was lost)" },
      { ranks: [6], what: `rank 6 of b exited with crash: host b lost (${why}) (rule spot)` }
    ])).toEqual([
      { ranks: [0], what: "rank 0 of a exited with status 3" },
      { ranks: [2, 3], what: `host b lost with ranks 2, 3 (${why})` },
      { ranks: [4], what: "host c lost with rank 4 (the peer closed the connection)" },
      { ranks: [5], what: "host c lost with rank 5 (its ssh connection was lost)" },
      { ranks: [6], what: `rank 6 of b exited with crash: host b lost (${why}) (rule spot)` }
    ])
    // Only a death that is the loss itself: one that merely ends with such words is another.
    expect(sayHostsOnce([{ ranks: [7], what: "escalated: rank 7 of b exited with crash: host b lost (x)" }]))
      .toEqual([{ ranks: [7], what: "escalated: rank 7 of b exited with crash: host b lost (x)" }])
    // The words RemoteRanks gives a lost host's ranks are the words matched here.
    expect(hostLostDetail("b", "its link closed")).toBe("host b lost (its link closed)")
    // Why the host went, as known by the end, in place of its ranks' own words.
    expect(sayHostsOnce([{ ranks: [4], what: "rank 4 of c lost: host c lost (the peer closed the connection)" }], (host) => (host === "c" ? "its agent ended with signal SIGKILL" : undefined)))
      .toEqual([{ ranks: [4], what: "host c lost with rank 4 (its agent ended with signal SIGKILL)" }])
  })

  test("silence (a heartbeat loss) is a death others may echo", () => {
    const cohort = run(4)
    cohort.step(SupervisionEvent.RanksLost({ ranks: [3], reason: "silent for 30000 ms", cause: "heartbeat" }), 31_000)
    cohort.step(exited(0, 1, 31_500, traceback(gloo)), 31_500)
    expect(cohort.reported().map(([ranks, kind]) => [ranks, kind])).toEqual([[[0], "peer_lost"]])
    expect(describeVerdict(cohort.finish(32_000)!)).toBe(
      "run failed: max_failure exceeded: 2/4 ranks dead, threshold 2; root cause: rank(s) 3 lost: silent for 30000 ms; " +
        `other deaths: rank 0 of localhost exited with status 1 (${gloo}) (peer_lost, after rank 3 of localhost's death)`
    )
  })
})
