/**
 * The launcher's hold on ranks that run under agents: each rank becomes a
 * supervised child whose start, stop and exit travel over its host's join
 * link (now the host's control link). The launcher's Supervisor applies the
 * failure policy to them exactly as it would to local processes.
 *
 * Every order names an incarnation, so a late report from a rank that has
 * since been restarted is never taken for its successor. A start does not
 * wait for the agent's answer: a host's ranks are all ordered at once and
 * start side by side; one that cannot be started comes back as an exit. When a host's link
 * ends, every rank it still had is reported ended (the agent is gone, and its
 * ranks with it: they die with their agent).
 *
 * A self-deployed agent also forwards its ranks' lines over the link (no ssh
 * session carries them): they go to the run's output like every other host's.
 *
 * A child is a seat: a device of a host, named by the rank it first ran as.
 * With `renumber`, every incarnation after the first runs under a new rank
 * number the launcher hands out (a restarted rank rejoins like a newcomer),
 * on the same device; reports name the number, and are traced to the seat.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Scope from "effect/Scope"
import type { ChildHandle, StopMode } from "../../kernel/ChildHandle.ts"
import { ChildExit, isClean } from "../../kernel/ChildExit.ts"
import { hostLostDetail } from "../../kernel/policy/SecondaryDeaths.ts"
import type { SupervisedChild } from "../../kernel/Supervisor.ts"
import { rankChild } from "../../kernel/Supervisor.ts"
import { Shutdown, wireMillis } from "../../kernel/Shutdown.ts"
import type { RankOutput, RankResources } from "../../wire/messages/JoinMessages.ts"
import { StartRank, StopRank } from "../../wire/messages/JoinMessages.ts"
import type { Member } from "../front/JoinGate.ts"

export interface RankObserver {
  readonly started: (rank: number, pid: number) => Effect.Effect<void>
  /** The rank runs user code (an entry rank checked in, a command rank was started). */
  readonly running: (rank: number) => Effect.Effect<void>
  readonly exited: (rank: number, exit: ChildExit) => Effect.Effect<void>
  /** The host's agent sampled its ranks' resource use. */
  readonly resources: (host: string, samples: RankResources["samples"]) => Effect.Effect<void>
  /** Lines of the host's ranks and relay, from an agent that forwards them (a self-deployed one), prefixes included. */
  readonly output: (lines: RankOutput["lines"]) => Effect.Effect<void>
  /**
   * A rank's last lines, given to its abnormal exit for its failure signature and the rules' `log`;
   * `linesWaitMs`: how long such an exit waits first for lines still on their way (an ssh session's output
   * and the join link race); `linesForSignals`: a signal's end gets them too (a rule's `log` may search them).
   */
  readonly lastLines?: ((rank: number) => ReadonlyArray<string>) | undefined
  /** A rank's last lines on stderr, given with the others: its failure signature is read from these. */
  readonly lastErrors?: ((rank: number) => ReadonlyArray<string>) | undefined
  readonly linesWaitMs?: number | undefined
  readonly linesForSignals?: boolean | undefined
  /**
   * The host's link ended: these ranks (its current numbers) are gone together, said before any of their
   * exits, so their work is handed on at once to ranks elsewhere, never to one of them whose exit is still
   * on its way (each exit waits `linesWaitMs` for its lines, one after the other).
   */
  readonly hostLost?: ((host: string, ranks: ReadonlyArray<number>, why: string) => Effect.Effect<void>) | undefined
}

interface Incarnation {
  readonly number: number
  /** The rank number it runs as. */
  readonly rank: number
  readonly exited: Deferred.Deferred<ChildExit>
  /** `exited`'s value, readable without a fiber: `onExit` checks and registers in one step. */
  ended: ChildExit | undefined
  /** The handle's `onExit` reactions, run by whoever ends the incarnation. */
  readonly reactions: Array<(exit: ChildExit) => Effect.Effect<void>>
}

export interface RemoteRanks {
  /** Every rank of the world as a supervised child, in rank order. */
  readonly children: ReadonlyArray<SupervisedChild>
  /** A host that joined the formed world: its link is heard from now on, and its ranks come back as children. */
  readonly add: (member: Member) => Effect.Effect<ReadonlyArray<SupervisedChild>>
}

/** A restarted seat's new identity: its rank number, its device slot on the host, and the world's size now. */
export interface Renumbered {
  readonly rank: number
  readonly slot: number
  readonly worldSize: number
}

export interface Numbering {
  /** Restarts run under a new number (see above); absent, under the seat's own. */
  readonly renumber: (seat: number, member: Member) => Effect.Effect<Renumbered | undefined>
  /** The seat a rank number runs in: membership's, which `renumber` has told by the time it returns. */
  readonly seatOf: (rank: number) => number
}

/** A host's dropped output lines are said at most this often (with the count since). */
const DROPS_SAID_EVERY_MS = 10_000

/** What follows `[host:` in a rank's line as agents prefix it: `device:rN] `. */
const RANK_SUFFIX = /^[^\]:]*:r(\d+)\] /

/** A rank's incarnation could not be started on its host: the host is lost, or its agent cannot be reached. */
export class RankNotStarted extends Data.TaggedError("RankNotStarted")<{ readonly host: string; readonly reason: string }> {
  override get message(): string {
    return this.reason
  }
}

/** Every number is its own seat. */
const ownSeats: Numbering = { renumber: () => Effect.succeed(undefined), seatOf: (rank) => rank }

export const make = (
  members: ReadonlyArray<Member>,
  observer: RankObserver,
  /** How long a rank gets after SIGTERM: its child spec's shutdown, and what its incarnation's Scope closing gives it. */
  grace: Duration.Duration,
  numbering: Numbering = ownSeats
): Effect.Effect<RemoteRanks, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    /** Each seat's current incarnation. */
    const current = new Map<number, Incarnation>()
    const { seatOf } = numbering
    const lost = new Map<string, string>()
    // Every rank is stopped alike: SIGTERM, then the grace (a policy's kill_all grace or kill replaces it).
    const shutdown = Shutdown.Grace({ grace })

    const find = (rank: number, number: number) => {
      const incarnation = current.get(seatOf(rank))
      return incarnation !== undefined && incarnation.number === number && incarnation.rank === rank ? incarnation : undefined
    }

    /**
     * An abnormal exit with the rank's last lines: a rank's own end always (its error is its failure signature:
     * a repeat, or a lost peer), a signal only when a rule's `log` may search them (a SIGKILL says nothing, and
     * its survivors must not wait for lines to be judged).
     */
    const withLines = (rank: number, exit: ChildExit): Effect.Effect<ChildExit> => {
      const lastLines = observer.lastLines
      if (lastLines === undefined || isClean(exit)) return Effect.succeed(exit)
      if (exit._tag === "Signaled" && observer.linesForSignals !== true) return Effect.succeed(exit)
      return Effect.map(Effect.sleep(observer.linesWaitMs ?? 0), () =>
        ({ ...exit, lines: [...lastLines(rank)], ...(observer.lastErrors === undefined ? {} : { stderr: [...observer.lastErrors(rank)] }) }) as ChildExit)
    }

    const endIncarnation = (incarnation: Incarnation, reported: ChildExit) =>
      Effect.flatMap(withLines(incarnation.rank, reported), (exit) => Effect.suspend(() => {
        if (incarnation.ended !== undefined) return Effect.void
        incarnation.ended = exit
        return Deferred.succeed(incarnation.exited, exit).pipe(
          Effect.zipRight(observer.exited(incarnation.rank, exit)),
          Effect.zipRight(Effect.forEach(incarnation.reactions.splice(0), (react) => react(exit), { discard: true }))
        )
      }))

    /**
     * A forwarded line as the host's own: one whose prefix names another host, or a rank the host does not
     * hold, is the agent's line (its `agent-HOST.log`), never another rank's. An agent speaks for no one else.
     */
    const ownLine = (member: Member, line: string): string => {
      const own = `[${member.host}:`
      if (line.startsWith(own)) {
        const rest = line.slice(own.length)
        if (rest.startsWith("relay] ")) return line
        const rank = RANK_SUFFIX.exec(rest)
        if (rank !== null && member.ranks.includes(seatOf(Number(rank[1])))) return line
      }
      return `cohort agent ${member.host}: ${line}`
    }

    const listen = (member: Member) => {
      // Lines the host's agent had to drop, said at most every DROPS_SAID_EVERY_MS: an overloaded link must not
      // add a warning per batch to the flood it already is.
      let unsaid = 0
      let saidAt = Number.NEGATIVE_INFINITY
      const sayDropped = Effect.suspend(() => {
        const count = unsaid
        unsaid = 0
        return count === 0 ? Effect.void : Effect.logWarning(
          `${count} line(s) of ${member.host}'s output were dropped: its ranks printed faster than its agent could send them here`
        )
      })
      return Effect.gen(function*() {
        while (true) {
          const message = yield* member.link.receive
          switch (message._tag) {
            case "RankStarted":
              if (find(message.rank, message.incarnation) !== undefined) yield* observer.started(message.rank, message.pid)
              break
            case "RankRunning":
              if (find(message.rank, message.incarnation) !== undefined) yield* observer.running(message.rank)
              break
            case "RankExited": {
              const incarnation = find(message.rank, message.incarnation)
              if (incarnation === undefined) break
              const at = message.at === undefined ? {} : { at: message.at }
              const exit = message.detail !== undefined
                ? ChildExit.Crashed({ detail: message.detail, ...at })
                : message.signal !== null
                ? ChildExit.Signaled({ signal: message.signal, ...at, ...(message.cause === undefined ? {} : { cause: message.cause }) })
                : message.error !== undefined
                ? ChildExit.Exited({ code: message.code ?? -1, cause: message.cause === "nccl" ? "nccl" : "exception", error: message.error, ...at })
                : ChildExit.Exited({ code: message.code ?? -1, ...at, ...(message.cause === undefined ? {} : { cause: message.cause }) })
              yield* endIncarnation(incarnation, exit)
              break
            }
            case "RankResources":
              // Only the host's own ranks: an agent speaks for no one else.
              yield* observer.resources(member.host, message.samples.filter((sample) => member.ranks.includes(seatOf(sample.rank))))
              break
            case "RankOutput": {
              unsaid += message.dropped
              const now = yield* Clock.currentTimeMillis
              if (unsaid > 0 && now - saidAt >= DROPS_SAID_EVERY_MS) {
                saidAt = now
                yield* sayDropped
              }
              yield* observer.output(message.lines.map(({ line, stream }) => ({ line: ownLine(member, line), stream })))
              break
            }
            default:
              yield* Effect.logWarning(`ignored an unexpected ${message._tag} from the agent of ${member.host}`)
          }
        }
      }).pipe(
        Effect.catchAll((ended) =>
          Effect.gen(function*() {
            yield* sayDropped
            // Said once per host, short: the end table gives each rank "host lost", the verdict the host once.
            const why = hostLostDetail(member.host, ended.detail)
            lost.set(member.host, why)
            const going = member.ranks.flatMap((seat) => {
              const incarnation = current.get(seat)
              return incarnation === undefined || incarnation.ended !== undefined ? [] : [incarnation.rank]
            })
            if (going.length > 0 && observer.hostLost !== undefined) yield* observer.hostLost(member.host, going, ended.detail)
            for (const seat of member.ranks) {
              const incarnation = current.get(seat)
              if (incarnation !== undefined) yield* endIncarnation(incarnation, ChildExit.Crashed({ detail: why, cause: "host_lost" }))
            }
          })
        )
      )
    }

    yield* Effect.forEach(members, (member) => Effect.forkScoped(listen(member)), { discard: true })

    const start = (seat: number, member: Member): SupervisedChild["start"] =>
      Effect.gen(function*() {
        const gone = lost.get(member.host)
        if (gone !== undefined) return yield* Effect.fail(new RankNotStarted({ host: member.host, reason: gone }))
        const number = (current.get(seat)?.number ?? -1) + 1
        const renumbered = number > 0 ? yield* numbering.renumber(seat, member) : undefined
        const rank = renumbered?.rank ?? seat
        const incarnation: Incarnation = { number, rank, exited: yield* Deferred.make<ChildExit>(), ended: undefined, reactions: [] }
        current.set(seat, incarnation)
        const order = renumbered === undefined
          ? new StartRank({ rank, incarnation: number }, true)
          : new StartRank({ rank, incarnation: number, slot: renumbered.slot, worldSize: renumbered.worldSize }, true)
        // Built unchecked: the codec checks it as it encodes it (8,000 of them as a big world starts).
        yield* member.link.send(order).pipe(
          Effect.catchAll((error) => Effect.fail(new RankNotStarted({ host: member.host, reason: `cannot reach the agent of ${member.host}: ${error.message}` })))
        )
        const stop = (mode: StopMode, grace: Duration.DurationInput) =>
          Effect.gen(function*() {
            if (incarnation.ended !== undefined) return
            yield* Effect.ignore(member.link.send(new StopRank({ rank, incarnation: number, mode, graceMs: wireMillis(Duration.decode(grace)) })))
            yield* Deferred.await(incarnation.exited)
          })
        // Scope.addFinalizer, not Effect.addFinalizer: `stop` needs none of this fiber's refs, and
        // capturing them for restoring costs several hundred bytes per rank.
        yield* Scope.addFinalizer(yield* Effect.scope, stop("graceful", grace))
        const handle: ChildHandle = {
          describe: rank === seat ? `rank ${rank} (incarnation ${number}) on ${member.host}` : `rank ${rank} (seat of rank ${seat}, incarnation ${number}) on ${member.host}`,
          exited: Deferred.await(incarnation.exited),
          stop,
          // Checks and registers in one synchronous step: no ending slips in between.
          onExit: (react) =>
            Effect.suspend(() => {
              if (incarnation.ended !== undefined) return react(incarnation.ended)
              incarnation.reactions.push(react)
              return Effect.void
            })
        }
        return handle
      })

    const children = members
      .flatMap((member) => member.ranks.map((rank) => [rank, member] as const))
      .sort(([a], [b]) => a - b)
      .map(([rank, member]) => rankChild(rank, start(rank, member), member.host, shutdown))
    const add = (member: Member) =>
      Effect.gen(function*() {
        // A host that comes back under its old name starts afresh: only its new link speaks for it.
        lost.delete(member.host)
        yield* Effect.forkIn(listen(member), scope)
        return member.ranks.map((rank) => rankChild(rank, start(rank, member), member.host, shutdown))
      })
    return { children, add }
  })
