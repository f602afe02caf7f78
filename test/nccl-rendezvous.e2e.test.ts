/**
 * `backend: nccl` end to end with real launcher, agent and rank processes:
 * the ranks rendezvous through the launcher, the generator makes the id
 * through the native library, and after a death the survivors get a new
 * generation without the dead. NCCL itself is a small C stand-in
 * (fixtures/fake-gpu/nccl.c, built here, pointed at with COHORT_NCCL_LIB);
 * without a C compiler the tests that need it say so and are skipped. Where no
 * NCCL is found at all, the run fails with the search in its root cause.
 */
import { describe, expect, test } from "bun:test"
import { dlopen, FFIType } from "bun:ffi"
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { listeningPort, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { waitFor } from "./support/processes.ts"

const dir = mkdtempSync(join(tmpdir(), "cohort-nccl-"))
const stub = join(dir, "libnccl.so.2")

/** Built while the file loads, so that a test that needs them is registered as skipped (and counted) without them. */
const stubProblem = ((): string | undefined => {
  const cc = Bun.which("cc") ?? Bun.which("gcc")
  if (cc === null) return "no C compiler (cc) to build the NCCL and CUDA stand-ins"
  for (const [source, library] of [["nccl", "libnccl.so.2"], ["cudart", "libcudart.so"], ["cuda", "libcuda.so.1"]] as const) {
    const built = Bun.spawnSync([cc, "-shared", "-fPIC", "-O2", "-o", join(dir, library), join(import.meta.dir, `fixtures/fake-gpu/${source}.c`)], { stderr: "pipe" })
    if (built.exitCode !== 0) return `building the ${source} stand-in failed: ${built.stderr.toString()}`
  }
  return undefined
})()
if (stubProblem !== undefined) console.log(`nccl e2e: the stand-in tests skipped: ${stubProblem}`)

/**
 * An NCCL this test cannot hide, found the ways the module's documented search looks after the path and
 * LD_LIBRARY_PATH it sets: the loader's own search by soname, and an nvidia-nccl wheel in a system Python.
 * (A virtualenv's or ~/.local's wheel is hidden: the test points VIRTUAL_ENV and HOME elsewhere.)
 */
const systemNccl = ((): string | undefined => {
  try {
    dlopen("libnccl.so.2", { ncclGetVersion: { args: [FFIType.ptr], returns: FFIType.i32 } }).close()
    return "the dynamic loader finds libnccl.so.2 by its soname"
  } catch (error) {
    if (!String(error).includes("Failed to open library")) return `the dynamic loader opens libnccl.so.2 by its soname (${String(error)})`
  }
  for (const root of ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].filter((path) => existsSync(path))) {
    for (const found of new Bun.Glob("python3*/{site,dist}-packages/nvidia/nccl/lib/libnccl.so.2").scanSync({ cwd: root, followSymlinks: true })) {
      return `a system Python has NCCL's wheel: ${join(root, found)}`
    }
  }
  return undefined
})()
if (systemNccl !== undefined) console.log(`nccl e2e: the no-NCCL test skipped: this machine has an NCCL it cannot hide (${systemNccl})`)

/** The calls the NCCL stand-in recorded (FAKE_NCCL_LOG), sorted: the ranks' order among themselves is theirs. */
const callsIn = (log: string): ReadonlyArray<string> => readFileSync(log, "utf8").split("\n").filter((line) => line !== "").sort()

/** The environment that makes the native library find the stand-ins. */
const standIns = () => ({ COHORT_NCCL_LIB: stub, COHORT_CUDART_LIB: join(dir, "libcudart.so"), LD_LIBRARY_PATH: dir })

const launch = (args: ReadonlyArray<string>, env: Record<string, string>, rules = "[]") => {
  const file = join(dir, `cluster-${Math.random().toString(36).slice(2)}.yml`)
  writeFileSync(file, `
workers:
  - host: localhost
    devices: 3
    path: ${repoRoot}
job:
  entry: test/fixtures/nccl-rank-fixture.ts
  backend: nccl
  args: ${JSON.stringify(args)}
failure_policy:
  after_formation:
    elastic: { max_failure: 2 }
  # A rank's exit 3 is the death the survivors re-rendezvous without, not a bug to fail the run for.
  rules: ${rules}
  grace: 2s
`)
  return spawnLaunch(file, env)
}

describe("backend nccl", () => {
  test.skipIf(stubProblem !== undefined)("the ranks share one id per generation; after a death the survivors re-rendezvous without it", async () => {
    const trigger = join(dir, "go")
    const run = launch(["fail=1", `trigger=${trigger}`, "generations=2"], standIns())
    const generation = (lines: ReadonlyArray<string>, g: number) => lines.filter((line) => line.includes(`] generation ${g}:`))
    await waitFor(() => generation(run.stdout.lines, 0).length === 3, "every rank in generation 0", 15_000)
    writeFileSync(trigger, "")
    expect(await run.proc.exited).toBe(0)
    await Promise.all([run.stdout.done, run.stderr.done])
    const first = generation(run.stdout.lines, 0)
    // One id for everyone; each rank's NCCL rank is its position among the members.
    expect(new Set(first.map((line) => line.split(" id ")[1])).size).toBe(1)
    for (const rank of [0, 1, 2]) expect(first.some((line) => line.startsWith(`[localhost:cpu:r${rank}] generation 0: nccl rank ${rank}/3 members 0,1,2 id `))).toBe(true)
    const second = generation(run.stdout.lines, 1)
    expect(second.map((line) => line.replace(/ id \w+$/, "")).sort()).toEqual([
      "[localhost:cpu:r0] generation 1: nccl rank 0/2 members 0,2",
      "[localhost:cpu:r2] generation 1: nccl rank 1/2 members 0,2"
    ])
    expect(new Set(second.map((line) => line.split(" id ")[1])).size).toBe(1)
    expect(second[0]!.split(" id ")[1]).not.toBe(first[0]!.split(" id ")[1])
    // Both survivors dropped generation 0: told when rank 1's link ended, or when its death was reported.
    const reforms = run.stdout.lines.filter((line) => line.includes("] reform 0: "))
    expect(reforms.map((line) => line.slice(0, line.indexOf("]") + 1)).sort()).toEqual(["[localhost:cpu:r0]", "[localhost:cpu:r2]"])
    for (const line of reforms) expect(line).toMatch(/reform 0: rank 1 (left|of localhost exited with status 3)$/)
    expect(run.stderr.lines.at(-1)).toBe("cohort: run completed DEGRADED (1 of 3 ranks lost: rank 1 of localhost exited with status 3)")
  }, 30_000)

  test.skipIf(stubProblem !== undefined)("ctx.rendezvous.communicator() with an NCCL before 2.27: cohort builds each generation's communicator, and aborts it when the generation dissolves", async () => {
    const trigger = join(dir, "go-communicator")
    const calls = join(dir, "calls-2.26.txt")
    const run = launch(["communicator", "fail=2", `trigger=${trigger}`, "generations=2"], { ...standIns(), FAKE_NCCL_VERSION: "22605", FAKE_NCCL_LOG: calls })
    await waitFor(() => run.stdout.lines.filter((line) => line.includes("] communicator 0: async error 0")).length === 3, "three communicators of generation 0", 15_000)
    writeFileSync(trigger, "")
    expect(await run.proc.exited).toBe(0)
    await Promise.all([run.stdout.done, run.stderr.done])
    expect(run.stdout.lines.filter((line) => line.includes("] communicator 1: async error 0")).map((line) => line.slice(0, line.indexOf("]") + 1)).sort())
      .toEqual(["[localhost:cpu:r0]", "[localhost:cpu:r1]"])
    expect(run.stdout.lines.filter((line) => line.includes("] communicator 1: formed by ")).sort())
      .toEqual(["[localhost:cpu:r0] communicator 1: formed by init", "[localhost:cpu:r1] communicator 1: formed by init"])
    // The old path: generation 0's communicators aborted at the Reform, generation 1's built from its id.
    expect(callsIn(calls)).toEqual(["abort 0/3", "abort 1/3", "destroy 0/2", "destroy 1/2", "init 0/2", "init 0/3", "init 1/2", "init 1/3", "init 2/3"])
    expect(run.stderr.lines.at(-1)).toBe("cohort: run completed DEGRADED (1 of 3 ranks lost: rank 2 of localhost exited with status 3)")
  }, 30_000)

  describe("ncclCommShrink (NCCL 2.27 and later): after a death the survivors shrink the communicator they hold", () => {
    // Rank 1 dies after generation 0; ranks 0 and 2 become NCCL ranks 0 and 1 of generation 1.
    const scenarios = [
      {
        name: "NCCL 2.27.0, a healthy parent: NCCL_SHRINK_DEFAULT, no new init, the parent destroyed",
        env: { FAKE_NCCL_VERSION: "22700" },
        formedBy: "shrink",
        calls: [
          "destroy 0/2", "destroy 0/3", "destroy 1/2", "destroy 2/3", "init 0/3", "init 1/3", "init 2/3",
          "shrink 0/3 exclude 1 flags 0 -> 0/2", "shrink 2/3 exclude 1 flags 0 -> 1/2"
        ],
        said: "shrank generation 0's NCCL communicator (excluded NCCL rank(s) 1, NCCL_SHRINK_DEFAULT = 0; parent destroyed)"
      },
      {
        name: "NCCL 2.31.1, a parent that saw an error: NCCL_SHRINK_ABORT, the parent still destroyed",
        env: { FAKE_NCCL_VERSION: "23101", FAKE_NCCL_ASYNC_ERROR: "6" },
        formedBy: "shrink",
        calls: [
          "destroy 0/2", "destroy 0/3", "destroy 1/2", "destroy 2/3", "init 0/3", "init 1/3", "init 2/3",
          "shrink 0/3 exclude 1 flags 1 -> 0/2", "shrink 2/3 exclude 1 flags 1 -> 1/2"
        ],
        said: "shrank generation 0's NCCL communicator (excluded NCCL rank(s) 1, NCCL_SHRINK_ABORT = 1; parent destroyed)"
      },
      {
        name: "NCCL 2.31.2, a parent that saw an error: NCCL_SHRINK_ABORT, and the parent aborted, never destroyed (that blocks forever)",
        env: { FAKE_NCCL_VERSION: "23102", FAKE_NCCL_ASYNC_ERROR: "6" },
        formedBy: "shrink",
        calls: [
          "abort 0/3", "abort 2/3", "destroy 0/2", "destroy 1/2", "init 0/3", "init 1/3", "init 2/3",
          "shrink 0/3 exclude 1 flags 1 -> 0/2", "shrink 2/3 exclude 1 flags 1 -> 1/2"
        ],
        said: "shrank generation 0's NCCL communicator (excluded NCCL rank(s) 1, NCCL_SHRINK_ABORT = 1; parent aborted)"
      },
      {
        name: "a shrink that fails: the parent aborted, and a new communicator built from the generation's id",
        env: { FAKE_NCCL_VERSION: "22700", FAKE_NCCL_SHRINK_FAIL: "1" },
        formedBy: "init",
        calls: [
          "abort 0/3", "abort 2/3", "destroy 0/2", "destroy 1/2", "init 0/2", "init 0/3", "init 1/2", "init 1/3", "init 2/3",
          "shrink 0/3 exclude 1 flags 0 failed", "shrink 2/3 exclude 1 flags 0 failed"
        ],
        said: "cannot shrink generation 0's NCCL communicator (NCCL error 3: ncclCommShrink(excluding [1], flags 0) failed: ncclResult_t 3 (fake nccl error)); building a new one from the generation's id"
      }
    ] as const
    test.skipIf(stubProblem !== undefined).each(scenarios)("$name", async ({ env, formedBy, calls, said }) => {
      const trigger = join(dir, `go-shrink-${env.FAKE_NCCL_VERSION}-${Object.keys(env).length}`)
      const log = join(dir, `calls-${env.FAKE_NCCL_VERSION}-${Object.keys(env).length}.txt`)
      const run = launch(["communicator", "fail=1", `trigger=${trigger}`, "generations=2"], { ...standIns(), ...env, FAKE_NCCL_LOG: log })
      await waitFor(() => run.stdout.lines.filter((line) => line.includes("] communicator 0: formed by init")).length === 3, "three communicators of generation 0", 15_000)
      writeFileSync(trigger, "")
      expect(await run.proc.exited).toBe(0)
      await Promise.all([run.stdout.done, run.stderr.done])
      // The survivors carry on in generation 1, as NCCL ranks 0 and 1 of 2.
      expect(run.stdout.lines.filter((line) => line.includes("] generation 1:")).map((line) => line.replace(/ id \w+$/, "")).sort()).toEqual([
        "[localhost:cpu:r0] generation 1: nccl rank 0/2 members 0,2",
        "[localhost:cpu:r2] generation 1: nccl rank 1/2 members 0,2"
      ])
      expect(run.stdout.lines.filter((line) => line.includes("] communicator 1: formed by ")).sort())
        .toEqual([`[localhost:cpu:r0] communicator 1: formed by ${formedBy}`, `[localhost:cpu:r2] communicator 1: formed by ${formedBy}`])
      expect(callsIn(log)).toEqual([...calls])
      for (const rank of [0, 2]) expect(run.stderr.lines.some((line) => line.includes(`cohort rank ${rank}: generation 1: ${said}`)), run.stderr.lines.join("\n")).toBe(true)
      expect(run.stderr.lines.at(-1)).toBe("cohort: run completed DEGRADED (1 of 3 ranks lost: rank 1 of localhost exited with status 3)")
    }, 30_000)
  })

  test.skipIf(stubProblem !== undefined)("a rank whose code throws while its communicator holds NCCL's asynchronous error dies of cause nccl", async () => {
    const trigger = join(dir, "go-nccl-error")
    // The stand-in's communicators all report error 6 (ncclRemoteError), as a peer's failure makes them.
    const run = launch(["communicator", "throw=1", `trigger=${trigger}`, "generations=2"], { ...standIns(), FAKE_NCCL_ASYNC_ERROR: "6" }, "[{ name: nccl, when: { cause: [nccl] }, then: fail }]")
    await waitFor(() => run.stdout.lines.filter((line) => line.includes("] communicator 0: async error 6")).length === 3, "three communicators of generation 0", 15_000)
    writeFileSync(trigger, "")
    expect(await run.proc.exited).toBe(1)
    await Promise.all([run.stdout.done, run.stderr.done])
    expect(run.stderr.lines.at(-1)).toBe("cohort: run failed: rank 1 of localhost exited with status 1 (Error: rank 1: the all-reduce failed (NCCL asynchronous error 6)) (rule nccl)")
  }, 30_000)

  test.skipIf(stubProblem !== undefined)("growth: a late host's rank joins the rendezvous at once, and at its epoch boundary the whole cohort re-forms with it", async () => {
    const file = join(dir, "cluster-grow.yml")
    writeFileSync(file, `
controller:
  host: 127.0.0.1
  join: { min_ranks: 2, target_ranks: 2, after_formation: accept }
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
  - { host: late, devices: 1, agent: self, path: ${repoRoot} }
job:
  entry: test/fixtures/nccl-growth-fixture.ts
  backend: nccl
  args: ["delay=20"]
  dataset_size: 1200
  epochs: 6
failure_policy:
  after_formation: elastic
  grace: 2s
  heartbeat_timeout: 10s
`)
    const run = spawnLaunch(file, standIns())
    const generation = (lines: ReadonlyArray<string>, g: number) => lines.filter((line) => line.includes(`] generation ${g}:`))
    await waitFor(() => generation(run.stdout.lines, 0).length === 2 && run.stderr.lines.some((line) => /epoch 1\/6 done/.test(line)), "generation 0 and epoch 1", 20_000)
    const port = await listeningPort(run.stderr.lines)
    const salt = join(dir, "late.salt")
    copyFileSync(join(repoRoot, ".cohort", "salts", `${run.proc.pid}.salt`), salt)
    const agent = Bun.spawn(
      [process.execPath, "src/cli/agent.ts", "--controller", `127.0.0.1:${port}`, "--host", "late", "--devices", "1", "--salt-file", salt],
      { cwd: repoRoot, env: { ...process.env, ...standIns() }, stdout: "pipe", stderr: "pipe" }
    )
    const late = new Response(agent.stdout).text()
    expect(await run.proc.exited).toBe(0)
    await Promise.all([run.stdout.done, run.stderr.done])
    expect(await agent.exited).toBe(0)
    const lines = [...run.stdout.lines, ...(await late).split("\n")]
    expect(run.stderr.lines.at(-1)).toBe("cohort: run completed")
    const entry = Number(/rank\(s\) 2 enter the cohort at epoch (\d+)/.exec(run.stderr.lines.find((line) => /rank\(s\) 2 enter/.test(line)) ?? "")?.[1])
    expect(entry).toBeGreaterThanOrEqual(2)
    // Generation 0 was the members' alone; at the boundary it dissolved for the newcomer, and generation 1 is everyone's, in ascending order.
    expect(generation(lines, 0).map((line) => line.replace(/ id \w+$/, "")).sort()).toEqual([
      "[localhost:cpu:r0] generation 0: nccl rank 0/2 members 0,1",
      "[localhost:cpu:r1] generation 0: nccl rank 1/2 members 0,1"
    ])
    const reforms = lines.filter((line) => line.includes("] reform 0: "))
    expect(reforms.map((line) => line.replace(/^\[localhost:cpu:r(\d)\].*$/, "$1")).sort()).toEqual(["0", "1"])
    for (const line of reforms) expect(line).toEndWith("reform 0: rank(s) 2 joined")
    const second = generation(lines, 1)
    expect(second.map((line) => line.replace(/ id \w+$/, "")).sort()).toEqual([
      "[late:cpu:r2] generation 1: nccl rank 2/3 members 0,1,2",
      "[localhost:cpu:r0] generation 1: nccl rank 0/3 members 0,1,2",
      "[localhost:cpu:r1] generation 1: nccl rank 1/3 members 0,1,2"
    ])
    expect(new Set(second.map((line) => line.split(" id ")[1])).size).toBe(1)
    // The newcomer trained only from its entry on.
    const lateEpochs = lines.filter((line) => line.startsWith("[late:cpu:r2] epoch ")).map((line) => Number(/epoch (\d+) done/.exec(line)![1]))
    expect(lateEpochs).toEqual(Array.from({ length: 6 - entry + 1 }, (_, i) => entry + i))
  }, 40_000)

  // The search (src/native/src/nccl.rs, `candidates`) treats COHORT_NCCL_LIB as the first place to try, not
  // the only one: a missing file there falls through to LD_LIBRARY_PATH, the loader's soname search and the
  // Python wheels. So "the run completes" meant only that the machine had an NCCL after all, and this test's
  // premise, no NCCL, did not hold. With every place the test controls emptied (the override, LD_LIBRARY_PATH,
  // VIRTUAL_ENV, HOME) and no system NCCL (else the test is skipped, and counted), failing is the one right
  // outcome: the run fails with the whole search in its root cause.
  test.skipIf(systemNccl !== undefined)("without NCCL the run fails, naming where NCCL was looked for", async () => {
    const empty = mkdtempSync(join(tmpdir(), "cohort-no-nccl-"))
    const run = launch([], { COHORT_NCCL_LIB: join(empty, "libnccl.so.2"), LD_LIBRARY_PATH: empty, VIRTUAL_ENV: "", HOME: empty })
    const code = await run.proc.exited
    await run.stderr.done
    const last = run.stderr.lines.at(-1) ?? ""
    expect(code, run.stderr.lines.join("\n")).toBe(1)
    expect(last).toStartWith("cohort: run failed: coordinator failed: the NCCL rendezvous failed: rank 0 could not make an NCCL unique id: NCCL not found; searched: ")
    expect(last).toContain(join(empty, "libnccl.so.2"))
    // The search went on past the missing override: the loader was asked for the soname too.
    expect(last).toContain(", libnccl.so.2 (")
    expect(last).toContain("set COHORT_NCCL_LIB")
  }, 30_000)
})
