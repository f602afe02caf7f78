/**
 * ProcessGroups.nextGroup against generations written out by hand: who is in, and when nothing is announced.
 * (coordinate.table.test.ts checks when the coordinator asks, and to whom it sends the order.)
 */
import { describe, expect, test } from "bun:test"
import { announced, keeping, nextGroup, noGroups } from "../src/launcher/training/ProcessGroups.ts"

const keepers = (...ranks: ReadonlyArray<number>) => ranks.reduce(keeping, noGroups)

describe("nextGroup", () => {
  test("the first group: generation 1, the candidates that keep groups", () => {
    expect(nextGroup(keepers(1, 2, 3), [0, 1, 2, 3])).toEqual({ generation: 1, members: [1, 2, 3] })
  })

  test("nothing to announce: no candidate keeps groups, or the members are those announced", () => {
    expect(nextGroup(noGroups, [0, 1])).toBeUndefined()
    const groups = keepers(0, 1)
    const first = nextGroup(groups, [0, 1])!
    expect(nextGroup(announced(groups, first), [0, 1])).toBeUndefined()
  })

  test("each change is the next generation: a death, then a return under a new number", () => {
    let groups = keepers(0, 1, 2)
    groups = announced(groups, nextGroup(groups, [0, 1, 2])!)
    const afterDeath = nextGroup(groups, [1, 2])!
    expect(afterDeath).toEqual({ generation: 2, members: [1, 2] })
    groups = keeping(announced(groups, afterDeath), 3)
    expect(nextGroup(groups, [1, 2, 3])).toEqual({ generation: 3, members: [1, 2, 3] })
  })

  test("as many members as before, but not the same ones (one left, one entered in the same step): a new generation", () => {
    let groups = keepers(0, 1, 2)
    groups = announced(groups, nextGroup(groups, [0, 1])!)
    expect(nextGroup(groups, [0, 2])).toEqual({ generation: 2, members: [0, 2] })
  })

  test("every member lost: nothing is announced, and the generation count waits for the next group", () => {
    let groups = keepers(0)
    groups = announced(groups, nextGroup(groups, [0])!)
    expect(nextGroup(groups, [])).toBeUndefined()
    expect(nextGroup(keeping(groups, 4), [4])).toEqual({ generation: 2, members: [4] })
  })

  test("a rank that says it keeps groups twice is one keeper (the state is unchanged)", () => {
    const groups = keepers(0, 1)
    expect(keeping(groups, 1)).toBe(groups)
    expect([...keeping(groups, 2).keepers]).toEqual([0, 1, 2])
  })
})
