/**
 * One incarnation of a rank, as a child of the agent's supervisor: the
 * process the launcher ordered (`StartRank`), reported as it goes. First
 * `RankStarted`, then `RankExited` however it ends, including a start that
 * failed. The launcher's policy judges that end. For the agent it means
 * nothing more (`HostPolicy`: ranks are temporary).
 *
 * The handle counts as ended only once its exit has been reported. That way
 * the supervisor's verdict (every child ended) never comes before a
 * `RankExited`.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { ChildHandle } from "../kernel/ChildHandle.ts"
import type { ChildExit } from "../kernel/ChildExit.ts"
import * as ProcessChild from "../kernel/ProcessChild.ts"
import type { SupervisedChild } from "../kernel/Supervisor.ts"
import { type JoinMessage, RankExited, RankStarted } from "../wire/messages/JoinMessages.ts"
import { rankSpec } from "./HostPolicy.ts"
import { oomKillCount } from "./OomKills.ts"

/** A rank process that runs on the host now: what its resource samples and its host's stops need. */
export interface RunningRank {
  readonly rank: number
  /** The device slot it runs on (a restarted rank keeps its slot under a new number). */
  readonly slot: number
  readonly process: ProcessChild.ProcessChild
}

export interface RankOptions {
  readonly host: string
  readonly rank: number
  readonly incarnation: number
  readonly slot: number
  readonly process: ProcessChild.ProcessSpec
  /** The host's running ranks, by child id: this one is in it from its start to its end. */
  readonly running: Map<string, RunningRank>
  readonly report: (message: JoinMessage) => Effect.Effect<void>
  /** Runs once the start has been reported, whether it worked (`RankStarted`) or not (`RankExited`). */
  readonly answered: (process: ProcessChild.ProcessChild | undefined) => Effect.Effect<void>
  /** Where its exit is awaited: a Scope that outlives the incarnation's, which closes as the exit is handled. */
  readonly watchIn: Scope.Scope
  /** What its code threw, as it said over IPC before exiting ("TypeError: …"); undefined when it said nothing. */
  readonly thrown?: (() => string | undefined) | undefined
  /** Whether the host's relay has ended abnormally: a rank that ends after it was stopped for that. */
  readonly relayLost?: (() => boolean) | undefined
  /** NCCL's asynchronous error its communicator held when its code threw, as it said. */
  readonly ncclError?: (() => number | undefined) | undefined
}

/**
 * How long an exit with status 1 waits for the rank's word (an exception, its relay's loss): the rank sends it before it
 * exits, but its exit can be seen here before the message is read.
 */
const THROWN_WAIT_MS = 200

export const rankChild = (options: RankOptions): SupervisedChild => {
  // The supervisor stops it as its process is stopped when its Scope closes.
  const spec = rankSpec(options.host, options.rank, options.incarnation, options.process.shutdown)
  const { incarnation, rank } = options
  const exitReport = (exit: ChildExit, error: string | undefined, cause: "oom" | "relay_lost" | "nccl" | undefined, at: number) =>
    new RankExited({
      at,
      rank,
      incarnation,
      code: exit._tag === "Exited" ? exit.code : null,
      signal: exit._tag === "Signaled" ? exit.signal : null,
      detail: exit._tag === "Crashed" ? exit.detail : undefined,
      ...(error === undefined ? {} : { error }),
      ...(cause === undefined ? {} : { cause })
    })
  /** What the rank said before a status-1 exit (an exception, its relay's loss), waited for a moment when it has not been read yet. */
  const saidBefore = (exit: ChildExit): Effect.Effect<void> => {
    const said = () => options.thrown?.() !== undefined || options.relayLost?.() === true
    // A rank that cannot say anything (no IPC: a command rank) is not waited for.
    if (options.thrown === undefined || exit._tag !== "Exited" || exit.code !== 1) return Effect.void
    return Effect.gen(function*() {
      for (let waited = 0; waited < THROWN_WAIT_MS && !said(); waited += 10) yield* Effect.sleep(10)
    })
  }
  return {
    ...spec,
    start: Effect.gen(function*() {
      const spawned = yield* Effect.either(ProcessChild.spawn({ ...options.process, label: `rank ${rank} of ${options.host}` }))
      if (spawned._tag === "Left") {
        yield* options.report(new RankExited({ rank, incarnation, code: null, signal: null, detail: spawned.left.message }))
        yield* options.answered(undefined)
        return yield* spawned.left
      }
      const child = spawned.right
      // The OOM killer's count when it started: a SIGKILL while it rose was the kernel's, for memory.
      const oomKillsAtStart = oomKillCount()
      options.running.set(spec.id, { rank, slot: options.slot, process: child })
      yield* options.report(new RankStarted({ rank, incarnation, pid: child.pid }))
      // Before its exit can be reported: a command rank's RankRunning comes right after its RankStarted.
      yield* options.answered(child)
      const reported = yield* Deferred.make<ChildExit>()
      yield* Effect.forkIn(
        Effect.gen(function*() {
          const exit = yield* child.exited
          const endedAt = Date.now()
          options.running.delete(spec.id)
          yield* saidBefore(exit)
          const oom = exit._tag === "Signaled" && exit.signal === "SIGKILL" && oomKillsAtStart !== undefined && (oomKillCount() ?? 0) > oomKillsAtStart
          const nccl = options.ncclError?.()
          const cause = oom ? "oom" as const : options.relayLost?.() === true ? "relay_lost" as const : nccl !== undefined ? "nccl" as const : undefined
          const error = options.thrown?.()
          yield* options.report(exitReport(exit, nccl === undefined || error === undefined ? error : `${error} (NCCL asynchronous error ${nccl})`, cause, endedAt))
          yield* Deferred.succeed(reported, exit)
        }),
        options.watchIn
      )
      const handle: ChildHandle = {
        describe: `rank ${rank} (incarnation ${incarnation}), pid ${child.pid}`,
        exited: Deferred.await(reported),
        stop: (mode, grace) => Effect.zipRight(child.stop(mode, grace), Deferred.await(reported))
      }
      return handle
    })
  }
}
