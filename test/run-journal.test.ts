/**
 * The RunJournal: events move the view, go to the --events file (all but
 * the view-only ones) and to the listener, in the order they were recorded,
 * whether one at a time or gathered in a burst (`recordSoon`).
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as RunJournal from "../src/launcher/view/RunJournal.ts"
import type * as RunView from "../src/launcher/view/RunView.ts"
import { effect, eventually } from "./support/effect.ts"

const formed: RunView.RunEvent = {
  event: "world_formed",
  at: 1,
  world: 4,
  hosts: [{ host: "a", ranks: [0, 1], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] }, { host: "b", ranks: [2, 3], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] }]
}

describe("RunJournal", () => {
  effect.live("a burst is gathered, then recorded in order before anything recorded after it; readers see it all", () =>
    Effect.gen(function*() {
      const eventsFile = join(mkdtempSync(join(tmpdir(), "cohort-journal-")), "events.jsonl")
      const told: Array<{ event: string; running: number }> = []
      const journal = yield* RunJournal.make({
        run: "journal",
        eventsFile,
        onEvent: (event, state) => Effect.sync(() => told.push({ event: event.event, running: state.ranks.filter((rank) => rank.state === "running").length }))
      })
      yield* journal.record(formed)
      for (const rank of [0, 1, 2]) yield* journal.recordSoon({ event: "rank_started", at: 2 + rank, rank, pid: 100 + rank })
      // Gathered, not yet told: the burst goes out once the fibers already waiting have run.
      expect(told.map(({ event }) => event)).toEqual(["world_formed"])
      // A plain record takes the burst first.
      yield* journal.record({ event: "rank_exited", at: 9, rank: 1, exit: "status 0", clean: true })
      expect(told.map(({ event }) => event)).toEqual(["world_formed", "rank_started", "rank_started", "rank_started", "rank_exited"])
      // The burst's events are told with the state after all of them.
      expect(told.slice(1, 4).map(({ running }) => running)).toEqual([3, 3, 3])
      yield* journal.recordSoon({ event: "rank_started", at: 10, rank: 3, pid: 103 })
      // Reading the state takes the burst too.
      const state = yield* journal.state
      expect(state.ranks.map((rank) => rank.state)).toEqual(["running", "exited", "running", "running"])
      const lines = readFileSync(eventsFile, "utf8").trim().split("\n").map((line) => (JSON.parse(line) as RunView.RunEvent).event)
      expect(lines).toEqual(["world_formed", "rank_started", "rank_started", "rank_started", "rank_exited", "rank_started"])
    }))

  effect.live("an event stamped before the last line but recorded after it is said as of that line in the file", () =>
    Effect.gen(function*() {
      const eventsFile = join(mkdtempSync(join(tmpdir(), "cohort-journal-")), "events.jsonl")
      const journal = yield* RunJournal.make({ run: "journal", eventsFile })
      yield* journal.record(formed)
      yield* journal.record({ event: "rank_exited", at: 30, rank: 1, exit: "signal SIGKILL", clean: false })
      // As the coordinator's epoch_done does: heard at 20, through its mailbox after the exit was recorded.
      yield* journal.record({ event: "epoch_done", at: 20, epoch: 1, epochs: 2, seconds: 1, samples: 100, metrics: {} })
      yield* journal.record({ event: "rank_exited", at: 40, rank: 0, exit: "status 0", clean: true })
      const lines = readFileSync(eventsFile, "utf8").trim().split("\n").map((line) => JSON.parse(line) as RunView.RunEvent)
      expect(lines.map((line) => [line.event, line.at])).toEqual([["world_formed", 1], ["rank_exited", 30], ["epoch_done", 30], ["rank_exited", 40]])
    }))

  effect.live("a burst nobody reads after is recorded on its own, shortly", () =>
    Effect.gen(function*() {
      const told: Array<string> = []
      const journal = yield* RunJournal.make({ run: "journal", onEvent: (event) => Effect.sync(() => told.push(event.event)) })
      yield* journal.record(formed)
      yield* journal.recordSoon({ event: "rank_started", at: 2, rank: 0, pid: 100 })
      expect(told).toEqual(["world_formed"])
      // Nothing else happens in this run: the burst goes out by itself (a journal that waited for a reader
      // would leave it gathered until the deadline).
      yield* eventually(Effect.sync(() => told.length > 1), "the burst recorded by itself", 2_000)
      expect(told).toEqual(["world_formed", "rank_started"])
    }))
})
