/**
 * PendingWrites against a socket that takes only part of each write, as Bun's does when the kernel's buffer is
 * full, and against a real Unix socket whose reader is slow: every byte arrives, in order, and `end` waits for
 * the queue. Expected bytes are the ones the test wrote; the fake's capacity is a literal.
 */
import { describe, expect, test } from "bun:test"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PendingWrites } from "../src/wire/PendingWrites.ts"

/** A socket that takes at most `room` bytes until `free` is called, and records what it took. */
const partialSocket = (room: number) => {
  const taken: Array<number> = []
  let left = room
  let ended = false
  return {
    write(data: Uint8Array) {
      const n = Math.min(left, data.length)
      for (const byte of data.subarray(0, n)) taken.push(byte)
      left -= n
      return n
    },
    end() {
      ended = true
    },
    free(bytes: number) {
      left += bytes
    },
    get taken() {
      return taken
    },
    get ended() {
      return ended
    }
  }
}

describe("PendingWrites", () => {
  test("what the socket does not take is written on drain, after what came before, never interleaved", () => {
    const socket = partialSocket(3)
    const writes = new PendingWrites()
    writes.write(socket, new Uint8Array([1, 2, 3, 4, 5]))
    writes.write(socket, new Uint8Array([6, 7]))
    expect(socket.taken).toEqual([1, 2, 3])
    expect(writes.queuedBytes).toBe(4)
    socket.free(2)
    writes.drain(socket)
    expect(socket.taken).toEqual([1, 2, 3, 4, 5])
    socket.free(10)
    writes.drain(socket)
    expect(socket.taken).toEqual([1, 2, 3, 4, 5, 6, 7])
    expect(writes.queuedBytes).toBe(0)
  })

  test("end waits for the queue to be written", () => {
    const socket = partialSocket(1)
    const writes = new PendingWrites()
    writes.write(socket, new Uint8Array([9, 8]))
    writes.end(socket)
    expect(socket.ended).toBe(false)
    socket.free(1)
    writes.drain(socket)
    expect(socket.taken).toEqual([9, 8])
    expect(socket.ended).toBe(true)
  })

  test("a closed socket (-1) drops the queue instead of retrying forever", () => {
    const writes = new PendingWrites()
    writes.write({ write: () => -1, end: () => {} }, new Uint8Array([1]))
    expect(writes.queuedBytes).toBe(0)
  })

  test("a 4 MiB frame over a real Unix socket, far more than its buffer takes at once, arrives whole", async () => {
    const path = join(tmpdir(), `cohort-pending-${process.pid}.sock`)
    rmSync(path, { force: true })
    const frame = new Uint8Array(4 << 20).map((_, i) => i % 251)
    const server = Bun.listen<{ writes: PendingWrites }>({
      unix: path,
      socket: {
        open(socket) {
          socket.data = { writes: new PendingWrites() }
          socket.data.writes.write(socket, frame)
          socket.data.writes.end(socket)
        },
        drain: (socket) => socket.data.writes.drain(socket),
        data() {}
      }
    })
    const chunks: Array<Uint8Array> = []
    const closed = Promise.withResolvers<void>()
    const client = await Bun.connect({ unix: path, socket: { data: (_s, chunk) => void chunks.push(new Uint8Array(chunk)), close: () => closed.resolve() } })
    await closed.promise
    client.end()
    server.stop(true)
    const received = Buffer.concat(chunks)
    expect(received.length).toBe(4 << 20)
    expect(received.equals(Buffer.from(frame))).toBe(true)
  })
})
