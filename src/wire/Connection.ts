/**
 * A TCP connection as cohort's subsystems see it: bytes in through a
 * receiver that can be swapped (the mux reads the magic, then hands the
 * connection to its channel's owner, leftover bytes included), bytes out with
 * back-pressure (`socket.write` may take only part of a buffer: the rest
 * waits for `drain`).
 */
import type { Socket } from "bun"

export interface Receiver {
  readonly data: (bytes: Uint8Array) => void
  readonly close: () => void
}

/** What each Bun socket carries: the connection it belongs to. */
export interface SocketData {
  connection?: Connection
}

/** Parts of one write up to this size in all are copied into one buffer and sent at once; larger ones go as they are. */
const COALESCE_BYTES = 64 << 10

export class Connection {
  private receiver: Receiver | undefined
  private early: Array<Uint8Array> = []
  private closed = false
  private outbox: Array<Uint8Array> = []
  private flushed: Array<() => void> = []
  /** Told once, when the peer has authenticated or the connection has closed (the mux's count of strangers). */
  private settle: (() => void) | undefined

  /** "127.0.0.1:53124": for logs and per-peer bookkeeping (read while open: Bun forgets it once closed). */
  readonly peer: string
  readonly address: string

  constructor(private readonly socket: Socket<SocketData>) {
    // A fresh object: the `data` given to Bun.listen is shared by every accepted socket.
    socket.data = { connection: this }
    this.address = socket.remoteAddress
    this.peer = `${socket.remoteAddress}:${socket.remotePort ?? "?"}`
  }

  get isClosed(): boolean {
    return this.closed
  }

  /** Have `settle` called once: when the peer proves it holds the key (`trusted`), or when the connection closes. */
  untilTrusted(settle: () => void): void {
    if (this.closed) settle()
    else this.settle = settle
  }

  /** The peer's first frame has authenticated (or its owner has its own limits, like HTTP): it is no stranger now. */
  trusted(): void {
    const settle = this.settle
    this.settle = undefined
    settle?.()
  }

  /** Route incoming bytes to `receiver`, first any that arrived before it was set. */
  receive(receiver: Receiver): void {
    this.receiver = receiver
    const early = this.early
    this.early = []
    for (const bytes of early) receiver.data(bytes)
    if (this.closed) receiver.close()
  }

  /** Put bytes back in front of the stream (what a sniffer read past its magic). */
  unread(bytes: Uint8Array): void {
    if (bytes.length > 0) this.early.unshift(bytes)
  }

  /** Keep what arrives, in order, until the next `receive`. */
  park(): void {
    this.receiver = undefined
  }

  /**
   * The next `n` bytes, or why they did not come in time. Bytes past them
   * stay queued, in order, for the next receiver.
   */
  take(n: number, timeoutMs: number): Promise<Uint8Array | "closed" | "timeout"> {
    return new Promise((resolve) => {
      const parts: Array<Uint8Array> = []
      let have = 0
      const finish = (result: Uint8Array | "closed" | "timeout", rest?: Uint8Array) => {
        clearTimeout(timer)
        this.park()
        if (rest !== undefined) this.unread(rest)
        resolve(result)
      }
      const timer = setTimeout(() => finish("timeout"), timeoutMs)
      this.receive({
        data: (bytes) => {
          parts.push(new Uint8Array(bytes))
          have += bytes.length
          if (have < n) return
          const all = new Uint8Array(Buffer.concat(parts))
          finish(all.subarray(0, n), all.subarray(n))
        },
        close: () => finish("closed")
      })
    })
  }

  /** Queue bytes for sending; resolves once the kernel has taken all of them. */
  write(...parts: ReadonlyArray<Uint8Array>): Promise<void> {
    return this.send(...parts) ? Promise.resolve() : this.drained()
  }

  /**
   * Queue bytes for sending; true when the kernel took all of them at once, as it
   * does for nearly every small frame: the sender then has nothing to wait for.
   */
  send(...parts: ReadonlyArray<Uint8Array>): boolean {
    if (this.closed) return true
    const total = parts.reduce((sum, part) => sum + part.length, 0)
    if (parts.length > 1 && total > 0 && total <= COALESCE_BYTES) {
      // A small frame's header, payload and MAC in one send: one system call instead of three.
      const whole = new Uint8Array(total)
      let at = 0
      for (const part of parts) {
        whole.set(part, at)
        at += part.length
      }
      this.outbox.push(whole)
    } else {
      for (const part of parts) if (part.length > 0) this.outbox.push(part)
    }
    this.flush()
    return this.outbox.length === 0
  }

  /** Resolves once everything queued has gone to the kernel (or the connection has closed). */
  drained(): Promise<void> {
    return this.outbox.length === 0 ? Promise.resolve() : new Promise((resolve) => this.flushed.push(resolve))
  }

  /** Close after what is queued has been sent. */
  end(): void {
    if (this.outbox.length === 0) this.socket.end()
    else this.flushed.push(() => this.socket.end())
  }

  /** Close now, with a reset: for dialers nobody is waiting for. */
  reset(): void {
    this.socket.terminate()
  }

  // Called by the socket handlers of the listener or the dialer.

  onData(bytes: Uint8Array): void {
    if (this.receiver === undefined) this.early.push(new Uint8Array(bytes))
    else this.receiver.data(bytes)
  }

  onDrain(): void {
    this.flush()
  }

  onClose(): void {
    if (this.closed) return
    this.closed = true
    this.trusted()
    this.outbox = []
    for (const resolve of this.flushed.splice(0)) resolve()
    this.receiver?.close()
  }

  private flush(): void {
    while (this.outbox.length > 0) {
      const head = this.outbox[0]!
      const written = this.socket.write(head)
      if (written < head.length) {
        this.outbox[0] = head.subarray(Math.max(0, written))
        return
      }
      this.outbox.shift()
    }
    for (const resolve of this.flushed.splice(0)) resolve()
  }
}

/** Socket handlers that forward everything to the socket's Connection. */
export const forwardingHandlers = {
  data: (socket: Socket<SocketData>, bytes: Uint8Array) => socket.data.connection?.onData(bytes),
  drain: (socket: Socket<SocketData>) => socket.data.connection?.onDrain(),
  close: (socket: Socket<SocketData>) => socket.data.connection?.onClose(),
  error: (socket: Socket<SocketData>) => socket.data.connection?.onClose()
}
