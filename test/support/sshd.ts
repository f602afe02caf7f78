/**
 * A real sshd for tests, on 127.0.0.1 and a free port, with a generated host
 * key and a test-only client key authorised for this user. It needs root
 * (sshd drops privileges per session) and Debian's openssh-server, which it
 * installs when it can; `unavailable` says why not otherwise. `stop` kills it
 * and removes everything it made.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

export interface Sshd {
  readonly port: number
  /** The client's private key. */
  readonly identityFile: string
  /** ssh options for a throwaway host key: no known_hosts prompt, no pollution. */
  readonly options: ReadonlyArray<string>
  readonly stop: () => void
}

const SSHD = "/usr/sbin/sshd"

/** An sshd_config for tests: key logins only, for the one authorised test key. */
export const sshdConfig = (options: {
  readonly port: number
  readonly address: string
  readonly hostKey: string
  readonly authorizedKeys: string
  readonly pidFile: string
  readonly extra?: ReadonlyArray<string>
}): string =>
  [
    `Port ${options.port}`,
    `ListenAddress ${options.address}`,
    `HostKey ${options.hostKey}`,
    `AuthorizedKeysFile ${options.authorizedKeys}`,
    "PermitRootLogin prohibit-password",
    "PasswordAuthentication no",
    "KbdInteractiveAuthentication no",
    "UsePAM no",
    "StrictModes no",
    ...(options.extra ?? []),
    `PidFile ${options.pidFile}`,
    "LogLevel ERROR",
    ""
  ].join("\n")

const freePort = (): number => {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/** Why sshd cannot run here, or undefined when it can (installing openssh-server as root if need be). */
export const sshdUnavailable = (): string | undefined => {
  if (process.getuid?.() !== 0) return "sshd tests need root (CI runs as root)"
  if (!(Bun.which("ssh") !== null && Bun.file(SSHD).size > 0)) {
    const install = Bun.spawnSync(["apt-get", "install", "-y", "openssh-server", "openssh-client"], { stdout: "ignore", stderr: "pipe" })
    if (install.exitCode !== 0) return `openssh-server is not installed and apt-get could not install it: ${install.stderr.toString().trim().split("\n").at(-1)}`
  }
  return undefined
}

export const startSshd = async (): Promise<Sshd> => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-sshd-"))
  const keygen = (file: string) => {
    const made = Bun.spawnSync(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", file], { stderr: "pipe" })
    if (made.exitCode !== 0) throw new Error(`ssh-keygen failed: ${made.stderr.toString()}`)
  }
  keygen(join(dir, "host_key"))
  keygen(join(dir, "client_key"))
  writeFileSync(join(dir, "authorized_keys"), await Bun.file(join(dir, "client_key.pub")).text())
  const port = freePort()
  writeFileSync(join(dir, "sshd_config"), sshdConfig({
    port,
    address: "127.0.0.1",
    hostKey: join(dir, "host_key"),
    authorizedKeys: join(dir, "authorized_keys"),
    pidFile: join(dir, "sshd.pid")
  }))
  // sshd insists on its privilege-separation directory.
  Bun.spawnSync(["mkdir", "-p", "/run/sshd"])
  const daemon = Bun.spawn([SSHD, "-D", "-e", "-f", join(dir, "sshd_config")], { stdout: "ignore", stderr: "pipe" })
  // Wait for the port to accept.
  const deadline = performance.now() + 10_000
  while (true) {
    try {
      const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } })
      socket.end()
      break
    } catch {
      if (performance.now() > deadline) throw new Error("sshd did not start listening within 10 s")
      await Bun.sleep(20)
    }
  }
  return {
    port,
    identityFile: join(dir, "client_key"),
    options: ["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR"],
    stop: () => {
      daemon.kill("SIGKILL")
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
