/**
 * A rank's link to its host's relay: a Unix socket for messages and a
 * shared-memory segment for tensors.
 *
 * - `reduce` leaves the tensor in a shared-memory segment and tells the
 *   relay, which writes the round's result back into that segment. A tensor
 *   made by `tensor()` lives in its own segment and is reduced where it is;
 *   any other buffer is copied into the rank's staging segment and back. One
 *   collective at a time, in call order.
 * - A small `sum` or `avg` goes through the host's board instead while the
 *   relay has it on (every member in every round, the host alone in the
 *   world): no socket round trip, microseconds. A round the board cancels (a
 *   member died or left) is redone through the relay.
 * - Reports go up to the coordinator; orders come back to `onOrder`.
 * - Every second the rank beats; a coordinator silent for the heartbeat
 *   timeout, or a relay that hangs up, ends the process: nobody keeps a
 *   device after the launcher is gone.
 *
 * Effect-free on purpose: it is on every rank's start-up path.
 */
import { join } from "node:path"
import { Board, BOARD_SLOT_BYTES, type BoardOutcome } from "../native/Board.ts"
import { openBoardLibrary } from "../native/library.ts"
import { encodeLocal, LOCAL_PROTOCOL_VERSION, LocalFrameReader } from "../wire/LocalFrames.ts"
import { PendingWrites } from "../wire/PendingWrites.ts"
// Types only: the schemas are the relay's to check with; loading them would slow every rank's start.
import type { RankToRelay, RelayOp, RelayToRank } from "../wire/messages/LocalMessages.ts"
import { createSegment, floats, segmentCapacity, SegmentMaps } from "../wire/Segments.ts"
import { RankCallError } from "./RankContext.ts"
import type { SharedTensors } from "./SharedTensors.ts"

export type { RelayOp }

/** An order from the coordinator, as the relay passes it on (CoordinatorMessages, encoded). */
export type Order = { readonly _tag: string } & Record<string, unknown>

export interface RelayClientOptions {
  readonly socket: string
  readonly dir: string
  readonly rank: number
  readonly heartbeatTimeoutMs: number
  /** The rank's tensors in shared memory: reduced in place. */
  readonly tensors: SharedTensors
  /** Told every order, in arrival order. */
  readonly onOrder: (order: Order) => void
  /** The rank cannot go on (relay gone, coordinator silent): the runtime ends the process. */
  readonly onLost: (reason: string) => void
}

export interface RelayClient {
  /** `epoch`: the epoch the round belongs to (a host that joined later takes part from its first epoch on). */
  readonly reduce: (buffer: Float32Array, op: RelayOp, weight: number, epoch: number) => Promise<void>
  /** This rank is waiting for work in `epoch`: leave the reduction barrier until its next `reduce`. */
  readonly idle: (epoch: number) => void
  readonly report: (report: { readonly _tag: string } & Record<string, unknown>) => void
  readonly close: () => void
}

const HEARTBEAT_MS = 1_000

/**
 * Waiting on the board: first spin this long (yielding the core, for ranks outnumber cores on a CPU host), then
 * sleep on the futex in slices this long, the event loop (orders, beats, signals) getting its turn between slices.
 */
const BOARD_SPIN_US = 50
const BOARD_SLICE_US = 1_000

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

const dial = async (path: string, deadline: number, handlers: Parameters<typeof Bun.connect>[0]["socket"]) => {
  let lastError: unknown
  while (Date.now() < deadline) {
    try {
      return await Bun.connect({ unix: path, socket: handlers })
    } catch (error) {
      // The relay starts once every rank of the host runs user code: wait for it.
      lastError = error
      await Bun.sleep(20)
    }
  }
  throw new RankCallError(`cannot reach the host's relay at ${path}: ${lastError instanceof Error ? lastError.message : String(lastError)}`)
}

export const connectRelay = async (options: RelayClientOptions): Promise<RelayClient> => {
  const reader = new LocalFrameReader()
  type Reduced = Extract<RelayToRank, { t: "reduced" }>
  let waiting: { resolve: (message: Reduced) => void; reject: (error: Error) => void } | undefined
  let closing = false
  let lastHeard = Date.now()
  const writes = new PendingWrites()
  // The board needs the native library; without it every collective takes the relay's path.
  const boardLibrary = openBoardLibrary()
  let board: { readonly board: Board; readonly slot: number } | undefined

  const lost = (reason: string) => {
    if (closing) return
    closing = true
    waiting?.reject(new RankCallError(reason))
    options.onLost(reason)
  }

  const socket = await dial(options.socket, Date.now() + options.heartbeatTimeoutMs, {
    data: (_socket, chunk) => {
      // From this host's own relay: typed, not checked (see LocalMessages).
      for (const message of reader.push(chunk) as Array<RelayToRank>) {
        if (message.t === "reduced") {
          const current = waiting
          waiting = undefined
          current?.resolve(message)
        } else if (message.t === "order") {
          // Only the coordinator's word counts as its being alive: a lone host's relay answers reductions without it.
          lastHeard = Date.now()
          options.onOrder(message.order as Order)
        } else if (message.t === "board") {
          // A board that cannot be mapped is left unused: every collective then takes the relay's path, which turns it off.
          try {
            if (boardLibrary !== undefined) board = { board: new Board(boardLibrary, Bun.mmap(message.seg)), slot: message.slot }
          } catch {
            board = undefined
          }
        } else if (message.t === "refused") {
          lost(`the relay refused this rank: ${String(message.reason)}`)
        }
      }
    },
    // A checkpoint larger than the socket's buffer is written in parts.
    drain: (socket) => writes.drain(socket),
    close: () => lost("lost the host's relay"),
    error: () => {}
  })
  const send = (message: RankToRelay) => {
    if (!closing) writes.write(socket, encodeLocal(message))
  }
  send({ t: "hello", rank: options.rank, version: LOCAL_PROTOCOL_VERSION, ...(boardLibrary === undefined ? {} : { board: true }) })

  const timer = setInterval(() => {
    send({ t: "report", report: { _tag: "Heartbeat" } })
    if (Date.now() - lastHeard > options.heartbeatTimeoutMs) {
      lost(`heard nothing from the coordinator for ${options.heartbeatTimeoutMs} ms`)
    }
  }, HEARTBEAT_MS)
  timer.unref()

  /** The relay's result segments, mapped as they appear. */
  const results = new SegmentMaps()
  let segment: { path: string; bytes: Uint8Array; generation: number } = { path: "", bytes: new Uint8Array(0), generation: 0 }
  const ownSegment = (bytes: number) => {
    if (segment.path !== "" && segment.bytes.length >= bytes) return segment
    const generation = segment.generation + 1
    const path = join(options.dir, `r${options.rank}-${generation}.seg`)
    segment = { path, bytes: createSegment(path, segmentCapacity(bytes)), generation }
    return segment
  }

  /** A round on the board: "done" (the result is in `buffer`) or "fallback" (redo it through the relay). */
  const onBoard = async (on: { board: Board; slot: number }, buffer: Float32Array, op: "sum" | "avg", weight: number): Promise<BoardOutcome> => {
    let outcome = on.board.arrive(on.slot, options.rank, buffer, op, weight)
    if (outcome === "pending") outcome = on.board.wait(on.slot, buffer, BOARD_SPIN_US, BOARD_SLICE_US)
    while (outcome === "pending") {
      if (closing) throw new RankCallError("the rank has lost its relay")
      await nextTurn()
      outcome = on.board.wait(on.slot, buffer, 0, BOARD_SLICE_US)
    }
    return outcome
  }

  // Collectives run one at a time, in call order.
  let queue: Promise<unknown> = Promise.resolve()
  const reduceNow = async (buffer: Float32Array, op: RelayOp, weight: number, epoch: number): Promise<void> => {
    if (closing) throw new RankCallError("the rank has lost its relay")
    const bytes = buffer.byteLength
    if (board !== undefined && (op === "sum" || op === "avg") && bytes <= BOARD_SLOT_BYTES) {
      if (await onBoard(board, buffer, op, weight) === "done") return
    }
    const shared = options.tensors.locate(buffer)
    // A tensor in shared memory is reduced in place; anything else goes through the staging segment.
    const staged = shared === undefined ? floats(ownSegment(bytes).bytes, bytes) : buffer
    if (shared === undefined) staged.set(buffer)
    if (weight !== 1) for (let i = 0; i < staged.length; i++) staged[i]! *= weight
    const reply = new Promise<Reduced>((resolve, reject) => (waiting = { resolve, reject }))
    const where = shared === undefined ? { seg: segment.path, offset: 0, tensor: false } : { seg: shared.path, offset: shared.offset, tensor: true }
    send({ t: "reduce", op, bytes, weight, epoch, ...where })
    const answer = await reply
    if (typeof answer.error === "string") throw new RankCallError(answer.error)
    if (shared !== undefined || bytes === 0) return
    // A staged buffer's result is in the relay's result segment (or, after a cpu_async exchange, back in the staging one).
    buffer.set(typeof answer.seg === "string" ? floats(results.map(0, answer.seg), bytes) : staged)
  }

  return {
    reduce: (buffer, op, weight, epoch) => {
      const call = queue.then(() => reduceNow(buffer, op, weight, epoch))
      queue = call.catch(() => undefined)
      return call
    },
    idle: (epoch) => send({ t: "idle", epoch }),
    report: (report) => send({ t: "report", report }),
    close: () => {
      closing = true
      clearInterval(timer)
      writes.end(socket)
    }
  }
}
