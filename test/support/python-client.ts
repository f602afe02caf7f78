/**
 * The Python client without a launch, for its unit tests: snippets run with the python3 on PATH and the
 * client (python/) on PYTHONPATH (`runPython`), and a rank envelope as the agent writes one (`pythonEnvelope`).
 */
import { join, resolve } from "node:path"

const root = resolve(import.meta.dir, "..", "..")
const python = Bun.which("python3") ?? "/usr/bin/python3"

/** `code` run as `python3 -c`, with `env` added: its status and what it printed. */
export const runPython = (code: string, env: Record<string, string> = {}) => {
  const child = Bun.spawnSync([python, "-c", code], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PYTHONPATH: join(root, "python"), ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000
  })
  return { code: child.exitCode, stdout: child.stdout.toString(), stderr: child.stderr.toString() }
}

/**
 * A rank envelope (COHORT_RANK_ENVELOPE) as the agent writes one for a host of two CPU ranks, with `changes`
 * applied: what the Python client's tests hand it, without a launch.
 */
export const pythonEnvelope = (changes: Record<string, unknown> = {}): string =>
  JSON.stringify({
    protocol: 2,
    run: "r",
    host: "localhost",
    groupRank: 0,
    worldSize: 2,
    ranks: [0, 1],
    devices: [{ kind: "cpu", slot: 0 }, { kind: "cpu", slot: 1 }],
    controller: { host: "127.0.0.1", port: 29400 },
    rankKeyHex: "00".repeat(32),
    args: [],
    backend: "cpu_sync",
    dir: "/nonexistent",
    socket: "/nonexistent/relay.sock",
    datasetSize: 10,
    epochs: 1,
    cadence: 1,
    heartbeatTimeoutMs: 300,
    ...changes
  })
