/**
 * Saving the consensus and stopping the run. The consensus is written atomically to `job.checkpoint`, and a
 * `--resume` run starts after its epoch. The write is the actor's (`WriteCheckpoint`); what became of it comes
 * back as `CheckpointWritten`, because a stop's `Stop` says whether it was saved, so it waits for the write.
 * A checkpoint written goes to the journal (`checkpoint`, for `--events`). Owns `deaths.stopping` and the
 * consensus's `written` and `stopAwaitingWrite`.
 */
import * as HashSet from "effect/HashSet"
import { Stop } from "../../../wire/messages/CoordinatorMessages.ts"
import { type Coverage, describeCoverage, type SaveReason } from "../CheckpointFile.ts"
import { Instruction } from "./events.ts"
import { ascending, type Step } from "./step.ts"

/** Ask for the consensus to be written; false when there is none to write. */
export const writeCheckpoint = (step: Step, reason: SaveReason): boolean => {
  const { latest } = step.consensus
  if (latest === undefined) return false
  step.instructions.push(Instruction.WriteCheckpoint({
    epoch: latest.epoch,
    state: latest.state,
    reason,
    world: HashSet.size(step.members.everyone),
    dead: ascending(step.deaths.dead),
    // --resume's mid-epoch state, not yet replaced by a newer consensus, still holds exactly its coverage.
    ...(latest.coverage === undefined ? {} : { coverage: latest.coverage }),
    at: step.at
  }))
  return true
}

export const checkpointWritten = (step: Step, epoch: number, reason: SaveReason, coverage: Coverage | undefined, failure: string | undefined): void => {
  if (failure === undefined) {
    step.consensus.written = epoch
    step.instructions.push(Instruction.Journal({ event: { event: "checkpoint", at: step.at, epoch, path: step.settings.checkpointPath, reason } }))
  } else step.log("error", failure)
  // The actor answers a write before anything else runs: a stop waiting now waits for this write.
  const why = step.consensus.stopAwaitingWrite
  if (why === undefined) return
  step.consensus.stopAwaitingWrite = undefined
  announceStop(step, why, failure === undefined ? { epoch, coverage } : undefined, failure === undefined ? undefined : epoch)
}

/** The end of the death chain: the consensus is saved (when there is one) and every survivor is told to stop. */
export const saveAndStop = (step: Step, why: string, reason: SaveReason): void => {
  if (step.deaths.stopping) return
  step.deaths.stopping = true
  saveLatest(step, why, reason)
}

/** The latest consensus saved (when there is one), then the stop told. */
export const saveLatest = (step: Step, why: string, reason: SaveReason): void => {
  if (writeCheckpoint(step, reason)) step.consensus.stopAwaitingWrite = why
  else announceStop(step, why, undefined)
}

/**
 * `saved`: the checkpoint just written for this stop, if one was (mid-epoch: with its coverage); `unwritten`:
 * the epoch of the one whose write failed (the error is said just before), which is not "none to write".
 */
const announceStop = (
  step: Step,
  why: string,
  saved: { readonly epoch: number; readonly coverage: Coverage | undefined } | undefined,
  unwritten?: number
): void => {
  const { checkpointPath } = step.settings
  step.log(
    "error",
    unwritten !== undefined
      ? `${why}: the consensus checkpoint of epoch ${unwritten} could not be written to ${checkpointPath} (the error above): nothing new to resume from`
      : saved === undefined
      ? `${why}: no consensus checkpoint to write (no rank had saved one)`
      : saved.coverage === undefined
      ? `${why}: consensus checkpoint of epoch ${saved.epoch} written to ${checkpointPath}; resume with --resume`
      : `${why}: consensus checkpoint written to ${checkpointPath}, resuming ${describeCoverage(saved.coverage)}; resume with --resume`
  )
  step.send(step.live(), new Stop({ reason: why, saved: saved !== undefined }))
}
