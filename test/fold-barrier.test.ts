/**
 * The relay's fold barrier: which ranks a reduction round waits for.
 *
 * Unit tests of each rule (live non-idle ranks, idleness until the next
 * contribution, `wake` at an epoch's end, `leave` of a dead rank, one round
 * in flight, refused double contributions, `mismatch` messages), then a
 * seeded fast-check model test that drives random sequences of
 * contribute/idle/wake/leave/take/finish through the barrier and a small
 * set-based reference model side by side.
 */
import { describe, expect, test } from "bun:test"
import fc from "fast-check"
import { type Contribution, FoldBarrier, mismatch } from "../src/relay/FoldBarrier.ts"

const c = (rank: number, options: Partial<Omit<Contribution<string>, "rank">> = {}): Contribution<string> => ({
  rank,
  op: options.op ?? "avg",
  bytes: options.bytes ?? 16,
  weight: options.weight ?? 1,
  epoch: options.epoch ?? 0,
  source: options.source ?? `segment-${rank}`
})

const ranksOf = (round: ReadonlyArray<Contribution<string>> | undefined) => round?.map((contribution) => contribution.rank)

describe("FoldBarrier growth", () => {
  test("a rank new to the host waits unentered; from its epoch on every round waits for it, earlier ones never do", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.join(7, false)
    // Unentered: the host's rounds go on without it, and it does not keep the host from being idle.
    barrier.contribute(c(0, { epoch: 2 }))
    barrier.contribute(c(1, { epoch: 2 }))
    expect(barrier.take()?.map((each) => each.rank)).toEqual([0, 1])
    barrier.finish()
    barrier.idle(0)
    barrier.idle(1)
    expect(barrier.allIdle(2)).toBe(true)
    barrier.enter(7, 3)
    expect(barrier.allIdle(2)).toBe(true)
    expect(barrier.allIdle(3)).toBe(false)
    // The epoch-end round of epoch 2 is the members' alone, even with the newcomer already at its first step.
    barrier.wake(0)
    barrier.wake(1)
    barrier.wake(7)
    barrier.contribute(c(7, { epoch: 3 }))
    barrier.contribute(c(0, { epoch: 2 }))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(1, { epoch: 2 }))
    expect(barrier.take()?.map((each) => each.rank)).toEqual([0, 1])
    barrier.finish()
    // Epoch 3: everyone, the newcomer's waiting contribution included.
    barrier.contribute(c(0, { epoch: 3 }))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(1, { epoch: 3 }))
    expect(barrier.take()?.map((each) => each.rank)).toEqual([0, 1, 7])
  })

  test("a rank the host was admitted with that comes back is in the rounds at once, as before", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.leave(1)
    barrier.join(1)
    barrier.contribute(c(0))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(1))
    expect(barrier.take()?.map((each) => each.rank)).toEqual([0, 1])
  })
})

describe("FoldBarrier", () => {
  test("live lists the ranks ascending; a fresh barrier is not idle", () => {
    const barrier = new FoldBarrier<string>([3, 1, 2])
    expect(barrier.live).toEqual([1, 2, 3])
    expect(barrier.allIdle(1)).toBe(false)
    expect(barrier.take()).toBeUndefined()
  })

  test("a round waits for every live non-idle rank, then hands them out in ascending rank order", () => {
    const barrier = new FoldBarrier<string>([0, 1, 2])
    expect(barrier.contribute(c(2))).toBeUndefined()
    expect(barrier.take()).toBeUndefined()
    expect(barrier.contribute(c(0))).toBeUndefined()
    expect(barrier.take()).toBeUndefined()
    expect(barrier.contribute(c(1, { weight: 5, source: "mine" }))).toBeUndefined()
    const round = barrier.take()
    expect(ranksOf(round)).toEqual([0, 1, 2])
    // The contributions are handed back as given.
    expect(round![1]).toEqual(c(1, { weight: 5, source: "mine" }))
  })

  test("idle ranks are left out of the round until their next contribution", () => {
    const barrier = new FoldBarrier<string>([0, 1, 2])
    barrier.idle(1)
    barrier.contribute(c(0))
    barrier.contribute(c(2))
    expect(ranksOf(barrier.take())).toEqual([0, 2])
    barrier.finish()

    // Still idle: the next round goes without it again.
    barrier.contribute(c(0))
    barrier.contribute(c(2))
    expect(ranksOf(barrier.take())).toEqual([0, 2])
    barrier.finish()

    // Its next contribution brings it back: the round waits for all three.
    barrier.contribute(c(1))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(0))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(2))
    expect(ranksOf(barrier.take())).toEqual([0, 1, 2])
  })

  test("an idle rank that contributes joins the round that is waiting", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.idle(1)
    barrier.contribute(c(1))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(0))
    expect(ranksOf(barrier.take())).toEqual([0, 1])
  })

  test("idle is ignored while the rank has a contribution pending", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.contribute(c(1))
    barrier.idle(1)
    expect(barrier.allIdle(1)).toBe(false)
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(0))
    expect(ranksOf(barrier.take())).toEqual([0, 1])
  })

  test("allIdle holds when every live rank is idle, and after every rank has left", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.idle(0)
    expect(barrier.allIdle(1)).toBe(false)
    barrier.idle(1)
    expect(barrier.allIdle(1)).toBe(true)
    // No round from nobody.
    expect(barrier.take()).toBeUndefined()
    barrier.leave(0)
    barrier.leave(1)
    expect(barrier.live).toEqual([])
    expect(barrier.allIdle(1)).toBe(true)
    expect(barrier.take()).toBeUndefined()
  })

  test("wake puts idle ranks back: an epoch-end round waits for everyone", () => {
    const barrier = new FoldBarrier<string>([0, 1, 2])
    barrier.idle(0)
    barrier.idle(2)
    // Epoch end: every rank is woken before any of them hears of it.
    for (const rank of barrier.live) barrier.wake(rank)
    expect(barrier.allIdle(1)).toBe(false)
    barrier.contribute(c(1))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(0))
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(2))
    expect(ranksOf(barrier.take())).toEqual([0, 1, 2])
  })

  test("idle, wake and leave of an unknown rank change nothing", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.idle(7)
    barrier.wake(7)
    barrier.leave(7)
    expect(barrier.live).toEqual([0, 1])
    barrier.contribute(c(0))
    barrier.contribute(c(1))
    expect(ranksOf(barrier.take())).toEqual([0, 1])
  })

  test("leave drops a dead rank's pending contribution and unblocks the round", () => {
    const barrier = new FoldBarrier<string>([0, 1, 2])
    barrier.contribute(c(0))
    barrier.contribute(c(1))
    expect(barrier.take()).toBeUndefined()
    barrier.leave(2)
    expect(barrier.live).toEqual([0, 1])
    expect(ranksOf(barrier.take())).toEqual([0, 1])
  })

  test("a contribution a rank left behind is never handed out", () => {
    const barrier = new FoldBarrier<string>([0, 1, 2])
    barrier.contribute(c(2))
    barrier.contribute(c(0))
    barrier.leave(2)
    expect(barrier.take()).toBeUndefined()
    barrier.contribute(c(1))
    expect(ranksOf(barrier.take())).toEqual([0, 1])
    // Gone for good: its contributions are refused.
    expect(barrier.contribute(c(2))).toBe("rank 2 is not a live rank of this host")
  })

  test("leave of the last rank holding out unblocks the round", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.contribute(c(1))
    barrier.leave(0)
    expect(ranksOf(barrier.take())).toEqual([1])
  })

  test("only one round is in flight until finish", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    barrier.contribute(c(0))
    barrier.contribute(c(1))
    expect(ranksOf(barrier.take())).toEqual([0, 1])
    // The round is out: the next can be contributed, but not taken.
    expect(barrier.take()).toBeUndefined()
    expect(barrier.contribute(c(0, { source: "second" }))).toBeUndefined()
    expect(barrier.contribute(c(1, { source: "second" }))).toBeUndefined()
    expect(barrier.take()).toBeUndefined()
    barrier.finish()
    const second = barrier.take()
    expect(second?.map((contribution) => contribution.source)).toEqual(["second", "second"])
    expect(barrier.take()).toBeUndefined()
    barrier.finish()
    // Nothing pending: finishing does not make a round out of nothing.
    expect(barrier.take()).toBeUndefined()
  })

  test("a second contribution before the first is taken is refused, and the first is kept", () => {
    const barrier = new FoldBarrier<string>([0, 1])
    expect(barrier.contribute(c(0, { source: "first" }))).toBeUndefined()
    expect(barrier.contribute(c(0, { source: "again" }))).toBe(
      "rank 0 started a reduction before its previous one finished"
    )
    barrier.contribute(c(1))
    expect(barrier.take()?.[0]?.source).toBe("first")
  })

  test("a contribution from a rank the barrier never had is refused", () => {
    const barrier = new FoldBarrier<string>([0])
    expect(barrier.contribute(c(4))).toBe("rank 4 is not a live rank of this host")
    expect(barrier.live).toEqual([0])
  })
})

describe("mismatch", () => {
  test("no problem for an empty round, a single contribution, or one that agrees", () => {
    expect(mismatch([])).toBeUndefined()
    expect(mismatch([c(3)])).toBeUndefined()
    expect(mismatch([c(0), c(1, { weight: 9 }), c(2)])).toBeUndefined()
    expect(mismatch([c(0, { bytes: 0, op: "sum" }), c(1, { bytes: 0, op: "sum" })])).toBeUndefined()
  })

  test("different lengths name both ranks and their lengths in floats", () => {
    const problem = mismatch([c(0, { bytes: 16 }), c(1, { bytes: 16 }), c(5, { bytes: 40 })])
    expect(problem).toBeDefined()
    expect(problem).toContain("rank 0 passed 4 floats")
    expect(problem).toContain("rank 5 10")
    expect(problem).toContain("same collective calls in the same order")
  })

  test("different ops name both ranks and both ops", () => {
    const problem = mismatch([c(2, { op: "avg" }), c(7, { op: "sum" })])
    expect(problem).toBe("collectives out of step: rank 2 asked for avg and rank 7 for sum")
  })

  test("the first disagreement reported is the first odd rank", () => {
    const problem = mismatch([c(0), c(1, { op: "sum" }), c(2, { bytes: 8 })])
    expect(problem).toBe("collectives out of step: rank 0 asked for avg and rank 1 for sum")
  })
})

// ---------------------------------------------------------------------------
// Model test
// ---------------------------------------------------------------------------

type Step =
  | { readonly kind: "contribute"; readonly rank: number }
  | { readonly kind: "idle"; readonly rank: number }
  | { readonly kind: "wake"; readonly rank: number }
  | { readonly kind: "leave"; readonly rank: number }
  | { readonly kind: "take" }
  | { readonly kind: "finish" }

const WORLD = 4
/** Ranks 0..WORLD-1 start in the barrier; WORLD is never one of them. */
const anyRank = fc.integer({ min: 0, max: WORLD })

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: anyRank.map((rank): Step => ({ kind: "contribute", rank })) },
  { weight: 2, arbitrary: anyRank.map((rank): Step => ({ kind: "idle", rank })) },
  { weight: 1, arbitrary: anyRank.map((rank): Step => ({ kind: "wake", rank })) },
  { weight: 1, arbitrary: anyRank.map((rank): Step => ({ kind: "leave", rank })) },
  { weight: 3, arbitrary: fc.constant<Step>({ kind: "take" }) },
  { weight: 2, arbitrary: fc.constant<Step>({ kind: "finish" }) }
)

/** The rules, restated with sets: what the barrier must do. */
class Model {
  readonly live = new Set<number>()
  readonly idle = new Set<number>()
  readonly pending = new Map<number, number>()
  inFlight = false

  constructor(ranks: ReadonlyArray<number>) {
    for (const rank of ranks) this.live.add(rank)
  }

  contribute(rank: number, id: number): "refused" | "accepted" {
    if (!this.live.has(rank) || this.pending.has(rank)) return "refused"
    this.pending.set(rank, id)
    this.idle.delete(rank)
    return "accepted"
  }

  markIdle(rank: number) {
    if (this.live.has(rank) && !this.pending.has(rank)) this.idle.add(rank)
  }

  wake(rank: number) {
    this.idle.delete(rank)
  }

  leave(rank: number) {
    this.live.delete(rank)
    this.idle.delete(rank)
    this.pending.delete(rank)
  }

  /** The ids of the round's contributions in rank order, if a round is ready. */
  take(): Array<number> | undefined {
    if (this.inFlight) return undefined
    const waitedFor = [...this.live].filter((rank) => !this.idle.has(rank)).sort((a, b) => a - b)
    if (waitedFor.length === 0 || !waitedFor.every((rank) => this.pending.has(rank))) return undefined
    const ids = waitedFor.map((rank) => this.pending.get(rank)!)
    for (const rank of waitedFor) this.pending.delete(rank)
    this.inFlight = true
    return ids
  }

  get allIdle() {
    return [...this.live].every((rank) => this.idle.has(rank))
  }
}

test("model: random contribute/idle/wake/leave/take/finish sequences agree with the reference", () => {
  fc.assert(
    fc.property(fc.array(step, { maxLength: 80, size: "max" }), (steps) => {
      const ranks = Array.from({ length: WORLD }, (_, rank) => rank)
      const barrier = new FoldBarrier<number>(ranks)
      const model = new Model(ranks)
      const handedOut = new Set<number>()
      let nextId = 0
      for (const s of steps) {
        switch (s.kind) {
          case "contribute": {
            const id = nextId++
            const refused = barrier.contribute({ rank: s.rank, op: "avg", bytes: 8, weight: 1, epoch: 0, source: id })
            expect(refused === undefined ? "accepted" : "refused").toBe(model.contribute(s.rank, id))
            if (refused !== undefined) expect(refused).toContain(`rank ${s.rank}`)
            break
          }
          case "idle":
            barrier.idle(s.rank)
            model.markIdle(s.rank)
            break
          case "wake":
            barrier.wake(s.rank)
            model.wake(s.rank)
            break
          case "leave":
            barrier.leave(s.rank)
            model.leave(s.rank)
            break
          case "take": {
            const round = barrier.take()
            const expected = model.take()
            expect(round?.map((contribution) => contribution.source)).toEqual(expected)
            if (round !== undefined) {
              // Ascending, every rank alive, each contribution handed out once.
              const roundRanks = round.map((contribution) => contribution.rank)
              expect(roundRanks).toEqual([...roundRanks].sort((a, b) => a - b))
              for (const contribution of round) {
                expect(model.live.has(contribution.rank)).toBe(true)
                expect(handedOut.has(contribution.source)).toBe(false)
                handedOut.add(contribution.source)
              }
            }
            break
          }
          case "finish":
            barrier.finish()
            model.inFlight = false
            break
        }
        expect(barrier.live).toEqual([...model.live].sort((a, b) => a - b))
        expect(barrier.allIdle(1)).toBe(model.allIdle)
      }
    }),
    { seed: 20_240_611, numRuns: 400, includeErrorInReport: true }
  )
})
