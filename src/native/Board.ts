/**
 * A host's board: small all-reduces among the ranks of one host in shared
 * memory, through the native library (`src/native/src/board.rs` says how a
 * round works and why it is safe).
 *
 * The relay creates the board and owns its mode (`enable` when every member
 * takes part in every round, `disable` the moment one dies, idles, joins or
 * asks for the relay's path); each rank maps it and takes part in rounds
 * with `arrive` and `wait`. A round the board cannot finish (off, cancelled,
 * too large, another op) is redone through the relay, which is why nothing
 * here ever fails a collective: the worst it says is "fall back".
 *
 * Effect-free on purpose: a rank loads it on its start-up path.
 */
import { ptr } from "bun:ffi"
import type { BoardLibrary } from "./library.ts"

/**
 * The largest all-reduce the board takes, in bytes. At 1 MiB and N = 4 the board measured 0.49 ms against the
 * relay's 1.07–1.25 ms (bench/README.md); above it the relay's kernel threads and `ctx.tensor`'s in-place
 * reduction win, and a slot per rank of more would weigh on a small /dev/shm.
 */
export const BOARD_SLOT_BYTES = 1024 * 1024
/** Slots on a host's board: ranks past it use the relay's path (the native side keeps members in one u64). */
export const BOARD_SLOTS = 64

const ops = { sum: 0, avg: 1 } as const
const outcomes = ["done", "fallback", "pending"] as const
export type BoardOutcome = (typeof outcomes)[number]

type Symbols = BoardLibrary["symbols"]

const pointerTo = (buffer: Float32Array) => (buffer.length === 0 ? null : ptr(buffer))

const read = (code: number, library: BoardLibrary): BoardOutcome => {
  const outcome = outcomes[code]
  if (outcome === undefined) throw new Error(`the board refused the call: ${library.lastError()}`)
  return outcome
}

/** The bytes a board needs (the segment's size). */
export const boardBytes = (symbols: Symbols, slotBytes = BOARD_SLOT_BYTES, slots = BOARD_SLOTS): number =>
  Number(symbols.cohort_board_bytes(slotBytes, slots))

export class Board {
  private readonly at: ReturnType<typeof ptr>

  /** `bytes`: the mapped segment (`Bun.mmap`), kept referenced as long as the board is used. */
  constructor(private readonly library: BoardLibrary, readonly bytes: Uint8Array) {
    this.at = ptr(bytes)
  }

  /** Lay out a fresh board (off) over the whole segment: the relay, once, before any rank maps it. */
  init(slotBytes = BOARD_SLOT_BYTES, slots = BOARD_SLOTS): void {
    const code = this.library.symbols.cohort_board_init(this.at, this.bytes.length, slotBytes, slots)
    if (code !== 0) throw new Error(`cannot lay out the board: ${this.library.lastError()}`)
  }

  /** On for exactly these slots; false when it was on already. */
  enable(slots: Iterable<number>): boolean {
    let mask = 0n
    for (const slot of slots) mask |= 1n << BigInt(slot)
    const code = this.library.symbols.cohort_board_enable(this.at, mask)
    if (code < 0) throw new Error(`cannot turn the board on: ${this.library.lastError()}`)
    return code === 1
  }

  /** Off, cancelling the round under way; how many ranks had arrived in it. */
  disable(): number {
    return this.library.symbols.cohort_board_disable(this.at)
  }

  /** The raw state word (on, generation, round, arrivals): for tests and diagnostics. */
  state(): number {
    return this.library.symbols.cohort_board_state(this.at)
  }

  /**
   * Take part in the next round as `rank` (the fold adds in rank order, as the relay does) with `buffer` (left
   * untouched unless the outcome is "done", when it holds the result). "fallback": use the relay's path;
   * "pending": call `wait`.
   */
  arrive(slot: number, rank: number, buffer: Float32Array, op: "sum" | "avg", weight: number): BoardOutcome {
    const code = this.library.symbols.cohort_board_arrive(this.at, slot, rank, pointerTo(buffer), buffer.length, ops[op], weight)
    return read(code, this.library)
  }

  /** Wait for the round this slot arrived in: spin (yielding the core) `spinUs`, then sleep up to `blockUs`. */
  wait(slot: number, buffer: Float32Array, spinUs: number, blockUs: number): BoardOutcome {
    const code = this.library.symbols.cohort_board_wait(this.at, slot, pointerTo(buffer), buffer.length, spinUs, blockUs)
    return read(code, this.library)
  }
}
