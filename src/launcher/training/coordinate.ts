/**
 * The coordinator's policy, as one pure function: epochs, liveness and elastic
 * membership for the ranks of an `entry:` job.
 *
 * `coordinate(state, event)` returns the instructions the Coordinator actor
 * must carry out, in order, and the next state. Every event carries the time
 * it was heard (`at`); nothing here reads a clock, writes a file or sends a
 * message, so the same events always give the same instructions. That is what
 * lets the table and property tests drive it event by event.
 *
 * This file routes each event to the sub-reducers in ./coordinate/, which
 * share one step's scratch (step.ts) and each own a slice of the state
 * (state.ts); their headers say why they do what they do:
 * - epochs.ts: each epoch split over the live ranks, its progress, its end;
 *   telemetry.ts: what the journal is told of it.
 * - liveness.ts: beats both ways, silence judged on every `Tick`.
 * - deaths.ts: the death chain (a dead rank's work to the survivors, the stop
 *   when none is left), and ranks that leave with work.
 * - consensus.ts: the vote on each ended epoch's checkpoint; saving.ts: its
 *   write to `job.checkpoint`, and the stop that says whether it was saved.
 * - cut.ts: a `cpu_sync` run stopped mid-epoch keeps what was done.
 * - growth.ts, joiners.ts, welcome.ts: ranks that join the formed cohort
 *   enter at the next epoch boundary and start from the consensus.
 * - groups.ts: the ranks' own process groups, announced when who is in changes.
 *
 * The sub-reducers call one another in one direction only (the ones lower in
 * the chain never import the ones above them): events, state, step and
 * telemetry; then welcome, saving and groups; consensus, cut and growth;
 * epochs; deaths and joiners; liveness; and this façade last.
 */
import { CheckpointSaved, type RankReport } from "../../wire/messages/CoordinatorMessages.ts"
import { checkpointOffered } from "./coordinate/consensus.ts"
import { cutOffered, ending, interrupted, stopRun } from "./coordinate/cut.ts"
import { exitedCleanly, exiting, markDead, revived, stopOrdered } from "./coordinate/deaths.ts"
import { attached, progressed, unfinishedTraining } from "./coordinate/epochs.ts"
import { CoordinatorEvent, Instruction } from "./coordinate/events.ts"
import { announceGroup, attachedWithStore } from "./coordinate/groups.ts"
import { joined } from "./coordinate/growth.ts"
import { joinerReported } from "./coordinate/joiners.ts"
import { beats, cohortFormed, tick } from "./coordinate/liveness.ts"
import { checkpointWritten } from "./coordinate/saving.ts"
import { type CoordinatorState, initialState } from "./coordinate/state.ts"
import { Step } from "./coordinate/step.ts"
import { PROGRESS_EVERY_MS } from "./coordinate/telemetry.ts"

export type {
  Consensus,
  CoordinatorSettings,
  CoordinatorState,
  Cut,
  Deaths,
  Epochs,
  Growth,
  Joiner,
  Liveness,
  Members,
  MetricSum,
  Newcomer,
  ProgressTold,
  Saved
} from "./coordinate/state.ts"
export { CoordinatorEvent, initialState, Instruction, PROGRESS_EVERY_MS, unfinishedTraining }

/** One step of coordination. */
export const coordinate = (
  state: CoordinatorState,
  event: CoordinatorEvent
): readonly [ReadonlyArray<Instruction>, CoordinatorState] => {
  const step = new Step(state, event.at)
  CoordinatorEvent.$match(event, {
    Reported: ({ rank, report }) => reported(step, rank, report),
    Beats: ({ ranks }) => beats(step, ranks),
    CohortFormed: () => cohortFormed(step),
    RanksDead: ({ cause, ranks }) => markDead(step, ranks, cause),
    StopOrdered: ({ ranks }) => stopOrdered(step, ranks),
    Joined: ({ ranks }) => joined(step, ranks),
    ExitedCleanly: ({ rank }) => exitedCleanly(step, rank),
    Tick: () => tick(step),
    StopRun: ({ why }) => stopRun(step, why),
    Interrupted: ({ why }) => interrupted(step, why),
    CheckpointWritten: ({ coverage, epoch, failure, reason }) => checkpointWritten(step, epoch, reason, coverage, failure),
    Ending: () => ending(step)
  })
  announceGroup(step)
  return [step.instructions, step.result()]
}

/** A rank's report, to the sub-reducer of what it says: a joiner's to the joiners', a member's by its kind. */
const reported = (step: Step, rank: number, report: RankReport): void => {
  if (report._tag === "Attach") {
    revived(step, rank)
    attachedWithStore(step, rank, report)
  }
  const waiting = step.growth.joining.get(rank)
  if (waiting !== undefined) return joinerReported(step, rank, waiting, report)
  if (!step.isAlive(rank)) return
  step.heard(rank)
  switch (report._tag) {
    case "Attach":
      return attached(step, rank)
    case "Progress":
      return progressed(step, rank, report)
    case "CheckpointSave":
      checkpointOffered(step, rank, report.epoch, report.state)
      // Answered whatever became of it: the rank's save returns (a refusal is the operator's to read, not its).
      return step.send([rank], new CheckpointSaved({ epoch: report.epoch }))
    case "CutOffer":
      return cutOffered(step, rank, report)
    case "Exiting":
      return exiting(step, rank)
    case "Heartbeat":
      return
  }
}
