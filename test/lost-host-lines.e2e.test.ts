/**
 * A lost host, as a person reads it: two network-namespace hosts (test/support/netns.ts) train 2 × 2 ranks,
 * elastic; in epoch 2 one host is lost, its ssh session here SIGKILLed or its agent there.
 * - The host is said gone once, in one line, with the cause (its ssh session ended with signal SIGKILL, its
 *   agent ended with signal SIGKILL), no rank's line as its last words, and no shell's `Killed` notice.
 * - Its ranks leave together: one line hands their work on, to the other host's ranks only.
 * - The end table gives each of its ranks `host lost`; the verdict names the host and the cause once.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { spawnLaunch } from "./support/launch-scenario.ts"
import { useHosts } from "./support/netns.ts"
import { allPids, commandLine, parentOf, waitFor } from "./support/processes.ts"

/** Every run of this file is named `lh<pid>-<case>`, so what it leaves is told apart from a concurrent run's. */
const RUN_PREFIX = `lh${process.pid}-`
const suite = useHosts(2, RUN_PREFIX)
const { dirs, unavailable } = suite
if (unavailable !== undefined) console.log(`lost-host tests skipped: ${unavailable}`)
const launches: Array<ReturnType<typeof spawnLaunch>> = []
afterEach(() => {
  for (const launch of launches.splice(0)) launch.proc.kill("SIGKILL")
  suite.hosts()?.reap()
})
const h = () => suite.hosts()!

const clusterFile = (name: string, limit: string) => {
  const dir = mkdtempSync(join(tmpdir(), `cohort-lh-${name}-`))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${RUN_PREFIX}${name}
controller: { host: ${h().controller}, port: 0 }
workers:
  - ${h().worker(0)}
  - ${h().worker(1)}
job:
  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "delay=8"]
  dataset_size: 50000
  epochs: 3
failure_policy:
  after_formation:
    elastic: { max_failure: ${limit} }
  grace: 2s
  heartbeat_timeout: 5s
`)
  return file
}

const descendsFrom = (pid: number, ancestor: number): boolean => {
  for (let at: number | undefined = pid; at !== undefined && at > 1; at = parentOf(at)) if (at === ancestor) return true
  return false
}

type Launch = ReturnType<typeof spawnLaunch>

/** Run until epoch 1 is done, lose the host of rank 3 (`kill` names the process to SIGKILL), and read the run to its end. */
const loseHost = async (name: string, limit: string, kill: (launch: Launch, victim: string) => number | undefined) => {
  const launch = spawnLaunch(clusterFile(name, limit))
  launches.push(launch)
  await waitFor(() => launch.stderr.lines.some((line) => /epoch 1\/3 done/.test(line)), "epoch 1 to end", 40_000)
  const formed = launch.stderr.lines.find((line) => line.startsWith("cohort: world formed: "))!
  const victim = /(nsh\d): [\d, ]*\b3\b/.exec(formed)![1]!
  const ranks = new RegExp(`${victim}: (\\d+), (\\d+)`).exec(formed)!.slice(1).map(Number)
  const pid = kill(launch, victim)
  expect(pid).toBeDefined()
  process.kill(pid!, "SIGKILL")
  const code = await launch.proc.exited
  await launch.stderr.done
  await launch.stdout.done
  const stderr = launch.stderr.lines
  const transcript = stderr.join("\n")
  // Gone once, said in one line; no rank's line (`[nsh2:cpu:r2] …`) in any of cohort's own.
  const gone = stderr.filter((line) => line.includes(`${victim} is gone`))
  expect(gone, transcript).toHaveLength(1)
  expect(stderr.filter((line) => !line.startsWith("[") && line.includes(`[${victim}:`)), transcript).toEqual([])
  expect(stderr.filter((line) => / Killed /.test(line)), transcript).toEqual([])
  // Its ranks leave together, their work handed to the other host's only.
  const survivors = [0, 1, 2, 3].filter((rank) => !ranks.includes(rank))
  const handed = stderr.filter((line) => /unprocessed sample\(s\)/.test(line))
  expect(handed, transcript).toEqual([expect.stringMatching(new RegExp(
    `^cohort: warning: ranks ${ranks.join(", ")} lost \\(host ${victim} lost \\(.*\\)\\): 25000 unprocessed sample\\(s\\) of epoch 2 handed to rank\\(s\\) ${survivors.join(", ")}$`
  ))])
  // The end table: each of its ranks `host lost`.
  for (const rank of ranks) expect(stderr, transcript).toContainEqual(expect.stringMatching(new RegExp(`^${victim} +${rank} +cpu +host lost +0 +`)))
  return { code, victim, ranks, gone: gone[0]!, verdict: stderr.at(-1)!, transcript }
}

const sshOf = (launch: Launch, victim: string) => {
  const address = h().hosts.find((host) => host.name === victim)!.address
  return allPids().find((pid) => descendsFrom(pid, launch.proc.pid) && /^ssh /.test(commandLine(pid)) && commandLine(pid).includes(address))
}
const agentOf = (_: Launch, victim: string) => allPids().find((pid) => /bun\S* src\/cli\/agent\.ts/.test(commandLine(pid)) && h().hostOf(pid) === victim)

describe.skipIf(unavailable !== undefined)("a lost host's lines", () => {
  test("its ssh session SIGKILLed: gone once with the cause; DEGRADED names the host once", async () => {
    const { code, gone, ranks, verdict, victim } = await loseHost("ssh", "75%", sshOf)
    expect(gone).toBe(`cohort: warning: ${victim} is gone (its ssh session ended with signal SIGKILL): its ranks are lost`)
    expect(verdict).toBe(`cohort: run completed DEGRADED (2 of 4 ranks lost: host ${victim} lost with ranks ${ranks.join(", ")} (its ssh session ended with signal SIGKILL))`)
    expect(code).toBe(0)
  }, 90_000)

  test("its ssh session SIGKILLed past max_failure: the failed verdict names the host and the cause once", async () => {
    const { code, ranks, verdict, victim } = await loseHost("failed", "50%", sshOf)
    // Its session's end is heard first (the agent there stops its ranks before its link closes), so the cause is
    // ssh's; were its link's end heard first, the link's. Either way one death, no other after it.
    expect(verdict).toMatch(new RegExp(
      `^cohort: run failed: max_failure exceeded: 2/4 ranks dead, threshold 2; root cause: host ${victim} lost with ranks ${ranks.join(", ")} ` +
        "\\((its ssh session ended with signal SIGKILL|the peer closed the connection)\\)$"
    ))
    expect(code).toBe(1)
  }, 90_000)

  test("its agent SIGKILLed: gone once, with the signal and without the shell's notice", async () => {
    const { code, gone, ranks, verdict, victim } = await loseHost("agent", "75%", agentOf)
    expect(gone).toBe(`cohort: warning: ${victim} is gone (its agent ended with signal SIGKILL): its ranks are lost`)
    // Its link's end may be heard before its session's: the verdict says why the host went, as known by the end.
    expect(verdict).toBe(`cohort: run completed DEGRADED (2 of 4 ranks lost: host ${victim} lost with ranks ${ranks.join(", ")} (its agent ended with signal SIGKILL))`)
    expect(code).toBe(0)
  }, 90_000)
})
