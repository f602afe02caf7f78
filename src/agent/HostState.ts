/**
 * What an agent knows of its host, in one state: which of its ranks have run
 * user code, what each rank incarnation said before it exited (what its code
 * threw, NCCL's error its communicator held, or that it lost its relay),
 * whether the relay is lost, and whether (and why) the agent is stopping
 * everything. One pure step, `hostState(state, event) → [effects, state]`,
 * changes it; the agent is its interpreter on the kernel (Machine.run).
 *
 * The running processes and the orders waiting for an answer stay the
 * agent's own: they are resources (handles, Deferreds), not facts.
 */
import * as Data from "effect/Data"

/** What a rank incarnation said over IPC before it exited. */
export interface LastWords {
  readonly error?: string
  readonly ncclError?: number
  readonly relayLost?: boolean
}

export interface HostState {
  /** The ranks the host was admitted with: the relay starts once every one has run user code. */
  readonly ranks: ReadonlyArray<number>
  readonly checkedIn: ReadonlySet<number>
  readonly allRunningSaid: boolean
  /** By child id (`rankChildId`). */
  readonly lastWords: ReadonlyMap<string, LastWords>
  /** The relay ended on its own, abnormally: the ranks stopped after it are reported as lost with it. */
  readonly relayLost: boolean
  /** The agent is stopping everything: the launcher aborted, the run ended, or the link is gone. */
  readonly ending: boolean
  /** Why the host's ranks are being stopped, for the agent's line when the policy stops them. */
  readonly stopCause: string | undefined
}

export type HostEvent = Data.TaggedEnum<{
  /** A rank runs user code (an entry rank checked in; a command rank started). */
  RankRunning: { readonly rank: number }
  /** An incarnation's code threw; `ncclError`: the asynchronous NCCL error its communicator held then. */
  Threw: { readonly id: string; readonly error: string; readonly ncclError?: number }
  /** An incarnation lost its relay and exits for that. */
  LostItsRelay: { readonly id: string }
  /** The relay could not start, or exited abnormally, on its own: `cause` is said when the ranks are stopped. */
  RelayLost: { readonly cause: string }
  /** Stop everything, for `why`. */
  Ending: { readonly why: string }
}>
export const HostEvent = Data.taggedEnum<HostEvent>()

export type HostEffect = Data.TaggedEnum<{
  /** Every rank of the host has run user code once: the relay may start. Said once, never while ending. */
  AllRanksRunning: {}
}>
export const HostEffect = Data.taggedEnum<HostEffect>()

export const admitted = (ranks: ReadonlyArray<number>): HostState => ({
  ranks,
  checkedIn: new Set(),
  allRunningSaid: false,
  lastWords: new Map(),
  relayLost: false,
  ending: false,
  stopCause: undefined
})

const none: ReadonlyArray<HostEffect> = []

export const hostState = (state: HostState, event: HostEvent): readonly [ReadonlyArray<HostEffect>, HostState] => {
  switch (event._tag) {
    case "RankRunning": {
      const checkedIn = new Set(state.checkedIn).add(event.rank)
      const all = !state.ending && !state.allRunningSaid && state.ranks.every((rank) => checkedIn.has(rank))
      return [all ? [HostEffect.AllRanksRunning()] : none, { ...state, checkedIn, allRunningSaid: state.allRunningSaid || all }]
    }
    case "Threw":
      return [none, {
        ...state,
        lastWords: new Map(state.lastWords).set(event.id, { error: event.error, ...(event.ncclError === undefined ? {} : { ncclError: event.ncclError }) })
      }]
    case "LostItsRelay":
      return [none, { ...state, lastWords: new Map(state.lastWords).set(event.id, { relayLost: true }) }]
    case "RelayLost":
      // Once everything is being stopped, the relay's end is part of that stop, not a loss of its own.
      return state.ending ? [none, state] : [none, { ...state, relayLost: true, stopCause: event.cause }]
    case "Ending":
      return [none, { ...state, ending: true, stopCause: event.why }]
  }
}

/** Whether an incarnation's end is the relay's loss: the relay is lost, or it said it lost it. */
export const lostWithRelay = (state: HostState, id: string): boolean => state.relayLost || state.lastWords.get(id)?.relayLost === true

