/**
 * examples/two-hosts.yml over ssh, for real: its two hosts are network
 * namespaces with their own sshd (test/support/netns.ts), and the file is
 * pointed at them from the command line (`--set controller.host=…`,
 * `--set workers[0].ssh=…`), as a user points it at their machines.
 *
 * 1. `--dry-run` runs the ssh preflight on both hosts and prints the plan.
 * 2. The run trains on both hosts to the same weights.
 * 3. The words after `--` reach the remote ranks' argv unchanged: spaces,
 *    quotes, `$`, `*` and backslashes survive ssh, since they travel as data
 *    (the job's args in the Accept), never through a remote shell's line.
 *
 * Namespace hosts need root, iproute2 and sshd; without them the tests are
 * skipped, saying why.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { useHosts } from "./support/netns.ts"

const RUN_PREFIX = `exssh${process.pid}-`
const suite = useHosts(2, RUN_PREFIX)
if (suite.unavailable !== undefined) console.log(`examples over ssh skipped: ${suite.unavailable}`)

// The training run saves a consensus checkpoint under its name, in this checkout: removed with the hosts.
afterAll(() => rmSync(join(repoRoot, ".cohort", "checkpoints", `${RUN_PREFIX}train.json`), { force: true }))

const launches: Array<ReturnType<typeof spawnLaunch>> = []
afterEach(() => {
  for (const launch of launches.splice(0)) launch.proc.kill("SIGKILL")
  suite.hosts()?.reap()
})

/** The example file, pointed at the namespace hosts. */
const twoHosts = (name: string, flags: ReadonlyArray<string>) => {
  const hosts = suite.hosts()!
  const ssh = (index: number) =>
    JSON.stringify({ target: hosts.hosts[index]!.address, identity_file: hosts.identityFile, options: hosts.options })
  const launch = spawnLaunch(join("examples", "two-hosts.yml"), {}, [
    "--set", `name=${RUN_PREFIX}${name}`,
    "--set", `controller.host=${hosts.controller}`,
    "--set", `workers[0].path=${repoRoot}`,
    "--set", `workers[0].ssh=${ssh(0)}`,
    "--set", `workers[1].path=${repoRoot}`,
    "--set", `workers[1].ssh=${ssh(1)}`,
    ...flags
  ])
  launches.push(launch)
  return launch
}

const finished = async (launch: ReturnType<typeof spawnLaunch>) => {
  const code = await launch.proc.exited
  await Promise.all([launch.stdout.done, launch.stderr.done])
  return code
}

const transcript = (launch: ReturnType<typeof spawnLaunch>) => `--- stdout ---\n${launch.stdout.lines.join("\n")}\n--- stderr ---\n${launch.stderr.lines.join("\n")}`

describe.skipIf(suite.unavailable !== undefined)("examples/two-hosts.yml over ssh", () => {
  test("--dry-run: the preflight passes on both hosts and the plan has two ranks on each", async () => {
    const launch = twoHosts("dry", ["--dry-run"])
    const code = await finished(launch)
    expect(code, transcript(launch)).toBe(0)
    const plan = launch.stdout.lines
    expect(plan[0]).toBe(`run ${RUN_PREFIX}dry: 4 rank(s) on 2 host(s)`)
    for (const rank of ["node-a:cpu:r0", "node-a:cpu:r1", "node-b:cpu:r2", "node-b:cpu:r3"]) expect(plan.some((line) => line.includes(`[${rank}] in ${repoRoot}`))).toBe(true)
  }, 60_000)

  test("the run trains on both hosts to the same weights", async () => {
    const launch = twoHosts("train", [])
    const code = await finished(launch)
    expect(launch.stderr.lines.at(-1), transcript(launch)).toBe("cohort: run completed")
    expect(code).toBe(0)
    const final = launch.stdout.lines.filter((line) => /^\[node-[ab]:cpu:r\d\] final weights checksum/.test(line))
    expect(final.map((line) => /^\[(node-[ab])/.exec(line)![1]).sort(), transcript(launch)).toEqual(["node-a", "node-a", "node-b", "node-b"])
    expect(new Set(final.map((line) => line.replace(/^\[[^\]]*\] /, ""))).size).toBe(1)
  }, 90_000)

  test("the words after -- reach every remote rank's argv unchanged; -v reaches the agents, relays and ranks there", async () => {
    const words = ["a b", "it's", "\"double\"", "$HOME", "*", "back\\slash", "--x=1 2", "; echo no"]
    const job = JSON.stringify({ command: [process.execPath, "test/fixtures/torchrun-env-fixture.ts"], args: ["--first"] })
    const launch = twoHosts("args", ["--set", `job=${job}`, "-v", "--", ...words])
    const code = await finished(launch)
    expect(launch.stderr.lines.at(-1), transcript(launch)).toBe("cohort: run completed")
    expect(code).toBe(0)
    const seen = launch.stdout.lines.flatMap((line) => {
      const match = /^\[(node-[ab]):cpu:r(\d)\] (\{.*\})$/.exec(line)
      return match === null ? [] : [[match[1], Number(match[2]), JSON.parse(match[3]!)] as const]
    }).sort((a, b) => a[1] - b[1])
    expect(seen.map(([host]) => host).sort(), transcript(launch)).toEqual(["node-a", "node-a", "node-b", "node-b"])
    for (const [, , env] of seen) expect(env.args).toEqual(["--first", ...words])
    // The level travels through ssh (whose session carries none of the launcher's environment).
    for (const [, , env] of seen) expect(env.COHORT_LOG_LEVEL).toBe("debug")
  }, 90_000)
})
