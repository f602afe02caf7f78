/**
 * Run one chaos scenario with real processes: write its cluster file, start
 * the launcher (and, for the `self` topology, the self-deployed agent),
 * inject the fault at its moment, and check what came of it against the
 * prediction:
 *
 * - the exit status and the verdict line;
 * - the last phase the status stream (`/events`) showed;
 * - no process of the run left anywhere within ORPHAN_BOUND_MS of the
 *   launcher's exit (killed launcher included);
 * - the run ended within its bound (else it is a hang, and is killed);
 * - for a run that trained to the end: the survivors hold the same weights,
 *   and every sample of every epoch was processed, more than once only where
 *   a lost rank's unreported batch was handed on.
 *
 * Training is the traced example (test/fixtures/traced-train-fixture.ts),
 * slowed so that an epoch lasts long enough to strike in the middle of one.
 */
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { magic } from "../src/wire/Channel.ts"
import { allPids, collectLines, commandLine, environment } from "../test/support/processes.ts"
import type { Hosts } from "../test/support/netns.ts"
import { forge } from "./Forgery.ts"
import { describe, predict, type Prediction, type Scenario, worldOf } from "./Scenario.ts"

const ROOT = resolve(import.meta.dir, "..")
const DATASET = 6_000
const EPOCHS = 3
/** A pause before each batch: an epoch then lasts about a second. */
const BATCH_DELAY_MS = 20
const HEARTBEAT_TIMEOUT_MS = 2_000
const GRACE_MS = 1_000
/** Longest a run may take: the training itself, a lost rank's heartbeat timeout, the graces, and room for a loaded machine. */
const RUN_BOUND_MS = 60_000
/** How long after the launcher's exit the run's processes have to be gone everywhere. */
const ORPHAN_BOUND_MS = 15_000

export interface ScenarioResult {
  readonly scenario: Scenario
  readonly prediction: Prediction
  /** Every way the run differed from the prediction; empty when it held. */
  readonly mismatches: ReadonlyArray<string>
  readonly orphans: ReadonlyArray<string>
  readonly hung: boolean
  readonly seconds: number
}

const policyYaml = (scenario: Scenario): string => {
  switch (scenario.policy) {
    case "kill_all":
      return "kill_all"
    case "elastic":
      // No limit (50% is elastic_half's, and the default's).
      return "{ elastic: { max_failure: none } }"
    case "elastic_max1":
      return "{ elastic: { max_failure: 1 } }"
    case "elastic_half":
      return "{ elastic: { max_failure: 50% } }"
    case "restart":
      return "{ restart: { max_restarts: 3, within: 1m, backoff: { initial: 200ms, max: 1s, factor: 2, jitter: 0 }, scope: one } }"
  }
}

/** The hosts of a topology, by name, in the cluster file's order; the second is the one host-wide faults strike. */
const hostNames = (scenario: Scenario, hosts: Hosts | undefined): ReadonlyArray<string> =>
  scenario.topology === "local" ? ["localhost"] : scenario.topology === "self" ? ["localhost", "selfhost"] : hosts!.hosts.slice(0, 2).map((host) => host.name)

const clusterFile = (scenario: Scenario, run: string, dir: string, trace: string, hosts: Hosts | undefined): string => {
  const local = (devices: number) => `{ host: localhost, devices: ${devices}, path: ${JSON.stringify(ROOT)} }`
  const workers = scenario.topology === "local"
    ? [local(3)]
    : scenario.topology === "self"
    ? [local(2), `{ host: selfhost, devices: 2, agent: self, path: ${JSON.stringify(ROOT)} }`]
    : [hosts!.worker(0, { devices: 2 }), hosts!.worker(1, { devices: 2 })]
  // An agent killed before formation needs a window that stays open: it waits for an operator's start.
  const manual = scenario.moment === "before_formation" && scenario.fault.kind === "agent_kill"
  const file = join(dir, "cluster.yml")
  writeFileSync(file, [
    `name: ${run}`,
    `controller: { host: ${scenario.topology === "netns" ? hosts!.controller : "127.0.0.1"}, port: 0${manual ? ", join: { start: manual }" : ""} }`,
    "workers:",
    ...workers.map((worker) => `  - ${worker}`),
    "job:",
    "  entry: test/fixtures/traced-train-fixture.ts",
    `  args: ["trace=${trace}", "delay=${BATCH_DELAY_MS}", "batch=64"]`,
    `  dataset_size: ${DATASET}`,
    `  epochs: ${EPOCHS}`,
    `  checkpoint: ${join(dir, "checkpoint.json")}`,
    "failure_policy:",
    "  before_formation: kill_all",
    `  after_formation: ${policyYaml(scenario)}`,
    `  grace: ${GRACE_MS}ms`,
    `  heartbeat_timeout: ${HEARTBEAT_TIMEOUT_MS}ms`,
    ""
  ].join("\n"))
  return file
}

/** A process's environment; empty where it cannot be read (another user's, or gone). */
const environmentOf = (pid: number): Record<string, string> => {
  try {
    return environment(pid)
  } catch {
    return {}
  }
}

/** Every process of this run: its name is in the agents' tags, the relays' and ranks' environments. */
export const processesOf = (run: string): Array<{ pid: number; what: string }> =>
  allPids().filter((pid) => pid !== process.pid).flatMap((pid) => {
    const line = commandLine(pid)
    const env = environmentOf(pid)
    const mine = line.includes(run) || Object.values(env).some((value) => value.includes(run))
    return mine ? [{ pid, what: line.slice(0, 120) }] : []
  })

const waitUntil = async (check: () => boolean, deadline: number): Promise<boolean> => {
  while (!check()) {
    if (performance.now() > deadline) return false
    await Bun.sleep(20)
  }
  return true
}

/** Per epoch, which ranks reported each sample. */
const traces = (dir: string): Map<number, Map<number, Array<number>>> => {
  const seen = new Map<number, Map<number, Array<number>>>()
  for (const name of readdirSync(dir).filter((entry) => /^r\d+\.jsonl$/.test(entry))) {
    const rank = Number(name.slice(1, -6))
    // Whole lines only: a rank may be appending one right now.
    const text = readFileSync(join(dir, name), "utf8")
    for (const line of text.slice(0, text.lastIndexOf("\n") + 1).split("\n").filter(Boolean)) {
      let parsed: { epoch: number; indices: Array<number> }
      try {
        parsed = JSON.parse(line)
      } catch {
        continue // a rank killed while writing leaves half a line
      }
      const samples = seen.get(parsed.epoch) ?? new Map<number, Array<number>>()
      seen.set(parsed.epoch, samples)
      for (const index of parsed.indices) samples.set(index, [...(samples.get(index) ?? []), rank])
    }
  }
  return seen
}

/** The run's last state, from its `/events` stream (it sends the final one before the port closes). */
const followEvents = (port: number, address: string, pageToken: string) => {
  let last: { phase?: string; ranks?: Array<{ rank: number; host: string; pid: number | null; state: string }> } | undefined
  const done = (async () => {
    try {
      const response = await fetch(`http://${address}:${port}/events?token=${pageToken}`)
      const reader = response.body!.getReader()
      let buffer = ""
      for (;;) {
        const { done: ended, value } = await reader.read()
        if (ended) return
        buffer += new TextDecoder().decode(value)
        let end: number
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const data = /^data: (.*)$/m.exec(buffer.slice(0, end))
          buffer = buffer.slice(end + 2)
          if (data !== null) last = JSON.parse(data[1]!)
        }
      }
    } catch {
      // The launcher went away: what was seen stands.
    }
  })()
  return { last: () => last, done }
}

export const runScenario = async (scenario: Scenario, hosts?: Hosts): Promise<ScenarioResult> => {
  const prediction = predict(scenario)!
  const started = performance.now()
  const deadline = started + RUN_BOUND_MS
  const run = `chaos-${scenario.seed}-${scenario.id}-${process.pid}`
  const dir = mkdtempSync(join(tmpdir(), "cohort-chaos-"))
  const trace = join(dir, "trace")
  Bun.spawnSync(["mkdir", "-p", trace])
  const file = clusterFile(scenario, run, dir, trace, hosts)
  const names = hostNames(scenario, hosts)
  const mismatches: Array<string> = []
  const extra: Array<{ kill: () => void }> = []
  let hung = false

  const launcher = Bun.spawn([process.execPath, join(ROOT, "src/cli/launch.ts"), file], { cwd: dir, stdout: "pipe", stderr: "pipe", stdin: "ignore" })
  const stdout = collectLines(launcher.stdout as ReadableStream<Uint8Array>)
  const stderr = collectLines(launcher.stderr as ReadableStream<Uint8Array>)
  const line = (pattern: RegExp) => stderr.lines.find((each) => pattern.test(each))
  const exited = launcher.exited.then(() => true)
  let launcherDone = false
  void exited.then(() => (launcherDone = true))
  const waitLine = (pattern: RegExp) => waitUntil(() => launcherDone || line(pattern) !== undefined, deadline)

  try {
    await waitLine(/listening on [\d.]+:\d+/)
    const listening = /listening on ([\d.]+):(\d+)/.exec(line(/listening on/) ?? "")
    const address = listening?.[1] === "0.0.0.0" ? "127.0.0.1" : listening?.[1] ?? "127.0.0.1"
    const port = Number(listening?.[2] ?? 0)
    // The run's pages need its page token: the page URL of the same line carries it.
    const pageToken = /live page: \S*[?&]token=([0-9a-f]+)/.exec(line(/listening on/) ?? "")?.[1] ?? ""
    const events = port > 0 ? followEvents(port, address, pageToken) : undefined
    const state = async () => {
      try {
        return await (await fetch(`http://${address}:${port}/state.json?token=${pageToken}`)).json() as { ranks: Array<{ rank: number; host: string; pid: number | null }> }
      } catch {
        return undefined
      }
    }

    // The self-deployed host's agent, started as its operator would (late, for a slow joiner).
    let selfAgent: ReturnType<typeof Bun.spawn> | undefined
    let selfLines: { readonly lines: Array<string>; readonly done: Promise<void> } | undefined
    if (scenario.topology === "self" && port > 0) {
      await waitLine(/waiting for selfhost to join/)
      const hint = line(/waiting for selfhost to join/) ?? ""
      const saltFile = /--salt-file <a copy of (\S+)>/.exec(hint)?.[1]
      if (scenario.fault.kind === "slow_joiner") await Bun.sleep(1_500)
      selfAgent = Bun.spawn([
        process.execPath, join(ROOT, "src/cli/agent.ts"), "--controller", `127.0.0.1:${port}`, "--host", "selfhost", "--devices", "2",
        ...(saltFile === undefined ? [] : ["--salt-file", join(dir, saltFile)])
      ], { cwd: ROOT, stdout: "pipe", stderr: "ignore", env: { ...process.env, CHAOS_RUN: run } })
      // Its ranks' lines (the checksums) come out of the agent, not the launcher.
      selfLines = collectLines(selfAgent.stdout as ReadableStream<Uint8Array>)
      extra.push({ kill: () => selfAgent?.kill("SIGKILL") })
    }
    if (scenario.fault.kind === "stalled_hello" && port > 0) {
      const socket = await Bun.connect({ hostname: address, port, socket: { data() {} } })
      socket.write(magic.join)
      extra.push({ kill: () => socket.terminate() })
    }

    const victimHost = names.at(-1)!
    const agentPid = () =>
      scenario.topology === "self"
        ? selfAgent?.pid
        : allPids().find((pid) => new RegExp(`bun\\S* src/cli/agent\\.ts --tag ${run}/${victimHost}(\\s|$)`).test(commandLine(pid)))
    const relayPid = () =>
      allPids().find((pid) => {
        const spec = environmentOf(pid).COHORT_RELAY_SPEC
        return spec !== undefined && spec.includes(run) && spec.includes(`"host":${JSON.stringify(victimHost)}`)
      })
    const victimRank = async () => {
      const ranks = (await state())?.ranks ?? []
      return ranks.filter((rank) => rank.host === victimHost).sort((a, b) => a.rank - b.rank).at(scenario.topology === "local" ? 1 : 0)
    }

    // The moment.
    switch (scenario.moment) {
      case "before_formation":
        if (scenario.fault.kind === "agent_kill") await waitLine(new RegExp(`${victimHost} joined with ranks`))
        break
      case "forming":
        await waitLine(/world formed: /)
        break
      case "mid_epoch":
        await waitLine(/epoch 1\/\d+ done/)
        break
      case "teardown":
        await waitLine(/training done: /)
        break
    }

    // The fault.
    const fault = scenario.fault
    switch (fault.kind) {
      case "rank_signal":
      case "rank_freeze": {
        const victim = await victimRank()
        if (victim?.pid != null) process.kill(victim.pid, fault.kind === "rank_freeze" ? "SIGSTOP" : fault.signal)
        else mismatches.push(`no victim rank on ${victimHost} to strike`)
        break
      }
      case "rank_exit": {
        // The rank exits by itself: the traced fixture's exit file names it.
        const victim = await victimRank()
        if (victim === undefined) mismatches.push(`no victim rank on ${victimHost}`)
        else {
          // Written aside and renamed into place: the fixture reads the file as soon as it exists, and an empty one reads as 0.
          writeFileSync(join(trace, `exit-r${victim.rank}.next`), String(fault.code))
          renameSync(join(trace, `exit-r${victim.rank}.next`), join(trace, `exit-r${victim.rank}`))
        }
        break
      }
      case "relay_kill": {
        const pid = relayPid()
        if (pid !== undefined) process.kill(pid, "SIGKILL")
        else mismatches.push(`no relay of ${victimHost} found`)
        break
      }
      case "agent_kill": {
        const pid = agentPid()
        if (pid !== undefined) process.kill(pid, "SIGKILL")
        else mismatches.push(`no agent of ${victimHost} found`)
        break
      }
      case "launcher_signal":
        launcher.kill(fault.signal)
        break
      case "link_cut":
        hosts!.link(hosts!.hosts[1]!, "down")
        break
      case "forged_frames": {
        const forged = await forge(address, port, victimHost)
        extra.push({ kill: forged.close })
        if (forged.answered.length > 0) mismatches.push(`forged tries answered: ${forged.answered.join(", ")}`)
        break
      }
      default:
        break
    }

    const ended = await Promise.race([exited, Bun.sleep(Math.max(0, deadline - performance.now())).then(() => false)])
    if (!ended) {
      hung = true
      launcher.kill("SIGKILL")
      await launcher.exited
    }
    await Promise.all([stdout.done, stderr.done])
    await Promise.race([selfLines?.done, Bun.sleep(2_000)])
    await Promise.race([events?.done, Bun.sleep(1_000)])

    // Exit status and verdict.
    const status = launcher.signalCode !== null ? launcher.signalCode : launcher.exitCode
    if (status !== prediction.exit) mismatches.push(`exit ${status}, predicted ${prediction.exit}`)
    const verdict = stderr.lines.at(-1) ?? ""
    if (prediction.verdict !== undefined && !prediction.verdict.test(verdict)) mismatches.push(`verdict "${verdict}", predicted ${prediction.verdict}`)
    const phase = events?.last()?.phase
    if (prediction.phase !== undefined && phase !== prediction.phase) mismatches.push(`last phase ${phase}, predicted ${prediction.phase}`)

    // Training: the survivors agree, and the work was done, each sample once.
    if (prediction.trained && !hung) {
      const checksums = [...stdout.lines, ...(selfLines?.lines ?? [])].flatMap((each) => /final weights checksum (\w+)/.exec(each)?.[1] ?? [])
      const expected = worldOf(scenario.topology) - prediction.lost
      if (checksums.length !== expected || new Set(checksums).size !== 1) mismatches.push(`checksums ${checksums.join(",")}, predicted ${expected} equal`)
      const lost = new Set((events?.last()?.ranks ?? []).filter((rank) => rank.state === "dead").map((rank) => rank.rank))
      const seen = traces(trace)
      for (let epoch = 1; epoch <= EPOCHS; epoch++) {
        const samples = seen.get(epoch) ?? new Map<number, Array<number>>()
        const missing = DATASET - [...samples.keys()].filter((index) => index >= 0 && index < DATASET).length
        if (missing > 0) mismatches.push(`epoch ${epoch}: ${missing} sample(s) never processed`)
        // A repeat is a lost rank's batch that never reached the coordinator, handed on; a restarted rank's own is the same.
        const repeats = [...samples.values()].filter((ranks) => ranks.length > 1 && !ranks.some((rank) => lost.has(rank) || scenario.policy === "restart"))
        if (repeats.length > 0) mismatches.push(`epoch ${epoch}: ${repeats.length} sample(s) processed twice by ranks that lived`)
      }
    }

    // Nothing of the run is left anywhere (a cut host has to notice the silence first).
    const orphanDeadline = performance.now() + ORPHAN_BOUND_MS
    await waitUntil(() => processesOf(run).length === 0, orphanDeadline)
    const orphans = processesOf(run).map((each) => `${each.pid} ${each.what}`)
    return { scenario, prediction, mismatches, orphans, hung, seconds: (performance.now() - started) / 1000 }
  } finally {
    for (const each of extra) each.kill()
    if (!launcherDone) launcher.kill("SIGKILL")
    for (const { pid } of processesOf(run)) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // already gone
      }
    }
    if (scenario.fault.kind === "link_cut") hosts?.link(hosts.hosts[1]!, "up")
    rmSync(dir, { recursive: true, force: true })
  }
}

export const summary = (result: ScenarioResult): string => {
  const ok = result.mismatches.length === 0 && result.orphans.length === 0 && !result.hung
  const problems = [...result.mismatches, ...result.orphans.map((orphan) => `orphan: ${orphan}`), ...(result.hung ? ["hung"] : [])]
  return `${ok ? "ok  " : "FAIL"} ${describe(result.scenario)} → ${result.prediction.outcome} (${result.seconds.toFixed(1)} s)${ok ? "" : `\n       ${problems.join("\n       ")}`}`
}
