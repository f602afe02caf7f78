/**
 * The relay's fold barrier: which of the host's ranks a reduction round
 * waits for. A round is ready when every live rank that is not waiting for
 * work has handed in a contribution. A rank that dies, or says it is idle
 * (its epoch's work is used up), leaves the barrier at once; its next
 * contribution brings it back.
 *
 * A rank that joined the running cohort (a restarted rank under a new number)
 * takes part only in rounds of the epoch it entered at and later (`enter`):
 * until then it is connected but waits for its boundary. A round belongs to
 * the earliest epoch any contribution names, so a newcomer already at its
 * first step waits while the others finish the epoch before.
 *
 * Pure bookkeeping: the relay owns the sockets, segments and arithmetic.
 */
export interface Contribution<S> {
  readonly rank: number
  readonly op: "sum" | "avg" | "sync"
  readonly bytes: number
  readonly weight: number
  /** The epoch the rank's round belongs to. */
  readonly epoch: number
  /** Where the rank's tensor is (its mapped segment). */
  readonly source: S
}

interface Member<S> {
  idle: boolean
  pending: Contribution<S> | undefined
  /** The first epoch whose rounds wait for it (Infinity: joined, not yet entered). */
  from: number
}

export class FoldBarrier<S> {
  private readonly members = new Map<number, Member<S>>()
  /** A round handed out and not yet finished: no other starts meanwhile. */
  private inFlight = false

  constructor(ranks: Iterable<number>) {
    for (const rank of ranks) this.members.set(rank, { idle: false, pending: undefined, from: 0 })
  }

  /** Ranks still in the barrier (alive), ascending. */
  get live(): Array<number> {
    return [...this.members.keys()].sort((a, b) => a - b)
  }

  /** True when every live rank that epoch `epoch`'s rounds wait for is waiting for work (or none is left). */
  allIdle(epoch: number): boolean {
    return [...this.members.values()].every((member) => member.idle || member.from > epoch)
  }

  /**
   * A rank (re)joins. A restarted rank under its own number is a member again, active; a rank new to
   * this host (`entered: false`) waits for its `enter`.
   */
  join(rank: number, entered = true): void {
    if (!this.members.has(rank)) this.members.set(rank, { idle: false, pending: undefined, from: entered ? 0 : Number.POSITIVE_INFINITY })
  }

  /** Rounds of `epoch` and later wait for `rank` (a member that joined unentered). */
  enter(rank: number, epoch: number): void {
    const member = this.members.get(rank)
    if (member !== undefined) member.from = Math.min(member.from, epoch)
  }

  contribute(contribution: Contribution<S>): string | undefined {
    const member = this.members.get(contribution.rank)
    if (member === undefined) return `rank ${contribution.rank} is not a live rank of this host`
    if (member.pending !== undefined) return `rank ${contribution.rank} started a reduction before its previous one finished`
    member.pending = contribution
    member.idle = false
    return undefined
  }

  idle(rank: number): void {
    const member = this.members.get(rank)
    if (member !== undefined && member.pending === undefined) member.idle = true
  }

  /**
   * Back in the barrier before its next contribution: at an epoch's end
   * every rank's next collective belongs to the same round, so none may be
   * reduced without the others.
   */
  wake(rank: number): void {
    const member = this.members.get(rank)
    if (member !== undefined) member.idle = false
  }

  /** The rank is gone: it leaves the barrier; a contribution it left is dropped. */
  leave(rank: number): void {
    this.members.delete(rank)
  }

  /** The next round's contributions (ascending rank), if it is ready; the round is then in flight. */
  take(): Array<Contribution<S>> | undefined {
    if (this.inFlight) return undefined
    let epoch = Number.POSITIVE_INFINITY
    for (const member of this.members.values()) if (member.pending !== undefined) epoch = Math.min(epoch, member.pending.epoch)
    const active = [...this.members.values()].filter((member) => !member.idle && member.from <= epoch)
    if (active.length === 0 || active.some((member) => member.pending === undefined)) return undefined
    const round = active.map((member) => member.pending!).sort((a, b) => a.rank - b.rank)
    for (const member of active) member.pending = undefined
    this.inFlight = true
    return round
  }

  /** The round in flight has finished (its result delivered). */
  finish(): void {
    this.inFlight = false
  }
}

/** The epoch a round belongs to: the latest its contributions name (they agree on a host in step). */
export const roundEpoch = <S>(round: ReadonlyArray<Contribution<S>>): number =>
  round.reduce((epoch, contribution) => Math.max(epoch, contribution.epoch), 0)

/** Why a round's contributions cannot be reduced together, if they cannot. */
export const mismatch = <S>(round: ReadonlyArray<Contribution<S>>): string | undefined => {
  const first = round[0]
  if (first === undefined) return undefined
  for (const other of round.slice(1)) {
    if (other.bytes !== first.bytes) {
      return `collectives out of step: rank ${first.rank} passed ${first.bytes / 4} floats and rank ${other.rank} ${other.bytes / 4}; ` +
        "every rank must make the same collective calls in the same order (report progress after a step's collectives)"
    }
    if (other.op !== first.op) return `collectives out of step: rank ${first.rank} asked for ${first.op} and rank ${other.rank} for ${other.op}`
  }
  return undefined
}
