/**
 * `bun run launch` as an operator uses it: a real launcher process, signals
 * from outside, /proc looked at directly. SIGINT stops everything in order
 * (exit 130), SIGKILL leaves nothing behind either, the salt never shows in
 * any process's argv, and a `command:` job gets torchrun's variables. With
 * `--log-dir`, launcher.log ends with the table and the verdict, as stderr
 * does; the words after `--` reach every rank's argv as they were given.
 * Terminal controls a rank prints reach the launcher's streams and its log
 * files escaped, and as printed with `--raw-output`. `--log-dir` and
 * `--events` through a link another user could have planted are refused
 * before anything starts, the files it points at unchanged.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { clusterFile, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { plantedLink } from "./support/planted-link.ts"
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
  const commandCluster = (dir: string, devices: number, args: ReadonlyArray<string>, fixture = "test/fixtures/torchrun-env-fixture.ts") => {
    const file = join(dir, "cluster.yml")
    writeFileSync(file, `
name: cli-args
workers:
  - host: localhost
    devices: ${devices}
    path: ${repoRoot}
job:
  command: ["${process.execPath}", "${fixture}"]
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

  test("terminal controls a rank prints reach stdout, stderr and the rank's log file escaped; with --raw-output, as printed", async () => {
    const controls = "test/fixtures/terminal-controls-fixture.ts"
    const escaped = {
      stdout: "[localhost:cpu:r0] \\x1b[2J\\x1b]0;owned\\x07\\x0dcohort: run completed \\u202eabc \\x9b31m",
      stderr: ["[localhost:cpu:r0] Traceback (most recent call last):", "[localhost:cpu:r0] \t\\x1b[31mValueError: boom\\x1b[0m"]
    }
    const raw = {
      stdout: "[localhost:cpu:r0] \u001b[2J\u001b]0;owned\u0007\rcohort: run completed \u202eabc \u009b31m",
      stderr: ["[localhost:cpu:r0] Traceback (most recent call last):", "[localhost:cpu:r0] \t\u001b[31mValueError: boom\u001b[0m"]
    }
    for (const [flags, expected] of [[[], escaped], [["--raw-output"], raw]] as const) {
      const dir = tempDir()
      const logs = join(dir, "logs")
      const run = spawnLaunch(commandCluster(dir, 1, [], controls), {}, ["--log-dir", logs, ...flags])
      launched.push(run.proc)
      expect(await run.proc.exited).toBe(0)
      await Promise.all([run.stdout.done, run.stderr.done])
      expect(run.stdout.lines).toEqual([expected.stdout])
      expect(run.stderr.lines.filter((line) => line.startsWith("[localhost:cpu:r0] "))).toEqual(expected.stderr)
      const prefix = "[localhost:cpu:r0] ".length
      expect(readFileSync(join(logs, "rank-0.log"), "utf8").split("\n").filter((line) => line !== "").sort())
        .toEqual([expected.stdout, ...expected.stderr].map((line) => line.slice(prefix)).sort())
    }
  }, 30_000)
})

describe("--log-dir and --events where another user could steer them", () => {
  const isRoot = process.getuid?.() === 0
  /** Another user's folder with their 0600 files, and a link to it in a folder every user may write (sticky as /tmp, as root). */
  const planted = () => {
    const root = mkdtempSync(join(tmpdir(), "cohort-steer-"))
    // As root the link is another user's (65534) in a sticky folder, as planted in /tmp; otherwise the folder lacks the sticky bit.
    const { before, link, open, untouched } = plantedLink(root, { sticky: isRoot, linkOwner: isRoot ? 65534 : undefined })
    const why = isRoot ? `${link} is a symbolic link of uid 65534 in ${open}, which every user can write` : `${open} is writable by every user (mode 777)`
    return { root, link, why, files: untouched, before }
  }
  const fix = "give a path whose folders only you (or root) can change, such as one under your home directory"

  for (const [flag, path, what] of [["--log-dir", "", "the logs"], ["--events", "events.jsonl", "the events"]] as const) {
    test(`${flag} through the link: exit 2, one line naming the path and what to do; nothing starts, the victim's files are unchanged`, async () => {
      const { before, files, link, root, why } = planted()
      const file = join(root, "cluster.yml")
      writeFileSync(file, clusterFile({ devices: 1, args: ["work=10"] }, root))
      const given = path === "" ? link : join(link, path)
      const run = spawnLaunch(file, {}, [flag, given])
      launched.push(run.proc)
      expect(await run.proc.exited).toBe(2)
      await Promise.all([run.stdout.done, run.stderr.done])
      expect(run.stderr.lines).toEqual([`cohort: ${flag} ${given}: ${why}, so another user could steer where ${what} go; ${fix}`])
      expect(files()).toEqual(before)
      // Nothing ran: no rank wrote its pid.
      expect(pidFiles(root)).toEqual([])
    }, 20_000)
  }
})
