/**
 * Membership against a reference model: random worlds and random event
 * sequences (ranks running, starting and exiting, restarts under new numbers,
 * silences, agents ending, hosts joining or coming back, losses), each step
 * checked against a small model written here with plain mutable maps and
 * arrays, from the rules in Membership.ts's header rather than its code.
 *
 * Checked after every step: the effects said (the cohort's formation once, at
 * the right step; each host given up on once per time it joined; each host
 * admitted; each restart's old and new number; each number leaving once, by
 * whichever loss or give-up came first), the world's
 * size, every number's host, device and seat, its last pid and every exit (before
 * formation and after it), each seat's current number, the
 * ranks each host's relay speaks for, the live hosts, the losses, and the
 * cohort's inventory (each host's device slots over all its joins, with every
 * number each slot's ranks ran as).
 */
import { expect, test } from "bun:test"
import * as HashSet from "effect/HashSet"
import fc from "fast-check"
import {
  empty,
  hostOf,
  inventoryOf,
  liveHosts,
  membership,
  type MembershipEffect,
  MembershipEvent,
  type MembershipState,
  numberOf,
  recordOf,
  rankRecords,
  ranksByHost,
  seatOf
} from "../src/launcher/membership/Membership.ts"

/** The model: what a careful person would keep on paper. */
class Paper {
  world = 0
  /** Every join, in order: host, ranks, devices and their labels. */
  joins: Array<{ host: string; ranks: Array<number>; devices: Array<string>; labels: Array<string> }> = []
  /** number → [host, device, seat] */
  numbers = new Map<number, [string, string, number]>()
  /** seat → every number it ran as, in order (its own first). */
  runsAs = new Map<number, Array<number>>()
  gone = new Set<string>()
  silent = new Set<number>()
  /** Numbers that left the world: lost, given up on, or replaced by a restart. */
  left = new Set<number>()
  ranUserCode = new Set<number>()
  formedRanks: Array<number> = []
  cohortSaid = false
  lost: Array<{ ranks: ReadonlyArray<number>; cause: string }> = []
  /** number → its last incarnation's pid (none before it starts), and how each incarnation ended, oldest first. */
  pids = new Map<number, number | null>()
  exits = new Map<number, Array<string>>()
  next = 0

  /** A number new to the run: no pid yet, no exits. */
  fresh(rank: number) {
    this.pids.set(rank, null)
    this.exits.set(rank, [])
  }

  join(host: string, count: number) {
    const ranks = Array.from({ length: count }, () => this.next++)
    const devices = ranks.map((_, slot) => `${host}-d${slot}`)
    const labels = ranks.map((_, slot) => `${host} GPU ${slot}`)
    this.joins.push({ host, ranks, devices, labels })
    ranks.forEach((rank, slot) => {
      this.numbers.set(rank, [host, devices[slot]!, rank])
      this.runsAs.set(rank, [rank])
      this.fresh(rank)
    })
    this.world += count
    this.gone.delete(host)
    return { host, ranks, devices, labels }
  }

  current(seat: number) {
    const all = this.runsAs.get(seat)
    return all === undefined ? seat : all[all.length - 1]!
  }

  latest(host: string) {
    for (let i = this.joins.length - 1; i >= 0; i--) if (this.joins[i]!.host === host) return this.joins[i]
    return undefined
  }
}

type Step =
  | { readonly kind: "running" | "started" | "exited" | "lost" | "givenUp"; readonly pick: number }
  | { readonly kind: "renumber"; readonly pick: number }
  | { readonly kind: "silent"; readonly picks: ReadonlyArray<number> }
  | { readonly kind: "ended"; readonly pick: number }
  | { readonly kind: "joined"; readonly pick: number; readonly count: number }

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant("running" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constantFrom("started" as const, "exited" as const, "lost" as const, "givenUp" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("renumber" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("silent" as const), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("ended" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("joined" as const), pick: fc.nat(), count: fc.integer({ min: 1, max: 3 }) }) }
)

const hostNames = ["a", "b", "c", "d", "e"]

const said = (effects: ReadonlyArray<MembershipEffect>) =>
  effects.map((effect) => {
    switch (effect._tag) {
      case "HostGone":
        return `gone ${effect.host}`
      case "CohortFormed":
        return "formed"
      case "HostAdmitted":
        return `admitted ${effect.entry.host} ${effect.entry.ranks.join(",")} of ${effect.world}`
      case "RanksLeft":
        return `left ${effect.ranks.join(",")}: ${effect.cause}`
      case "SeatRenumbered":
        return `seat ${effect.seat}: ${effect.old} -> ${effect.rank} on ${effect.host}/${effect.device} of ${effect.world}`
    }
  })

test("membership follows the paper model, step by step", () => {
  let formedSeen = 0
  let goneSeen = 0
  let renumberedSeen = 0
  let leftSeen = 0
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 4 }),
      fc.array(stepArb, { maxLength: 60 }),
      (sizes, steps) => {
        const paper = new Paper()
        const hosts = sizes.map((count, index) => paper.join(hostNames[index]!, count))
        paper.formedRanks = hosts.flatMap((host) => host.ranks)
        let [, state] = membership(empty, MembershipEvent.WorldFormed({ hosts }))
        const numbersEver = () => [...paper.numbers.keys()]
        for (const step of steps) {
          const expected: Array<string> = []
          let event: MembershipEvent
          switch (step.kind) {
            case "running": {
              const rank = numbersEver()[step.pick % paper.numbers.size]!
              event = MembershipEvent.RankRunning({ rank })
              const wasComplete = paper.formedRanks.every((each) => paper.ranUserCode.has(each))
              paper.ranUserCode.add(rank)
              if (!wasComplete && paper.formedRanks.every((each) => paper.ranUserCode.has(each)) && !paper.cohortSaid) {
                paper.cohortSaid = true
                expected.push("formed")
              }
              break
            }
            case "started": {
              // Before formation or after it, a start is kept: the last pid is the number's.
              const rank = numbersEver()[step.pick % paper.numbers.size]!
              const pid = 1_000 + step.pick
              event = MembershipEvent.RankStarted({ rank, pid })
              paper.pids.set(rank, pid)
              break
            }
            case "exited": {
              // Every exit is kept, after formation too, oldest first.
              const rank = numbersEver()[step.pick % paper.numbers.size]!
              const exit = step.pick % 2 === 0 ? `status ${step.pick % 4}` : "signal SIGKILL"
              event = MembershipEvent.RankExited({ rank, exit })
              paper.exits.get(rank)!.push(exit)
              break
            }
            case "lost": {
              const ranks = [numbersEver()[step.pick % paper.numbers.size]!]
              event = MembershipEvent.RanksLost({ ranks, cause: `cause ${step.pick}` })
              paper.lost.push({ ranks, cause: `cause ${step.pick}` })
              if (!paper.left.has(ranks[0]!)) {
                paper.left.add(ranks[0]!)
                expected.push(`left ${ranks[0]}: cause ${step.pick}`)
                leftSeen++
              }
              break
            }
            case "givenUp": {
              const rank = numbersEver()[step.pick % paper.numbers.size]!
              event = MembershipEvent.RanksGivenUp({ ranks: [rank], reason: `given up ${step.pick}` })
              if (!paper.left.has(rank)) {
                paper.left.add(rank)
                expected.push(`left ${rank}: given up ${step.pick}`)
              }
              break
            }
            case "renumber": {
              const seats = [...paper.runsAs.keys()]
              const seat = seats[step.pick % seats.length]!
              const rank = paper.next++
              event = MembershipEvent.Renumbered({ seat, rank })
              const [host, device] = paper.numbers.get(seat)!
              const old = paper.current(seat)
              paper.left.add(old)
              paper.numbers.set(rank, [host, device, seat])
              paper.runsAs.get(seat)!.push(rank)
              paper.fresh(rank)
              paper.world += 1
              expected.push(`seat ${seat}: ${old} -> ${rank} on ${host}/${device} of ${paper.world}`)
              renumberedSeen++
              break
            }
            case "silent": {
              const ranks = step.picks.map((pick) => numbersEver()[pick % paper.numbers.size]!)
              event = MembershipEvent.RanksSilent({ ranks, why: "silent" })
              ranks.forEach((rank) => paper.silent.add(rank))
              // Each host (by its latest join) all of whose seats are silent under their current numbers goes, once.
              for (const join of paper.joins) {
                if (paper.latest(join.host) !== join || paper.gone.has(join.host)) continue
                if (join.ranks.every((seat) => paper.silent.has(paper.current(seat)))) {
                  paper.gone.add(join.host)
                  expected.push(`gone ${join.host}`)
                }
              }
              break
            }
            case "ended": {
              const host = hostNames[step.pick % hostNames.length]!
              event = MembershipEvent.HostEnded({ host, why: "ended" })
              if (paper.latest(host) !== undefined && !paper.gone.has(host)) {
                paper.gone.add(host)
                expected.push(`gone ${host}`)
              }
              break
            }
            case "joined": {
              const host = hostNames[step.pick % hostNames.length]!
              const entry = paper.join(host, step.count)
              event = MembershipEvent.HostJoined({ host: entry })
              expected.push(`admitted ${host} ${entry.ranks.join(",")} of ${paper.world}`)
              break
            }
          }
          const [effects, next] = membership(state, event)
          state = next
          expect(said(effects)).toEqual(expected)
          formedSeen += expected.filter((each) => each === "formed").length
          goneSeen += expected.filter((each) => each.startsWith("gone ")).length
          compare(state, paper)
        }
      }
    ),
    { seed: 20_261_202, numRuns: 400 }
  )
  // The runs reach every interesting case.
  expect(formedSeen).toBeGreaterThan(20)
  expect(goneSeen).toBeGreaterThan(20)
  expect(renumberedSeen).toBeGreaterThan(20)
  expect(leftSeen).toBeGreaterThan(20)
})

const compare = (state: MembershipState, paper: Paper) => {
  expect(state.world).toBe(paper.world)
  expect(state.cohortFormed).toBe(paper.cohortSaid)
  expect(state.lost).toEqual(paper.lost)
  const numbers = [...paper.numbers.keys()].sort((a, b) => a - b)
  expect(rankRecords(state).map(([rank, record]) => [rank, record.host, record.device, record.seat])).toEqual(
    numbers.map((rank) => [rank, ...paper.numbers.get(rank)!])
  )
  expect(rankRecords(state).map(([rank, record]): Array<unknown> => [rank, record.pid, record.exits])).toEqual(
    numbers.map((rank) => [rank, paper.pids.get(rank)!, paper.exits.get(rank)!])
  )
  for (const rank of numbers) {
    expect(hostOf(state, rank)).toBe(paper.numbers.get(rank)![0])
    expect(seatOf(state, rank)).toBe(paper.numbers.get(rank)![2])
  }
  for (const seat of paper.runsAs.keys()) expect(numberOf(state, seat)).toBe(paper.current(seat))
  // Each number a seat ran as replaces the one before it on the paper; the seat's own number replaces none.
  for (const numbers of paper.runsAs.values()) {
    expect(numbers.map((rank) => recordOf(state, rank)?.replaces)).toEqual(numbers.map((_, at) => at === 0 ? null : numbers[at - 1]))
  }
  // A relay speaks for its host's latest ranks and every number their seats ran as since.
  const relays = new Map<string, Array<number>>()
  for (const join of paper.joins) relays.set(join.host, [...join.ranks])
  for (const [host, ranks] of relays) {
    const seats = paper.latest(host)!.ranks
    ranks.push(...seats.flatMap((seat) => paper.runsAs.get(seat)!.slice(1)).sort((a, b) => a - b))
  }
  expect(new Map(ranksByHost(state))).toEqual(relays)
  const firstSeen = [...new Set(paper.joins.map((join) => join.host))]
  expect(liveHosts(state)).toEqual(firstSeen.filter((host) => !paper.gone.has(host)))
  expect([...HashSet.values(state.gone)].sort()).toEqual([...paper.gone].sort())
  // The inventory: a host's slots over all its joins (a later join names a slot anew), each slot with every
  // number its seats ever ran as; hosts in the order they first joined.
  const inventory = new Map<string, Array<{ device: string; label: string; ranks: Array<number> }>>()
  for (const join of paper.joins) {
    const slots = inventory.get(join.host) ?? []
    join.ranks.forEach((seat, slot) => {
      const ranks = [...(slots[slot]?.ranks ?? []), ...paper.runsAs.get(seat)!].sort((a, b) => a - b)
      slots[slot] = { device: join.devices[slot]!, label: join.labels[slot]!, ranks }
    })
    inventory.set(join.host, slots)
  }
  expect(inventoryOf(state)).toEqual([...inventory].map(([host, devices]) => ({ host, devices })))
}
