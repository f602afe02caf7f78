/**
 * The plan of a run, before anything starts: which hosts, which devices,
 * which ranks (numbered in declaration order, which is the admission order
 * when every host joins promptly), what each rank runs and with which
 * environment. `--dry-run` prints it; the launcher checks it first, so that
 * every mistake a file cannot show (a missing entry module, a command not on
 * PATH, a host that is not this machine) is a clear input error before any
 * process starts.
 */
import { existsSync, statSync } from "node:fs"
import { hostname, networkInterfaces } from "node:os"
import { isAbsolute, resolve } from "node:path"
import * as Data from "effect/Data"
import * as Either from "effect/Either"
import { type ClusterConfig, runsNothing, type Worker } from "../../config/ClusterConfig.ts"
import type { HostRunSpec } from "../../wire/messages/JoinMessages.ts"
import { formatDuration } from "../../config/reading/Duration.ts"
import { strategyToYaml } from "../../config/FailurePolicy.ts"
import { policyTable } from "../../kernel/policy/PolicyTable.ts"
import { graceOf, wireMillis } from "../../kernel/Shutdown.ts"
import { isLoopbackAddress } from "../../wire/Trust.ts"
import { deviceTag, type HostDevices, resolveDevices } from "../../agent/Devices.ts"
import { internalEnvironment, rankEnvironment } from "../../agent/RankEnvironment.ts"
import type { EntryPoints } from "../../kernel/EntryPoints.ts"

/** A mistake in what the user gave (file, arguments, environment): exit status 2. */
export class LaunchInputError extends Data.TaggedError("LaunchInputError")<{ readonly problems: ReadonlyArray<string> }> {
  override get message(): string {
    return this.problems.join("\n")
  }
}

/** How a host's agent starts: inside the launcher (this machine), over ssh, or by someone else (`bun run agent`). */
export type AgentStart = "in-process" | "ssh" | "self"

export interface HostPlan {
  readonly worker: Worker
  readonly start: AgentStart
  /**
   * Probed here for this machine; as declared for the others; undefined for `devices: all` on another
   * host, which its agent resolves there and brings in its join (as the reference's agents do).
   */
  readonly devices: HostDevices | undefined
  /** The first of the host's ranks, if hosts join in declaration order; undefined after a host whose count is not known yet. */
  readonly firstRank: number | undefined
}

export interface Plan {
  readonly config: ClusterConfig
  /** Where the programs this run starts are: given by the entry point (see EntryPoints). */
  readonly entries: EntryPoints
  readonly hosts: ReadonlyArray<HostPlan>
  /** Workers declared with `devices: 0` or `[]`: in the file, but no agent starts there and none counts in the world. */
  readonly declaredOnly: ReadonlyArray<Worker>
  /** Every declared rank; undefined while a host's count is resolved only when it joins (`devices: all` elsewhere). */
  readonly world: number | undefined
  /** The ranks declared where the count is known (all of them when `world` is). */
  readonly knownRanks: number
  /** What the plan decided that the file did not say outright (an `ssh:` block not used on this machine): said at start. */
  readonly notes: ReadonlyArray<string>
  /** Where the mux listens: loopback when every agent runs inside the launcher, else every interface. */
  readonly bindAddress: string
  /** The address this machine's agents dial. */
  readonly dialAddress: string
  /** The address other hosts' agents dial (`controller.host`). */
  readonly remoteDialAddress: string
}

/** The join window's rank rules for a plan: what the file says, else every declared rank, or every declared host where a count is known only at its join. */
export const windowRules = (plan: Pick<Plan, "config" | "world" | "knownRanks" | "hosts">) => {
  const join = plan.config.controller.join
  const unresolved = plan.hosts.filter((host) => host.devices === undefined).length
  return {
    // A host that resolves its devices there brings at least one.
    minRanks: join.minRanks ?? plan.world ?? plan.knownRanks + unresolved,
    targetRanks: join.targetRanks ?? (join.start === "manual" ? undefined : plan.world),
    everyHostForQuorum: join.minRanks === undefined && plan.world === undefined,
    everyHostForTarget: join.targetRanks === undefined && plan.world === undefined
  }
}

/** "4 rank(s)", or "3 rank(s) and every GPU of gpu-b" while a host's count is resolved at its join. */
export const worldText = (plan: Pick<Plan, "world" | "knownRanks" | "hosts">): string => {
  if (plan.world !== undefined) return `${plan.world} rank(s)`
  const unresolved = plan.hosts.filter((host) => host.devices === undefined).map((host) => host.worker.host)
  return `${plan.knownRanks} rank(s) and every GPU of ${unresolved.join(", ")}`
}

/** The workers whose agents the launcher starts over ssh. */
export const sshWorkers = (plan: Plan): Array<Worker> => plan.hosts.filter((host) => host.start === "ssh").map((host) => host.worker)

/**
 * How `worker`'s agent starts. This machine (its name, an address of its own, loopback) runs its agent
 * inside the launcher whether or not the entry has an `ssh:` block, as the reference does: a file shared
 * across machines gives every host one, and ssh-ing into the launcher's own host would need sshd and a key
 * there for nothing. `agent: ssh` still forces the session, for whoever wants exactly that.
 */
export const agentStart = (worker: Worker): AgentStart =>
  worker.agent === "self" ? "self" : worker.agent === "ssh" || !isThisHost(worker.host) ? "ssh" : "in-process"

/** A host's devices as the file declares them, for a host this machine cannot probe; undefined for `all`, which that host resolves. */
const declaredDevices = (worker: Worker): HostDevices | undefined => {
  const { devices } = worker
  if (devices._tag === "All") return undefined
  return devices._tag === "Count"
    ? { devices: Array.from({ length: devices.count }, (_, slot) => ({ kind: "cpu" as const, slot })), labels: Array.from({ length: devices.count }, () => "cpu") }
    : { devices: devices.indices.map((index) => ({ kind: "gpu" as const, index })), labels: devices.indices.map(() => "gpu") }
}

/** Whether `host` names this machine: loopback, its host name, or one of its addresses. */
export const isThisHost = (host: string): boolean => {
  if (isLoopbackAddress(host)) return true
  const name = hostname()
  if (host === name || host === name.split(".")[0]) return true
  return Object.values(networkInterfaces()).some((addresses) => addresses?.some((address) => address.address === host))
}

const checkProgram = (config: ClusterConfig, worker: Worker, where: string): string | undefined => {
  const cwd = resolve(worker.path)
  if (!existsSync(cwd) || !statSync(cwd).isDirectory()) {
    return `${where}.path: ${worker.path} is not a directory on ${worker.host} (resolved to ${cwd}); give the project checkout's path`
  }
  const program = config.job.program
  if (program._tag === "Entry") {
    const file = resolve(cwd, program.entry)
    return existsSync(file) ? undefined : `job.entry: ${program.entry} does not exist (looked for ${file}); give the path of a TypeScript module, relative to the worker's path`
  }
  const command = program.command[0]!
  const found = command.includes("/") ? existsSync(resolve(cwd, command)) : Bun.which(command, { cwd }) !== null
  return found ? undefined : `job.command: "${command}" is not found ${command.includes("/") ? `(looked in ${cwd})` : "on PATH"}; install it or give its full path`
}

export const makePlan = (config: ClusterConfig, entries: EntryPoints): Either.Either<Plan, LaunchInputError> => {
  const problems: Array<string> = []
  const hosts: Array<HostPlan> = []
  const declaredOnly: Array<Worker> = []
  const notes: Array<string> = []
  let next: number | undefined = 0
  let known = 0
  config.workers.forEach((worker, index) => {
    const where = `workers[${index}]`
    // flodl's orchestrator-only entry: nothing to start, dial, tunnel or check there.
    if (runsNothing(worker)) {
      declaredOnly.push(worker)
      return
    }
    const start = agentStart(worker)
    if (start === "in-process" && worker.ssh !== undefined) {
      notes.push(`${where}.ssh: ${worker.host} is this machine: its agent runs inside the launcher and ssh: is not used (agent: ssh to go through ssh anyway)`)
    }
    if (worker.tunnel) {
      const refused = start === "in-process"
        ? `${where}.tunnel: ${worker.host} is this machine: its agent runs inside the launcher, there is nothing to tunnel`
        : start === "self"
        ? `${where}.tunnel: a tunnel rides the launcher's ssh session, and ${worker.host} starts its own agent (agent: self); remove one of them`
        : config.job.backend === "nccl"
        ? `${where}.tunnel: backend nccl connects the ranks to each other directly, which a tunnel to the launcher cannot carry; remove tunnel or use a cpu backend`
        : undefined
      if (refused !== undefined) problems.push(refused)
    }
    if (start === "ssh" && !worker.tunnel && isLoopbackAddress(config.controller.host) && !isLoopbackAddress(worker.ssh?.target ?? worker.host)) {
      problems.push(
        `controller.host: ${config.controller.host} is this machine's loopback, which ${worker.host} cannot reach; ` +
          "give an address of this machine that the workers can dial (or tunnel: true on the worker)"
      )
    }
    const devices = start === "in-process" ? resolveDevices(worker.host, worker.devices) : declaredDevices(worker)
    if (typeof devices === "string") {
      problems.push(`${where}.devices: ${devices}`)
      return
    }
    // Another host's checkout is checked by the agent there.
    const program = start === "in-process" ? checkProgram(config, worker, where) : undefined
    if (program !== undefined && !problems.includes(program)) problems.push(program)
    hosts.push({ worker, start, devices, firstRank: next })
    // After a host whose count only its join tells, later hosts' numbers are not known either.
    next = devices === undefined || next === undefined ? undefined : next + devices.devices.length
    known += devices?.devices.length ?? 0
  })
  if (problems.length === 0 && hosts.length === 0) {
    problems.push("workers: every worker declares devices: 0 or [] (runs nothing); give at least one worker devices to run ranks on")
  }
  if (problems.length > 0) return Either.left(new LaunchInputError({ problems }))
  const world = next
  const { minRanks, targetRanks } = config.controller.join
  if (world !== undefined && minRanks !== undefined && minRanks > world) {
    return Either.left(new LaunchInputError({ problems: [`controller.join.min_ranks: ${minRanks} ranks can never join: the workers bring ${world}`] }))
  }
  if (world !== undefined && targetRanks !== undefined && targetRanks > world) {
    return Either.left(new LaunchInputError({ problems: [`controller.join.target_ranks: ${targetRanks} ranks can never join: the workers bring ${world}`] }))
  }
  // Loopback is enough when no agent dials in from elsewhere except through an ssh tunnel, or when the user gave
  // a loopback controller.host: only an agent on this machine dials that (an ssh host that cannot is refused
  // above), and every interface would open the port wider than asked. (The default 127.0.0.1 is not such a
  // choice: a remote `agent: self` host dials whichever address of this machine it reaches.)
  const loopback = (config.controller.hostWritten === true && isLoopbackAddress(config.controller.host)) ||
    hosts.every((host) => host.start === "in-process" || (host.start === "ssh" && host.worker.tunnel))
  return Either.right({
    config,
    entries,
    hosts,
    declaredOnly,
    world,
    knownRanks: known,
    notes,
    bindAddress: loopback ? "127.0.0.1" : "0.0.0.0",
    dialAddress: "127.0.0.1",
    remoteDialAddress: config.controller.host
  })
}

const quote = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)

/** The plan as `--dry-run` prints it. */
/** What an admitted host runs, as its Accept carries it: a host not in the file gets the cluster's env alone. */
export const hostRunSpec = (
  config: ClusterConfig,
  host: string,
  heartbeatTimeoutMs: number,
  worker: ClusterConfig["workers"][number] | undefined = config.workers.find((candidate) => candidate.host === host)
): HostRunSpec => {
  const { job } = config
  return {
    run: config.name,
    program: job.program,
    args: job.args,
    backend: job.backend,
    datasetSize: job.datasetSize,
    epochs: job.epochs,
    cadence: job.backend === "cpu_cadence" || job.backend === "cpu_async" ? job.cadence : 1,
    ...(job.checkpointPickle === true ? { checkpointPickle: true } : {}),
    env: { ...config.env, ...worker?.env },
    graceMs: wireMillis(graceOf(config.failurePolicy)),
    heartbeatTimeoutMs
  }
}

/** Where a run's consensus checkpoint lives unless `job.checkpoint` says otherwise. */
export const checkpointPath = (config: ClusterConfig): string => config.job.checkpoint ?? `.cohort/checkpoints/${config.name}.json`

const trainingLine = (config: ClusterConfig): string => {
  const job = config.job
  if (job.datasetSize === 0) return ""
  const sync = job.backend === "cpu_cadence" || job.backend === "cpu_async" ? `, sync every ${job.cadence} step(s)` : ""
  const outer = job.outerOptimizer === undefined ? "" : `, outer optimizer ${job.outerOptimizer.kind} (lr ${job.outerOptimizer.lr}, momentum ${job.outerOptimizer.momentum})`
  return `; ${job.datasetSize} samples × ${job.epochs} epoch(s)${sync}${outer}; checkpoint ${checkpointPath(config)}`
}

export const describePlan = (plan: Plan): string => {
  const { config } = plan
  const join = config.controller.join
  const rules = windowRules(plan)
  const min = rules.everyHostForQuorum ? `every host (${rules.minRanks}+ ranks)` : `${rules.minRanks}`
  const target = rules.targetRanks ?? (rules.everyHostForTarget && join.start !== "manual" ? "every host" : "none")
  const lines = [
    `run ${config.name}: ${worldText(plan)} on ${plan.hosts.length} host(s)`,
    `port: ${plan.bindAddress}:${config.controller.port === 0 ? "<a free port, printed at start>" : config.controller.port}`,
    `join window: min ${min}, target ${target}, timeout ${formatDuration(join.timeoutMs)}, ` +
      `max ${formatDuration(join.maxTimeoutMs)}, start ${join.start}`,
    `backend: ${config.job.backend}` + trainingLine(config),
    ...(config.job.backend === "nccl" && config.job.program._tag === "Command" && config.job.datasetSize > 0
      ? ["  not checked here: whether each host's torch has NCCL and sees its GPUs (cohort.init() checks it there, and says so in one line)"]
      : []),
    "ranks (numbered in the order hosts join; this is declaration order):"
  ]
  const program = config.job.program
  for (const { devices, firstRank, start, worker } of plan.hosts) {
    // Another host's shell starts in the login directory, which a relative path is taken from (as ssh's `cd` does).
    const folder = start === "in-process" ? resolve(worker.path) : start === "ssh" && !isAbsolute(worker.path) ? (worker.path === "." ? "~" : `~/${worker.path}`) : worker.path
    if (devices === undefined) {
      lines.push(`  [${worker.host}:all] in ${folder}: devices: all, resolved when the host joins: one rank per GPU its agent finds there`)
      continue
    }
    devices.devices.forEach((device, slot) => {
      // Numbers after a host counted only at its join are known only then.
      const rank = firstRank === undefined ? undefined : firstRank + slot
      const command = program._tag === "Entry"
        ? `bun ${plan.entries.rank}  # runs ${program.entry}${config.job.args.length === 0 ? "" : ` with args ${config.job.args.map(quote).join(" ")}`}`
        : [...program.command, ...config.job.args].map(quote).join(" ")
      const env = rankEnvironment({
        inherited: {},
        clusterEnv: config.env,
        hostEnv: worker.env,
        placement: { rank: rank ?? 0, localRank: slot, worldSize: plan.world ?? 0, localWorldSize: devices.devices.length, groupRank: plan.hosts.findIndex((host) => host.worker === worker), device },
        torchrun: program._tag === "Command" ? { addr: plan.dialAddress, port: 1 } : undefined,
        internal: internalEnvironment({ envelope: "<host envelope>", slot, incarnation: 0, command: program._tag === "Command" }),
        pythonClient: program._tag === "Command" ? plan.entries.pythonClient : undefined
      })
      if (env.MASTER_PORT !== undefined) env.MASTER_PORT = "<a free port, picked at start>"
      // Only the variables this program gets (a command's torchrun set), shown as not known yet.
      for (const key of ["RANK", "ROLE_RANK"]) if (rank === undefined && env[key] !== undefined) env[key] = "<numbered when the hosts join>"
      for (const key of ["WORLD_SIZE", "ROLE_WORLD_SIZE"]) if (plan.world === undefined && env[key] !== undefined) env[key] = "<counted when every host has joined>"
      lines.push(`  [${worker.host}:${deviceTag(device)}:r${rank ?? "?"}] in ${folder}: ${command}`)
      for (const [key, value] of Object.entries(env)) lines.push(`      ${key}=${value}`)
    })
  }
  for (const worker of plan.declaredOnly) {
    lines.push(`  [${worker.host}] declared with devices: ${worker.devices._tag === "Count" ? "0" : "[]"}: runs nothing, no agent starts there`)
  }
  lines.push(`failure policy (grace ${formatDuration(config.failurePolicy.grace)}):`)
  for (const line of strategyToYaml(config.failurePolicy.strategy).trimEnd().split("\n")) lines.push(`  ${line}`)
  lines.push("what each death leads to (the first rule that matches decides, [its name]; else the phase's strategy):")
  for (const line of policyTable(config.failurePolicy.strategy)) lines.push(`  ${line}`)
  return lines.join("\n")
}
