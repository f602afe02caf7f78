/**
 * A TCP connection as cohort's subsystems see it: bytes in through a
 * receiver that can be swapped (the mux reads the magic, then hands the
 * connection to its channel's owner, leftover bytes included), bytes out with
 * back-pressure (`socket.write` may take only part of a buffer: the rest
 * waits for `drain`).
 *
 * Back-pressure inward too: a receiver that cannot keep up calls
 * `pauseReading`, and Bun stops reading the socket (`Socket.pause`), so the
 * kernel's receive buffer fills and TCP's window stops the peer; no data
 * callback comes until `resumeReading`. A FIN is not seen while paused (it
 * comes after the data, in order, once reading resumes); a reset still is.
 * A parked connection (no receiver yet) pauses the same way once it holds
 * `PARKED_BYTES`, so a peer cannot fill our memory while its owner is busy.
 *
 * A connection the mux accepted carries its door's watch (`DoorWatch`)
 * until its peer authenticates or it closes: the listener's handshake tells
 * it whether the dialer's nonce vouched for its key (`shown`), and learns
 * from it how long a stranger has for its first frame.
 */
import type { Socket } from "bun"

export interface Receiver {
  readonly data: (bytes: Uint8Array) => void
  readonly close: () => void
}

/**
 * What the listener's door (PortMux) is told of a connection whose peer has not authenticated yet. A connection
 * has one from its accept until `settled`.
 */
export interface DoorWatch {
  /**
   * The dialer's nonce has been read, and `vouched` or not for the key it named (`DoorToken`): the door counts it
   * no more (a key holder's), seats it as a stranger's, or has no seat left for a stranger (`refused`).
   */
  readonly shown: (vouched: boolean, nonce: Uint8Array) => "vouched" | "stranger" | "refused"
  /** Trusted (its first frame authenticated, or HTTP handed on) or closed: told once. */
  readonly settled: () => void
  /** How long a stranger has, from the listener's nonce, for a first frame that authenticates. */
  readonly firstFrameMs: number
}

/** What each Bun socket carries: the connection it belongs to. */
export interface SocketData {
  connection?: Connection
}

/** Parts of one write up to this size in all are copied into one buffer and sent at once; larger ones go as they are. */
const COALESCE_BYTES = 64 << 10

/**
 * A parked connection stops reading once it holds this much. A dialer sends under 300 bytes before the
 * listener answers (magic, nonce, key id); 64 KiB, the ceiling of a first frame before authentication
 * (`UNAUTHENTICATED_CEILING`), also leaves room for a frame that comes before its owner has the link.
 */
export const PARKED_BYTES = 64 << 10

export class Connection {
  private receiver: Receiver | undefined
  private early: Array<Uint8Array> = []
  private earlyBytes = 0
  private closed = false
  /** The receiver asked for no more bytes for now (`pauseReading`). */
  private held = false
  /** Parked with `PARKED_BYTES` or more kept: no more until a receiver takes them. */
  private parkedFull = false
  /** What the socket was last told: reading or paused. */
  private paused = false
  private outbox: Array<Uint8Array> = []
  private flushed: Array<() => void> = []
  /** The door's watch, until the peer has authenticated or the connection has closed (the mux's count of strangers). */
  private door: DoorWatch | undefined
  /** What the door made of the dialer's nonce, once told (the mux or the listener's handshake, whichever reads it first). */
  private showing: { readonly as: "vouched" | "stranger" | "refused"; readonly firstFrameMs: number } | undefined

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

  /** Tell `door` what becomes of this connection until the peer proves it holds the key (`trusted`) or it closes. */
  untilTrusted(door: DoorWatch): void {
    if (this.closed) door.settled()
    else this.door = door
  }

  /**
   * The dialer's nonce has been read, and `vouched` or not for the key it named (`DoorToken`); the first call tells
   * the door, later ones get the same answer. Returns how long the peer has, from the listener's answer, for a
   * first frame that authenticates: the door's deadline for a stranger; undefined for a key holder (the door no
   * longer counts it) or with no door (no mux: nothing to count); `refused` when the door has no seat for another
   * stranger (the caller resets the connection).
   */
  shown(vouched: boolean, nonce: Uint8Array): number | undefined | "refused" {
    if (this.showing === undefined) {
      const door = this.door
      if (door === undefined) return undefined
      this.showing = { as: door.shown(vouched, nonce), firstFrameMs: door.firstFrameMs }
    }
    switch (this.showing.as) {
      case "vouched":
        return undefined
      case "refused":
        return "refused"
      case "stranger":
        return this.showing.firstFrameMs
    }
  }

  /** The peer's first frame has authenticated (or its owner has its own limits, like HTTP): it is no stranger now. */
  trusted(): void {
    const door = this.door
    this.door = undefined
    door?.settled()
  }

  /** Route incoming bytes to `receiver`, first any that arrived before it was set. */
  receive(receiver: Receiver): void {
    this.receiver = receiver
    const early = this.early
    this.early = []
    this.earlyBytes = 0
    // Before the early bytes: the receiver may pause while it takes them, and that must stand.
    this.parkedFull = false
    for (let index = 0; index < early.length; index++) {
      if (this.receiver !== receiver) {
        // A `take` that has its bytes parks the connection: the rest waits, in order, behind what it put back.
        for (const rest of early.slice(index)) {
          this.early.push(rest)
          this.keptEarly(rest.length)
        }
        break
      }
      receiver.data(early[index]!)
    }
    this.applyReading()
    // A receiver that parked the connection has what it wanted: the close is the next receiver's to hear.
    if (this.closed && this.receiver === receiver) receiver.close()
  }

  /** Put bytes back in front of the stream (what a sniffer read past its magic). */
  unread(bytes: Uint8Array): void {
    if (bytes.length === 0) return
    this.early.unshift(bytes)
    this.keptEarly(bytes.length)
  }

  /**
   * Stop reading from the socket until `resumeReading`: the receiver's own buffer is full. Bytes already
   * read may still be in the receiver's hands; none come through `data` while paused.
   */
  pauseReading(): void {
    this.held = true
    this.applyReading()
  }

  /** Read from the socket again (unless the connection is parked and full). */
  resumeReading(): void {
    this.held = false
    this.applyReading()
  }

  /** Whether the socket is being read now (false while paused, for either reason, or once closed). */
  get isReading(): boolean {
    return !this.closed && !this.paused
  }

  /** Bytes queued for sending that the kernel has not taken yet: what waits for `drain`. */
  get unsentBytes(): number {
    return this.outbox.reduce((sum, part) => sum + part.length, 0)
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

  /**
   * The next `n` bytes if they have already arrived and no receiver is set (a parked connection: what the mux
   * read past the magic), else undefined. What `take` gives, without a Promise and a timer: a dialer sends its
   * opening with the magic, so the listener nearly always has it by then.
   */
  takeNow(n: number): Uint8Array | undefined {
    if (this.receiver !== undefined || this.earlyBytes < n) return undefined
    const all = this.early.length === 1 ? this.early[0]! : new Uint8Array(Buffer.concat(this.early))
    this.early = []
    this.earlyBytes = 0
    this.parkedFull = false
    if (all.length > n) {
      this.early.push(all.subarray(n))
      this.keptEarly(all.length - n)
    }
    this.applyReading()
    return all.subarray(0, n)
  }

  /** The first `n` bytes kept for the next receiver, left where they are; undefined while fewer have come. */
  peek(n: number): Uint8Array | undefined {
    if (this.receiver !== undefined || this.earlyBytes < n) return undefined
    const head = this.early[0]!
    return head.length >= n ? head.subarray(0, n) : new Uint8Array(Buffer.concat(this.early)).subarray(0, n)
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
    if (this.receiver !== undefined) return this.receiver.data(bytes)
    // A copy: Bun reuses the buffer it hands to `data`.
    this.early.push(new Uint8Array(bytes))
    this.keptEarly(bytes.length)
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

  private keptEarly(bytes: number): void {
    this.earlyBytes += bytes
    if (this.receiver === undefined && this.earlyBytes >= PARKED_BYTES && !this.parkedFull) {
      this.parkedFull = true
      this.applyReading()
    }
  }

  /** Tell the socket to pause or resume only when the wanted state changes: each change is a system call. */
  private applyReading(): void {
    if (this.closed) return
    const pause = this.held || this.parkedFull
    if (pause === this.paused) return
    this.paused = pause
    if (pause) this.socket.pause()
    else this.socket.resume()
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
