/**
 * The relay's fold barrier: which of the host's ranks a reduction round
 * waits for. A round is ready when every live rank that is not waiting for
 * work has handed in a contribution. A rank that dies, or says it is idle
 * (its epoch's work is used up), leaves the barrier at once; its next
 * contribution brings it back.
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
}

export class FoldBarrier<S> {
  private readonly members = new Map<number, Member<S>>()
  /** A round handed out and not yet finished: no other starts meanwhile. */
  private inFlight = false

  constructor(ranks: Iterable<number>) {
    for (const rank of ranks) this.members.set(rank, { idle: false, pending: undefined })
  }

  /** Ranks still in the barrier (alive), ascending. */
  get live(): Array<number> {
    return [...this.members.keys()].sort((a, b) => a - b)
  }

  /** True when every live rank is waiting for work (or none is left). */
  get allIdle(): boolean {
    return [...this.members.values()].every((member) => member.idle)
  }

  /** A rank (re)joins: a restarted rank is a member again, active. */
  join(rank: number): void {
    if (!this.members.has(rank)) this.members.set(rank, { idle: false, pending: undefined })
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
    const active = [...this.members.values()].filter((member) => !member.idle)
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
