/**
 * PyTorch ranks in an elastic cohort, end to end: `bun run launch` of examples/torch_elastic.py (the Python
 * client, a real MLP trained with gloo on CPU, 4 ranks on one host), one rank SIGKILLed mid-epoch by its own
 * hand at a known step (test/fixtures/torch_elastic_fixture.py), under `elastic` and under `restart`; a third
 * rank's agent started mid-run (growth); Ctrl-C mid-run; and ctx.watch refusing a DDP wrapper.
 *
 * The oracle is what the processes did, not what cohort says: each rank appends every step that counted to
 * its own file (epoch, pid, sample indices), and prints its held-out accuracy and a digest of its weights at
 * the end. From those: every sample of every epoch was learnt from exactly once, the survivors kept their pids
 * (re-formed in-process, not restarted), their final weights are equal, and the accuracy reached the target.
 *
 * Needs Debian's python3-torch (test/support/debian-torch.ts installs it as root, or the tests skip, saying why).
 */
import { describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, lastLine, python, runCommand } from "./support/debian-torch.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")
const fixture = join(import.meta.dir, "fixtures", "torch_elastic_fixture.py")
/** 24,000 of examples/torch_elastic.py's 30,000 samples an epoch, 4 epochs, batches of 128: the suite's time. */
const DATASET = 24_000
const EPOCHS = 4
/**
 * Twice the example's batch (and learning rate), for half the steps: the suite's time. Its held-out accuracy is
 * 0.966 this way on 24,000 samples an epoch (0.975 at the example's own 64 on 30,000).
 */
const TRAINING = ["--batch", "128", "--lr", "6e-3"]
/** 6,000 samples a rank in epoch 1 is 47 steps (46 of 128 and one of 112): step 75 is inside epoch 2. */
const DIE_STEP = 75
/**
 * Under restart, rank 2 dies at its step 20, inside epoch 1: its new process (python and torch to load, about
 * 4-5 s on a loaded machine) then has three boundaries to attach before, not two (epochs take about 2 s).
 */
const RESTART_DIE_STEP = 20
const DYING = 2

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch elastic e2e skipped: python3-torch not available: ${torchProblem}`)

interface Step {
  readonly epoch: number
  readonly pid: number
  readonly samples: ReadonlyArray<number>
}

const readSteps = (dir: string): Map<number, Array<Step>> => {
  const byRank = new Map<number, Array<Step>>()
  for (const name of readdirSync(dir)) {
    const rank = Number(/^r(\d+)\.txt$/.exec(name)?.[1])
    if (Number.isNaN(rank)) continue
    const steps = readFileSync(join(dir, name), "utf8").trim().split("\n").filter(Boolean).map((line) => {
      const [epoch, pid, ...samples] = line.split(" ").map(Number)
      return { epoch: epoch!, pid: pid!, samples }
    })
    byRank.set(rank, steps)
  }
  return byRank
}

/** Each epoch's samples that were learnt from other than exactly once: [epoch, sample, count]. */
const notExactlyOnce = (byRank: Map<number, Array<Step>>, dataset = DATASET): Array<[number, number, number]> => {
  const wrong: Array<[number, number, number]> = []
  for (let epoch = 1; epoch <= EPOCHS; epoch++) {
    const counts = new Uint8Array(dataset)
    for (const steps of byRank.values()) for (const step of steps) if (step.epoch === epoch) for (const sample of step.samples) counts[sample]! += 1
    counts.forEach((count, sample) => {
      if (count !== 1) wrong.push([epoch, sample, count])
    })
  }
  return wrong
}

/** The ranks' closing lines: rank → pid, accuracy, weights digest. */
const finals = (stdout: string) =>
  new Map([...stdout.matchAll(/rank (\d+) \(pid (\d+), (\d+) member\(s\), generation (\d+)\): held-out accuracy ([\d.]+), weights ([0-9a-f]+)/g)].map(
    (m) => [Number(m[1]), { pid: Number(m[2]), members: Number(m[3]), accuracy: Number(m[5]), weights: m[6]! }]
  ))

const run = async (
  policy: string,
  dieStep = DIE_STEP,
  extraArgs: ReadonlyArray<string> = [],
  dataset = DATASET,
  /** Another run's folder (its records, its checkpoint), with the launch's own arguments (`--resume`). */
  again?: { readonly dir: string; readonly launchArgs: ReadonlyArray<string> }
) => {
  const dir = again?.dir ?? mkdtempSync(join(tmpdir(), `cohort-torch-elastic-${policy.replace(/[^a-z0-9]+/g, "-")}-`))
  const { file, records } = await clusterFile(dir, policy, dieStep, extraArgs, dataset)
  const ran = await runCommand([process.execPath, launch, file, ...(again?.launchArgs ?? [])], 170_000)
  return { ...ran, dir, steps: readSteps(records), transcript: `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}` }
}

/** The cluster file of a run in `dir` (its records folder beside it), the example's fixture as the job. */
const clusterFile = async (dir: string, policy: string, dieStep: number, extraArgs: ReadonlyArray<string>, dataset: number) => {
  const records = join(dir, "records")
  await Bun.write(join(records, ".keep"), "")
  const file = join(dir, "torch.yml")
  writeFileSync(
    file,
    `name: torch-elastic-${policy.replace(/[^a-z0-9]+/g, "-")}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 4
    path: ${JSON.stringify(root)}
    env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo, TEST_DIE_RANK: "${DYING}", TEST_DIE_STEP: "${dieStep}" }
job:
  command: [${python}, ${fixture}]
  args: [--record, ${JSON.stringify(records)}, ${[...TRAINING, ...extraArgs].map((word) => JSON.stringify(word)).join(", ")}]
  dataset_size: ${dataset}
  epochs: ${EPOCHS}
  checkpoint: ${JSON.stringify(join(dir, "checkpoint.json"))}
failure_policy:
  before_formation: kill_all
  after_formation: ${policy}
  grace: 5s
`
  )
  return { file, records }
}

/** Ctrl-C to a launcher: it must exit 130 saying it was aborted; its transcript. */
const pressCtrlC = async (launcher: Bun.Subprocess, stderr: ReturnType<typeof collectLines>, stdout: ReturnType<typeof collectLines>) => {
  launcher.kill("SIGINT")
  const code = await launcher.exited
  await Promise.all([stderr.done, stdout.done])
  const transcript = `--- stdout ---\n${stdout.lines.join("\n")}\n--- stderr ---\n${stderr.lines.join("\n")}`
  expect(code, transcript).toBe(130)
  expect(stderr.lines.at(-1), transcript).toBe("cohort: run failed: aborted: received SIGINT")
  return transcript
}

const pidsOf = (steps: ReadonlyArray<Step>) => [...new Set(steps.map((step) => step.pid))]

/** Rank 2 SIGKILLed at its step 75, the survivors re-formed in-process: what such a run must show, whatever its gradient path. */
const expectRecovered = (ran: Awaited<ReturnType<typeof run>>) => {
  // DEGRADED: a rank was lost; elastic's default exit status for it is 0.
  expect(lastLine(ran.stderr), ran.transcript).toBe("cohort: run completed DEGRADED (1 of 4 ranks lost: rank 2 of localhost exited with signal SIGKILL)")
  expect(notExactlyOnce(ran.steps).slice(0, 5), ran.transcript).toEqual([])
  // The dead rank's steps stop at its step 75; the survivors' each come from one process, the one that ends the run.
  expect(ran.steps.get(DYING)!.length).toBe(DIE_STEP)
  const end = finals(ran.stdout)
  expect([...end.keys()].sort(), ran.transcript).toEqual([0, 1, 3])
  for (const survivor of [0, 1, 3]) {
    expect(pidsOf(ran.steps.get(survivor)!), ran.transcript).toEqual([end.get(survivor)!.pid])
    expect(end.get(survivor)!.members).toBe(3)
    expect(end.get(survivor)!.accuracy, ran.transcript).toBeGreaterThanOrEqual(0.95)
  }
  expect(new Set([...end.values()].map((each) => each.weights)).size, ran.transcript).toBe(1)
  expect(ran.stdout).toContain("reached the target 0.95")
}

describe("PyTorch ranks under the Python client", () => {
  test.skipIf(torchProblem !== undefined)("elastic: the survivors re-form in-process and carry its samples; each sample once, equal weights, the accuracy reached", async () => {
    expectRecovered(await run("elastic"))
  }, 180_000)

  test.skipIf(torchProblem !== undefined)("ctx.ddp: torch's DDP, its buckets reduced over the current members; a SIGKILL mid-epoch re-forms in-process: each sample once, same pids, equal weights, the accuracy reached", async () => {
    expectRecovered(await run("elastic", DIE_STEP, ["--ddp"]))
  }, 180_000)

  test.skipIf(torchProblem !== undefined)("ctx.ddp, shares of unequal steps: a rank with no batch left steps at weight 0 on one it learnt, so the buckets match; each sample once, equal weights", async () => {
    // 24,002 samples: shares of 6,001, 6,001, 6,000 and 6,000; batches of 2,000 are 4 steps for the first two, 3 for the others.
    const ran = await run("elastic", 1_000_000, ["--ddp", "--batch", "2000", "--lr", "3e-2", "--target", "0"], 24_002)
    expect(lastLine(ran.stderr), ran.transcript).toBe("cohort: run completed")
    expect(notExactlyOnce(ran.steps, 24_002).slice(0, 5), ran.transcript).toEqual([])
    // Counted steps only (a replay is not): 4, 4, 3, 3 an epoch.
    expect([0, 1, 2, 3].map((rank) => ran.steps.get(rank)!.filter((step) => step.epoch === 1).length), ran.transcript).toEqual([4, 4, 3, 3])
    const end = finals(ran.stdout)
    expect(new Set([...end.values()].map((each) => each.weights)).size, ran.transcript).toBe(1)
  }, 180_000)

  test.skipIf(torchProblem !== undefined)("a max_failure stop mid-epoch keeps a cut (ctx.checkpoint.provide); --resume trains only the rest: every sample of every epoch learnt once over both runs", async () => {
    const policy = "{ elastic: { max_failure: 1 } }"
    const first = await run(policy)
    expect(first.code, first.transcript).toBe(1)
    expect(lastLine(first.stderr), first.transcript).toBe(
      "cohort: run failed: max_failure exceeded: 1/4 ranks dead, threshold 1; root cause: rank 2 of localhost exited with signal SIGKILL"
    )
    // Rank 2 died inside epoch 2 (its step 75): the checkpoint is of epoch 2, mid-way.
    const saved = JSON.parse(readFileSync(join(first.dir, "checkpoint.json"), "utf8")) as { epoch: number; coverage?: { epoch: number; done: ReadonlyArray<unknown> } }
    expect([saved.epoch, saved.coverage?.epoch], first.transcript).toEqual([1, 2])
    // The launcher says where it resumes, not only its last whole epoch.
    expect(first.stderr, first.transcript).toMatch(/\ncohort: checkpoint: \S+checkpoint\.json \(resumes epoch 2 at [\d,]+ of 24,000 samples done\); continue with: bun run launch \S+ --resume\n/)
    const second = await run(policy, 1_000_000, [], DATASET, { dir: first.dir, launchArgs: ["--resume"] })
    expect(lastLine(second.stderr), second.transcript).toBe("cohort: run completed")
    // The records hold both runs: epoch 2's samples split between them, each once; epochs 3 and 4 the second run's.
    expect(notExactlyOnce(second.steps).slice(0, 5), second.transcript).toEqual([])
    const end = finals(second.stdout)
    expect(new Set([...end.values()].map((each) => each.weights)).size, second.transcript).toBe(1)
    for (const each of end.values()) expect(each.accuracy, second.transcript).toBeGreaterThanOrEqual(0.95)
  }, 240_000)

  test.skipIf(torchProblem !== undefined)("restart: the rank comes back as a new process (rank 4) at an epoch boundary and joins the survivors' group; each sample once, equal weights", async () => {
    const ran = await run("restart", RESTART_DIE_STEP)
    expect(ran.code, ran.transcript).toBe(0)
    // cohort restarts a rank under the next free number, entering at the epoch boundary: rank 2 comes back as rank 4.
    expect(ran.stderr, ran.transcript).toContain("cohort: rank 2 of localhost restarts as rank 4")
    // At the first epoch boundary after it attached: 2, or later when python and torch took longer to load than epoch 1 to end.
    const entered = Number(/cohort: rank\(s\) 4 enter the cohort at epoch (\d): 4 rank\(s\) train it/.exec(ran.stderr)?.[1])
    expect([2, 3, 4], ran.transcript).toContain(entered)
    expect(lastLine(ran.stderr), ran.transcript).toBe("cohort: run completed")
    expect(notExactlyOnce(ran.steps).slice(0, 5), ran.transcript).toEqual([])
    const end = finals(ran.stdout)
    expect([...end.keys()].sort(), ran.transcript).toEqual([0, 1, 3, 4])
    // Rank 2's steps stop at its step 20; rank 4's are a new process's, from the epoch it entered at on.
    expect(ran.steps.get(DYING)!.length).toBe(RESTART_DIE_STEP)
    const [diedAs] = pidsOf(ran.steps.get(DYING)!)
    expect(pidsOf(ran.steps.get(4)!)).toEqual([end.get(4)!.pid])
    expect(end.get(4)!.pid).not.toBe(diedAs)
    expect(Math.min(...ran.steps.get(4)!.map((step) => step.epoch))).toBe(entered)
    for (const survivor of [0, 1, 3]) expect(pidsOf(ran.steps.get(survivor)!), ran.transcript).toEqual([end.get(survivor)!.pid])
    for (const rank of [0, 1, 3, 4]) {
      expect(end.get(rank)!.members).toBe(4)
      expect(end.get(rank)!.accuracy).toBeGreaterThanOrEqual(0.95)
    }
    expect(new Set([...end.values()].map((each) => each.weights)).size, ran.transcript).toBe(1)
  }, 180_000)

  test.skipIf(torchProblem !== undefined)("Ctrl-C mid-run: every Python rank is stopped in order and exits 143 (no rank aborts)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-torch-stop-"))
    const launcher = Bun.spawn(
      [process.execPath, launch, join(root, "examples", "torch.yml"), "--set", `job.checkpoint=${join(dir, "checkpoint.json")}`, "--set", "name=torch-stop"],
      { cwd: root, stdout: "pipe", stderr: "pipe" }
    )
    const stderr = collectLines(launcher.stderr)
    const stdout = collectLines(launcher.stdout)
    try {
      await waitFor(() => stderr.lines.some((line) => line.startsWith("cohort: epoch 1/4 done")), "epoch 1 to end", 90_000)
      const transcript = await pressCtrlC(launcher, stderr, stdout)
      const exits = [0, 1, 2, 3].map((rank) => stdout.lines.concat(stderr.lines).map((line) => new RegExp(`^localhost\\s+${rank}\\s+cpu\\s+(\\S+)`).exec(line)?.[1]).find(Boolean))
      expect(exits, transcript).toEqual(["143", "143", "143", "143"])
    } finally {
      launcher.kill("SIGKILL")
    }
  }, 120_000)

  test.skipIf(torchProblem !== undefined)("Ctrl-C mid-epoch with a save in `except cohort.Stopped` (no provide): that save is the run's cut, the launcher says so, and --resume trains only the rest: every sample once over both runs", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-torch-save-on-stop-"))
    const { file, records } = await clusterFile(dir, "elastic", 1_000_000, ["--save-on-stop"], DATASET)
    const launcher = Bun.spawn([process.execPath, launch, file], { cwd: root, stdout: "pipe", stderr: "pipe" })
    const stderr = collectLines(launcher.stderr)
    const stdout = collectLines(launcher.stdout)
    try {
      // Inside epoch 2: rank 0 has recorded 10 of its steps there (of 47).
      const inEpoch2 = () => (readSteps(records).get(0) ?? []).filter((step) => step.epoch === 2).length
      await waitFor(() => inEpoch2() >= 10, "rank 0's 10th step of epoch 2", 120_000)
      const transcript = await pressCtrlC(launcher, stderr, stdout)
      const saved = JSON.parse(readFileSync(join(dir, "checkpoint.json"), "utf8")) as { epoch: number; reason: string; coverage?: { epoch: number } }
      expect([saved.epoch, saved.coverage?.epoch, saved.reason], transcript).toEqual([1, 2, "interrupted"])
      // What was kept, said on the SIGINT path, with the samples the records show were done in epoch 2.
      const done = [...readSteps(records).values()].flat().filter((step) => step.epoch === 2).reduce((sum, step) => sum + step.samples.length, 0)
      expect(done, transcript).toBeGreaterThanOrEqual(4 * 10 * 128)
      expect(stderr.lines, transcript).toContain(
        `cohort: error: aborted: received SIGINT: consensus checkpoint written to ${join(dir, "checkpoint.json")}, resuming epoch 2 at ` +
          `${done.toLocaleString("en-US")} of 24,000 samples done; resume with --resume`
      )
    } finally {
      launcher.kill("SIGKILL")
    }
    const second = await run("elastic", 1_000_000, ["--save-on-stop"], DATASET, { dir, launchArgs: ["--resume"] })
    expect(lastLine(second.stderr), second.transcript).toBe("cohort: run completed")
    expect(notExactlyOnce(second.steps).slice(0, 5), second.transcript).toEqual([])
    const end = finals(second.stdout)
    expect(new Set([...end.values()].map((each) => each.weights)).size, second.transcript).toBe(1)
    for (const each of end.values()) expect(each.accuracy, second.transcript).toBeGreaterThanOrEqual(0.95)
  }, 300_000)

  test.skipIf(torchProblem !== undefined)("ctx.watch refuses torch's own DistributedDataParallel, pointing to ctx.ddp", async () => {
    const code = [
      "import tempfile, torch, torch.distributed as dist",
      "from cohort._context import Context",
      "from cohort import CohortError",
      "dist.init_process_group('gloo', init_method='file://' + tempfile.mktemp(), rank=0, world_size=1)",
      "ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))",
      "ctx = Context.__new__(Context)",
      "ctx._groups = type('Groups', (), {'torch': torch})()",
      "try: ctx.watch(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1))",
      "except CohortError as error: print(error)"
    ].join("\n")
    const ran = await runCommand([python, "-c", code], 60_000, { PYTHONPATH: join(root, "python") })
    expect(ran.stdout.trim(), ran.stderr).toBe(
      "ctx.watch(model, optimizer) got torch's DistributedDataParallel, which pins the first group (and a rank joining later would " +
        "wait in its set-up for the others): make it with model = ctx.ddp(module) instead, which reduces DDP's buckets over the " +
        "current members, or pass the module itself"
    )
  }, 60_000)

  test.skipIf(torchProblem !== undefined)("growth: a rank whose agent is started mid-run enters at an epoch boundary, joins the group, and trains its share", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-torch-grow-"))
    const records = join(dir, "records")
    await Bun.write(join(records, ".keep"), "")
    const file = join(dir, "grow.yml")
    const env = `{ OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo }`
    writeFileSync(
      file,
      `name: torch-grow
controller: { host: 127.0.0.1, port: 0, join: { min_ranks: 2, target_ranks: 2, after_formation: accept } }
workers:
  - { host: localhost, devices: 2, path: ${JSON.stringify(root)}, env: ${env} }
  - { host: late, devices: 1, agent: self, path: ${JSON.stringify(root)}, env: ${env} }
job:
  command: [${python}, ${join(root, "examples", "torch_elastic.py")}]
  args: [--record, ${JSON.stringify(records)}, ${TRAINING.map((word) => JSON.stringify(word)).join(", ")}]
  dataset_size: ${DATASET}
  epochs: ${EPOCHS}
  checkpoint: ${JSON.stringify(join(dir, "checkpoint.json"))}
failure_policy: { after_formation: elastic, grace: 5s }
`
    )
    const launcher = Bun.spawn([process.execPath, launch, file], { cwd: root, stdout: "pipe", stderr: "pipe" })
    const stderr = collectLines(launcher.stderr)
    const stdout = collectLines(launcher.stdout)
    let agent: Bun.Subprocess | undefined
    try {
      // Started once the cohort has formed, not once epoch 1 is done: with two busy loops beside the suite, the
      // agent, python and torch took longer to start than two epochs, and it entered at no boundary.
      await waitFor(() => stderr.lines.some((line) => line.startsWith("cohort: cohort formed")), "the cohort to form", 90_000)
      const port = Number(/listening on [\d.]+:(\d+)/.exec(stderr.lines.find((line) => line.includes("listening on"))!)![1])
      // The salt the launcher left for a self-started agent, as an operator would pass it.
      const salt = join(root, ".cohort", "salts", `${launcher.pid}.salt`)
      agent = Bun.spawn([process.execPath, "src/cli/agent.ts", "--controller", `127.0.0.1:${port}`, "--host", "late", "--devices", "1", "--salt-file", salt], {
        cwd: root,
        stdout: "ignore",
        stderr: "ignore"
      })
      const code = await launcher.exited
      await Promise.all([stderr.done, stdout.done])
      const transcript = `--- stdout ---\n${stdout.lines.join("\n")}\n--- stderr ---\n${stderr.lines.join("\n")}`
      expect(code, transcript).toBe(0)
      expect(stderr.lines.at(-1), transcript).toBe("cohort: run completed")
      const entered = Number(/cohort: rank\(s\) 2 enter the cohort at epoch (\d)/.exec(stderr.lines.join("\n"))?.[1])
      // Epoch 1's start is a boundary too: on an idle machine the agent can join before the first plan leaves.
      expect([1, 2, 3, 4], transcript).toContain(entered)
      const steps = readSteps(records)
      expect(notExactlyOnce(steps).slice(0, 5), transcript).toEqual([])
      // The newcomer's steps start at its boundary, and it does a share of each epoch from then on.
      const late = steps.get(2)!
      expect(Math.min(...late.map((step) => step.epoch))).toBe(entered)
      for (let epoch = entered; epoch <= EPOCHS; epoch++) expect(late.filter((step) => step.epoch === epoch).length).toBeGreaterThan(0)
      const end = finals(stdout.lines.join("\n"))
      expect([...end.keys()].sort(), transcript).toEqual([0, 1, 2])
      for (const rank of [0, 1, 2]) expect(end.get(rank)!.members).toBe(3)
      expect(new Set([...end.values()].map((each) => each.weights)).size, transcript).toBe(1)
      expect(end.get(0)!.accuracy).toBeGreaterThanOrEqual(0.95)
    } finally {
      launcher.kill("SIGKILL")
      agent?.kill("SIGKILL")
    }
  }, 150_000)
})
