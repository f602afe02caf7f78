/**
 * The door: the launcher's count of connections whose peer has not
 * authenticated yet, and what it does when there are too many.
 *
 * A connection is `unread` from its accept until the listener has read the
 * dialer's nonce and key id. Then it leaves the count if the nonce vouched
 * for that key (`DoorToken`: an agent, a relay or a rank, which holds it),
 * or it is a `stranger` until its first frame authenticates (then it leaves
 * too), its first-frame deadline passes or it closes. Each kind is counted
 * per source prefix (`SourcePrefix`: all of loopback is one) and in all.
 *
 * Why two counts and two remedies. At accept nothing tells a real agent from
 * a stranger, and a flood that redials the moment it is closed is always the
 * next to come (the issue this answers: 2,300 silent handshakes from
 * 127.0.0.0/8 took every seat, and a self-deployed agent was refused 4 dials
 * in 5). So no connection is turned away for want of room before it has had
 * its chance to be read. A key holder sends its magic, nonce and key id in
 * one write as it connects and leaves the count as soon as they are read;
 * but the launcher reads nothing while it accepts, and it accepts all that
 * is pending at once (Bun does, calling back for each), so under a flood
 * hundreds come between a connection's accept and its first read. So the
 * door counts the event loop's turns (`nextTurn`, from the mux): past the
 * limits, the oldest unread connection makes room for a newer one only once
 * it has been there two turns and `UNREAD_GRACE_MS` (a slow or silent one);
 * while none has, all are kept, up to `held` (and `heldPerPrefix`, so that
 * one prefix's flood leaves room for everyone else), and only past that is
 * the newcomer turned away. Once read, a stranger is known for one, and the
 * strangers have their own, smaller limit: past it a new stranger is reset
 * at once, before any owner spends anything on it (a handshake, keys, a
 * fiber), while those seated keep their seats until their first-frame
 * deadline (about a second) ends them. A flood then costs the launcher an
 * accept, one read and a reset per dial, and takes nothing from a key holder.
 *
 * A recorded vouching nonce could be replayed by someone on the path; the
 * door remembers the recent ones (`SEEN_NONCES`) and takes each once, and a
 * replay counts as a stranger. Only key holders make new ones, so the memory
 * turns over only as fast as real dials come.
 */

export interface DoorLimits {
  /**
   * Connections whose first bytes are not read yet: past `perPrefix` from one source prefix or `total` in all, the
   * oldest goes once it has had its turn to be read; while none has, up to `heldPerPrefix` from one prefix and
   * `held` in all are kept, and past that a newcomer goes (so one prefix's flood leaves room for the others').
   */
  readonly unread: {
    readonly perPrefix: number
    readonly total: number
    readonly heldPerPrefix: number
    readonly held: number
  }
  /** Strangers, from one source prefix and in all: past them, a new one is reset at once. */
  readonly strangers: { readonly perPrefix: number; readonly total: number }
}

/** A connection the door counts, as the mux holds it. */
export interface Ticket<T> {
  readonly prefix: string
  readonly item: T
}

/**
 * An unread connection the door let go (the caller resets it): the oldest, to make room past `limit` (the prefix's
 * or the total), or, `turnedAway`, the newcomer itself, when `held` were waiting and none had had its turn.
 */
export interface Eviction<T> {
  readonly item: T
  readonly prefix: string
  readonly limit: "prefix" | "total"
  readonly turnedAway: boolean
}

/** What a connection turned out to be once its nonce was read. */
export type Shown = "vouched" | "stranger" | "refused"

/**
 * An unread connection makes room only once it has waited this long too (ms), however fast the event loop turns: a
 * dialer sends its first bytes in the same flight as the end of its TCP handshake, so one unread by then is slow or
 * silent, or the launcher is far behind.
 */
export const UNREAD_GRACE_MS = 250

/** Vouching nonces remembered, to take each once: far more than a world's dials in the time a replay is worth anything. */
export const SEEN_NONCES = 16_384

type Stage = "unread" | "stranger" | "gone"

interface Entry<T> extends Ticket<T> {
  stage: Stage
  /** The turn of the event loop it was accepted in, and when (ms). */
  readonly turn: number
  readonly at: number
}

/** One group's counted connections of each kind, in arrival order (a Set keeps insertion order). */
class Group<T> {
  readonly unread = new Set<Entry<T>>()
  readonly strangers = new Set<Entry<T>>()

  get size(): number {
    return this.unread.size + this.strangers.size
  }
}

const first = <A>(set: ReadonlySet<A>): A | undefined => {
  for (const item of set) return item
  return undefined
}

export class Door<T> {
  private readonly all = new Group<T>()
  private readonly prefixes = new Map<string, Group<T>>()
  private readonly seen = new Set<string>()
  private turn = 0

  constructor(private readonly limits: DoorLimits) {}

  /** Connections counted now, of each kind, in all. */
  get counts(): { readonly unread: number; readonly strangers: number } {
    return { unread: this.all.unread.size, strangers: this.all.strangers.size }
  }

  /** The event loop has gone round once more (the mux says so once per turn in which something arrived). */
  nextTurn(): void {
    this.turn += 1
  }

  /**
   * A connection accepted from `prefix` at `now` (ms): room is made for it, and it is counted; or, with `held` waiting
   * and none of them past its turn, it is turned away itself. What goes is returned, for the caller to reset.
   */
  arrive(prefix: string, item: T, now: number): { readonly ticket: Ticket<T>; readonly evicted: ReadonlyArray<Eviction<T>> } {
    const evicted: Array<Eviction<T>> = []
    const mine = this.prefixes.get(prefix)
    if (mine !== undefined && mine.unread.size >= this.limits.unread.perPrefix) this.makeRoom(mine.unread, "prefix", now, evicted)
    if (this.all.unread.size >= this.limits.unread.total) this.makeRoom(this.all.unread, "total", now, evicted)
    const entry: Entry<T> = { prefix, item, stage: "unread", turn: this.turn, at: now }
    const heldHere = (this.prefixes.get(prefix)?.unread.size ?? 0) >= this.limits.unread.heldPerPrefix
    if (heldHere || this.all.unread.size >= this.limits.unread.held) {
      entry.stage = "gone"
      evicted.push({ item, prefix, limit: heldHere ? "prefix" : "total", turnedAway: true })
      return { ticket: entry, evicted }
    }
    this.group(prefix).unread.add(entry)
    this.all.unread.add(entry)
    return { ticket: entry, evicted }
  }

  /**
   * Its nonce has been read: `vouched` says whether it vouched for its key (`DoorToken`). A key holder's leaves the
   * count (unless the door has seen its nonce before: a replay is a stranger's); a stranger takes a stranger's seat,
   * or, with none left in its prefix or in all, is `refused` and leaves the count (the caller resets it). Asked
   * again, the answer stands.
   */
  shown(ticket: Ticket<T>, vouched: boolean, nonce: Uint8Array): Shown {
    const entry = ticket as Entry<T>
    if (entry.stage === "stranger") return "stranger"
    if (entry.stage === "gone") return "vouched"
    if (vouched && this.remember(nonce)) {
      this.remove(entry)
      return "vouched"
    }
    this.remove(entry)
    const mine = this.prefixes.get(entry.prefix)
    if ((mine?.strangers.size ?? 0) >= this.limits.strangers.perPrefix || this.all.strangers.size >= this.limits.strangers.total) return "refused"
    entry.stage = "stranger"
    this.group(entry.prefix).strangers.add(entry)
    this.all.strangers.add(entry)
    return "stranger"
  }

  /** Trusted, vouched or closed: no longer counted. Idempotent. */
  leave(ticket: Ticket<T>): void {
    const entry = ticket as Entry<T>
    if (entry.stage !== "gone") this.remove(entry)
  }

  /** The oldest of `unread` goes, if it has been there two turns and the grace time (else all are kept, up to `held`). */
  private makeRoom(unread: ReadonlySet<Entry<T>>, limit: Eviction<T>["limit"], now: number, evicted: Array<Eviction<T>>): void {
    const oldest = first(unread)!
    if (oldest.turn >= this.turn - 1 || now - oldest.at < UNREAD_GRACE_MS) return
    this.remove(oldest)
    evicted.push({ item: oldest.item, prefix: oldest.prefix, limit, turnedAway: false })
  }

  /** Whether `nonce` is new to the door (it is remembered from now on). */
  private remember(nonce: Uint8Array): boolean {
    const key = Buffer.from(nonce).toString("hex")
    if (this.seen.has(key)) return false
    this.seen.add(key)
    if (this.seen.size > SEEN_NONCES) this.seen.delete(first(this.seen)!)
    return true
  }

  private group(prefix: string): Group<T> {
    let group = this.prefixes.get(prefix)
    if (group === undefined) {
      group = new Group<T>()
      this.prefixes.set(prefix, group)
    }
    return group
  }

  private remove(entry: Entry<T>): void {
    const group = this.prefixes.get(entry.prefix)
    for (const counted of group === undefined ? [this.all] : [this.all, group]) {
      counted.unread.delete(entry)
      counted.strangers.delete(entry)
    }
    if (group !== undefined && group.size === 0) this.prefixes.delete(entry.prefix)
    entry.stage = "gone"
  }
}
