/**
 * When a death's survivors train again: their next counted step, the first
 * Progress report of a live rank, heard after the death, that counts more
 * samples of the epoch under way than the coordinator had of it. That is the
 * death's recovery in the figures (RecoveryFigures), not the moment its
 * samples were handed to the survivors (`work_moved`): ranks that keep their
 * own process groups (the Python client's torch.distributed) sit idle between
 * the two while they tear their group down and form the next one, and a
 * figure taken at the hand-over said "recovered in 5–7 ms" of survivors that
 * had not stepped yet. A step the Python client does not count (a member died
 * during its all-reduce) sends no report, so it is not taken for one.
 *
 * A report sent before the death but heard after it would count too: where
 * a step needs every member (a synchronous all-reduce), only a step that
 * ended as the rank died can be such a one.
 *
 * Pure: the Coordinator actor asks after each step of `coordinate`, with the
 * state before the step, the event and the instructions the step gave, and
 * journals what comes back (`survivors_stepped`).
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import type { CoordinatorEvent, CoordinatorState, Instruction } from "./coordinate.ts"
import type { RunEvent } from "../view/RunView.ts"

/** Ranks that died mid-epoch, in the order they died, whose survivors have not counted a step since. */
export type Awaiting = ReadonlyArray<number>

export const none: Awaiting = []

export type SurvivorsStepped = Extract<RunEvent, { readonly event: "survivors_stepped" }>

/** The live rank and epoch of `event` when it is a report that counts more samples of the epoch under way than `before` had of it. */
const countedStep = (event: CoordinatorEvent, before: CoordinatorState): { readonly rank: number; readonly epoch: number } | undefined => {
  if (event._tag !== "Reported" || event.report._tag !== "Progress") return undefined
  const { rank, report } = event
  const { ledger } = before.epochs
  if (ledger === undefined || ledger.epoch !== report.epoch || !HashSet.has(before.members.alive, rank)) return undefined
  // Counted as the coordinator counts it: a rank back mid-epoch reports over what was left of its plan.
  const offset = Option.getOrElse(HashMap.get(before.epochs.doneBefore, rank), () => 0)
  return report.done + offset > (ledger.done.get(rank) ?? 0) ? { rank, epoch: report.epoch } : undefined
}

/**
 * After one step of `coordinate`: the `survivors_stepped` event to journal, if the step's event was the
 * survivors' next counted step after deaths awaiting one, and the deaths still awaiting one (with those the
 * step brought in: each `Redistributed`, a death while an epoch was under way).
 */
export const observe = (
  awaiting: Awaiting,
  event: CoordinatorEvent,
  before: CoordinatorState,
  instructions: ReadonlyArray<Instruction>
): readonly [SurvivorsStepped | undefined, Awaiting] => {
  const step = awaiting.length === 0 ? undefined : countedStep(event, before)
  const stepped: SurvivorsStepped | undefined = step === undefined ? undefined : { event: "survivors_stepped", at: event.at, ranks: awaiting, ...step }
  const died = instructions.flatMap((instruction) => (instruction._tag === "Redistributed" ? [instruction.dead] : []))
  const left = stepped === undefined ? awaiting : none
  return [stepped, died.length === 0 ? left : [...left, ...died]]
}
