/**
 * The door's parts, each against literal tables: source prefixes, the door
 * token of a dialer's nonce, the door's counts and what it lets go, and the
 * agent's delays before dialling again. (The door at work, with sockets:
 * test/port-mux.test.ts; under a real flood: test/door-flood.e2e.test.ts.)
 */
import { describe, expect, test } from "bun:test"
import { HANDSHAKE_DIALS, retryDelayMs } from "../src/agent/HandshakeRetry.ts"
import { Door, type DoorLimits, SEEN_NONCES, UNREAD_GRACE_MS } from "../src/launcher/front/Door.ts"
import { sourcePrefix } from "../src/launcher/front/SourcePrefix.ts"
import { magic } from "../src/wire/Channel.ts"
import { vouches, vouchingNonce } from "../src/wire/DoorToken.ts"
import { hostKey, newSalt, OPEN_SALT } from "../src/wire/Keys.ts"

describe("sourcePrefix", () => {
  test.each([
    ["127.0.0.1", "127.0.0.0/8"],
    ["127.255.3.9", "127.0.0.0/8"],
    ["10.1.2.3", "10.1.2.0/24"],
    ["10.1.2.254", "10.1.2.0/24"],
    ["192.168.0.7", "192.168.0.0/24"],
    ["::ffff:10.1.2.3", "10.1.2.0/24"],
    ["::FFFF:127.0.0.1", "127.0.0.0/8"],
    ["::1", "::/64"],
    ["2001:db8:0:1:aaaa:bbbb:cccc:dddd", "2001:db8:0:1::/64"],
    ["2001:db8:0:1::5", "2001:db8:0:1::/64"],
    ["2001:DB8::1", "2001:db8::/64"],
    ["fe80::1%eth0", "fe80::/64"],
    ["2001:db8:1:2:3:4:1.2.3.4", "2001:db8:1:2::/64"],
    // Not an address: its own source.
    ["", ""],
    ["300.1.2.3", "300.1.2.3"],
    ["1:2:3", "1:2:3"],
    ["1::2::3", "1::2::3"]
  ])("%p is counted under %p", (address, prefix) => {
    expect(sourcePrefix(address)).toBe(prefix)
  })
})

describe("the door token", () => {
  const salt = newSalt()
  test("a nonce made under a key vouches for that key, key id and channel, and for nothing else", () => {
    const nonce = vouchingNonce(salt, magic.join, "")
    expect(nonce.length).toBe(16)
    expect(vouches(salt, magic.join, "", nonce)).toBe(true)
    expect([
      vouches(newSalt(), magic.join, "", nonce),
      vouches(salt, magic.control, "", nonce),
      vouches(salt, magic.join, "node-a", nonce),
      vouches(salt, magic.join, "", nonce.map((byte, index) => (index === 15 ? byte ^ 1 : byte))),
      vouches(salt, magic.join, "", nonce.map((byte, index) => (index === 0 ? byte ^ 1 : byte))),
      vouches(salt, magic.join, "", nonce.subarray(0, 15))
    ]).toEqual([false, false, false, false, false, false])
  })

  test("a relay's host key vouches for its host's id; two nonces are never the same", () => {
    const key = hostKey(salt, "node-a")
    const [first, second] = [vouchingNonce(key, magic.control, "node-a"), vouchingNonce(key, magic.control, "node-a")]
    expect([vouches(key, magic.control, "node-a", first), vouches(key, magic.control, "node-b", first)]).toEqual([true, false])
    expect(Buffer.from(first).equals(Buffer.from(second))).toBe(false)
  })

  test("the open key, which anyone can compute, vouches for nobody", () => {
    expect(vouches(OPEN_SALT, magic.join, "open", vouchingNonce(OPEN_SALT, magic.join, "open"))).toBe(false)
  })

  test("random bytes vouch for nothing", () => {
    let vouched = 0
    for (let i = 0; i < 1_000; i++) if (vouches(salt, magic.join, "", crypto.getRandomValues(new Uint8Array(16)))) vouched += 1
    expect(vouched).toBe(0)
  })
})

describe("Door", () => {
  const limits = (over: Partial<{ perPrefix: number; total: number; heldPerPrefix: number; held: number; strangers: number; strangersTotal: number }> = {}): DoorLimits => ({
    unread: { perPrefix: over.perPrefix ?? 2, total: over.total ?? 4, heldPerPrefix: over.heldPerPrefix ?? 4, held: over.held ?? 6 },
    strangers: { perPrefix: over.strangers ?? 2, total: over.strangersTotal ?? 3 }
  })
  const nonce = (n: number) => new Uint8Array(16).fill(n)
  const loopback = "127.0.0.0/8"
  /** `t` ms after the start, in the door's turn `turn` (turns advanced to it first). */
  const clock = (door: Door<string>) => {
    let turn = 0
    return (to: number) => {
      while (turn < to) {
        door.nextTurn()
        turn += 1
      }
    }
  }

  test("past the prefix's limit, the oldest unread goes once it has had two turns and the grace time; a fresh one is kept", () => {
    const door = new Door<string>(limits())
    const turnTo = clock(door)
    expect(door.arrive(loopback, "a", 0).evicted).toEqual([])
    expect(door.arrive(loopback, "b", 0).evicted).toEqual([])
    // Over 2, but "a" came this very turn: kept (up to 4 from one prefix).
    expect(door.arrive(loopback, "c", 10).evicted).toEqual([])
    turnTo(1)
    // The last turn still: kept.
    expect(door.arrive(loopback, "d", 20).evicted).toEqual([])
    turnTo(2)
    // Two turns on, but not yet the grace time.
    expect(door.arrive(loopback, "e", UNREAD_GRACE_MS - 1).evicted).toEqual([{ item: "e", prefix: loopback, limit: "prefix", turnedAway: true }])
    expect(door.arrive(loopback, "f", UNREAD_GRACE_MS).evicted).toEqual([{ item: "a", prefix: loopback, limit: "prefix", turnedAway: false }])
    expect(door.counts).toEqual({ unread: 4, strangers: 0 })
  })

  test("past the prefix's held unread, with none past its turn, the newcomer is turned away; other prefixes still get in", () => {
    const door = new Door<string>(limits({ heldPerPrefix: 3, held: 5 }))
    for (const item of ["a", "b", "c"]) expect(door.arrive(loopback, item, 0).evicted).toEqual([])
    expect(door.arrive(loopback, "d", 0).evicted).toEqual([{ item: "d", prefix: loopback, limit: "prefix", turnedAway: true }])
    expect(door.arrive("10.0.0.0/24", "x", 0).evicted).toEqual([])
    expect(door.arrive("10.0.1.0/24", "y", 0).evicted).toEqual([])
    // Five held in all: now anyone is turned away.
    expect(door.arrive("10.0.2.0/24", "z", 0).evicted).toEqual([{ item: "z", prefix: "10.0.2.0/24", limit: "total", turnedAway: true }])
    expect(door.counts).toEqual({ unread: 5, strangers: 0 })
  })

  test("past the total, the oldest anywhere goes once it has had its turn", () => {
    const door = new Door<string>(limits({ perPrefix: 10, total: 2 }))
    const turnTo = clock(door)
    door.arrive("10.0.0.0/24", "a", 0)
    door.arrive("10.0.1.0/24", "b", 0)
    turnTo(2)
    expect(door.arrive("10.0.2.0/24", "c", UNREAD_GRACE_MS).evicted).toEqual([{ item: "a", prefix: "10.0.0.0/24", limit: "total", turnedAway: false }])
  })

  test("a key holder's nonce takes it out of the count; a stranger takes a seat, and past the seats is refused; answers stand", () => {
    const door = new Door<string>(limits({ strangers: 2, strangersTotal: 3 }))
    const tickets = ["a", "b", "c", "d"].map((item) => door.arrive(loopback, item, 0).ticket)
    expect(door.shown(tickets[0]!, true, nonce(1))).toBe("vouched")
    expect(door.shown(tickets[1]!, false, nonce(2))).toBe("stranger")
    expect(door.shown(tickets[2]!, false, nonce(3))).toBe("stranger")
    expect(door.counts).toEqual({ unread: 1, strangers: 2 })
    expect(door.shown(tickets[3]!, false, nonce(4))).toBe("refused")
    expect(door.counts).toEqual({ unread: 0, strangers: 2 })
    // Asked again (the mux read it, then the owner's handshake did): the same answer.
    expect([door.shown(tickets[1]!, true, nonce(5)), door.shown(tickets[0]!, false, nonce(1))]).toEqual(["stranger", "vouched"])
    // A seat is given back when its stranger authenticates or goes.
    door.leave(tickets[1]!)
    door.leave(tickets[1]!)
    const next = door.arrive(loopback, "e", 0).ticket
    expect(door.shown(next, false, nonce(6))).toBe("stranger")
    // Three strangers in all: another prefix has none left either.
    expect(door.shown(door.arrive("10.0.0.0/24", "f", 0).ticket, false, nonce(7))).toBe("stranger")
    expect(door.shown(door.arrive("10.0.1.0/24", "g", 0).ticket, false, nonce(8))).toBe("refused")
  })

  test("a vouching nonce seen before is a replay: a stranger's; the memory of nonces is bounded", () => {
    const door = new Door<string>(limits({ perPrefix: 100_000, total: 100_000, heldPerPrefix: 100_000, held: 100_000, strangers: 10, strangersTotal: 10 }))
    expect(door.shown(door.arrive(loopback, "a", 0).ticket, true, nonce(9))).toBe("vouched")
    expect(door.shown(door.arrive(loopback, "b", 0).ticket, true, nonce(9))).toBe("stranger")
    // After SEEN_NONCES newer ones, the first is forgotten.
    for (let i = 0; i < SEEN_NONCES; i++) {
      const fresh = new Uint8Array(16)
      new DataView(fresh.buffer).setUint32(0, i + 1)
      fresh[15] = 0xee
      door.shown(door.arrive(loopback, `n${i}`, 0).ticket, true, fresh)
    }
    expect(door.shown(door.arrive(loopback, "c", 0).ticket, true, nonce(9))).toBe("vouched")
  })
})

describe("the agent's dials after a closed handshake", () => {
  test.each([
    [2, 0, 250],
    [2, 0.999_999, 312],
    [3, 0, 500],
    [4, 0.5, 1_125],
    [5, 0, 2_000],
    [6, 0, 4_000],
    [7, 1, 10_000],
    [8, 0, undefined]
  ])("dial %p with jitter %p waits %p ms", (dial, jitter, wait) => {
    expect(retryDelayMs(dial, jitter)).toBe(wait)
  })

  test("seven dials in all", () => {
    expect(HANDSHAKE_DIALS).toBe(7)
  })
})
