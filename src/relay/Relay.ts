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
 * Its facts and decisions (who is connected, whether the host is alone,
 * where a round is reduced, when the board may serve, when the host is idle)
 * are one pure state, `RelayState`; this file is its interpreter, stepped
 * synchronously from the socket callbacks and the launcher's orders, and the
 * owner of the resources (sockets, segments, the board, the barrier's views).
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
import * as Machine from "../kernel/Machine.ts"
import { FoldBarrier, roundEpoch } from "./FoldBarrier.ts"
import { HostBoard } from "./HostBoard.ts"
import { HostReduction, type Round, type Source } from "./HostReduction.ts"
import { helloRefusal } from "./RankHello.ts"
import { freshBeats, registered, RelayEffect, RelayEvent, type RelayState, relayStep } from "./RelayState.ts"
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
    /** The controller's answer to the round that is up (the state says whether one is). */
    let awaiting: Deferred.Deferred<Reduced> | undefined

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
        const reply = yield* Deferred.make<Reduced>()
        awaiting = reply
        const weight = round.reduce((sum, contribution) => sum + contribution.weight, 0)
        upstream(new HostFold({ op, weight, ranks: round.length, epoch: roundEpoch(round), data: new Uint8Array(out.buffer, out.byteOffset, bytes).slice() }))
        const reduced = yield* Deferred.await(reply)
        if (reduced.failure !== undefined) return fail(round, reduced.failure)
        out.set(floats(reduced.data.slice(0, bytes), bytes))
        deliver(round, out)
      })

    /** Rounds a lone host can finish run here, at once; one that needs the controller runs as a fiber. */
    const advance = (step: (event: RelayEvent<Source>) => void): void => {
      while (!relay.current().awaitingController) {
        const round = barrier.take()
        if (round === undefined) return step(RelayEvent.BarrierQuiet({ allIdle: barrier.allIdle(relay.current().endedEpoch + 1) }))
        step(RelayEvent.RoundReady({ round, live: barrier.live.length }))
      }
    }

    const carryOut = (effect: RelayEffect<Source>, step: (event: RelayEvent<Source>) => void): void => {
      switch (effect._tag) {
        case "BoardOff":
          return board?.off()
        case "OfferBoard": {
          const slot = board?.assign(effect.rank)
          if (slot !== undefined) tell(effect.rank, { t: "board", seg: board!.path, slot })
          return
        }
        case "JoinBarrier":
          return barrier.join(effect.rank, effect.entered)
        case "ForgetRank":
          board?.off()
          board?.release(effect.rank)
          segments.forget(effect.rank)
          return barrier.leave(effect.rank)
        case "MarkIdle":
          return barrier.idle(effect.rank)
        case "Wake":
          for (const rank of effect.ranks) barrier.wake(rank)
          return
        case "Enter":
          for (const rank of effect.ranks) barrier.enter(rank, effect.fromEpoch)
          return
        case "Advance":
          return advance(step)
        case "FailRound":
          fail(effect.round, effect.reason)
          return barrier.finish()
        case "FoldHere":
          try {
            const out = reduction.fold(effect.round, true)
            if (effect.boardOn) board?.onFor(effect.round.map(({ rank }) => rank))
            deliver(effect.round, out)
          } catch (error) {
            fail(effect.round, `the relay could not reduce: ${(error as Error).message}`)
          }
          return barrier.finish()
        case "SendUp":
          return void runFork(reduceAcrossHosts(effect.round).pipe(
            Effect.catchAllDefect((defect) => Effect.sync(() => fail(effect.round, `the relay could not reduce: ${String(defect)}`))),
            Effect.ensuring(Effect.sync(() => {
              awaiting = undefined
              relay.step(RelayEvent.RoundAnswered())
            }))
          ))
        case "FinishRound":
          return barrier.finish()
        case "SayIdle":
          return void upstream(new HostIdle({ afterEpoch: effect.afterEpoch }))
        case "PushExchange":
          return void upstream(new ElasticPush({ rank: effect.rank, data: effect.exchange.source.slice() }))
        case "AnswerExchange":
          if (effect.failure !== undefined || effect.data === undefined) {
            return tell(effect.rank, { t: "reduced", error: effect.failure ?? "the controller sent no parameters" })
          }
          effect.exchange.source.set(effect.data.subarray(0, effect.exchange.bytes))
          return tell(effect.rank, { t: "reduced", bytes: effect.exchange.bytes })
      }
    }
    // The one place the relay's facts change: socket callbacks and the launcher's orders step it.
    const relay = Machine.runSync<RelayState, RelayEvent<Source>, RelayEffect<Source>>(
      { initial: registered(spec.ranks, spec.worldSize), step: relayStep },
      { carryOut }
    )

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
        const refusal = helloRefusal(spec, LOCAL_PROTOCOL_VERSION, [...relay.current().connected], rank, { rank: claimed, version: message.version })
        if (refusal !== undefined) return refuse(socket, refusal)
        socket.data.rank = claimed
        sockets.set(claimed, socket)
        return relay.step(RelayEvent.RankHello({ rank: claimed, board: message.board === true }))
      }
      if (rank === undefined) return socket.end()
      switch (message.t) {
        case "reduce": {
          relay.step(RelayEvent.SocketReduce({ rank }))
          const { bytes, epoch, offset, op, seg, tensor, weight } = message
          const mapped = bytes === 0 ? new Uint8Array(0) : segmentOf(rank, seg)
          if (typeof mapped === "string") return tell(rank, { t: "reduced", error: mapped })
          if (offset + bytes > mapped.length) return tell(rank, { t: "reduced", error: `a tensor of ${bytes} bytes at ${offset} is past the end of its segment` })
          const source = mapped.subarray(offset, offset + bytes)
          if (op === "elastic") return relay.step(RelayEvent.ExchangeSent({ rank, exchange: { source, bytes } }))
          const refused = barrier.contribute({ rank, op, bytes, weight, epoch, source: { bytes: source, inPlace: tensor === true } })
          if (refused !== undefined) return tell(rank, { t: "reduced", error: refused })
          return advance(relay.step)
        }
        case "idle":
          return relay.step(RelayEvent.RankIdle({ rank, epoch: message.epoch }))
        case "report": {
          const report = decodeReport(message.report)
          if (Either.isLeft(report)) return runFork(Effect.logWarning(`rank ${rank} sent a malformed report; dropped`))
          if (report.right._tag === "Heartbeat") return relay.step(RelayEvent.RankBeat({ rank, at: performance.now() }))
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
          relay.step(RelayEvent.RankGone({ rank }))
        },
        error: () => {}
      }
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => server.stop(true)))

    const beatUp = Effect.suspend(() => {
      const ranks = freshBeats(relay.current(), performance.now())
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
          const { order, ranks } = received
          relay.step(RelayEvent.OrdersCame({ ranks, endedEpoch: order._tag === "EpochEnd" ? order.epoch : undefined }))
          const encoded = encodeOrder(order)
          for (const rank of ranks) tell(rank, { t: "order", order: encoded })
        } else if (received._tag === "WorldGrown") {
          relay.step(RelayEvent.WorldGrown({ ranks: received.ranks, fromEpoch: received.fromEpoch }))
        } else if (received._tag === "Reduced") {
          if (awaiting !== undefined) yield* Deferred.succeed(awaiting, received)
        } else if (received._tag === "ElasticPulled") {
          relay.step(RelayEvent.ExchangeAnswered({ rank: received.rank, data: received.failure === undefined ? received.data : undefined, failure: received.failure }))
        }
      }
    })
    yield* Effect.raceFirst(serve, FiberSet.join(fibers))
  })
