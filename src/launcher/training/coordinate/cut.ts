/**
 * The mid-epoch cut, and the stops that ask for one. A `cpu_sync` run stopped mid-epoch (`StopRun`, or
 * `Interrupted`) keeps what was done: the survivors are asked (`OfferCut`) for their state at their next step
 * boundary, with the samples done and the rounds they took part in (`CutOffer`); once each has answered or gone,
 * the state of the one with the most rounds is written with the epoch's coverage (`settleCut`), and `--resume`
 * plans only the rest of that epoch (`Ledger.planRest`). Owns the consensus's `cut`.
 *
 * Why that state matches that coverage: a round waits for every rank that is not waiting for work, so while
 * every survivor is steady (never waited), every round of the epoch had every survivor still training in it,
 * and the last one to stop took part in all of them; each rank stops at a boundary, where its reported samples
 * are exactly those it contributed. When that cannot be shown (a survivor waited for work, began the epoch late,
 * left without an answer, or the job has no `ctx.checkpoint.provide`) the stop keeps the last epoch's consensus
 * and says why. `cpu_cadence` and `cpu_async` ranks step alone between syncs, so no rank holds the others' steps
 * at an arbitrary boundary, and `nccl` rounds are the job's own: those stop at the epoch boundary. A dead rank's
 * last batch may be in the state without having been reported: the resumed run does it again, the same
 * one-batch tolerance as a death's redistribution.
 */
import * as HashSet from "effect/HashSet"
import { type CutOffer, OfferCut } from "../../../wire/messages/CoordinatorMessages.ts"
import type { SaveReason } from "../CheckpointFile.ts"
import * as Ledger from "../EpochLedger.ts"
import { Instruction } from "./events.ts"
import { saveAndStop, saveLatest } from "./saving.ts"
import type { Cut } from "./state.ts"
import { ascending, type Step, valueOf } from "./step.ts"

/**
 * The failure policy's limit is crossed (the kernel's `decide` judged it, not this policy): a cut when one can
 * be had, else the latest consensus saved and every survivor stopped, as when every rank is lost.
 */
export const stopRun = (step: Step, why: string): void => {
  // Once training is done the ranks leave on their own: there is nothing left to save them from.
  if (step.epochs.finished || step.deaths.stopping) return
  if (!beginCut(step, why, "max_failure_exceeded")) saveAndStop(step, why, "max_failure_exceeded")
}

/**
 * Asked to stop from outside: a cut when one can be had; otherwise nothing changes here (the supervisor stops
 * the ranks, and the consensus already on disk is what is kept).
 */
export const interrupted = (step: Step, why: string): void => {
  if (step.epochs.finished || step.deaths.stopping) return
  beginCut(step, why, "interrupted")
}

/** The run is ending: a cut still waiting for answers settles with those it has. */
export const ending = (step: Step): void => {
  if (step.consensus.cut !== undefined) settleCut(step)
}

/** Ask the survivors for their state at their next step boundary; false when no cut can be had (see the header). */
const beginCut = (step: Step, why: string, reason: SaveReason): boolean => {
  const { ledger } = step.epochs
  if (step.settings.job.backend !== "cpu_sync" || ledger === undefined) return false
  const { attached } = step.members
  const asked = step.live().filter((rank) => HashSet.has(attached, rank) && ledger.assigned.has(rank) && !HashSet.has(step.liveness.exiting, rank))
  if (asked.length === 0) return false
  step.deaths.stopping = true
  step.consensus.cut = { why, reason, epoch: ledger.epoch, since: step.at, asked, waiting: HashSet.fromIterable(asked), offers: new Map() }
  step.log(
    "info",
    `${why}: asking rank(s) ${asked.join(", ")} for their state at their next step, to keep epoch ${ledger.epoch}'s ` +
      `${Ledger.doneCount(ledger).toLocaleString("en-US")} sample(s) done`
  )
  step.send(asked, new OfferCut({ epoch: ledger.epoch }))
  return true
}

/** A survivor's state and work at its boundary. Offers no cut asked for (or of another epoch) are not kept. */
export const cutOffered = (step: Step, rank: number, offer: CutOffer): void => {
  const { cut } = step.consensus
  if (cut === undefined || offer.epoch !== cut.epoch || !HashSet.has(cut.waiting, rank)) return
  step.consensus.cut = { ...cut, offers: new Map(cut.offers).set(rank, offer) }
  answered(step, rank)
}

/** A survivor asked for its cut answered, exited or died: once none is left to wait for, the cut settles. */
export const answered = (step: Step, rank: number): void => {
  const { cut } = step.consensus
  if (cut === undefined || !HashSet.has(cut.waiting, rank)) return
  const waiting = HashSet.remove(cut.waiting, rank)
  step.consensus.cut = { ...cut, waiting }
  if (HashSet.size(waiting) === 0) settleCut(step)
}

/** Write the most advanced survivor's state with the epoch's coverage, or, when they do not agree with it, the last epoch's consensus. */
export const settleCut = (step: Step): void => {
  const cut = step.consensus.cut!
  step.consensus.cut = undefined
  const ledger = step.epochs.ledger!
  const problem = cutProblem(step, cut, ledger)
  if (problem !== undefined) {
    const { latest } = step.consensus
    step.log(
      "warning",
      `epoch ${cut.epoch}'s progress cannot be kept (${problem}): ` +
        (latest === undefined ? "--resume would start from the beginning" : `the checkpoint keeps the consensus of epoch ${latest.epoch}`)
    )
    return saveLatest(step, cut.why, cut.reason)
  }
  // The most rounds: the last survivor to stop, whose state holds every round of the epoch (lowest rank on a tie).
  const [, chosen] = [...cut.offers].sort(([a, x], [b, y]) => y.rounds - x.rounds || a - b)[0]!
  step.instructions.push(Instruction.WriteCheckpoint({
    epoch: cut.epoch - 1,
    state: chosen.state!,
    reason: cut.reason,
    world: HashSet.size(step.members.everyone),
    dead: ascending(step.deaths.dead),
    coverage: { epoch: cut.epoch, datasetSize: ledger.datasetSize, done: Ledger.covered(ledger) },
    at: step.at
  }))
  step.consensus.stopAwaitingWrite = cut.why
}

/** Why the survivors' answers do not show a state that holds exactly the epoch's done samples, if they do not. */
const cutProblem = (step: Step, cut: Cut, ledger: Ledger.EpochLedger): string | undefined => {
  if (ledger.epoch !== cut.epoch) return `epoch ${cut.epoch} ended meanwhile`
  for (const rank of cut.asked) {
    const offer = cut.offers.get(rank)
    if (offer === undefined) return `rank ${rank} stopped without offering its state`
    if (offer.state === undefined) return `rank ${rank}'s job offers no state between steps (ctx.checkpoint.provide)`
    if (HashSet.has(step.epochs.lateStarters, rank)) return `rank ${rank} began the epoch part-way, from an older state`
    if (!offer.steady) return `rank ${rank} waited for work, so its weights miss the others' last rounds`
    const reported = (ledger.done.get(rank) ?? 0) - (valueOf(step.epochs.doneBefore, rank) ?? 0)
    if (offer.done !== reported) return `rank ${rank} offered a state after ${offer.done} sample(s), but reported ${reported}`
  }
  return undefined
}
