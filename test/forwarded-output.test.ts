/**
 * The launcher's side of a self-deployed agent's forwarded lines
 * (RemoteRanks, over a real join link through JoinGate and PortMux): each
 * `RankOutput` batch reaches the run's output in order with its streams; a
 * line that claims another host, or a rank its host does not hold, is the
 * agent's own line (its `agent-HOST.log`), never that rank's; dropped lines
 * are said in one warning, not one per batch. Terminal controls in them
 * reach the launcher's console as sent, and leave it escaped (or, with
 * `rawOutput`, as sent): a self-deployed host's lines are escaped where
 * every other host's are.
 */
import { describe, expect } from "bun:test"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as JoinGate from "../src/launcher/front/JoinGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import * as RemoteRanks from "../src/launcher/hosts/RemoteRanks.ts"
import * as RunConsole from "../src/cli/RunConsole.ts"
import { Hello, joinCodec, RankOutput } from "../src/wire/messages/JoinMessages.ts"
import { newSalt } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { effect, eventually } from "./support/effect.ts"
import { runSpec } from "./support/run-spec.ts"

/** A formed world of one host `a` with ranks 0 and 1, its agent played by the test over a real link. */
const formedWorld = Effect.gen(function*() {
  const salt = newSalt()
  const gate = yield* JoinGate.make({
    rules: { minRanks: 2, targetRanks: 2, timeoutMs: 10_000, maxTimeoutMs: 20_000, start: "auto" },
    declared: new Map([["a", 2]]),
    admission: { mode: "pre-shared" },
    specFor: () => runSpec(),
    salt,
    version: "0.1.0",
    handshakeMs: 5_000
  })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { join: gate.owner } })
  const agent = yield* Link.dial({ host: "127.0.0.1", port: mux.port, channel: "join", salt, inbound: joinCodec, outbound: joinCodec })
  yield* agent.send(new Hello({ host: "a", devices: [0, 1], deviceLabels: ["cpu", "cpu"], pid: 1, version: "0.1.0" }))
  expect((yield* agent.receive)._tag).toBe("Accept")
  const formation = yield* gate.formation
  if (formation._tag !== "Formed") return yield* Effect.dieMessage(formation.reason)
  return { agent, members: formation.members }
})

describe("forwarded output, at the launcher", () => {
  effect.live("lines go to the output in order, each with its stream; a line for someone else is the agent's; drops are said once", () =>
    Effect.gen(function*() {
      const { agent, members } = yield* formedWorld
      const output: Array<{ line: string; stream: string }> = []
      const warnings: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(Array.isArray(message) ? message[0] : message))
      })
      yield* RemoteRanks.make(members, {
        started: () => Effect.void,
        running: () => Effect.void,
        exited: () => Effect.void,
        resources: () => Effect.void,
        output: (lines) => Effect.sync(() => void output.push(...lines))
      }, Duration.seconds(1)).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)), Logger.withMinimumLogLevel(LogLevel.Warning))

      yield* agent.send(new RankOutput({
        lines: [
          { stream: "stdout", line: "[a:cpu:r0] step 1" },
          { stream: "stderr", line: "[a:cpu:r1] warning from rank 1" },
          { stream: "stderr", line: "[a:relay] registered" },
          { stream: "stdout", line: "[b:cpu:r0] not a's to say" },
          { stream: "stdout", line: "[a:cpu:r7] a rank a does not hold" },
          { stream: "stdout", line: "no prefix at all" }
        ],
        dropped: 3
      }))
      yield* agent.send(new RankOutput({ lines: [{ stream: "stdout", line: "[a:cpu:r0] step 2" }], dropped: 2 }))
      yield* eventually(Effect.sync(() => output.length === 7), "both batches")
      expect(output).toEqual([
        { stream: "stdout", line: "[a:cpu:r0] step 1" },
        { stream: "stderr", line: "[a:cpu:r1] warning from rank 1" },
        { stream: "stderr", line: "[a:relay] registered" },
        { stream: "stdout", line: "cohort agent a: [b:cpu:r0] not a's to say" },
        { stream: "stdout", line: "cohort agent a: [a:cpu:r7] a rank a does not hold" },
        { stream: "stdout", line: "cohort agent a: no prefix at all" },
        { stream: "stdout", line: "[a:cpu:r0] step 2" }
      ])
      // The first drops at once; the next ones (within 10 s) only when the link ends, with their count.
      expect(warnings).toEqual(["3 line(s) of a's output were dropped: its ranks printed faster than its agent could send them here"])
      yield* agent.close
      yield* eventually(Effect.sync(() => warnings.length === 2), "the rest said as the link ends")
      expect(warnings[1]).toBe("2 line(s) of a's output were dropped: its ranks printed faster than its agent could send them here")
    }), 20_000)

  effect.live("terminal controls in a forwarded line reach the console as sent and leave it escaped, or as sent with rawOutput", () =>
    Effect.gen(function*() {
      const { agent, members } = yield* formedWorld
      const written = { escaped: [] as Array<string>, raw: [] as Array<string> }
      const consoles = {
        escaped: RunConsole.make({ stderrIsTty: false, stdoutIsTty: false, write: (text) => void written.escaped.push(text) }),
        raw: RunConsole.make({ stderrIsTty: false, stdoutIsTty: false, rawOutput: true, write: (text) => void written.raw.push(text) })
      }
      const received: Array<string> = []
      yield* RemoteRanks.make(members, {
        started: () => Effect.void,
        running: () => Effect.void,
        exited: () => Effect.void,
        resources: () => Effect.void,
        output: (lines) =>
          Effect.sync(() =>
            lines.forEach(({ line, stream }) => {
              received.push(line)
              consoles.escaped.output(line, stream)
              consoles.raw.output(line, stream)
            })
          )
      }, Duration.seconds(1))
      yield* agent.send(new RankOutput({
        lines: [
          { stream: "stderr", line: "[a:cpu:r1] Traceback:\u001b[2J\u001b]0;title\u0007\r\u202e\tdone" },
          { stream: "stdout", line: "\u009b31mno prefix" }
        ],
        dropped: 0
      }))
      yield* eventually(Effect.sync(() => received.length === 2), "the batch")
      expect(received).toEqual(["[a:cpu:r1] Traceback:\u001b[2J\u001b]0;title\u0007\r\u202e\tdone", "cohort agent a: \u009b31mno prefix"])
      expect(written.escaped).toEqual(["[a:cpu:r1] Traceback:\\x1b[2J\\x1b]0;title\\x07\\x0d\\u202e\tdone\n", "cohort agent a: \\x9b31mno prefix\n"])
      expect(written.raw).toEqual(["[a:cpu:r1] Traceback:\u001b[2J\u001b]0;title\u0007\r\u202e\tdone\n", "cohort agent a: \u009b31mno prefix\n"])
    }), 20_000)
})
