/**
 * The relay: one per host, started by its agent once the host's ranks run.
 *
 * Upstream it registers the host's ranks with the launcher over the control
 * channel and holds that link for the run. Downstream it serves the host's
 * ranks on a Unix socket in the host's private run directory:
 * - reports (progress, heartbeats, checkpoints) go up to the coordinator,
 *   orders (plans, beats, stop) come down to the ranks they name;
 * - reductions: each rank leaves its tensor in its shared-memory segment and
 *   says so; once every active rank has (`FoldBarrier`), the relay sums them
 *   with the native kernel. A host alone in the world finishes the round
 *   itself; otherwise it sends one `HostFold` upstream and waits for the
 *   controller's `Reduced`. The result goes into the relay's result segment,
 *   which every contributor copies from. `ctx.sync` rounds always go up: the
 *   controller holds the model root (outer optimizer);
 * - `cpu_async` exchanges skip the barrier: each goes up on its own and the
 *   rank's new parameters come back into its own segment.
 *
 * It leaves when the launcher closes the link (the run is over), when its
 * agent goes (IPC disconnect) or on SIGTERM.
 */
import { join } from "node:path"
import { rmSync } from "node:fs"
import type { Socket } from "bun"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { controlCodec } from "../launcher/ControlGate.ts"
import * as Native from "../../native/Native.ts"
import { CoordinatorOrder, RankReport } from "../../wire/CoordinatorMessages.ts"
import { ElasticPush, FromRank, HostFold, HostIdle, type Reduced, RelayHello } from "../../wire/ControlMessages.ts"
import { saltFromHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { encodeLocal, LocalFrameReader } from "../../wire/LocalFrames.ts"
import { createSegment, floats, segmentCapacity, SegmentMaps } from "../../wire/Segments.ts"
import type { RelaySpec } from "../agent/Envelope.ts"
import { type Contribution, FoldBarrier, mismatch } from "./FoldBarrier.ts"

export class RelayError extends Data.TaggedError("RelayError")<{ readonly reason: string }> {
  override get message(): string {
    return this.reason
  }
}

interface RankSocket {
  rank: number | undefined
  readonly reader: LocalFrameReader
}

const encodeOrder = Schema.encodeSync(CoordinatorOrder)
const decodeReport = Schema.decodeUnknownEither(RankReport)

/** Register with the launcher, then serve the host's ranks until the link ends. */
export const run = (spec: RelaySpec, handshakeMs: number): Effect.Effect<void, RelayError | Link.LinkError, Scope.Scope> =>
  Effect.gen(function*() {
    const salt = saltFromHex(spec.saltHex)
    if (salt === undefined) return yield* new RelayError({ reason: "the relay spec's salt is not 32 hex digits" })
    const native = yield* Native.load().pipe(Effect.mapError((error) => new RelayError({ reason: error.message })))
    const link = yield* Link.dial({
      channel: "control",
      host: spec.controller.host,
      port: spec.controller.port,
      salt,
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

    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const upstream = (message: FromRank | HostFold | HostIdle | ElasticPush) => runFork(Effect.ignore(link.send(message)))
    const solo = spec.ranks.length === spec.worldSize
    const sockets = new Map<number, Socket<RankSocket>>()
    const barrier = new FoldBarrier<Uint8Array>(spec.ranks)
    const segments = new SegmentMaps()
    let result: { path: string; bytes: Uint8Array; generation: number } = { path: "", bytes: new Uint8Array(0), generation: 0 }
    let awaitingController: Deferred.Deferred<Reduced> | undefined
    let toldIdle = false
    /** The last epoch whose end was passed on: an idle from before it is stale (it crossed the EpochEnd on the way). */
    let endedEpoch = 0
    /** `cpu_async` exchanges waiting for the controller, by rank: the answer goes back into the rank's segment. */
    const exchanges = new Map<number, { source: Uint8Array; bytes: number }>()

    const tell = (rank: number, message: unknown) => {
      sockets.get(rank)?.write(encodeLocal(message))
    }

    const resultSegment = (bytes: number) => {
      if (result.bytes.length >= bytes && result.path !== "") return result
      const generation = result.generation + 1
      const path = join(spec.dir, `result-${generation}.seg`)
      result = { path, bytes: createSegment(path, segmentCapacity(bytes)), generation }
      return result
    }

    /** Reduce one round: fold locally, average with the other hosts unless alone, hand the result out. */
    const reduce = (round: ReadonlyArray<Contribution<Uint8Array>>) =>
      Effect.gen(function*() {
        const problem = mismatch(round)
        if (problem !== undefined) {
          for (const { rank } of round) tell(rank, { t: "reduced", error: problem })
          return
        }
        const { bytes, op } = round[0]!
        // A lone host finishes its rounds itself, except model syncs: the model root is the controller's.
        const local = solo && op !== "sync"
        const target = resultSegment(bytes)
        const out = floats(target.bytes, bytes)
        const inputs = round.map(({ source }) => floats(source, bytes))
        const weight = round.reduce((sum, contribution) => sum + contribution.weight, 0)
        if (bytes > 0) {
          if (local && op === "avg" && round.every((contribution) => contribution.weight === 1)) native.kernels.average("f32", inputs, out)
          else native.kernels.sum("f32", inputs, out)
          if (local && op === "avg" && weight !== round.length) native.kernels.scale("f32", out, 1 / weight)
        }
        if (!local) {
          toldIdle = false
          const reply = yield* Deferred.make<Reduced>()
          awaitingController = reply
          upstream(new HostFold({ op, weight, ranks: round.length, data: new Uint8Array(target.bytes.subarray(0, bytes)) }))
          const reduced = yield* Deferred.await(reply)
          if (reduced.failure !== undefined) {
            for (const { rank } of round) tell(rank, { t: "reduced", error: reduced.failure })
            return
          }
          target.bytes.set(reduced.data.subarray(0, bytes))
        }
        for (const { rank } of round) tell(rank, { t: "reduced", seg: target.path, bytes })
      })

    const advance = (): void => {
      const round = barrier.take()
      if (round === undefined) {
        if (!solo && barrier.allIdle && !toldIdle && awaitingController === undefined) {
          toldIdle = true
          upstream(new HostIdle({ afterEpoch: endedEpoch }))
        }
        return
      }
      runFork(reduce(round).pipe(
        Effect.catchAllDefect((defect) => Effect.sync(() => {
          for (const { rank } of round) tell(rank, { t: "reduced", error: `the relay could not reduce: ${String(defect)}` })
        })),
        Effect.ensuring(Effect.sync(() => {
          awaitingController = undefined
          barrier.finish()
          advance()
        }))
      ))
    }

    const fromRank = (socket: Socket<RankSocket>, message: Record<string, unknown>) => {
      const { rank } = socket.data
      if (message.t === "hello") {
        const claimed = message.rank
        if (typeof claimed !== "number" || !spec.ranks.includes(claimed) || sockets.has(claimed)) {
          socket.write(encodeLocal({ t: "refused", reason: `rank ${String(claimed)} is not a rank of ${spec.host} awaiting its relay` }))
          return socket.end()
        }
        socket.data.rank = claimed
        sockets.set(claimed, socket)
        // A restarted rank takes its place in the barrier again.
        barrier.join(claimed)
        return
      }
      if (rank === undefined) return socket.end()
      switch (message.t) {
        case "reduce": {
          const { bytes, op, seg, weight } = message
          if (typeof bytes !== "number" || (op !== "sum" && op !== "avg" && op !== "sync" && op !== "elastic") || typeof seg !== "string" || typeof weight !== "number") {
            return tell(rank, { t: "reduced", error: "a malformed reduce request" })
          }
          if (op === "elastic") {
            const source = segments.map(rank, seg)
            exchanges.set(rank, { source, bytes })
            return upstream(new ElasticPush({ rank, data: new Uint8Array(source.subarray(0, bytes)) }))
          }
          const refused = barrier.contribute({ rank, op, bytes, weight, source: bytes === 0 ? new Uint8Array(0) : segments.map(rank, seg) })
          if (refused !== undefined) return tell(rank, { t: "reduced", error: refused })
          return advance()
        }
        case "idle":
          if (typeof message.epoch !== "number" || message.epoch <= endedEpoch) return
          barrier.idle(rank)
          return advance()
        case "report": {
          const report = decodeReport(message.report)
          if (Either.isLeft(report)) return runFork(Effect.logWarning(`rank ${rank} sent a malformed report; dropped`))
          return upstream(new FromRank({ rank, report: report.right }))
        }
      }
    }

    rmSync(spec.socket, { force: true })
    const server = Bun.listen<RankSocket>({
      unix: spec.socket,
      socket: {
        open: (socket) => {
          socket.data = { rank: undefined, reader: new LocalFrameReader() }
        },
        data: (socket, chunk) => {
          try {
            for (const message of socket.data.reader.push(chunk)) fromRank(socket, message as Record<string, unknown>)
          } catch (error) {
            runFork(Effect.logWarning(`closed a rank's connection: ${(error as Error).message}`))
            socket.end()
          }
        },
        close: (socket) => {
          const { rank } = socket.data
          if (rank === undefined || sockets.get(rank) !== socket) return
          sockets.delete(rank)
          segments.forget(rank)
          barrier.leave(rank)
          advance()
        },
        error: () => {}
      }
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => server.stop(true)))

    // Served until the launcher closes the link (the end of the run, not an error) or goes silent
    // (it beats every second): a frozen launcher must not keep the host's relay forever.
    const next = link.receive.pipe(
      Effect.timeout(Duration.millis(spec.heartbeatTimeoutMs)),
      Effect.tapError((error) =>
        error._tag === "TimeoutException" ? Effect.logError(`heard nothing from the launcher for ${spec.heartbeatTimeoutMs} ms; leaving`) : Effect.void
      ),
      Effect.orElseSucceed(() => undefined)
    )
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
          tell(received.rank, { t: "reduced", own: true, bytes: exchange.bytes })
        }
      }
    }
  })
