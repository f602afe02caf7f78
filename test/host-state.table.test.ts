/**
 * An agent's host state, as a table: literal events in, literal effects and
 * facts out.
 */
import { describe, expect, test } from "bun:test"
import { admitted, HostEvent, hostState, type HostState, lostWithRelay } from "../src/agent/HostState.ts"

const play = (events: ReadonlyArray<HostEvent>, start: HostState = admitted([4, 5])) => {
  let state = start
  const said: Array<Array<string>> = []
  for (const event of events) {
    const [effects, next] = hostState(state, event)
    said.push(effects.map((effect) => effect._tag))
    state = next
  }
  return { said, state }
}

describe("the relay starts once every rank has run user code", () => {
  test("said once, when the last of the host's ranks checks in; a rank checking in again says nothing", () => {
    expect(play([HostEvent.RankRunning({ rank: 5 }), HostEvent.RankRunning({ rank: 5 }), HostEvent.RankRunning({ rank: 4 }), HostEvent.RankRunning({ rank: 4 })]).said)
      .toEqual([[], [], ["AllRanksRunning"], []])
  })

  test("a rank under a number the host was not admitted with does not count; nothing is said while stopping", () => {
    expect(play([HostEvent.RankRunning({ rank: 4 }), HostEvent.RankRunning({ rank: 9 })]).said).toEqual([[], []])
    expect(play([HostEvent.RankRunning({ rank: 4 }), HostEvent.Ending({ why: "the run has ended" }), HostEvent.RankRunning({ rank: 5 })]).said).toEqual([[], [], []])
  })
})

describe("last words and the relay", () => {
  test("what each incarnation said is kept by its id; the relay's loss counts for every incarnation from then on", () => {
    const { state } = play([
      HostEvent.Threw({ id: "rank-4.0", error: "ValueError: bad batch", ncclError: 3 }),
      HostEvent.LostItsRelay({ id: "rank-5.0" })
    ])
    expect([...state.lastWords]).toEqual([["rank-4.0", { error: "ValueError: bad batch", ncclError: 3 }], ["rank-5.0", { relayLost: true }]])
    expect([lostWithRelay(state, "rank-4.0"), lostWithRelay(state, "rank-5.0")]).toEqual([false, true])
    const lost = play([HostEvent.RelayLost({ cause: "the host's relay is gone" })], state).state
    expect([lostWithRelay(lost, "rank-4.0"), lost.stopCause]).toEqual([true, "the host's relay is gone"])
  })

  test("once everything is being stopped, the relay's end is no loss of its own, and the stop's cause stands", () => {
    const { state } = play([HostEvent.Ending({ why: "lost the launcher (EOF)" }), HostEvent.RelayLost({ cause: "the host's relay is gone" })])
    expect([state.ending, state.relayLost, state.stopCause]).toEqual([true, false, "lost the launcher (EOF)"])
  })
})
