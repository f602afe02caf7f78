/**
 * `coordinate`, event by event, against instructions written out by hand:
 * formation and the first plan, progress told to the journal and its rate,
 * an epoch's end and its line, the weighted split and what a newcomer does to
 * it, beats and silence (before and after formation, joiners, exiting ranks),
 * the death chain (redistribution, idempotence, leaving with work), checkpoint
 * consensus and the stop (saved, unsaved, a failed write), and growth (a held
 * attach, the welcome that waits for a consensus, a rescue, a late joiner).
 * Nothing here computes an expected value with the code it checks; each
 * number says where it comes from.
 *
 * Instructions are shown as short lines: `0,1 ← EpochStart 1 [0,5)` is an
 * order sent, `info: …` a log line, `journal …` an event for the run's
 * journal. A `WriteCheckpoint` is answered at once, as the actor does, and
 * what that answer brings is shown right after it.
 */
import { describe, expect, test } from "bun:test"
import {
  coordinate,
  CoordinatorEvent,
  type CoordinatorSettings,
  type CoordinatorState,
  initialState,
  type Instruction,
  unfinishedTraining
} from "../src/launcher/training/coordinate.ts"
import type { SampleRange } from "../src/launcher/training/EpochLedger.ts"
import {
  Attach,
  CheckpointSave,
  type CoordinatorOrder,
  CutOffer,
  Exiting,
  Heartbeat,
  Progress,
  type RankReport
} from "../src/wire/messages/CoordinatorMessages.ts"

const PATH = "/ckpt/run.json"

const settingsOf = (ranks: ReadonlyArray<number>, datasetSize: number, epochs: number, extra: Partial<CoordinatorSettings> = {}): CoordinatorSettings => ({
  job: { backend: "cpu_sync", datasetSize, epochs },
  ranks,
  // A beat every 1 s (a sixth of the timeout, at least 1 s): a rescue is forced after 2 s.
  heartbeatTimeoutMs: 6_000,
  checkpointPath: PATH,
  resume: undefined,
  ...extra
})

const ranges = (list: ReadonlyArray<SampleRange>) => list.length === 0 ? "-" : list.map(({ end, start }) => `[${start},${end})`).join(" ")

const showOrder = (order: CoordinatorOrder): string => {
  switch (order._tag) {
    case "Welcome":
      return `Welcome first=${order.firstEpoch}${order.checkpoint === undefined ? "" : ` from=${order.checkpoint}`}`
    case "EpochStart":
    case "EpochExtend":
      return `${order._tag} ${order.epoch} ${ranges(order.ranges)}`
    case "EpochEnd":
    case "CheckpointSaved":
      return `${order._tag} ${order.epoch}`
    case "Stop":
      return `Stop "${order.reason}" ${order.saved ? "saved" : "unsaved"}`
    case "CoordinatorBeat":
      return "Beat"
    case "TrainingDone":
      return "TrainingDone"
    case "OfferCut":
      return `OfferCut ${order.epoch}`
    case "Group":
      return `Group ${order.generation} [${order.members.join(",")}]`
    case "StoreAnswer":
      return `StoreAnswer ${order.id}`
  }
}

const show = (instruction: Instruction): string => {
  switch (instruction._tag) {
    case "Send":
      return `${instruction.ranks.length === 0 ? "(nobody)" : instruction.ranks.join(",")} ← ${showOrder(instruction.order)}`
    case "Log":
      return `${instruction.level}: ${instruction.message}`
    case "Journal": {
      const { event } = instruction
      if (event.event === "progress") {
        return `journal progress ${event.epoch}/${event.epochs}: ${event.samplesDone}/${event.datasetSize}, ${event.samplesPerSec === null ? "no rate" : `${event.samplesPerSec}/s`} ${JSON.stringify(event.metrics)}`
      }
      if (event.event === "epoch_done") {
        return `journal epoch_done ${event.epoch}/${event.epochs}: ${event.samples} in ${event.seconds} s ${JSON.stringify(event.metrics)}`
      }
      if (event.event === "checkpoint") return `journal checkpoint epoch ${event.epoch} at ${event.at} ${event.path} (${event.reason})`
      return `journal ${event.event}`
    }
    case "Latencies":
      return `latencies sum ${instruction.counts.sum}`
    case "Redistributed":
      return `redistributed ${instruction.dead} → ${instruction.extensions.size === 0 ? "nobody" : [...instruction.extensions].map(([rank, list]) => `${rank} ${ranges(list)}`).join(", ")}`
    case "Enter":
      return `enter ${instruction.ranks.join(",")} at ${instruction.epoch}`
    case "LoseRanks":
      return `lose ${instruction.ranks.join(",")}: ${instruction.reason}`
    case "Drained":
      return "drained"
    case "WriteCheckpoint":
      return `write epoch ${instruction.epoch} "${instruction.state}" (${instruction.reason}) world ${instruction.world} dead [${instruction.dead.join(",")}]` +
        (instruction.coverage === undefined ? "" : ` covering epoch ${instruction.coverage.epoch} of ${instruction.coverage.datasetSize}: ${ranges(instruction.coverage.done)}`)
  }
}

/** A coordinator under test: feed it events, read what each step asks for. Checkpoint writes succeed unless `failWrites` says why not. */
const coordinator = (settings: CoordinatorSettings) => {
  let state: CoordinatorState = initialState(settings)
  let failure: string | undefined
  const step = (event: CoordinatorEvent): Array<string> => {
    const [instructions, next] = coordinate(state, event)
    state = next
    return instructions.flatMap((instruction) =>
      instruction._tag === "WriteCheckpoint"
        ? [show(instruction), ...step(CoordinatorEvent.CheckpointWritten({ epoch: instruction.epoch, reason: instruction.reason, coverage: instruction.coverage, failure, at: instruction.at }))]
        : [show(instruction)]
    )
  }
  return {
    step,
    say: (rank: number, report: RankReport, at = 0) => step(CoordinatorEvent.Reported({ rank, report, at })),
    tick: (at: number) => step(CoordinatorEvent.Tick({ at })),
    failWrites: (why: string | undefined) => {
      failure = why
    },
    get state() {
      return state
    }
  }
}

const progress = (epoch: number, done: number, extra: { metrics?: Record<string, number> } = {}) => new Progress({ epoch, done, ...extra })
const dead = (ranks: ReadonlyArray<number>, at: number, cause = "killed") => CoordinatorEvent.RanksDead({ ranks, cause, at })

/** A world whose ranks have all attached at time 0 (their welcomes and first plan are not kept). */
const attachedAll = (settings: CoordinatorSettings) => {
  const run = coordinator(settings)
  for (const rank of settings.ranks) run.say(rank, new Attach())
  return run
}

describe("formation and the first plan", () => {
  test("the first epoch starts once every rank has attached, split equally in rank order", () => {
    const run = coordinator(settingsOf([0, 1], 10, 2))
    expect(run.say(0, new Attach())).toEqual(["0 ← Welcome first=1"])
    // 10 over 2: [0, 5) and [5, 10).
    expect(run.say(1, new Attach())).toEqual(["1 ← Welcome first=1", "0 ← EpochStart 1 [0,5)", "1 ← EpochStart 1 [5,10)"])
  })

  test("a resumed run starts after the checkpoint's epoch, from its state", () => {
    const run = coordinator(settingsOf([0], 4, 5, { resume: { epoch: 2, state: "r2" } }))
    expect(run.say(0, new Attach())).toEqual(["0 ← Welcome first=3 from=r2", "0 ← EpochStart 3 [0,4)"])
    expect(run.state.consensus.written).toBe(2)
  })

  test("a rank that comes back mid-run is welcomed with the latest consensus, not the one the run resumed from", () => {
    const run = coordinator(settingsOf([0, 1], 4, 5, { resume: { epoch: 2, state: "r2" } }))
    run.say(0, new Attach())
    run.say(1, new Attach()) // epoch 3 starts: [0, 2) and [2, 4)
    run.say(0, progress(3, 2), 5)
    run.say(1, progress(3, 2), 6) // epoch 3 ends
    run.say(0, new CheckpointSave({ epoch: 3, state: "w3" }), 10)
    run.say(1, new CheckpointSave({ epoch: 3, state: "w3" }), 11) // both members: the consensus of epoch 3
    run.step(dead([1], 20))
    expect(run.say(1, new Attach(), 30).filter((line) => line.includes("Welcome"))).toEqual(["1 ← Welcome first=4 from=w3"])
  })

  test("a job without epochs (dataset 0) welcomes its ranks and plans nothing", () => {
    const run = coordinator(settingsOf([0], 0, 3))
    expect(run.say(0, new Attach())).toEqual(["0 ← Welcome first=1"])
  })
})

describe("progress, the journal and an epoch's end", () => {
  test("progress is told at most every 500 ms, with the rate between two tellings; the epoch's end is its own event", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 2)) // epoch 1 starts at 0: [0, 5), [5, 10)
    // The first telling has no rate.
    expect(run.say(0, progress(1, 2), 100)).toEqual(["journal progress 1/2: 2/10, no rate {}"])
    expect(run.say(1, progress(1, 3), 300)).toEqual([]) // 200 ms after the last telling
    // 7 done; (7 - 2) samples in (600 - 100) ms = 10/s.
    expect(run.say(0, progress(1, 4), 600)).toEqual(["journal progress 1/2: 7/10, 10/s {}"])
    expect(run.say(1, progress(1, 5), 700)).toEqual([])
    // Every sample done at 1000: the epoch took 1 s.
    expect(run.say(0, progress(1, 5), 1000)).toEqual([
      "journal epoch_done 1/2: 10 in 1 s {}",
      "info: epoch 1/2 done in 1.0 s: 10 samples (r0 5, r1 5)",
      "0,1 ← EpochEnd 1",
      "0 ← EpochStart 2 [0,5)",
      "1 ← EpochStart 2 [5,10)"
    ])
    // Samples count across epochs: 10 + 1 = 11 at 1400, against 7 at 600: 4 in 0.8 s = 5/s.
    expect(run.say(1, progress(2, 1), 1400)).toEqual(["journal progress 2/2: 1/10, 5/s {}"])
    // 10 + 6 = 16 at 1900, against 11 at 1400: 10/s.
    expect(run.say(0, progress(2, 5), 1900)).toEqual(["journal progress 2/2: 6/10, 10/s {}"])
    expect(run.say(1, progress(2, 5), 2000)).toEqual([
      "journal epoch_done 2/2: 10 in 1 s {}",
      "info: epoch 2/2 done in 1.0 s: 10 samples (r0 5, r1 5)",
      "0,1 ← EpochEnd 2",
      "info: training done: 2 epoch(s)",
      "0,1 ← TrainingDone",
      "drained"
    ])
  })

  test("a progress line shows each metric's mean over the ranks' latest values", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 1))
    run.say(0, progress(1, 1, { metrics: { loss: 4 } }), 100)
    // Over 500 ms later the next progress goes to the journal (its rate left out here): the latest losses are 4 and 2, (4 + 2) / 2 = 3.
    const lines = run.say(1, progress(1, 1, { metrics: { loss: 2 } }), 700)
    expect(lines.filter((line) => line.startsWith("journal progress")).map((line) => line.replace(/, [^ ]+ \{/, " {"))).toEqual([
      "journal progress 1/1: 2/10 {\"loss\":3}"
    ])
  })

  test("progress shows the mean of each rank's latest metrics, an epoch's end the mean of all its reports; a report beyond the plan is clipped; latencies are passed on", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 1))
    expect(run.say(0, progress(1, 1, { metrics: { loss: 4 } }), 100)).toEqual(["journal progress 1/1: 1/10, no rate {\"loss\":4}"])
    // Rank 0's latest loss is 1 now, rank 1's 2; only rank 1 reports acc.
    run.say(0, progress(1, 2, { metrics: { loss: 1 } }), 200)
    run.say(1, progress(1, 5, { metrics: { loss: 2, acc: 0.5 } }), 300)
    // The epoch's loss is over its three reports, (4 + 1 + 2) / 3 = 2.333 (the latest alone, (1 + 2) / 2, would be
    // 1.5); acc over its one. A report without metrics adds nothing.
    expect(run.say(0, progress(1, 7), 400)).toEqual([
      "warning: rank 0 reported 7 samples done in epoch 1, more than the 5 it was given",
      `journal epoch_done 1/1: 10 in 0.4 s {"loss":${7 / 3},"acc":0.5}`,
      "info: epoch 1/1 done in 0.4 s: 10 samples (r0 5, r1 5); loss 2.333, acc 0.5000 (mean of the epoch's reports)",
      "0,1 ← EpochEnd 1",
      "info: training done: 1 epoch(s)",
      "0,1 ← TrainingDone",
      "drained"
    ])
    const allreduce = { counts: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], sum: 0.25 }
    expect(run.say(0, new Progress({ epoch: 1, done: 5, allreduce }), 500)).toEqual(["latencies sum 0.25"])
  })

  test("an epoch's figures are its own reports': the last epoch's are not carried over, and a late report of it does not count", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2)) // [0, 2) and [2, 4) each epoch
    run.say(0, progress(1, 2, { metrics: { loss: 10 } }), 100)
    const first = run.say(1, progress(1, 2, { metrics: { loss: 6 } }), 200)
    expect(first.filter((line) => line.startsWith("info: epoch"))).toEqual(["info: epoch 1/2 done in 0.2 s: 4 samples (r0 2, r1 2); loss 8.000 (mean of the epoch's reports)"])
    // Epoch 2: rank 0's last report of epoch 1 arrives late (loss 100); it moves the live view, not epoch 2's mean.
    run.say(0, progress(1, 2, { metrics: { loss: 100 } }), 250)
    run.say(0, progress(2, 2, { metrics: { loss: 3 } }), 300)
    const second = run.say(1, progress(2, 2, { metrics: { loss: 1 } }), 400)
    expect(second.filter((line) => line.startsWith("info: epoch") || line.startsWith("journal epoch_done"))).toEqual([
      "journal epoch_done 2/2: 4 in 0.2 s {\"loss\":2}",
      "info: epoch 2/2 done in 0.2 s: 4 samples (r0 2, r1 2); loss 2.000 (mean of the epoch's reports)"
    ])
  })

  test("cpu_cadence weighs the next epoch by measured throughput; an epoch a newcomer enters is split equally", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 3, { job: { backend: "cpu_cadence", datasetSize: 10, epochs: 3 } }))
    run.say(1, progress(1, 5), 500) // rank 1: 5 samples in 0.5 s = 10/s
    // Rank 0: 5 in 1 s = 5/s. Epoch 2 is 10 at 5:10: quotas 3.33 and 6.67, floors 3 + 6, the last sample to the larger remainder.
    expect(run.say(0, progress(1, 5), 1000).filter((line) => line.includes("EpochStart"))).toEqual(["0 ← EpochStart 2 [0,3)", "1 ← EpochStart 2 [3,10)"])
    run.step(CoordinatorEvent.Joined({ ranks: [2], at: 1100 }))
    expect(run.say(2, new Attach(), 1100)).toEqual([]) // held until the boundary
    run.say(0, progress(2, 3), 1500)
    // Rank 2 has no throughput: epoch 3 is 10 over 3 equally, 4 + 3 + 3. Its welcome waits for epoch 2's consensus.
    expect(run.say(1, progress(2, 7), 2000).filter((line) => !line.startsWith("journal"))).toEqual([
      "info: epoch 2/3 done in 1.0 s: 10 samples (r0 3, r1 7)",
      "0,1 ← EpochEnd 2",
      "info: rank(s) 2 enter the cohort at epoch 3: 3 rank(s) train it",
      "enter 2 at 3",
      "0 ← EpochStart 3 [0,4)",
      "1 ← EpochStart 3 [4,7)"
    ])
  })
})

describe("the first plan waits for every live rank", () => {
  test("a rank that attached and then died does not stand in for one that has not attached", () => {
    const run = coordinator(settingsOf([0, 1, 2], 10, 1))
    run.say(2, new Attach())
    run.step(dead([2], 10))
    // Two live ranks, two attached (0 and the dead 2): still no plan, rank 1 has not attached.
    expect(run.say(0, new Attach(), 20).filter((line) => line.includes("EpochStart"))).toEqual([])
    // 10 over the 2 live ranks: [0, 5) and [5, 10).
    expect(run.say(1, new Attach(), 30).filter((line) => line.includes("EpochStart"))).toEqual(["0 ← EpochStart 1 [0,5)", "1 ← EpochStart 1 [5,10)"])
  })
})

describe("throughput from an epoch that starts later", () => {
  test("cpu_cadence measures each rank from its epoch's start, not from time zero", () => {
    const run = coordinator(settingsOf([0, 1], 10, 2, { job: { backend: "cpu_cadence", datasetSize: 10, epochs: 2 } }))
    run.say(0, new Attach(), 1000)
    run.say(1, new Attach(), 1000) // epoch 1 starts at 1000
    run.say(1, progress(1, 5), 1500) // rank 1: 5 samples in 0.5 s = 10/s
    // Rank 0: 5 in 1 s = 5/s: the same 5:10 as from time zero, so the same split, 3 and 7 (from time zero it would be
    // 5/2 s against 5/1.5 s, quotas 4.29 and 5.71: 4 and 6).
    expect(run.say(0, progress(1, 5), 2000).filter((line) => line.includes("EpochStart"))).toEqual(["0 ← EpochStart 2 [0,3)", "1 ← EpochStart 2 [3,10)"])
  })
})

describe("liveness", () => {
  test("before formation only attached ranks are watched; after it, every live rank not exiting", () => {
    const run = coordinator(settingsOf([0, 1, 2], 0, 1))
    run.say(0, new Attach(), 0)
    run.say(1, new Attach(), 0)
    // Rank 2 never attached: not beaten, and not yet watched.
    expect(run.tick(1000)).toEqual(["0,1 ← Beat"])
    run.step(CoordinatorEvent.Beats({ ranks: [0, 9], at: 3000 })) // 9 is no rank of the run: ignored
    // Rank 1 was last heard at 0: 6500 ms > 6000. Rank 0 at 3000: 3500 ms.
    expect(run.tick(6500)).toEqual(["0,1 ← Beat", "lose 1: no heartbeat for 6.0 s"])
    expect(run.step(CoordinatorEvent.CohortFormed({ at: 7000 }))).toEqual([])
    // Rank 2's silence counts from formation (7000): 1000 ms.
    expect(run.tick(8000)).toEqual(["0 ← Beat"])
    // Rank 0: 9500 - 3000 = 6500 ms; rank 2: 2500 ms.
    expect(run.tick(9500)).toEqual(["0 ← Beat", "lose 0: no heartbeat for 6.0 s"])
    // Rank 2: 13001 - 7000 = 6001 ms, and it was the last: the run stops, with no consensus to save.
    expect(run.tick(13_001)).toEqual([
      "lose 2: no heartbeat for 6.0 s",
      "error: every rank was lost: no consensus checkpoint to write (no rank had saved one)",
      "(nobody) ← Stop \"every rank was lost\" unsaved"
    ])
  })

  test("a heartbeat report counts as a beat; a rank that said it is leaving is neither beaten nor watched", () => {
    const run = coordinator(settingsOf([0, 1], 0, 1))
    run.say(0, new Attach(), 0)
    run.say(1, new Attach(), 0)
    run.step(CoordinatorEvent.CohortFormed({ at: 0 }))
    run.say(0, new Heartbeat(), 5000)
    expect(run.say(1, new Exiting(), 5000)).toEqual([]) // no epoch under way: nothing left undone
    expect(run.tick(10_000)).toEqual(["0 ← Beat"])
    // Rank 0 last beat at 5000: 6001 ms at 11001. Rank 1 is leaving: never lost.
    expect(run.tick(11_001)).toEqual(["0 ← Beat", "lose 0: no heartbeat for 6.0 s"])
  })

  test("a command: job with a plan whose script never attaches (no cohort.init()): the rank is a fatal loss, naming what to add", () => {
    const command = { job: { backend: "cpu_sync" as const, datasetSize: 8, epochs: 1, program: { _tag: "Command" as const, command: ["python3", "t.py"] } } }
    const why = "a command: job with job.dataset_size is coordinated, and its script must join it (call cohort.init() before training), " +
      "or drop job.dataset_size to run the command as torchrun would"
    // Silent from formation (0) for more than the 6 s timeout, never heard at all.
    const silent = coordinator(settingsOf([0, 1], 8, 1, command))
    silent.say(0, new Attach(), 0)
    silent.step(CoordinatorEvent.CohortFormed({ at: 0 }))
    silent.step(CoordinatorEvent.Beats({ ranks: [0], at: 6000 }))
    // No plan was made (the first waits for every live rank): nothing to hand on.
    expect(silent.tick(6001)).toEqual(["0 ← Beat", `lose 1: never attached within 6.0 s of the cohort's formation: ${why}`])
    // It ended with status 0 before attaching: the same, at once.
    const ended = coordinator(settingsOf([0, 1], 8, 1, command))
    ended.say(0, new Attach(), 0)
    ended.step(CoordinatorEvent.CohortFormed({ at: 0 }))
    expect(ended.step(CoordinatorEvent.ExitedCleanly({ rank: 1, at: 50 }))).toEqual([`lose 1: exited with status 0 without attaching: ${why}`])
    // An entry: job's rank attaches by itself: one that never does is only silent (cause heartbeat, not the job's mistake).
    const entry = coordinator(settingsOf([0, 1], 8, 1))
    entry.say(0, new Attach(), 0)
    entry.step(CoordinatorEvent.CohortFormed({ at: 0 }))
    entry.step(CoordinatorEvent.Beats({ ranks: [0], at: 6000 }))
    expect(entry.tick(6001)).toEqual(["0 ← Beat", "lose 1: no heartbeat for 6.0 s"])
    // A command: job without a plan runs as torchrun would: nobody attaches, nobody is lost for it.
    const torchrun = coordinator(settingsOf([0, 1], 0, 1, { job: { ...command.job, datasetSize: 0 } }))
    torchrun.step(CoordinatorEvent.CohortFormed({ at: 0 }))
    expect(torchrun.step(CoordinatorEvent.ExitedCleanly({ rank: 1, at: 50 }))).toEqual([])
  })

  test("unfinishedTraining: why a run whose ranks all ended has not trained its plan, when it has not", () => {
    const command = { job: { backend: "cpu_sync" as const, datasetSize: 8, epochs: 2, program: { _tag: "Command" as const, command: ["python3", "t.py"] } } }
    expect(unfinishedTraining(initialState(settingsOf([0, 1], 8, 2, command)))).toBe(
      "every rank ended without attaching, so nothing trained: a command: job with job.dataset_size is coordinated, and its script must join it " +
        "(call cohort.init() before training), or drop job.dataset_size to run the command as torchrun would"
    )
    expect(unfinishedTraining(initialState(settingsOf([0, 1], 8, 2)))).toBe("every rank ended without attaching, so nothing trained")
    // No plan (dataset_size 0), or nothing left after the resumed epoch: nothing is missing.
    expect(unfinishedTraining(initialState(settingsOf([0, 1], 0, 2)))).toBeUndefined()
    const resumedAtEnd = { resume: { version: 1, run: "r", epoch: 2, savedAt: "2026-12-03T00:00:00Z", state: "s" } as unknown as CoordinatorSettings["resume"] }
    expect(unfinishedTraining(initialState(settingsOf([0, 1], 8, 2, resumedAtEnd)))).toBeUndefined()
    // Attached, the first epoch under way: said; every epoch done: nothing.
    const run = attachedAll(settingsOf([0, 1], 8, 2))
    expect(unfinishedTraining(run.state)).toBe("every rank ended before training was done (epoch 1 of 2 under way)")
    const done = attachedAll(settingsOf([0], 4, 1))
    done.say(0, progress(1, 4), 10)
    expect(unfinishedTraining(done.state)).toBeUndefined()
  })

  test("a joiner's silence counts from its joining", () => {
    const run = attachedAll(settingsOf([0], 4, 1))
    run.step(CoordinatorEvent.Joined({ ranks: [1], at: 100 }))
    run.step(CoordinatorEvent.Beats({ ranks: [0], at: 6000 }))
    expect(run.tick(6100)).toEqual(["0 ← Beat"]) // 6000 ms since joining: not yet
    // 6001 ms: lost; it held no work, so nothing is handed on.
    expect(run.tick(6101)).toEqual(["0 ← Beat", "lose 1: no heartbeat for 6.0 s", "redistributed 1 → nobody"])
  })
})

describe("the death chain", () => {
  test("a dead rank's remainder goes to the survivors; a second report of the death, or of a stranger's, changes nothing", () => {
    const run = attachedAll(settingsOf([0, 1, 2], 9, 1)) // [0, 3), [3, 6), [6, 9)
    run.say(0, progress(1, 2), 100)
    // Rank 0 leaves [2, 3): 1 sample over ranks 1 and 2 is 1 + 0.
    expect(run.step(dead([0], 200))).toEqual([
      "1 ← EpochExtend 1 [2,3)",
      "redistributed 0 → 1 [2,3)",
      "warning: rank 0 lost (killed): 1 unprocessed sample(s) of epoch 1 handed to rank(s) 1"
    ])
    expect(run.step(dead([0], 300, "again"))).toEqual([])
    expect(run.step(dead([7], 300))).toEqual([])
    run.say(2, progress(1, 3), 400) // rank 2 is done: it has nothing to hand on
    expect(run.step(dead([2], 500))).toEqual(["redistributed 2 → nobody"])
    // Rank 1 did [3, 6) and [2, 3): 2 + 4 + 3 = 9, every sample.
    expect(run.say(1, progress(1, 4), 700)).toEqual([
      "journal epoch_done 1/1: 9 in 0.7 s {}",
      "info: epoch 1/1 done in 0.7 s: 9 samples (r0 2, r1 4, r2 3)",
      "1 ← EpochEnd 1",
      "info: training done: 1 epoch(s)",
      "1 ← TrainingDone",
      "drained"
    ])
  })

  test("ranks that die together (a lost host's) leave together: none of their work goes to another of them, one line says it", () => {
    const run = attachedAll(settingsOf([0, 1, 2, 3], 16, 1)) // [0, 4), [4, 8), [8, 12), [12, 16)
    // Rank 2's [8, 12) first, over the ranks the ledger still counts (0, 1, 3): 2 + 1 + 1, lower ranks first;
    // rank 3's share of it, [11, 12), comes back with its own [12, 16): 5 samples over 0 and 1, 3 + 2.
    expect(run.step(dead([2, 3], 200, "host b lost (its ssh session ended with signal SIGKILL)"))).toEqual([
      "0 ← EpochExtend 1 [8,10)",
      "1 ← EpochExtend 1 [10,11)",
      "redistributed 2 → 0 [8,10), 1 [10,11)",
      "0 ← EpochExtend 1 [12,15)",
      "1 ← EpochExtend 1 [15,16) [11,12)",
      "redistributed 3 → 0 [12,15), 1 [15,16) [11,12)",
      "warning: ranks 2, 3 lost (host b lost (its ssh session ended with signal SIGKILL)): 8 unprocessed sample(s) of epoch 1 handed to rank(s) 0, 1"
    ])
    // Their exits, reported after, change nothing.
    expect(run.step(dead([3], 300))).toEqual([])
    // Rank 0 did 4 + 2 + 3 = 9, rank 1 4 + 1 + 2 = 7: every sample of the 16.
    run.say(0, progress(1, 9), 400)
    expect(run.say(1, progress(1, 7), 500)).toEqual([
      "journal epoch_done 1/1: 16 in 0.5 s {}",
      "info: epoch 1/1 done in 0.5 s: 16 samples (r0 9, r1 7, r2 0, r3 0)",
      "0,1 ← EpochEnd 1",
      "info: training done: 1 epoch(s)",
      "0,1 ← TrainingDone",
      "drained"
    ])
  })

  test("ranks that all die together hand nothing to each other: every rank was lost", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 1)) // [0, 2), [2, 4)
    expect(run.step(dead([0, 1], 200, "host a lost (the peer closed the connection)"))).toEqual([
      "redistributed 0 → nobody",
      "redistributed 1 → nobody",
      "error: every rank was lost: no consensus checkpoint to write (no rank had saved one)",
      "(nobody) ← Stop \"every rank was lost\" unsaved"
    ])
  })

  test("a rank that returns with work left is lost; one cohort is stopping, or that exited having said so, is not", () => {
    const run = attachedAll(settingsOf([0, 1, 2], 15, 1)) // [0, 5), [5, 10), [10, 15)
    run.say(0, progress(1, 2), 100)
    // [2, 5) left: 3 samples over ranks 1 and 2, 2 + 1.
    expect(run.say(0, new Exiting(), 200)).toEqual([
      "lose 0: returned with 3 sample(s) of epoch 1 left",
      "1 ← EpochExtend 1 [2,4)",
      "2 ← EpochExtend 1 [4,5)",
      "redistributed 0 → 1 [2,4), 2 [4,5)",
      "warning: rank 0 lost (returned with 3 sample(s) of epoch 1 left): 3 unprocessed sample(s) of epoch 1 handed to rank(s) 1, 2"
    ])
    run.step(CoordinatorEvent.StopOrdered({ ranks: [1], at: 300 }))
    expect(run.say(1, new Exiting(), 300)).toEqual([])
    expect(run.step(CoordinatorEvent.ExitedCleanly({ rank: 1, at: 1300 }))).toEqual([])
  })

  test("a clean exit without a word of leaving, with work left, is a loss", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 1))
    expect(run.step(CoordinatorEvent.ExitedCleanly({ rank: 1, at: 1000 }))).toEqual([
      "lose 1: exited with status 0 with 5 sample(s) of epoch 1 left",
      "0 ← EpochExtend 1 [5,10)",
      "redistributed 1 → 0 [5,10)",
      "warning: rank 1 lost (exited with status 0 with 5 sample(s) of epoch 1 left): 5 unprocessed sample(s) of epoch 1 handed to rank(s) 0"
    ])
  })

  test("a dead rank that attaches again is a member again: the rest of its plan now, a share of the next epoch", () => {
    const run = attachedAll(settingsOf([0, 1], 10, 2))
    run.say(0, progress(1, 2), 100)
    run.step(dead([0], 200)) // [2, 5) to rank 1
    // It keeps only what it did: nothing is left of its plan this epoch.
    expect(run.say(0, new Attach(), 300)).toEqual(["0 ← Welcome first=1", "0 ← EpochStart 1 -"])
    // Rank 1: [5, 10) and [2, 5) = 8; with rank 0's 2, all 10.
    expect(run.say(1, progress(1, 8), 400).filter((line) => line.includes("←"))).toEqual([
      "0,1 ← EpochEnd 1",
      "0 ← EpochStart 2 [0,5)",
      "1 ← EpochStart 2 [5,10)"
    ])
  })
})

describe("checkpoint consensus and the stop", () => {
  test("the state a majority of the epoch's members offer is written (and journalled once written); the stop saves it and tells every survivor", () => {
    // cpu_cadence: no mid-epoch cut (its ranks step alone between syncs), so the stop keeps the epoch's consensus.
    const run = attachedAll(settingsOf([0, 1, 2], 6, 3, { job: { backend: "cpu_cadence", datasetSize: 6, epochs: 3 } })) // [0, 2), [2, 4), [4, 6)
    for (const rank of [0, 1, 2]) run.say(rank, progress(1, 2), 10 + rank) // epoch 1 ends: ranks 0, 1 and 2 are its members
    // 1 of 3 is no majority: acknowledged, not written.
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 50)).toEqual(["0 ← CheckpointSaved 1"])
    expect(run.state.consensus.written).toBeUndefined()
    // 2 of 3 (more than half of 3) offered the same state: it is the consensus.
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 60)).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 3 dead []",
      `journal checkpoint epoch 1 at 60 ${PATH} (checkpoint)`,
      "1 ← CheckpointSaved 1"
    ])
    expect(run.state.consensus.written).toBe(1)
    // The third member agrees: acknowledged, nothing more to write.
    expect(run.say(2, new CheckpointSave({ epoch: 1, state: "w1" }), 70)).toEqual(["2 ← CheckpointSaved 1"])
    run.step(dead([2], 100)) // [4, 6) to ranks 0 and 1
    expect(run.step(CoordinatorEvent.StopRun({ why: "max_failure exceeded: 1/3 ranks dead, threshold 1", at: 200 }))).toEqual([
      "write epoch 1 \"w1\" (max_failure_exceeded) world 3 dead [2]",
      `journal checkpoint epoch 1 at 200 ${PATH} (max_failure_exceeded)`,
      `error: max_failure exceeded: 1/3 ranks dead, threshold 1: consensus checkpoint of epoch 1 written to ${PATH}; resume with --resume`,
      "0,1 ← Stop \"max_failure exceeded: 1/3 ranks dead, threshold 1\" saved"
    ])
    expect(run.step(CoordinatorEvent.StopRun({ why: "again", at: 300 }))).toEqual([])
    // Stopping: nothing is replanned, and a dead rank is not taken back.
    expect(run.step(dead([1], 400))).toEqual([])
    expect(run.say(1, new Attach(), 500)).toEqual([])
    // A rank joining now is told the run is stopping (the welcome stops waiting: epoch 4's would need epoch 3's consensus).
    run.step(CoordinatorEvent.Joined({ ranks: [5], at: 600 }))
    expect(run.say(5, new Attach(), 600)).toEqual([
      "warning: rank 5 starts epoch 4 from the consensus of epoch 1: none newer came within 0 ms",
      "5 ← Welcome first=2 from=w1", // the epoch under way when the run stopped
      "5 ← Stop \"the run is stopping\" unsaved"
    ])
  })

  test("a failed write is logged (not journalled) and leaves the checkpoint on disk as it was; the stop then says nothing was saved", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2, { job: { backend: "cpu_async", datasetSize: 4, epochs: 2 } })) // [0, 2), [2, 4)
    run.say(0, progress(1, 2), 5)
    run.say(1, progress(1, 2), 6) // epoch 1 ends; epoch 2 is under way
    run.failWrites("checkpoint /ckpt/run.json: cannot write it: EACCES")
    run.say(0, new CheckpointSave({ epoch: 1, state: "w" }), 9)
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w" }), 10)).toEqual([
      "write epoch 1 \"w\" (checkpoint) world 2 dead []",
      "error: checkpoint /ckpt/run.json: cannot write it: EACCES",
      "1 ← CheckpointSaved 1"
    ])
    expect(run.state.consensus.written).toBeUndefined()
    expect(run.step(CoordinatorEvent.StopRun({ why: "limit", at: 20 }))).toEqual([
      "write epoch 1 \"w\" (max_failure_exceeded) world 2 dead []",
      "error: checkpoint /ckpt/run.json: cannot write it: EACCES",
      "error: limit: the consensus checkpoint of epoch 1 could not be written to /ckpt/run.json (the error above): nothing new to resume from",
      "0,1 ← Stop \"limit\" unsaved"
    ])
  })

  test("every rank lost with a consensus: it is saved as all_ranks_lost", () => {
    const run = attachedAll(settingsOf([0], 4, 2))
    run.say(0, progress(1, 4), 5) // epoch 1 ends: a world of one, whose own offer is the majority
    run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 10)
    expect(run.step(dead([0], 20))).toEqual([
      "redistributed 0 → nobody",
      "write epoch 1 \"w1\" (all_ranks_lost) world 1 dead [0]",
      `journal checkpoint epoch 1 at 20 ${PATH} (all_ranks_lost)`,
      `error: every rank was lost: consensus checkpoint of epoch 1 written to ${PATH}; resume with --resume`,
      "(nobody) ← Stop \"every rank was lost\" saved"
    ])
  })

  test("once training is done, a stop changes nothing", () => {
    const run = attachedAll(settingsOf([0], 2, 1))
    run.say(0, progress(1, 2), 10)
    expect(run.step(CoordinatorEvent.StopRun({ why: "limit", at: 20 }))).toEqual([])
  })
})

/** Every live rank of `ranks` reports its share of `epoch` done (`done` each), from time `at`: the epoch ends. */
const finish = (run: ReturnType<typeof coordinator>, epoch: number, ranks: ReadonlyArray<number>, done: number, at: number) =>
  ranks.flatMap((rank, i) => run.say(rank, progress(epoch, done), at + i))

describe("the consensus vote", () => {
  test("a rank's save of an epoch under way or to come is refused and said once, naming it; the members' state is written", () => {
    const run = attachedAll(settingsOf([0, 1, 2], 6, 2)) // epoch 1: [0, 2), [2, 4), [4, 6)
    // During epoch 1, rank 2 claims the last epoch (the issue's attack), then the one under way.
    expect(run.say(2, new CheckpointSave({ epoch: 2, state: "payload" }), 5)).toEqual([
      "warning: rank 2's checkpoint of epoch 2 is refused: no epoch has ended yet: a checkpoint counts only for the epoch just ended, offered after it",
      "2 ← CheckpointSaved 2"
    ])
    expect(run.say(2, new CheckpointSave({ epoch: 1, state: "payload" }), 6)).toEqual(["2 ← CheckpointSaved 1"]) // said once
    finish(run, 1, [0, 1, 2], 2, 10)
    expect(run.say(2, new CheckpointSave({ epoch: 2, state: "payload" }), 30)).toEqual(["2 ← CheckpointSaved 2"]) // epoch 2 is under way
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 40)).toEqual(["0 ← CheckpointSaved 1"]) // 1 of 3
    expect(run.say(2, new CheckpointSave({ epoch: 1, state: "payload" }), 45)).toEqual(["2 ← CheckpointSaved 1"]) // a member's vote, its own
    // 2 of 3 offered "w1": the consensus; rank 2's differs (already said, so not again).
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 50)).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 3 dead []",
      `journal checkpoint epoch 1 at 50 ${PATH} (checkpoint)`,
      "1 ← CheckpointSaved 1"
    ])
    expect(run.state.consensus.latest).toEqual({ epoch: 1, state: "w1" })
  })

  test("each reason a save is refused, said once per rank: a second state, an epoch long past, one to come, a rank that did not train it", () => {
    const run = attachedAll(settingsOf([0, 1, 2, 3], 8, 3)) // 2 samples each
    run.step(CoordinatorEvent.Joined({ ranks: [5], at: 1 }))
    run.say(5, new Attach(), 2) // held to the boundary: it enters epoch 2
    finish(run, 1, [0, 1, 2, 3], 2, 10)
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 20)).toEqual(["0 ← CheckpointSaved 1"])
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "other" }), 21)).toEqual([
      "warning: rank 0's checkpoint of epoch 1 is refused: rank 0 already offered another state for epoch 1; a member offers once",
      "0 ← CheckpointSaved 1"
    ])
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 22)).toEqual(["0 ← CheckpointSaved 1"]) // the same state again: nothing
    expect(run.say(1, new CheckpointSave({ epoch: 0, state: "w0" }), 23)).toEqual([
      "warning: rank 1's checkpoint of epoch 0 is refused: epoch 0's vote is over: the epoch just ended is 1",
      "1 ← CheckpointSaved 0"
    ])
    expect(run.say(2, new CheckpointSave({ epoch: 3, state: "w3" }), 24)).toEqual([
      "warning: rank 2's checkpoint of epoch 3 is refused: epoch 3 has not ended: the epoch just ended is 1",
      "2 ← CheckpointSaved 3"
    ])
    // Rank 5 entered at epoch 2: not a member of epoch 1 (its welcome waits for that vote).
    expect(run.say(5, new CheckpointSave({ epoch: 1, state: "w1" }), 25)).toEqual([
      "warning: rank 5's checkpoint of epoch 1 is refused: rank 5 is not a member of epoch 1 (it did not train it, or died)",
      "5 ← CheckpointSaved 1"
    ])
    expect(run.say(3, new CheckpointSave({ epoch: 1, state: "w1" }), 26)).toEqual(["3 ← CheckpointSaved 1"]) // 2 of 4: a tie is no majority
    // 3 of 4: decided; the newcomer is welcomed with it.
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 27)).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 5 dead []",
      `journal checkpoint epoch 1 at 27 ${PATH} (checkpoint)`,
      "5 ← Welcome first=2 from=w1",
      "5 ← EpochStart 2 [7,8)", // 8 over 5 ranks: 2, 2, 2, 1, 1
      "1 ← CheckpointSaved 1"
    ])
  })

  test("an offer against the decided consensus is refused, naming its count", () => {
    const run = attachedAll(settingsOf([0, 1, 2], 3, 2))
    finish(run, 1, [0, 1, 2], 1, 10)
    run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 20)
    run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 21)
    expect(run.say(2, new CheckpointSave({ epoch: 1, state: "payload" }), 22)).toEqual([
      "warning: rank 2's checkpoint of epoch 1 is refused: its state differs from epoch 1's consensus, which 2 of its 3 member(s) offered",
      "2 ← CheckpointSaved 1"
    ])
  })

  test("no majority: the vote closes once every member has offered, and the consensus stays the last one (cpu_cadence's hint)", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2, { job: { backend: "cpu_cadence", datasetSize: 4, epochs: 2 } }))
    finish(run, 1, [0, 1], 2, 10)
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "a" }), 20)).toEqual(["0 ← CheckpointSaved 1"])
    // sha256("a") = ca978112ca1b…, sha256("b") = 3e23e8160039…
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "b" }), 21)).toEqual([
      "warning: epoch 1 has no consensus checkpoint: no state was offered by a majority (2) of its 2 member(s) (rank 0 offered ca978112ca1b; rank 1 offered 3e23e8160039); " +
      "cpu_cadence ranks train apart between syncs: average the state over the ranks before saving it (as examples/train.ts does); --resume would start from the beginning",
      "1 ← CheckpointSaved 1"
    ])
    expect(run.state.consensus.written).toBeUndefined()
  })

  test("a member that begins the next epoch without offering abstains: a job that saves on one rank of two has no majority", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2))
    finish(run, 1, [0, 1], 2, 10)
    run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 20)
    expect(run.say(1, progress(2, 0), 21)).toEqual([
      "warning: epoch 1 has no consensus checkpoint: no state was offered by a majority (2) of its 2 member(s) (rank 0 offered 60c5590f72ee; rank 1 none); " +
      "save on every rank: the consensus needs a majority of the epoch's members; --resume would start from the beginning"
    ])
  })

  test("a member that dies before offering leaves the vote: the survivor's state is the majority of one", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2))
    finish(run, 1, [0, 1], 2, 10) // epoch 2: [0, 2), [2, 4)
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 20)).toEqual(["0 ← CheckpointSaved 1"])
    expect(run.step(dead([1], 30))).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 2 dead [1]",
      `journal checkpoint epoch 1 at 30 ${PATH} (checkpoint)`,
      "0 ← EpochExtend 2 [2,4)",
      "redistributed 1 → 0 [2,4)",
      "warning: rank 1 lost (killed): 2 unprocessed sample(s) of epoch 2 handed to rank(s) 0"
    ])
  })

  test("a newcomer's welcome waits for the vote, not for the first member to begin its epoch", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2))
    run.step(CoordinatorEvent.Joined({ ranks: [2], at: 1 }))
    run.say(2, new Attach(), 2)
    finish(run, 1, [0, 1], 2, 10) // rank 2 enters epoch 2: [0, 2), [2, 3), [3, 4)
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 20)).toEqual(["0 ← CheckpointSaved 1"])
    expect(run.say(0, progress(2, 0), 21)).toEqual([]) // rank 1 has not offered yet
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 22)).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 3 dead []",
      `journal checkpoint epoch 1 at 22 ${PATH} (checkpoint)`,
      "2 ← Welcome first=2 from=w1",
      "2 ← EpochStart 2 [3,4)",
      "1 ← CheckpointSaved 1"
    ])
  })

  test("a rank restarted into the epoch is checked, not counted: its older state is refused once the members decide", () => {
    const run = attachedAll(settingsOf([0, 1, 2], 6, 2)) // [0, 2), [2, 4), [4, 6)
    run.step(dead([2], 5)) // [4, 5) to rank 0, [5, 6) to rank 1
    run.say(2, new Attach(), 6) // back: a member again, from an older state
    finish(run, 1, [0, 1], 3, 10)
    expect(run.say(2, new CheckpointSave({ epoch: 1, state: "older" }), 20)).toEqual(["2 ← CheckpointSaved 1"])
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 21)).toEqual(["0 ← CheckpointSaved 1"]) // 1 of the 2 that trained it all
    expect(run.say(1, new CheckpointSave({ epoch: 1, state: "w1" }), 22)).toEqual([
      "warning: rank 2's checkpoint of epoch 1 is refused: its state differs from epoch 1's consensus, which 2 of its 2 member(s) offered",
      "write epoch 1 \"w1\" (checkpoint) world 3 dead []",
      `journal checkpoint epoch 1 at 22 ${PATH} (checkpoint)`,
      "1 ← CheckpointSaved 1"
    ])
  })
})

/** A rank's cut: `done` samples, `rounds` reductions, its state; steady unless said. */
const offer = (epoch: number, done: number, rounds: number, state: string | undefined, steady = true) =>
  new CutOffer({ epoch, done, rounds, steady, ...(state === undefined ? {} : { state }) })

/**
 * Three cpu_sync ranks, resumed from epoch 0's checkpoint ("w0"), 12 samples: [0, 4), [4, 8), [8, 12). Rank 2
 * dies after 1 sample: its [9, 12) goes [9, 11) to rank 0 and [11, 12) to rank 1. Ranks 0 and 1 then report 3
 * and 4: done are [0, 3), [4, 8) and rank 2's [8, 9), 8 samples. The limit is crossed at 200.
 */
const stoppedMidEpoch = (extra: Partial<CoordinatorSettings> = {}, stopping: CoordinatorEvent = CoordinatorEvent.StopRun({ why: "limit", at: 200 })) => {
  const run = attachedAll(settingsOf([0, 1, 2], 12, 3, { resume: { epoch: 0, state: "w0" }, ...extra }))
  run.say(2, progress(1, 1), 20)
  run.step(dead([2], 100))
  run.say(0, progress(1, 3), 110)
  run.say(1, progress(1, 4), 120)
  const stop = run.step(stopping)
  return { run, stop }
}

const FALLBACK = [
  "write epoch 0 \"w0\" (max_failure_exceeded) world 3 dead [2]",
  `journal checkpoint epoch 0 at 300 ${PATH} (max_failure_exceeded)`,
  `error: limit: consensus checkpoint of epoch 0 written to ${PATH}; resume with --resume`,
  "0,1 ← Stop \"limit\" saved"
]

describe("the mid-epoch cut", () => {
  test("cpu_sync: the survivors are asked; the state with the most rounds is written with the epoch's coverage", () => {
    const { run, stop } = stoppedMidEpoch()
    expect(stop).toEqual([
      "info: limit: asking rank(s) 0, 1 for their state at their next step, to keep epoch 1's 8 sample(s) done",
      "0,1 ← OfferCut 1"
    ])
    expect(run.say(0, offer(1, 3, 3, "s0"), 210)).toEqual([])
    // Rank 1 went one round further (rank 0 had stopped): its state holds every round, and the coverage is every done sample.
    expect(run.say(1, offer(1, 4, 4, "s1"), 220)).toEqual([
      "write epoch 0 \"s1\" (max_failure_exceeded) world 3 dead [2] covering epoch 1 of 12: [0,3) [4,9)",
      `journal checkpoint epoch 0 at 220 ${PATH} (max_failure_exceeded)`,
      `error: limit: consensus checkpoint written to ${PATH}, resuming epoch 1 at 8 of 12 samples done; resume with --resume`,
      "0,1 ← Stop \"limit\" saved"
    ])
    expect(run.state.consensus.cut).toBeUndefined()
    // Its answer given, a late offer or a second stop changes nothing.
    expect(run.say(0, offer(1, 3, 3, "late"), 230)).toEqual([])
    expect(run.step(CoordinatorEvent.StopRun({ why: "again", at: 240 }))).toEqual([])
  })

  test("equal rounds: the lower rank's state", () => {
    const { run } = stoppedMidEpoch()
    run.say(1, offer(1, 4, 4, "s1"), 210)
    expect(run.say(0, offer(1, 3, 4, "s0"), 220)[0]).toBe("write epoch 0 \"s0\" (max_failure_exceeded) world 3 dead [2] covering epoch 1 of 12: [0,3) [4,9)")
  })

  test.each([
    ["a rank that waited for work", offer(1, 3, 3, "s0", false), "rank 0 waited for work, so its weights miss the others' last rounds"],
    ["a job without ctx.checkpoint.provide", offer(1, 3, 3, undefined), "rank 0's job offers no state between steps (ctx.checkpoint.provide)"],
    ["a rank whose offer is behind its reports", offer(1, 2, 2, "s0"), "rank 0 offered a state after 2 sample(s), but reported 3"]
  ])("%s: the stop keeps the last epoch's consensus and says why", (_, first, problem) => {
    const { run } = stoppedMidEpoch()
    run.say(1, offer(1, 4, 4, "s1"), 210)
    expect(run.say(0, first, 300)).toEqual([`warning: epoch 1's progress cannot be kept (${problem}): the checkpoint keeps the consensus of epoch 0`, ...FALLBACK])
  })

  test.each([
    ["says it is leaving", (run: ReturnType<typeof coordinator>) => run.say(0, new Exiting(), 300), FALLBACK],
    ["exits with status 0", (run: ReturnType<typeof coordinator>) => run.step(CoordinatorEvent.ExitedCleanly({ rank: 0, at: 300 })), FALLBACK],
    ["is still silent when the run ends", (run: ReturnType<typeof coordinator>) => run.step(CoordinatorEvent.Ending({ at: 300 })), FALLBACK],
    // Dead, it is counted with the dead and not told to stop.
    ["dies", (run: ReturnType<typeof coordinator>) => run.step(dead([0], 300)), [
      "write epoch 0 \"w0\" (max_failure_exceeded) world 3 dead [0,2]",
      FALLBACK[1]!,
      FALLBACK[2]!,
      "1 ← Stop \"limit\" saved"
    ]]
  ])("a survivor that %s without an answer: the last epoch's consensus", (_, without, then) => {
    const { run } = stoppedMidEpoch()
    run.say(1, offer(1, 4, 4, "s1"), 210)
    expect(without(run)).toEqual([`warning: epoch 1's progress cannot be kept (rank 0 stopped without offering its state): the checkpoint keeps the consensus of epoch 0`, ...then])
  })

  test("no answer within a heartbeat timeout (6 s): not waited for longer", () => {
    const { run } = stoppedMidEpoch()
    run.say(1, offer(1, 4, 4, "s1"), 210)
    // Rank 0 still beats (it is not lost): only the cut's wait runs out, 6 s after the stop at 200.
    run.step(CoordinatorEvent.Beats({ ranks: [0], at: 6_000 }))
    expect(run.tick(6_200).filter((line) => !line.includes("Beat"))).toEqual([])
    const lines = run.tick(6_201)
    expect(lines[0]).toBe("warning: epoch 1's progress cannot be kept (rank 0 stopped without offering its state): the checkpoint keeps the consensus of epoch 0")
    expect(lines).toContain("0,1 ← Stop \"limit\" saved")
  })

  test("a rank restarted into the epoch began it from an older state: no cut", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 2)) // [0, 2), [2, 4)
    run.step(dead([1], 10)) // [2, 4) to rank 0
    run.say(1, new Attach(), 20) // back, under its own number: its remainder (none) from w-less start
    run.step(CoordinatorEvent.StopRun({ why: "limit", at: 30 }))
    run.say(0, offer(1, 0, 0, "s0"), 40)
    expect(run.say(1, offer(1, 0, 0, "s1"), 50)).toEqual([
      "warning: epoch 1's progress cannot be kept (rank 1 began the epoch part-way, from an older state): --resume would start from the beginning",
      "error: limit: no consensus checkpoint to write (no rank had saved one)",
      "0,1 ← Stop \"limit\" unsaved"
    ])
  })

  test("the epoch's last sample done while the cut waits: the epoch stays open and the coverage is all of it", () => {
    const { run } = stoppedMidEpoch()
    // Rank 0's [3, 4) [9, 11) and rank 1's [11, 12): 12 of 12, and no EpochEnd.
    expect(run.say(0, progress(1, 6), 210).filter((line) => line.includes("←"))).toEqual([])
    run.say(1, progress(1, 5), 220)
    run.say(0, offer(1, 6, 6, "s0"), 230)
    expect(run.say(1, offer(1, 5, 6, "s1"), 240)[0]).toBe("write epoch 0 \"s0\" (max_failure_exceeded) world 3 dead [2] covering epoch 1 of 12: [0,12)")
  })

  test("no cut where it cannot hold: cpu_cadence, and before the first epoch", () => {
    const cadence = stoppedMidEpoch({ job: { backend: "cpu_cadence", datasetSize: 12, epochs: 3 } })
    expect(cadence.stop[0]).toBe("write epoch 0 \"w0\" (max_failure_exceeded) world 3 dead [2]")
    const early = coordinator(settingsOf([0, 1], 4, 1))
    early.say(0, new Attach())
    expect(early.step(CoordinatorEvent.StopRun({ why: "limit", at: 5 }))).toEqual([
      "error: limit: no consensus checkpoint to write (no rank had saved one)",
      "0,1 ← Stop \"limit\" unsaved"
    ])
  })
})

describe("a stop asked from outside (Ctrl-C, SIGTERM)", () => {
  /** As stoppedMidEpoch, but interrupted at 200 instead of the limit crossed. */
  const interruptedMidEpoch = (extra: Partial<CoordinatorSettings> = {}) =>
    stoppedMidEpoch(extra, CoordinatorEvent.Interrupted({ why: "aborted: received SIGINT", at: 200 }))

  test("cpu_sync mid-epoch: the same cut as at the limit, written as interrupted and said", () => {
    const { run, stop } = interruptedMidEpoch()
    expect(stop).toEqual([
      "info: aborted: received SIGINT: asking rank(s) 0, 1 for their state at their next step, to keep epoch 1's 8 sample(s) done",
      "0,1 ← OfferCut 1"
    ])
    run.say(0, offer(1, 3, 3, "s0"), 210)
    expect(run.say(1, offer(1, 4, 4, "s1"), 220)).toEqual([
      "write epoch 0 \"s1\" (interrupted) world 3 dead [2] covering epoch 1 of 12: [0,3) [4,9)",
      `journal checkpoint epoch 0 at 220 ${PATH} (interrupted)`,
      `error: aborted: received SIGINT: consensus checkpoint written to ${PATH}, resuming epoch 1 at 8 of 12 samples done; resume with --resume`,
      "0,1 ← Stop \"aborted: received SIGINT\" saved"
    ])
    // A second Ctrl-C (or the limit crossed meanwhile) asks nothing more.
    expect(run.step(CoordinatorEvent.Interrupted({ why: "again", at: 230 }))).toEqual([])
    expect(run.step(CoordinatorEvent.StopRun({ why: "limit", at: 240 }))).toEqual([])
  })

  test("a survivor that stops without a state: the last epoch's consensus, written as interrupted", () => {
    const { run } = interruptedMidEpoch()
    run.say(1, offer(1, 4, 4, "s1"), 210)
    expect(run.say(0, offer(1, 3, 3, undefined), 300)).toEqual([
      "warning: epoch 1's progress cannot be kept (rank 0's job offers no state between steps (ctx.checkpoint.provide)): the checkpoint keeps the consensus of epoch 0",
      "write epoch 0 \"w0\" (interrupted) world 3 dead [2]",
      `journal checkpoint epoch 0 at 300 ${PATH} (interrupted)`,
      `error: aborted: received SIGINT: consensus checkpoint of epoch 0 written to ${PATH}; resume with --resume`,
      "0,1 ← Stop \"aborted: received SIGINT\" saved"
    ])
  })

  test("no cut to be had (cpu_cadence, before the first epoch): nothing here; the supervisor stops the ranks", () => {
    expect(interruptedMidEpoch({ job: { backend: "cpu_cadence", datasetSize: 12, epochs: 3 } }).stop).toEqual([])
    const early = coordinator(settingsOf([0, 1], 4, 1))
    early.say(0, new Attach())
    expect(early.step(CoordinatorEvent.Interrupted({ why: "aborted: received SIGINT", at: 5 }))).toEqual([])
  })
})

describe("resuming mid-epoch", () => {
  // The checkpoint the first test of "the mid-epoch cut" writes: epoch 1 of 12 with [0, 3) and [4, 9) done.
  const resume = { epoch: 0, state: "s1", coverage: { epoch: 1, datasetSize: 12, done: [{ start: 0, end: 3 }, { start: 4, end: 9 }] } }

  test("only the rest of the epoch is planned, split equally in rank order; the next epoch is whole", () => {
    const run = coordinator(settingsOf([0, 1, 2], 12, 2, { resume }))
    run.say(0, new Attach())
    run.say(1, new Attach())
    // The rest: [3, 4) and [9, 12), 4 samples: 2, 1, 1.
    expect(run.say(2, new Attach())).toEqual([
      "2 ← Welcome first=1 from=s1",
      "info: epoch 1 resumes at 8 of 12 samples done: the rest is split over 3 rank(s)",
      "0 ← EpochStart 1 [3,4) [9,10)",
      "1 ← EpochStart 1 [10,11)",
      "2 ← EpochStart 1 [11,12)"
    ])
    run.say(0, progress(1, 2), 100)
    run.say(1, progress(1, 1), 110)
    expect(run.say(2, progress(1, 1), 120).filter((line) => line.includes("←"))).toEqual([
      "0,1,2 ← EpochEnd 1",
      "0 ← EpochStart 2 [0,4)",
      "1 ← EpochStart 2 [4,8)",
      "2 ← EpochStart 2 [8,12)"
    ])
  })

  test("a coverage of the whole epoch: it ends as soon as it starts", () => {
    const whole = { ...resume, coverage: { epoch: 1, datasetSize: 12, done: [{ start: 0, end: 12 }] } }
    const run = coordinator(settingsOf([0], 12, 2, { resume: whole }))
    expect(run.say(0, new Attach(), 50).filter((line) => line.includes("←"))).toEqual([
      "0 ← Welcome first=1 from=s1",
      "0 ← EpochStart 1 -",
      "0 ← EpochEnd 1",
      "0 ← EpochStart 2 [0,12)"
    ])
  })

  test("stopped again before a newer consensus: the resumed state is kept with its own coverage", () => {
    const run = coordinator(settingsOf([0], 12, 2, { resume }))
    run.say(0, new Attach())
    expect(run.step(dead([0], 100))).toEqual([
      "redistributed 0 → nobody",
      "write epoch 0 \"s1\" (all_ranks_lost) world 1 dead [0] covering epoch 1 of 12: [0,3) [4,9)",
      `journal checkpoint epoch 0 at 100 ${PATH} (all_ranks_lost)`,
      `error: every rank was lost: consensus checkpoint written to ${PATH}, resuming epoch 1 at 8 of 12 samples done; resume with --resume`,
      "(nobody) ← Stop \"every rank was lost\" saved"
    ])
  })
})

describe("growth", () => {
  test("a joiner's attach is held to the boundary; its welcome waits for the consensus of the epoch before", () => {
    const run = attachedAll(settingsOf([0], 4, 2)) // epoch 1: [0, 4)
    expect(run.step(CoordinatorEvent.Joined({ ranks: [1], at: 100 }))).toEqual([])
    expect(run.say(1, new Attach(), 200)).toEqual([])
    expect(run.tick(1000)).toEqual(["0 ← Beat"]) // a joiner is watched, not beaten
    // Epoch 2 is 4 over 2: [0, 2) and [2, 4); rank 1 waits for epoch 1's consensus.
    expect(run.say(0, progress(1, 4), 1500)).toEqual([
      "journal epoch_done 1/2: 4 in 1.5 s {}",
      "info: epoch 1/2 done in 1.5 s: 4 samples (r0 4)",
      "0 ← EpochEnd 1",
      "info: rank(s) 1 enter the cohort at epoch 2: 2 rank(s) train it",
      "enter 1 at 2",
      "0 ← EpochStart 2 [0,2)"
    ])
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "w1" }), 1600)).toEqual([
      "write epoch 1 \"w1\" (checkpoint) world 2 dead []",
      `journal checkpoint epoch 1 at 1600 ${PATH} (checkpoint)`,
      "1 ← Welcome first=2 from=w1",
      "1 ← EpochStart 2 [2,4)",
      "0 ← CheckpointSaved 1"
    ])
  })

  test("with no consensus offered, a newcomer's welcome stops waiting after a heartbeat timeout", () => {
    const run = attachedAll(settingsOf([0], 4, 2))
    run.step(CoordinatorEvent.Joined({ ranks: [1], at: 0 }))
    run.say(1, new Attach(), 0)
    run.say(0, progress(1, 4), 1500) // rank 1 enters epoch 2 at 1500
    run.step(CoordinatorEvent.Beats({ ranks: [0, 1], at: 7000 }))
    expect(run.tick(7500)).toEqual(["0,1 ← Beat"]) // 6000 ms: still waiting
    expect(run.tick(7501)).toEqual([
      "warning: rank 1 starts epoch 2 from its own initial state: the job has offered no checkpoint (ctx.checkpoint.save) to start it from",
      "1 ← Welcome first=2",
      "1 ← EpochStart 2 [2,4)",
      "0,1 ← Beat"
    ])
  })

  test("every member dies mid-epoch: the joiners that attached take over a few beats later, if not all have", () => {
    const run = attachedAll(settingsOf([0], 6, 1)) // [0, 6)
    run.step(CoordinatorEvent.Joined({ ranks: [1, 2], at: 10 }))
    run.say(1, new Attach(), 20)
    run.say(0, progress(1, 3), 30)
    // [3, 6) is stranded; rank 2 has not attached, so nobody takes it yet.
    expect(run.step(dead([0], 40))).toEqual([
      "redistributed 0 → nobody",
      "warning: every member was lost (killed); rank(s) 1, 2 that joined carry on once they attach"
    ])
    expect(run.tick(2040)).toEqual([]) // 2000 ms stranded: two beats are not yet past
    expect(run.tick(2041)).toEqual([
      "info: rank(s) 1 enter the cohort at epoch 1: 1 rank(s) train it",
      "enter 1 at 1",
      "warning: every member was lost (no member was left): rank(s) 1 enter at once and take epoch 1's remaining 3 sample(s)",
      "1 ← Welcome first=1",
      "1 ← EpochStart 1 [3,6)",
      "1 ← Beat"
    ])
  })

  test("a joiner that attaches after the last epoch holds the final consensus and is told training is done", () => {
    const run = attachedAll(settingsOf([0], 2, 1))
    run.step(CoordinatorEvent.Joined({ ranks: [1], at: 10 }))
    run.say(0, progress(1, 2), 20)
    expect(run.say(1, new Attach(), 30)).toEqual([]) // its welcome waits for epoch 1's consensus
    expect(run.say(0, new CheckpointSave({ epoch: 1, state: "final" }), 40)).toEqual([
      "write epoch 1 \"final\" (checkpoint) world 2 dead []",
      `journal checkpoint epoch 1 at 40 ${PATH} (checkpoint)`,
      "1 ← Welcome first=2 from=final",
      "1 ← TrainingDone",
      "0 ← CheckpointSaved 1"
    ])
  })

  test("before the first epoch, the first epoch is the boundary: a joiner attaching once every live rank has starts it", () => {
    const run = coordinator(settingsOf([0, 1], 4, 1))
    run.say(0, new Attach(), 0)
    run.step(dead([1], 10)) // lost before it attached
    run.step(CoordinatorEvent.Joined({ ranks: [2], at: 20 }))
    // Epoch 1 is 4 over ranks 0 and 2: [0, 2) and [2, 4). Rank 2 enters at the first epoch: nothing to wait for.
    expect(run.say(2, new Attach(), 30)).toEqual([
      "info: rank(s) 2 enter the cohort at epoch 1: 2 rank(s) train it",
      "enter 2 at 1",
      "0 ← EpochStart 1 [0,2)",
      "2 ← Welcome first=1",
      "2 ← EpochStart 1 [2,4)"
    ])
  })

  test("a rank the run has had cannot join again", () => {
    const run = attachedAll(settingsOf([0, 1], 4, 1))
    run.step(dead([1], 10))
    run.step(CoordinatorEvent.Joined({ ranks: [1], at: 20 }))
    expect(run.state.growth.joining.size).toBe(0)
  })
})

describe("the ranks' own process groups (ranks that attach keeping groups)", () => {
  const keepingGroups = new Attach({ groups: true })

  test("the first group is the formed cohort's, after the first plan", () => {
    const run = coordinator(settingsOf([0, 1, 2], 9, 1))
    expect(run.say(2, keepingGroups)).toEqual(["2 ← Welcome first=1"])
    expect(run.say(0, keepingGroups)).toEqual(["0 ← Welcome first=1"])
    expect(run.say(1, keepingGroups)).toEqual([
      "1 ← Welcome first=1",
      "0 ← EpochStart 1 [0,3)",
      "1 ← EpochStart 1 [3,6)",
      "2 ← EpochStart 1 [6,9)",
      "0,1,2 ← Group 1 [0,1,2]"
    ])
  })

  test("a death makes a new generation of the survivors, the lowest rank's death too", () => {
    const run = coordinator(settingsOf([0, 1, 2], 9, 1))
    for (const rank of [0, 1, 2]) run.say(rank, keepingGroups)
    expect(run.step(dead([2], 10)).filter((line) => line.includes("Group"))).toEqual(["0,1 ← Group 2 [0,1]"])
    expect(run.step(dead([0], 20)).filter((line) => line.includes("Group"))).toEqual(["1 ← Group 3 [1]"])
    // Told once: the same death again changes nothing.
    expect(run.step(dead([0], 30))).toEqual([])
  })

  test("a restarted rank that attaches again makes the next generation with the survivors", () => {
    const run = coordinator(settingsOf([0, 1], 8, 1))
    for (const rank of [0, 1]) run.say(rank, keepingGroups)
    run.step(dead([0], 10)) // Group 2 [1]
    const back = run.say(0, new Attach({ groups: true }), 20)
    expect(back.filter((line) => line.includes("Group"))).toEqual(["0,1 ← Group 3 [0,1]"])
  })

  test("a rank that joined the formed cohort is in no group until it enters: its attach changes none", () => {
    const run = coordinator(settingsOf([0, 1], 8, 2))
    for (const rank of [0, 1]) run.say(rank, keepingGroups)
    run.step(CoordinatorEvent.Joined({ ranks: [2], at: 5 }))
    expect(run.say(2, keepingGroups, 10).filter((line) => line.includes("Group"))).toEqual([])
  })

  test("a member that leaves on its own with its share done is no longer in the group", () => {
    const run = coordinator(settingsOf([0, 1, 2], 9, 1))
    for (const rank of [0, 1, 2]) run.say(rank, keepingGroups)
    run.say(2, progress(1, 3), 10) // its [6, 9) done
    expect(run.say(2, new Exiting(), 20).filter((line) => line.includes("Group"))).toEqual(["0,1 ← Group 2 [0,1]"])
  })

  test("ranks that keep no groups (entry ranks, plain commands) are never sent a group", () => {
    const run = coordinator(settingsOf([0, 1], 4, 1))
    run.say(0, new Attach())
    expect(run.say(1, new Attach()).some((line) => line.includes("Group"))).toBe(false)
    expect(run.step(dead([1], 10)).some((line) => line.includes("Group"))).toBe(false)
  })

  test("nothing forms once training is done or the run stops: leaving ranks are not a new group", () => {
    const run = coordinator(settingsOf([0, 1], 2, 1))
    for (const rank of [0, 1]) run.say(rank, keepingGroups)
    run.say(0, progress(1, 1), 10)
    expect(run.say(1, progress(1, 1), 20)).toContain("0,1 ← TrainingDone")
    expect(run.say(1, new Exiting(), 30)).toEqual([])
    expect(run.step(dead([1], 40))).toEqual([])

    const stopped = coordinator(settingsOf([0, 1, 2], 6, 1))
    for (const rank of [0, 1, 2]) stopped.say(rank, keepingGroups)
    expect(stopped.step(CoordinatorEvent.StopRun({ why: "max_failure crossed", at: 10 })).some((line) => line.includes("Group"))).toBe(false)
    expect(stopped.step(dead([2], 20)).some((line) => line.includes("Group"))).toBe(false)
  })
})
