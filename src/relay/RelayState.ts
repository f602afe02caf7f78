/**
 * What a relay knows of its host's round traffic, in one state, and the one
 * pure step that changes it: `relayStep(state, event) → [effects, state]`.
 * The relay (Relay.ts) is its interpreter on the kernel (`Machine.runSync`:
 * a rank's reduction is answered in the turn its bytes arrive).
 *
 * The facts: which of the host's ranks are connected and when each last
 * beat; whether the host is still the world's only one (`aloneBefore`: the
 * first epoch whose rounds must go up); the last epoch whose end was passed
 * on; whether a round is up with the controller and whether the host has
 * said it is idle; the `cpu_async` exchanges waiting for the controller.
 * The decisions: where a ready round is reduced (here, or up), when the
 * host's board may be offered, turned on or must be off, when the host says
 * it is idle, and which idle is stale.
 *
 * The sockets, the mapped segments, the board, the arithmetic and the fold
 * barrier's contributions (views of those segments) stay the relay's: they
 * are resources, not facts.
 */
import * as Data from "effect/Data"
import type { Contribution } from "./FoldBarrier.ts"
import { mismatch, roundEpoch } from "./FoldBarrier.ts"

/** A `cpu_async` exchange on its way: the answer goes back into `source`, the rank's segment. */
export interface Exchange {
  readonly source: Uint8Array
  readonly bytes: number
}

export interface RelayState {
  /** The host's ranks as registered (their own numbers; a restart under a new number is not one). */
  readonly ranks: ReadonlyArray<number>
  /** Ranks with a socket that said hello. */
  readonly connected: ReadonlySet<number>
  /** Each connected rank's last heartbeat (performance.now()). */
  readonly beatAt: ReadonlyMap<number, number>
  /** Rounds of epochs before this one are finished here (the host is the world's only one); later ones go up. */
  readonly aloneBefore: number
  /** The last epoch whose end was passed on: an idle from before it is stale (it crossed the EpochEnd on the way). */
  readonly endedEpoch: number
  /** A round is up with the controller: no other round starts, and the host does not say it is idle. */
  readonly awaitingController: boolean
  /** The host said it is idle since its last round or epoch end. */
  readonly toldIdle: boolean
  readonly exchanges: ReadonlyMap<number, Exchange>
}

export type RelayEvent<S> = Data.TaggedEnum<{
  /** A rank's hello was accepted (`RankHello`); `board`: it can use the host's board. */
  RankHello: { readonly rank: number; readonly board: boolean }
  /** The accepted socket of `rank` closed. */
  RankGone: { readonly rank: number }
  RankBeat: { readonly rank: number; readonly at: number }
  /** The rank's work for epoch `epoch` is used up. */
  RankIdle: { readonly rank: number; readonly epoch: number }
  /** A contribution came through the socket (not the board). */
  SocketReduce: { readonly rank: number }
  ExchangeSent: { readonly rank: number; readonly exchange: Exchange }
  /** The controller's answer to `rank`'s exchange: its new parameters, or why not. */
  ExchangeAnswered: { readonly rank: number; readonly data: Uint8Array | undefined; readonly failure: string | undefined }
  /** Orders for `ranks`; `endedEpoch`: the order ends that epoch. */
  OrdersCame: { readonly ranks: ReadonlyArray<number>; readonly endedEpoch: number | undefined }
  /** Ranks entered the world from `fromEpoch` on (another host's, or this host's under new numbers). */
  WorldGrown: { readonly ranks: ReadonlyArray<number>; readonly fromEpoch: number }
  /** The barrier has a round; `live`: how many ranks are in the barrier. */
  RoundReady: { readonly round: ReadonlyArray<Contribution<S>>; readonly live: number }
  /** The round that went up has its answer (or failed), delivered. */
  RoundAnswered: {}
  /** The barrier has no round ready; `allIdle`: every rank the next epoch's rounds wait for waits for work. */
  BarrierQuiet: { readonly allIdle: boolean }
}>

export type RelayEffect<S> = Data.TaggedEnum<{
  /** The board off, cancelling its round under way (it is redone through the socket). */
  BoardOff: {}
  /** Give `rank` a board slot and tell it. */
  OfferBoard: { readonly rank: number }
  /** `rank` takes its place in the barrier; `entered: false` waits for its epoch (`Enter`). */
  JoinBarrier: { readonly rank: number; readonly entered: boolean }
  /** `rank` is gone: its slot, segments and place in the barrier go. */
  ForgetRank: { readonly rank: number }
  MarkIdle: { readonly rank: number }
  /** `ranks`' next collective belongs to the epoch-end round: back in the barrier. */
  Wake: { readonly ranks: ReadonlyArray<number> }
  Enter: { readonly ranks: ReadonlyArray<number>; readonly fromEpoch: number }
  /** Try the barrier for ready rounds. */
  Advance: {}
  /** Answer every contributor with `reason`, and finish the round. */
  FailRound: { readonly round: ReadonlyArray<Contribution<S>>; readonly reason: string }
  /** Reduce here and answer; `boardOn`: then turn the board on for the round's ranks. Finishes the round. */
  FoldHere: { readonly round: ReadonlyArray<Contribution<S>>; readonly boardOn: boolean }
  /** Send the host's fold to the controller; `RoundAnswered` follows its answer. */
  SendUp: { readonly round: ReadonlyArray<Contribution<S>> }
  /** Finish the round in flight (the barrier may hand out the next). */
  FinishRound: {}
  SayIdle: { readonly afterEpoch: number }
  PushExchange: { readonly rank: number; readonly exchange: Exchange }
  AnswerExchange: { readonly rank: number; readonly exchange: Exchange; readonly data: Uint8Array | undefined; readonly failure: string | undefined }
}>

interface RelayEventDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: RelayEvent<this["A"]>
}
interface RelayEffectDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: RelayEffect<this["A"]>
}
export const RelayEvent = Data.taggedEnum<RelayEventDefinition>()
export const RelayEffect = Data.taggedEnum<RelayEffectDefinition>()

/** A host's relay before any rank has said hello; `worldSize`: the world's ranks when it formed. */
export const registered = (ranks: ReadonlyArray<number>, worldSize: number): RelayState => ({
  ranks,
  connected: new Set(),
  beatAt: new Map(),
  aloneBefore: ranks.length === worldSize ? Number.POSITIVE_INFINITY : 0,
  endedEpoch: 0,
  awaitingController: false,
  toldIdle: false,
  exchanges: new Map()
})

/** Whether the host is the world's only one for good so far (no host has joined): its board may serve. */
export const aloneForGood = (state: RelayState): boolean => state.aloneBefore === Number.POSITIVE_INFINITY

/**
 * A rank is in a `HostBeats` while its own last beat (every second) is this recent: a beat that comes late
 * by up to a second still keeps it in every one, so a busy rank is not taken for a silent one.
 */
export const BEAT_FRESH_MS = 2_000

/** The ranks whose last beat is fresh at `now`, for the host's `HostBeats`. */
export const freshBeats = (state: RelayState, now: number): Array<number> =>
  [...state.beatAt].flatMap(([rank, at]) => (now - at <= BEAT_FRESH_MS ? [rank] : []))

const without = <K, V>(map: ReadonlyMap<K, V>, key: K): Map<K, V> => {
  const next = new Map(map)
  next.delete(key)
  return next
}

const withoutRank = (ranks: ReadonlySet<number>, rank: number): Set<number> => {
  const next = new Set(ranks)
  next.delete(rank)
  return next
}

export const relayStep = <S>(state: RelayState, event: RelayEvent<S>): readonly [ReadonlyArray<RelayEffect<S>>, RelayState] => {
  const Do = RelayEffect
  switch (event._tag) {
    case "RankHello": {
      const { board, rank } = event
      return [
        [
          // A member the board's rounds do not count yet: off until the barrier has made a round with it.
          Do.BoardOff(),
          // Only a host alone in the world uses its board: in a larger one no slot is handed out (nor copied into).
          ...(board && aloneForGood(state) ? [Do.OfferBoard({ rank })] : []),
          // A restarted rank takes its place in the barrier again; one under a new number waits for its epoch.
          Do.JoinBarrier({ rank, entered: state.ranks.includes(rank) })
        ],
        { ...state, connected: new Set(state.connected).add(rank) }
      ]
    }
    case "RankGone":
      // Whoever waits on the board for this rank is told at once (ForgetRank turns it off), and redoes the round without it.
      return [
        [Do.ForgetRank({ rank: event.rank }), Do.Advance()],
        { ...state, connected: withoutRank(state.connected, event.rank), beatAt: without(state.beatAt, event.rank) }
      ]
    case "RankBeat":
      return [[], { ...state, beatAt: new Map(state.beatAt).set(event.rank, event.at) }]
    case "RankIdle":
      if (event.epoch <= state.endedEpoch) return [[], state]
      return [[Do.BoardOff(), Do.MarkIdle({ rank: event.rank }), Do.Advance()], state]
    case "SocketReduce":
      // Through the socket: the board's rounds would miss this rank (and a cancelled round is redone here).
      return [[Do.BoardOff()], state]
    case "ExchangeSent":
      return [[Do.PushExchange({ rank: event.rank, exchange: event.exchange })], { ...state, exchanges: new Map(state.exchanges).set(event.rank, event.exchange) }]
    case "ExchangeAnswered": {
      const exchange = state.exchanges.get(event.rank)
      if (exchange === undefined) return [[], state]
      return [
        [Do.AnswerExchange({ rank: event.rank, exchange, data: event.data, failure: event.failure })],
        { ...state, exchanges: without(state.exchanges, event.rank) }
      ]
    }
    case "OrdersCame":
      if (event.endedEpoch === undefined) return [[], state]
      // Before anyone hears of it: the epoch-end collectives wait for every rank.
      return [[Do.Wake({ ranks: event.ranks })], { ...state, endedEpoch: Math.max(state.endedEpoch, event.endedEpoch), toldIdle: false }]
    case "WorldGrown": {
      // Another host's ranks: from their first epoch on, this host's rounds are no longer its own to finish.
      // This host's (restarted under a new number): its rounds wait for them from then.
      const own = event.ranks.filter((rank) => state.connected.has(rank))
      const aloneBefore = own.length < event.ranks.length ? Math.min(state.aloneBefore, event.fromEpoch) : state.aloneBefore
      return [[Do.BoardOff(), Do.Enter({ ranks: own, fromEpoch: event.fromEpoch }), Do.Advance()], { ...state, aloneBefore }]
    }
    case "RoundReady": {
      const { live, round } = event
      const problem = mismatch(round)
      if (problem !== undefined) return [[Do.FailRound({ round, reason: problem })], state]
      // Model syncs always go up: the model root is the controller's.
      if (roundEpoch(round) >= state.aloneBefore || round[0]?.op === "sync") {
        return [[Do.SendUp({ round })], { ...state, awaitingController: true, toldIdle: false }]
      }
      // Every member was in this round and waits for its answer: nothing of theirs is on the way, so the board
      // can take the next rounds (turned on before the answers go, so that they find it on).
      return [[Do.FoldHere({ round, boardOn: aloneForGood(state) && round.length === live })], state]
    }
    case "RoundAnswered":
      return [[Do.FinishRound(), Do.Advance()], { ...state, awaitingController: false }]
    case "BarrierQuiet": {
      // Only a host that has rounds to send up says it waits for work; and once, until its next round or epoch end.
      const say = Number.isFinite(state.aloneBefore) && event.allIdle && !state.toldIdle && !state.awaitingController
      return say ? [[Do.SayIdle({ afterEpoch: state.endedEpoch })], { ...state, toldIdle: true }] : [[], state]
    }
  }
}
