/**
 * The relay's rules for the host's board, with the real relay (`Relay.run`, registered on a real ControlGate
 * over a real port) and three real rank clients (`connectRelay`) in this process. The board's state word,
 * read here from its segment, says whether it is on and how many rounds it has finished: a round the board
 * took moves that count, one through the relay's socket does not.
 * - Off until a round through the socket that every member was in; on after it.
 * - A collective the board does not take (over 1 MiB) goes through the socket and leaves it on after.
 * - A member that dies while the others wait on the board: they are told at once and finish through the
 *   socket without it; the board comes back on for the two of them.
 * - A member that waits for work (`idle`): off, and it stays off while rounds leave that member out (its next
 *   contribution would bring it back into the socket's rounds, as at an epoch's end).
 * Expected sums are written out (rank r contributes r + 1).
 */
import { afterAll, describe, expect } from "bun:test"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as ControlGate from "../src/launcher/front/ControlGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { connectRelay, type RelayClient } from "../src/rank/RelayClient.ts"
import { SharedTensors } from "../src/rank/SharedTensors.ts"
import * as Relay from "../src/relay/Relay.ts"
import { Board } from "../src/native/Board.ts"
import { openBoardLibrary } from "../src/native/library.ts"
import { hostKey, newSalt } from "../src/wire/Keys.ts"
import { effect, eventually } from "./support/effect.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const library = openBoardLibrary()
if (library === undefined) throw new Error("the native library is needed: bun run build:native")

const HOST = "h"
const RANKS = [0, 1, 2]

const hostWithRelay = Effect.gen(function*() {
  const dir = mkdtempSync(join(tmpdir(), "cohort-relay-board-"))
  dirs.push(dir)
  const salt = newSalt()
  const control = yield* ControlGate.make({
    salt,
    ranksOf: (host) => Effect.succeed(host === HOST ? RANKS : undefined),
    handshakeMs: 5_000,
    beatEveryMs: 1_000,
    onMessage: () => Effect.void,
    onClosed: () => Effect.void
  })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { control: control.owner } })
  const spec = {
    host: HOST,
    ranks: RANKS,
    worldSize: RANKS.length,
    controller: { host: "127.0.0.1", port: mux.port },
    dir,
    socket: join(dir, "relay.sock"),
    heartbeatTimeoutMs: 60_000
  }
  yield* Effect.forkScoped(Relay.run(spec, hostKey(salt, HOST), 5_000).pipe(Effect.ignore))
  const segment = join(dir, "board.seg")
  yield* eventually(Effect.sync(() => existsSync(segment)), "the relay's board")
  const board = new Board(library, Bun.mmap(segment))
  const lost: Array<string> = []
  const clients = yield* Effect.promise(() =>
    Promise.all(RANKS.map((rank) =>
      connectRelay({
        socket: spec.socket,
        dir,
        rank,
        heartbeatTimeoutMs: 60_000,
        tensors: new SharedTensors(dir, rank),
        onOrder: () => {},
        onLost: (reason) => void lost.push(`${rank}: ${reason}`)
      })
    ))
  )
  yield* Effect.addFinalizer(() => Effect.sync(() => clients.forEach((client) => client.close())))
  return { board, clients, lost }
})

const on = (board: Board) => board.state() >>> 31 === 1
const roundsDone = (board: Board) => (board.state() >>> 8) & 0xff

/** Each of `ranks` all-reduces (sum) a buffer of `length` floats holding rank + 1; their results' first elements. */
const sumOf = (clients: ReadonlyArray<RelayClient>, ranks: ReadonlyArray<number>, length = 1) =>
  Effect.promise(() =>
    Promise.all(ranks.map(async (rank) => {
      const buffer = new Float32Array(length).fill(rank + 1)
      await clients[rank]!.reduce(buffer, "sum", 1, 0)
      return [buffer[0]!, buffer[length - 1]!]
    }))
  )

describe("the relay's rules for the host's board", () => {
  effect.live("on after a round every member was in; small rounds then skip the socket, a large one takes it", () =>
    Effect.gen(function*() {
      const { board, clients } = yield* hostWithRelay
      // The ranks have said hello: each got a slot, and the board is off.
      expect(on(board)).toBe(false)
      expect(yield* sumOf(clients, RANKS)).toEqual([[6, 6], [6, 6], [6, 6]])
      expect(on(board)).toBe(true)
      const before = roundsDone(board)
      expect(yield* sumOf(clients, RANKS)).toEqual([[6, 6], [6, 6], [6, 6]])
      expect(yield* sumOf(clients, RANKS)).toEqual([[6, 6], [6, 6], [6, 6]])
      expect(roundsDone(board)).toBe(before + 2)
      // 1.2 MiB: past a slot, through the socket (which turns the board off), and on again after it.
      expect(yield* sumOf(clients, RANKS, 300_000)).toEqual([[6, 6], [6, 6], [6, 6]])
      expect(roundsDone(board)).toBe(before + 2)
      expect(on(board)).toBe(true)
    }))

  effect.live("a member that dies while the others wait on the board: they finish without it, and the board is on for them after", () =>
    Effect.gen(function*() {
      const { board, clients, lost } = yield* hostWithRelay
      yield* sumOf(clients, RANKS)
      expect(on(board)).toBe(true)
      const before = roundsDone(board)
      // Ranks 0 and 1 arrive on the board and wait for rank 2, which leaves instead.
      const waiting = Effect.runFork(sumOf(clients, [0, 1]))
      yield* eventually(Effect.sync(() => (board.state() & 0xff) === 2), "ranks 0 and 1 on the board")
      clients[2]!.close()
      expect(yield* waiting.await.pipe(Effect.flatten)).toEqual([[3, 3], [3, 3]])
      // That round was not the board's: it was cancelled and redone through the socket, which then turned it on again.
      expect(roundsDone(board)).toBe(before)
      expect(on(board)).toBe(true)
      expect(yield* sumOf(clients, [0, 1])).toEqual([[3, 3], [3, 3]])
      expect(roundsDone(board)).toBe(before + 1)
      expect(lost).toEqual([])
    }))

  effect.live("a member that waits for work turns the board off, and rounds without it leave it off", () =>
    Effect.gen(function*() {
      const { board, clients } = yield* hostWithRelay
      yield* sumOf(clients, RANKS)
      expect(on(board)).toBe(true)
      clients[2]!.idle(1)
      yield* eventually(Effect.sync(() => !on(board)), "the board off after rank 2's idle")
      expect(yield* sumOf(clients, [0, 1])).toEqual([[3, 3], [3, 3]])
      expect(on(board)).toBe(false)
      expect(yield* sumOf(clients, [0, 1])).toEqual([[3, 3], [3, 3]])
      expect(on(board)).toBe(false)
    }))
})
