/**
 * `bun run launch` as an operator uses it: a real launcher process, signals
 * from outside, /proc looked at directly. SIGINT stops everything in order
 * (exit 130), SIGKILL leaves nothing behind either, the salt never shows in
 * any process's argv, and a `command:` job gets torchrun's variables. With
 * `--log-dir`, launcher.log ends with the table and the verdict, as stderr
 * does; the words after `--` reach every rank's argv as they were given.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { clusterFile, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { allPids, childrenOf, commandLine as cmdline, environment as environ, isRunning, pidFiles, waitFor } from "./support/processes.ts"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"

const launched: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of launched.splice(0)) proc.kill("SIGKILL")
})

const launch = (text: string) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-cli-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, text.replaceAll("$DIR", dir))
  const run = spawnLaunch(file)
  launched.push(run.proc)
  return { ...run, dir, pids: () => pidFiles(dir) }
}

const holdCluster = (dir: string) => clusterFile({ devices: 3, args: ["hold"] }, dir)

/** Wait for the three held ranks, and find the relay among the launcher's children. */
const running = async (run: ReturnType<typeof launch>) => {
  await waitFor(() => run.pids().length === 3, "three ranks running user code", 10_000)
  let relay: number | undefined
  let relayCommand = ""
  await waitFor(() => {
    relay = childrenOf(run.proc.pid).find((pid) => /\/relay\.(ts|js)\b/.test(relayCommand = cmdline(pid)))
    return relay !== undefined
  }, "the relay running")
  return { ranks: run.pids(), relay: relay!, relayCommand: relayCommand.trim() }
}

test("`bun run launch` runs from its bundle: the relay and the ranks are the bundle's programs", async () => {
  const run = launch(holdCluster("$DIR"))
  const { ranks, relayCommand } = await running(run)
  // Read while each runs: a process's command line is empty once it has ended.
  expect(relayCommand, run.stderr.lines.join("\n")).toMatch(/\/\.cohort\/bundle-[^/]+\/relay\.js$/)
  for (const rank of ranks) expect(cmdline(rank).trim(), run.stderr.lines.join("\n")).toMatch(/\/\.cohort\/bundle-[^/]+\/rank\.js$/)
  run.proc.kill("SIGTERM")
  // 128 + 15: what shells and schedulers expect of a process stopped by SIGTERM.
  expect(await run.proc.exited).toBe(143)
}, 20_000)

describe("the launch CLI and its processes", () => {
  test("SIGINT mid-run: the ranks are stopped gracefully, exit 130, the last line says why, no process is left", async () => {
    const run = launch(holdCluster("$DIR"))
    const { ranks, relay } = await running(run)
    run.proc.kill("SIGINT")
    expect(await run.proc.exited).toBe(130)
    await Promise.all([run.stdout.done, run.stderr.done])
    expect(run.stderr.lines.at(-1)).toBe("cohort: run failed: aborted: received SIGINT")
    for (const rank of [0, 1, 2]) expect(run.stdout.lines).toContain(`[localhost:cpu:r${rank}] rank ${rank}: stopped by cohort`)
    await waitFor(() => [...ranks, relay].every((pid) => !isRunning(pid)), "no rank and no relay left")
  }, 20_000)

  test("SIGKILL of the launcher: its ranks and relay die with it", async () => {
    const run = launch(holdCluster("$DIR"))
    const { ranks, relay } = await running(run)
    run.proc.kill("SIGKILL")
    await run.proc.exited
    await waitFor(() => [...ranks, relay].every((pid) => !isRunning(pid)), "no rank and no relay left after SIGKILL")
  }, 20_000)

  test("each rank's environment carries its own key, the relay's none (its host key comes over IPC), and no key is in any argv", async () => {
    const run = launch(holdCluster("$DIR"))
    const { ranks, relay } = await running(run)
    const keys = ranks.map((pid) => JSON.parse(environ(pid).COHORT_RANK_ENVELOPE!).rankKeyHex as string)
    for (const key of keys) expect(key).toMatch(/^[0-9a-f]{64}$/)
    expect(new Set(keys).size).toBe(ranks.length)
    const relaySpec = JSON.parse(environ(relay).COHORT_RELAY_SPEC!) as Record<string, unknown>
    expect(Object.keys(relaySpec).filter((name) => /salt|key/i.test(name))).toEqual([])
    const everyArgv = allPids().map((pid) => cmdline(pid).toLowerCase())
    expect(everyArgv.length).toBeGreaterThan(5)
    expect(everyArgv.filter((argv) => keys.some((key) => argv.includes(key)))).toEqual([])
    run.proc.kill("SIGTERM")
    expect(await run.proc.exited).toBe(143)
  }, 20_000)

  test("a command: job gets torchrun's variables, consistent across ranks, and its args", async () => {
    const run = launch(`
workers:
  - host: localhost
    devices: 3
    path: ${repoRoot}
job:
  command: ["${process.execPath}", "test/fixtures/torchrun-env-fixture.ts"]
  args: ["--epochs", "2"]
`)
    expect(await run.proc.exited).toBe(0)
    await run.stdout.done
    const seen = run.stdout.lines.map((line) => {
      const match = /^\[localhost:cpu:r(\d)\] (\{.*\})$/.exec(line)
      expect(match).not.toBeNull()
      return { prefix: Number(match![1]), env: JSON.parse(match![2]!) }
    }).sort((a, b) => a.prefix - b.prefix)
    expect(seen.map(({ env, prefix }) => [prefix, env.RANK, env.LOCAL_RANK, env.COHORT_LOCAL_SLOT])).toEqual([
      [0, "0", "0", "0"],
      [1, "1", "1", "1"],
      [2, "2", "2", "2"]
    ])
    for (const { env } of seen) {
      expect(env).toMatchObject({ WORLD_SIZE: "3", LOCAL_WORLD_SIZE: "3", GROUP_RANK: "0", MASTER_ADDR: "127.0.0.1", TORCHELASTIC_RESTART_COUNT: "0", args: ["--epochs", "2"] })
      expect(env.MASTER_PORT).toBe(seen[0]!.env.MASTER_PORT)
      expect(Number(env.MASTER_PORT)).toBeGreaterThan(0)
    }
  }, 20_000)
})

describe("the launch CLI's files and arguments", () => {
  const dirs: Array<string> = []
  afterEach(() => dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true })))
  const tempDir = () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-cli-"))
    dirs.push(dir)
    return dir
  }
  const commandCluster = (dir: string, devices: number, args: ReadonlyArray<string>) => {
    const file = join(dir, "cluster.yml")
    writeFileSync(file, `
name: cli-args
workers:
  - host: localhost
    devices: ${devices}
    path: ${repoRoot}
job:
  command: ["${process.execPath}", "test/fixtures/torchrun-env-fixture.ts"]
  args: ${JSON.stringify(args)}
`)
    return file
  }

  test("--log-dir: launcher.log ends with the end-of-run table and the verdict, as stderr does", async () => {
    const dir = tempDir()
    const logs = join(dir, "logs")
    const run = spawnLaunch(commandCluster(dir, 2, []), {}, ["--log-dir", logs])
    launched.push(run.proc)
    expect(await run.proc.exited).toBe(0)
    await run.stderr.done
    const stderr = run.stderr.lines
    // The table's header, one row per rank, then the verdict: the last four lines, on both.
    const ending = stderr.slice(-4)
    expect(ending[0]).toMatch(/^host\s+rank\s+device\s+exit\s+restarts\s+run time$/)
    expect(ending.slice(1, 3).map((line) => line.split(/\s+/).slice(0, 4))).toEqual([["localhost", "0", "cpu", "0"], ["localhost", "1", "cpu", "0"]])
    expect(ending[3]).toBe("cohort: run completed")
    const log = readFileSync(join(logs, "launcher.log"), "utf8").trimEnd().split("\n")
    expect(log.slice(-4)).toEqual(ending)
  }, 20_000)

  test("the words after -- are appended to a command job's args, each reaching every rank's argv unchanged", async () => {
    const dir = tempDir()
    const extra = ["a b", "it's", "\"double\"", "$HOME", "back\\slash", "--x=1 2", "*"]
    const run = spawnLaunch(commandCluster(dir, 2, ["--epochs", "2"]), {}, ["--", ...extra])
    launched.push(run.proc)
    expect(await run.proc.exited).toBe(0)
    await run.stdout.done
    const argvs = run.stdout.lines.map((line) => JSON.parse(/^\[localhost:cpu:r\d\] (\{.*\})$/.exec(line)![1]!).args)
    expect(argvs).toEqual([["--epochs", "2", ...extra], ["--epochs", "2", ...extra]])
  }, 20_000)
})
