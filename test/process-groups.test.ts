/**
 * ProcessGroups.nextGroup against generations written out by hand: who is in, whose store leads, when nothing
 * is announced. (coordinate.table.test.ts checks when the coordinator asks, and to whom it sends the order.)
 */
import { describe, expect, test } from "bun:test"
import { announced, nextGroup, noGroups, withStore } from "../src/actors/launcher/ProcessGroups.ts"

const store = (port: number) => ({ addr: "10.0.0.9", port })
const withStores = (...ranks: ReadonlyArray<number>) => ranks.reduce((groups, rank) => withStore(groups, rank, store(7000 + rank)), noGroups)

describe("nextGroup", () => {
  test("the first group: generation 1, the candidates that brought a store, led from the lowest one's", () => {
    expect(nextGroup(withStores(1, 2, 3), [0, 1, 2, 3])).toEqual({ generation: 1, members: [1, 2, 3], store: store(7001) })
  })

  test("nothing to announce: no candidate brought a store, or the members are those announced", () => {
    expect(nextGroup(noGroups, [0, 1])).toBeUndefined()
    const groups = withStores(0, 1)
    const first = nextGroup(groups, [0, 1])!
    expect(nextGroup(announced(groups, first), [0, 1])).toBeUndefined()
  })

  test("each change is the next generation: a death (the leader's moves the store), a return with a new store", () => {
    let groups = withStores(0, 1, 2)
    groups = announced(groups, nextGroup(groups, [0, 1, 2])!)
    const afterDeath = nextGroup(groups, [1, 2])!
    expect(afterDeath).toEqual({ generation: 2, members: [1, 2], store: store(7001) })
    groups = withStore(announced(groups, afterDeath), 0, store(7100))
    expect(nextGroup(groups, [0, 1, 2])).toEqual({ generation: 3, members: [0, 1, 2], store: store(7100) })
  })

  test("as many members as before, but not the same ones (one left, one entered in the same step): a new generation", () => {
    let groups = withStores(0, 1, 2)
    groups = announced(groups, nextGroup(groups, [0, 1])!)
    expect(nextGroup(groups, [0, 2])).toEqual({ generation: 2, members: [0, 2], store: store(7000) })
  })

  test("every member lost: nothing is announced, and the generation count waits for the next group", () => {
    let groups = withStores(0)
    groups = announced(groups, nextGroup(groups, [0])!)
    expect(nextGroup(groups, [])).toBeUndefined()
    expect(nextGroup(withStore(groups, 4, store(7004)), [4])).toEqual({ generation: 2, members: [4], store: store(7004) })
  })
})
