/**
 * From two generations of the NCCL membership to the shrink that turns the
 * first's communicator into the second's: the NCCL ranks (positions in the
 * parent's members) to exclude, or why this rank must not shrink. Pure: the
 * launcher's word (`shrinkOf`) is checked against what this rank saw of the
 * parent, since a shrink with a wrong list would hang or mis-rank the world.
 */
import type { NcclMembership } from "./RankContext.ts"

export type ShrinkPlan =
  | { readonly _tag: "Shrink"; readonly excluded: ReadonlyArray<number> }
  | { readonly _tag: "Refused"; readonly reason: string }

const refused = (reason: string): ShrinkPlan => ({ _tag: "Refused", reason })

export const shrinkPlan = (parent: NcclMembership, next: NcclMembership): ShrinkPlan => {
  const shrink = next.shrinkOf
  if (shrink === undefined) return refused(`generation ${next.generation} is not a shrink of an earlier one`)
  if (shrink.generation !== parent.generation) {
    return refused(`generation ${next.generation} shrinks generation ${shrink.generation}, this rank holds generation ${parent.generation}'s communicator`)
  }
  if (shrink.left.length === 0) return refused(`generation ${next.generation} names nobody who left generation ${parent.generation}`)
  const strangers = shrink.left.filter((rank) => !parent.members.includes(rank))
  if (strangers.length > 0) {
    return refused(`rank(s) ${strangers.join(", ")} left generation ${parent.generation} without being members (${parent.members.join(",")})`)
  }
  if (new Set(shrink.left).size !== shrink.left.length) return refused(`generation ${next.generation} names a rank that left twice (${shrink.left.join(",")})`)
  const survivors = parent.members.filter((rank) => !shrink.left.includes(rank))
  if (survivors.join(",") !== next.members.join(",")) {
    return refused(
      `generation ${next.generation}'s members (${next.members.join(",")}) are not generation ${parent.generation}'s (${parent.members.join(",")}) less those who left (${shrink.left.join(",")})`
    )
  }
  return { _tag: "Shrink", excluded: shrink.left.map((rank) => parent.members.indexOf(rank)).sort((a, b) => a - b) }
}
