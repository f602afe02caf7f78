/**
 * The local cluster end to end, with the real launcher, agent, relay and
 * rank processes: every verdict the failure policy can give, the status
 * endpoint following the run, and no process left behind.
 */
import { describe, expect, test } from "bun:test"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { childrenOf, commandLine, isRunning, waitFor } from "./support/processes.ts"
import { postStart, repoRoot, startScenario, waitForPhase } from "./support/launch-scenario.ts"

const noSurvivor = async (pids: ReadonlyArray<number>) => {
  await waitFor(() => pids.every((pid) => !isRunning(pid)), `no rank left running (${pids.join(", ")})`)
}

describe("bun run launch, local cluster", () => {
  test("every rank succeeds: completed, exit 0, every line prefixed, stdout and stderr kept apart", async () => {
    const run = startScenario({ devices: 4, args: ["work=100"] })
    const result = await run.result
    expect(result.outcome).toBe("completed")
    expect(result.exitCode).toBe(0)
    expect(result.summary).toBe("run completed")
    expect(result.ranks.map((rank) => rank.exits)).toEqual([["status 0"], ["status 0"], ["status 0"], ["status 0"]])
    for (const rank of [0, 1, 2, 3]) {
      expect(run.lines).toContainEqual({ line: `[localhost:cpu:r${rank}] rank ${rank}: finished its work`, stream: "stdout" })
      expect(run.lines).toContainEqual({ line: `[localhost:cpu:r${rank}] step 4/4`, stream: "stdout" })
    }
    await noSurvivor(run.pids())
  }, 20_000)

  test("a rank that fails before formation: kill_all, exit 1, the root cause named, no survivor", async () => {
    const run = startScenario({ devices: 4, args: ["crash-at-load=1", "work=20000"] })
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.exitCode).toBe(1)
    const said = "cohort rank: cannot load the entry module test/fixtures/rank-fixture.ts (" + join(repoRoot, "test/fixtures/rank-fixture.ts") +
      "): Error: rank 1: simulated crash while loading"
    expect(result.rootCause).toBe(`rank 1 of localhost exited with status 1 (${said})`)
    expect(result.summary).toBe(`run failed: rank 1 of localhost exited with status 1 (${said})`)
    expect(run.lines.some(({ line, stream }) => stream === "stderr" && line.startsWith("[localhost:cpu:r1] ") && line.includes("simulated crash while loading"))).toBe(true)
    // The others were stopped, not left to finish 20 s of work.
    expect(run.lines.some(({ line }) => line.includes("finished its work"))).toBe(false)
    await noSurvivor(run.pids())
  }, 20_000)

  test("elastic with max_failure 50% and no rules: one of 4 ranks exits 3 after formation; DEGRADED, exit 0, the other 3 finish", async () => {
    // rules: [] turns the default rules off: a status from 1 to 127 is then a death like any other.
    const run = startScenario({
      devices: 4,
      args: ["fail=2:3", "trigger=$DIR/go", "wait-trigger", "work=100"],
      policy: "  after_formation:\n    elastic: { max_failure: 50% }\n  rules: []\n  grace: 2s"
    })
    const port = await run.port
    const training = await waitForPhase(port, "training")
    expect(training.ranks.map((rank) => [rank.rank, rank.host, rank.device, rank.state])).toEqual([
      [0, "localhost", "cpu", "running"],
      [1, "localhost", "cpu", "running"],
      [2, "localhost", "cpu", "running"],
      [3, "localhost", "cpu", "running"]
    ])
    expect(training.ranks.every((rank) => typeof rank.pid === "number" && rank.pid > 0)).toBe(true)
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    expect(result.outcome).toBe("degraded")
    expect(result.exitCode).toBe(0)
    expect(result.summary).toBe("run completed DEGRADED (1 of 4 ranks lost: rank 2 of localhost exited with status 3 (rank 2: simulated failure, exiting 3))")
    // The recovery figures in the result: the one death, dropped, its moments in order; the run's ETTR below whole.
    expect(result.recovery?.deaths.map((death) => [death.rank, death.how, death.kind])).toEqual([[2, "dropped", "exit"]])
    const [death] = result.recovery!.deaths
    expect(death!.diedAt).toBeLessThanOrEqual(death!.knownAt)
    expect(result.recovery!.effectiveTraining).toBeGreaterThan(0)
    expect(result.recovery!.effectiveTraining).toBeLessThan(1)
    for (const rank of [0, 1, 3]) expect(run.lines.map(({ line }) => line)).toContain(`[localhost:cpu:r${rank}] rank ${rank}: finished its work`)
    expect(result.ranks[2]!.exits).toEqual(["status 3"])
    await noSurvivor(run.pids())
  }, 20_000)

  test("elastic with max_failure 1 and no rules: two deaths fail the run, exit 1, naming the threshold", async () => {
    const run = startScenario({
      devices: 4,
      args: ["fail=1:3,2:4", "trigger=$DIR/go", "hold"],
      policy: "  after_formation:\n    elastic: { max_failure: 1 }\n  rules: []\n  grace: 2s"
    })
    await waitForPhase(await run.port, "training")
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.exitCode).toBe(1)
    // The first death to arrive trips the limit: the verdict names it as the root cause (either may be first).
    expect(result.rootCause).toMatch(/^max_failure exceeded: [12]\/4 ranks dead, threshold 1; root cause: rank ([12]) of localhost exited with status [34] \(rank \1: simulated failure, exiting [34]\)(; other deaths: rank [12] of localhost .*)?$/)
    await noSurvivor(run.pids())
  }, 20_000)

  test("the defaults: a lone exit (one rank of 4 exits 3 once) is elastic: DEGRADED, exit 0, its last error line named", async () => {
    const run = startScenario({ devices: 4, args: ["fail=1:3", "trigger=$DIR/go", "wait-trigger", "work=100"], policy: "  grace: 2s" })
    await waitForPhase(await run.port, "training")
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    expect(result.outcome).toBe("degraded")
    expect(result.exitCode).toBe(0)
    expect(result.summary).toBe("run completed DEGRADED (1 of 4 ranks lost: rank 1 of localhost exited with status 3 (rank 1: simulated failure, exiting 3))")
    await noSurvivor(run.pids())
  }, 20_000)

  test("the defaults: the same error on two ranks is a bug: the run fails, naming both ranks, the error and the rule (repeated-error)", async () => {
    // Rank 3 throws 300 ms after rank 1: the first rank named is the first that met it.
    const run = startScenario({ devices: 4, args: ["throw=1,3", "late=3:300", "trigger=$DIR/go", "hold"], policy: "  grace: 2s" })
    await waitForPhase(await run.port, "training")
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.exitCode).toBe(1)
    expect(result.rootCause).toBe("the same error on 2 ranks (1, 3): TypeError: rank 1: simulated bug (rule repeated-error)")
    expect(result.ranks[1]!.exits).toEqual(["status 1 (TypeError: rank 1: simulated bug)"])
    await noSurvivor(run.pids())
  }, 20_000)

  test("the defaults: a SIGKILL, then a survivor's own failure 200 ms later: the survivor is peer_lost, the SIGKILL the root cause", async () => {
    const run = startScenario({ devices: 4, args: ["kill=2", "fail=1:1", "late=1:200", "trigger=$DIR/go", "hold"], policy: "  grace: 2s" })
    await waitForPhase(await run.port, "training")
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    // Two of four is the default max_failure (50%): the run stops, and its verdict leads with the SIGKILL, not the survivor.
    expect(result.outcome).toBe("failed")
    expect(result.rootCause).toBe(
      "max_failure exceeded: 2/4 ranks dead, threshold 2; root cause: rank 2 of localhost exited with signal SIGKILL; " +
        "other deaths: rank 1 of localhost exited with status 1 (rank 1: simulated failure, exiting 1) (peer_lost, after rank 2 of localhost's death)"
    )
    expect(result.recovery?.deaths.map((death) => [death.rank, death.kind])).toEqual([[2, "signal"], [1, "peer_lost"]])
    await noSurvivor(run.pids())
  }, 20_000)

  test("failure rules: exit 4 matches a fail rule under an elastic phase, exit 3 an ignore rule: the run fails, naming the rule", async () => {
    const run = startScenario({
      devices: 4,
      args: ["fail=1:3,2:4", "trigger=$DIR/go", "hold"],
      policy: [
        "  after_formation: elastic",
        "  rules:",
        "    - { name: bug, when: { exit_code: [4] }, then: fail }",
        "    - { name: quiet, when: { exit_code: [3] }, then: ignore }",
        "  grace: 2s"
      ].join("\n")
    })
    await waitForPhase(await run.port, "training")
    writeFileSync(join(run.dir, "go"), "")
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.exitCode).toBe(1)
    expect(result.rootCause).toBe("rank 2 of localhost exited with status 4 (rank 2: simulated failure, exiting 4) (rule bug)")
    // Rank 1's exit 3 was no death: nothing lost to it.
    expect(result.lost.flatMap((loss) => loss.ranks)).not.toContain(1)
    await noSurvivor(run.pids())
  }, 20_000)

  test("failure rules: a relay killed under its ranks is cause relay_lost, and a rule on it decides the run", async () => {
    const run = startScenario({
      devices: 2,
      args: ["hold"],
      policy: "  rules: [{ name: relay, when: { cause: [relay_lost] }, then: fail }]\n  grace: 2s"
    })
    await waitForPhase(await run.port, "training")
    // This process runs the launcher (the library entry): the relay is its child.
    const relayPid = () => childrenOf(process.pid).find((pid) => /src\/cli\/relay\.ts|\/relay\.js/.test(commandLine(pid)))
    await waitFor(() => relayPid() !== undefined, "the host's relay to run", 10_000)
    process.kill(relayPid()!, "SIGKILL")
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.rootCause).toMatch(/^rank [01] of localhost exited with (status \d+|signal SIG(TERM|KILL)) \(its host's relay was lost\) \(rule relay\)$/)
    await noSurvivor(run.pids())
  }, 20_000)

  test("failure rules: log searches the dying rank's last lines: a CUDA error fails the run, the same exit without it stays elastic", async () => {
    const policy = [
      "  after_formation: elastic",
      "  rules: [{ name: cuda, when: { log: \"CUDA error|illegal memory access\" }, then: fail }]",
      "  grace: 2s"
    ].join("\n")
    const cuda = startScenario({ devices: 3, args: ["fail=1:3", "say=RuntimeError: CUDA error: an illegal memory access was encountered", "trigger=$DIR/go", "hold"], policy })
    await waitForPhase(await cuda.port, "training")
    writeFileSync(join(cuda.dir, "go"), "")
    const failed = await cuda.result
    expect(failed.rootCause).toBe("rank 1 of localhost exited with status 3 (rank 1: simulated failure, exiting 3) (rule cuda)")
    await noSurvivor(cuda.pids())
    // The same exit with other last words: no rule matches, and elastic keeps the others training.
    const plain = startScenario({ devices: 3, args: ["fail=1:3", "say=done here", "trigger=$DIR/go", "wait-trigger", "work=100"], policy })
    await waitForPhase(await plain.port, "training")
    writeFileSync(join(plain.dir, "go"), "")
    const degraded = await plain.result
    expect(degraded.outcome).toBe("degraded")
    await noSurvivor(plain.pids())
  }, 30_000)

  test("restart: a failing rank comes back and the run completes", async () => {
    const restart = "restart: { max_restarts: 3, within: 1m, backoff: { initial: 10ms, max: 50ms, factor: 2, jitter: 0 } }"
    const run = startScenario({
      devices: 3,
      args: ["fail=1:5", "fail-times=2", "work=100"],
      policy: `  before_formation:\n    ${restart}\n  after_formation:\n    ${restart}\n  grace: 2s`
    })
    const result = await run.result
    expect(result.outcome).toBe("completed")
    expect(result.ranks[1]!.exits).toEqual(["status 5", "status 5", "status 0"])
    expect(run.lines.map(({ line }) => line)).toContain("[localhost:cpu:r1] rank 1 of 3 up (local 1/3, restart 2)")
    await noSurvivor(run.pids())
  }, 20_000)

  test("restart: past its intensity the failure escalates, exit 1, naming the rank and the count", async () => {
    const restart = "restart: { max_restarts: 2, within: 1m, backoff: { initial: 10ms, max: 50ms, factor: 2, jitter: 0 } }"
    const run = startScenario({
      devices: 3,
      args: ["fail=1:5", "hold"],
      policy: `  before_formation:\n    ${restart}\n  after_formation:\n    ${restart}\n  grace: 2s`
    })
    const result = await run.result
    expect(result.outcome).toBe("failed")
    expect(result.exitCode).toBe(1)
    expect(result.rootCause).toContain("restart intensity exceeded: rank 1 of localhost would be restart 3")
    expect(result.ranks[1]!.exits).toEqual(["status 5", "status 5", "status 5"])
    // The held ranks were stopped through their signal, gracefully.
    expect(run.lines.map(({ line }) => line)).toContain("[localhost:cpu:r0] rank 0: stopped by cohort")
    await noSurvivor(run.pids())
  }, 20_000)
})

describe("the status endpoint follows the run", () => {
  test("waiting (manual start) → forming → training → done, with the window's countdowns and every rank's pid", async () => {
    const run = startScenario({ devices: 2, args: ["work=100"], join: "{ start: manual, timeout: 30s, max_timeout: 60s }" })
    const port = await run.port
    let waiting = await waitForPhase(port, "waiting")
    while (waiting.joinedRanks < 2) waiting = (await waitForPhase(port, "waiting"))
    expect(waiting).toMatchObject({ phase: "waiting", joinedRanks: 2, joinedHosts: 1, ranks: [] })
    expect(waiting.windowRemainingMs).toBeGreaterThan(20_000)
    expect(waiting.capRemainingMs).toBeGreaterThan(waiting.windowRemainingMs!)
    const started = await postStart(port, "e2e")
    expect(started.status).toBe(200)
    const result = await run.result
    expect(result.outcome).toBe("completed")
    expect(run.phases).toEqual(["waiting", "forming", "training", "done"])
    expect(result.ranks.map((rank) => typeof rank.pid)).toEqual(["number", "number"])
  }, 20_000)

  test("a failed run ends in phase failed", async () => {
    const run = startScenario({ devices: 2, args: ["crash-at-load=0"] })
    expect((await run.result).outcome).toBe("failed")
    expect(run.phases).toEqual(["waiting", "forming", "failed"])
  }, 20_000)
})

describe("the library entry", () => {
  test("`launch` from \"cohort\" takes a config object, and a second concurrent run is refused", async () => {
    const { launch, RunInProgress, VERSION } = await import("cohort")
    expect(VERSION).toBe((await Bun.file(`${repoRoot}/package.json`).json()).version)
    const lines: Array<string> = []
    const config = {
      name: "library",
      workers: [{ host: "127.0.0.1", devices: 2, path: repoRoot }],
      job: { entry: "test/fixtures/rank-fixture.ts", args: ["work=300"] }
    }
    const first = launch(config, { output: (line) => lines.push(line) })
    const second = await launch(config).then(() => undefined, (error: unknown) => error)
    expect(second).toBeInstanceOf(RunInProgress)
    expect((second as Error).message).toContain("already in progress")
    const result = await first
    expect(result).toMatchObject({ run: "library", outcome: "completed", exitCode: 0, world: 2, lost: [] })
    expect(lines).toContain("[127.0.0.1:cpu:r1] rank 1: finished its work")
    // Once it is over, the next run may start.
    expect((await launch(config, { output: () => undefined })).outcome).toBe("completed")
  }, 20_000)
})
