/**
 * Frame throughput between two processes over loopback: authenticated
 * frames (AES-128-GCM tag, hashed while streaming on both ends), encrypted
 * frames (the payload encrypted too, `controller.encrypt`) and raw
 * length-prefixed frames with no MAC (the receiver counts them; and, as a
 * second floor, keeps each payload in memory of its own, which cohort's
 * receiver does and a counter does not), in the same run, interleaved.
 * The receiver (frame-receiver-fixture.ts) verifies every frame and answers
 * once per batch; the clock covers the whole batch until that answer.
 */
import type { Socket } from "bun"
import { Connection, forwardingHandlers, type SocketData } from "../src/wire/Connection.ts"
import { frameParts } from "../src/wire/Frame.ts"
import { frameKey } from "../src/wire/FrameCipher.ts"
import { median } from "./stats.ts"

const keyBytes = new Uint8Array(16).fill(9)
const keys = { A: frameKey(keyBytes, false), E: frameKey(keyBytes, true) }
const RUNS = Number(process.env.BENCH_RUNS ?? 5)
const cases = [
  { label: "1 MiB", bytes: 1 << 20, frames: 128 },
  { label: "64 MiB", bytes: 64 << 20, frames: 4 }
]


const batch = async (port: number, mode: "A" | "E" | "R" | "K", payload: Uint8Array, frames: number): Promise<number> => {
  let ack: (byte: number) => void = () => {}
  const acked = new Promise<number>((resolve) => (ack = resolve))
  const socket = await Bun.connect<SocketData>({
    hostname: "127.0.0.1",
    port,
    data: {},
    socket: {
      ...forwardingHandlers,
      open: (opened: Socket<SocketData>) => void new Connection(opened),
      data: (_socket, bytes) => ack(bytes[0]!)
    }
  })
  const connection = socket.data.connection!
  const preamble = new Uint8Array(5)
  preamble[0] = mode.charCodeAt(0)
  new DataView(preamble.buffer).setUint32(1, frames, true)
  const start = performance.now()
  await connection.write(preamble)
  for (let index = 0; index < frames; index++) {
    if (mode === "A" || mode === "E") {
      for (const part of frameParts(keys[mode], 1, BigInt(index), payload)) await connection.write(part)
    } else {
      const length = new Uint8Array(4)
      new DataView(length.buffer).setUint32(0, payload.length, true)
      await connection.write(length)
      for (let at = 0; at < payload.length; at += 4 << 20) await connection.write(payload.subarray(at, at + (4 << 20)))
    }
  }
  const verified = await acked
  const seconds = (performance.now() - start) / 1000
  connection.end()
  if (verified !== 1) throw new Error("the receiver rejected a frame")
  return (payload.length * frames) / seconds / 1e9
}

export const frameThroughput = async () => {
  const receiver = Bun.spawn([process.execPath, `${import.meta.dir}/frame-receiver-fixture.ts`], { stdin: "pipe", stdout: "pipe" })
  const reader = receiver.stdout.getReader()
  const port = Number(new TextDecoder().decode((await reader.read()).value).trim())
  const lines = ["frame throughput over loopback between two processes (GB/s, median of " + RUNS + " batches)", ""]
  lines.push(
    "| payload | frames per batch | no MAC | no MAC, kept | authenticated | ratio | encrypted | ratio |",
    "|---|---|---|---|---|---|---|---|"
  )
  try {
    for (const { bytes, frames, label } of cases) {
      // Content does not matter to TCP or HMAC; a fill keeps setup cheap.
      const payload = new Uint8Array(bytes).fill(0xa5)
      const authenticated: Array<number> = []
      const encrypted: Array<number> = []
      const raw: Array<number> = []
      const kept: Array<number> = []
      for (const mode of ["A", "E", "R", "K"] as const) await batch(port, mode, payload, 1) // warm-up
      for (let run = 0; run < RUNS; run++) {
        authenticated.push(await batch(port, "A", payload, frames))
        encrypted.push(await batch(port, "E", payload, frames))
        raw.push(await batch(port, "R", payload, frames))
        kept.push(await batch(port, "K", payload, frames))
      }
      const [a, e, r, k] = [median(authenticated), median(encrypted), median(raw), median(kept)]
      // Ratios to the first floor, "no MAC" (counted only), as the target is stated.
      lines.push(
        `| ${label} | ${frames} | ${r.toFixed(2)} | ${k.toFixed(2)} | ${a.toFixed(2)} | ${(a / r).toFixed(2)} | ${e.toFixed(2)} | ${(e / r).toFixed(2)} |`
      )
    }
  } finally {
    receiver.stdin.end()
    await receiver.exited
  }
  return lines.join("\n")
}

if (import.meta.main) console.log(await frameThroughput())
