/**
 * Writes that survive a full socket. Bun's `socket.write` writes what the kernel takes at once and returns the
 * count; the rest is the caller's to keep and write again when the socket drains. A frame larger than the
 * socket's buffer (a checkpoint in a `Welcome` or a `CheckpointSave`: a few hundred KB is enough) would
 * otherwise arrive cut short, and the reader wait for the rest of it forever.
 *
 * One per socket: `write` queues behind anything still pending, so frames never interleave; `drain` is the
 * socket's drain handler; `end` closes the socket once everything queued is written.
 *
 * Effect-free on purpose: ranks use it.
 */
interface Writable {
  write(data: Uint8Array): number
  end(): void
}

export class PendingWrites {
  private readonly queue: Array<Uint8Array> = []
  private ending = false

  /** Write `bytes` after whatever is still queued. */
  write(socket: Writable, bytes: Uint8Array): void {
    if (this.queue.length > 0) {
      this.queue.push(bytes)
      return
    }
    const written = socket.write(bytes)
    // -1: the socket is closed; what was not written is then of no use to anyone.
    if (written >= 0 && written < bytes.length) this.queue.push(bytes.subarray(written))
  }

  /** The socket can take more: write what is queued, as far as it goes. */
  drain(socket: Writable): void {
    while (this.queue.length > 0) {
      const head = this.queue[0]!
      const written = socket.write(head)
      if (written < 0) {
        this.queue.length = 0
        break
      }
      if (written < head.length) {
        this.queue[0] = head.subarray(written)
        return
      }
      this.queue.shift()
    }
    if (this.ending) socket.end()
  }

  /** Close the socket once everything queued is written. */
  end(socket: Writable): void {
    this.ending = true
    if (this.queue.length === 0) socket.end()
  }

  /** Bytes written by `write` that the socket has not taken yet. */
  get queuedBytes(): number {
    return this.queue.reduce((sum, chunk) => sum + chunk.length, 0)
  }
}
