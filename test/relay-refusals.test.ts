/**
 * What the relay refuses on its local socket, with the real relay (`Relay.run`, registered on a real
 * ControlGate over a real port) and connections that speak the frames by hand:
 * - hellos: another host's rank, a rank already connected, a second hello on one connection, one rank more
 *   than the host has slots (and a restart's new number once a slot is free), another protocol version,
 *   a malformed hello; each refused with its one-line reason, then closed;
 * - `reduce`s whose `seg` is not a file under the run directory (an absolute path elsewhere, `..` out of
 *   it, a link out of it, a relative path, a missing file, a FIFO, a directory): answered with an error
 *   naming it, the connection still served.
 * The verdicts themselves (`helloRefusal`) are a literal table first.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as ControlGate from "../src/launcher/front/ControlGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { helloRefusal, type HostSeats } from "../src/relay/RankHello.ts"
import * as Relay from "../src/relay/Relay.ts"
import { hostKey, newSalt } from "../src/wire/Keys.ts"
import { encodeLocal, LocalFrameReader } from "../src/wire/LocalFrames.ts"
import { effect, eventually } from "./support/effect.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const tempDir = (name: string) => {
  const dir = mkdtempSync(join(tmpdir(), `cohort-relay-refusals-${name}-`))
  dirs.push(dir)
  return dir
}

const HOST = "h"
/** Host h holds ranks 0 and 1 of a world of 4: 2 and 3 are another host's. */
const seats: HostSeats = { host: HOST, ranks: [0, 1], worldSize: 4 }

describe("helloRefusal", () => {
  const table: ReadonlyArray<readonly [string, ReadonlyArray<number>, number | undefined, { rank: number; version: number | undefined }, string | undefined]> = [
    ["the host's first rank", [], undefined, { rank: 0, version: 1 }, undefined],
    ["the host's second rank, from a client older than versions", [0], undefined, { rank: 1, version: undefined }, undefined],
    ["a restart's new number, with a slot free", [0], undefined, { rank: 4, version: 1 }, undefined],
    ["a new number far past the world, with a slot free", [1], undefined, { rank: 4_095, version: 1 }, undefined],
    ["another host's rank", [], undefined, { rank: 2, version: 1 }, "rank 2 belongs to another host (or has ended): the relay of h serves ranks 0, 1 and their restarts under new numbers (4 on)"],
    ["the last rank of the world, another host's", [0, 1], undefined, { rank: 3, version: 1 }, "rank 3 belongs to another host (or has ended): the relay of h serves ranks 0, 1 and their restarts under new numbers (4 on)"],
    ["one more than the slots", [1, 0], undefined, { rank: 4, version: 1 }, "the relay of h already serves 2 rank(s) (0, 1), one per slot of the host: rank 4 has no slot"],
    ["a rank already connected", [0], undefined, { rank: 0, version: 1 }, "rank 0 is already connected to the relay of h: one connection per rank"],
    ["a second hello on one connection", [0], 0, { rank: 1, version: 1 }, "this connection already speaks for rank 0: a rank says hello once"],
    [
      "another protocol version, before anything else",
      [0, 1],
      undefined,
      { rank: 2, version: 99 },
      "rank 2 speaks version 99 of the rank-relay protocol and this relay speaks 1: use the client that comes with this cohort (python/cohort in its checkout)"
    ]
  ]
  for (const [what, connected, said, claim, expected] of table) {
    test(what, () => expect(helloRefusal(seats, 1, connected, said, claim)).toBe(expected))
  }
})

/** A connection to the relay's socket, speaking local frames by hand. */
const dial = (socketPath: string) =>
  Effect.promise(async () => {
    const reader = new LocalFrameReader()
    const inbox: Array<unknown> = []
    let wake = () => {}
    let closed = false
    const socket = await Bun.connect({
      unix: socketPath,
      socket: {
        data: (_socket, chunk) => {
          inbox.push(...reader.push(chunk))
          wake()
        },
        close: () => {
          closed = true
          wake()
        }
      }
    })
    /** The next message; undefined once the relay has closed the connection and nothing is left. */
    const next = async (): Promise<unknown> => {
      while (inbox.length === 0 && !closed) await new Promise<void>((resolve) => (wake = resolve))
      return inbox.shift()
    }
    return {
      send: (message: unknown) => void socket.write(encodeLocal(message)),
      next: () => Effect.promise(next),
      closed: () => closed,
      close: () => socket.end()
    }
  })

type Dialled = Effect.Effect.Success<ReturnType<typeof dial>>

const relayOf = (spec: { ranks: ReadonlyArray<number>; worldSize: number }) =>
  Effect.gen(function*() {
    const dir = tempDir("run")
    const salt = newSalt()
    const control = yield* ControlGate.make({
      salt,
      ranksOf: (host) => Effect.succeed(host === HOST ? spec.ranks : undefined),
      handshakeMs: 5_000,
      beatEveryMs: 1_000,
      onMessage: () => Effect.void,
      onClosed: () => Effect.void
    })
    const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { control: control.owner } })
    const socket = join(dir, "relay.sock")
    const relaySpec = { host: HOST, ranks: spec.ranks, worldSize: spec.worldSize, controller: { host: "127.0.0.1", port: mux.port }, dir, socket, heartbeatTimeoutMs: 60_000 }
    yield* Effect.forkScoped(Relay.run(relaySpec, hostKey(salt, HOST), 5_000).pipe(Effect.ignore))
    yield* eventually(Effect.sync(() => existsSync(socket)), "the relay's socket")
    const opened: Array<Dialled> = []
    yield* Effect.addFinalizer(() => Effect.sync(() => opened.forEach((connection) => connection.close())))
    const connect = Effect.tap(dial(socket), (connection) => Effect.sync(() => void opened.push(connection)))
    return { dir, connect }
  })

const MALFORMED_REDUCE = { t: "reduced", error: "a malformed reduce request" }

/** Say hello as `rank`; then a malformed reduce, which only a connection the relay serves gets an answer to. */
const hello = (connection: Dialled, rank: number, extra: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    connection.send({ t: "hello", rank, version: 2, ...extra })
    connection.send({ t: "reduce" })
    return yield* connection.next()
  })

describe("the relay's hellos", () => {
  effect.live("another host's rank is refused with its reason, and the connection closed", () =>
    Effect.gen(function*() {
      const { connect } = yield* relayOf(seats)
      const other = yield* connect
      expect(yield* hello(other, 2)).toEqual({ t: "refused", reason: "rank 2 belongs to another host (or has ended): the relay of h serves ranks 0, 1 and their restarts under new numbers (4 on)" })
      expect(yield* other.next()).toBeUndefined()
      expect(other.closed()).toBe(true)
      // The host's own ranks are still served.
      expect(yield* hello(yield* connect, 0)).toEqual(MALFORMED_REDUCE)
    }), 20_000)

  effect.live("one connection more than the host's slots is refused; a restart's new number is served once a slot is free", () =>
    Effect.gen(function*() {
      const { connect } = yield* relayOf(seats)
      const zero = yield* connect
      const one = yield* connect
      expect(yield* hello(zero, 0)).toEqual(MALFORMED_REDUCE)
      expect(yield* hello(one, 1)).toEqual(MALFORMED_REDUCE)
      const third = yield* connect
      expect(yield* hello(third, 4)).toEqual({ t: "refused", reason: "the relay of h already serves 2 rank(s) (0, 1), one per slot of the host: rank 4 has no slot" })
      expect(yield* third.next()).toBeUndefined()
      // Rank 1 dies: its restart, under the new number 4, takes its slot (once the relay has seen the close).
      one.close()
      let answer: unknown
      yield* eventually(Effect.gen(function*() {
        answer = yield* hello(yield* connect, 4)
        return (answer as { t?: unknown }).t !== "refused"
      }), "rank 4 served in rank 1's slot")
      expect(answer).toEqual(MALFORMED_REDUCE)
      const fourth = yield* connect
      expect(yield* hello(fourth, 5)).toEqual({ t: "refused", reason: "the relay of h already serves 2 rank(s) (0, 4), one per slot of the host: rank 5 has no slot" })
    }), 20_000)

  effect.live("a rank already connected, a second hello, another version and a malformed hello are refused, each with its reason", () =>
    Effect.gen(function*() {
      const { connect } = yield* relayOf(seats)
      const zero = yield* connect
      expect(yield* hello(zero, 0)).toEqual(MALFORMED_REDUCE)
      const twin = yield* connect
      expect(yield* hello(twin, 0)).toEqual({ t: "refused", reason: "rank 0 is already connected to the relay of h: one connection per rank" })
      const versioned = yield* connect
      expect(yield* hello(versioned, 1, { version: 3 })).toEqual({
        t: "refused",
        reason: "rank 1 speaks version 3 of the rank-relay protocol and this relay speaks 2: use the client that comes with this cohort (python/cohort in its checkout)"
      })
      const malformed = yield* connect
      expect(yield* hello(malformed, -1)).toEqual({
        t: "refused",
        reason: "a malformed hello: it needs a rank (a whole number from 0), and may have a version (a whole number) and board (a boolean)"
      })
      // A second hello on rank 0's own connection ends it.
      zero.send({ t: "hello", rank: 1, version: 2 })
      expect(yield* zero.next()).toEqual({ t: "refused", reason: "this connection already speaks for rank 0: a rank says hello once" })
      expect(yield* zero.next()).toBeUndefined()
    }), 20_000)
})

describe("the relay's segments", () => {
  effect.live("a reduce whose seg is not a file under the run directory is answered with an error naming it; the connection goes on", () =>
    Effect.gen(function*() {
      const { connect, dir } = yield* relayOf(seats)
      const real = realpathSync(dir)
      const elsewhere = tempDir("elsewhere")
      const outsideFile = join(elsewhere, "r0-1.seg")
      writeFileSync(outsideFile, new Uint8Array(4096))
      const inside = join(dir, "r0-1.seg")
      writeFileSync(inside, new Uint8Array(4096))
      symlinkSync(outsideFile, join(dir, "link.seg"))
      mkdirSync(join(dir, "folder.seg"))
      expect(Bun.spawnSync(["mkfifo", join(dir, "fifo.seg")]).exitCode).toBe(0)
      const zero = yield* connect
      expect(yield* hello(zero, 0)).toEqual(MALFORMED_REDUCE)
      const reduce = (seg: string, bytes = 16) =>
        Effect.gen(function*() {
          zero.send({ t: "reduce", op: "sum", bytes, weight: 1, epoch: 0, seg, offset: 0 })
          return yield* zero.next()
        })
      const notIn = (seg: string) => ({
        t: "reduced",
        error: `the segment "${seg}" is not in the host's run directory ${real}: a rank's segments are files it made in its envelope's dir`
      })
      const table: ReadonlyArray<readonly [string, unknown]> = [
        [outsideFile, notIn(outsideFile)],
        ["/etc/passwd", notIn("/etc/passwd")],
        [join(dir, "..", elsewhere.split("/").at(-1)!, "r0-1.seg"), notIn(join(dir, "..", elsewhere.split("/").at(-1)!, "r0-1.seg"))],
        [`${dir}/../${elsewhere.split("/").at(-1)}/r0-1.seg`, notIn(`${dir}/../${elsewhere.split("/").at(-1)}/r0-1.seg`)],
        [join(dir, "link.seg"), notIn(join(dir, "link.seg"))],
        ["r0-1.seg", { t: "reduced", error: `the segment "r0-1.seg" is not an absolute path: name a file in the host's run directory ${real}` }],
        [join(dir, "missing.seg"), {
          t: "reduced",
          error: `the segment "${join(dir, "missing.seg")}" cannot be opened (ENOENT): name a file the rank made in the host's run directory ${real}`
        }],
        [join(dir, "fifo.seg"), { t: "reduced", error: `the segment "${join(dir, "fifo.seg")}" is not a regular file` }],
        [join(dir, "folder.seg"), { t: "reduced", error: `the segment "${join(dir, "folder.seg")}" is not a regular file` }],
        [`${dir}/x\u001b[2J`, {
          t: "reduced",
          error: `the segment "${dir}/x\\x1b[2J" cannot be opened (ENOENT): name a file the rank made in the host's run directory ${real}`
        }]
      ]
      for (const [seg, expected] of table) expect([seg, yield* reduce(seg)]).toEqual([seg, expected])
      // A segment under the run directory is mapped: this one is too short for the range asked, which says so.
      expect(yield* reduce(inside, 8192)).toEqual({ t: "reduced", error: "a tensor of 8192 bytes at 0 is past the end of its segment" })
      // A `..` that stays inside is fine too.
      expect(yield* reduce(`${dir}/folder.seg/../r0-1.seg`, 8192)).toEqual({ t: "reduced", error: "a tensor of 8192 bytes at 0 is past the end of its segment" })
    }), 20_000)
})
