/**
 * A death during the user's own collective (issue 35, part 1), end to end on four real torch ranks: rank 2 is slow
 * in the end-of-epoch evaluation while the others wait for it in `dist.all_reduce`, and is then SIGKILLed
 * (test/fixtures/torch_evaluation_fixture.py). The survivors' call must give up promptly, as cohort announces the
 * group without rank 2 (gloo alone takes 2.6–4.0 s to say its peer closed), and the run must carry on:
 *
 * - caught (`except cohort.MemberLost`): DEGRADED, the survivors' weights equal, the verdict naming rank 2;
 * - uncaught: each survivor exits 75 and cohort restarts it (rule member-lost): the run completes, rank 2 the only loss;
 * - `ctx.all_reduce`: no exception; the metric is summed over the three members left.
 *
 * Needs Debian's python3-torch (test/support/debian-torch.ts installs it as root, or the tests skip, saying why).
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, lastLine, python, runCommand } from "./support/debian-torch.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch user-collectives e2e skipped: python3-torch not available: ${torchProblem}`)

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const runWith = async (mode: "caught" | "uncaught" | "helper", freeze = false) => {
  const dir = mkdtempSync(join(tmpdir(), `cohort-torch-eval-${mode}-`))
  dirs.push(dir)
  const file = join(dir, "torch.yml")
  writeFileSync(
    file,
    `name: torch-eval-${mode}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 4
    path: ${JSON.stringify(root)}
    env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo, TEST_EVAL: ${mode}${freeze ? ", TEST_FREEZE: \"1\"" : ""} }
job:
  command: [${python}, ${JSON.stringify(join(import.meta.dir, "fixtures", "torch_evaluation_fixture.py"))}]
  dataset_size: 6000
  epochs: 2
failure_policy:
  heartbeat_timeout: ${freeze ? "4s" : "60s"}
  grace: 5s
`
  )
  const events = join(dir, "events.jsonl")
  const ran = await runCommand([process.execPath, launch, file, "--events", events], 150_000)
  const transcript = `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}`
  const journal = readFileSync(events, "utf8").trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
  return { ran, transcript, journal }
}

/** The weights each rank printed at the end, by rank. */
const weightsOf = (stdout: string): Map<number, string> =>
  new Map([...stdout.matchAll(/\[localhost:cpu:r(\d+)\] rank \d+ \(pid \d+, \d member\(s\), generation \d+\): held-out accuracy [\d.]+, weights ([0-9a-f]+)/g)]
    .map((match) => [Number(match[1]), match[2]!] as const))

describe.skipIf(torchProblem !== undefined)("a death inside the user's own collective", () => {
  test("caught: the survivors' dist.all_reduce raises cohort.MemberLost within a second; DEGRADED, equal weights, rank 2 named", async () => {
    const { journal, ran, transcript } = await runWith("caught")
    expect(ran.code, transcript).toBe(0)
    expect(lastLine(ran.stderr), transcript).toBe("cohort: run completed DEGRADED (1 of 4 ranks lost: rank 2 of localhost exited with signal SIGKILL)")
    const lost = [...ran.stdout.matchAll(/\[localhost:cpu:r(\d)\] eval epoch 1: member lost after ([\d.]+) s: rank\(s\) 2 left the group during dist\.all_reduce/g)]
    expect(lost.map((match) => Number(match[1])).sort(), transcript).toEqual([0, 1, 3])
    // Rank 2 slept 0.5 s before its SIGKILL: the call gave up once cohort knew, well before gloo's 2.6–4.0 s.
    for (const match of lost) expect(Number(match[2]), transcript).toBeLessThan(2)
    // Epoch 2's evaluation, over the three survivors, is whole again.
    expect([...ran.stdout.matchAll(/eval epoch 2: hits \d+ of (\d+) over 3 member\(s\)/g)].length, transcript).toBe(3)
    const weights = weightsOf(ran.stdout)
    expect([...weights.keys()].sort(), transcript).toEqual([0, 1, 3])
    expect(new Set(weights.values()).size, transcript).toBe(1)
    expect(journal.filter((event) => event.event === "rank_lost").map((event) => [event.ranks, event.kind]), transcript).toEqual([[[2], "signal"]])
  }, 180_000)

  test("a frozen rank (SIGSTOP): the call waits no longer than cohort takes to find it, the 4 s heartbeat timeout", async () => {
    const { ran, transcript } = await runWith("caught", true)
    expect(ran.code, transcript).toBe(0)
    expect(lastLine(ran.stderr), transcript).toMatch(/^cohort: run completed DEGRADED \(1 of 4 ranks lost/)
    const lost = [...ran.stdout.matchAll(/\[localhost:cpu:r(\d)\] eval epoch 1: member lost after ([\d.]+) s: rank\(s\) 2 left the group/g)]
    expect(lost.map((match) => Number(match[1])).sort(), transcript).toEqual([0, 1, 3])
    // 0.5 s of rank 2's slowness, then silence until the 4 s timeout: well under gloo's 600 s, and not much over cohort's.
    for (const match of lost) expect(Number(match[2]), transcript).toBeLessThan(8)
    for (const match of lost) expect(Number(match[2]), transcript).toBeGreaterThan(3.5)
  }, 180_000)

  test("uncaught: each survivor exits 75 and is restarted (rule member-lost), not counted dead; the run completes with rank 2 its only loss", async () => {
    const { journal, ran, transcript } = await runWith("uncaught")
    expect(ran.code, transcript).toBe(0)
    expect(lastLine(ran.stderr), transcript).toBe("cohort: run completed DEGRADED (1 of 4 ranks lost: rank 2 of localhost exited with signal SIGKILL)")
    const matched = journal.filter((event) => event.event === "rule_matched").map((event) => [event.rule, event.action])
    expect(matched, transcript).toEqual([["member-lost", "restart"], ["member-lost", "restart"], ["member-lost", "restart"]])
    expect(ran.stderr, transcript).toContain("cohort.MemberLost: rank(s) 2 left the group during dist.all_reduce")
    // The restarted ranks trained epoch 2 and ended with equal weights.
    const weights = weightsOf(ran.stdout)
    expect(weights.size, transcript).toBe(3)
    expect(new Set(weights.values()).size, transcript).toBe(1)
  }, 180_000)

  test("ctx.all_reduce: no exception; the call is taken again over the three members left", async () => {
    const { ran, transcript } = await runWith("helper")
    expect(ran.code, transcript).toBe(0)
    expect(lastLine(ran.stderr), transcript).toBe("cohort: run completed DEGRADED (1 of 4 ranks lost: rank 2 of localhost exited with signal SIGKILL)")
    const first = [...ran.stdout.matchAll(/\[localhost:cpu:r(\d)\] eval epoch 1: hits (\d+) of (\d+) over (\d) member\(s\)/g)]
    expect(first.map((match) => Number(match[1])).sort(), transcript).toEqual([0, 1, 3])
    // Summed over ranks 0, 1 and 3: each evaluates every fifth held-out point from its rank, 1,000 each of 5,000.
    for (const match of first) expect([Number(match[3]), Number(match[4])], transcript).toEqual([3_000, 3])
    const weights = weightsOf(ran.stdout)
    expect(new Set(weights.values()).size, transcript).toBe(1)
  }, 180_000)
})
