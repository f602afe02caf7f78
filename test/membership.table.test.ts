/**
 * Membership by worked examples: every expected value is written out by hand
 * from the rules in Membership.ts's header. The random runs against a
 * reference model are in membership.property.test.ts.
 *
 * The world used throughout: host `a` with ranks 0 and 1 (GPUs 0 and 1, an
 * H200 and an A100), host `b` with rank 2 (cpu).
 */
import { describe, expect, test } from "bun:test"
import * as HashSet from "effect/HashSet"
import {
  empty,
  hostOf,
  inventoryOf,
  latestEntry,
  liveHosts,
  membership,
  MembershipEvent,
  type MembershipEffect,
  type MembershipState,
  numberOf,
  rankRecords,
  ranksByHost,
  recordOf,
  seatOf
} from "../src/launcher/membership/Membership.ts"

const formed = (): MembershipState =>
  membership(empty, MembershipEvent.WorldFormed({
    hosts: [{ host: "a", ranks: [0, 1], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA A100"] }, { host: "b", ranks: [2], devices: ["cpu"], labels: ["cpu"] }]
  }))[1]

/** An effect in words, every field in it: the tables below read as what membership says. */
const told = (effect: MembershipEffect): string => {
  switch (effect._tag) {
    case "CohortFormed":
      return "CohortFormed"
    case "HostGone":
      return `HostGone ${effect.host}: ${effect.why}`
    case "HostAdmitted":
      return `HostAdmitted ${effect.entry.host} [${effect.entry.ranks}] on [${effect.entry.devices}] (${effect.entry.labels.join(", ")}), world ${effect.world}`
    case "RanksLeft":
      return `RanksLeft [${effect.ranks}]: ${effect.cause}`
    case "SeatRenumbered":
      return `SeatRenumbered seat ${effect.seat}: ${effect.old} -> ${effect.rank} on ${effect.host}/${effect.device} (${effect.label}), world ${effect.world}`
  }
}

/** Apply events in order; every step's effects, in words, and the final state. */
const play = (start: MembershipState, events: ReadonlyArray<MembershipEvent>) => {
  const said: Array<Array<string>> = []
  let state = start
  for (const event of events) {
    const [effects, next] = membership(state, event)
    said.push(effects.map(told))
    state = next
  }
  return { said, state }
}

const running = (rank: number) => MembershipEvent.RankRunning({ rank })

describe("formation and the cohort", () => {
  test("the formed world: 3 ranks, each on its host and device, every one its own seat", () => {
    const state = formed()
    expect([state.world, state.formedWith, state.cohortFormed]).toEqual([3, 3, false])
    expect(rankRecords(state)).toEqual([
      [0, { host: "a", device: "0", label: "NVIDIA H200", seat: 0, pid: null, exits: [], replaces: null }],
      [1, { host: "a", device: "1", label: "NVIDIA A100", seat: 1, pid: null, exits: [], replaces: null }],
      [2, { host: "b", device: "cpu", label: "cpu", seat: 2, pid: null, exits: [], replaces: null }]
    ])
    expect([...ranksByHost(state)]).toEqual([["a", [0, 1]], ["b", [2]]])
    expect(liveHosts(state)).toEqual(["a", "b"])
  })

  test("the cohort forms once, when the last of the formed ranks first runs user code", () => {
    const { said, state } = play(formed(), [running(1), running(1), running(0), running(2), running(2), running(0)])
    expect(said).toEqual([[], [], [], ["CohortFormed"], [], []])
    expect(state.cohortFormed).toBe(true)
  })

  test("ranks that joined later never hold the cohort back, nor form it", () => {
    const { said } = play(formed(), [
      MembershipEvent.HostJoined({ host: { host: "c", ranks: [3], devices: ["0"], labels: ["NVIDIA H200"] } }),
      running(3),
      running(0),
      running(1),
      running(2)
    ])
    expect(said).toEqual([["HostAdmitted c [3] on [0] (NVIDIA H200), world 4"], [], [], [], ["CohortFormed"]])
  })

  test("a slot the host named no device for shows as ?", () => {
    const [, state] = membership(empty, MembershipEvent.WorldFormed({ hosts: [{ host: "a", ranks: [0, 1], devices: ["0"], labels: ["NVIDIA H200"] }] }))
    expect(rankRecords(state).map(([, record]) => [record.device, record.label])).toEqual([["0", "NVIDIA H200"], ["?", "?"]])
  })

  test("a number the run never had changes nothing", () => {
    const before = formed()
    const { said, state } = play(before, [running(9), MembershipEvent.RankStarted({ rank: 9, pid: 1 }), MembershipEvent.RankExited({ rank: 9, exit: "status 0" })])
    expect(said).toEqual([[], [], []])
    expect(rankRecords(state)).toEqual(rankRecords(before))
  })

  test("starts and exits are kept per number: the last pid, every exit oldest first", () => {
    const { state } = play(formed(), [
      MembershipEvent.RankStarted({ rank: 1, pid: 100 }),
      MembershipEvent.RankExited({ rank: 1, exit: "signal SIGKILL" }),
      MembershipEvent.RankStarted({ rank: 1, pid: 200 }),
      MembershipEvent.RankExited({ rank: 1, exit: "status 0" })
    ])
    expect(recordOf(state, 1)).toEqual({ host: "a", device: "1", label: "NVIDIA A100", seat: 1, pid: 200, exits: ["signal SIGKILL", "status 0"], replaces: null })
  })
})

describe("restarts under new numbers", () => {
  test("each restart says which number died, the new one, and where it runs; a number in use or a seat never had says nothing", () => {
    const { said } = play(formed(), [
      MembershipEvent.Renumbered({ seat: 1, rank: 3 }),
      MembershipEvent.Renumbered({ seat: 1, rank: 5 }),
      MembershipEvent.Renumbered({ seat: 2, rank: 6 }),
      MembershipEvent.Renumbered({ seat: 0, rank: 5 }),
      MembershipEvent.Renumbered({ seat: 9, rank: 7 })
    ])
    expect(said).toEqual([
      ["SeatRenumbered seat 1: 1 -> 3 on a/1 (NVIDIA A100), world 4"],
      ["SeatRenumbered seat 1: 3 -> 5 on a/1 (NVIDIA A100), world 5"],
      ["SeatRenumbered seat 2: 2 -> 6 on b/cpu (cpu), world 6"],
      [],
      []
    ])
  })

  test("seat 1 restarts as 3, then as 5: each number is counted, traced to its seat, and spoken for by a's relay", () => {
    const { state } = play(formed(), [MembershipEvent.Renumbered({ seat: 1, rank: 3 }), MembershipEvent.Renumbered({ seat: 1, rank: 5 })])
    expect(state.world).toBe(5)
    expect([numberOf(state, 0), numberOf(state, 1), numberOf(state, 2)]).toEqual([0, 5, 2])
    expect([seatOf(state, 3), seatOf(state, 5), seatOf(state, 2)]).toEqual([1, 1, 2])
    expect([hostOf(state, 3), hostOf(state, 5)]).toEqual(["a", "a"])
    // The second restart replaces 3, the number the first one ran as, not the seat.
    expect(recordOf(state, 3)?.replaces).toBe(1)
    expect(recordOf(state, 5)).toEqual({ host: "a", device: "1", label: "NVIDIA A100", seat: 1, pid: null, exits: [], replaces: 3 })
    expect([...ranksByHost(state)]).toEqual([["a", [0, 1, 3, 5]], ["b", [2]]])
  })

  test("numbers far apart are still listed in order, and a number the run never had is its own seat", () => {
    const { state } = play(formed(), [MembershipEvent.Renumbered({ seat: 0, rank: 70_000 }), MembershipEvent.Renumbered({ seat: 2, rank: 1_024 })])
    expect(rankRecords(state).map(([rank]) => rank)).toEqual([0, 1, 2, 1_024, 70_000])
    expect([...ranksByHost(state)]).toEqual([["a", [0, 1, 70_000]], ["b", [2, 1_024]]])
    expect(seatOf(state, 42)).toBe(42)
  })

  test("a number already in use is not handed out twice", () => {
    const before = play(formed(), [MembershipEvent.Renumbered({ seat: 1, rank: 3 })]).state
    const { state } = play(before, [MembershipEvent.Renumbered({ seat: 0, rank: 3 })])
    expect([state.world, numberOf(state, 0), seatOf(state, 3)]).toEqual([4, 0, 1])
  })
})

describe("hosts given up on", () => {
  const silent = (...ranks: Array<number>) => MembershipEvent.RanksSilent({ ranks, why: "none of its ranks has beaten for 30000 ms" })

  test("a host goes when every one of its ranks is silent, by their current numbers, once", () => {
    const { said, state } = play(formed(), [
      MembershipEvent.Renumbered({ seat: 1, rank: 3 }),
      silent(0),
      silent(1), // the old number of seat 1: seat 1 now runs as 3
      silent(3),
      silent(0, 3),
      MembershipEvent.HostEnded({ host: "a", why: "the ssh session ended" })
    ])
    expect(said).toEqual([
      ["SeatRenumbered seat 1: 1 -> 3 on a/1 (NVIDIA A100), world 4"],
      [],
      [],
      ["HostGone a: none of its ranks has beaten for 30000 ms"],
      [],
      []
    ])
    expect(liveHosts(state)).toEqual(["b"])
    expect(HashSet.has(state.gone, "a")).toBe(true)
  })

  test("a host whose agent ended goes once; a host that never joined is no one's to give up", () => {
    const { said } = play(formed(), [
      MembershipEvent.HostEnded({ host: "b", why: "the ssh session ended" }),
      MembershipEvent.HostEnded({ host: "b", why: "again" }),
      MembershipEvent.HostEnded({ host: "z", why: "never joined" })
    ])
    expect(said).toEqual([["HostGone b: the ssh session ended"], [], []])
  })

  test("a host that comes back is in again, judged by its new ranks only, and can go again", () => {
    const { said, state } = play(formed(), [
      MembershipEvent.HostEnded({ host: "b", why: "cut off" }),
      MembershipEvent.HostJoined({ host: { host: "b", ranks: [3, 4], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] } }),
      silent(2), // b's old rank: not b's any more
      silent(3),
      silent(4)
    ])
    expect(said).toEqual([
      ["HostGone b: cut off"],
      ["HostAdmitted b [3,4] on [0,1] (NVIDIA H200, NVIDIA H200), world 5"],
      [],
      [],
      ["HostGone b: none of its ranks has beaten for 30000 ms"]
    ])
    expect(state.world).toBe(5)
    expect(latestEntry(state, "b")).toEqual({ host: "b", ranks: [3, 4], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] })
    expect([...ranksByHost(state)]).toEqual([["a", [0, 1]], ["b", [3, 4]]])
  })
})

describe("the cohort's inventory", () => {
  test("at formation: each host's device slots as they joined, labelled, each with its rank", () => {
    expect(inventoryOf(formed())).toEqual([
      { host: "a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0] }, { device: "1", label: "NVIDIA A100", ranks: [1] }] },
      { host: "b", devices: [{ device: "cpu", label: "cpu", ranks: [2] }] }
    ])
  })

  test("a restart's new numbers go on its seat's device; a late host is added after the others; a host that comes back adds to its slots", () => {
    const { state } = play(formed(), [
      MembershipEvent.Renumbered({ seat: 1, rank: 3 }),
      MembershipEvent.Renumbered({ seat: 1, rank: 4 }),
      MembershipEvent.HostJoined({ host: { host: "c", ranks: [5, 6], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] } }),
      MembershipEvent.HostEnded({ host: "b", why: "cut off" }),
      MembershipEvent.HostJoined({ host: { host: "b", ranks: [7], devices: ["cpu"], labels: ["cpu"] } }),
      MembershipEvent.Renumbered({ seat: 7, rank: 8 })
    ])
    expect(inventoryOf(state)).toEqual([
      { host: "a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0] }, { device: "1", label: "NVIDIA A100", ranks: [1, 3, 4] }] },
      { host: "b", devices: [{ device: "cpu", label: "cpu", ranks: [2, 7, 8] }] },
      { host: "c", devices: [{ device: "cpu", label: "cpu", ranks: [5] }, { device: "cpu", label: "cpu", ranks: [6] }] }
    ])
  })

  test("before formation there is none", () => {
    expect(inventoryOf(empty)).toEqual([])
  })
})

describe("losses", () => {
  test("every loss the policy reports is kept, in order", () => {
    const { state } = play(formed(), [
      MembershipEvent.RanksLost({ ranks: [2], cause: "rank 2 exited with status 3" }),
      MembershipEvent.RanksLost({ ranks: [0, 1], cause: "lost the agent of a" })
    ])
    expect(state.lost).toEqual([{ ranks: [2], cause: "rank 2 exited with status 3" }, { ranks: [0, 1], cause: "lost the agent of a" }])
  })
})

describe("ranks leave once, whichever way came first", () => {
  const lost = (ranks: Array<number>, cause: string) => MembershipEvent.RanksLost({ ranks, cause })
  const givenUp = (ranks: Array<number>, reason: string) => MembershipEvent.RanksGivenUp({ ranks, reason })

  test.each([
    ["a loss reported twice", [lost([2], "rank 2 exited with status 3"), lost([2], "again")], [["RanksLeft [2]: rank 2 exited with status 3"], []]],
    ["given up, then reported by the policy", [givenUp([0, 1], "silent for 30 s"), lost([1, 0], "rank 1 lost")], [["RanksLeft [0,1]: silent for 30 s"], []]],
    ["overlapping losses: only the new ones", [lost([0], "first"), lost([0, 2, 2], "second")], [["RanksLeft [0]: first"], ["RanksLeft [2]: second"]]],
    ["numbers the run never had", [lost([7], "never ours"), givenUp([8, 2], "absent")], [[], ["RanksLeft [2]: absent"]]],
    [
      "a restart's old number has left; its new one can leave later",
      [MembershipEvent.Renumbered({ seat: 1, rank: 3 }), lost([1], "late report of 1"), lost([3], "rank 3 exited with status 1")],
      [["SeatRenumbered seat 1: 1 -> 3 on a/1 (NVIDIA A100), world 4"], [], ["RanksLeft [3]: rank 3 exited with status 1"]]
    ],
    [
      "a host that came back: its new ranks can leave, its old ones have",
      [lost([2], "b cut off"), MembershipEvent.HostJoined({ host: { host: "b", ranks: [3], devices: ["cpu"], labels: ["cpu"] } }), lost([2, 3], "b again")],
      [["RanksLeft [2]: b cut off"], ["HostAdmitted b [3] on [cpu] (cpu), world 4"], ["RanksLeft [3]: b again"]]
    ]
  ] as const)("%s", (_, events, expected) => {
    expect(play(formed(), events).said).toEqual(expected.map((step) => [...step]))
  })

  test("silence alone is no leaving: the host goes, and its ranks leave when they are given up or lost", () => {
    const silent = MembershipEvent.RanksSilent({ ranks: [2], why: "none of its ranks has beaten for 30000 ms" })
    expect(play(formed(), [silent, givenUp([2], "silent")]).said).toEqual([["HostGone b: none of its ranks has beaten for 30000 ms"], ["RanksLeft [2]: silent"]])
  })
})
