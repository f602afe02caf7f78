/**
 * cohort as a user installs it: `npm pack` of this checkout, `npm install -g --prefix <tmp>` of the
 * tarball (its dependencies from npm's cache where it has them, else the registry), then the installed
 * `cohort` run from a fresh project folder that is nothing of cohort's.
 *
 * What it proves: the install brings its own Bun (1.4.4) and the postinstall passes without cargo; the
 * command runs on that Bun, not on a `bun` found on PATH (a fake one there would say so), and without
 * the project's bunfig.toml; a quick-form
 * launch completes and its state (`.cohort/`) is made in the project folder, not in the checkout nor in
 * the installed package (which holds only its bundle); `cohort status` finds the run there; a signal to
 * `cohort` reaches the launcher (SIGINT: 130), and a launcher killed outright is reported as 128 + 9;
 * `--sync`, which would copy the package over the hosts' copy of the project, is refused.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { childrenOf, collectLines, commandLine, isGone, waitFor } from "./support/processes.ts"

const checkout = resolve(import.meta.dir, "..")
const scratch = mkdtempSync(join(tmpdir(), "cohort-install-"))
const prefix = join(scratch, "prefix")
const cohort = join(prefix, "bin", "cohort")
const installed = join(prefix, "lib", "node_modules", "cohort")
const fakeBin = join(scratch, "fake-bin")
const fakeBunCalled = join(scratch, "fake-bun-called")
const node = Bun.which("node")

/** A PATH with node and the system's tools, a fake `bun` first, and no cargo (the native build is then skipped softly). */
const path = [fakeBin, ...(node === null ? [] : [dirname(node)]), "/usr/local/bin", "/usr/bin", "/bin"].join(":")
const env = { ...process.env, PATH: path, COHORT_NO_BUNDLE: undefined, npm_config_update_notifier: "false" }

/** Every `.cohort` folder in the checkout (installed packages aside): a launch from elsewhere must add none. */
const checkoutStateFolders = (): Array<string> => {
  const found: Array<string> = []
  const walk = (dir: string, depth: number) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name === "node_modules" || entry.name === ".git") continue
      if (entry.name === ".cohort") found.push(join(dir, entry.name))
      else if (depth < 4) walk(join(dir, entry.name), depth + 1)
    }
  }
  walk(checkout, 0)
  return found.sort()
}

/** A fresh folder that is nothing of cohort's, as a user's project is. */
const project = (): string => {
  const dir = join(scratch, `project-${Math.random().toString(36).slice(2)}`)
  mkdirSync(dir)
  return dir
}

const runCohort = (cwd: string, args: ReadonlyArray<string>) => {
  const proc = Bun.spawnSync([cohort, ...args], { cwd, env })
  return { code: proc.exitCode, stdout: proc.stdout.toString(), stderr: proc.stderr.toString() }
}

let stateBefore: Array<string> = []
let installSeconds = 0

beforeAll(() => {
  if (node === null) throw new Error("node is not on PATH: npm install -g needs it")
  mkdirSync(fakeBin)
  writeFileSync(join(fakeBin, "bun"), `#!/bin/sh\necho "$@" >> '${fakeBunCalled}'\nexit 97\n`)
  chmodSync(join(fakeBin, "bun"), 0o755)
  stateBefore = checkoutStateFolders()
  const pack = Bun.spawnSync(["npm", "pack", "--pack-destination", scratch, "--json"], { cwd: checkout, env })
  if (pack.exitCode !== 0) throw new Error(`npm pack failed: ${pack.stderr.toString()}`)
  const tarball = join(scratch, (JSON.parse(pack.stdout.toString()) as Array<{ filename: string }>)[0]!.filename)
  const started = performance.now()
  // --prefer-offline: what npm's cache holds (bun's 100 MB binary after the first time) is not fetched again.
  const install = Bun.spawnSync(["npm", "install", "-g", "--prefix", prefix, "--prefer-offline", "--no-audit", "--no-fund", tarball], { cwd: scratch, env })
  installSeconds = (performance.now() - started) / 1000
  if (install.exitCode !== 0) throw new Error(`npm install -g failed (${install.exitCode}):\n${install.stdout}\n${install.stderr}`)
  console.log(`npm install -g of ${tarball}: ${installSeconds.toFixed(1)} s`)
}, 120_000)

afterAll(() => rmSync(scratch, { recursive: true, force: true }))

describe("npm install -g of the packed checkout", () => {
  test("the command is linked, the package is a copy (not this checkout), and its Bun is 1.4.4", () => {
    expect(existsSync(cohort)).toBe(true)
    expect(existsSync(join(installed, "src", "cli", "cohort.ts"))).toBe(true)
    expect(existsSync(join(installed, "src", "native", "target"))).toBe(false)
    const version = runCohort(project(), ["--version"])
    expect(version).toEqual({ code: 0, stdout: "cohort 0.1.0 (bun 1.4.4)\n", stderr: "" })
    expect(existsSync(fakeBunCalled)).toBe(false)
  })

  test("cohort --help and cohort launch --help answer from any folder", () => {
    const dir = project()
    const help = runCohort(dir, ["--help"])
    expect(help.code).toBe(0)
    expect(help.stdout).toStartWith("usage: cohort <command> [options]\n")
    const launchHelp = runCohort(dir, ["launch", "--help"])
    expect(launchHelp.code).toBe(0)
    expect(launchHelp.stdout).toStartWith("usage: cohort launch <cluster.yml>")
    expect(readdirSync(dir)).toEqual([])
  })

  test("cohort launch -n 2 from a project folder: completes, its .cohort/ is the project's", () => {
    const dir = project()
    const run = runCohort(dir, ["launch", "-n", "2", "--", "/bin/sh", "-c", "echo hi from $RANK"])
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout.split("\n").sort()).toEqual(["", "[localhost:cpu:r0] hi from 0", "[localhost:cpu:r1] hi from 1"])
    expect(run.stderr.trim().split("\n").at(-1)).toBe("cohort: run completed")
    expect(readdirSync(dir)).toEqual([".cohort"])
    expect(readdirSync(join(dir, ".cohort"))).toContain("runs")
    // The package holds its bundle, nothing of a run.
    const packageState = existsSync(join(installed, ".cohort")) ? readdirSync(join(installed, ".cohort")) : []
    expect(packageState.filter((entry) => !entry.startsWith("bundle-"))).toEqual([])
    expect(checkoutStateFolders()).toEqual(stateBefore)
    expect(existsSync(fakeBunCalled)).toBe(false)
  }, 30_000)

  test("a held run: cohort status finds it in the project's .cohort/runs; SIGINT to cohort stops it (130)", async () => {
    const dir = project()
    const proc = Bun.spawn([cohort, "launch", "-n", "1", "--", "/bin/sh", "-c", "echo held; exec sleep 60"], { cwd: dir, env, stdout: "pipe", stderr: "pipe" })
    const stdout = collectLines(proc.stdout)
    const stderr = collectLines(proc.stderr)
    try {
      const runs = join(dir, ".cohort", "runs")
      const listening = () =>
        existsSync(runs) && readdirSync(runs).some((file) => file.endsWith(".json") && (JSON.parse(readFileSync(join(runs, file), "utf8")) as { port: number }).port !== 0)
      await waitFor(() => listening() && stdout.lines.includes("[localhost:cpu:r0] held"), "the run listening and its rank running", 20_000)
      const entry = readdirSync(runs).find((file) => file.endsWith(".json"))!
      // The checkout's registry has no such run: the launch registered where it was started.
      expect(existsSync(join(checkout, ".cohort", "runs", entry))).toBe(false)
      const status = runCohort(dir, ["status"])
      expect(status.code, status.stderr).toBe(0)
      expect(status.stdout).toContain("localhost")
      // The launcher is Bun under node's `cohort`; SIGINT to `cohort` alone (not the group) must reach it.
      const launcher = childrenOf(proc.pid).find((pid) => commandLine(pid).includes("src/cli/cohort.ts"))
      expect(launcher, `children of ${proc.pid}: ${childrenOf(proc.pid).map(commandLine).join("; ")}`).toBeDefined()
      proc.kill("SIGINT")
      expect(await proc.exited).toBe(130)
      await stderr.done
      expect(stderr.lines.at(-1)).toBe("cohort: run failed: aborted: received SIGINT")
      await waitFor(() => isGone(launcher!), "the launcher gone")
    } finally {
      proc.kill("SIGKILL")
    }
  }, 40_000)

  test("the launcher killed outright: cohort exits 128 + 9, as a shell reports it", async () => {
    const dir = project()
    const proc = Bun.spawn([cohort, "launch", "-n", "1", "--", "/bin/sh", "-c", "exec sleep 60"], { cwd: dir, env, stdout: "ignore", stderr: "pipe" })
    try {
      let launcher: number | undefined
      await waitFor(() => (launcher = childrenOf(proc.pid).find((pid) => commandLine(pid).includes("src/cli/cohort.ts"))) !== undefined, "the launcher started", 10_000)
      process.kill(launcher!, "SIGKILL")
      expect(await proc.exited).toBe(137)
    } finally {
      proc.kill("SIGKILL")
    }
  }, 20_000)

  test("the project's bunfig.toml is the project's: its preload does not run in cohort", () => {
    const dir = project()
    const marker = join(dir, "preloaded")
    writeFileSync(join(dir, "bunfig.toml"), 'preload = ["./preload.ts"]\n')
    writeFileSync(join(dir, "preload.ts"), `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "ran")\n`)
    // The project's preload does run under the project's own Bun: the files above are right.
    expect(Bun.spawnSync([process.execPath, "-e", "1"], { cwd: dir, env }).exitCode).toBe(0)
    expect(existsSync(marker)).toBe(true)
    rmSync(marker)
    expect(runCohort(dir, ["--version"]).code).toBe(0)
    expect(existsSync(marker)).toBe(false)
  })

  test("--sync from a project is refused: it would copy cohort's package over the hosts' copy of the project", () => {
    const dir = project()
    const run = runCohort(dir, ["launch", "-n", "1", "--sync", "--dry-run", "--", "/bin/true"])
    expect(run.code).toBe(2)
    expect(run.stderr).toStartWith(`cohort: --sync copies cohort's own folder (${installed}) to every ssh host's path, but this launch runs in ${dir}: `)
    expect(readdirSync(dir)).toEqual([])
  })

  test("the install took under 90 s", () => {
    expect(installSeconds).toBeLessThan(90)
  })
})
