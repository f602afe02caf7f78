/**
 * Frame throughput between two processes over loopback: authenticated
 * frames (AES-128-GCM tag, hashed while streaming on both ends), encrypted
 * frames (the payload encrypted too, `controller.encrypt`) and raw
 * length-prefixed frames with no MAC, in the same run, interleaved. Each is
 * taken twice by the receiver: counted (cohort's decoder lends each payload,
 * as a link, which decodes it at once, takes it) and kept (each payload
 * copied into memory of its own, as an owner that holds it does).
 * Each contender has one connection for the whole run, as a link carries
 * round after round. The receiver (frame-receiver-fixture.ts) verifies every
 * frame and answers once per batch; the clock covers the whole batch until
 * that answer.
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


type Mode = "A" | "B" | "E" | "R" | "K"

/** One connection of one mode, carrying batch after batch, as a link carries round after round. */
interface Sender {
  readonly mode: Mode
  readonly connection: Connection
  /** The next frame's sequence number on this connection. */
  sequence: bigint
  /** Where the receiver's answer to the batch in flight goes. */
  readonly answers: { to: (byte: number) => void }
}

const open = async (port: number, mode: Mode): Promise<Sender> => {
  const answers = { to: (_byte: number) => {} }
  const socket = await Bun.connect<SocketData>({
    hostname: "127.0.0.1",
    port,
    data: {},
    socket: {
      ...forwardingHandlers,
      open: (opened: Socket<SocketData>) => void new Connection(opened),
      data: (_socket, bytes) => answers.to(bytes[0]!)
    }
  })
  const connection = socket.data.connection!
  await connection.write(new Uint8Array([mode.charCodeAt(0)]))
  return { mode, connection, sequence: 0n, answers }
}

/** One batch of `frames` frames of `payload`: GB/s from its first byte to the receiver's answer. */
const batch = async (sender: Sender, payload: Uint8Array, frames: number): Promise<number> => {
  const { connection, mode } = sender
  const acked = new Promise<number>((resolve) => (sender.answers.to = resolve))
  const count = new Uint8Array(4)
  new DataView(count.buffer).setUint32(0, frames, true)
  const start = performance.now()
  await connection.write(count)
  for (let index = 0; index < frames; index++) {
    if (mode === "A" || mode === "B" || mode === "E") {
      for (const part of frameParts(keys[mode === "E" ? "E" : "A"], 1, sender.sequence++, payload)) await connection.write(part)
    } else {
      const length = new Uint8Array(4)
      new DataView(length.buffer).setUint32(0, payload.length, true)
      await connection.write(length)
      for (let at = 0; at < payload.length; at += 4 << 20) await connection.write(payload.subarray(at, at + (4 << 20)))
    }
  }
  const verified = await acked
  const seconds = (performance.now() - start) / 1000
  if (verified !== 1) throw new Error("the receiver rejected a frame")
  return (payload.length * frames) / seconds / 1e9
}

export const frameThroughput = async () => {
  const receiver = Bun.spawn([process.execPath, `${import.meta.dir}/frame-receiver-fixture.ts`], { stdin: "pipe", stdout: "pipe" })
  const reader = receiver.stdout.getReader()
  const port = Number(new TextDecoder().decode((await reader.read()).value).trim())
  const lines = ["frame throughput over loopback between two processes (GB/s, median of " + RUNS + " batches)", ""]
  lines.push(
    "| payload | frames per batch | no MAC | authenticated | ratio | encrypted | ratio | no MAC, kept | authenticated, kept | ratio |",
    "|---|---|---|---|---|---|---|---|---|---|"
  )
  try {
    for (const { bytes, frames, label } of cases) {
      // Content does not matter to TCP or HMAC; a fill keeps setup cheap.
      const payload = new Uint8Array(bytes).fill(0xa5)
      const authenticated: Array<number> = []
      const encrypted: Array<number> = []
      const raw: Array<number> = []
      const kept: Array<number> = []
      const authenticatedKept: Array<number> = []
      const senders = {
        A: await open(port, "A"), B: await open(port, "B"), E: await open(port, "E"), R: await open(port, "R"), K: await open(port, "K")
      }
      // Warm-up: a connection's first frame is taken before its peer has authenticated, as a link's handshake is.
      for (const sender of Object.values(senders)) await batch(sender, payload, 1)
      for (let run = 0; run < RUNS; run++) {
        authenticated.push(await batch(senders.A, payload, frames))
        encrypted.push(await batch(senders.E, payload, frames))
        raw.push(await batch(senders.R, payload, frames))
        kept.push(await batch(senders.K, payload, frames))
        authenticatedKept.push(await batch(senders.B, payload, frames))
      }
      for (const sender of Object.values(senders)) sender.connection.end()
      const [a, e, r, k, b] = [median(authenticated), median(encrypted), median(raw), median(kept), median(authenticatedKept)]
      // Ratios to the floor of the same kind: counted to counted (as the target is stated), kept to kept.
      lines.push(
        `| ${label} | ${frames} | ${r.toFixed(2)} | ${a.toFixed(2)} | ${(a / r).toFixed(2)} | ${e.toFixed(2)} | ${(e / r).toFixed(2)} | ` +
          `${k.toFixed(2)} | ${b.toFixed(2)} | ${(b / k).toFixed(2)} |`
      )
    }
  } finally {
    receiver.stdin.end()
    await receiver.exited
  }
  return lines.join("\n")
}

if (import.meta.main) console.log(await frameThroughput())
