/**
 * The relay's half of the host's board (`native/Board.ts`): it creates the
 * board, gives each rank that asks a slot, and owns the board's mode.
 *
 * The board is on only while its rounds are exactly the rounds the relay's
 * own barrier would make: every live member of the host takes part in every
 * one, and the host is the world's only one. The relay turns it on after a
 * round of its own that every member was in (at that moment each of them is
 * waiting for the relay's answer, so no contribution of theirs is on the way
 * to the socket), and off, cancelling the round under way, on anything that
 * makes it untrue: a rank connects, dies or waits for work, another host
 * joins, or a contribution comes through the socket (a collective the board
 * does not take, or a rank that found the board off). The cancelled round is
 * redone through the socket, where the barrier knows who is missing.
 */
import { join } from "node:path"
import { Board, BOARD_SLOT_BYTES, BOARD_SLOTS, boardBytes } from "../native/Board.ts"
import { openBoardLibrary } from "../native/library.ts"
import { createSegment } from "../wire/Segments.ts"

export class HostBoard {
  private readonly slots = new Map<number, number>()

  private constructor(private readonly board: Board, readonly path: string, private readonly capacity: number) {}

  /**
   * A fresh board in the host's run directory, or undefined without the native library (the socket path serves).
   * Slots for twice the host's ranks (restarted ranks take free ones; a rank past them uses the socket): the
   * segment is sparse, but a small /dev/shm (a container's 64 MiB) should not be promised more than it holds.
   */
  static create(dir: string, hostRanks: number): HostBoard | undefined {
    const library = openBoardLibrary()
    if (library === undefined) return undefined
    const slots = Math.min(BOARD_SLOTS, Math.max(2, hostRanks * 2))
    const path = join(dir, "board.seg")
    const board = new Board(library, createSegment(path, boardBytes(library.symbols, BOARD_SLOT_BYTES, slots)))
    board.init(BOARD_SLOT_BYTES, slots)
    return new HostBoard(board, path, slots)
  }

  /** A slot for `rank` (a connected rank that can use the board), or undefined when every slot is taken. */
  assign(rank: number): number | undefined {
    const taken = new Set(this.slots.values())
    for (let slot = 0; slot < this.capacity; slot++) {
      if (!taken.has(slot)) {
        this.slots.set(rank, slot)
        return slot
      }
    }
    return undefined
  }

  /** `rank` is gone: its slot is free again (the board is already off: its going turned it off). */
  release(rank: number): void {
    this.slots.delete(rank)
  }

  /** Off, cancelling the round under way; cheap when it is off already. */
  off(): void {
    this.board.disable()
  }

  /**
   * The relay just finished a round that every live member (`members`) was in, on this host alone: on for them,
   * when every one of them has a slot.
   */
  onFor(members: ReadonlyArray<number>): boolean {
    const slots = members.map((rank) => this.slots.get(rank))
    if (slots.length === 0 || slots.some((slot) => slot === undefined)) return false
    // Never throws: the round it follows is reduced already, and a board left off only costs the socket path.
    try {
      return this.board.enable(slots as Array<number>)
    } catch {
      return false
    }
  }
}
