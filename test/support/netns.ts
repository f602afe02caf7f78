/**
 * Hosts made of network namespaces: n namespaces joined by veth pairs to a
 * Linux bridge in the root namespace, each with its own address and its own
 * sshd on port 22, so a launcher in the root namespace reaches them over ssh
 * as it would reach other machines. They share the filesystem (the checkout
 * is at the same path everywhere) and the pid namespace (so /proc shows every
 * host's processes; `hostOf(pid)` says whose a process is).
 *
 * Layout, with x picked from the pid so parallel runs do not collide:
 * - bridge `coh<x>br` in the root namespace, 10.<x>.0.1/24 (the controller's address)
 * - namespace `coh<x>-nsh<i>` for host `nsh<i>` (i from 1), 10.<x>.0.<10+i>/24,
 *   reached through veth `coh<x>v<i>` (root side) ↔ `eth0` (inside)
 * - state under /tmp/cohort-netns-<x>/: keys, each sshd's config and pid file
 *
 * `makeHosts` first removes what an earlier crashed run with the same names
 * left (and what any run whose process is gone left); `teardown` kills every process in the namespaces, then removes the
 * namespaces, veths, bridge and files; it is idempotent.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { afterAll, beforeAll } from "bun:test"
import { sshdConfig } from "./sshd.ts"

const SSHD = "/usr/sbin/sshd"
/** The checkout: at the same path on every namespace host. */
const repoRoot = resolve(import.meta.dir, "../..")

export interface NsHost {
  /** The worker's host name (`nsh1`, …). */
  readonly name: string
  /** Its address on the bridge (`10.<x>.0.11`, …): the ssh target. */
  readonly address: string
  /** The network namespace's name, for `ip netns exec`. */
  readonly namespace: string
  /** The pid of its sshd (the listener, not the sessions). */
  readonly sshdPid: number
}

export interface Hosts {
  /** The second octet of the subnet. */
  readonly subnet: number
  /** The bridge's address: the launcher's `controller.host`. */
  readonly controller: string
  readonly hosts: ReadonlyArray<NsHost>
  /** The client's private key, authorised on every host. */
  readonly identityFile: string
  /** ssh options for throwaway host keys: no known_hosts prompt, no pollution. */
  readonly options: ReadonlyArray<string>
  /** An address on the bridge's subnet that nobody has. */
  readonly vacantAddress: string
  /** A cluster file's worker entry (a YAML flow mapping) for host i (from 0) over ssh. */
  readonly worker: (index: number, overrides?: WorkerOverrides) => string
  /** The host (by name) whose namespace the process is in; undefined for the root namespace or a gone process. */
  readonly hostOf: (pid: number) => string | undefined
  /** Every pid in a host's namespace (`ip netns pids`). */
  readonly pidsIn: (host: NsHost) => Array<number>
  /** Cut a host's cable (`down`) or plug it back (`up`): its root-side veth, so nothing it sends or is sent arrives. */
  readonly link: (host: NsHost, state: "up" | "down") => void
  /** SIGKILL every process on the hosts but their sshd listeners (what a test left behind). */
  readonly reap: () => void
  /** Kill every process in the namespaces, remove the namespaces, veths, bridge and files. Idempotent. */
  readonly teardown: () => void
}

export interface WorkerOverrides {
  readonly devices?: number
  readonly path?: string
  readonly identityFile?: string
  readonly target?: string
  /** More ssh options, before the test ones. */
  readonly options?: ReadonlyArray<string>
}

const run = (argv: ReadonlyArray<string>): { ok: boolean; out: string; err: string } => {
  const result = Bun.spawnSync([...argv], { stdout: "pipe", stderr: "pipe" })
  return { ok: result.exitCode === 0, out: result.stdout.toString(), err: result.stderr.toString().trim() }
}

const must = (argv: ReadonlyArray<string>): string => {
  const result = run(argv)
  if (!result.ok) throw new Error(`${argv.join(" ")} failed: ${result.err}`)
  return result.out
}

/** Why namespace hosts cannot be made here, or undefined when they can. */
export const netnsUnavailable = (): string | undefined => {
  if (process.getuid?.() !== 0) return "network-namespace hosts need root (CI runs as root)"
  if (Bun.which("ip") === null) return "network-namespace hosts need iproute2's ip"
  if (!existsSync(SSHD) || Bun.which("ssh") === null || Bun.which("ssh-keygen") === null) {
    const install = Bun.spawnSync(["apt-get", "install", "-y", "openssh-server", "openssh-client"], { stdout: "ignore", stderr: "pipe" })
    if (install.exitCode !== 0) return `openssh-server is not installed and apt-get could not install it: ${install.stderr.toString().trim().split("\n").at(-1)}`
  }
  // Probe: a namespace, a veth pair and a bridge, removed at once.
  const probe = `cohprobe${process.pid % 100000}`
  const made = run(["ip", "netns", "add", probe])
  if (!made.ok) return `cannot create a network namespace (ip netns add: ${made.err})`
  run(["ip", "netns", "del", probe])
  const bridge = run(["ip", "link", "add", probe, "type", "bridge"])
  if (!bridge.ok) return `cannot create a bridge (ip link add type bridge: ${bridge.err})`
  run(["ip", "link", "del", probe])
  const veth = run(["ip", "link", "add", probe, "type", "veth", "peer", "name", `${probe}p`])
  if (!veth.ok) return `cannot create a veth pair (ip link add type veth: ${veth.err})`
  run(["ip", "link", "del", probe])
  return undefined
}

/** The subnet's second octet for this process: 16..215, from the pid. */
const subnetFor = (pid: number): number => 16 + (pid % 200)

const names = (subnet: number, index: number) => ({
  host: `nsh${index}`,
  namespace: `coh${subnet}-nsh${index}`,
  veth: `coh${subnet}v${index}`,
  address: `10.${subnet}.0.${10 + index}`
})

const stateDir = (subnet: number) => `/tmp/cohort-netns-${subnet}`
const bridgeName = (subnet: number) => `coh${subnet}br`

const kill = (pid: number) => {
  try {
    process.kill(pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/** Every pid in a namespace. */
const namespacePids = (namespace: string): Array<number> => {
  const listed = run(["ip", "netns", "pids", namespace])
  return listed.ok ? listed.out.split(/\s+/).filter(Boolean).map(Number) : []
}

/** Remove whatever the names of `subnet` hold: processes, namespaces, veths, bridge, files. */
const removeAll = (subnet: number) => {
  const prefix = `coh${subnet}-nsh`
  const namespaces = run(["ip", "netns", "list"]).out.split("\n").map((line) => line.split(" ")[0]!).filter((name) => name.startsWith(prefix))
  // Kill until empty: a dying agent's children may appear for a moment.
  for (let round = 0; round < 50; round++) {
    const pids = namespaces.flatMap(namespacePids)
    if (pids.length === 0) break
    pids.forEach(kill)
    Bun.sleepSync(20)
  }
  // sshds whose pid files survived (their namespace may already be gone).
  const dir = stateDir(subnet)
  if (existsSync(dir)) {
    for (const name of readdirSync(dir).filter((entry) => entry.endsWith(".pid"))) {
      const pid = Number(readFileSync(join(dir, name), "utf8").trim())
      if (pid > 0 && readCmdline(pid).includes(join(dir, ""))) kill(pid)
    }
  }
  for (const namespace of namespaces) run(["ip", "netns", "del", namespace])
  const links = run(["ip", "-o", "link", "show"]).out.split("\n").map((line) => /^\d+: ([^:@]+)/.exec(line)?.[1]).filter((name): name is string => name !== undefined)
  for (const link of links.filter((name) => name.startsWith(`coh${subnet}v`) || name === bridgeName(subnet))) run(["ip", "link", "del", link])
  rmSync(dir, { recursive: true, force: true })
}

const readCmdline = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ")
  } catch {
    return ""
  }
}

/** A namespace's identity: the device and inode of its nsfs file. */
const inode = (path: string): string | undefined => {
  try {
    const stat = statSync(path)
    return `${stat.dev}:${stat.ino}`
  } catch {
    return undefined
  }
}

const waitForPort = async (address: string, port: number, timeoutMs: number) => {
  const deadline = performance.now() + timeoutMs
  while (true) {
    try {
      const socket = await Bun.connect({ hostname: address, port, socket: { data() {} } })
      socket.end()
      return
    } catch {
      if (performance.now() > deadline) throw new Error(`nothing listened on ${address}:${port} within ${timeoutMs} ms`)
      await Bun.sleep(20)
    }
  }
}

/** Remove what runs that died without tearing down left: state dirs whose owner is gone (and this subnet's, whoever owned it). */
const sweep = (subnet: number) => {
  for (const name of readdirSync("/tmp").filter((entry) => /^cohort-netns-\d+$/.test(entry))) {
    const other = Number(name.slice("cohort-netns-".length))
    if (other === subnet) continue
    let owner = 0
    try {
      owner = Number(readFileSync(join("/tmp", name, "owner"), "utf8"))
    } catch {
      // being made right now, or made by hand: leave it
      continue
    }
    if (!existsSync(`/proc/${owner}`)) removeAll(other)
  }
  removeAll(subnet)
}

export const makeHosts = async (count: number, subnet = subnetFor(process.pid)): Promise<Hosts> => {
  sweep(subnet)
  const dir = stateDir(subnet)
  const bridge = bridgeName(subnet)
  const controller = `10.${subnet}.0.1`
  let tornDown = false
  const teardown = () => {
    if (tornDown) return
    tornDown = true
    removeAll(subnet)
  }
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    writeFileSync(join(dir, "owner"), String(process.pid))
    const keygen = (file: string) => must(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", file])
    keygen(join(dir, "client_key"))
    writeFileSync(join(dir, "authorized_keys"), readFileSync(join(dir, "client_key.pub"), "utf8"))
    // sshd insists on its privilege-separation directory.
    mkdirSync("/run/sshd", { recursive: true })

    must(["ip", "link", "add", bridge, "type", "bridge"])
    must(["ip", "addr", "add", `${controller}/24`, "dev", bridge])
    must(["ip", "link", "set", bridge, "up"])

    const hosts: Array<NsHost> = []
    for (let index = 1; index <= count; index++) {
      const { address, host, namespace, veth } = names(subnet, index)
      const inside = `coh${subnet}e${index}`
      must(["ip", "netns", "add", namespace])
      must(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"])
      must(["ip", "link", "add", veth, "type", "veth", "peer", "name", inside])
      must(["ip", "link", "set", inside, "netns", namespace])
      must(["ip", "link", "set", veth, "master", bridge])
      must(["ip", "link", "set", veth, "up"])
      must(["ip", "netns", "exec", namespace, "ip", "link", "set", inside, "name", "eth0"])
      must(["ip", "netns", "exec", namespace, "ip", "addr", "add", `${address}/24`, "dev", "eth0"])
      must(["ip", "netns", "exec", namespace, "ip", "link", "set", "eth0", "up"])

      const hostKey = join(dir, `${host}_host_key`)
      keygen(hostKey)
      const config = join(dir, `${host}_sshd_config`)
      const pidFile = join(dir, `${host}.pid`)
      writeFileSync(config, sshdConfig({
        port: 22,
        address,
        hostKey,
        authorizedKeys: join(dir, "authorized_keys"),
        pidFile,
        extra: ["MaxStartups 100:30:200", "MaxSessions 100"]
      }))
      // `ip netns exec` execs sshd, so the spawned pid is the listener's.
      const daemon = Bun.spawn(["ip", "netns", "exec", namespace, SSHD, "-D", "-e", "-f", config], { stdout: "ignore", stderr: "ignore" })
      daemon.unref()
      hosts.push({ name: host, address, namespace, sshdPid: daemon.pid })
    }
    await Promise.all(hosts.map((host) => waitForPort(host.address, 22, 10_000)))

    const identityFile = join(dir, "client_key")
    const options = ["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR"]
    const namespaceInodes = new Map(hosts.map((host) => [inode(`/run/netns/${host.namespace}`), host.name]))
    return {
      subnet,
      controller,
      hosts,
      identityFile,
      options,
      vacantAddress: `10.${subnet}.0.250`,
      worker: (index, overrides = {}) => {
        const host = hosts[index]!
        const sshOptions = [...(overrides.options ?? []), ...options]
        return `{ host: ${host.name}, devices: ${overrides.devices ?? 2}, path: ${JSON.stringify(overrides.path ?? repoRoot)}, ` +
          `ssh: { target: ${overrides.target ?? host.address}, identity_file: ${JSON.stringify(overrides.identityFile ?? identityFile)}, ` +
          `options: ${JSON.stringify(sshOptions)} } }`
      },
      hostOf: (pid) => {
        const id = inode(`/proc/${pid}/ns/net`)
        return id === undefined ? undefined : namespaceInodes.get(id)
      },
      pidsIn: (host) => namespacePids(host.namespace),
      link: (host, state) => {
        must(["ip", "link", "set", names(subnet, hosts.indexOf(host) + 1).veth, state])
      },
      reap: () => {
        for (let round = 0; round < 50; round++) {
          const pids = hosts.flatMap((host) => namespacePids(host.namespace).filter((pid) => pid !== host.sshdPid))
          if (pids.length === 0) return
          pids.forEach(kill)
          Bun.sleepSync(20)
        }
      },
      teardown
    }
  } catch (error) {
    teardown()
    throw error
  }
}

/**
 * A test file's namespace hosts: made once before its tests (unless `netnsUnavailable`), and on the
 * way out (afterAll, or the process's exit: teardown is idempotent) torn down with the file's temp
 * dirs and the /dev/shm run directories of this file's runs. A host whose agent was SIGKILLed keeps
 * its run directory there (segments, relay.sock): the product does not remove it. Runs are told
 * apart by `runPrefix`, the start of every run name the file uses.
 */
export const useHosts = (count: number, runPrefix: string) => {
  /** Why there are no hosts here, if there are none: the file's tests skip. */
  const unavailable = netnsUnavailable()
  let hosts: Hosts | undefined
  const dirs: Array<string> = []
  const cleanUp = () => {
    hosts?.teardown()
    dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true }))
    try {
      for (const entry of readdirSync("/dev/shm").filter((name) => name.startsWith(`cohort-${runPrefix}`))) rmSync(join("/dev/shm", entry), { recursive: true, force: true })
    } catch {
      // no /dev/shm
    }
  }
  process.on("exit", cleanUp)
  beforeAll(async () => {
    if (unavailable === undefined) hosts = await makeHosts(count)
  }, 30_000)
  afterAll(cleanUp)
  return { unavailable, hosts: () => hosts, dirs }
}
