/**
 * `--sync`: copy the launcher's checkout to every ssh host's `path` before
 * the preflight, over the hosts' own ssh settings: rsync when both ends have
 * it, else tar through ssh. Build output and local state (.git, .cohort,
 * .scratch, the Rust build's intermediate files) stay behind; installed
 * packages and the built native library travel, so the host runs what the
 * launcher runs.
 */
import { dirname, join } from "node:path"
import { existsSync } from "node:fs"
import * as Effect from "effect/Effect"
import type { Worker } from "../../config/ClusterConfig.ts"
import { shellQuote, sshCommand } from "./SshFanOut.ts"

export const EXCLUDED = [".git", ".cohort", ".scratch", "src/native/target/debug", "src/native/target/release/build", "src/native/target/release/deps"]

/** This launcher's checkout: the folder holding its package.json, upwards from this module (it may run from the bundle). */
export const checkoutRoot = (): string => {
  for (let dir = import.meta.dir; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "src/cli/agent.ts"))) return dir
    if (dirname(dir) === dir) return process.cwd()
  }
}

const run = async (command: ReadonlyArray<string>, input?: ReadableStream<Uint8Array>) => {
  const proc = Bun.spawn([...command], { stdin: input ?? "ignore", stdout: "ignore", stderr: "pipe" })
  const [errors, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited])
  return { code, said: errors.trim().split("\n").at(-1)?.trim() ?? "" }
}

/** The ssh command rsync should use for a host: ssh's argv without the target and the remote command. */
const rsyncShell = (worker: Worker): string => sshCommand(worker, "").slice(0, -2).map(shellQuote).join(" ")

const copyTo = async (worker: Worker, root: string): Promise<string | undefined> => {
  const target = worker.ssh?.target ?? worker.host
  if (Bun.which("rsync") !== null) {
    const rsync = await run([
      "rsync", "-a", "--delete", ...EXCLUDED.map((path) => `--exclude=/${path}`),
      "-e", rsyncShell(worker), `${root}/`, `${worker.ssh?.user === undefined ? "" : `${worker.ssh.user}@`}${target}:${worker.path}/`
    ])
    if (rsync.code === 0) return undefined
    // 12, 127: rsync is missing on the far side; tar still works.
    if (rsync.code !== 12 && rsync.code !== 127) return `rsync to ${worker.host}:${worker.path} failed (${rsync.said})`
  }
  const tar = Bun.spawn(["tar", "-C", root, ...EXCLUDED.map((path) => `--exclude=./${path}`), "-cf", "-", "."], { stdout: "pipe", stderr: "ignore" })
  const unpack = await run(sshCommand(worker, `mkdir -p ${shellQuote(worker.path)} && tar -C ${shellQuote(worker.path)} -xf -`), tar.stdout)
  return unpack.code === 0 ? undefined : `copying the checkout to ${worker.host}:${worker.path} failed (${unpack.said || `ssh exited with ${unpack.code}`})`
}

/** Copy to every host side by side; every failure, naming its host. */
export const syncCheckout = (workers: ReadonlyArray<Worker>): Effect.Effect<ReadonlyArray<string>> =>
  Effect.gen(function*() {
    const root = checkoutRoot()
    const failures = yield* Effect.forEach(workers, (worker) => Effect.promise(() => copyTo(worker, root)), { concurrency: "unbounded" })
    for (const worker of workers) yield* Effect.logInfo(`copied ${root} to ${worker.host}:${worker.path}`)
    return failures.filter((failure): failure is string => failure !== undefined)
  })
