/**
 * A self-deployed agent's ranks' and relay's lines, on their way to the
 * launcher over the host's join link (`RankOutput`). No ssh session carries
 * that agent's stdout, and the launcher's terminal, `--quiet`, `--ranks` and
 * `--log-dir` must see its hosts like every other.
 *
 * Lines are queued as the children print them and sent in batches: whatever
 * has queued by the time the sender runs goes in one message (a burst of a
 * thousand lines is a frame or two, not a thousand). The queue is bounded:
 * a rank that prints faster than the link carries (or a launcher that reads
 * slowly) never makes the agent hold more than the bound, and never stalls
 * the rank either (mpirun's daemons would buffer without end; a terminal
 * would block the writer). Lines past the bound are dropped and counted, and
 * the next batch says how many. A single huge line (a progress bar redrawn
 * with `\r` for an hour) is cut.
 *
 * `flush` sends what is queued now, ahead of a message that must follow it:
 * a rank's last lines come before its `RankExited`, as they do locally.
 *
 * Lines go as the children printed them, terminal controls and all: every
 * host's lines reach the launcher's console (`RunConsole`), which escapes
 * them there, or passes them with `--raw-output`, one choice for all hosts.
 */
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import { RankOutput } from "../wire/messages/JoinMessages.ts"

export type Stream = "stdout" | "stderr"

export interface ForwarderBounds {
  /** Lines and characters queued at most; past either, lines are dropped and counted. */
  readonly queuedLines: number
  readonly queuedChars: number
  /** One message carries at most this many lines and (but for a single long line) characters. */
  readonly batchLines: number
  readonly batchChars: number
  /** A longer line is cut to this many characters, saying how many were cut. */
  readonly lineChars: number
}

/**
 * 10,000 lines or 4 Mi characters queued (a few seconds of a very chatty rank, ~8 MB at most); batches of
 * 1,000 lines or 256 Ki characters, far below the join channel's 16 MiB frame ceiling; lines cut at 64 Ki.
 */
export const defaultBounds: ForwarderBounds = {
  queuedLines: 10_000,
  queuedChars: 4 << 20,
  batchLines: 1_000,
  batchChars: 256 << 10,
  lineChars: 64 << 10
}

export interface OutputForwarder {
  /** A child's line (its prefix included), from its output callback: queued, or counted as dropped. */
  readonly push: (line: string, stream: Stream) => void
  /** Send everything queued now, in order, before returning. */
  readonly flush: Effect.Effect<void>
}

export const make = (
  send: (message: RankOutput) => Effect.Effect<void>,
  bounds: ForwarderBounds = defaultBounds
): Effect.Effect<OutputForwarder, never, Scope.Scope> =>
  Effect.gen(function*() {
    let queued: Array<{ readonly stream: Stream; readonly line: string }> = []
    let queuedChars = 0
    let dropped = 0
    // Wakes the sender; one pending wake is as good as many.
    const wake = yield* Queue.sliding<void>(1)
    // One sender at a time, so batches leave in the order their lines came.
    const sending = yield* Effect.makeSemaphore(1)

    const nextBatch = (): RankOutput | undefined => {
      if (queued.length === 0 && dropped === 0) return undefined
      let count = 0
      let chars = 0
      while (count < queued.length && count < bounds.batchLines) {
        const length = queued[count]!.line.length
        if (count > 0 && chars + length > bounds.batchChars) break
        chars += length
        count += 1
      }
      const lines = count === queued.length ? queued : queued.slice(0, count)
      queued = count === queued.length ? [] : queued.slice(count)
      queuedChars -= chars
      const batch = new RankOutput({ lines, dropped }, true)
      dropped = 0
      return batch
    }
    const sendQueued: Effect.Effect<void> = Effect.suspend(() => {
      const batch = nextBatch()
      return batch === undefined ? Effect.void : Effect.zipRight(send(batch), sendQueued)
    })
    const flush = sending.withPermits(1)(sendQueued)
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Queue.take(wake), flush)))

    return {
      push: (line, stream) => {
        const kept = line.length > bounds.lineChars ? `${line.slice(0, bounds.lineChars)}… (${line.length - bounds.lineChars} characters cut)` : line
        if (queued.length >= bounds.queuedLines || queuedChars + kept.length > bounds.queuedChars) dropped += 1
        else {
          queued.push({ stream, line: kept })
          queuedChars += kept.length
        }
        Queue.unsafeOffer(wake, undefined)
      },
      flush
    }
  })
