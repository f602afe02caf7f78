/**
 * Several hosts for real: network namespaces on a bridge (test/support/netns.ts),
 * each with its own address and sshd, the launcher in the root namespace
 * dialled back at the bridge's address. Every case is a launch through the CLI.
 * 1. 2 hosts × 2 ranks of examples/train.ts complete, with the hosts' prefixes,
 *    equal checksums, every rank in its own host's namespace, and the salt in
 *    no process's argv or environment at any time (the agents get it on a
 *    descriptor; the test reads it off the ssh session's stdin) (6).
 * 2. An agent SIGKILLed before formation fails the run at once, naming the host.
 * 3. A host's agent SIGKILLed after formation, elastic: DEGRADED, accurate,
 *    every sample of every epoch once (bar the dead ranks' in-flight batches).
 *    3b. The same with the host's cable cut instead: given up once none of its
 *    ranks beats, the run ends DEGRADED.
 * 4. The launcher SIGKILLed: nothing of the run is left on any host.
 * 5. A refused key, a host nobody has, an unknown name, a missing path:
 *    preflight errors naming the host and what to check.
 * Ranks are numbered in the order hosts join, so which host holds ranks 0, 1
 * is read from the launcher's "world formed" line, never assumed.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fetchState, pageUrl, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { useHosts } from "./support/netns.ts"
import { allPids, childrenOf, commandLine, environment, isGone, parentOf, waitFor } from "./support/processes.ts"

/** Every run of this file is named `mh<pid>-<case>`, so what it leaves is told apart from a concurrent run's. */
const RUN_PREFIX = `mh${process.pid}-`
const suite = useHosts(2, RUN_PREFIX)
const { dirs, unavailable } = suite
if (unavailable !== undefined) console.log(`multi-host tests skipped: ${unavailable}`)
// A test that failed half-way leaves its launcher and its hosts' processes: end them before the next.
const launches: Array<ReturnType<typeof spawnLaunch>> = []
const launchCli = (file: string) => {
  const launch = spawnLaunch(file)
  launches.push(launch)
  return launch
}
afterEach(() => {
  for (const launch of launches.splice(0)) launch.proc.kill("SIGKILL")
  suite.hosts()?.reap()
})

const h = () => suite.hosts()!

const TRAIN = "entry: examples/train.ts\n  dataset_size: 20000\n  epochs: 2"

/** A cluster file in a temp dir; `job` and `policy` are the sections' bodies (indented by two). */
const clusterFile = (name: string, workers: ReadonlyArray<string>, job = TRAIN, policy = "grace: 2s", controller = "") => {
  const dir = mkdtempSync(join(tmpdir(), `cohort-mh-${name}-`))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${RUN_PREFIX}${name}
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

/** The coordinator's line of a rank's loss, alone or with others that went with it (`ranks 2, 3 lost (…)`); `then`: what follows. */
const lostLine = (rank: number, then = "") => new RegExp(`ranks? (\\d+, )*${rank}(, \\d+)* lost ${then}`)

const lineMatching = (lines: ReadonlyArray<string>, pattern: RegExp, what: string, timeoutMs = 30_000) =>
  waitFor(() => lines.some((line) => pattern.test(line)), what, timeoutMs)

const portOf = async (lines: ReadonlyArray<string>): Promise<number> => {
  await lineMatching(lines, /listening on [\d.]+:\d+/, "the launcher to listen", 15_000)
  return Number(/listening on [\d.]+:(\d+)/.exec(lines.find((line) => /listening on/.test(line))!)![1])
}

const AGENT = /bun\S* src\/cli\/agent\.ts/
/** An agent, relay or rank (from the checkout or a bundle). */
const COHORT = /bun\S* (\S*\/)?src\/cli\/(agent|relay|rank)\.ts|\/(relay|rank)\.js/

/** Host → its ranks, from the launcher's "world formed: … (nsh2: 0, 1; nsh1: 2, 3)" line. */
const worldOf = (lines: ReadonlyArray<string>): Map<string, Array<number>> => {
  const formed = lines.find((line) => line.startsWith("cohort: world formed: "))
  const inside = /\(([^()]*)\)$/.exec(formed ?? "")?.[1] ?? ""
  return new Map(inside.split("; ").filter(Boolean).map((entry) => {
    const [host, ranks] = entry.split(": ")
    return [host!, ranks!.split(", ").map(Number)]
  }))
}

/** The agents started over ssh, with the host whose namespace each runs in. */
const agents = (): Array<{ pid: number; host: string | undefined }> =>
  allPids().filter((pid) => AGENT.test(commandLine(pid))).map((pid) => ({ pid, host: h().hostOf(pid) })).filter((agent) => agent.host !== undefined)

const descendsFrom = (pid: number, ancestor: number): boolean => {
  for (let at: number | undefined = pid; at !== undefined && at > 1; at = parentOf(at)) if (at === ancestor) return true
  return false
}

/** Every process of the run on the namespace hosts: all a namespace holds but its sshd listener. */
const onHosts = (): Array<number> => h().hosts.flatMap((host) => h().pidsIn(host).filter((pid) => pid !== host.sshdPid))

describe.skipIf(unavailable !== undefined)("several hosts (network namespaces)", () => {
  test("2 hosts × 2 ranks train to the end: hosts' prefixes, equal checksums, ranks in their hosts; the salt is in no argv or environment", async () => {
    const { dir, file } = clusterFile("two", [h().worker(0), h().worker(1)])
    // ssh, wrapped: the first line down each session (the agent's spec, with the salt) is copied to a log.
    const realSsh = Bun.which("ssh")!
    const wrapper = join(dir, "bin")
    mkdirSync(wrapper)
    const specs = join(dir, "specs.log")
    writeFileSync(join(wrapper, "ssh"), [
      "#!/bin/bash",
      `exec ${realSsh} "$@" < <(IFS= read -r line || exit 0; printf '%s\\n' "$line" >> ${specs}; printf '%s\\n' "$line"; exec cat)`
    ].join("\n"), { mode: 0o755 })
    const launch = spawnLaunch(file, { PATH: `${wrapper}:${process.env.PATH}` })
    launches.push(launch)
    // Every process's argv, and where each cohort process ran, sampled while the run is on.
    const argvs = new Set<string>()
    // Per pid: its latest argv (a child between fork and exec still shows its parent's), its host, how often seen.
    const placed = new Map<number, { argv: string; host: string | undefined; seen: number }>()
    // Every environment of ours seen, by pid (the latest).
    const environs = new Map<number, string>()
    const sample = () => {
      for (const pid of allPids()) {
        const argv = commandLine(pid)
        if (argv === "") continue
        argvs.add(argv)
        if (!COHORT.test(argv)) continue
        // Ours: on one of our hosts, or under our launcher (other runs may share this machine).
        const host = placed.get(pid)?.host ?? h().hostOf(pid)
        if (host === undefined && !descendsFrom(pid, launch.proc.pid)) continue
        placed.set(pid, { argv, host, seen: (placed.get(pid)?.seen ?? 0) + 1 })
        try {
          environs.set(pid, Object.entries(environment(pid)).map(([name, value]) => `${name}=${value}`).join("\n"))
        } catch {
          // exec'ing or gone: next time
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
    // Ranks are numbered in the order hosts join (the plan says so): each host holds two consecutive ones.
    const byHost = worldOf(launch.stderr.lines)
    expect([...byHost.keys()].sort()).toEqual(["nsh1", "nsh2"])
    expect([...byHost.values()].flat().sort()).toEqual([0, 1, 2, 3])
    for (const ranks of byHost.values()) expect(ranks.length === 2 && ranks[1] === ranks[0]! + 1).toBe(true)
    const expected = [...byHost].flatMap(([host, ranks]) => ranks.map((rank) => `[${host}:cpu:r${rank}]`)).sort()
    const finals = launch.stdout.lines.filter((line) => / final weights checksum /.test(line)).sort()
    expect(finals.map((line) => line.slice(0, line.indexOf("]") + 1))).toEqual(expected)
    expect(new Set(finals.map((line) => line.split(" ").at(-1))).size).toBe(1)
    // Every line a rank printed carries its own host's prefix.
    for (const line of launch.stdout.lines.filter((entry) => entry.startsWith("[nsh"))) {
      const [, host, rank] = /^\[(nsh\d):cpu:r(\d)\] /.exec(line) ?? []
      expect({ line, owner: byHost.get(host!)?.includes(Number(rank)) }).toEqual({ line, owner: true })
    }

    // Each host ran one agent, one relay and two ranks, all in its own namespace; none ran in the root one.
    // A process seen once may have been caught between fork and exec.
    const seen = [...placed.values()].filter((entry) => entry.seen > 1)
    const kind = (argv: string) => /agent\.ts/.test(argv) ? "agent" : /relay\.(ts|js)/.test(argv) ? "relay" : "rank"
    for (const host of ["nsh1", "nsh2"]) {
      expect({ host, kinds: seen.filter((entry) => entry.host === host).map((entry) => kind(entry.argv)).sort() })
        .toEqual({ host, kinds: ["agent", "rank", "rank", "relay"] })
    }
    expect(seen.filter((entry) => entry.host === undefined)).toEqual([])

    // The salt went down both sessions, and never into an argv or any of our processes' environments.
    const sent = readFileSync(specs, "utf8").trim().split("\n").map((line) => (JSON.parse(line) as { saltHex?: string }).saltHex)
    expect(sent).toHaveLength(2)
    const salt = sent[0]
    expect(salt).toMatch(/^[0-9a-f]{32}$/)
    expect(sent[1]).toBe(salt)
    const variants = [salt!, salt!.toUpperCase(), Buffer.from(salt!, "hex").toString("base64"), Buffer.from(salt!, "hex").toString("base64url")]
    expect([...argvs].filter((argv) => variants.some((variant) => argv.includes(variant)))).toEqual([])
    expect(argvs.size).toBeGreaterThan(10)
    expect(environs.size).toBeGreaterThanOrEqual(8)
    expect([...environs].filter(([, environ]) => variants.some((variant) => environ.includes(variant))).map(([pid]) => commandLine(pid))).toEqual([])
  }, 40_000)

  test("an agent SIGKILLed before formation fails the run at once, naming its host", async () => {
    // `ghost` never joins, so the window stays open (60 s) while nsh1 and nsh2 have joined.
    const ghost = `{ host: ghost, devices: 1, agent: self, path: ${repoRoot} }`
    const { file } = clusterFile("early", [h().worker(0), h().worker(1), ghost], TRAIN, "grace: 2s", ", join: { timeout: 60s }")
    const launch = launchCli(file)
    const port = await portOf(launch.stderr.lines)
    await lineMatching(launch.stderr.lines, /nsh1 joined with ranks/, "nsh1 to join", 20_000)
    // The status endpoint, on the bridge's address, shows it too (it publishes every 500 ms while the window is open).
    let state: Awaited<ReturnType<typeof fetchStateAt>>
    await waitForAsync(async () => ((state = await fetchStateAt(h().controller, port))?.joinedHosts ?? 0) >= 1, "the status endpoint to show a joined host", 3_000)
    expect(state!.phase).toBe("waiting")
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
    const run = startElastic("elastic")
    const { victim, dead } = await run.midEpoch2()
    const agent = agents().find((entry) => entry.host === victim)
    expect(agent).toBeDefined()
    const killedAt = performance.now()
    process.kill(agent!.pid, "SIGKILL")
    // A host's ranks leave together: one line says them, and hands their work to the other host's ranks only.
    for (const rank of dead) await lineMatching(run.launch.stderr.lines, lostLine(rank), `the coordinator to lose rank ${rank}`, 20_000)
    // Losing a host's agent is noticed through its link at once, not after the 5 s heartbeat timeout.
    expect(performance.now() - killedAt).toBeLessThan(3_000)
    const said = run.launch.stderr.lines.filter((line) => lostLine(dead[0]!).test(line))
    expect(said).toHaveLength(1)
    expect(said[0]).toContain(`lost (host ${victim} lost (`)
    expect(said[0]).toMatch(new RegExp(`handed to rank\\(s\\) ${[0, 1, 2, 3].filter((rank) => !dead.includes(rank)).join(", ")}$`))
    await run.completesDegraded(30_000)
  }, 60_000)

  // A host that vanishes (its cable cut: no FIN, no RST) after formation: its ranks are declared dead
  // after the heartbeat timeout and their work handed to the survivors; with none of its ranks beating,
  // the host is given up (its join link reset, out of the controller's rounds, skipped by the cleanup
  // round after the run), so the survivors finish and the run ends DEGRADED.
  test("a host that vanishes (cable cut) after formation, elastic: the survivors finish DEGRADED", async () => {
    const run = startElastic("vanish")
    const { victim, dead } = await run.midEpoch2()
    const host = h().hosts.find((entry) => entry.name === victim)!
    try {
      h().link(host, "down")
      for (const rank of dead) await lineMatching(run.launch.stderr.lines, lostLine(rank, "\\(no heartbeat"), `the coordinator to lose rank ${rank}`, 12_000)
      // With none of its ranks beating, the host is given up: its link is closed and it leaves the rounds.
      await lineMatching(run.launch.stderr.lines, new RegExp(`${victim} is gone \\(none of its ranks has beaten`), "the host to be given up", 5_000)
      await run.completesDegraded(30_000)
    } finally {
      run.launch.proc.kill("SIGKILL")
      h().link(host, "up")
      h().reap()
    }
  }, 90_000)

  test("tunnel mode: the mux binds loopback only, tunnelled hosts join through their sessions, a direct dial is refused", async () => {
    const tunnelled = (index: number) => h().worker(index).replace(/ \}$/, ", tunnel: true }")
    const { file } = clusterFile("tunnel", [tunnelled(0), tunnelled(1)])
    const launch = launchCli(file)
    const port = await portOf(launch.stderr.lines)
    expect(launch.stderr.lines.some((line) => line.includes(`listening on 127.0.0.1:${port}`))).toBe(true)
    // From a host, the launcher's address on the bridge does not answer on that port.
    // "No route to host" is the bridge's neighbour lookup not answering yet (seen once in a full suite run), not
    // an answer about the port: ask again until the launcher's address answers about the port (15 s at most:
    // a dial with no neighbour may itself take a few seconds to fail).
    const dial = () => Bun.spawnSync(["ip", "netns", "exec", h().hosts[0]!.namespace, "bash", "-c", `exec 3<>/dev/tcp/${h().controller}/${port}`], { stderr: "pipe" })
    let direct = dial()
    const unrouted = () => direct.stderr.toString().includes("No route to host")
    await waitFor(() => {
      if (unrouted()) direct = dial()
      return !unrouted()
    }, "the launcher's address on the bridge to answer about the port", 15_000)
    expect(direct.exitCode).not.toBe(0)
    expect(direct.stderr.toString()).toContain("Connection refused")
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    const checksums = launch.stdout.lines.flatMap((line) => /^\[nsh[12]:cpu:r\d\] final weights checksum (\w+)/.exec(line)?.[1] ?? [])
    expect(checksums).toHaveLength(4)
    expect(new Set(checksums).size).toBe(1)
  }, 60_000)

  test("the launcher SIGKILLed mid-run: no agent, relay or rank is left on any host within 15 s", async () => {
    const { file } = clusterFile("orphans", [h().worker(0), h().worker(1)], "entry: examples/train.ts\n  dataset_size: 50000\n  epochs: 50")
    const launch = launchCli(file)
    await lineMatching(launch.stderr.lines, /epoch 1\/50 done/, "epoch 1 to end", 30_000)
    const theirs = onHosts()
    const cohort = theirs.filter((pid) => COHORT.test(commandLine(pid)))
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
      const launch = launchCli(file)
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
      // One message, one problem a line; only its first line carries the "cohort: " prefix.
      expect(stderr.some((line) => /^(cohort: )?nsh1: \/nonexistent\/cohort is not a directory there/.test(line))).toBe(true)
      expect(stderr.some((line) => /^(cohort: )?nsh2: ssh could not reach nsh-nowhere\.invalid or log in \(.*Could not resolve hostname/.test(line))).toBe(true)
    }, 20_000)
  })
})

/**
 * The elastic scenario of cases 3 and 3b: the traced fixture (every batch a rank reports is in
 * `<dir>/r<rank>.jsonl`), 4 ranks on 2 hosts, 4 epochs; one host is taken away in epoch 2.
 */
const startElastic = (name: string) => {
  const DATASET = 50_000
  const { dir, file } = clusterFile(
    name,
    [h().worker(0), h().worker(1)],
    `entry: test/fixtures/traced-train-fixture.ts\n  args: ["trace=$DIR", "delay=8"]\n  dataset_size: ${DATASET}\n  epochs: 4`,
    // A host takes 2 of the 4 ranks with it: 50% would be crossed (2 ≥ ceil(0.5 × 4)), so the limit is 75%.
    "after_formation:\n    elastic: { max_failure: 75% }\n  grace: 2s\n  heartbeat_timeout: 5s"
  )
  const launch = launchCli(file)
  let victim = ""
  let dead: Array<number> = []
  let survivors: Array<number> = []
  return {
    launch,
    /** Once epoch 1 is done and the victim host's ranks have done some of epoch 2: the victim (the host of rank 3) and its ranks. */
    midEpoch2: async () => {
      await lineMatching(launch.stderr.lines, /epoch 1\/4 done/, "epoch 1 to end", 30_000)
      const world = worldOf(launch.stderr.lines)
      victim = [...world].find(([, ranks]) => ranks.includes(3))![0]
      dead = world.get(victim)!
      survivors = [0, 1, 2, 3].filter((rank) => !dead.includes(rank))
      await waitFor(() => dead.every((rank) => readTrace(dir, rank).some((entry) => entry.epoch === 2)), `epoch 2 to make progress on ${victim}`, 20_000)
      return { victim, dead }
    },
    /** The verdict, the survivors' weights and accuracy, and every sample of every epoch once. */
    completesDegraded: async (timeoutMs: number) => {
      await lineMatching(launch.stderr.lines, /^cohort: run (completed|failed)/, "the run to end", timeoutMs)
      const code = await launch.proc.exited
      await launch.stdout.done
      await launch.stderr.done
      const stdout = launch.stdout.lines
      expect(launch.stderr.lines.at(-1)).toContain("run completed DEGRADED (2 of 4 ranks lost")
      expect(code).toBe(0)
      const other = survivors.length === 2 ? [...worldOf(launch.stderr.lines).keys()].find((host) => host !== victim)! : ""
      const checksums = stdout.flatMap((line) => new RegExp(`^\\[${other}:cpu:r(${survivors.join("|")})\\] final weights checksum (\\w+)$`).exec(line)?.[2] ?? [])
      expect(checksums).toHaveLength(2)
      expect(new Set(checksums).size).toBe(1)
      expect(stdout.some((line) => line.startsWith(`[${victim}:`) && line.includes("final weights checksum"))).toBe(false)
      for (const rank of survivors) {
        const last = stdout.filter((line) => line.startsWith(`[${other}:cpu:r${rank}] epoch `)).at(-1) ?? ""
        expect(Number(/accuracy ([\d.]+)%/.exec(last)?.[1])).toBeGreaterThanOrEqual(95)
      }
      // Coverage: every sample of every epoch once; twice only within a dead rank's last traced batch.
      const deadLast = new Map(dead.map((rank) => [rank, readTrace(dir, rank).at(-1)!]))
      const seen = new Map<number, Map<number, Array<number>>>()
      for (const rank of [0, 1, 2, 3]) {
        for (const { epoch, indices } of readTrace(dir, rank)) {
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
          const gone = ranks.filter((rank) => dead.includes(rank))
          expect(gone).toHaveLength(1)
          const last = deadLast.get(gone[0]!)!
          expect(last.epoch === epoch && last.indices.includes(index)).toBe(true)
        }
        // After their host is gone its ranks process nothing.
        if (epoch > 2) expect([...samples.values()].some((ranks) => ranks.some((rank) => dead.includes(rank)))).toBe(false)
      }
    }
  }
}

const fetchStateAt = async (address: string, port: number) => {
  try {
    const response = await fetch(await pageUrl(port, "/state.json", address))
    return response.status === 200 ? (await response.json()) as Awaited<ReturnType<typeof fetchState>> : undefined
  } catch {
    return undefined
  }
}

const waitForAsync = async (check: () => Promise<boolean>, what: string, timeoutMs: number) => {
  const deadline = performance.now() + timeoutMs
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`)
    await Bun.sleep(50)
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
