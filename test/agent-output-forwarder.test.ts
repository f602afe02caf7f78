/**
 * A self-deployed agent's lines on their way to the launcher (OutputForwarder):
 * a burst goes as a few batches, not a message per line, in order; what
 * exceeds the queue's bound is dropped and counted in the next batch; a huge
 * line is cut; `flush` has sent everything queued before it returns; lines
 * go as the children printed them, terminal controls and all (the
 * launcher's console escapes them, or not with `--raw-output`). The
 * sender is a plain recorder (and, for back-pressure, one that waits until
 * the test lets it go).
 */
import { describe, expect } from "bun:test"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { defaultBounds, type ForwarderBounds, make } from "../src/agent/OutputForwarder.ts"
import type { RankOutput } from "../src/wire/messages/JoinMessages.ts"
import { effect, eventually } from "./support/effect.ts"

const recorder = () => {
  const sent: Array<RankOutput> = []
  return { sent, send: (message: RankOutput) => Effect.sync(() => void sent.push(message)) }
}

const shape = (sent: ReadonlyArray<RankOutput>) => sent.map((message) => ({ lines: message.lines.length, dropped: message.dropped }))

const bounds = (partial: Partial<ForwarderBounds>): ForwarderBounds => ({ ...defaultBounds, ...partial })

describe("the output forwarder", () => {
  effect.live("a burst of 2,500 lines goes as three batches of at most 1,000, in order, both streams interleaved", () =>
    Effect.gen(function*() {
      const { send, sent } = recorder()
      const forwarder = yield* make(send)
      for (let i = 0; i < 2_500; i++) forwarder.push(`[h:cpu:r0] line ${i}`, i % 2 === 0 ? "stdout" : "stderr")
      yield* forwarder.flush
      expect(shape(sent)).toEqual([{ lines: 1_000, dropped: 0 }, { lines: 1_000, dropped: 0 }, { lines: 500, dropped: 0 }])
      const lines = sent.flatMap((message) => message.lines)
      expect(lines[0]).toEqual({ stream: "stdout", line: "[h:cpu:r0] line 0" })
      expect(lines[1]).toEqual({ stream: "stderr", line: "[h:cpu:r0] line 1" })
      expect(lines[2_499]).toEqual({ stream: "stderr", line: "[h:cpu:r0] line 2499" })
      expect(lines.map(({ line }) => line)).toEqual(Array.from({ length: 2_500 }, (_, i) => `[h:cpu:r0] line ${i}`))
    }))

  effect.live("a line pushed on its own is sent without a flush (the sender wakes for it)", () =>
    Effect.gen(function*() {
      const { send, sent } = recorder()
      const forwarder = yield* make(send)
      forwarder.push("[h:relay] hello", "stderr")
      yield* eventually(Effect.sync(() => sent.length === 1), "the line sent")
      expect(sent[0]!.lines).toEqual([{ stream: "stderr", line: "[h:relay] hello" }])
    }))

  effect.live("a batch holds at most batchChars characters (but always one line)", () =>
    Effect.gen(function*() {
      const { send, sent } = recorder()
      const forwarder = yield* make(send, bounds({ batchChars: 10 }))
      for (const line of ["aaaa", "bbbb", "cccc", "dddddddddddddddd", "e"]) forwarder.push(line, "stdout")
      yield* forwarder.flush
      expect(sent.map((message) => message.lines.map(({ line }) => line))).toEqual([["aaaa", "bbbb"], ["cccc"], ["dddddddddddddddd"], ["e"]])
    }))

  effect.live("while the link is slow, lines beyond the bound are dropped and the next batch counts them", () =>
    Effect.gen(function*() {
      const sent: Array<RankOutput> = []
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      let calls = 0
      // The first send waits (a link whose kernel buffer is full) until the test releases it; the rest go at once.
      const send = (message: RankOutput) =>
        Effect.gen(function*() {
          calls += 1
          if (calls === 1) yield* Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(release))
          sent.push(message)
        })
      const forwarder = yield* make(send, bounds({ queuedLines: 3 }))
      forwarder.push("first", "stdout")
      // The sender has taken "first" and is stuck sending it.
      yield* Deferred.await(started)
      for (let i = 0; i < 5; i++) forwarder.push(`queued ${i}`, "stdout")
      yield* Deferred.succeed(release, undefined)
      yield* forwarder.flush
      expect(sent.map((message) => ({ lines: message.lines.map(({ line }) => line), dropped: message.dropped }))).toEqual([
        { lines: ["first"], dropped: 0 },
        { lines: ["queued 0", "queued 1", "queued 2"], dropped: 2 }
      ])
    }))

  effect.live("the character bound drops too, and a line longer than lineChars is cut, saying by how much", () =>
    Effect.gen(function*() {
      const { send, sent } = recorder()
      const forwarder = yield* make(send, bounds({ lineChars: 8, queuedChars: 40 }))
      forwarder.push("0123456789abcdef", "stdout")
      forwarder.push("short", "stdout")
      forwarder.push("0123456789", "stdout")
      yield* forwarder.flush
      expect(sent.flatMap((message) => message.lines.map(({ line }) => line))).toEqual(["01234567… (8 characters cut)", "short"])
      expect(sent.reduce((sum, message) => sum + message.dropped, 0)).toBe(1)
    }))

  effect.live("flush returns only once everything queued before it has been sent", () =>
    Effect.gen(function*() {
      const sent: Array<string> = []
      const send = (message: RankOutput) =>
        // A send that takes a few turns of the scheduler, as one waiting for the socket to drain does.
        Effect.zipRight(Effect.repeatN(Effect.yieldNow(), 20), Effect.sync(() => message.lines.forEach(({ line }) => sent.push(line))))
      const forwarder = yield* make(send, bounds({ batchLines: 2 }))
      for (let i = 0; i < 7; i++) forwarder.push(`l${i}`, "stdout")
      const flushing = yield* Effect.fork(forwarder.flush)
      yield* Fiber.join(flushing)
      expect(sent).toEqual(["l0", "l1", "l2", "l3", "l4", "l5", "l6"])
    }))

  effect.live("lines go as printed, terminal controls and all: the launcher's console is where they are escaped", () =>
    Effect.gen(function*() {
      const { send, sent } = recorder()
      const forwarder = yield* make(send)
      forwarder.push("[h:cpu:r0] \u001b[2J\u001b]0;t\u0007\r\u202e\u009b\tx", "stderr")
      yield* forwarder.flush
      expect(sent.flatMap((message) => message.lines)).toEqual([{ stream: "stderr", line: "[h:cpu:r0] \u001b[2J\u001b]0;t\u0007\r\u202e\u009b\tx" }])
    }))
})
