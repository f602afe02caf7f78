/**
 * The shortcuts that keep a large world cheap (see bench/scale.ts) change no
 * result: the status board's cached JSON is `JSON.stringify` of the state,
 * RunView's by-index updates give what a scan gives, including for ranks
 * that are not numbered 0…n−1, a batch applied at once gives what its
 * events give one by one, and an encoded message is the same bytes
 * however often it is sent.
 */
import { describe, expect, test } from "bun:test"
import fc from "fast-check"
import * as RunView from "../src/launcher/view/RunView.ts"
import { stateJson } from "../src/launcher/view/StatusBoard.ts"
import * as Codec from "../src/wire/Codec.ts"
import { JoinMessage, WorldFormed } from "../src/wire/messages/JoinMessages.ts"

/** A world of `hosts` hosts with `per` ranks each; `shuffle` numbers the ranks out of 0…n−1 order. */
const world = (hosts: number, per: number, shuffle: boolean): RunView.RunEvent => ({
  event: "world_formed",
  at: 10,
  world: hosts * per,
  hosts: Array.from({ length: hosts }, (_, host) => ({
    host: `h${host}`,
    ranks: Array.from({ length: per }, (_, slot) => (shuffle ? 1000 - (host * per + slot) * 3 : host * per + slot)),
    devices: Array.from({ length: per }, (_, slot) => String(slot)),
    labels: Array.from({ length: per }, () => "NVIDIA H200")
  }))
})

const event = (ranks: ReadonlyArray<number>, hosts: number): fc.Arbitrary<RunView.RunEvent> => {
  const rank = fc.oneof(fc.constantFrom(...ranks), fc.integer({ min: 0, max: 2000 }))
  const host = fc.integer({ min: 0, max: hosts }).map((index) => `h${index}`)
  return fc.oneof(
    fc.record({ event: fc.constant("rank_started" as const), at: fc.nat(), rank, pid: fc.nat() }),
    fc.record({ event: fc.constant("rank_exited" as const), at: fc.nat(), rank, exit: fc.constantFrom("status 0", "signal SIGKILL"), clean: fc.boolean() }),
    fc.record(
      { event: fc.constant("rank_lost" as const), at: fc.nat(), ranks: fc.array(rank, { maxLength: 4 }), cause: fc.string(), kind: fc.constantFrom("exit", "oom"), rule: fc.string() },
      { requiredKeys: ["event", "at", "ranks", "cause"] }
    ),
    fc.record({ event: fc.constant("host_gone" as const), at: fc.nat(), host, reason: fc.string() }),
    fc.record({
      event: fc.constant("resources" as const),
      at: fc.nat(),
      host,
      samples: fc.array(fc.record({
        rank,
        cpu: fc.double({ min: 0, max: 8, noNaN: true }),
        rssBytes: fc.nat(),
        gpuMemoryBytes: fc.constant(null),
        gpuUtilization: fc.constant(null)
      }), { maxLength: 4 })
    }),
    fc.record({
      event: fc.constant("progress" as const),
      at: fc.nat(),
      epoch: fc.nat(),
      epochs: fc.nat(),
      samplesDone: fc.nat(),
      datasetSize: fc.nat(),
      samplesPerSec: fc.option(fc.double({ noNaN: true })),
      metrics: fc.dictionary(fc.string(), fc.double())
    })
  )
}

/** RunView's rank updates as they were before the by-index lookups: a scan of every rank for every event. */
const byScan = (state: RunView.RunState, next: RunView.RunEvent): RunView.RunState => {
  const withRank = (rank: number, change: (status: RunView.RankStatus) => RunView.RankStatus) =>
    state.ranks.map((status) => (status.rank === rank ? change(status) : status))
  // A rank that ends keeps its last sample aside (the deaths table's LAST RSS) and shows none.
  const ended = (rank: RunView.RankStatus): RunView.RankStatus => rank.resources === null ? rank : { ...rank, resources: null, lastResources: rank.resources }
  const stepped = ((): RunView.RunState => {
    switch (next.event) {
      case "rank_started":
        return {
          ...state,
          ranks: withRank(next.rank, (rank) => ({
            ...rank,
            ...(rank.lastResources == null ? {} : { lastResources: null }),
            pid: next.pid,
            state: "running",
            restarts: rank.startedAt === null ? rank.restarts : rank.restarts + 1,
            startedAt: next.at,
            endedAt: null,
            exit: rank.startedAt === null ? null : rank.exit
          }))
        }
      case "rank_exited":
        return { ...state, ranks: withRank(next.rank, (rank) => ({ ...ended(rank), state: next.clean ? "exited" : "dead", exit: next.exit, endedAt: next.at })) }
      case "rank_lost":
        return {
          ...state,
          ranks: state.ranks.map((rank) => (next.ranks.includes(rank.rank) && rank.state !== "exited" ? { ...ended(rank), state: "dead" } : rank)),
          deaths: [
            ...state.deaths,
            ...next.ranks.map((rank) => ({
              rank,
              host: state.ranks.find((status) => status.rank === rank)?.host ?? "?",
              cause: next.cause,
              at: next.at,
              kind: next.kind ?? null,
              rule: next.rule ?? null
            }))
          ],
          // Not rank updates: the world's size over time and the recovery figures are RunView's own (see
          // run-view.test.ts and recovery-figures.test.ts).
          worldSizes: RunView.apply(state, next).worldSizes,
          recovery: RunView.apply(state, next).recovery,
          effectiveTraining: RunView.apply(state, next).effectiveTraining
        }
      case "resources": {
        const byRank = new Map(next.samples.map((sample) => [sample.rank, sample]))
        return {
          ...state,
          ranks: state.ranks.map((rank) => {
            const sample = byRank.get(rank.rank)
            if (sample === undefined || rank.host !== next.host || rank.state === "exited" || rank.state === "dead") return rank
            const { rank: _, ...resources } = sample
            return { ...rank, resources: { ...resources, at: next.at } }
          })
        }
      }
      default:
        return RunView.apply(state, next)
    }
  })()
  return next.event === "rank_started" || next.event === "rank_exited" || next.event === "rank_lost" || next.event === "resources"
    ? { ...stepped, updatedAt: Math.max(state.updatedAt, next.at) }
    : stepped
}

describe("large-world shortcuts", () => {
  test("the board's cached JSON is exactly JSON.stringify of every state on the way", () => {
    for (const shuffle of [false, true]) {
      const started = RunView.apply(RunView.initial("demo", 0), { event: "run_started", at: 1, run: "demo", hosts: [{ host: "h0", ranks: 3 }, { host: "h1", ranks: 3 }] })
      const formed = RunView.apply(started, world(2, 3, shuffle))
      const ranks = formed.ranks.map((status) => status.rank)
      fc.assert(fc.property(fc.array(event(ranks, 2), { maxLength: 40 }), (events) => {
        let state = formed
        expect(stateJson(state)).toBe(JSON.stringify(state))
        for (const next of events) {
          state = RunView.apply(state, next)
          // Twice: the second time from the cache.
          expect(stateJson(state)).toBe(JSON.stringify(state))
          expect(stateJson(state)).toBe(JSON.stringify(state))
        }
      }), { numRuns: 200 })
    }
  })

  test("by-index updates give the same states as a scan, in order or not", () => {
    for (const shuffle of [false, true]) {
      const formed = RunView.apply(RunView.initial("demo", 0), world(3, 4, shuffle))
      const ranks = formed.ranks.map((status) => status.rank)
      fc.assert(fc.property(fc.array(event(ranks, 3), { maxLength: 40 }), (events) => {
        let fast = formed
        let slow = formed
        for (const next of events) {
          fast = RunView.apply(fast, next)
          slow = byScan(slow, next)
          expect(fast).toEqual(slow)
        }
      }), { numRuns: 200 })
    }
  })

  test("applyAll gives what applying one by one gives, and changes nothing it was given or had returned", () => {
    for (const shuffle of [false, true]) {
      const formed = RunView.apply(RunView.initial("demo", 0), world(3, 4, shuffle))
      const ranks = formed.ranks.map((status) => status.rank)
      fc.assert(fc.property(fc.array(fc.array(event(ranks, 3), { maxLength: 12 }), { maxLength: 5 }), (batches) => {
        let batched = formed
        let single = formed
        const seen: Array<{ state: RunView.RunState; json: string }> = [{ state: formed, json: JSON.stringify(formed) }]
        for (const batch of batches) {
          batched = RunView.applyAll(batched, batch)
          single = batch.reduce(RunView.apply, single)
          expect(batched).toEqual(single)
          seen.push({ state: batched, json: JSON.stringify(batched) })
        }
        // Every state handed out stays as it was when handed out: later batches copy before they write.
        for (const { json, state } of seen) expect(JSON.stringify(state)).toBe(json)
      }), { numRuns: 200 })
    }
  })

  test("a rank's update touches only that rank, found by index once formed", () => {
    const formed = RunView.apply(RunView.initial("demo", 0), world(2, 2, false))
    const started = RunView.apply(formed, { event: "rank_started", at: 20, rank: 2, pid: 7 })
    expect(started.ranks.map((rank) => rank.pid)).toEqual([null, null, 7, null])
    expect(started.ranks.filter((rank, index) => rank !== formed.ranks[index])).toHaveLength(1)
    // A sample for a rank of another host changes nothing, however it is found.
    const sampled = RunView.apply(started, { event: "resources", at: 30, host: "h0", samples: [{ rank: 2, cpu: 1, rssBytes: 1, gpuMemoryBytes: null, gpuUtilization: null }] })
    expect(sampled.ranks).toEqual(started.ranks)
  })

  test("a message sent to many peers is encoded once, to the same bytes", () => {
    const codec = Codec.make("join", JoinMessage)
    const message = new WorldFormed({ worldSize: 2, hosts: [{ host: "a", ranks: [0, 1] }], master: { addr: "127.0.0.1", port: 2 } })
    const first = codec.encode(message)
    expect(codec.encode(message)).toBe(first)
    const twin = codec.encode(new WorldFormed({ worldSize: 2, hosts: [{ host: "a", ranks: [0, 1] }], master: { addr: "127.0.0.1", port: 2 } }))
    expect(twin).not.toBe(first)
    expect([...twin.payload]).toEqual([...first.payload])
  })
})
