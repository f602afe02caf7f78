/**
 * A host's board (src/native/src/board.rs): small all-reduces in shared memory among processes.
 *
 * Real processes (`fixtures/board-fixture.ts`) reduce thousands of rounds while this test turns the board off
 * and on under them, as a relay does when a rank dies or idles; each checks every result, bit for bit, against
 * the relay's arithmetic it writes out itself. In-process cases pin what one rank sees (a member that never
 * arrives, a round cancelled under it, members that disagree on the length, a buffer too large for a slot) and
 * that the board's bits are the relay's: the same reference, written here, for both paths.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Board, BOARD_SLOT_BYTES, boardBytes } from "../src/native/Board.ts"
import { openBoardLibrary } from "../src/native/library.ts"
import { createSegment } from "../src/wire/Segments.ts"
import { HostReduction } from "../src/relay/HostReduction.ts"
import { portableKernels } from "../src/native/PortableKernels.ts"

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
    // Slots in the opposite order to the ranks: the fold adds in rank order all the same.
    expect(board.enable([0, 5, 9, 63])).toBe(true)
    const { reports } = await runRanks(path, [63, 9, 5, 0], 2_000, async () => {
      await Bun.sleep(5)
      return 0
    })
    for (const report of reports) expect(report).toMatchObject({ rounds: 2_000, fallbacks: 0, mismatches: 0 })
  }, 30_000)

  test("turned off and on under them: cancelled rounds are redone, and no rank sees another round's result", async () => {
    const { board, path } = freshBoard()
    const slots = [1, 2, 3, 4]
    board.enable(slots)
    let cancelled = 0
    const { reports, toggles } = await runRanks(path, slots, 3_000, async () => {
      // Off while some have arrived and others have not (the state word's low byte counts arrivals): a round
      // cancelled half-way, as a death or an idle rank cancels one.
      const started = performance.now()
      while ((board.state() & 0xff) === 0 && performance.now() - started < 20) await Bun.sleep(0)
      cancelled += board.disable()
      await Bun.sleep(Math.random() * 2)
      board.enable(slots)
      // Rounds run between two cancellations.
      await Bun.sleep(2)
      return 1
    })
    expect(toggles).toBeGreaterThan(5)
    expect(cancelled).toBeGreaterThan(0)
    for (const report of reports) expect(report).toMatchObject({ rounds: 3_000, mismatches: 0 })
    // Every rank whose arrival a disable cancelled was told so (it may also have found the board off).
    expect(reports.reduce((sum, report) => sum + report.fallbacks, 0)).toBeGreaterThanOrEqual(cancelled)
  }, 30_000)
})

describe("one rank's view", () => {
  test("a member that never arrives keeps the round pending until the relay turns the board off", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    const buffer = Float32Array.of(1, 2)
    expect(board.arrive(0, 0, buffer, "sum", 1)).toBe("pending")
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
    expect(board.arrive(3, 0, first, "avg", 1)).toBe("pending")
    expect(board.arrive(7, 1, last, "avg", 3)).toBe("done")
    // (1·1 + 3·3) / 4, (10 + 90) / 4, (−4 + 12) / 4
    expect([...last]).toEqual([2.5, 25, 2])
    expect(board.wait(3, first, 0, 0)).toBe("done")
    expect([...first]).toEqual([2.5, 25, 2])
  })

  test("members that disagree on the length: the round is cancelled and the board turned off, for the relay to name them", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    expect(board.arrive(0, 0, Float32Array.of(1, 2, 3), "sum", 1)).toBe("pending")
    expect(board.arrive(1, 1, Float32Array.of(1, 2), "sum", 1)).toBe("fallback")
    expect(board.wait(0, new Float32Array(3), 0, 0)).toBe("fallback")
    expect(on(board)).toBe(false)
  })

  test("members that disagree on the op are cancelled the same way", () => {
    const { board } = freshBoard()
    board.enable([0, 1])
    expect(board.arrive(0, 0, Float32Array.of(1), "sum", 1)).toBe("pending")
    expect(board.arrive(1, 1, Float32Array.of(1), "avg", 1)).toBe("fallback")
    expect(board.wait(0, new Float32Array(1), 0, 0)).toBe("fallback")
  })

  test("what the board does not take falls back without arriving: too large, a slot not a member, the board off", () => {
    const { board } = freshBoard()
    expect(board.arrive(0, 0, Float32Array.of(1), "sum", 1)).toBe("fallback")
    board.enable([0, 1])
    expect(board.enable([0, 1])).toBe(false)
    expect(board.arrive(0, 0, new Float32Array(BOARD_SLOT_BYTES / 4 + 1), "sum", 1)).toBe("fallback")
    expect(board.arrive(2, 2, Float32Array.of(1), "sum", 1)).toBe("fallback")
    // Nobody arrived: a disable cancels nothing.
    expect(board.disable()).toBe(0)
  })

  test("a zero-length round (a barrier) completes once everyone is in", () => {
    const { board } = freshBoard()
    board.enable([0, 1, 2])
    const empty = new Float32Array(0)
    expect(board.arrive(0, 0, empty, "sum", 1)).toBe("pending")
    expect(board.arrive(1, 1, empty, "sum", 1)).toBe("pending")
    expect(board.wait(0, empty, 0, 0)).toBe("pending")
    expect(board.arrive(2, 2, empty, "sum", 1)).toBe("done")
    expect(board.wait(0, empty, 0, 0)).toBe("done")
    expect(board.wait(1, empty, 0, 0)).toBe("done")
  })

  test("a round too large for one rank to fold (members × length past 4 MiB) falls back before anything is copied", () => {
    const { board } = freshBoard()
    board.enable([0, 1, 2, 3, 4])
    // 5 members × 1 MiB is past 4 MiB; 5 × 0.75 MiB is not.
    expect(board.arrive(0, 0, new Float32Array(262_144), "sum", 1)).toBe("fallback")
    expect(board.arrive(0, 0, new Float32Array(196_608), "sum", 1)).toBe("pending")
  })

  test("a board laid out in too small a segment, or with too many slots, is refused", () => {
    const small = new Board(library, createSegment(join(dir, "small.seg"), 8192))
    expect(() => small.init()).toThrow(/needs \d+ bytes, not 8192/)
    expect(() => freshBoard().board.init(BOARD_SLOT_BYTES, 65)).toThrow(/1 to 64 slots/)
  })
})

describe("the board's bits are the relay's", () => {
  const f = Math.fround
  /** The relay's arithmetic: each contribution weighted and rounded, added in rank order from the first, then the mean. */
  const reference = (inputs: ReadonlyArray<Float32Array>, weights: ReadonlyArray<number>, op: "sum" | "avg") =>
    Float32Array.from({ length: inputs[0]!.length }, (_, i) => {
      const contributions = inputs.map((input, rank) => (weights[rank] === 1 ? input[i]! : f(input[i]! * weights[rank]!)))
      let sum = contributions[0]!
      for (const contribution of contributions.slice(1)) sum = f(sum + contribution)
      if (op === "sum") return sum
      const total = weights.reduce((a, b) => a + b, 0)
      if (weights.every((weight) => weight === 1)) return f(sum / inputs.length)
      return total > 0 ? f(sum * f(1 / total)) : sum
    })
  const bits = (values: Float32Array) => [...new Uint32Array(values.buffer, values.byteOffset, values.length)]

  // A small xorshift: the same values every run, of every magnitude and sign, -0 among them.
  let state = 0x9e3779b9
  const random = () => {
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 2 ** 32
  }
  const inputs = [0, 1, 2].map(() => Float32Array.from({ length: 4_096 }, (_, i) => (i === 7 ? -0 : (random() - 0.5) * 10 ** Math.floor(random() * 8 - 4))))

  const onBoard = (weights: ReadonlyArray<number>, op: "sum" | "avg") => {
    const { board } = freshBoard()
    // Ranks 0, 1, 2 in slots 2, 0, 1, arriving 1, 2, 0: neither order is the ranks'.
    const slotOf = [2, 0, 1]
    board.enable(slotOf)
    const buffers = inputs.map((input) => input.slice())
    expect(board.arrive(slotOf[1]!, 1, buffers[1]!, op, weights[1]!)).toBe("pending")
    expect(board.arrive(slotOf[2]!, 2, buffers[2]!, op, weights[2]!)).toBe("pending")
    expect(board.arrive(slotOf[0]!, 0, buffers[0]!, op, weights[0]!)).toBe("done")
    expect(board.wait(slotOf[1]!, buffers[1]!, 0, 0)).toBe("done")
    expect(bits(buffers[1]!)).toEqual(bits(buffers[0]!))
    return buffers[0]!
  }
  const throughRelay = (weights: ReadonlyArray<number>, op: "sum" | "avg") =>
    new HostReduction(portableKernels, dir).fold(inputs.map((input, rank) => {
      // What a rank stages: its buffer multiplied by its weight, stored as f32.
      const staged = weights[rank] === 1 ? input.slice() : Float32Array.from(input, (value) => value * weights[rank]!)
      return { rank, op, bytes: staged.byteLength, weight: weights[rank]!, epoch: 0, source: { bytes: new Uint8Array(staged.buffer), inPlace: false } }
    }), true)

  for (const [name, weights, op] of [
    ["an average of three at weight 1 (divided by 3, which no f32 reciprocal equals)", [1, 1, 1], "avg"],
    ["a weighted average (weights 0.1, 2, 3.5)", [0.1, 2, 3.5], "avg"],
    ["a sum at weight 1", [1, 1, 1], "sum"]
  ] as const) {
    test(name, () => {
      const expected = bits(reference(inputs, weights, op))
      expect(bits(onBoard(weights, op))).toEqual(expected)
      expect(bits(throughRelay(weights, op))).toEqual(expected)
    })
  }
})
