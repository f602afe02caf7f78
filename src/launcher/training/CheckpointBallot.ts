/**
 * The vote on an epoch's consensus checkpoint: pure, like the coordinator that holds it.
 *
 * When an epoch ends, the ranks that trained it from its start and are alive at its end are its members
 * (`voters`). Each offers its state once (`CheckpointSave`), and the coordinator keeps the state's digest.
 * The consensus is the state that a strict majority of the members offered, digest for digest. Ranks that
 * trained only part of it (restarted into it, or a rescue) are alive members too, but their weights began
 * from an older state: their offers are checked against the consensus and never counted (`observers`).
 *
 * Why a majority of matching digests, not a designated writer that the others confirm: every rank already
 * offers its state, so nothing waits on one more round; no member's word weighs more than another's, so no
 * single member can plant a state in a world of two or more; and the vote goes on when any one member
 * dies. Ranks that hold one model between them (the Python client's, `cpu_sync`'s, and any job that
 * averages its state before saving) offer equal bytes, so an honest world agrees at once.
 *
 * A member that dies without offering leaves the vote (the majority is then of those left); one that
 * begins the next epoch or leaves without offering abstains, and still counts: a job that saves on one
 * rank of several never has a majority, and is told to save on every rank. Once every member has offered,
 * abstained or died without a majority, the vote is over and the epoch has no consensus (the one before
 * it stays).
 *
 * Everything here is pure; sets of ranks are persistent, so a vote of 8,000 ranks costs what each offer
 * touches.
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"

export interface Ballot {
  readonly epoch: number
  /** The epoch's members whose offers count: a member that dies without offering leaves. */
  readonly voters: HashSet.HashSet<number>
  /** Alive ranks that trained only part of the epoch: their offers are checked, not counted. */
  readonly observers: HashSet.HashSet<number>
  /** Voters that have neither offered nor abstained (begun the next epoch, or left, without offering). */
  readonly waiting: HashSet.HashSet<number>
  /** Each rank's offer: its state's digest. */
  readonly offers: HashMap.HashMap<number, string>
  /** Voters' offers by digest, in the order the digests first came. */
  readonly counts: ReadonlyMap<string, number>
  /** Each digest's state (its first copy), until the vote is decided. */
  readonly states: ReadonlyMap<string, string>
  /** The consensus' digest, once a majority offered it. */
  readonly decided: string | undefined
  /** Over without a majority: every voter offered, abstained or died. */
  readonly closed: boolean
}

/** The vote on `epoch`, just ended: `voters` trained all of it, `observers` part of it. */
export const open = (epoch: number, voters: Iterable<number>, observers: Iterable<number>): Ballot => {
  const counted = HashSet.fromIterable(voters)
  return {
    epoch,
    voters: counted,
    observers: HashSet.difference(HashSet.fromIterable(observers), counted),
    waiting: counted,
    offers: HashMap.empty(),
    counts: new Map(),
    states: new Map(),
    decided: undefined,
    closed: false
  }
}

/** How many matching offers decide the vote: more than half of the voters left. */
export const majorityOf = (ballot: Ballot): number => Math.floor(HashSet.size(ballot.voters) / 2) + 1

/** Whether the vote is over (decided, or closed without a majority). */
export const isOver = (ballot: Ballot): boolean => ballot.decided !== undefined || ballot.closed

export type Offered =
  /** Counted (or, from an observer, kept to be checked). */
  | { readonly _tag: "Taken"; readonly ballot: Ballot }
  /** The same state from the same rank again: nothing changes. */
  | { readonly _tag: "Repeated" }
  /** Not counted, and why: said once per rank. */
  | { readonly _tag: "Refused"; readonly why: string }

/**
 * `rank` offers `state` (of digest `digest`) as the consensus of `epoch`. Only the epoch just ended counts
 * (`ballot`, undefined when none has ended in this run), only from its members, and once per member.
 */
export const offer = (ballot: Ballot | undefined, rank: number, epoch: number, digest: string, state: string): Offered => {
  if (ballot === undefined) return refused("no epoch has ended yet: a checkpoint counts only for the epoch just ended, offered after it")
  if (epoch > ballot.epoch) return refused(`epoch ${epoch} has not ended: the epoch just ended is ${ballot.epoch}`)
  if (epoch < ballot.epoch) return refused(`epoch ${epoch}'s vote is over: the epoch just ended is ${ballot.epoch}`)
  const voter = HashSet.has(ballot.voters, rank)
  if (!voter && !HashSet.has(ballot.observers, rank)) return refused(`rank ${rank} is not a member of epoch ${epoch} (it did not train it, or died)`)
  const before = Option.getOrUndefined(HashMap.get(ballot.offers, rank))
  if (before !== undefined) {
    return before === digest ? { _tag: "Repeated" } : refused(`rank ${rank} already offered another state for epoch ${epoch}; a member offers once`)
  }
  if (ballot.closed) return refused(`epoch ${epoch}'s vote is over: every member had offered, begun the next epoch or left`)
  if (ballot.decided !== undefined && digest !== ballot.decided) return refused(disagreement(ballot))
  const offers = HashMap.set(ballot.offers, rank, digest)
  if (!voter) return { _tag: "Taken", ballot: { ...ballot, offers } }
  const counts = new Map(ballot.counts).set(digest, (ballot.counts.get(digest) ?? 0) + 1)
  const states = ballot.decided !== undefined || ballot.states.has(digest) ? ballot.states : new Map(ballot.states).set(digest, state)
  return { _tag: "Taken", ballot: { ...ballot, offers, counts, states, waiting: HashSet.remove(ballot.waiting, rank) } }
}

const refused = (why: string): Offered => ({ _tag: "Refused", why })

/** Why an offer that differs from the decided consensus is not it. */
export const disagreement = (ballot: Ballot): string =>
  `its state differs from epoch ${ballot.epoch}'s consensus, which ${ballot.counts.get(ballot.decided!) ?? 0} of its ${HashSet.size(ballot.voters)} member(s) offered`

/** A voter began the next epoch, or left, without offering: it is waited for no longer, and still counts. */
export const abstain = (ballot: Ballot, rank: number): Ballot =>
  HashSet.has(ballot.waiting, rank) ? { ...ballot, waiting: HashSet.remove(ballot.waiting, rank) } : ballot

/** A rank died: a voter that had not offered leaves the vote (its majority is of those left). */
export const died = (ballot: Ballot, rank: number): Ballot => {
  const offered = HashMap.has(ballot.offers, rank)
  if (HashSet.has(ballot.voters, rank) && !offered) {
    return { ...ballot, voters: HashSet.remove(ballot.voters, rank), waiting: HashSet.remove(ballot.waiting, rank) }
  }
  return ballot
}

export type Verdict =
  | { readonly _tag: "Open" }
  /** A majority offered `state`: the epoch's consensus. `dissenters`: ranks whose offers differ, ascending. */
  | { readonly _tag: "Decided"; readonly ballot: Ballot; readonly state: string; readonly dissenters: ReadonlyArray<number> }
  /** Every voter offered, abstained or died, and no state has a majority. */
  | { readonly _tag: "Closed"; readonly ballot: Ballot }

/** Whether the vote is decided or over, now. A vote already over stays as it is (`Open`: nothing new). */
export const verdict = (ballot: Ballot): Verdict => {
  if (isOver(ballot)) return { _tag: "Open" }
  const needed = majorityOf(ballot)
  for (const [digest, count] of ballot.counts) {
    if (count < needed) continue
    const dissenters = [...ballot.offers].flatMap(([rank, offered]) => (offered === digest ? [] : [rank])).sort((a, b) => a - b)
    return { _tag: "Decided", ballot: { ...ballot, decided: digest, states: new Map() }, state: ballot.states.get(digest)!, dissenters }
  }
  if (HashSet.size(ballot.waiting) > 0) return { _tag: "Open" }
  return { _tag: "Closed", ballot: { ...ballot, closed: true, states: new Map() } }
}

/**
 * What the voters offered, for the line that says a vote ended without a majority: "ranks 0, 2 offered
 * 3f2a9c01d4e7; rank 1 offered 77b0e1c2a9f3; rank 3 none".
 */
export const describeOffers = (ballot: Ballot): string => {
  const byDigest = new Map<string, Array<number>>()
  const none: Array<number> = []
  for (const rank of [...ballot.voters].sort((a, b) => a - b)) {
    const digest = Option.getOrUndefined(HashMap.get(ballot.offers, rank))
    if (digest === undefined) none.push(rank)
    else byDigest.set(digest, [...(byDigest.get(digest) ?? []), rank])
  }
  const ranks = (list: ReadonlyArray<number>) => `${list.length === 1 ? "rank" : "ranks"} ${list.join(", ")}`
  return [
    ...[...byDigest].map(([digest, list]) => `${ranks(list)} offered ${digest.slice(0, 12)}`),
    ...(none.length === 0 ? [] : [`${ranks(none)} none`])
  ].join("; ")
}

/** Voters that offered nothing (abstained). */
export const abstainers = (ballot: Ballot): number => HashSet.size(ballot.voters) - [...ballot.voters].filter((rank) => HashMap.has(ballot.offers, rank)).length
