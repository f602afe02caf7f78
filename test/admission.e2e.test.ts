/**
 * A loopback launcher is not open admission: every local user can reach
 * 127.0.0.1. An agent without the run's salt that dials a running loopback
 * run (one that even accepts growth) gets no seat, only a refusal saying
 * that the run needs its salt (exit 2: dialling again cannot help): the
 * run's hosts, ranks and world are as they were, and nothing of its spec
 * (env, args, salt) reaches the stranger. Real launcher and agent processes.
 */
import { afterEach, expect, test } from "bun:test"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { clusterFile, fetchState, listeningPort, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, pidFiles, waitFor } from "./support/processes.ts"

const started: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of started.splice(0)) proc.kill("SIGKILL")
})

test("an agent without the salt dialling a loopback run that accepts growth is refused for want of the salt; the run is unchanged", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-admission-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, clusterFile({
    devices: 2,
    args: ["hold"],
    join: "{ after_formation: accept, max_ranks: 8 }"
  }, dir).replace("workers:", "env: { HF_TOKEN: secret-token-1234 }\nworkers:"))
  const launch = spawnLaunch(file)
  started.push(launch.proc)
  const port = await listeningPort(launch.stderr.lines)
  expect(launch.stderr.lines.some((line) => line.includes(`listening on 127.0.0.1:${port}`))).toBe(true)
  await waitFor(() => pidFiles(dir).length === 2, "both ranks running", 15_000)

  // No --salt-file: the agent asks for open admission, as a stranger who can reach the port would.
  const stranger = Bun.spawn([process.execPath, "src/cli/agent.ts", "--controller", `127.0.0.1:${port}`, "--host", "evil", "--devices", "4"], {
    cwd: repoRoot,
    stdout: "pipe",
    stderr: "pipe"
  })
  started.push(stranger)
  const output = collectLines(stranger.stderr)
  const strangerOut = collectLines(stranger.stdout)
  const status = await stranger.exited
  await output.done
  await strangerOut.done
  expect(status, output.lines.join("\n")).toBe(2)
  const everything = [...output.lines, ...strangerOut.lines].join("\n")
  expect(everything).toContain("admits only agents that hold the run's salt, and this one has none")
  expect(everything).not.toContain("secret-token-1234")
  expect(everything).not.toContain("joined")

  const state = await fetchState(port)
  expect(state?.ranks.map((rank) => rank.host)).toEqual(["localhost", "localhost"])
  expect(launch.stderr.lines.join("\n")).not.toContain("evil joins")
  launch.proc.kill("SIGINT")
  expect(await launch.proc.exited).toBe(130)
}, 30_000)
