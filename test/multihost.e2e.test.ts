/**
 * Several hosts for real: network namespaces on a bridge (test/support/netns.ts),
 * each with its own address and sshd, the launcher in the root namespace
 * dialled back at the bridge's address. Every case is a launch through the CLI.
 * 1. 2 hosts × 2 ranks of examples/train.ts complete, with the hosts' prefixes,
 *    equal checksums, every rank in its own host's namespace, and the salt in
 *    no process's argv at any time (6).
 * 2. An agent SIGKILLed before formation fails the run at once, naming the host.
 * 3. A host's agent SIGKILLed after formation, elastic: DEGRADED, accurate,
 *    every sample of every epoch once (bar the dead ranks' in-flight batches).
 * 4. The launcher SIGKILLed: nothing of the run is left on any host.
 * 5. A refused key, a host nobody has, an unknown name, a missing path:
 *    preflight errors naming the host and what to check.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fetchState, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { type Hosts, makeHosts, netnsUnavailable } from "./support/netns.ts"
import { allPids, childrenOf, commandLine, environment, isGone, waitFor } from "./support/processes.ts"

const unavailable = netnsUnavailable()
if (unavailable !== undefined) console.log(`multi-host tests skipped: ${unavailable}`)

let hosts: Hosts | undefined
const dirs: Array<string> = []
const cleanUp = () => {
  hosts?.teardown()
  dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true }))
}
// Even when the runner is torn down without afterAll (teardown is idempotent).
process.on("exit", cleanUp)
beforeAll(async () => {
  if (unavailable === undefined) hosts = await makeHosts(2)
}, 30_000)
afterAll(cleanUp)

const h = () => hosts!

const TRAIN = "entry: examples/train.ts\n  dataset_size: 20000\n  epochs: 2"

/** A cluster file in a temp dir; `job` and `policy` are the sections' bodies (indented by two). */
const clusterFile = (name: string, workers: ReadonlyArray<string>, job = TRAIN, policy = "grace: 2s", controller = "") => {
  const dir = mkdtempSync(join(tmpdir(), `cohort-mh-${name}-`))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${name}
controller: { host: ${h().controller}, port: 0${controller} }
workers:
${workers.map((worker) => `  - ${worker}`).join("\n")}
job:
  ${job.replaceAll("$DIR", dir)}
failure_policy:
  ${policy}
`)
  return { dir, file }
}

const lineMatching = (lines: ReadonlyArray<string>, pattern: RegExp, what: string, timeoutMs = 30_000) =>
  waitFor(() => lines.some((line) => pattern.test(line)), what, timeoutMs)

const portOf = async (lines: ReadonlyArray<string>): Promise<number> => {
  await lineMatching(lines, /listening on [\d.]+:\d+/, "the launcher to listen", 15_000)
  return Number(/listening on [\d.]+:(\d+)/.exec(lines.find((line) => /listening on/.test(line))!)![1])
}

const AGENT = /bun\S* src\/cli\/agent\.ts/

/** The agents started over ssh, with the host whose namespace each runs in. */
const agents = (): Array<{ pid: number; host: string | undefined }> =>
  allPids().filter((pid) => AGENT.test(commandLine(pid))).map((pid) => ({ pid, host: h().hostOf(pid) })).filter((agent) => agent.host !== undefined)

/** Every process of the run on the namespace hosts: all a namespace holds but its sshd listener. */
const onHosts = (): Array<number> => h().hosts.flatMap((host) => h().pidsIn(host).filter((pid) => pid !== host.sshdPid))

describe.skipIf(unavailable !== undefined)("several hosts (network namespaces)", () => {
  test("2 hosts × 2 ranks train to the end: hosts' prefixes, equal checksums, ranks in their hosts; the salt is in no argv", async () => {
    const { file } = clusterFile("two", [h().worker(0), h().worker(1)])
    const launch = spawnLaunch(file)
    // Every process's argv, and where each cohort process ran, sampled while the run is on.
    const argvs = new Set<string>()
    const placed = new Map<number, { argv: string; host: string | undefined }>()
    let salt: string | undefined
    const sample = () => {
      for (const pid of allPids()) {
        const argv = commandLine(pid)
        if (argv === "") continue
        argvs.add(argv)
        if (/src\/cli\/(agent|relay|rank)\.ts/.test(argv) && !placed.has(pid)) placed.set(pid, { argv, host: h().hostOf(pid) })
        if (salt === undefined && AGENT.test(argv)) {
          try {
            salt = (JSON.parse(environment(pid).COHORT_AGENT_SPEC ?? "{}") as { saltHex?: string }).saltHex
          } catch {
            // exec'ing or gone: next time
          }
        }
      }
    }
    const sampling = setInterval(sample, 25)
    const code = await launch.proc.exited
    clearInterval(sampling)
    await launch.stdout.done
    await launch.stderr.done

    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    expect(code).toBe(0)
    expect(launch.stderr.lines).toContain("cohort: world formed: 4 rank(s) on 2 host(s) (nsh1: 0, 1; nsh2: 2, 3)")
    const finals = launch.stdout.lines.filter((line) => / final weights checksum /.test(line)).sort()
    expect(finals.map((line) => line.slice(0, line.indexOf("]") + 1))).toEqual(["[nsh1:cpu:r0]", "[nsh1:cpu:r1]", "[nsh2:cpu:r2]", "[nsh2:cpu:r3]"])
    expect(new Set(finals.map((line) => line.split(" ").at(-1))).size).toBe(1)

    // Each agent, relay and rank ran in its host's namespace (an agent's children are its host's).
    const seen = [...placed.values()]
    expect(seen.filter((entry) => AGENT.test(entry.argv)).map((entry) => entry.host).sort()).toEqual(["nsh1", "nsh2"])
    expect(seen.filter((entry) => entry.host === undefined)).toEqual([])

    // The salt was found (in the agent's environment, where it belongs) and never in an argv.
    expect(salt).toMatch(/^[0-9a-f]{32}$/)
    const variants = [salt!, salt!.toUpperCase(), Buffer.from(salt!, "hex").toString("base64"), Buffer.from(salt!, "hex").toString("base64url")]
    expect([...argvs].filter((argv) => variants.some((variant) => argv.includes(variant)))).toEqual([])
    expect(argvs.size).toBeGreaterThan(10)
  }, 40_000)

  test("an agent SIGKILLed before formation fails the run at once, naming its host", async () => {
    // `ghost` never joins, so the window stays open (60 s) while nsh1 and nsh2 have joined.
    const ghost = `{ host: ghost, devices: 1, agent: self, path: ${repoRoot} }`
    const { file } = clusterFile("early", [h().worker(0), h().worker(1), ghost], TRAIN, "grace: 2s", ", join: { timeout: 60s }")
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await lineMatching(launch.stderr.lines, /nsh1 joined with ranks 0, 1/, "nsh1 to join", 20_000)
    // The status endpoint, on the bridge's address, agrees.
    const state = await fetchStateAt(h().controller, port)
    expect(state?.phase).toBe("waiting")
    expect(state?.joinedHosts).toBeGreaterThanOrEqual(1)
    const victim = agents().find((agent) => agent.host === "nsh1")
    expect(victim).toBeDefined()
    const killedAt = performance.now()
    process.kill(victim!.pid, "SIGKILL")
    const code = await launch.proc.exited
    const took = performance.now() - killedAt
    await launch.stderr.done
    expect(code).toBe(1)
    expect(took).toBeLessThan(10_000)
    expect(launch.stderr.lines.at(-1)).toMatch(/^cohort: run failed: .*nsh1/)
    // Nothing of the run is left on either host.
    await waitFor(() => onHosts().length === 0, "nsh1's and nsh2's processes to be gone", 15_000)
  }, 40_000)

  test("a host's agent SIGKILLed after formation, elastic: DEGRADED, accurate, every sample once", async () => {
    const DATASET = 50_000
    const { dir, file } = clusterFile(
      "elastic",
      [h().worker(0), h().worker(1)],
      `entry: test/fixtures/traced-train-fixture.ts\n  args: ["trace=$DIR", "delay=8"]\n  dataset_size: ${DATASET}\n  epochs: 4`,
      // 2 of 4 ranks die with nsh2; 50% would be crossed (2 ≥ ceil(0.5 × 4)), so the limit is 75%.
      "after_formation:\n    elastic: { max_failure: 75% }\n  grace: 2s\n  heartbeat_timeout: 5s"
    )
    const launch = spawnLaunch(file)
    await lineMatching(launch.stderr.lines, /epoch 1\/4 done/, "epoch 1 to end", 30_000)
    const traced = (rank: number) => readTrace(dir, rank)
    await waitFor(() => traced(2).some((entry) => entry.epoch === 2) && traced(3).some((entry) => entry.epoch === 2), "epoch 2 to make progress on nsh2", 20_000)
    const victim = agents().find((agent) => agent.host === "nsh2")
    expect(victim).toBeDefined()
    const killedAt = performance.now()
    process.kill(victim!.pid, "SIGKILL")
    await lineMatching(launch.stderr.lines, /rank 2 lost/, "the coordinator to lose rank 2", 20_000)
    await lineMatching(launch.stderr.lines, /rank 3 lost/, "the coordinator to lose rank 3", 20_000)
    const noticed = performance.now() - killedAt
    const code = await launch.proc.exited
    await launch.stdout.done
    await launch.stderr.done
    const stdout = launch.stdout.lines
    const stderr = launch.stderr.lines
    expect(stderr.at(-1)).toContain("run completed DEGRADED (2 of 4 ranks lost")
    expect(code).toBe(0)
    // Losing a host is noticed through its link, not after the 5 s heartbeat timeout.
    expect(noticed).toBeLessThan(5_000)

    const checksums = stdout.flatMap((line) => /^\[nsh1:cpu:r[01]\] final weights checksum (\w+)$/.exec(line)?.[1] ?? [])
    expect(checksums).toHaveLength(2)
    expect(new Set(checksums).size).toBe(1)
    expect(stdout.some((line) => /^\[nsh2:cpu:r[23]\] final weights checksum/.test(line))).toBe(false)
    for (const rank of [0, 1]) {
      const last = stdout.filter((line) => line.startsWith(`[nsh1:cpu:r${rank}] epoch `)).at(-1) ?? ""
      expect(Number(/accuracy ([\d.]+)%/.exec(last)?.[1])).toBeGreaterThanOrEqual(95)
    }

    // Coverage: every sample of every epoch once; twice only within a dead rank's last traced batch.
    const deadLast = new Map([2, 3].map((rank) => [rank, traced(rank).at(-1)!]))
    const seen = new Map<number, Map<number, Array<number>>>()
    for (const rank of [0, 1, 2, 3]) {
      for (const { epoch, indices } of traced(rank)) {
        const samples = seen.get(epoch) ?? new Map<number, Array<number>>()
        seen.set(epoch, samples)
        for (const index of indices) samples.set(index, [...(samples.get(index) ?? []), rank])
      }
    }
    expect([...seen.keys()].sort()).toEqual([1, 2, 3, 4])
    for (const [epoch, samples] of seen) {
      expect({ epoch, covered: samples.size }).toEqual({ epoch, covered: DATASET })
      for (const [index, ranks] of samples) {
        if (ranks.length === 1) continue
        expect({ epoch, index, ranks: ranks.length }).toEqual({ epoch, index, ranks: 2 })
        const dead = ranks.filter((rank) => rank === 2 || rank === 3)
        expect(dead).toHaveLength(1)
        const last = deadLast.get(dead[0]!)!
        expect(last.epoch === epoch && last.indices.includes(index)).toBe(true)
      }
      if (epoch > 2) expect([...samples.values()].some((ranks) => ranks.includes(2) || ranks.includes(3))).toBe(false)
    }
  }, 60_000)

  test("the launcher SIGKILLed mid-run: no agent, relay or rank is left on any host within 15 s", async () => {
    const { file } = clusterFile("orphans", [h().worker(0), h().worker(1)], "entry: examples/train.ts\n  dataset_size: 50000\n  epochs: 50")
    const launch = spawnLaunch(file)
    await lineMatching(launch.stderr.lines, /epoch 1\/50 done/, "epoch 1 to end", 30_000)
    const theirs = onHosts()
    const cohort = theirs.filter((pid) => /src\/cli\/(agent|relay|rank)\.ts/.test(commandLine(pid)))
    // Per host: its agent, its relay, and its 2 ranks.
    for (const host of ["nsh1", "nsh2"]) expect(cohort.filter((pid) => h().hostOf(pid) === host).length).toBeGreaterThanOrEqual(4)
    const sshClients = childrenOf(launch.proc.pid).filter((pid) => commandLine(pid).startsWith("ssh "))
    expect(sshClients).toHaveLength(2)
    launch.proc.kill("SIGKILL")
    const killedAt = performance.now()
    await waitFor(() => cohort.every(isGone), "every agent, relay and rank on nsh1 and nsh2 to be gone", 15_000)
    const tookCohort = performance.now() - killedAt
    // The sessions that carried them (sshd's, the remote shell) and the launcher's ssh clients go too.
    await waitFor(() => [...theirs, ...sshClients].every(isGone), "the ssh sessions to be gone", 15_000)
    expect(tookCohort).toBeLessThan(15_000)
  }, 60_000)

  describe("preflight errors name the host and what to check", () => {
    const failing = async (workers: ReadonlyArray<string>) => {
      const { file } = clusterFile("preflight", workers)
      const launch = spawnLaunch(file)
      const startedAt = performance.now()
      const code = await launch.proc.exited
      await launch.stderr.done
      // Nothing started anywhere: no agent ran.
      expect(onHosts().filter((pid) => AGENT.test(commandLine(pid)))).toEqual([])
      return { code, took: performance.now() - startedAt, stderr: launch.stderr.lines }
    }

    test("a key the host refuses", async () => {
      const dir = mkdtempSync(join(tmpdir(), "cohort-mh-key-"))
      dirs.push(dir)
      Bun.spawnSync(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", join(dir, "stranger")])
      const { code, stderr } = await failing([h().worker(0, { identityFile: join(dir, "stranger") }), h().worker(1)])
      expect(code).toBe(2)
      expect(stderr.at(-1)).toMatch(new RegExp(
        `^cohort: nsh1: ssh could not reach ${h().hosts[0]!.address.replaceAll(".", "\\.")} or log in \\(.*Permission denied.*\\): check the host, ssh\\.user, ssh\\.identity_file and that its key is authorised$`
      ))
    }, 20_000)

    test("an address on the bridge that nobody has", async () => {
      const { code, stderr, took } = await failing([h().worker(0), h().worker(1, { target: h().vacantAddress, options: ["-o", "ConnectTimeout=3"] })])
      expect(code).toBe(2)
      expect(stderr.at(-1)).toMatch(new RegExp(
        `^cohort: nsh2: ssh could not reach ${h().vacantAddress.replaceAll(".", "\\.")} or log in \\(.*(No route to host|timed out).*\\): check the host`
      ))
      expect(took).toBeLessThan(12_000)
    }, 20_000)

    test("a name that does not resolve", async () => {
      const { code, stderr } = await failing([h().worker(0, { target: "nsh-nowhere.invalid" }), h().worker(1)])
      expect(code).toBe(2)
      expect(stderr.at(-1)).toMatch(/^cohort: nsh1: ssh could not reach nsh-nowhere\.invalid or log in \(.*Could not resolve hostname.*\): check the host/)
    }, 20_000)

    test("a checkout path missing on one host", async () => {
      const { code, stderr } = await failing([h().worker(0), h().worker(1, { path: "/nonexistent/cohort" })])
      expect(code).toBe(2)
      expect(stderr.at(-1)).toBe(
        "cohort: nsh2: /nonexistent/cohort is not a directory there; give workers[].path as the cohort checkout's path on nsh2 (or copy it there with --sync)"
      )
    }, 20_000)

    test("several at once: every host's problem is reported in the same run", async () => {
      const { code, stderr } = await failing([h().worker(0, { path: "/nonexistent/cohort" }), h().worker(1, { target: "nsh-nowhere.invalid" })])
      expect(code).toBe(2)
      expect(stderr.some((line) => line.startsWith("cohort: nsh1: /nonexistent/cohort is not a directory there"))).toBe(true)
      expect(stderr.some((line) => line.startsWith("cohort: nsh2: ssh could not reach nsh-nowhere.invalid"))).toBe(true)
    }, 20_000)
  })
})

const fetchStateAt = async (address: string, port: number) => {
  try {
    const response = await fetch(`http://${address}:${port}/state.json`)
    return response.status === 200 ? (await response.json()) as Awaited<ReturnType<typeof fetchState>> : undefined
  } catch {
    return undefined
  }
}

const readTrace = (dir: string, rank: number): Array<{ epoch: number; indices: Array<number> }> => {
  if (!readdirSync(dir).includes(`r${rank}.jsonl`)) return []
  return readFileSync(join(dir, `r${rank}.jsonl`), "utf8").split("\n").filter(Boolean).flatMap((line) => {
    try {
      return [JSON.parse(line) as { epoch: number; indices: Array<number> }]
    } catch {
      return [] // a line being written
    }
  })
}
