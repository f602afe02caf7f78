/**
 * A relay's facts and decisions, as a table: literal events in, literal
 * effects (by tag, with the fields that carry a decision) and facts out.
 */
import { describe, expect, test } from "bun:test"
import type { Contribution } from "../src/relay/FoldBarrier.ts"
import { freshBeats, registered, type RelayEffect, RelayEvent, type RelayState, relayStep } from "../src/relay/RelayState.ts"

type Tensor = string
const E = RelayEvent

/** What each effect decides, in a line: its tag and the fields that matter. */
const shown = (effect: RelayEffect<Tensor>): string => {
  switch (effect._tag) {
    case "OfferBoard":
    case "ForgetRank":
    case "MarkIdle":
      return `${effect._tag} ${effect.rank}`
    case "JoinBarrier":
      return `JoinBarrier ${effect.rank}${effect.entered ? "" : " unentered"}`
    case "Wake":
      return `Wake ${effect.ranks.join(",")}`
    case "Enter":
      return `Enter ${effect.ranks.join(",")} from ${effect.fromEpoch}`
    case "FailRound":
      return `FailRound: ${effect.reason}`
    case "FoldHere":
      return `FoldHere${effect.boardOn ? " board on" : ""}`
    case "SayIdle":
      return `SayIdle after ${effect.afterEpoch}`
    case "PushExchange":
      return `PushExchange ${effect.rank} ${effect.exchange.bytes}`
    case "AnswerExchange":
      return `AnswerExchange ${effect.rank} ${effect.failure ?? `${effect.data?.length} bytes`}`
    case "SendUp":
      return `SendUp ${effect.round.map(({ rank }) => rank).join(",")}`
    default:
      // Anything that is not one of the effects shows as itself, so that it never reads as no effect at all.
      return (effect as { _tag?: string })._tag ?? `not an effect: ${JSON.stringify(effect)}`
  }
}

const play = (events: ReadonlyArray<RelayEvent<Tensor>>, start: RelayState) => {
  let state = start
  const said: Array<Array<string>> = []
  for (const event of events) {
    const [effects, next] = relayStep(state, event)
    said.push(effects.map(shown))
    state = next
  }
  return { said, state }
}

const part = (rank: number, epoch: number, op: "sum" | "avg" | "sync" = "avg", bytes = 16): Contribution<Tensor> => ({
  rank,
  op,
  bytes,
  weight: 1,
  epoch,
  source: `t${rank}`
})

/** Host ranks 0 and 1 of a world of 2 (alone), or of 4 (another host has 2 and 3). */
const aloneHost = () => registered([0, 1], 2)
const sharedHost = () => registered([0, 1], 4)

describe("where a ready round is reduced", () => {
  test("alone in the world: here; the board goes on only when every live rank was in the round", () => {
    expect(play([
      E.RoundReady({ round: [part(0, 1), part(1, 1)], live: 2 }),
      E.RoundReady({ round: [part(0, 1)], live: 2 })
    ], aloneHost()).said).toEqual([["FoldHere board on"], ["FoldHere"]])
  })

  test("a model sync always goes up, alone or not; a host in a larger world sends every round up", () => {
    expect(play([E.RoundReady({ round: [part(0, 1, "sync"), part(1, 1, "sync")], live: 2 })], aloneHost()).said).toEqual([["SendUp 0,1"]])
    expect(play([E.RoundReady({ round: [part(0, 1), part(1, 1)], live: 2 })], sharedHost()).said).toEqual([["SendUp 0,1"]])
  })

  test("contributions out of step fail the round, naming both ranks; the state is untouched", () => {
    const start = aloneHost()
    const { said, state } = play([E.RoundReady({ round: [part(0, 1, "avg", 16), part(1, 1, "avg", 8)], live: 2 })], start)
    expect(said[0]![0]).toStartWith("FailRound: collectives out of step: rank 0 passed 4 floats and rank 1 2")
    expect(state).toBe(start)
  })

  test("another host joins from epoch 3: rounds of epoch 2 still finish here, those of 3 go up, and the board stays off", () => {
    const { said } = play([
      E.RankHello({ rank: 0, board: true }),
      E.RankHello({ rank: 1, board: true }),
      E.WorldGrown({ ranks: [2, 3], fromEpoch: 3 }),
      E.RoundReady({ round: [part(0, 2), part(1, 2)], live: 2 }),
      E.RoundReady({ round: [part(0, 3), part(1, 3)], live: 2 })
    ], aloneHost())
    expect(said).toEqual([
      ["BoardOff", "OfferBoard 0", "JoinBarrier 0"],
      ["BoardOff", "OfferBoard 1", "JoinBarrier 1"],
      ["BoardOff", "Enter  from 3", "Advance"],
      ["FoldHere"],
      ["SendUp 0,1"]
    ])
  })

  test("a rank of this host restarted under a new number enters at its epoch and the host stays alone", () => {
    const { said, state } = play([
      E.RankHello({ rank: 0, board: false }),
      E.RankHello({ rank: 5, board: true }),
      E.WorldGrown({ ranks: [5], fromEpoch: 4 }),
      E.RoundReady({ round: [part(0, 4), part(5, 4)], live: 2 })
    ], aloneHost())
    expect(said).toEqual([
      ["BoardOff", "JoinBarrier 0"],
      ["BoardOff", "OfferBoard 5", "JoinBarrier 5 unentered"],
      ["BoardOff", "Enter 5 from 4", "Advance"],
      ["FoldHere board on"]
    ])
    expect(state.aloneBefore).toBe(Number.POSITIVE_INFINITY)
  })

  test("in a larger world no board slot is offered", () => {
    expect(play([E.RankHello({ rank: 0, board: true })], sharedHost()).said).toEqual([["BoardOff", "JoinBarrier 0"]])
  })
})

describe("a round up with the controller", () => {
  test("while it is up the host does not say it is idle; its answer finishes it and tries the barrier again", () => {
    const { said, state } = play([
      E.RoundReady({ round: [part(0, 1), part(1, 1)], live: 2 }),
      E.BarrierQuiet({ allIdle: true }),
      E.RoundAnswered(),
      E.BarrierQuiet({ allIdle: true }),
      E.BarrierQuiet({ allIdle: true })
    ], sharedHost())
    expect(said).toEqual([["SendUp 0,1"], [], ["FinishRound", "Advance"], ["SayIdle after 0"], []])
    expect([state.awaitingController, state.toldIdle]).toEqual([false, true])
  })

  test("a host alone for good never says it is idle (nothing waits on it upstream)", () => {
    expect(play([E.BarrierQuiet({ allIdle: true })], aloneHost()).said).toEqual([[]])
  })

  test("not while any rank the next epoch waits for still has work", () => {
    expect(play([E.BarrierQuiet({ allIdle: false })], sharedHost()).said).toEqual([[]])
  })

  test("a round sent up, or an epoch's end, lets the host say idle again, after the epoch that ended", () => {
    const { said } = play([
      E.BarrierQuiet({ allIdle: true }),
      E.OrdersCame({ ranks: [0, 1], endedEpoch: 2 }),
      E.BarrierQuiet({ allIdle: true }),
      E.RoundReady({ round: [part(0, 3), part(1, 3)], live: 2 }),
      E.RoundAnswered(),
      E.BarrierQuiet({ allIdle: true })
    ], sharedHost())
    expect(said).toEqual([["SayIdle after 0"], ["Wake 0,1"], ["SayIdle after 2"], ["SendUp 0,1"], ["FinishRound", "Advance"], ["SayIdle after 2"]])
  })
})

describe("epochs and idles", () => {
  test("an idle from an epoch already ended is stale and dropped; a current one marks the rank", () => {
    const { said, state } = play([
      E.OrdersCame({ ranks: [0, 1], endedEpoch: 3 }),
      E.OrdersCame({ ranks: [0], endedEpoch: 2 }),
      E.RankIdle({ rank: 0, epoch: 3 }),
      E.RankIdle({ rank: 0, epoch: 4 })
    ], sharedHost())
    expect(said).toEqual([["Wake 0,1"], ["Wake 0"], [], ["BoardOff", "MarkIdle 0", "Advance"]])
    // An older epoch's end does not move the mark back.
    expect(state.endedEpoch).toBe(3)
  })

  test("other orders change nothing", () => {
    const start = sharedHost()
    const { said, state } = play([E.OrdersCame({ ranks: [0], endedEpoch: undefined })], start)
    expect([said, state]).toEqual([[[]], start])
  })

  test("a contribution through the socket turns the board off", () => {
    expect(play([E.SocketReduce({ rank: 1 })], aloneHost()).said).toEqual([["BoardOff"]])
  })
})

describe("connections and beats", () => {
  test("a rank gone leaves the barrier and its beat with it; the barrier is tried again", () => {
    const { said, state } = play([
      E.RankHello({ rank: 0, board: false }),
      E.RankHello({ rank: 1, board: false }),
      E.RankBeat({ rank: 0, at: 1_000 }),
      E.RankBeat({ rank: 1, at: 1_500 }),
      E.RankGone({ rank: 0 })
    ], sharedHost())
    expect(said.at(-1)).toEqual(["ForgetRank 0", "Advance"])
    expect([[...state.connected], [...state.beatAt]]).toEqual([[1], [[1, 1_500]]])
  })

  test("a HostBeats names the ranks that beat at most 2 s ago", () => {
    const { said, state } = play([E.RankBeat({ rank: 0, at: 1_000 }), E.RankBeat({ rank: 1, at: 2_500 }), E.RankBeat({ rank: 0, at: 1_200 })], sharedHost())
    // A beat is only noted: it goes up with the host's next HostBeats.
    expect(said).toEqual([[], [], []])
    expect([freshBeats(state, 3_200), freshBeats(state, 3_201), freshBeats(state, 4_600)]).toEqual([[0, 1], [1], []])
  })

  test("a host that other hosts join after the ranks connect: a grown rank that is not connected here makes the host shared", () => {
    const { state } = play([E.RankHello({ rank: 0, board: false }), E.WorldGrown({ ranks: [0, 7], fromEpoch: 2 }), E.WorldGrown({ ranks: [8], fromEpoch: 5 })], aloneHost())
    expect(state.aloneBefore).toBe(2)
  })
})

describe("cpu_async exchanges", () => {
  test("pushed up at once; the answer goes to the rank that waits, once; an answer for nobody is dropped", () => {
    const exchange = { source: new Uint8Array(8), bytes: 8 }
    const { said, state } = play([
      E.ExchangeSent({ rank: 1, exchange }),
      E.ExchangeAnswered({ rank: 1, data: new Uint8Array(8), failure: undefined }),
      E.ExchangeAnswered({ rank: 1, data: new Uint8Array(8), failure: undefined }),
      E.ExchangeSent({ rank: 0, exchange }),
      E.ExchangeAnswered({ rank: 0, data: undefined, failure: "the controller is stopping" })
    ], sharedHost())
    expect(said).toEqual([["PushExchange 1 8"], ["AnswerExchange 1 8 bytes"], [], ["PushExchange 0 8"], ["AnswerExchange 0 the controller is stopping"]])
    expect(state.exchanges.size).toBe(0)
  })
})
