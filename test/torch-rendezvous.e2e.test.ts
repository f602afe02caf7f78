/**
 * The Python ranks' rendezvous, end to end (issue 33): no rank hosts a store anybody can dial, and a rendezvous
 * that does not complete is never silent.
 *
 * - A real second local Unix user (created with useradd: CI runs as root; elsewhere that test is skipped, and
 *   says so) runs test/fixtures/store_poisoner_fixture.py from the moment the launcher listens: every TCP port
 *   that opens on the machine is dialled as a torch TCPStore client, again and again, trying to read a gloo
 *   address, add to torch's barrier counters and overwrite an address. It races the first formation and the
 *   re-form after a rank is SIGKILLed. It must reach no store on any port, and the run must re-form and finish.
 *   (Against the TCPStores ranks used to host, the same fixture reached one store per rank.)
 * - A rank that never comes to its group's first rendezvous (test/fixtures/torch_stall_fixture.py) is lost with
 *   cause `rendezvous` once the bound passes (30 s × COHORT_NET_TIMEOUT_SCALE 0.2 = 6 s here); the run says so,
 *   and the policy (elastic) lets the others form without it and finish.
 *
 * Needs Debian's python3-torch (test/support/debian-torch.ts installs it as root, or the tests skip, saying why).
 */
import { afterAll, describe, expect, test } from "bun:test"
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, lastLine, python, runCommand } from "./support/debian-torch.ts"
import { waitFor } from "./support/processes.ts"
import { secondUser } from "./support/second-user.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch rendezvous e2e skipped: python3-torch not available: ${torchProblem}`)

const who = torchProblem === undefined ? secondUser() : "no torch"
if (torchProblem === undefined && typeof who === "string") console.log(`torch rendezvous second-user test skipped: ${who}`)

/** The TCP ports listening on this machine now (IPv4 and IPv6), as /proc/net/tcp and tcp6 show them to anyone. */
const listeningPorts = (): Array<number> =>
  ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((table) =>
    existsSync(table)
      ? readFileSync(table, "utf8").trim().split("\n").slice(1).map((line) => line.trim().split(/\s+/)).filter((fields) => fields[3] === "0A")
        .map((fields) => parseInt(fields[1]!.split(":").at(-1)!, 16))
      : []
  )

/** Root's TCPStore on loopback, printing its port and holding it until killed. */
const DECOY = [
  "import time, torch.distributed as dist",
  "from datetime import timedelta",
  "store = dist.TCPStore('127.0.0.1', 0, None, True, timedelta(seconds=300), wait_for_workers=False)",
  "print(store.port, flush=True)",
  "time.sleep(300)"
].join("\n")

/** The first line a stream gives, as a number. */
const firstLine = async (stream: ReadableStream<Uint8Array>): Promise<number> => {
  const reader = stream.getReader()
  const decoder = new TextDecoder()
  let text = ""
  while (!text.includes("\n")) {
    const { done, value } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
  }
  reader.releaseLock()
  return Number(text.split("\n")[0])
}

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const clusterFile = (dir: string, name: string, ranks: number, fixture: string, env: Record<string, string>, dataset: number) => {
  const file = join(dir, "torch.yml")
  const vars = Object.entries({ OMP_NUM_THREADS: "1", ...env }).map(([key, value]) => `${key}: ${JSON.stringify(value)}`).join(", ")
  writeFileSync(
    file,
    `name: ${name}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: ${ranks}
    path: ${JSON.stringify(root)}
    env: { ${vars} }
job:
  command: [${python}, ${JSON.stringify(join(import.meta.dir, "fixtures", fixture))}]
  args: [--batch, "128", --lr, "6e-3", --target, "0"]
  dataset_size: ${dataset}
  epochs: 2
failure_policy:
  before_formation: kill_all
  after_formation:
    elastic: { max_failure: 50% }
  heartbeat_timeout: 60s
  grace: 5s
`
  )
  return file
}

describe("the Python ranks' rendezvous", () => {
  test.skipIf(typeof who === "string")("a second user dialling every new port as a TCPStore, racing formation and a re-form, reaches no store; the run re-forms and completes", async () => {
    const { gid, uid } = who as { uid: number; gid: number }
    const dir = mkdtempSync(join(tmpdir(), "cohort-torch-poison-"))
    dirs.push(dir)
    chmodSync(dir, 0o777)
    // Rank 1 SIGKILLs itself after its 20th step: the survivors re-form while the poisoner dials.
    const file = clusterFile(dir, "torch-poison", 3, "torch_elastic_fixture.py", { TEST_DIE_RANK: "1", TEST_DIE_STEP: "20" }, 12_000)
    // Every port that listens before the run starts is none of its own: the poisoner leaves those alone.
    const before = listeningPorts()
    const report = join(dir, "poisoner.json")
    // A decoy: a TCPStore of root's, as every rank used to host. The poisoner must reach it (it looks), and
    // nothing of the run's.
    const decoyProc = Bun.spawn([python, "-c", DECOY], { stdout: "pipe", stderr: "ignore", env: { PATH: "/usr/bin:/bin" } })
    const decoyPort = await firstLine(decoyProc.stdout)
    // The poisoner is at work (torch imported, dialling) before the run starts: it races the first formation.
    const poisoner = Bun.spawn(
      ["setpriv", `--reuid=${uid}`, `--regid=${gid}`, "--clear-groups", python, join(import.meta.dir, "fixtures", "store_poisoner_fixture.py"), "150", report, before.join(",")],
      { cwd: dir, env: { PATH: "/usr/bin:/bin", HOME: dir, OMP_NUM_THREADS: "1" }, stdout: "pipe", stderr: "pipe" }
    )
    const poisoned = () => existsSync(report) ? JSON.parse(readFileSync(report, "utf8")) as { uid: number; rounds: number; tries: number; ports: Record<string, string> } : undefined
    let proc: ReturnType<typeof Bun.spawn> | undefined
    try {
      await waitFor(() => poisoned()?.ports[String(decoyPort)] !== undefined, "the poisoner dialling the decoy", 30_000)
      const launched = Bun.spawn([process.execPath, launch, file], { cwd: dir, stdout: "pipe", stderr: "pipe", stdin: "ignore", env: process.env })
      proc = launched
      const stderr: Array<string> = []
      const reading = (async () => {
        for await (const chunk of launched.stderr.pipeThrough(new TextDecoderStream())) stderr.push(chunk)
      })()
      const stdout = new Response(launched.stdout).text()
      // Bounded here, so that a stalled rendezvous (what a poisoned store did) fails with the transcript.
      const code = await Promise.race([launched.exited, Bun.sleep(100_000).then(() => "still running after 100 s")])
      if (typeof code === "string") launched.kill("SIGKILL")
      await reading
      const transcript = `exit ${code}\n--- stdout ---\n${await stdout}\n--- stderr ---\n${stderr.join("")}`
      expect(lastLine(stderr.join("")), transcript).toBe("cohort: run completed DEGRADED (1 of 3 ranks lost: rank 1 of localhost exited with signal SIGKILL)")
      // The survivors formed a second generation (the re-form after the SIGKILL), with two members.
      expect(await stdout, transcript).toMatch(/rank 0 \(pid \d+, 2 member\(s\), generation 2\)/)
      // Its report of every round so far: every port of the run that listened for half a second was dialled.
      poisoner.kill("SIGKILL")
      const got = poisoned()!
      expect(got.uid).toBe(uid)
      // It found the decoy's store, and no other.
      expect(Object.entries(got.ports).filter(([, how]) => how === "store").map(([port]) => Number(port)), JSON.stringify(got)).toEqual([decoyPort])
    } finally {
      proc?.kill("SIGKILL")
      poisoner.kill("SIGKILL")
      decoyProc.kill("SIGKILL")
    }
  }, 150_000)

  test.skipIf(torchProblem !== undefined)("a rank that never comes to its group's rendezvous is lost with cause rendezvous within the bound; the others form without it and finish", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-torch-stall-"))
    dirs.push(dir)
    const file = clusterFile(dir, "torch-stall", 3, "torch_stall_fixture.py", { TEST_STALL_RANK: "2" }, 6_000)
    const ran = await runCommand([process.execPath, launch, file, "--events", join(dir, "events.jsonl")], 120_000, { COHORT_NET_TIMEOUT_SCALE: "0.2" })
    const transcript = `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}`
    expect(ran.code, transcript).toBe(0)
    expect(ran.stderr, transcript).toContain("cohort: warning: rank(s) 2 lost: never came to generation 1's rendezvous within 6 s (rank(s) 0, 1 waited for it)\n")
    // The verdict names the death the policy counted, though no exit reported it (the rank was given up).
    expect(lastLine(ran.stderr), transcript).toBe(
      "cohort: run completed DEGRADED (1 of 3 ranks lost: rank 2 of localhost lost: never came to generation 1's rendezvous within 6 s (rank(s) 0, 1 waited for it))"
    )
    const events = readFileSync(join(dir, "events.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    const lost = events.filter((event) => event.event === "rank_lost")
    expect(lost.map((event) => [event.ranks, event.kind]), transcript).toEqual([[[2], "rendezvous"]])
    expect(ran.stdout, transcript).toMatch(/rank 0 \(pid \d+, 2 member\(s\), generation 2\)/)
  }, 150_000)
})
