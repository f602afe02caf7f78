/**
 * A joined rank's reports before it enters (growth.ts): its beats keep it alive, and its Attach is held for the
 * epoch boundary, unless there is no boundary to wait for (training over or stopping, or every member gone).
 */
import * as HashSet from "effect/HashSet"
import type { RankReport } from "../../../wire/messages/CoordinatorMessages.ts"
import { startEpoch } from "./epochs.ts"
import { dismiss, rescue } from "./growth.ts"
import { firstEpochOf, type Joiner } from "./state.ts"
import type { Step } from "./step.ts"

/**
 * A joined rank before its boundary: its Attach is held (no plan, no welcome) until the epoch it enters at; if
 * training is over or stopping it is told so at once. Its beats keep it alive meanwhile.
 */
export const joinerReported = (step: Step, rank: number, waiting: Joiner, report: RankReport): void => {
  step.heard(rank)
  if (report._tag !== "Attach") return
  step.growth.joining = new Map(step.growth.joining).set(rank, { ...waiting, attached: true })
  if (step.epochs.finished || step.deaths.stopping) return dismiss(step, rank)
  // Before the first epoch has started, the first epoch is the next boundary.
  if (step.epochs.ledger === undefined && step.settings.job.datasetSize > 0 && step.everyLiveAttached() && HashSet.size(step.members.alive) > 0) {
    startEpoch(step, firstEpochOf(step.settings))
  }
  // Every member died mid-epoch: the joiners take over rather than wait for a boundary no one will reach.
  if (HashSet.size(step.members.alive) === 0) rescue(step, "no member was left", false)
}
