/**
 * The welcome of ranks that entered the cohort (`growth.unwelcomed`): each newcomer starts from the consensus
 * of the epoch just before its first, so its welcome waits for that epoch's vote to be over (at most a heartbeat
 * timeout), and it never starts from older weights than the others when the members agree on newer ones.
 */
import * as HashMap from "effect/HashMap"
import { EpochStart, Stop, TrainingDone, Welcome } from "../../../wire/messages/CoordinatorMessages.ts"
import * as Ballots from "../CheckpointBallot.ts"
import { firstEpochOf, type Newcomer } from "./state.ts"
import type { Step } from "./step.ts"

/**
 * Newcomers start from the consensus of the epoch before theirs. A job that saves checkpoints offers it
 * after that epoch's last collective, a moment after the boundary: the welcome waits for the vote. It
 * stops waiting once the vote is over (decided, or every member has offered, begun the newcomer's epoch,
 * left or died: a rank offers its checkpoint before it begins the next epoch), or when `stopWaiting` says
 * so (past a heartbeat timeout); it then goes with the latest consensus there is.
 */
export const welcomeNewcomers = (step: Step, stopWaiting: (newcomer: Newcomer) => boolean): void => {
  const waiting = step.growth.unwelcomed
  if (waiting.size === 0) return
  const firstEpoch = firstEpochOf(step.settings)
  const left = new Map(waiting)
  for (const [rank, newcomer] of waiting) {
    const { epoch } = newcomer
    const { latest } = step.consensus
    // At the first epoch every rank starts from the same place (--resume's checkpoint, or nothing).
    const current = epoch <= firstEpoch || (latest !== undefined && latest.epoch >= epoch - 1)
    const over = voteOver(step, epoch - 1)
    if (!current && !over && !stopWaiting(newcomer)) continue
    left.delete(rank)
    if (!step.isAlive(rank)) continue
    if (!current) {
      const { ballot } = step.consensus
      const disagreed = over && ballot?.epoch === epoch - 1 && HashMap.size(ballot.offers) > 0
      step.log(
        "warning",
        disagreed
          ? `rank ${rank} starts epoch ${epoch} from ${latest === undefined ? "its own initial state" : `the consensus of epoch ${latest.epoch}`}: epoch ${epoch - 1}'s members agreed on no checkpoint`
          : latest === undefined
          ? `rank ${rank} starts epoch ${epoch} from its own initial state: the job has offered no checkpoint (ctx.checkpoint.save) to start it from`
          : `rank ${rank} starts epoch ${epoch} from the consensus of epoch ${latest.epoch}: none newer came within ${step.at - newcomer.at} ms`
      )
    }
    const { ledger } = step.epochs
    // An epoch that ended meanwhile (the newcomer's share was empty) is not its to start: it starts at the current one.
    const first = ledger?.epoch ?? step.settings.job.epochs + 1
    step.send([rank], new Welcome({ firstEpoch: first, ...(latest === undefined ? {} : { checkpoint: latest.state }) }))
    if (ledger !== undefined && ledger.epoch === epoch) step.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }))
    else if (step.deaths.stopping) step.send([rank], new Stop({ reason: "the run is stopping", saved: false }))
    else if (step.epochs.finished) step.send([rank], new TrainingDone())
  }
  step.growth.unwelcomed = left
}

/** Whether the vote on `epoch`'s consensus is over (or there is none to wait for): a newcomer waits for no more. */
const voteOver = (step: Step, epoch: number): boolean => {
  const { ballot } = step.consensus
  return ballot === undefined || ballot.epoch !== epoch || Ballots.isOver(ballot)
}
