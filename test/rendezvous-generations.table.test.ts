/**
 * The NCCL rendezvous's machine, as tables: literal events in, literal effects
 * (in words) out. Links are names; an id is a byte.
 */
import { describe, expect, test } from "bun:test"
import { before, generations, type GenerationsEffect, GenerationsEvent, type GenerationsState } from "../src/launcher/front/rendezvousGenerations.ts"

const E = GenerationsEvent

const said = (effect: GenerationsEffect<string>): string => {
  switch (effect._tag) {
    case "Refuse":
      return `refuse ${effect.link}: ${effect.why}`
    case "Listen":
      return `listen ${effect.link} for rank ${effect.rank}`
    case "Close":
      return `close ${effect.link}`
    case "AskId":
      return `ask rank ${effect.generator} for generation ${effect.generation}'s id`
    case "Dissolved":
      return `dissolve ${effect.generation} [${effect.members}]: ${effect.reason}`
    case "Formed": {
      const { generation, generator, members, shrinkOf } = effect.generation
      return `ready ${generation} [${members}] id ${effect.id[0]} from ${generator}${shrinkOf === undefined ? "" : `, shrinks ${shrinkOf.generation} less [${shrinkOf.left}]`}`
    }
    case "WatchAbsence":
      return `watch [${effect.ranks}] for absence`
    case "Failed":
      return `failed: ${effect.reason}`
    case "Absent":
      return `absent [${effect.ranks}]`
  }
  throw new Error(`not a rendezvous effect: ${JSON.stringify(effect)}`)
}

const play = (events: ReadonlyArray<GenerationsEvent<string>>, start: GenerationsState<string> = before<string>()) => {
  let state = start
  const steps: Array<Array<string>> = []
  for (const event of events) {
    const [effects, next] = generations(state, event)
    steps.push(effects.map(said))
    state = next
  }
  return { steps, state }
}

const id = (byte: number) => new Uint8Array([byte])
const joined = (rank: number, link = `L${rank}`) => E.Joined({ rank, link })
/** Ranks 0, 1 and 2 formed generation 0 (rank 2 on the launcher's host makes the ids). */
const formedOfThree = () =>
  play([E.Begin({ world: [0, 1, 2], preferred: [new Set([2])] }), joined(0), joined(1), joined(2), E.IdProvided({ generation: 0, id: id(7) })]).state

describe("forming", () => {
  test("a generation starts once every live rank has joined; the preferred rank makes the id; a refusal for a stranger", () => {
    expect(play([E.Begin({ world: [0, 1, 2], preferred: [new Set([2])] }), joined(0), joined(9), joined(1), joined(2), E.IdProvided({ generation: 0, id: id(7) })]).steps).toEqual([
      [],
      ["listen L0 for rank 0"],
      ["refuse L9: rank 9 is not a live rank of this world"],
      ["listen L1 for rank 1"],
      ["listen L2 for rank 2", "ask rank 2 for generation 0's id"],
      ["ready 0 [0,1,2] id 7 from 2"]
    ])
  })

  test("an id that cannot be had with the same members fails the rendezvous for good; a stale generation's answer is nothing", () => {
    const asked = play([E.Begin({ world: [0, 1], preferred: [] }), joined(0), joined(1)]).state
    expect(play([E.IdFailed({ generation: 5, reason: "late" }), E.IdFailed({ generation: 0, reason: "rank 0 could not make an NCCL unique id: no GPU" }), joined(0, "L0b")], asked).steps).toEqual([
      [],
      ["failed: the NCCL rendezvous failed: rank 0 could not make an NCCL unique id: no GPU"],
      ["close L0", "listen L0b for rank 0"]
    ])
  })
})

describe("membership changes", () => {
  test("a death dissolves the generation; the survivors on the same links may shrink it", () => {
    expect(play([E.Lose({ ranks: [1, 8], reason: "rank 1 exited with status 3" }), E.IdProvided({ generation: 1, id: id(8) })], formedOfThree()).steps).toEqual([
      ["close L1", "dissolve 0 [0,1,2]: rank 1 exited with status 3", "ask rank 2 for generation 1's id"],
      ["ready 1 [0,2] id 8 from 2, shrinks 0 less [1]"]
    ])
  })

  test("a restart (the same rank on a new link) dissolves it too, and the next generation is built anew, not shrunk", () => {
    const { state, steps } = play([E.LinkEnded({ rank: 0, link: "L0" }), joined(0, "L0b"), E.IdProvided({ generation: 1, id: id(9) })], formedOfThree())
    expect(steps).toEqual([
      ["dissolve 0 [0,1,2]: rank 0 left"],
      ["listen L0b for rank 0", "ask rank 2 for generation 1's id"],
      ["ready 1 [0,1,2] id 9 from 2"]
    ])
    // The old link's end, heard late, is no one's.
    expect(play([E.LinkEnded({ rank: 0, link: "L0" })], state).steps).toEqual([[]])
  })

  test("someone leaving while the id is made: that generation is stillborn, and the next one starts", () => {
    const asked = play([E.Begin({ world: [0, 1, 2], preferred: [] }), joined(0), joined(1), joined(2)]).state
    expect(play([E.Lose({ ranks: [2], reason: "rank 2 lost" }), E.IdProvided({ generation: 0, id: id(1) }), E.IdProvided({ generation: 1, id: id(2) })], asked).steps).toEqual([
      ["close L2", "ask rank 0 for generation 1's id"],
      [],
      ["ready 1 [0,1] id 2 from 0"]
    ])
  })
})

describe("growth", () => {
  test("an admitted rank may dial in and waits; at its boundary the cohort re-forms with it; one that never dials in is absent", () => {
    const { state, steps } = play([E.Admit({ ranks: [3, 4] }), joined(3), E.Grow({ ranks: [3, 4, 6] }), E.AbsenceDue({ ranks: [3, 4] })], formedOfThree())
    expect(steps).toEqual([
      [],
      ["listen L3 for rank 3"],
      ["dissolve 0 [0,1,2]: rank(s) 3, 4 joined", "watch [3,4] for absence"],
      ["absent [4]"]
    ])
    // Rank 4 holds every generation back until it is lost.
    expect(play([E.Lose({ ranks: [4], reason: "did not join" }), E.IdProvided({ generation: 1, id: id(3) })], state).steps).toEqual([
      ["ask rank 2 for generation 1's id"],
      ["ready 1 [0,1,2,3] id 3 from 2"]
    ])
  })

  test("growing ranks that were never admitted changes nothing", () => {
    expect(play([E.Grow({ ranks: [7] })], formedOfThree()).steps).toEqual([[]])
  })
})

describe("what a generation is made of", () => {
  test("members are in ascending order whatever order the world came in", () => {
    expect(play([E.Begin({ world: [2, 0, 1], preferred: [] }), joined(2), joined(0), joined(1), E.IdProvided({ generation: 0, id: id(4) })]).steps.at(-1)).toEqual(["ready 0 [0,1,2] id 4 from 0"])
  })

  test("a rank entering while the id is made: that generation is stillborn, the next one has it", () => {
    const asked = play([E.Begin({ world: [0, 1], preferred: [] }), joined(0), joined(1), E.Admit({ ranks: [3] }), joined(3)]).state
    expect(play([E.Grow({ ranks: [3] }), E.IdProvided({ generation: 0, id: id(1) }), E.IdProvided({ generation: 1, id: id(2) })], asked).steps).toEqual([
      ["ask rank 0 for generation 1's id", "watch [3] for absence"],
      [],
      ["ready 1 [0,1,3] id 2 from 0"]
    ])
  })

  test("a member's link ending while the id is made waits for it to come back; then the next generation starts", () => {
    const asked = play([E.Begin({ world: [0, 1], preferred: [] }), joined(0), joined(1)]).state
    expect(play([E.LinkEnded({ rank: 1, link: "L1" }), joined(1, "L1b"), E.IdProvided({ generation: 1, id: id(5) })], asked).steps).toEqual([
      [],
      ["listen L1b for rank 1", "ask rank 0 for generation 1's id"],
      ["ready 1 [0,1] id 5 from 0"]
    ])
  })

  test("after a failure nothing starts again, whoever joins", () => {
    const asked = play([E.Begin({ world: [0], preferred: [] }), joined(0)]).state
    expect(play([E.IdFailed({ generation: 0, reason: "no GPU" }), E.Admit({ ranks: [1] }), joined(1), E.Grow({ ranks: [1] })], asked).steps).toEqual([
      ["failed: the NCCL rendezvous failed: no GPU"],
      [],
      ["listen L1 for rank 1"],
      ["watch [1] for absence"]
    ])
  })
})

