/**
 * Handing a rank a secret: `env: { KEY: { from_env: NAME } }` takes it from
 * the launcher's own environment, so it is in no file and in no argv. A
 * rank's argv (/proc/<pid>/cmdline) is readable by every local user; its
 * environment (/proc/<pid>/environ, mode 0400) only by the run's user and
 * root. Checked on real rank processes, and, as root, by reading both files
 * as another user (65534) with setpriv.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import { decodeEnv } from "../src/config/Env.ts"
import { parse } from "../src/config/reading/Yaml.ts"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { commandLine, environment, pidFiles, waitFor } from "./support/processes.ts"

const launched: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of launched.splice(0)) proc.kill("SIGKILL")
})

const isRoot = process.getuid?.() === 0
if (!isRoot) console.log("rank-secrets: the other-user check (uid 65534 reads a rank's argv, not its environment) skipped: not root, so setpriv cannot become another uid")

const decode = (text: string, from: Readonly<Record<string, string>>) =>
  Effect.runPromise(Effect.either(parse(text, "cluster.yml", (root) => decodeEnv(root.get("env"), from))))

describe("env: { KEY: { from_env: NAME } }", () => {
  test("takes the value of the launcher's variable NAME; plain values beside it are as written", async () => {
    expect(await decode("env: { HF_TOKEN: { from_env: MY_HF }, OMP_NUM_THREADS: 2 }", { MY_HF: "hf_abc123" })).toEqual(
      expect.objectContaining({ right: { HF_TOKEN: "hf_abc123", OMP_NUM_THREADS: "2" } })
    )
  })

  test.each([
    ["a variable that is not set", "env: { HF_TOKEN: { from_env: MISSING } }", "cluster.yml: env.HF_TOKEN.from_env (line 1, col 30): HF_TOKEN is to come from MISSING in the launcher's environment, where it is not set: export MISSING before the launch, or write the value"],
    ["a name that is no variable's", "env: { HF_TOKEN: { from_env: 2BAD } }", `cluster.yml: env.HF_TOKEN.from_env (line 1, col 30): "2BAD" is not a valid variable name (letters, digits and _, not starting with a digit)`],
    ["a mapping without from_env", "env: { HF_TOKEN: { from: X } }", `unknown key "from"`],
    ["a list", "env: { HF_TOKEN: [a] }", "expected a string value, or { from_env: NAME } to take it from the launcher's environment"]
  ])("%s is refused, naming the key and what to do", async (_, text, message) => {
    const out = await decode(text, {})
    expect(out._tag).toBe("Left")
    if (out._tag === "Left") expect(out.left.message).toContain(message)
  })
})

// A command job: its args are the program's own argv, there for every local user to read (an entry job's travel in its envelope).
test("a real run: the secret is in each rank's environment (0400, the run's user's), never in any argv or in the cluster file", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-secret-"))
  const secret = `s3cr3t-${crypto.randomUUID()}`
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: secret
env: { API_TOKEN: { from_env: RANK_SECRET_FOR_TEST } }
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
job:
  # Each rank writes its pid and waits to be stopped; its args are its argv.
  command: [sh, -c, 'echo $$ > ${dir}/rank-$RANK.pid; sleep 60 & wait', cohort-rank]
  args: [visible-argument]
failure_policy: { grace: 2s }
`)
  const run = spawnLaunch(file, { RANK_SECRET_FOR_TEST: secret })
  launched.push(run.proc)
  await waitFor(() => pidFiles(dir).length === 2, "two ranks running user code", 15_000)
  const ranks = pidFiles(dir)
  const seen = ranks.map((pid) => {
    const environ = statSync(`/proc/${pid}/environ`)
    return {
      argvHasIt: commandLine(pid).includes(secret),
      argvHasArgs: commandLine(pid).includes("visible-argument"),
      environHasIt: environment(pid).API_TOKEN === secret,
      environMode: (environ.mode & 0o777).toString(8),
      environOwner: environ.uid
    }
  })
  const me = process.getuid!()
  expect(seen).toEqual(ranks.map(() => ({ argvHasIt: false, argvHasArgs: true, environHasIt: true, environMode: "400", environOwner: me })))
  expect(commandLine(run.proc.pid).includes(secret)).toBe(false)
  expect(readFileSync(file, "utf8").includes(secret)).toBe(false)

  if (isRoot) {
    // Another local user: the argv is theirs to read, the environment is not.
    const asNobody = (path: string) => {
      const read = Bun.spawnSync(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", path], { stdout: "pipe", stderr: "pipe" })
      return { ok: read.exitCode === 0, hasSecret: read.stdout.toString().includes(secret) }
    }
    const argv = Bun.spawnSync(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", `/proc/${ranks[0]}/cmdline`], { stdout: "pipe" })
    expect(argv.stdout.toString().split("\0")).toContain("visible-argument")
    expect(asNobody(`/proc/${ranks[0]}/cmdline`)).toEqual({ ok: true, hasSecret: false })
    expect(asNobody(`/proc/${ranks[0]}/environ`)).toEqual({ ok: false, hasSecret: false })
  }
  run.proc.kill("SIGTERM")
  expect(await run.proc.exited).toBe(143)
}, 30_000)
