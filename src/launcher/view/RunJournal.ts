/**
 * RunJournal: where the launcher records what happens. Each `RunEvent`
 * moves the RunView (what the status page, `bun run status` and /metrics
 * show), goes to the `--events` file unless it is only a view update, and
 * is told to the listeners (the terminal, the status board).
 *
 * The events file is appended to line by line, synchronously: a launcher
 * killed mid-run leaves every event it had recorded, each line whole.
 *
 * Rank events come in bursts (8,000 ranks starting, exiting, or reporting
 * their resources): `recordSoon` gathers them until the fibers already
 * waiting have run, then moves the view once for the lot. Any other record,
 * and any read of the state, takes what is gathered first: order is kept.
 */
import { mkdirSync } from "node:fs"
import { dirname } from "node:path"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import { LaunchInputError } from "../run/Plan.ts"
import * as RunView from "./RunView.ts"
import { appendPrivate, PrivateFileError, preparePrivateAppend, refuseSteerable } from "../run/PrivateFiles.ts"
import * as RecoveryFigures from "./RecoveryFigures.ts"

export interface RunJournal {
  readonly record: (event: RunView.RunEvent) => Effect.Effect<void>
  /** Record with the others of a burst: shortly, and before anything recorded after it. */
  readonly recordSoon: (event: RunView.RunEvent) => Effect.Effect<void>
  readonly state: Effect.Effect<RunView.RunState>
}

export interface RunJournalOptions {
  readonly run: string
  /** `--events FILE`: every event but the view-only ones, as JSON lines. */
  readonly eventsFile?: string | undefined
  /**
   * Add to the file instead of emptying it first: a `--resume` run continues the run it resumes, and its
   * events are the same log's (the `continue with:` line repeats `--events FILE`). Its `run_started` says
   * where the second run begins.
   */
  readonly append?: boolean | undefined
  /** Told every event after it has moved the view. */
  readonly onEvent?: (event: RunView.RunEvent, state: RunView.RunState) => Effect.Effect<void>
}

export const make = (options: RunJournalOptions): Effect.Effect<RunJournal, LaunchInputError> =>
  Effect.gen(function*() {
    const { eventsFile } = options
    if (eventsFile !== undefined) {
      yield* Effect.try({
        try: () => {
          // Not even a folder is made where another user could steer the path (a link planted on the way).
          refuseSteerable(eventsFile)
          mkdirSync(dirname(eventsFile), { recursive: true, mode: 0o700 })
          // 0600, never through a link planted at its name or on its way: the events name hosts, ranks and causes.
          preparePrivateAppend(eventsFile, options.append !== true)
        },
        catch: (error) =>
          new LaunchInputError({
            problems: [
              error instanceof PrivateFileError
                ? `--events ${eventsFile}: ${error.problem}`
                : `--events ${eventsFile}: cannot write there (${(error as Error).message}); give a writable path`
            ]
          })
      })
    }
    const view = yield* Ref.make(RunView.initial(options.run, Date.now()))
    let warned = false
    /** The latest `at` in the file: a line's is never before the line above's. */
    let lastAt = -Infinity
    const append = (event: RunView.RunEvent) =>
      Effect.suspend(() => {
        if (eventsFile === undefined || RunView.isEphemeral(event)) return Effect.void
        // The coordinator's events are stamped when it heard what caused them and recorded once its mailbox
        // gets to them: a rank's exit recorded meanwhile is already above. Such a line is said as of the one
        // above it (as a death's recovery is, below), so that the file stays in order; the view keeps its time.
        const line = event.at < lastAt ? { ...event, at: lastAt } : event
        try {
          appendPrivate(eventsFile, `${JSON.stringify(line)}\n`)
          lastAt = line.at
          return Effect.void
        } catch (error) {
          if (warned) return Effect.void
          warned = true
          return Effect.logWarning(`--events ${eventsFile}: writing failed (${(error as Error).message}); the run goes on without it`)
        }
      })
    const recordAll = (events: ReadonlyArray<RunView.RunEvent>) =>
      Effect.gen(function*() {
        const before = yield* Ref.get(view)
        const state = yield* Ref.updateAndGet(view, (current) => RunView.applyAll(current, events))
        for (const event of events) yield* append(event)
        // A death's recovery, with its times, after the events that made it, said as of the latest of them so
        // that the file stays in order (the file alone: the view has it).
        // Most batches (progress, resources) leave the figures as they were: nothing to look through.
        const recovered = state.recovery === before.recovery
          ? []
          : RecoveryFigures.recoveredSince(before.recovery ?? RecoveryFigures.empty, state.recovery ?? RecoveryFigures.empty)
        const saidAt = Math.max(...events.map((event) => event.at))
        for (const death of recovered) {
          yield* append({
            event: "death_recovered",
            at: saidAt,
            recoveredAt: death.recoveredAt!,
            rank: death.rank,
            how: death.how,
            kind: death.kind,
            rule: death.rule,
            detectMs: death.knownAt - death.diedAt,
            recoverMs: Math.max(0, death.recoveredAt! - death.diedAt)
          })
        }
        if (options.onEvent !== undefined) for (const event of events) yield* options.onEvent(event, state)
      })
    let gathered: Array<RunView.RunEvent> = []
    let flushScheduled = false
    const flush = Effect.suspend(() => {
      if (gathered.length === 0) return Effect.void
      const events = gathered
      gathered = []
      return recordAll(events)
    })
    return {
      record: (event) => Effect.zipRight(flush, recordAll([event])),
      recordSoon: (event) =>
        Effect.suspend(() => {
          gathered.push(event)
          if (flushScheduled) return Effect.void
          flushScheduled = true
          // After the fibers already waiting to run: the rest of the burst is among them.
          return Effect.asVoid(Effect.forkDaemon(Effect.yieldNow().pipe(
            Effect.zipRight(Effect.sync(() => (flushScheduled = false))),
            Effect.zipRight(flush)
          )))
        }),
      state: Effect.zipRight(flush, Ref.get(view))
    }
  })
