/**
 * The process groups of ranks that keep their own (the Python client's torch.distributed groups): which
 * generation is current and who is in it. Pure: the coordinator owns the state and asks `nextGroup` after
 * every step whether its members changed.
 *
 * A group is every rank that is in the run, attached saying it keeps groups, and not leaving. Each change is a
 * new generation, numbered from 1, so a survivor can tell a group it has formed from one it has yet to form,
 * and the rendezvous store's keys of one generation never meet another's (GroupRendezvous serves only the
 * generation announced last, and only to its members).
 */

export interface ProcessGroups {
  /** The latest generation announced (0: none yet). */
  readonly generation: number
  /** Its members, ascending. */
  readonly members: ReadonlyArray<number>
  /** The ranks that attached saying they keep process groups of their own, by global rank. */
  readonly keepers: ReadonlySet<number>
}

export const noGroups: ProcessGroups = { generation: 0, members: [], keepers: new Set() }

/** A group to announce: its generation and members. */
export interface NextGroup {
  readonly generation: number
  readonly members: ReadonlyArray<number>
}

const sameMembers = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): boolean => a.length === b.length && a.every((rank, i) => rank === b[i])

/**
 * The group that `candidates` (ascending: the ranks in the run, attached, not leaving) make, when it differs
 * from the one announced; undefined when nothing changed, or when no candidate keeps groups (a job whose ranks
 * keep no groups of their own).
 */
export const nextGroup = (groups: ProcessGroups, candidates: ReadonlyArray<number>): NextGroup | undefined => {
  const members = candidates.filter((rank) => groups.keepers.has(rank))
  if (members.length === 0 || sameMembers(members, groups.members)) return undefined
  return { generation: groups.generation + 1, members }
}

/** The state once `group` is announced. */
export const announced = (groups: ProcessGroups, group: NextGroup): ProcessGroups => ({ ...groups, generation: group.generation, members: group.members })

/** The state once `rank` attached saying it keeps groups (a restarted rank does so under its new number). */
export const keeping = (groups: ProcessGroups, rank: number): ProcessGroups =>
  groups.keepers.has(rank) ? groups : { ...groups, keepers: new Set(groups.keepers).add(rank) }
