/**
 * Elastic growth across hosts for real: two network-namespace hosts
 * (test/support/netns.ts), the launcher in the root namespace. The first host
 * is started by the launcher over ssh; the second is declared `agent: self`
 * and its agent is started by hand, inside its own namespace, once the run is
 * training (after epoch 2), with `controller.join.after_formation: accept`.
 * The late host's ranks are numbered after the first host's, enter the cohort
 * at the next epoch boundary from the latest consensus checkpoint, and the
 * CPU data plane includes them from that epoch. Checked, through the traced
 * fixture (every batch a rank reports is in `<dir>/r<rank>.jsonl`):
 * - the run completes (exit 0, `cohort: run completed`), the late agent exits 0;
 * - the late ranks got no samples before their entry epoch E (read from the
 *   launcher's "enter the cohort at epoch E" line) and their share from E on;
 * - every sample of every epoch was processed exactly once (nobody died);
 * - the late ranks resumed from the checkpoint of epoch E-1;
 * - the four final checksums are equal and every rank reaches 95% accuracy.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { useHosts } from "./support/netns.ts"
import { collectLines, commandLine, waitFor } from "./support/processes.ts"
import { traces } from "./support/traces.ts"

/** Every run of this file is named `gr<pid>-<case>`, so what it leaves is told apart from a concurrent run's. */
const RUN_PREFIX = `gr${process.pid}-`
const suite = useHosts(2, RUN_PREFIX)
const { dirs, unavailable } = suite
if (unavailable !== undefined) console.log(`multi-host growth test skipped: ${unavailable}`)
/** The output collected so far: a failed wait or verdict says what the launcher and the agent last said. */
const outputs: Array<{ readonly name: string; readonly lines: ReadonlyArray<string> }> = []
// A test that failed half-way leaves its launcher, the agent it started by hand, and its hosts' processes.
const processes: Array<{ readonly proc: { kill: (signal?: NodeJS.Signals) => void } }> = []
const launchers: Array<number> = []
afterEach(() => {
  outputs.splice(0)
  for (const { proc } of processes.splice(0)) proc.kill("SIGKILL")
  suite.hosts()?.reap()
  // A SIGKILLed launcher cannot remove what it keeps under its cwd while it runs: its salt files and its run's entry.
  for (const pid of launchers.splice(0)) {
    const salts = join(repoRoot, ".cohort/salts")
    if (existsSync(salts)) for (const name of readdirSync(salts).filter((entry) => entry.startsWith(`${pid}-`))) rmSync(join(salts, name), { force: true })
  }
  const runs = join(repoRoot, ".cohort/runs")
  if (existsSync(runs)) for (const name of readdirSync(runs).filter((entry) => entry.startsWith(RUN_PREFIX))) rmSync(join(runs, name), { force: true })
})

const h = () => suite.hosts()!

const DATASET = 50_000
const EPOCHS = 6

const recentOutput = () => outputs.map(({ lines, name }) => `--- ${name} (last 30 lines):\n${lines.slice(-30).join("\n")}`).join("\n")

/** Wait for `check`; on a timeout, the error carries the recent output. */
const waitWithOutput = async (check: () => boolean, what: string, timeoutMs: number) => {
  try {
    await waitFor(check, what, timeoutMs)
  } catch (error) {
    throw new Error(`${(error as Error).message}\n${recentOutput()}`)
  }
}

const lineMatching = (lines: ReadonlyArray<string>, pattern: RegExp, what: string, timeoutMs = 30_000) =>
  waitWithOutput(() => lines.some((line) => pattern.test(line)), what, timeoutMs)

/** An agent, relay or rank (from the checkout or a bundle). */
const COHORT = /bun\S* (\S*\/)?src\/cli\/(agent|relay|rank)\.ts|\/(relay|rank)\.js/

describe.skipIf(unavailable !== undefined)("elastic growth across hosts (network namespaces)", () => {
  test("the second host arrives late: its ranks enter at the next epoch from the consensus, every sample once, equal checksums", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-grow-mh-"))
    dirs.push(dir)
    const file = join(dir, "cluster.yml")
    const late = h().hosts[1]!
    // nsh1 over ssh (as multihost.e2e); nsh2 joins by itself. The cohort forms with nsh1's 2 ranks alone.
    writeFileSync(file, `
name: ${RUN_PREFIX}grow
controller: { host: ${h().controller}, port: 0, join: { min_ranks: 2, target_ranks: 2, after_formation: accept } }
workers:
  - ${h().worker(0)}
  - { host: ${late.name}, devices: 2, agent: self, path: ${JSON.stringify(repoRoot)} }
job:
  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "delay=8"]
  dataset_size: ${DATASET}
  epochs: ${EPOCHS}
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation:
    elastic: { max_failure: 50% }
  grace: 2s
  heartbeat_timeout: 5s
`)
    const launch = spawnLaunch(file)
    processes.push(launch)
    launchers.push(launch.proc.pid)
    outputs.push({ name: "launcher stderr", lines: launch.stderr.lines })

    // The launcher says how to start nsh2's agent: the address nsh2 reaches, and the salt's file.
    const hintPattern = new RegExp(`waiting for ${late.name} to join: on it, run  bun run agent --controller (\\S+) --host ${late.name} --salt-file <a copy of (\\S+)>`)
    await lineMatching(launch.stderr.lines, hintPattern, `the launcher to say how to start ${late.name}'s agent`, 15_000)
    const [, controller, saltPath] = hintPattern.exec(launch.stderr.lines.find((line) => hintPattern.test(line))!)!
    expect(controller).toMatch(new RegExp(`^${h().controller.replaceAll(".", "\\.")}:\\d+$`))
    const salt = join(repoRoot, saltPath!)
    expect(existsSync(salt)).toBe(true)
    const saltCopy = join(dir, `${late.name}.salt`)
    copyFileSync(salt, saltCopy)
    chmodSync(saltCopy, 0o600)

    // Training, without nsh2: the cohort formed with nsh1's ranks 0 and 1 and epoch 2 is over.
    await lineMatching(launch.stderr.lines, new RegExp(`epoch 2/${EPOCHS} done`), "epoch 2 to end", 40_000)
    expect(launch.stderr.lines.some((line) => line.startsWith(`cohort: world formed: 2 rank(s) on 1 host(s) (${h().hosts[0]!.name}: 0, 1)`))).toBe(true)

    // `bun run agent` inside nsh2's namespace (`ip netns exec` execs it: the pid is the agent's).
    const agent = Bun.spawn([
      "ip", "netns", "exec", late.namespace,
      process.execPath, "src/cli/agent.ts", "--controller", controller!, "--host", late.name, "--devices", "2", "--salt-file", saltCopy
    ], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
    processes.push({ proc: agent })
    const agentOut = collectLines(agent.stdout)
    const agentErr = collectLines(agent.stderr)
    outputs.push({ name: "agent stdout", lines: agentOut.lines }, { name: "agent stderr", lines: agentErr.lines })
    await waitWithOutput(() => h().hostOf(agent.pid) === late.name, `the agent to run in ${late.name}'s namespace`, 5_000)

    await lineMatching(launch.stderr.lines, new RegExp(`${late.name} joined with ranks 2, 3 \\(after formation\\)`), `${late.name} to join after formation`, 20_000)
    const entering = /rank\(s\) 2, 3 enter the cohort at epoch (\d+)/
    await lineMatching(launch.stderr.lines, entering, "ranks 2 and 3 to enter the cohort", 20_000)
    const entry = Number(entering.exec(launch.stderr.lines.find((line) => entering.test(line))!)![1])
    // They came after epoch 2, and in time to train at least one epoch.
    expect(entry).toBeGreaterThan(2)
    expect(entry).toBeLessThanOrEqual(EPOCHS)
    // nsh2 runs its own relay and both ranks beside its agent.
    await waitWithOutput(
      () => h().pidsIn(late).filter((pid) => COHORT.test(commandLine(pid))).length >= 4,
      `${late.name}'s agent, relay and two ranks to run in its namespace`,
      10_000
    )

    const code = await launch.proc.exited
    await launch.stdout.done
    await launch.stderr.done
    const agentCode = await agent.exited
    await agentOut.done
    await agentErr.done
    const failure = recentOutput()
    const verdict = launch.stderr.lines.at(-1)
    const completed = code === 0 && verdict === "cohort: run completed"
    expect({ code, verdict, failure: completed ? "" : failure }).toEqual({ code: 0, verdict: "cohort: run completed", failure: "" })
    expect({ agentCode, failure: agentCode === 0 ? "" : failure }).toEqual({ agentCode: 0, failure: "" })
    // The salt file lives only as long as the run.
    expect(existsSync(salt)).toBe(false)

    // nsh1's rank lines come through its ssh session to the launcher's stdout; a self-deployed agent prints its ranks' own.
    const stdout = [...launch.stdout.lines, ...agentOut.lines]
    const ownLines = (host: string, rank: number) => stdout.filter((line) => line.startsWith(`[${host}:cpu:r${rank}] `))
    const placed: ReadonlyArray<readonly [string, number]> = [[h().hosts[0]!.name, 0], [h().hosts[0]!.name, 1], [late.name, 2], [late.name, 3]]

    // The late ranks resumed from the consensus of the epoch before their entry.
    for (const rank of [2, 3]) {
      const resumed = ownLines(late.name, rank).filter((line) => line.includes("resumed from the checkpoint of epoch"))
      expect({ rank, resumed: resumed.map((line) => /resumed from the checkpoint of epoch (\d+)/.exec(line)?.[1]) })
        .toEqual({ rank, resumed: [String(entry - 1)] })
    }

    // All four agree on the weights, and each reaches the accuracy.
    const checksums = placed.map(([host, rank]) => ({ host, rank, checksum: ownLines(host, rank).flatMap((line) => / final weights checksum (\w+)$/.exec(line)?.[1] ?? []) }))
    for (const each of checksums) expect({ ...each, count: each.checksum.length }).toEqual({ ...each, count: 1 })
    expect(new Set(checksums.map((each) => each.checksum[0])).size).toBe(1)
    for (const [host, rank] of placed) {
      const last = ownLines(host, rank).filter((line) => / epoch \d+: loss /.test(line)).at(-1) ?? ""
      expect({ host, rank, accuracy: Number(/accuracy ([\d.]+)%/.exec(last)?.[1]) >= 95 ? "≥ 95%" : last }).toEqual({ host, rank, accuracy: "≥ 95%" })
    }

    // Coverage: every sample of every epoch exactly once; the late ranks none before their entry, their share from it.
    const seen = traces(dir)
    expect([...seen.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: EPOCHS }, (_, index) => index + 1))
    for (const [epoch, samples] of seen) {
      expect({ epoch, covered: samples.size }).toEqual({ epoch, covered: DATASET })
      const repeated = [...samples].filter(([, ranks]) => ranks.length > 1).slice(0, 5)
      expect({ epoch, repeated }).toEqual({ epoch, repeated: [] })
      const perRank = [0, 1, 2, 3].map((rank) => [...samples.values()].filter((ranks) => ranks[0] === rank).length)
      // cpu_sync splits equally over the ranks that train the epoch.
      const expected = epoch < entry ? [DATASET / 2, DATASET / 2, 0, 0] : [DATASET / 4, DATASET / 4, DATASET / 4, DATASET / 4]
      expect({ epoch, entry, perRank }).toEqual({ epoch, entry, perRank: expected })
    }
  }, 60_000)
})
