/**
 * The receiving end of the frame-throughput benchmark, in its own process.
 * It prints its port. A connection opens with a mode byte ("A":
 * authenticated frames through FrameDecoder, payloads lent as a link takes
 * them, verified and counted; "B": the same, each payload kept: copied into
 * memory of its own; "E": encrypted frames, lent; "R": raw length-prefixed
 * frames, no MAC, counted only; "K": the same, each payload kept, as any
 * receiver that hands a payload to its owner must), then carries batches,
 * one after another, as a link carries rounds: a u32 frame count and that
 * many frames, answered with one byte (1 = all verified so far, 0 = a frame
 * was rejected). The sender waits for each answer before the next batch.
 */
import { FrameDecoder } from "../src/wire/Frame.ts"
import { frameKey } from "../src/wire/FrameCipher.ts"

const keyBytes = new Uint8Array(16).fill(9)

type Mode = "A" | "B" | "E" | "R" | "K"

interface State {
  mode?: Mode
  /** The batch's frame count as it arrives. */
  count: Array<number>
  /** Frames of this batch still to come; 0 between batches. */
  remaining: number
  decoder?: FrameDecoder
  rawNeed: number
  rawHave: number
  rawHeader: Array<number>
  /** "K": the payload being kept; "B": the last one kept. */
  kept?: Uint8Array
  ok: boolean
}

const framed = (mode: Mode) => mode === "A" || mode === "B" || mode === "E"

/** Frames from `rest` (all of this batch's: the sender waits for the answer before the next). */
const take = (state: State, rest: Uint8Array) => {
  if (framed(state.mode!)) {
    const keep = state.mode === "B"
    const failed = state.decoder!.pushEach(rest, (frame) => {
      if (keep) state.kept = frame.payload.slice()
      state.remaining -= 1
    })
    if (failed !== undefined) {
      state.ok = false
      state.remaining = 0
    }
    return
  }
  // Raw: 4-byte length, payload. "R" counts bytes only: the floor with no MAC and no copy. "K" copies them
  // into a payload of their own, allocated at the length (the least a receiver that keeps them does).
  let i = 0
  while (i < rest.length) {
    if (state.rawNeed === 0) {
      state.rawHeader.push(rest[i++]!)
      if (state.rawHeader.length === 4) {
        state.rawNeed = new DataView(new Uint8Array(state.rawHeader).buffer).getUint32(0, true)
        state.rawHeader = []
        state.rawHave = 0
        if (state.mode === "K") state.kept = new Uint8Array(state.rawNeed)
      }
      continue
    }
    const size = Math.min(state.rawNeed - state.rawHave, rest.length - i)
    state.kept?.set(rest.subarray(i, i + size), state.rawHave)
    state.rawHave += size
    i += size
    if (state.rawHave === state.rawNeed) {
      state.rawNeed = 0
      state.remaining -= 1
    }
  }
}

const onBytes = (socket: { write(bytes: Uint8Array): number; data: State }, bytes: Uint8Array) => {
  const state = socket.data
  let at = 0
  if (state.mode === undefined && at < bytes.length) {
    const mode = String.fromCharCode(bytes[at++]!)
    state.mode = mode === "A" || mode === "B" || mode === "E" || mode === "K" ? mode : "R"
    state.decoder = new FrameDecoder(frameKey(keyBytes, mode === "E"), 1 << 30, 1 << 30, "lent")
  }
  while (state.remaining === 0 && at < bytes.length) {
    state.count.push(bytes[at++]!)
    if (state.count.length === 4) {
      state.remaining = new DataView(new Uint8Array(state.count).buffer).getUint32(0, true)
      state.count = []
    }
  }
  if (at < bytes.length && state.remaining > 0) take(state, bytes.subarray(at))
  if (state.remaining === 0 && state.count.length === 0) socket.write(new Uint8Array([state.ok ? 1 : 0]))
}

const server = Bun.listen<State>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    open: (socket) => {
      socket.data = { count: [], remaining: 0, rawNeed: 0, rawHave: 0, rawHeader: [], ok: true }
    },
    data: (socket, bytes) => onBytes(socket, bytes)
  }
})
console.log(server.port)
process.stdin.on("end", () => process.exit(0))
process.stdin.resume()
