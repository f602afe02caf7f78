/**
 * The process groups of ranks that keep their own (the Python client's torch.distributed groups): which
 * generation is current and who is in it. Pure: the coordinator owns the state and asks `nextGroup` after
 * every step whether its members changed.
 *
 * A group is every rank that is in the run, attached with a store, and not leaving. Its store is its lowest
 * member's: that rank hosts the rendezvous, and since ranks only leave a group by dying or ending, the lowest
 * survivor is always one that is still there. Each change is a new generation, numbered from 1, so a survivor
 * can tell a group it has formed from one it has yet to form, and the store's keys of one generation never
 * meet another's.
 */
import type { GroupStore } from "../../wire/CoordinatorMessages.ts"

export interface ProcessGroups {
  /** The latest generation announced (0: none yet). */
  readonly generation: number
  /** Its members, ascending. */
  readonly members: ReadonlyArray<number>
  /** Where each rank that brought one hosts its store, by global rank. */
  readonly stores: ReadonlyMap<number, GroupStore>
}

export const noGroups: ProcessGroups = { generation: 0, members: [], stores: new Map() }

/** A group to announce: its generation, members and store. */
export interface NextGroup {
  readonly generation: number
  readonly members: ReadonlyArray<number>
  readonly store: GroupStore
}

const sameMembers = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): boolean => a.length === b.length && a.every((rank, i) => rank === b[i])

/**
 * The group that `candidates` (ascending: the ranks in the run, attached, not leaving) make, when it differs
 * from the one announced; undefined when nothing changed, or when no candidate brought a store (a job whose
 * ranks keep no groups of their own).
 */
export const nextGroup = (groups: ProcessGroups, candidates: ReadonlyArray<number>): NextGroup | undefined => {
  const members = candidates.filter((rank) => groups.stores.has(rank))
  if (members.length === 0 || sameMembers(members, groups.members)) return undefined
  return { generation: groups.generation + 1, members, store: groups.stores.get(members[0]!)! }
}

/** The state once `group` is announced. */
export const announced = (groups: ProcessGroups, group: NextGroup): ProcessGroups => ({ ...groups, generation: group.generation, members: group.members })

/** The state once `rank` attached with `store` (a restarted rank brings a new one). */
export const withStore = (groups: ProcessGroups, rank: number, store: GroupStore): ProcessGroups => ({
  ...groups,
  stores: new Map(groups.stores).set(rank, store)
})
