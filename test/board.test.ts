/**
 * A host's board (src/native/src/board.rs): small all-reduces in shared memory among processes.
 *
 * Real processes (`fixtures/board-fixture.ts`) reduce thousands of rounds while this test turns the board off
 * and on under them, as a relay does when a rank dies or idles; each checks every result against the sum it
 * writes out itself. In-process cases pin what one rank sees: a member that never arrives, a round cancelled
 * under it, members that disagree on the length, a buffer too large for a slot.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Board, BOARD_SLOT_BYTES, boardBytes } from "../src/native/Board.ts"
import { openBoardLibrary } from "../src/native/library.ts"
import { createSegment } from "../src/wire/Segments.ts"

const library = openBoardLibrary()
if (library === undefined) throw new Error("the native library is needed: bun run build:native")
const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "cohort-board-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let boards = 0
const freshBoard = () => {
  const path = join(dir, `board-${boards++}.seg`)
  const board = new Board(library, createSegment(path, boardBytes(library.symbols)))
  board.init()
  return { board, path }
}
const on = (board: Board) => board.state() >>> 31 === 1

const runRanks = async (path: string, slots: ReadonlyArray<number>, rounds: number, whileRunning: () => Promise<number>) => {
  const ranks = slots.map((slot, index) =>
    Bun.spawn(["bun", join(import.meta.dir, "fixtures/board-fixture.ts"), path, String(slot), String(index), String(slots.length), String(rounds)], {
      stdout: "pipe",
      stderr: "pipe"
    })
  )
  let running = true
  const background = (async () => {
    let toggles = 0
    while (running) toggles += await whileRunning()
    return toggles
  })()
  const reports = await Promise.all(ranks.map(async (rank) => {
    const [out, err, code] = await Promise.all([new Response(rank.stdout).text(), new Response(rank.stderr).text(), rank.exited])
    if (code !== 0) throw new Error(`a rank exited ${code}: ${err}`)
    return JSON.parse(out) as { slot: number; rounds: number; fallbacks: number; mismatches: number; firstMismatch: Array<unknown> }
  }))
  running = false
  return { reports, toggles: await background }
}

describe("four processes on one board", () => {
  test("2,000 rounds of sums and weighted averages: every rank gets every round's result, none falls back", async () => {
    const { board, path } = freshBoard()
    expect(board.enable([0, 5, 9, 63])).toBe(true)
    const { reports } = await runRanks(path, [0, 5, 9, 63], 2_000, async () => {
      await Bun.sleep(5)
      return 0
    })
    for (const report of reports) expect(report).toMatchObject({ rounds: 2_000, fallbacks: 0, mismatches: 0 })
  }, 30_000)

  test("turned off and on under them: cancelled rounds are redone, and no rank sees another round's result", async () => {
    const { board, path } = freshBoard()
    const slots = [1, 2, 3, 4]
    board.enable(slots)
    const { reports, toggles } = await runRanks(path, slots, 3_000, async () => {
      await Bun.sleep(Math.random() * 3)
      board.disable()
      await Bun.sleep(Math.random() * 2)
      board.enable(slots)
      return 1
    })
    expect(toggles).toBeGreaterThan(5)
    for (const report of reports) expect(report).toMatchObject({ rounds: 3_000, mismatches: 0 })
    // The cancellations reached the ranks (the case this test is for).
    expect(reports.reduce((sum, report) => sum + report.fallbacks, 0)).toBeGreaterThan(0)
  }, 30_000)
})

describe("one rank's view", () => {
  test("a member that never arrives keeps the round pending until the relay turns the board off", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    const buffer = Float32Array.of(1, 2)
    expect(board.arrive(0, buffer, "sum", 1)).toBe("pending")
    const started = performance.now()
    expect(board.wait(0, buffer, 10, 2_000)).toBe("pending")
    expect(performance.now() - started).toBeGreaterThanOrEqual(1.5)
    expect(board.disable()).toBe(1)
    expect(board.wait(0, buffer, 10, 2_000)).toBe("fallback")
    // The buffer is the caller's own until a round is done: the relay's path reduces it next.
    expect([...buffer]).toEqual([1, 2])
    expect(on(board)).toBe(false)
  })

  test("the last to arrive folds; the first reads the same result", () => {
    const { board } = freshBoard()
    board.enable([3, 7])
    const first = Float32Array.of(1, 10, -4)
    const last = Float32Array.of(3, 30, 4)
    expect(board.arrive(3, first, "avg", 1)).toBe("pending")
    expect(board.arrive(7, last, "avg", 3)).toBe("done")
    // (1·1 + 3·3) / 4, (10 + 90) / 4, (−4 + 12) / 4
    expect([...last]).toEqual([2.5, 25, 2])
    expect(board.wait(3, first, 0, 0)).toBe("done")
    expect([...first]).toEqual([2.5, 25, 2])
  })

  test("members that disagree on the length: the round is cancelled and the board turned off, for the relay to name them", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    expect(board.arrive(0, Float32Array.of(1, 2, 3), "sum", 1)).toBe("pending")
    expect(board.arrive(1, Float32Array.of(1, 2), "sum", 1)).toBe("fallback")
    expect(board.wait(0, new Float32Array(3), 0, 0)).toBe("fallback")
    expect(on(board)).toBe(false)
  })

  test("members that disagree on the op are cancelled the same way", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    expect(board.arrive(0, Float32Array.of(1), "sum", 1)).toBe("pending")
    expect(board.arrive(1, Float32Array.of(1), "avg", 1)).toBe("fallback")
    expect(board.wait(0, new Float32Array(1), 0, 0)).toBe("fallback")
  })

  test("what the board does not take falls back without arriving: too large, a slot not a member, the board off", () => {
    const { board } = freshBoard()
    expect(board.arrive(0, Float32Array.of(1), "sum", 1)).toBe("fallback")
    board.enable([0, 1])
    expect(board.enable([0, 1])).toBe(false)
    expect(board.arrive(0, new Float32Array(BOARD_SLOT_BYTES / 4 + 1), "sum", 1)).toBe("fallback")
    expect(board.arrive(2, Float32Array.of(1), "sum", 1)).toBe("fallback")
    // Nobody arrived: a disable cancels nothing.
    expect(board.disable()).toBe(0)
  })

  test("a zero-length round (a barrier) completes once everyone is in", () => {
    const { board } = freshBoard()
    board.enable([0, 1, 2])
    const empty = new Float32Array(0)
    expect(board.arrive(0, empty, "sum", 1)).toBe("pending")
    expect(board.arrive(1, empty, "sum", 1)).toBe("pending")
    expect(board.wait(0, empty, 0, 0)).toBe("pending")
    expect(board.arrive(2, empty, "sum", 1)).toBe("done")
    expect(board.wait(0, empty, 0, 0)).toBe("done")
    expect(board.wait(1, empty, 0, 0)).toBe("done")
  })

  test("a board laid out in too small a segment, or with too many slots, is refused", () => {
    const small = new Board(library, createSegment(join(dir, "small.seg"), 8192))
    expect(() => small.init()).toThrow(/needs \d+ bytes, not 8192/)
    expect(() => freshBoard().board.init(BOARD_SLOT_BYTES, 65)).toThrow(/1 to 64 slots/)
  })
})
