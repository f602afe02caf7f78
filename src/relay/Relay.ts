/**
 * The relay: one per host, started by its agent once the host's ranks run.
 *
 * Upstream it registers the host's ranks with the launcher over the control
 * channel and holds that link for the run. Downstream it serves the host's
 * ranks on a Unix socket in the host's private run directory:
 * - reports (progress, checkpoints) go up to the coordinator, the ranks'
 *   heartbeats in one `HostBeats` per beat interval; orders (plans, beats,
 *   stop) come down to the ranks they name;
 * - reductions: each rank leaves its tensor in its shared-memory segment and
 *   says so; once every active rank has (`FoldBarrier`), the relay sums them
 *   with the native kernel (the TypeScript one where the library cannot be
 *   loaded: `Native.cpuKernels`). A host alone in the world finishes the round
 *   itself; otherwise it sends one `HostFold` upstream and waits for the
 *   controller's `Reduced`. The result is written back into every
 *   contributor's own segment (the first one's in place, the others by the
 *   kernel's threads), so a rank whose tensor lives there (`ctx.tensor`)
 *   copies nothing. `ctx.sync` rounds always go up: the
 *   controller holds the model root (outer optimizer);
 * - `cpu_async` exchanges skip the barrier: each goes up on its own and the
 *   rank's new parameters come back into its own segment.
 * Whatever dials the socket is served only as one of the host's ranks, one
 * connection per slot (`RankHello`), and a `reduce` is answered from a
 * segment only when that is a file under the run directory (`Segments`).
 *
 * It leaves when the launcher closes the link (the run is over), when its
 * agent goes (IPC disconnect) or on SIGTERM.
 */
import { rmSync } from "node:fs"
import type { Socket } from "bun"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberSet from "effect/FiberSet"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { beatEveryMs } from "../config/Heartbeat.ts"
import * as Native from "../native/Native.ts"
import { CoordinatorOrder, RelayedReport } from "../wire/messages/CoordinatorMessages.ts"
import { controlCodec, ElasticPush, FromRank, HostBeats, HostFold, HostIdle, type Reduced, RelayHello } from "../wire/messages/ControlMessages.ts"
import * as Link from "../wire/Link.ts"
import { encodeLocal, LOCAL_PROTOCOL_VERSION, LocalFrameReader } from "../wire/LocalFrames.ts"
import { PendingWrites } from "../wire/PendingWrites.ts"
import { floats, SegmentMaps, SegmentPathError } from "../wire/Segments.ts"
import type { RelaySpec } from "../wire/messages/Envelope.ts"
import { FoldBarrier, mismatch, roundEpoch } from "./FoldBarrier.ts"
import { HostBoard } from "./HostBoard.ts"
import { HostReduction, type Round, type Source } from "./HostReduction.ts"
import { helloRefusal } from "./RankHello.ts"
import { RankToRelay, type RelayToRank } from "../wire/messages/LocalMessages.ts"
import { printable } from "../wire/Printable.ts"

/** A Schema, not a plain tagged error: the relay exits with it, and its agent reads its line. */
export class RelayError extends Schema.TaggedError<RelayError>()("RelayError", { reason: Schema.String }) {
  override get message(): string {
    return this.reason
  }
}

interface RankSocket {
  rank: number | undefined
  readonly reader: LocalFrameReader
  /** What the socket has not taken yet (a checkpoint in a welcome is larger than its buffer). */
  readonly writes: PendingWrites
}

const encodeOrder = Schema.encodeSync(CoordinatorOrder)
const decodeReport = Schema.decodeUnknownEither(RelayedReport)
const decodeLocal = Schema.decodeUnknownEither(RankToRelay)

/**
 * A rank is in a `HostBeats` while its own last beat (every second) is this recent: a beat that comes late
 * by up to a second still keeps it in every one, so a busy rank is not taken for a silent one.
 */
const BEAT_FRESH_MS = 2_000

/** Register with the launcher (with the host's key, `Keys.hostKey`), then serve the host's ranks until the link ends. */
export const run = (spec: RelaySpec, hostKey: Uint8Array, handshakeMs: number): Effect.Effect<void, RelayError | Link.LinkError, Scope.Scope> =>
  Effect.gen(function*() {
    // Without the native library the TypeScript kernels reduce: same results, slower. The host's agent has said
    // so once for the host (a relay's warning would be a second line of the same news on the launcher's terminal).
    const { fallback, kernels } = yield* Native.cpuKernels()
    if (fallback !== undefined) yield* Effect.logDebug(`reducing with the TypeScript kernels: ${fallback}`)
    const link = yield* Link.dial({
      channel: "control",
      host: spec.controller.host,
      port: spec.controller.port,
      salt: hostKey,
      keyId: spec.host,
      inbound: controlCodec,
      outbound: controlCodec,
      handshakeMs
    })
    yield* link.send(new RelayHello({ host: spec.host, ranks: spec.ranks }))
    const answer = yield* link.receive.pipe(
      Effect.timeoutFail({
        duration: Duration.millis(handshakeMs),
        onTimeout: () => new RelayError({ reason: `the launcher did not answer the relay's registration within ${handshakeMs} ms` })
      })
    )
    if (answer._tag !== "RelayAccepted") {
      return yield* new RelayError({ reason: `the launcher refused the relay: ${answer._tag === "RelayRejected" ? answer.reason : answer._tag}` })
    }
    yield* Effect.logDebug(`registered ranks ${spec.ranks.join(", ")} with the launcher`)

    // What socket callbacks start runs in this scope's FiberSet: interrupted when the relay ends, and the
    // first of them to die ends the relay with it (raced against the serving loop below), never unseen.
    const fibers = yield* FiberSet.make<unknown, never>()
    const runFork = yield* FiberSet.runtime(fibers)<never>()
    const upstream = (message: FromRank | HostFold | HostIdle | ElasticPush) => runFork(Effect.ignore(link.send(message)))
    /** Rounds of epochs before this one are finished here (the host is the world's only one); later ones go up. */
    let aloneBefore = spec.ranks.length === spec.worldSize ? Number.POSITIVE_INFINITY : 0
    const alone = (round: Round) => roundEpoch(round) < aloneBefore
    const sockets = new Map<number, Socket<RankSocket>>()
    const barrier = new FoldBarrier<Source>(spec.ranks)
    const reduction = new HostReduction(kernels, spec.dir)
    // Only files under the run directory: a rank names its segments, and the relay writes results into them.
    const segments = new SegmentMaps(spec.dir)
    // Small all-reduces among this host's ranks in shared memory, while every member takes part in every round.
    const board = yield* Effect.try(() => HostBoard.create(spec.dir, spec.ranks.length)).pipe(
      Effect.tapError((error) => Effect.logDebug(`no board for small all-reduces: ${String(error.error)}`)),
      Effect.orElseSucceed(() => undefined)
    )
    let awaitingController: Deferred.Deferred<Reduced> | undefined
    let toldIdle = false
    /** The last epoch whose end was passed on: an idle from before it is stale (it crossed the EpochEnd on the way). */
    let endedEpoch = 0
    /** `cpu_async` exchanges waiting for the controller, by rank: the answer goes back into the rank's segment. */
    const exchanges = new Map<number, { source: Uint8Array; bytes: number }>()
    /** Each connected rank's last heartbeat (performance.now()). */
    const beatAt = new Map<number, number>()

    const tell = (rank: number, message: RelayToRank) => {
      const socket = sockets.get(rank)
      socket?.data.writes.write(socket, encodeLocal(message))
    }

    const fail = (round: Round, reason: string) => {
      for (const { rank } of round) tell(rank, { t: "reduced", error: reason })
    }
    const deliver = (round: Round, out: Float32Array) => {
      for (const [rank, reply] of reduction.deliver(round, out)) tell(rank, reply)
    }

    /** A round this host cannot finish alone: its fold goes to the controller, the average comes back. */
    const reduceAcrossHosts = (round: Round) =>
      Effect.gen(function*() {
        const { bytes, op } = round[0]!
        const out = reduction.fold(round, false)
        toldIdle = false
        const reply = yield* Deferred.make<Reduced>()
        awaitingController = reply
        const weight = round.reduce((sum, contribution) => sum + contribution.weight, 0)
        upstream(new HostFold({ op, weight, ranks: round.length, epoch: roundEpoch(round), data: new Uint8Array(out.buffer, out.byteOffset, bytes).slice() }))
        const reduced = yield* Deferred.await(reply)
        if (reduced.failure !== undefined) return fail(round, reduced.failure)
        out.set(floats(reduced.data.slice(0, bytes), bytes))
        deliver(round, out)
      })

    const advance = (): void => {
      // Rounds a lone host can finish run here, at once; one that needs the controller runs as a fiber.
      while (true) {
        const round = barrier.take()
        if (round === undefined) {
          if (Number.isFinite(aloneBefore) && barrier.allIdle(endedEpoch + 1) && !toldIdle && awaitingController === undefined) {
            toldIdle = true
            upstream(new HostIdle({ afterEpoch: endedEpoch }))
          }
          return
        }
        const problem = mismatch(round)
        // Model syncs always go up: the model root is the controller's.
        if (problem === undefined && (!alone(round) || round[0]!.op === "sync")) {
          runFork(reduceAcrossHosts(round).pipe(
            Effect.catchAllDefect((defect) => Effect.sync(() => fail(round, `the relay could not reduce: ${String(defect)}`))),
            Effect.ensuring(Effect.sync(() => {
              awaitingController = undefined
              barrier.finish()
              advance()
            }))
          ))
          return
        }
        try {
          if (problem !== undefined) fail(round, problem)
          else {
            const out = reduction.fold(round, true)
            // Every member was in this round and waits for its answer: nothing of theirs is on the way, so the
            // board can take the next rounds (turned on before the answers go, so that they find it on).
            if (board !== undefined && aloneBefore === Number.POSITIVE_INFINITY && round.length === barrier.live.length) {
              board.onFor(round.map(({ rank }) => rank))
            }
            deliver(round, out)
          }
        } catch (error) {
          fail(round, `the relay could not reduce: ${(error as Error).message}`)
        }
        barrier.finish()
      }
    }

    const refuse = (socket: Socket<RankSocket>, reason: string) => {
      const refused: RelayToRank = { t: "refused", reason }
      socket.data.writes.write(socket, encodeLocal(refused))
      socket.data.writes.end(socket)
    }

    /** A rank's segment, mapped; or why not (a path outside the run directory, a file that cannot be mapped), for the rank to raise. */
    const segmentOf = (rank: number, seg: string): Uint8Array | string => {
      try {
        return segments.map(rank, seg)
      } catch (error) {
        return error instanceof SegmentPathError ? error.message : `the segment "${printable(seg, 200)}" cannot be mapped: ${printable(String(error), 200)}`
      }
    }

    const fromRank = (socket: Socket<RankSocket>, raw: unknown) => {
      const { rank } = socket.data
      const decoded = decodeLocal(raw)
      if (Either.isLeft(decoded)) {
        const t = typeof raw === "object" && raw !== null ? (raw as { t?: unknown }).t : undefined
        if (t === "hello") return refuse(socket, "a malformed hello: it needs a rank (a whole number from 0), and may have a version (a whole number) and board (a boolean)")
        if (rank === undefined) return socket.end()
        // A malformed reduce still gets its answer: the rank waits for one.
        if (t === "reduce") return tell(rank, { t: "reduced", error: "a malformed reduce request" })
        return runFork(Effect.logWarning(`rank ${rank} sent a malformed ${typeof t === "string" ? printable(t, 32) : "local"} message; dropped`))
      }
      const message = decoded.right
      if (message.t === "hello") {
        const claimed = message.rank
        // The host's slots, its own numbers and their restarts' (`RankHello`); a version of its own protocol.
        const refusal = helloRefusal(spec, LOCAL_PROTOCOL_VERSION, [...sockets.keys()], rank, { rank: claimed, version: message.version })
        if (refusal !== undefined) return refuse(socket, refusal)
        socket.data.rank = claimed
        sockets.set(claimed, socket)
        // A member the board's rounds do not count yet: off until the barrier has made a round with it.
        board?.off()
        // Only a host alone in the world uses its board: in a larger one no slot is handed out (nor copied into).
        const slot = message.board === true && aloneBefore === Number.POSITIVE_INFINITY ? board?.assign(claimed) : undefined
        if (slot !== undefined) tell(claimed, { t: "board", seg: board!.path, slot })
        // A restarted rank takes its place in the barrier again; one under a new number waits for its epoch (WorldGrown).
        barrier.join(claimed, spec.ranks.includes(claimed))
        return
      }
      if (rank === undefined) return socket.end()
      switch (message.t) {
        case "reduce": {
          // Through the socket: the board's rounds would miss this rank (and a cancelled round is redone here).
          board?.off()
          const { bytes, epoch, offset, op, seg, tensor, weight } = message
          const mapped = bytes === 0 ? new Uint8Array(0) : segmentOf(rank, seg)
          if (typeof mapped === "string") return tell(rank, { t: "reduced", error: mapped })
          if (offset + bytes > mapped.length) return tell(rank, { t: "reduced", error: `a tensor of ${bytes} bytes at ${offset} is past the end of its segment` })
          const source = mapped.subarray(offset, offset + bytes)
          if (op === "elastic") {
            exchanges.set(rank, { source, bytes })
            return upstream(new ElasticPush({ rank, data: source.slice() }))
          }
          const refused = barrier.contribute({ rank, op, bytes, weight, epoch, source: { bytes: source, inPlace: tensor === true } })
          if (refused !== undefined) return tell(rank, { t: "reduced", error: refused })
          return advance()
        }
        case "idle":
          if (message.epoch <= endedEpoch) return
          board?.off()
          barrier.idle(rank)
          return advance()
        case "report": {
          const report = decodeReport(message.report)
          if (Either.isLeft(report)) return runFork(Effect.logWarning(`rank ${rank} sent a malformed report; dropped`))
          if (report.right._tag === "Heartbeat") {
            beatAt.set(rank, performance.now())
            return
          }
          // Unchecked: the report was just decoded, and the codec checks the message again as it encodes it.
          return upstream(new FromRank({ rank, report: report.right }, true))
        }
      }
    }

    rmSync(spec.socket, { force: true })
    const server = Bun.listen<RankSocket>({
      unix: spec.socket,
      socket: {
        open: (socket) => {
          socket.data = { rank: undefined, reader: new LocalFrameReader(), writes: new PendingWrites() }
        },
        drain: (socket) => socket.data.writes.drain(socket),
        data: (socket, chunk) => {
          try {
            for (const message of socket.data.reader.push(chunk)) fromRank(socket, message)
          } catch (error) {
            runFork(Effect.logWarning(`closed a rank's connection: ${(error as Error).message}`))
            socket.end()
          }
        },
        close: (socket) => {
          const { rank } = socket.data
          if (rank === undefined || sockets.get(rank) !== socket) return
          sockets.delete(rank)
          // Whoever waits on the board for this rank is told at once, and redoes the round without it.
          board?.off()
          board?.release(rank)
          beatAt.delete(rank)
          segments.forget(rank)
          barrier.leave(rank)
          advance()
        },
        error: () => {}
      }
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => server.stop(true)))

    const beatUp = Effect.suspend(() => {
      const now = performance.now()
      const ranks = [...beatAt].flatMap(([rank, at]) => (now - at <= BEAT_FRESH_MS ? [rank] : []))
      return ranks.length === 0 ? Effect.void : Effect.ignore(link.send(new HostBeats({ ranks }, true)))
    })
    // The host's beats go up in one `HostBeats`, as often as the heartbeat timeout calls for.
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(Duration.millis(beatEveryMs(spec.heartbeatTimeoutMs))), beatUp)))

    // Served until the launcher closes the link (the end of the run, not an error) or goes silent
    // (it beats every second): a frozen launcher must not keep the host's relay forever.
    const next = link.receive.pipe(
      Effect.timeout(Duration.millis(spec.heartbeatTimeoutMs)),
      Effect.tapError((error) =>
        error._tag === "TimeoutException" ? Effect.logError(`heard nothing from the launcher for ${spec.heartbeatTimeoutMs} ms; leaving`) : Effect.void
      ),
      Effect.orElseSucceed(() => undefined)
    )
    const serve = Effect.gen(function*() {
      while (true) {
        const received = yield* next
        if (received === undefined) return
        if (received._tag === "ToRanks") {
          if (received.order._tag === "EpochEnd") {
            // Before anyone hears of it: the epoch-end collectives wait for every rank.
            for (const rank of received.ranks) barrier.wake(rank)
            endedEpoch = Math.max(endedEpoch, received.order.epoch)
            toldIdle = false
          }
          const order = encodeOrder(received.order)
          for (const rank of received.ranks) tell(rank, { t: "order", order })
        } else if (received._tag === "WorldGrown") {
          // Ranks entered. Another host's: from their first epoch on, this host's rounds are no longer its own to
          // finish. One of this host's (restarted under a new number): its rounds wait for it from then.
          board?.off()
          const own = received.ranks.filter((rank) => sockets.has(rank))
          for (const rank of own) barrier.enter(rank, received.fromEpoch)
          if (own.length < received.ranks.length) aloneBefore = Math.min(aloneBefore, received.fromEpoch)
          advance()
        } else if (received._tag === "Reduced") {
          if (awaitingController !== undefined) yield* Deferred.succeed(awaitingController, received)
        } else if (received._tag === "ElasticPulled") {
          const exchange = exchanges.get(received.rank)
          exchanges.delete(received.rank)
          if (exchange === undefined) continue
          if (received.failure !== undefined) {
            tell(received.rank, { t: "reduced", error: received.failure })
          } else {
            exchange.source.set(received.data.subarray(0, exchange.bytes))
            tell(received.rank, { t: "reduced", bytes: exchange.bytes })
          }
        }
      }
    })
    yield* Effect.raceFirst(serve, FiberSet.join(fibers))
  })
