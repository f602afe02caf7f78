/**
 * The rules of shrinking an NCCL communicator, as literal tables: NCCL's own
 * (which flag, and how the parent is released: from 2.31.2 a parent an
 * NCCL_SHRINK_ABORT shrink left must be aborted, since destroying it blocks
 * forever), the launcher's (when a generation is a shrink of the last one),
 * and the rank's (which NCCL ranks to exclude, or why it must not shrink).
 * The stand-in NCCL runs them end to end in nccl-rendezvous.e2e.test.ts.
 */
import { describe, expect, test } from "bun:test"
import { shrinkOf } from "../src/launcher/front/RendezvousGate.ts"
import type { NcclMembership } from "../src/rank/RankContext.ts"
import { shrinkPlan } from "../src/rank/ShrinkPlan.ts"
import { parentRelease, shrinkFlag, type ShrinkFlag } from "../src/native/ShrinkRules.ts"

describe("parentRelease: how survivors let go of the parent after a shrink", () => {
  test.each([
    // version, flag, release
    [22700, "default", "destroy"],
    [22700, "abort", "destroy"],
    [23101, "abort", "destroy"],
    [23102, "abort", "abort"],
    [23102, "default", "destroy"],
    [23103, "abort", "abort"],
    [23200, "abort", "abort"],
    [30000, "abort", "abort"],
    [30000, "default", "destroy"]
  ] as const)("NCCL %p after a %p shrink: %p", (version, flag, release) => {
    expect(parentRelease(version, flag)).toBe(release)
  })
})

describe("shrinkFlag: NCCL_SHRINK_ABORT when the parent saw an error", () => {
  test.each([
    // the parent's asynchronous error, the flag
    [0, "default"],
    [7, "default"], // ncclInProgress: still initialising, no failure
    [6, "abort"], // ncclRemoteError: a peer failed
    [2, "abort"], // ncclSystemError
    [undefined, "abort"] // the error could not be asked: assume the worst
  ] as const)("async error %p: %p", (code, flag: ShrinkFlag) => {
    expect(shrinkFlag(code)).toBe(flag)
  })
})

describe("RendezvousGate.shrinkOf: a generation that is the last one less those who left", () => {
  // Links stand for processes: rank 2 came back as a new process ("c2").
  const parent = { generation: 4, members: [0, 1, 2, 3], links: new Map([[0, "a"], [1, "b"], [2, "c"], [3, "d"]]) }
  test.each([
    // members, their links now, shrinkOf: why
    [[0, 2, 3], [[0, "a"], [2, "c"], [3, "d"]], { generation: 4, left: [1] }, "one death"],
    [[2], [[2, "c"]], { generation: 4, left: [0, 1, 3] }, "a lone survivor"],
    [[0, 1, 2, 3], [[0, "a"], [1, "b"], [2, "c2"], [3, "d"]], undefined, "a restart: nobody left, rank 2 is a new process"],
    [[0, 1, 3], [[0, "a"], [1, "b"], [3, "d"], [2, "c2"]], { generation: 4, left: [2] }, "rank 2 died; its new process, not a member yet, does not matter"],
    [[0, 2, 3], [[0, "a"], [2, "c2"], [3, "d"]], undefined, "a death and a restart at once: rank 2 holds no parent"],
    [[0, 1, 2, 3, 4], [[0, "a"], [1, "b"], [2, "c"], [3, "d"], [4, "e"]], undefined, "growth: rank 4 entered"],
    [[0, 2, 5], [[0, "a"], [2, "c"], [5, "f"]], undefined, "a death and a newcomer"],
    [[0, 1, 2, 3], [[0, "a"], [1, "b"], [2, "c"], [3, "d"]], undefined, "the same world (a stillborn generation re-forming)"]
  ] as const)("members %p on %p: %p (%s)", (members, links, expected) => {
    expect(shrinkOf(parent, members, new Map<number, string>(links))).toEqual(expected)
  })

  test("the first generation has no parent", () => {
    expect(shrinkOf(undefined, [0, 1], new Map([[0, "a"], [1, "b"]]))).toBeUndefined()
  })
})

describe("shrinkPlan: the NCCL ranks a survivor excludes, or why it must not shrink", () => {
  const membership = (generation: number, members: ReadonlyArray<number>, rank: number, shrink?: NcclMembership["shrinkOf"]): NcclMembership => ({
    generation,
    id: new Uint8Array(128),
    members,
    rank: members.indexOf(rank),
    worldSize: members.length,
    shrinkOf: shrink
  })
  const parent = membership(3, [0, 2, 5, 7, 9], 5)
  test.each([
    // the next generation's members, its shrinkOf, the plan
    [[0, 5, 7, 9], { generation: 3, left: [2] }, { _tag: "Shrink", excluded: [1] }],
    [[5, 9], { generation: 3, left: [7, 0, 2] }, { _tag: "Shrink", excluded: [0, 1, 3] }],
    [[0, 2, 5, 7], { generation: 3, left: [9] }, { _tag: "Shrink", excluded: [4] }],
    [[0, 5, 7, 9], undefined, { _tag: "Refused", reason: "generation 4 is not a shrink of an earlier one" }],
    [[0, 5, 7, 9], { generation: 2, left: [2] }, { _tag: "Refused", reason: "generation 4 shrinks generation 2, this rank holds generation 3's communicator" }],
    [[0, 5, 7, 9], { generation: 3, left: [] }, { _tag: "Refused", reason: "generation 4 names nobody who left generation 3" }],
    [[0, 5, 7, 9], { generation: 3, left: [2, 4] }, { _tag: "Refused", reason: "rank(s) 4 left generation 3 without being members (0,2,5,7,9)" }],
    [[0, 5, 7, 9], { generation: 3, left: [2, 2] }, { _tag: "Refused", reason: "generation 4 names a rank that left twice (2,2)" }],
    [[0, 5, 9], { generation: 3, left: [2] }, { _tag: "Refused", reason: "generation 4's members (0,5,9) are not generation 3's (0,2,5,7,9) less those who left (2)" }],
    [[0, 5, 7, 8, 9], { generation: 3, left: [2] }, { _tag: "Refused", reason: "generation 4's members (0,5,7,8,9) are not generation 3's (0,2,5,7,9) less those who left (2)" }]
  ] as const)("members %p, shrinkOf %p: %p", (members, shrink, plan) => {
    expect(shrinkPlan(parent, membership(4, members, 5, shrink))).toEqual(plan)
  })
})
