/**
 * `bun run status` as an operator runs it: the real CLI as a subprocess,
 * against fake status servers (a hand-built RunState), against ports where
 * nothing or something else answers, finding its run from `.cohort/runs/`,
 * and against a live launcher.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import type { RankStatus, RunState } from "../src/launcher/view/RunView.ts"
import { readState, render } from "../src/cli/statusTable.ts"
import { fetchState, listeningPort, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const cli = join(repoRoot, "src/cli/status.ts")

/** The state `readState` decodes from `json`; a test that gets none fails here, saying why. */
const stateOf = (json: unknown): RunState => {
  const reading = readState(json)
  if (reading.kind !== "state") throw new Error(`no state: ${JSON.stringify(reading)}`)
  return reading.state
}

const dirs: Array<string> = []
const servers: Array<{ stop: (force?: boolean) => unknown }> = []
const launched: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const server of servers.splice(0)) server.stop(true)
  for (const proc of launched.splice(0)) proc.kill("SIGKILL")
})
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-status-"))
  dirs.push(dir)
  return dir
}

/** The CLI, run to its end. */
const status = async (args: ReadonlyArray<string>, cwd = repoRoot) => {
  const proc = Bun.spawn([process.execPath, cli, ...args], { cwd, stdout: "pipe", stderr: "pipe" })
  launched.push(proc)
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, stdout, stderr }
}

const START = Date.now() - 125_000

const rank = (rank: number, host: string, state: RankStatus["state"], extra: Partial<RankStatus> = {}): RankStatus => ({
  rank,
  host,
  device: String(rank % 2),
  pid: state === "dead" ? null : 4000 + rank,
  state,
  exit: state === "dead" ? "signal SIGKILL" : null,
  restarts: 0,
  startedAt: START + 5_000,
  endedAt: null,
  resources: { cpu: 0.973, rssBytes: 812 * 1024 * 1024, gpuMemoryBytes: 30_000 * 1024 * 1024, gpuUtilization: 0.87, at: START + 100_000 },
  ...extra
})

const fakeState = (phase: RunState["phase"] = "training"): RunState => ({
  run: "fake-run",
  phase,
  startedAt: START,
  updatedAt: START + 120_000,
  world: 4,
  joinedRanks: 4,
  joinedHosts: 2,
  windowRemainingMs: null,
  capRemainingMs: null,
  hosts: [
    { host: "gpu-a", declaredRanks: 2, state: "joined", reason: null },
    { host: "gpu-b", declaredRanks: 2, state: "gone", reason: "its agent's link ended" }
  ],
  ranks: [
    rank(0, "gpu-a", "running"),
    rank(1, "gpu-a", "running", { restarts: 1, resources: { cpu: 0.02, rssBytes: 1024 * 1024 * 1024, gpuMemoryBytes: null, gpuUtilization: null, at: START } }),
    rank(2, "gpu-b", "exited", { exit: "status 0", resources: null }),
    rank(3, "gpu-b", "dead")
  ],
  deaths: [{ rank: 3, host: "gpu-b", cause: "heartbeat silent for 5 s", at: START + 65_000 }],
  training: { epoch: 2, epochs: 5, samplesDone: 12_500, datasetSize: 50_000, samplesPerSec: 20_480, metrics: { loss: 0.185123, accuracy: 0.93127 } },
  throughput: [{ at: START + 100_000, samplesPerSec: 20_480 }],
  verdict: phase === "done" ? "completed DEGRADED (1 of 4 ranks lost: rank 3 on gpu-b)" : null,
  joinedAfterFormation: 0,
  worldSizes: []
})

/** A status endpoint on a free port; `answer` gets the request's number, from 1. */
const serve = (answer: (request: number) => Response | Promise<Response>) => {
  let requests = 0
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (request) => (new URL(request.url).pathname === "/state.json" ? answer(++requests) : new Response("no", { status: 404 }))
  })
  servers.push(server)
  return { server, address: `127.0.0.1:${server.port}`, requests: () => requests }
}

const serveState = (state: unknown) => serve(() => Response.json(state))

/** A port nothing listens on: one a server had, then gave back. */
const closedPort = () => {
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() })
  const port = server.port
  server.stop(true)
  return port
}

describe("against a status endpoint", () => {
  test("the table: header, training, every rank aligned, the death, the host gone", async () => {
    const { address } = serveState(fakeState())
    const { code, stdout, stderr } = await status([address])
    expect(stderr).toBe("")
    expect(code).toBe(0)
    const lines = stdout.split("\n")
    expect(lines[0]).toMatch(/^run fake-run · training · up 2m0\ds · world 4 · joined 4\/4 ranks on 2\/2 hosts$/)
    expect(lines[1]).toBe("training: epoch 2/5 · 25% of epoch (12,500/50,000 samples) · 20,480 samples/s · loss 0.1851 accuracy 0.9313")
    expect(stdout).toContain("ranks: 2 running, 1 exited, 1 dead")
    const header = lines.find((line) => line.startsWith("RANK  HOST"))!
    expect(header).toBeDefined()
    const rows = lines.slice(lines.indexOf(header) + 1, lines.indexOf(header) + 5)
    expect(rows.map((row) => row.trim().split(/\s+/).slice(0, 4))).toEqual([
      ["0", "gpu-a", "0", "running"],
      ["1", "gpu-a", "1", "running"],
      ["2", "gpu-b", "0", "exited"],
      ["3", "gpu-b", "1", "dead"]
    ])
    // Aligned: text starts where its title starts, numbers end where theirs ends.
    for (const title of ["HOST", "STATE", "EXIT"]) {
      const column = header.indexOf(title)
      for (const row of rows) expect(row[column - 1] + row[column]).toMatch(/^ \S$/)
    }
    for (const title of ["PID", "RESTARTS", "RSS MiB"]) {
      const end = header.indexOf(title) + title.length
      for (const row of rows) expect(row[end - 1] + row[end]).toMatch(/^\S $/)
    }
    expect(rows[0]).toMatch(/4000\s+—\s+0\s+97\s+812\s+30000\s+87$/)
    expect(rows[1]).toMatch(/1\s+2\.0\s+1024\s+—\s+—$/)
    expect(rows[2]).toMatch(/4002\s+status 0\s+0\s+—\s+—\s+—\s+—$/)
    // A dead rank uses nothing: no CPU or memory in its row (an older launcher still serves its last sample there)...
    expect(rows[3]).toMatch(/—\s+signal SIGKILL\s+0\s+—\s+—\s+—\s+—$/)
    // ...but what it used when it died is with its death (an OOM shows).
    expect(stdout).toMatch(/deaths: 1\nRANK\s+HOST\s+AFTER\s+LAST RSS MiB\s+CAUSE\n\s*3\s+gpu-b\s+1m05s\s+812\s+heartbeat silent for 5 s\n/)
    expect(stdout).toMatch(/hosts gone: 1\nHOST\s+REASON\ngpu-b\s+its agent's link ended\n/)
    expect(stdout).not.toContain("verdict")
  })

  test("--json: the state as served, pretty-printed", async () => {
    const state = fakeState()
    const { address } = serveState(state)
    const { code, stdout } = await status([address, "--json"])
    expect(code).toBe(0)
    expect(JSON.parse(stdout)).toEqual(state)
    expect(stdout).toContain('\n  "phase": "training",\n')
  })

  test("the status URL the launcher prints works as the address too", async () => {
    const { address } = serveState(fakeState())
    const { code, stdout } = await status([`http://${address}/state.json`])
    expect(code).toBe(0)
    expect(stdout).toStartWith("run fake-run")
  })

  test("a 503 (still starting): said so, exit 1", async () => {
    const { address } = serve(() => Response.json({ error: "no state published yet" }, { status: 503 }))
    const { code, stdout, stderr } = await status([address])
    expect(code).toBe(1)
    expect(stdout).toBe("")
    expect(stderr).toBe(`cohort status: the run at ${address} is still starting: it has no state to show yet; try again in a moment, or use --watch\n`)
  })

  test("--watch: keeps trying through a 503, redraws, exits 0 with the final state when the run is done", async () => {
    const { address, requests } = serve((request) =>
      request === 1
        ? Response.json({ error: "starting" }, { status: 503 })
        : Response.json(fakeState(request < 3 ? "training" : "done"))
    )
    const { code, stdout } = await status([address, "--watch"])
    expect(code).toBe(0)
    expect(requests()).toBe(3)
    // Not a TTY: snapshots one after another, a blank line between them, no escape codes.
    expect(stdout).not.toContain("\x1b[")
    const snapshots = stdout.split(/\n\n(?=run |the run )/)
    expect(snapshots).toHaveLength(3)
    expect(snapshots[0]).toContain("still starting")
    expect(snapshots[1]).toStartWith("run fake-run · training")
    expect(snapshots[2]).toStartWith("run fake-run · done · up 2m00s")
    expect(snapshots[2]).toEndWith("verdict: completed DEGRADED (1 of 4 ranks lost: rank 3 on gpu-b)\n")
  }, 10_000)

  test("--watch follows the run's stream: the verdict's state is shown and how the run ended is said, though /state.json never showed it", async () => {
    const encoder = new TextEncoder()
    const sse = (state: RunState) => encoder.encode(`event: state\ndata: ${JSON.stringify(state)}\n\n`)
    let polled = 0
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (request) => {
        const path = new URL(request.url).pathname
        if (path === "/state.json") {
          polled += 1
          return Response.json(fakeState("training"))
        }
        if (path !== "/events") return new Response("no", { status: 404 })
        // As the board does: the state now, a keep-alive, the verdict's state, then the end of the stream.
        return new Response(new ReadableStream({
          start: (controller) => {
            controller.enqueue(sse(fakeState("training")))
            controller.enqueue(encoder.encode(": keep-alive\n\n"))
            controller.enqueue(sse(fakeState("done")))
            controller.close()
          }
        }), { headers: { "Content-Type": "text/event-stream" } })
      }
    })
    servers.push(server)
    const { code, stdout, stderr } = await status([`127.0.0.1:${server.port}`, "--watch"])
    expect(code).toBe(0)
    const snapshots = stdout.split(/\n\n(?=run )/)
    expect(snapshots).toHaveLength(2)
    expect(snapshots[0]).toStartWith("run fake-run · training")
    expect(snapshots[1]).toStartWith("run fake-run · done")
    expect(snapshots[1]).toEndWith("verdict: completed DEGRADED (1 of 4 ranks lost: rank 3 on gpu-b)\n")
    expect(stderr).toBe("cohort status: run fake-run is over: completed DEGRADED (1 of 4 ranks lost: rank 3 on gpu-b)\n")
    expect(polled).toBe(0)
  }, 10_000)

  test("--watch: a stream that ends without a verdict (the launcher killed) falls back to asking, and says the launcher is gone", async () => {
    const encoder = new TextEncoder()
    let server: ReturnType<typeof Bun.serve> | undefined
    server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (request) => {
        if (new URL(request.url).pathname !== "/events") return new Response("no", { status: 404 })
        return new Response(new ReadableStream({
          start: (controller) => {
            controller.enqueue(encoder.encode(`event: state\ndata: ${JSON.stringify(fakeState("training"))}\n\n`))
            // The launcher dies: its port closes under the stream.
            setTimeout(() => {
              controller.close()
              server?.stop(true)
            }, 50)
          }
        }), { headers: { "Content-Type": "text/event-stream" } })
      }
    })
    servers.push(server)
    const { code, stdout, stderr } = await status([`127.0.0.1:${server.port}`, "--watch"])
    expect(code).toBe(0)
    expect(stdout).toStartWith("run fake-run · training")
    expect(stderr).toBe("cohort status: the launcher is gone; last state above\n")
  }, 10_000)

  test("--watch: the launcher going away after answering ends it with exit 0 and says so", async () => {
    const { server, address } = serveState(fakeState())
    const proc = Bun.spawn([process.execPath, cli, address, "--watch"], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
    launched.push(proc)
    const stdout = collectLines(proc.stdout)
    const stderr = new Response(proc.stderr).text()
    await waitFor(() => stdout.lines.some((line) => line.startsWith("run fake-run")), "a first snapshot", 5_000)
    server.stop(true)
    expect(await proc.exited).toBe(0)
    expect(await stderr).toBe("cohort status: the launcher is gone; last state above\n")
  }, 10_000)

  test("--watch: Ctrl-C is exit 130", async () => {
    const { address } = serveState(fakeState())
    const proc = Bun.spawn([process.execPath, cli, address, "--watch"], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
    launched.push(proc)
    const stdout = collectLines(proc.stdout)
    await waitFor(() => stdout.lines.some((line) => line.startsWith("run fake-run")), "a first snapshot", 5_000)
    proc.kill("SIGINT")
    expect(await proc.exited).toBe(130)
  }, 10_000)

  test("thousands of ranks: a summary by state and every row, quickly", async () => {
    const state = fakeState()
    const ranks = Array.from({ length: 10_000 }, (_, index) => rank(index, `node-${Math.floor(index / 8)}`, index % 1000 === 7 ? "dead" : "running"))
    const { address } = serveState({ ...state, world: ranks.length, ranks })
    const started = performance.now()
    const { code, stdout } = await status([address])
    const elapsed = performance.now() - started
    expect(code).toBe(0)
    expect(stdout).toContain("ranks: 9990 running, 10 dead")
    expect(stdout.split("\n").filter((line) => /^\s*\d+\s+node-\d+\s/.test(line))).toHaveLength(10_000)
    expect(elapsed).toBeLessThan(3_000)
  }, 10_000)
})

describe("when nothing (usable) answers", () => {
  test("nothing listening: exit 1, one line naming the address and what to check", async () => {
    const address = `127.0.0.1:${closedPort()}`
    const { code, stdout, stderr } = await status([address])
    expect(code).toBe(1)
    expect(stdout).toBe("")
    expect(stderr).toBe(
      `cohort status: nothing listens on ${address} (connection refused); check that the launcher runs and that the address is the one its "listening on HOST:PORT" line prints\n`
    )
  })

  test("--watch when nothing ever answered: exit 1 at once", async () => {
    const address = `127.0.0.1:${closedPort()}`
    const { code, stderr } = await status([address, "--watch"])
    expect(code).toBe(1)
    expect(stderr).toContain(`nothing listens on ${address}`)
  })

  test("something that is not HTTP, or not a cohort state: exit 1 naming the address", async () => {
    const ssh = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (socket) => void socket.end("SSH-2.0-OpenSSH_9.6\r\n"), data: () => {} } })
    servers.push(ssh)
    const notHttp = await status([`127.0.0.1:${ssh.port}`])
    expect(notHttp.code).toBe(1)
    expect(notHttp.stderr).toStartWith(`cohort status: 127.0.0.1:${ssh.port} answered, but not over HTTP;`)

    const other = serve(() => Response.json({ hello: "world" }))
    const notCohort = await status([other.address])
    expect(notCohort.code).toBe(1)
    expect(notCohort.stderr).toStartWith(`cohort status: ${other.address} answered JSON, not a cohort run state;`)
  })

  test("a cohort state this version cannot read (another version's launcher): exit 1 saying what is wrong in it and what to do, once or watched", async () => {
    const { address } = serveState({ ...fakeState(), phase: "paused" })
    const expected = `cohort status: ${address} answered a run state this status cannot read (phase: Expected "waiting" | "forming" | "training" | "done" | "failed", actual "paused"): its launcher is of another cohort version; run bun run status from the checkout that started it\n`
    for (const args of [[address], [address, "--json"]]) {
      const { code, stdout, stderr } = await status(args)
      expect({ code, stdout, stderr }).toEqual({ code: 1, stdout: "", stderr: expected })
    }
    // From the stream: the first state it cannot read ends the watch, rather than a screen that never changes.
    const encoder = new TextEncoder()
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (request) =>
        new URL(request.url).pathname !== "/events" ? new Response("no", { status: 404 }) : new Response(new ReadableStream({
          start: (controller) => {
            controller.enqueue(encoder.encode(`event: state\ndata: ${JSON.stringify({ ...fakeState(), ranks: [{ ...rank(0, "gpu-a", "running"), restarts: "one" }] })}\n\n`))
          }
        }), { headers: { "Content-Type": "text/event-stream" } })
    })
    servers.push(server)
    const watched = await status([`127.0.0.1:${server.port}`, "--watch"])
    expect(watched).toEqual({
      code: 1,
      stdout: "",
      stderr: `cohort status: 127.0.0.1:${server.port} answered a run state this status cannot read (ranks[0].restarts: Expected number, actual "one"): its launcher is of another cohort version; run bun run status from the checkout that started it\n`
    })
  }, 10_000)

  test("a port that accepts and never answers: exit 1 after the 2 s timeout", async () => {
    const mute = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: () => {} } })
    servers.push(mute)
    const started = performance.now()
    const { code, stderr } = await status([`127.0.0.1:${mute.port}`])
    expect(code).toBe(1)
    expect(stderr).toStartWith(`cohort status: 127.0.0.1:${mute.port} did not answer within 2 s;`)
    expect(performance.now() - started).toBeLessThan(4_500)
  }, 10_000)
})

describe("finding the run from .cohort/runs/", () => {
  const runFile = (cwd: string, run: string, address: string, pid: number, startedAt: number) => {
    mkdirSync(join(cwd, ".cohort", "runs"), { recursive: true })
    const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))]
    writeFileSync(join(cwd, ".cohort", "runs", `${run}.json`), JSON.stringify({ run, address: host, port, pid, startedAt }))
  }

  /** A pid that was ours and has ended. */
  const deadPid = async () => {
    const proc = Bun.spawn(["true"])
    await proc.exited
    return proc.pid
  }

  test("no HOST:PORT and no run file: exit 1 with the hint", async () => {
    const cwd = tempDir()
    const { code, stderr } = await status([], cwd)
    expect(code).toBe(1)
    expect(stderr).toBe(
      `cohort status: no running launcher found in ${join(cwd, ".cohort", "runs")}; give the launcher's HOST:PORT (its "listening on HOST:PORT" line prints it)\n`
    )
  })

  test("the newest run whose launcher is alive is found; a stale one is skipped", async () => {
    const cwd = tempDir()
    const live = serveState(fakeState())
    runFile(cwd, "fake-run", live.address, process.pid, Date.now() - 60_000)
    // Newer, but its launcher is gone: it must not be chosen.
    runFile(cwd, "stale", `127.0.0.1:${closedPort()}`, await deadPid(), Date.now())
    writeFileSync(join(cwd, ".cohort", "runs", "half-written.json"), "{\"run\": ")
    const { code, stdout, stderr } = await status([], cwd)
    expect(stderr).toBe("")
    expect(code).toBe(0)
    expect(stdout).toStartWith("run fake-run · training")
  })

  /** An entry as the launcher writes it now (RunRegistry): an id of its own, this host, the page. */
  const entry = (cwd: string, fields: { id: string; run: string; address: string; pid: number; startedAt: number; pidStart?: string }) => {
    mkdirSync(join(cwd, ".cohort", "runs"), { recursive: true })
    const [host, port] = [fields.address.slice(0, fields.address.lastIndexOf(":")), Number(fields.address.slice(fields.address.lastIndexOf(":") + 1))]
    writeFileSync(
      join(cwd, ".cohort", "runs", `${fields.id}.json`),
      JSON.stringify({ ...fields, address: host, port, page: port === 0 ? "" : `http://${host}:${port}/`, host: hostname(), checkpoint: "/x.json", startToken: "" })
    )
  }

  test("several runs: listed (id, name, pid, start, page), exit 0; --run ID or a name chooses; --json and --watch without a choice are exit 2", async () => {
    const cwd = tempDir()
    const older = serveState({ ...fakeState(), run: "older" })
    const newer = serveState({ ...fakeState(), run: "newer" })
    const olderAt = Date.now() - 60_000
    const newerAt = Date.now()
    entry(cwd, { id: `older-${process.pid}`, run: "older", address: older.address, pid: process.pid, startedAt: olderAt })
    entry(cwd, { id: `newer-${process.pid}`, run: "newer", address: newer.address, pid: process.pid, startedAt: newerAt })
    runFile(cwd, "ended", `127.0.0.1:${closedPort()}`, await deadPid(), Date.now())

    const clock = (at: number) => new Date(at).toTimeString().slice(0, 8)
    const pid = String(process.pid)
    const listed = [
      ["ID", "NAME", "PID", "STARTED", "PAGE"],
      [`newer-${pid}`, "newer", pid, clock(newerAt), `http://${newer.address}/`],
      [`older-${pid}`, "older", pid, clock(olderAt), `http://${older.address}/`]
    ]
    const several = await status([], cwd)
    expect(several.code).toBe(0)
    expect(several.stdout.trimEnd().split("\n").map((line) => line.split(/\s{2,}/))).toEqual(listed)
    expect(several.stderr).toBe("cohort status: 2 runs are running here: bun run status --run ID shows one\n")

    for (const flags of [["--json"], ["--watch"], ["--start"]]) {
      const ambiguous = await status(flags, cwd)
      expect(ambiguous.code).toBe(2)
      expect(ambiguous.stdout).toBe("")
      expect(ambiguous.stderr.split("\n")[0]).toBe("cohort status: 2 runs are running here: choose one with --run ID")
      expect(ambiguous.stderr).toContain(`newer-${pid}`)
    }

    const byId = await status(["--run", `older-${pid}`, "--json"], cwd)
    expect(byId.code).toBe(0)
    expect(JSON.parse(byId.stdout).run).toBe("older")
    const byName = await status(["--run", "newer"], cwd)
    expect(byName.code).toBe(0)
    expect(byName.stdout).toStartWith("run newer ·")

    const unknown = await status(["--run", "nope"], cwd)
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain("no run nope is running from")
    expect(unknown.stderr).toContain(`(running: newer-${pid}, older-${pid})`)

    const ended = await status(["--run", "ended"], cwd)
    expect(ended.code).toBe(1)
    expect(ended.stderr).toMatch(/^cohort status: run ended is not running here: its launcher \(pid \d+\) is gone\n$/)
  })

  test("two runs of one name: the name alone is not enough, the id is; an entry whose pid now belongs to another process is skipped", async () => {
    const cwd = tempDir()
    const first = serveState({ ...fakeState(), run: "twin" })
    const second = serveState({ ...fakeState(), run: "twin", phase: "waiting" })
    entry(cwd, { id: `twin-${process.pid}`, run: "twin", address: first.address, pid: process.pid, startedAt: Date.now() - 1_000 })
    // The pid is alive, but its process started at another time: a later process got the pid of a launcher gone.
    entry(cwd, { id: "twin-1", run: "twin", address: second.address, pid: process.pid, startedAt: Date.now(), pidStart: "1" })
    const byName = await status(["--run", "twin"], cwd)
    expect(byName.code).toBe(0)
    expect(byName.stdout).toStartWith("run twin · training")
    // With both alive, the name is ambiguous.
    const alsoAlive = serveState({ ...fakeState(), run: "twin" })
    entry(cwd, { id: "twin-2", run: "twin", address: alsoAlive.address, pid: process.pid, startedAt: Date.now() })
    const ambiguous = await status(["--run", "twin"], cwd)
    expect(ambiguous.code).toBe(2)
    expect(ambiguous.stderr.split("\n")[0]).toBe("cohort status: 2 runs named twin are running here: choose one with --run ID")
    expect((await status(["--run", "twin-2", "--json"], cwd)).code).toBe(0)
  })

  test("a run that has registered but does not listen yet: said so, exit 1 (--watch waits for it)", async () => {
    const cwd = tempDir()
    entry(cwd, { id: `early-${process.pid}`, run: "early", address: "127.0.0.1:0", pid: process.pid, startedAt: Date.now() })
    const { code, stderr } = await status([], cwd)
    expect(code).toBe(1)
    expect(stderr).toBe(`cohort status: run early-${process.pid} is still starting (it does not listen yet); try again in a moment, or use --watch\n`)
    // --watch: it says it waits; once the entry names a port, it follows the run.
    const live = serveState({ ...fakeState("done"), run: "early" })
    const proc = Bun.spawn([process.execPath, cli, "--watch"], { cwd, stdout: "pipe", stderr: "pipe" })
    launched.push(proc)
    const said = collectLines(proc.stderr)
    await waitFor(() => said.lines.includes(`cohort status: run early-${process.pid} is still starting (it does not listen yet); waiting`), "the watch to wait", 5_000)
    entry(cwd, { id: `early-${process.pid}`, run: "early", address: live.address, pid: process.pid, startedAt: Date.now() })
    expect(await proc.exited).toBe(0)
    expect(await new Response(proc.stdout).text()).toContain("verdict: completed DEGRADED")
  }, 10_000)

  test("a run file whose launcher does not answer: the message names the address and the run", async () => {
    const cwd = tempDir()
    const port = closedPort()
    runFile(cwd, "silent", `0.0.0.0:${port}`, process.pid, Date.now())
    const { code, stderr } = await status([], cwd)
    expect(code).toBe(1)
    // Bound to every interface: asked on loopback.
    expect(stderr).toStartWith(`cohort status: nothing listens on 127.0.0.1:${port} (connection refused) (run silent, from .cohort/runs/);`)
  })
})

describe("the run's page token", () => {
  const TOKEN = "00112233445566778899aabbccddeeff"
  /** A status endpoint that, like a launcher, shows the state only to a request with the page token in its header. */
  const serveGuarded = () => {
    const seen: Array<string> = []
    const served = serve(() => Response.json({ error: "no" }, { status: 500 }))
    served.server.reload({
      fetch: (request) => {
        const authorization = request.headers.get("authorization")
        seen.push(`${authorization} ${new URL(request.url).search || "(no query)"}`)
        if (new URL(request.url).pathname !== "/state.json") return new Response("no", { status: 404 })
        if (authorization === null) return Response.json({ error: "this run's pages need its page token" }, { status: 401 })
        return authorization === `Bearer ${TOKEN}` ? Response.json(fakeState()) : Response.json({ error: "wrong page token for this run" }, { status: 403 })
      }
    })
    return { ...served, seen }
  }
  const entryWithPage = (cwd: string, address: string, page: string) => {
    mkdirSync(join(cwd, ".cohort", "runs"), { recursive: true })
    const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))]
    writeFileSync(
      join(cwd, ".cohort", "runs", `guarded-${process.pid}.json`),
      JSON.stringify({ id: `guarded-${process.pid}`, run: "guarded", address: host, port, page, pid: process.pid, startedAt: Date.now(), host: hostname(), checkpoint: "", startToken: "" })
    )
  }

  test("found in the run's registry entry (its page URL), by the run or by the port asked, and sent in a header, never the URL", async () => {
    const cwd = tempDir()
    const guarded = serveGuarded()
    entryWithPage(cwd, guarded.address, `http://${guarded.address}/?token=${TOKEN}`)
    const found = await status([], cwd)
    expect([found.code, found.stderr]).toEqual([0, ""])
    expect(found.stdout).toStartWith("run fake-run · training")
    const byPort = await status([guarded.address], cwd)
    expect([byPort.code, byPort.stderr]).toEqual([0, ""])
    expect(guarded.seen).toEqual([`Bearer ${TOKEN} (no query)`, `Bearer ${TOKEN} (no query)`])
  })

  test("from COHORT_PAGE_TOKEN, or from the ?token= of a page URL given, when no entry of this checkout has it", async () => {
    const cwd = tempDir()
    const guarded = serveGuarded()
    const fromEnv = Bun.spawn([process.execPath, cli, guarded.address], { cwd, env: { ...process.env, COHORT_PAGE_TOKEN: TOKEN }, stdout: "pipe", stderr: "pipe" })
    launched.push(fromEnv)
    expect(await fromEnv.exited).toBe(0)
    expect(await new Response(fromEnv.stdout).text()).toStartWith("run fake-run · training")
    const fromUrl = await status([`http://${guarded.address}/?token=${TOKEN}`], cwd)
    expect([fromUrl.code, fromUrl.stderr]).toEqual([0, ""])
    expect(fromUrl.stdout).toStartWith("run fake-run · training")
  })

  test("none to be had: exit 1, one line saying where the token is; a wrong one: exit 1, saying it is not this run's", async () => {
    const cwd = tempDir()
    const guarded = serveGuarded()
    const none = await status([guarded.address], cwd)
    expect(none).toEqual({
      code: 1,
      stdout: "",
      stderr: `cohort status: ${guarded.address} wants the run's page token (HTTP 401): give the page URL the launcher printed (live page: …?token=…) ` +
        "or set COHORT_PAGE_TOKEN, or run bun run status in the folder the launch was started from\n"
    })
    const wrong = await status([`http://${guarded.address}/?token=${"9".repeat(32)}`], cwd)
    expect(wrong).toEqual({
      code: 1,
      stdout: "",
      stderr: `cohort status: ${guarded.address} refused the page token (HTTP 403): it is not this run's; give the page URL the launcher printed (live page: …?token=…) ` +
        "or set COHORT_PAGE_TOKEN, or run bun run status in the folder the launch was started from\n"
    })
  })
})

describe("arguments", () => {
  test("--help: the usage, exit 0", async () => {
    const { code, stdout } = await status(["--help"])
    expect(code).toBe(0)
    expect(stdout).toStartWith("usage: bun run status [HOST:PORT]")
  })

  test.each([
    [["--frobnicate"], "unknown option --frobnicate"],
    [["localhost"], "localhost is not HOST:PORT"],
    [["127.0.0.1:99999"], "127.0.0.1:99999 is not HOST:PORT"],
    [["127.0.0.1:1", "127.0.0.1:2"], "one launcher at a time"],
    [["--run"], "--run needs a run id (name-pid) or name"],
    [["127.0.0.1:1", "--run", "x"], "give HOST:PORT or --run ID, not both"]
  ])("%p: exit 2 with the usage", async (args, message) => {
    const { code, stdout, stderr } = await status(args)
    expect(code).toBe(2)
    expect(stdout).toBe("")
    expect(stderr).toStartWith(`cohort status: ${message}`)
    expect(stderr).toContain("usage: bun run status")
  })
})

describe("the table alone", () => {
  test("a state with only some fields (an older launcher's) renders without a crash", () => {
    const state = stateOf({
      phase: "waiting",
      joinedRanks: 1,
      joinedHosts: 1,
      windowRemainingMs: 12_300,
      capRemainingMs: 55_000,
      ranks: [{ rank: 0, host: "localhost", device: "cpu", pid: null, state: "starting", exit: null }]
    })
    const text = render(state, { now: Date.now() })
    expect(text).toStartWith("run · waiting · world 1 · joined 1/1 ranks on 1 hosts · join window closes in 12s (hard cap in 55s)\n")
    expect(text).toMatch(/\n\s*0\s+localhost\s+cpu\s+starting\s+—\s+—\s+0\s+—\s+—\s+—\s+—\n/)
    expect(readState({ hello: "world" })).toEqual({ kind: "not-cohort" })
    expect(readState([])).toEqual({ kind: "not-cohort" })
    expect(readState({ phase: 3, ranks: [] })).toEqual({ kind: "not-cohort" })
  })

  test("what an older launcher left out reads as unknown; served as JSON, the state decodes to what the launcher had", () => {
    expect(stateOf({ phase: "waiting", ranks: [{ rank: 0, state: "starting" }], worldSizes: [{ at: 5, ranks: 2 }] })).toEqual({
      run: "",
      phase: "waiting",
      startedAt: 0,
      updatedAt: 0,
      world: 0,
      joinedRanks: 0,
      joinedHosts: 0,
      windowRemainingMs: null,
      capRemainingMs: null,
      hosts: [],
      ranks: [{ rank: 0, host: "?", device: "?", pid: null, state: "starting", exit: null, restarts: 0, startedAt: null, endedAt: null, resources: null }],
      deaths: [],
      training: null,
      throughput: [],
      verdict: null,
      joinedAfterFormation: 0,
      worldSizes: [{ at: 5, ranks: 2, alive: 2 }]
    })
    const served = { ...fakeState("done"), inventory: [{ host: "gpu-a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0, 4] }] }], ruleMatches: { oom: 1 } }
    expect(stateOf(JSON.parse(JSON.stringify(served)))).toEqual(served)
    // JSON writes a diverged loss (NaN) as null: it reads back as NaN, not as a state that cannot be read.
    const training = { epoch: 1, epochs: 2, samplesDone: 3, datasetSize: 4, samplesPerSec: null, metrics: { loss: null, accuracy: 0.5 } }
    expect(stateOf({ phase: "training", ranks: [], training }).training).toEqual({ ...training, metrics: { loss: Number.NaN, accuracy: 0.5 } })
  })

  test.each([
    [{ phase: "paused", ranks: [] }, `phase: Expected "waiting" | "forming" | "training" | "done" | "failed", actual "paused"`],
    [{ phase: "waiting", ranks: [{ nonsense: true }] }, "ranks[0].rank: is missing"],
    [{ phase: "waiting", ranks: [{ rank: 0, state: "zombie" }] }, `ranks[0].state: Expected "starting" | "running" | "exited" | "dead", actual "zombie"`],
    [{ phase: "waiting", ranks: [{ rank: 0, state: "running", resources: { cpu: "most" } }] }, `ranks[0].resources.cpu: Expected number, actual "most"`],
    [{ phase: "waiting", ranks: [], hosts: [{ host: "a", state: "joined", reason: 3 }] }, "hosts[0].reason: Expected string | null, actual 3"],
    [{ phase: "waiting", ranks: [], joinRule: { quorum: "four", start: "auto" } }, `joinRule.quorum: Expected number, actual "four"`],
    [{ phase: "training", ranks: [], training: 5 }, "training: Expected an object, actual 5"],
    [{ phase: "done", ranks: [], deaths: [{ rank: 1, cause: ["oom"] }] }, `deaths[0].cause: Expected string, actual ["oom"]`]
  ])("a cohort state with a field this version does not know (%j): unreadable, saying where and what", (json, problem) => {
    expect(readState(json)).toEqual({ kind: "unreadable", problem })
  })

  test("the join window in the header: when it closes; once closed, what it waits for; under a manual start, the quorum then the operator", () => {
    const waiting = (joinedRanks: number, windowRemainingMs: number, joinRule: unknown) =>
      render(stateOf({ phase: "waiting", world: 4, joinedRanks, joinedHosts: 1, hosts: [], windowRemainingMs, capRemainingMs: 85_000, ...(joinRule === undefined ? {} : { joinRule }), ranks: [] }), { now: 0 }).split("\n")[0]!
    const auto = { quorum: 4, start: "auto" }
    expect(waiting(2, 12_000, auto)).toEndWith(" · join window closes in 12s (hard cap in 1m25s)")
    expect(waiting(2, 0, auto)).toEndWith(" · join window closed: waiting for the quorum (2/4 ranks), hard cap in 1m25s")
    expect(waiting(2, 12_000, { quorum: 4, start: "manual" })).toEndWith(" · join window waits for the quorum (2/4 ranks), hard cap in 1m25s")
    expect(waiting(4, 0, { quorum: 4, start: "manual" })).toEndWith(" · join window waits for the operator's start (bun run status --start), hard cap in 1m25s")
    // An older launcher says nothing of its rule.
    expect(waiting(2, 0, undefined)).toEndWith(" · join window closed: waiting for more ranks, hard cap in 1m25s")
    expect(waiting(2, 0, null)).toEndWith(" · join window closed: waiting for more ranks, hard cap in 1m25s")
  })

  test("after the verdict: the phase is final at once, with the cleanup the launcher still does; the inventory has a line of its own", () => {
    const inventory = [
      { host: "gpu-a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0] }, { device: "1", label: "NVIDIA H200", ranks: [1] }] },
      { host: "gpu-b", devices: [{ device: "cpu", label: "cpu", ranks: [2] }, { device: "cpu", label: "cpu", ranks: [3] }] }
    ]
    const detail = "telling the hosts the run is over and waiting up to 3 s for 2 agent(s) to leave, then ending what is left on gpu-b"
    // As served: through JSON.
    const served = (extra: object) => stateOf(JSON.parse(JSON.stringify({ ...fakeState("done"), inventory, ...extra })))
    const cleaning = render(served({ cleanup: { since: START + 120_000, detail } }), { now: START + 200_000 }).split("\n")
    expect(cleaning[0]).toBe("run fake-run · done (cleaning up) · up 2m00s · world 4 · joined 4/4 ranks on 2/2 hosts")
    expect(cleaning[1]).toBe(`cleaning up: ${detail}`)
    expect(cleaning[3]).toBe("inventory: gpu-a: 2 × NVIDIA H200; gpu-b: 2 × cpu")
    expect(cleaning).toContain("verdict: completed DEGRADED (1 of 4 ranks lost: rank 3 on gpu-b)")
    const clean = render(served({ cleanup: null }), { now: START + 200_000 }).split("\n")
    expect(clean[0]).toBe("run fake-run · done · up 2m00s · world 4 · joined 4/4 ranks on 2/2 hosts")
    expect(clean[2]).toBe("inventory: gpu-a: 2 × NVIDIA H200; gpu-b: 2 × cpu")
    expect(clean.filter((line) => line.startsWith("cleaning up"))).toEqual([])
    // An older launcher serves neither.
    expect(render(stateOf(fakeState("done")), { now: START + 200_000 }).split("\n").filter((line) => /^(inventory|cleaning up):/.test(line))).toEqual([])
  })

  test("fitted to a screen, the inventory names its first hosts and counts the rest", () => {
    const inventory = Array.from({ length: 20 }, (_, host) => ({ host: `h${host}`, devices: [{ device: "cpu", label: "cpu", ranks: [host] }] }))
    const text = render({ ...fakeState(), inventory }, { now: Date.now(), fitLines: 30 })
    expect(text.split("\n")).toContainEqual(
      "inventory: h0: 1 × cpu; h1: 1 × cpu; h2: 1 × cpu; h3: 1 × cpu; h4: 1 × cpu; h5: 1 × cpu; h6: 1 × cpu; h7: 1 × cpu; … 12 more host(s) (--json has them all)"
    )
    expect(render({ ...fakeState(), inventory }, { now: Date.now() })).toContain("h18: 1 × cpu; h19: 1 × cpu\n")
  })

  test("fitted to a screen: the ranks that are not running first, the rest counted", () => {
    const ranks = Array.from({ length: 1000 }, (_, index) => rank(index, "h", index === 500 ? "dead" : "running"))
    const text = render({ ...fakeState(), ranks }, { now: Date.now(), fitLines: 30 })
    expect(text.split("\n")).toHaveLength(30 + 1)
    const rows = text.split("\n").filter((line) => /^\s*\d+\s+h\s/.test(line))
    expect(rows).toHaveLength(16)
    expect(rows.some((row) => /^\s*500\s+h\s+0\s+dead/.test(row))).toBe(true)
    expect(text).toContain("… 984 more running ranks not shown")
  })
})

test("against a live launcher: the ranks of a running job", async () => {
  const dir = tempDir()
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: status-live
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
job:
  entry: examples/train.ts
  dataset_size: 20000
  # Long enough to still run when looked at; the test stops it.
  epochs: 200
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  grace: 2s
`)
  const run = spawnLaunch(file)
  launched.push(run.proc)
  await waitFor(() => run.stderr.lines.some((line) => /listening on 127\.0\.0\.1:\d+/.test(line)), "the launcher to listen", 15_000)
  const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(run.stderr.lines.find((line) => /listening on/.test(line))!)![1])
  let ranksRunning = false
  const deadline = performance.now() + 15_000
  while (!ranksRunning && performance.now() < deadline) {
    const state = await fetchState(port)
    ranksRunning = state?.phase === "training" && state.ranks.filter((entry) => entry.state === "running").length === 2
    if (!ranksRunning) await Bun.sleep(20)
  }
  expect(ranksRunning, run.stderr.lines.join("\n")).toBe(true)

  const { code, stdout, stderr } = await status([`127.0.0.1:${port}`])
  expect(code, stderr).toBe(0)
  expect(stdout).toMatch(/ · training · /)
  expect(stdout).toMatch(/\n\s*0\s+localhost\s+\S+\s+running\s+\d+/)
  expect(stdout).toMatch(/\n\s*1\s+localhost\s+\S+\s+running\s+\d+/)

  run.proc.kill("SIGINT")
  expect(await run.proc.exited).toBe(130)
}, 40_000)

test("--start closes a real launcher's manual join window with the token from .cohort/runs/; a run not started waits for it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-status-start-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: status-start
controller:
  join: { start: manual, timeout: 30s, max_timeout: 60s }
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
job:
  entry: test/fixtures/rank-fixture.ts
  args: ["work=100"]
`)
  const run = spawnLaunch(file)
  launched.push(run.proc)
  const port = await listeningPort(run.stderr.lines)
  // The entry is the run's own: `<name>-<pid>` (the launcher's pid).
  await waitFor(() => existsSync(join(repoRoot, ".cohort", "runs", `status-start-${run.proc.pid}.json`)), "the run's registry file", 10_000)
  // The window waits for the operator while the host has joined.
  let joined = false
  while (!joined) joined = (await fetchState(port))?.joinedRanks === 2
  expect((await fetchState(port))?.phase).toBe("waiting")
  const { code, stderr } = await status(["--start", "--run", "status-start"])
  expect(code, stderr).toBe(0)
  expect(stderr).toBe(`cohort status: armed the start of the join window (run status-start-${run.proc.pid}, from .cohort/runs/)\n`)
  expect(await run.proc.exited).toBe(0)
}, 40_000)

test("--watch on a real run: it follows the run to its end, shows the final state and says how it ended", async () => {
  const dir = tempDir()
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: status-watch
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
job:
  entry: examples/train.ts
  dataset_size: 4000
  epochs: 2
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  grace: 2s
`)
  const run = spawnLaunch(file)
  launched.push(run.proc)
  // Watched from its registry entry, as soon as there is one (it may not listen yet).
  await waitFor(() => existsSync(join(repoRoot, ".cohort", "runs", `status-watch-${run.proc.pid}.json`)), "the run's registry file", 15_000)
  const watching = await status(["--watch", "--run", `status-watch-${run.proc.pid}`])
  expect(await run.proc.exited, run.stderr.lines.join("\n")).toBe(0)
  expect(watching.code, watching.stderr).toBe(0)
  // The verdict is said before the cleanup: the last state seen may still be cleaning up.
  expect(watching.stdout).toMatch(/(^|\n)run status-watch · done( \(cleaning up\))? · /)
  expect(watching.stdout).toEndWith("verdict: run completed\n")
  expect(watching.stderr.trimEnd().split("\n").at(-1)).toBe("cohort status: run status-watch is over: run completed")
  // The run's entry went with it.
  expect(existsSync(join(repoRoot, ".cohort", "runs", `status-watch-${run.proc.pid}.json`))).toBe(false)
}, 40_000)

test("--start with HOST:PORT is refused: the token is found through the run, never given on the command line", async () => {
  const { code, stderr } = await status(["127.0.0.1:1", "--start"])
  expect(code).toBe(2)
  expect(stderr).toStartWith("cohort status: --start finds the run in .cohort/runs/ (its token is there): give --run ID, not HOST:PORT")
})
