/**
 * A flodl user's cluster file and habits (issue 22): `ssh.options` as `-o` settings, a tunnel's
 * forward that no user option can undo, orchestrator-only workers, and flodl's key names.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import { hostname } from "node:os"
import { join } from "node:path"
import { describePlan, hostRunSpec, makePlan, type Plan, windowRules, worldText } from "../src/launcher/run/Plan.ts"
import { preflight } from "../src/launcher/run/Preflight.ts"
import { batchModeWarning, sshCommand } from "../src/launcher/hosts/SshFanOut.ts"
import { type ClusterConfig, parseCluster, type Worker } from "../src/config/ClusterConfig.ts"
import { entryPoints } from "../src/cli/entryPoints.ts"
import { loadWithWarnings } from "./support/config-load.ts"

/** The config and the warnings its load said, in the order said. */
const load = (text: string) => loadWithWarnings(text)

const refused = (text: string): Promise<ReadonlyArray<string>> =>
  Effect.runPromise(Effect.flip(parseCluster(text, "cluster.yml"))).then((errors) => errors.errors.map((error) => error.message))

const planOf = (config: ClusterConfig): Plan => {
  const plan = makePlan(config, entryPoints)
  if (Either.isLeft(plan)) throw new Error(plan.left.message)
  return plan.right
}

const entry = "job: { entry: examples/train.ts }"

const remote = (ssh: string, more = "") => `workers:\n  - host: node-b\n    devices: 2\n    ssh: ${ssh}\n${more}controller: { host: 10.0.0.1 }\n${entry}\n`

describe("ssh.options, as flodl writes them", () => {
  test("a Key=Value entry is an -o option, a flag and the value after it pass as written", async () => {
    const { config } = await load(remote(`{ options: ["StrictHostKeyChecking=no", "-o", "ServerAliveInterval=5", "-4", "-oConnectTimeout=3", "ConnectTimeout = 7"] }`))
    expect(sshCommand(config.workers[0]!, "true")).toEqual([
      "ssh",
      "-o", "StrictHostKeyChecking=no",
      "-o", "ServerAliveInterval=5",
      "-4",
      "-oConnectTimeout=3",
      "-o", "ConnectTimeout = 7",
      "-T", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
      "node-b",
      "bash --norc --noprofile -c 'true'"
    ])
  })

  test("an entry that is neither a setting nor a flag is refused at its place", async () => {
    expect(await refused(remote(`{ options: [StrictHostKeyChecking, "-o", "BatchMode=yes"] }`))).toEqual([
      `cluster.yml: workers[0].ssh.options[0] (line 4, col 22): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "StrictHostKeyChecking"`
    ])
  })

  test("a flag that takes a value, given last, is refused", async () => {
    expect(await refused(remote(`{ options: ["StrictHostKeyChecking=no", "-o"] }`))).toEqual([
      `cluster.yml: workers[0].ssh.options[1] (line 4, col 50): ssh's -o takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`
    ])
  })

  test("BatchMode turned off is warned about in both forms, any case, spaces trimmed; yes is not", async () => {
    const warning = async (options: string) => batchModeWarning((await load(remote(`{ options: ${options} }`))).config.workers[0]!)
    expect(await warning(`["BatchMode=no"]`)).toBe(
      "node-b: ssh.options set BatchMode=no: cohort's ssh is not interactive, so ssh may wait for a password or host key answer nobody types; remove it unless this host needs it"
    )
    expect(await warning(`["batchmode=No"]`)).toContain("ssh.options set batchmode=No:")
    expect(await warning(`["  BatchMode = ask  "]`)).toContain("ssh.options set BatchMode = ask:")
    expect(await warning(`["-o", "BATCHMODE=no"]`)).toContain("ssh.options set BATCHMODE=no:")
    expect(await warning(`["-oBatchMode=no"]`)).toContain("ssh.options set BatchMode=no:")
    expect(await warning(`["BatchMode=yes"]`)).toBeUndefined()
    expect(await warning(`["BatchMode = YES"]`)).toBeUndefined()
    expect(await warning(`["StrictHostKeyChecking=no"]`)).toBeUndefined()
  })

  test("--dry-run's preflight says the BatchMode warning too", async () => {
    // Port 1 on loopback refuses at once: the preflight fails fast, after the warning.
    const worker: Worker = {
      host: "node-b",
      devices: { _tag: "Count", count: 1 },
      path: ".",
      env: {},
      ssh: { target: "127.0.0.1", user: undefined, port: 1, identityFile: undefined, options: ["-o", "BatchMode=no"] },
      tunnel: false,
      agent: undefined
    }
    const warnings: Array<string> = []
    const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => {
      if (logLevel._tag === "Warning") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
    }))
    const problems = await Effect.runPromise(preflight([worker], "demo").pipe(Effect.provide(capture)))
    expect(warnings).toEqual([
      "node-b: ssh.options set BatchMode=no: cohort's ssh is not interactive, so ssh may wait for a password or host key answer nobody types; remove it unless this host needs it"
    ])
    expect(problems.length).toBe(1)
  })
})

describe("a tunnel's forward comes before the user's options", () => {
  test("-R and ExitOnForwardFailure=yes first, so a user's ExitOnForwardFailure=no cannot win", async () => {
    const { config } = await load(remote(`{ options: ["ExitOnForwardFailure=no"] }`, "    tunnel: true\n"))
    expect(sshCommand(config.workers[0]!, "true", 29400)).toEqual([
      "ssh",
      "-R", "127.0.0.1:29400:127.0.0.1:29400",
      "-o", "ExitOnForwardFailure=yes",
      "-o", "ExitOnForwardFailure=no",
      "-T", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
      "node-b",
      "bash --norc --noprofile -c 'true'"
    ])
  })
})

describe("orchestrator-only workers (devices: 0 or [])", () => {
  const file = [
    "workers:",
    "  - { host: localhost, devices: 2 }",
    "  - { host: orchestrator, devices: 0 }",
    "  - { host: bastion, devices: [], ssh: { user: ops } }",
    entry
  ].join("\n")

  test("are declared, start no agent, and count in neither the world nor the join window", async () => {
    const plan = planOf((await load(file)).config)
    expect(plan.world).toBe(2)
    expect(plan.hosts.map((host) => [host.worker.host, host.start])).toEqual([["localhost", "in-process"]])
    expect(plan.declaredOnly.map((worker) => worker.host)).toEqual(["orchestrator", "bastion"])
    expect(plan.config.controller.join.minRanks).toBe(2)
    expect(plan.config.controller.join.targetRanks).toBe(2)
    // Every interface only when some agent dials in from elsewhere: none does.
    expect(plan.bindAddress).toBe("127.0.0.1")
  })

  test("--dry-run says so", async () => {
    const lines = describePlan(planOf((await load(file)).config)).split("\n")
    expect(lines[0]).toBe("run cluster: 2 rank(s) on 1 host(s)")
    expect(lines).toContain("  [orchestrator] declared with devices: 0: runs nothing, no agent starts there")
    expect(lines).toContain("  [bastion] declared with devices: []: runs nothing, no agent starts there")
  })

  test("a file where every worker runs nothing is refused", async () => {
    const plan = makePlan((await load(`workers:\n  - { host: localhost, devices: 0 }\n${entry}\n`)).config, entryPoints)
    expect(Either.isLeft(plan) ? plan.left.problems : []).toEqual([
      "workers: every worker declares devices: 0 or [] (runs nothing); give at least one worker devices to run ranks on"
    ])
  })
})

describe("flodl's key names", () => {
  const file = [
    "controller:",
    "  join: { min_rank_start: 1, join_timeout_secs: 30, max_join_timeout_secs: 90 }",
    "workers:",
    "  - { host: localhost, local_devices: 2, nccl_socket_ifname: eth0 }",
    entry
  ].join("\n")

  test("are read as cohort's keys, each with a one-line warning naming cohort's key, in document order", async () => {
    const { config, warnings } = await load(file)
    expect(config.controller.join.minRanks).toBe(1)
    expect(config.controller.join.timeoutMs).toBe(30_000)
    expect(config.controller.join.maxTimeoutMs).toBe(90_000)
    expect(config.workers[0]!.devices).toEqual({ _tag: "Count", count: 2 })
    expect(config.workers[0]!.env).toEqual({ NCCL_SOCKET_IFNAME: "eth0" })
    expect(warnings).toEqual([
      "cluster.yml: controller.join.min_rank_start (line 2, col 11): min_rank_start is flodl's name: cohort reads it as min_ranks; rename it to min_ranks to quiet this note",
      "cluster.yml: controller.join.join_timeout_secs (line 2, col 30): join_timeout_secs is flodl's name: cohort reads it as timeout (flodl's whole seconds, as a duration); rename it to timeout to quiet this note",
      "cluster.yml: controller.join.max_join_timeout_secs (line 2, col 53): max_join_timeout_secs is flodl's name: cohort reads it as max_timeout (flodl's whole seconds, as a duration); rename it to max_timeout to quiet this note",
      "cluster.yml: workers[0].local_devices (line 4, col 24): local_devices is flodl's name: cohort reads it as devices; rename it to devices to quiet this note",
      "cluster.yml: workers[0].nccl_socket_ifname (line 4, col 42): nccl_socket_ifname is flodl's name: cohort reads it as env NCCL_SOCKET_IFNAME (the ranks' env on this host); write env: { NCCL_SOCKET_IFNAME: eth0 } to quiet this note"
    ])
  })

  test("nccl_socket_ifname reaches every rank's env", async () => {
    const lines = describePlan(planOf((await load(file)).config)).split("\n")
    expect(lines.filter((line) => line.includes("NCCL_SOCKET_IFNAME"))).toEqual(["      NCCL_SOCKET_IFNAME=eth0", "      NCCL_SOCKET_IFNAME=eth0"])
    // A remote host's agent builds its ranks' env from what its Accept carries.
    expect(hostRunSpec((await load(file)).config, "localhost", 10_000).env).toEqual({ NCCL_SOCKET_IFNAME: "eth0" })
  })

  test("both names at once, a bad value, or a contradicting env are refused at the flodl key", async () => {
    expect(await refused([
      "controller:",
      "  join: { min_ranks: 1, min_rank_start: 1, join_timeout_secs: 1.5 }",
      "workers:",
      "  - { host: localhost, devices: 2, local_devices: [0], nccl_socket_ifname: eth0, env: { NCCL_SOCKET_IFNAME: ib0 } }",
      entry
    ].join("\n"))).toEqual([
      "cluster.yml: controller.join.min_rank_start (line 2, col 25): min_rank_start is flodl's name for min_ranks, which is given too: keep one of them",
      "cluster.yml: controller.join.join_timeout_secs (line 2, col 63): expected a whole number of seconds from 1 to 604800, got 1.5",
      "cluster.yml: workers[0].local_devices (line 4, col 36): local_devices is flodl's name for devices, which is given too: keep one of them",
      "cluster.yml: workers[0].nccl_socket_ifname (line 4, col 56): env sets NCCL_SOCKET_IFNAME to ib0 and nccl_socket_ifname says eth0: keep one of them"
    ])
  })
})

describe("the launcher's own host runs its agent in-process, ssh: or not", () => {
  test("its name, localhost and a loopback address are this machine: the ssh: block is not used, and a note says so", async () => {
    const name = hostname()
    const { config } = await load([
      "workers:",
      `  - { host: ${name}, devices: 1, ssh: { user: ops } }`,
      "  - { host: 127.0.0.1, devices: 1, ssh: { user: ops, port: 2222 } }",
      "  - { host: node-b, devices: 1, ssh: { user: ops } }",
      "  - { host: localhost, devices: 1, agent: ssh }",
      "controller: { host: 10.0.0.1 }",
      entry
    ].join("\n"))
    const plan = planOf(config)
    expect(plan.hosts.map((host) => [host.worker.host, host.start])).toEqual([[name, "in-process"], ["127.0.0.1", "in-process"], ["node-b", "ssh"], ["localhost", "ssh"]])
    expect(plan.notes).toEqual([
      `workers[0].ssh: ${name} is this machine: its agent runs inside the launcher and ssh: is not used (agent: ssh to go through ssh anyway)`,
      "workers[1].ssh: 127.0.0.1 is this machine: its agent runs inside the launcher and ssh: is not used (agent: ssh to go through ssh anyway)"
    ])
  })

  test("so a tunnel there is refused, as the reference refuses it", async () => {
    const plan = makePlan((await load(`workers:\n  - { host: localhost, devices: 1, tunnel: true, ssh: { user: ops } }\n${entry}\n`)).config, entryPoints)
    expect(Either.isLeft(plan) ? plan.left.problems : []).toEqual(["workers[0].tunnel: localhost is this machine: its agent runs inside the launcher, there is nothing to tunnel"])
  })
})

describe("devices: all on another host, resolved there when it joins", () => {
  const file = [
    "workers:",
    "  - { host: localhost, devices: 2 }",
    "  - { host: gpu-b, devices: all, path: work/run }",
    "  - { host: gpu-c, devices: 1 }",
    "controller: { host: 10.0.0.1 }",
    "job: { command: [python3, train.py] }"
  ].join("\n")

  test("is accepted: the world and the later hosts' numbers wait for the join; every host is the quorum and the target", async () => {
    const plan = planOf((await load(file)).config)
    expect(plan.world).toBeUndefined()
    expect(plan.knownRanks).toBe(3)
    expect(plan.hosts.map((host) => [host.worker.host, host.devices?.devices.length, host.firstRank])).toEqual([["localhost", 2, 0], ["gpu-b", undefined, 2], ["gpu-c", 1, undefined]])
    // At least one rank from gpu-b: 2 + 1 + 1.
    expect(windowRules(plan)).toEqual({ minRanks: 4, targetRanks: undefined, everyHostForQuorum: true, everyHostForTarget: true })
    expect(worldText(plan)).toBe("3 rank(s) and every GPU of gpu-b")
  })

  test("min_ranks and target_ranks the file gives still count in ranks", async () => {
    const plan = planOf((await load(file.replace("controller: { host: 10.0.0.1 }", "controller: { host: 10.0.0.1, join: { min_ranks: 3, target_ranks: 8 } }"))).config)
    expect(windowRules(plan)).toEqual({ minRanks: 3, targetRanks: 8, everyHostForQuorum: false, everyHostForTarget: false })
  })

  test("--dry-run: resolved when the host joins; numbers after it and the world size said as not known yet; a relative path from the login directory", async () => {
    const lines = describePlan(planOf((await load(file)).config)).split("\n")
    expect(lines[0]).toBe("run cluster: 3 rank(s) and every GPU of gpu-b on 3 host(s)")
    expect(lines[2]).toStartWith("join window: min every host (4+ ranks), target every host, ")
    expect(lines).toContain("  [gpu-b:all] in ~/work/run: devices: all, resolved when the host joins: one rank per GPU its agent finds there")
    expect(lines).toContain("  [localhost:cpu:r1] in " + join(import.meta.dir, "..") + ": python3 train.py")
    expect(lines).toContain("  [gpu-c:cpu:r?] in ~: python3 train.py")
    const gpuC = lines.slice(lines.indexOf("  [gpu-c:cpu:r?] in ~: python3 train.py"))
    expect(gpuC).toContain("      RANK=<numbered when the hosts join>")
    expect(gpuC).toContain("      WORLD_SIZE=<counted when every host has joined>")
    expect(gpuC).toContain("      LOCAL_RANK=0")
    // The first host's numbers are known: hosts join in declaration order.
    const localhost = lines.slice(lines.indexOf("  [localhost:cpu:r0] in " + join(import.meta.dir, "..") + ": python3 train.py"))
    expect(localhost).toContain("      RANK=0")
  })
})
