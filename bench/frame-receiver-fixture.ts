/**
 * The receiving end of the frame-throughput benchmark, in its own process.
 * It prints its port, then for each connection reads a mode byte ("A":
 * authenticated frames through FrameDecoder, "E": encrypted frames through
 * it, "R": raw length-prefixed frames, no MAC, counted only; "K": the same,
 * each payload kept: copied into memory of its own, as any receiver that hands
 * a payload to its owner must), a u32 frame count, and that
 * many frames, then answers one byte (1 = all verified, 0 = a frame was
 * rejected).
 */
import { FrameDecoder, FrameError } from "../src/wire/Frame.ts"
import { frameKey } from "../src/wire/FrameCipher.ts"

const keyBytes = new Uint8Array(16).fill(9)

interface State {
  preamble: Array<number>
  mode?: "A" | "E" | "R" | "K"
  remaining: number
  decoder?: FrameDecoder
  rawNeed: number
  rawHave: number
  rawHeader: Array<number>
  /** "K": the payload being kept. */
  kept?: Uint8Array
  ok: boolean
}

const onBytes = (socket: { write(bytes: Uint8Array): number; data: State }, bytes: Uint8Array) => {
  const state = socket.data
  let at = 0
  while (state.mode === undefined && at < bytes.length) {
    state.preamble.push(bytes[at++]!)
    if (state.preamble.length === 5) {
      const mode = String.fromCharCode(state.preamble[0]!)
      state.mode = mode === "A" || mode === "E" || mode === "K" ? mode : "R"
      state.remaining = new DataView(new Uint8Array(state.preamble.slice(1)).buffer).getUint32(0, true)
      state.decoder = new FrameDecoder(frameKey(keyBytes, mode === "E"), 1 << 30)
    }
  }
  if (at >= bytes.length || state.mode === undefined) return
  const rest = bytes.subarray(at)
  if (state.mode === "A" || state.mode === "E") {
    const out = state.decoder!.push(rest)
    if (out instanceof FrameError) {
      state.ok = false
      state.remaining = 0
    } else state.remaining -= out.length
  } else {
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
      const take = Math.min(state.rawNeed - state.rawHave, rest.length - i)
      state.kept?.set(rest.subarray(i, i + take), state.rawHave)
      state.rawHave += take
      i += take
      if (state.rawHave === state.rawNeed) {
        state.rawNeed = 0
        state.remaining -= 1
      }
    }
  }
  if (state.remaining === 0) socket.write(new Uint8Array([state.ok ? 1 : 0]))
}

const server = Bun.listen<State>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    open: (socket) => {
      socket.data = { preamble: [], remaining: -1, rawNeed: 0, rawHave: 0, rawHeader: [], ok: true }
    },
    data: (socket, bytes) => onBytes(socket, bytes)
  }
})
console.log(server.port)
process.stdin.on("end", () => process.exit(0))
process.stdin.resume()
