/**
 * The ranks' own process groups (`ProcessGroups`): which ranks keep one (they attached with a store), and the
 * generation announced to its members whenever who is in changes. Owns the `groups` slice.
 */
import * as HashSet from "effect/HashSet"
import { Group, type RankReport } from "../../../wire/messages/CoordinatorMessages.ts"
import * as Groups from "../ProcessGroups.ts"
import type { Step } from "./step.ts"

/** A rank of the run attached with a store: kept whatever becomes of the attach, since a joiner is in its group once it enters. */
export const attachedWithStore = (step: Step, rank: number, report: Extract<RankReport, { readonly _tag: "Attach" }>): void => {
  if (report.groups === true && HashSet.has(step.members.everyone, rank)) step.groups = Groups.keeping(step.groups, rank)
}

/**
 * After every step: when the members of the ranks' process group changed (a death, a restarted rank back, newcomers
 * entering), the new generation goes to its members. Not before every live rank has attached (the first group is
 * the formed cohort's), and not once the run is ending: ranks that leave then form nothing.
 */
export const announceGroup = (step: Step): void => {
  if (step.groups.keepers.size === 0 || step.deaths.stopping || step.epochs.finished) return
  // Only who is in, attached, leaving or keeps groups decides the group: a step that changed none of them (a beat,
  // a progress report: nearly every step) changed no group. The collections are replaced, never written through.
  const { before } = step
  const unchanged = before.members.alive === step.members.alive && before.members.attached === step.members.attached &&
    before.liveness.exiting === step.liveness.exiting && before.groups === step.groups
  if (unchanged || !step.everyLiveAttached()) return
  const { exiting } = step.liveness
  const group = Groups.nextGroup(step.groups, step.live().filter((rank) => !HashSet.has(exiting, rank)))
  if (group === undefined) return
  step.groups = Groups.announced(step.groups, group)
  step.send(group.members, new Group({ generation: group.generation, members: group.members }))
}
