/**
 * Epochs: once every live rank has attached, each epoch's samples are split across the live ranks
 * (`EpochLedger.plan`): equally for `cpu_sync` and `nccl`, by measured throughput for `cpu_cadence` and
 * `cpu_async` after the first epoch. Progress reports fill the ledger; when every sample is done the epoch
 * ends, its members vote on its consensus (consensus.ts), and the next one starts, with the joined ranks that
 * have attached entering at its boundary (growth.ts). Owns the `epochs` slice.
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import { EpochEnd, EpochStart, type RankReport, TrainingDone, Welcome } from "../../../wire/messages/CoordinatorMessages.ts"
import * as Ledger from "../EpochLedger.ts"
import { abstained, openBallot } from "./consensus.ts"
import { Instruction } from "./events.ts"
import { dismiss, enter } from "./growth.ts"
import { type CoordinatorState, firstEpochOf } from "./state.ts"
import { type Step, valueOf } from "./step.ts"
import { addReport, tellEpochDone, tellProgress } from "./telemetry.ts"
import { welcomeNewcomers } from "./welcome.ts"

/**
 * Why a run whose ranks all ended has not trained what it planned, if it has not: asked when every rank has
 * ended without a failure, so that such a run never says "completed". A coordinated job whose ranks ended with
 * no epoch left to train (or none planned) has nothing missing. None of them attached: its script never joined
 * (the Python client's cohort.init()); else they ended with an epoch under way or not begun.
 */
export const unfinishedTraining = (state: CoordinatorState): string | undefined => {
  const { epochs, members, settings } = state
  if (epochs.finished || settings.job.datasetSize === 0 || settings.job.epochs <= (settings.resume?.epoch ?? 0)) return undefined
  if (HashSet.size(members.attached) === 0) {
    return settings.job.program?._tag === "Command"
      ? "every rank ended without attaching, so nothing trained: a command: job with job.dataset_size is coordinated, and its script must join it " +
        "(call cohort.init() before training), or drop job.dataset_size to run the command as torchrun would"
      : "every rank ended without attaching, so nothing trained"
  }
  const under = epochs.ledger?.epoch
  return `every rank ended before training was done (${under === undefined ? "no epoch began" : `epoch ${under} of ${settings.job.epochs} under way`})`
}

/** A member's Attach: it is welcomed, and given what is left of its plan mid-epoch, or the first epoch starts once every live rank is in. */
export const attached = (step: Step, rank: number): void => {
  step.members.attached = HashSet.add(step.members.attached, rank)
  step.deaths.ordered = HashSet.remove(step.deaths.ordered, rank)
  const { ledger } = step.epochs
  // A rank (re)starting mid-run continues from the latest consensus; at the start, from --resume's.
  const checkpoint = ledger !== undefined ? step.consensus.latest?.state : step.settings.resume?.state
  step.send([rank], new Welcome({ firstEpoch: ledger?.epoch ?? firstEpochOf(step.settings), ...(checkpoint === undefined ? {} : { checkpoint }) }))
  if (ledger !== undefined) {
    // A late (or restarted) rank: what is left of its plan.
    step.epochs.doneBefore = HashMap.set(step.epochs.doneBefore, rank, ledger.done.get(rank) ?? 0)
    step.epochs.lateStarters = HashSet.add(step.epochs.lateStarters, rank)
    step.send([rank], new EpochStart({ epoch: ledger.epoch, ranges: Ledger.remainder(ledger, rank) }))
  } else if (!step.epochs.finished && !step.deaths.stopping && step.settings.job.datasetSize > 0 && step.everyLiveAttached()) {
    startEpoch(step, firstEpochOf(step.settings))
  }
}

export const progressed = (step: Step, rank: number, report: Extract<RankReport, { readonly _tag: "Progress" }>): void => {
  // A member at work in a later epoch has offered whatever checkpoint it would of the one before.
  const { ballot } = step.consensus
  if (ballot !== undefined && report.epoch > ballot.epoch) abstained(step, rank)
  if (report.metrics !== undefined) step.epochs.metrics = new Map(step.epochs.metrics).set(rank, report.metrics)
  if (report.allreduce !== undefined) step.instructions.push(Instruction.Latencies({ counts: report.allreduce }))
  const { ledger } = step.epochs
  if (ledger === undefined || report.epoch !== ledger.epoch) return
  // Only this epoch's reports make its figures: a late one of the epoch before is not of it.
  if (report.metrics !== undefined) step.epochs.sums = addReport(step.epochs.sums, report.metrics)
  const { clipped, ledger: next } = Ledger.report(ledger, rank, report.done + (valueOf(step.epochs.doneBefore, rank) ?? 0))
  step.epochs.ledger = next
  step.epochs.lastProgressAt = HashMap.set(step.epochs.lastProgressAt, rank, step.at)
  if (clipped) {
    step.log("warning", `rank ${rank} reported ${report.done} samples done in epoch ${next.epoch}, more than the ${Ledger.assignedCount(next, rank)} it was given`)
  }
  // A cut under way keeps the epoch open: its coverage is then the whole epoch, and no next one starts.
  if (Ledger.isComplete(next) && step.consensus.cut === undefined) endEpoch(step)
  else tellProgress(step)
}

export const startEpoch = (step: Step, epoch: number): void => {
  const { job } = step.settings
  if (epoch > job.epochs) {
    step.epochs.finished = true
    step.log("info", `training done: ${job.epochs} epoch(s)`)
    step.send(step.live(), new TrainingDone())
    // Joined ranks that never entered leave too, holding the final consensus like everyone else.
    for (const [rank, waiting] of step.growth.joining) if (waiting.attached) dismiss(step, rank)
    step.instructions.push(Instruction.Drained())
    return
  }
  const entering = enter(step, epoch)
  const ranks = step.live()
  const { throughput } = step.epochs
  // The weighted split needs a throughput for every rank that trains the epoch: one a newcomer enters is split equally.
  const weighted = (job.backend === "cpu_cadence" || job.backend === "cpu_async") && ranks.every((rank) => (throughput.get(rank) ?? 0) > 0)
  const resumed = step.settings.resume?.coverage
  // The epoch a mid-epoch checkpoint is inside of: only its rest is planned.
  const ledger = resumed !== undefined && resumed.epoch === epoch
    ? Ledger.planRest(epoch, job.datasetSize, ranks, resumed.done)
    : Ledger.plan(epoch, job.datasetSize, ranks, weighted ? new Map(ranks.map((rank) => [rank, throughput.get(rank)!])) : undefined)
  step.epochs.ledger = ledger
  step.epochs.startedAt = step.at
  step.epochs.lastProgressAt = HashMap.empty()
  step.epochs.doneBefore = HashMap.empty()
  step.epochs.lateStarters = HashSet.empty()
  step.epochs.metrics = new Map()
  step.epochs.sums = new Map()
  if (resumed !== undefined && resumed.epoch === epoch) {
    step.log("info", `epoch ${epoch} resumes at ${Ledger.doneCount(ledger).toLocaleString("en-US")} of ${job.datasetSize.toLocaleString("en-US")} samples done: the rest is split over ${ranks.length} rank(s)`)
  }
  for (const rank of ranks) {
    // Built unchecked, as the other hot messages are: the codec checks each as it encodes it, and the constructor's
    // check, once per rank per epoch, was a quarter of a 113 ms turn in a profile as 8,000 ranks started epoch 1.
    if (!entering.has(rank)) step.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }, true))
  }
  welcomeNewcomers(step, () => false)
  // A checkpoint taken as the epoch's last sample was done leaves nothing to train: the epoch ends at once.
  if (Ledger.isComplete(ledger)) endEpoch(step)
}

export const endEpoch = (step: Step): void => {
  const ended = step.epochs.ledger!
  const { lastProgressAt, startedAt, sums } = step.epochs
  step.epochs.ledger = undefined
  const throughput = new Map(step.epochs.throughput)
  for (const [rank, done] of ended.done) {
    const at = valueOf(lastProgressAt, rank)
    if (at !== undefined && at > startedAt && done > 0) throughput.set(rank, done / ((at - startedAt) / 1000))
  }
  step.epochs.throughput = throughput
  tellEpochDone(step, ended, step.at - startedAt, sums)
  step.send(step.live(), new EpochEnd({ epoch: ended.epoch }))
  openBallot(step, ended)
  startEpoch(step, ended.epoch + 1)
}
