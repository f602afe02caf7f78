/**
 * The effective training ratio (ETTR) as properties, against a reference model written here.
 *
 * Random runs are told as the launcher journals them: the world forms, ranks die and are handed over
 * elastically (`rank_lost`, then the survivors' step), ranks restart (`rank_restarting`, then running user
 * code under the same number, or, in a training run, under a new number that enters at an epoch boundary,
 * or never recovering), hosts join with new ranks, and deaths come after growth. The product's inputs are
 * the ones the launcher feeds it: the run view's world timeline and recovery figures, folded by RunView from
 * those events (all of them, or only those heard by the end, as the live figure is), over a wall time that
 * may start before formation and end before, among or after the events.
 *
 * The model never reads the product's state: it samples the wall time in 1 ms steps (every moment is a whole
 * ms, so the sum is exact) and counts, at each instant, from the story itself: the world's seats at work over
 * the seats it has (formation's and growth's; a restart under a new number keeps its seat), a dropped seat
 * lost from when it was known, a restarted seat absent from its death to its recovery. Then the bounds:
 * within [0, 1], 1 for a run with no death, undefined for no length.
 * Literal worked examples are in recovery-figures.test.ts. Every `fc.assert` is seeded.
 */
import { expect, test } from "bun:test"
import fc from "fast-check"
import * as RecoveryFigures from "../src/launcher/view/RecoveryFigures.ts"
import * as RunView from "../src/launcher/view/RunView.ts"

const seeded = (seed: number, numRuns: number) => ({ seed, numRuns, includeErrorInReport: true })

type Action =
  | { readonly kind: "grow"; readonly gap: number; readonly count: number }
  | { readonly kind: "drop"; readonly gap: number; readonly picks: ReadonlyArray<number>; readonly detectMs: number; readonly steppedMs: number | null }
  | {
    readonly kind: "restart"
    readonly gap: number
    readonly pick: number
    readonly detectMs: number
    /** Its host's clock ahead of the launcher's: the death's moment said after it was known. */
    readonly clockAheadMs: number | null
    /** Commands: running again `rejoinMs` after. Training: a new number then, running `runMs` later, entering `enterMs` after that. */
    readonly recovery: { readonly rejoinMs: number; readonly runMs: number | null; readonly enterMs: number | null } | null
  }

interface Run {
  readonly formedAt: number
  readonly formed: number
  /** A training run restarts a rank under a new number; a run of commands under its own. */
  readonly training: boolean
  readonly actions: ReadonlyArray<Action>
  readonly startShift: number
  readonly endPermille: number
  /** The figure after the fact (every event) or as said live at the end (only the events heard by then). */
  readonly heardAll: boolean
}

interface Restart {
  readonly seat: number
  readonly diedAt: number
  readonly knownAt: number
  readonly renumberedAt: number | null
  readonly runningAt: number | null
  readonly enteredAt: number | null
}

/** The run as the model knows it, and as the journal says it. */
interface Story {
  readonly events: ReadonlyArray<RunView.RunEvent>
  readonly formedAt: number
  readonly formed: number
  /** Every rank number the run has had, from when: formation's, growth's, each restart's new number. */
  readonly numbers: ReadonlyArray<number>
  /** When each of the world's seats came (formation's, growth's). */
  readonly seats: ReadonlyArray<number>
  readonly grownAt: ReadonlyArray<number>
  /** Each dropped rank's seat and when the launcher knew. */
  readonly drops: ReadonlyArray<{ readonly seat: number; readonly knownAt: number }>
  readonly restarts: ReadonlyArray<Restart>
  readonly lastAt: number
}

const gap = fc.integer({ min: 0, max: 60 })
const action = (withDeaths: boolean): fc.Arbitrary<Action> => {
  const grow = fc.record({ kind: fc.constant("grow" as const), gap, count: fc.integer({ min: 1, max: 3 }) })
  const drop = fc.record({
    kind: fc.constant("drop" as const),
    gap,
    picks: fc.array(fc.nat(), { minLength: 1, maxLength: 2 }),
    detectMs: fc.integer({ min: 0, max: 40 }),
    steppedMs: fc.option(fc.integer({ min: 0, max: 40 }))
  })
  const restart = fc.record({
    kind: fc.constant("restart" as const),
    gap,
    pick: fc.nat(),
    detectMs: fc.integer({ min: 0, max: 40 }),
    clockAheadMs: fc.option(fc.integer({ min: 1, max: 10 }), { freq: 5 }),
    recovery: fc.option(
      fc.record({ rejoinMs: fc.integer({ min: 0, max: 50 }), runMs: fc.option(fc.integer({ min: 0, max: 50 }), { freq: 5 }), enterMs: fc.option(fc.integer({ min: 0, max: 80 }), { freq: 4 }) }),
      { freq: 4 }
    )
  })
  return withDeaths ? fc.oneof(grow, drop, restart, restart) : grow
}

const runs = (options: { readonly withDeaths: boolean; readonly startShift: fc.Arbitrary<number> }): fc.Arbitrary<Run> =>
  fc.record({
    formedAt: fc.integer({ min: 0, max: 100 }),
    formed: fc.integer({ min: 1, max: 5 }),
    training: fc.boolean(),
    actions: fc.array(action(options.withDeaths), { maxLength: 8 }),
    startShift: options.startShift,
    endPermille: fc.integer({ min: 0, max: 1_000 }),
    heardAll: fc.boolean()
  })

/** The journal's events for a run, and its facts for the model. */
const tell = (run: Run): Story => {
  const events: Array<RunView.RunEvent> = []
  const numbers: Array<number> = []
  const seats: Array<number> = []
  const grownAt: Array<number> = []
  const drops: Array<{ seat: number; knownAt: number }> = []
  const restarts: Array<Restart> = []
  // Ranks that may die next: each number with its seat and when it is at work again.
  let pool: Array<{ readonly number: number; readonly seat: number; readonly workingFrom: number }> = []
  const formedRanks = Array.from({ length: run.formed }, (_, rank) => rank)
  events.push({
    event: "world_formed",
    at: run.formedAt,
    world: run.formed,
    hosts: [{ host: "formed", ranks: formedRanks, devices: formedRanks.map(() => "cpu"), labels: formedRanks.map(() => "cpu") }]
  })
  for (const rank of formedRanks) {
    numbers.push(run.formedAt)
    seats.push(run.formedAt)
    pool.push({ number: rank, seat: rank, workingFrom: run.formedAt })
  }
  let nextNumber = run.formed
  let at = run.formedAt
  // `world` is every number had by the event's moment: set once the events are in time order.
  const grew = (when: number, host: string, ranks: ReadonlyArray<number>, replaces?: number) =>
    events.push({ event: "world_grew", at: when, world: 0, host, ranks, devices: ranks.map(() => "cpu"), labels: ranks.map(() => "cpu"), ...(replaces === undefined ? {} : { replaces }) })
  run.actions.forEach((step, index) => {
    at += step.gap
    const ready = pool.filter((rank) => rank.workingFrom <= at)
    switch (step.kind) {
      case "grow": {
        // A host joins the running cohort only once it has formed, after the world did (never in the same ms).
        at = Math.max(at, run.formedAt + 1)
        const ranks = Array.from({ length: step.count }, () => nextNumber++)
        grew(at, `late-${index}`, ranks)
        for (const rank of ranks) {
          numbers.push(at)
          seats.push(at)
          grownAt.push(at)
          pool.push({ number: rank, seat: seats.length - 1, workingFrom: at })
        }
        return
      }
      case "drop": {
        if (ready.length === 0) return
        const lost = [...new Set(step.picks.map((pick) => ready[pick % ready.length]!))]
        pool = pool.filter((rank) => !lost.includes(rank))
        const ranks = lost.map((rank) => rank.number)
        events.push({ event: "rank_lost", at, ranks, cause: "killed", diedAt: at - step.detectMs })
        // The survivors' next step recovers the death's figure, and moves no ratio.
        if (step.steppedMs !== null) events.push({ event: "survivors_stepped", at: at + step.steppedMs, ranks, rank: 0, epoch: 1 })
        for (const rank of lost) drops.push({ seat: rank.seat, knownAt: at })
        return
      }
      case "restart": {
        if (ready.length === 0) return
        const rank = ready[step.pick % ready.length]!
        pool = pool.filter((other) => other !== rank)
        // A death is never before formation (its rank was started by it), nor before its rank was back at work.
        const diedAt = step.clockAheadMs === null ? Math.max(run.formedAt, rank.workingFrom, at - step.detectMs) : at + step.clockAheadMs
        events.push({ event: "rank_restarting", at, rank: rank.number, diedAt })
        const recovery = step.recovery
        if (!run.training) {
          const runningAt = recovery === null ? null : at + recovery.rejoinMs
          if (runningAt !== null) {
            events.push({ event: "rank_running", at: runningAt, rank: rank.number })
            pool.push({ ...rank, workingFrom: runningAt })
          }
          restarts.push({ seat: rank.seat, diedAt, knownAt: at, renumberedAt: null, runningAt, enteredAt: null })
          return
        }
        if (recovery === null) {
          restarts.push({ seat: rank.seat, diedAt, knownAt: at, renumberedAt: null, runningAt: null, enteredAt: null })
          return
        }
        const renumberedAt = at + recovery.rejoinMs
        const renumbered = nextNumber++
        grew(renumberedAt, "formed", [renumbered], rank.number)
        numbers.push(renumberedAt)
        const runningAt = recovery.runMs === null ? null : renumberedAt + recovery.runMs
        const enteredAt = runningAt === null || recovery.enterMs === null ? null : runningAt + recovery.enterMs
        if (runningAt !== null) events.push({ event: "rank_running", at: runningAt, rank: renumbered })
        if (enteredAt !== null) {
          events.push({ event: "ranks_entered", at: enteredAt, ranks: [renumbered], epoch: 2 })
          pool.push({ number: renumbered, seat: rank.seat, workingFrom: enteredAt })
        }
        restarts.push({ seat: rank.seat, diedAt, knownAt: at, renumberedAt, runningAt, enteredAt })
      }
    }
  })
  // The journal's order is time's; events of one moment stay in the order they were told.
  const inOrder = events.map((event, told) => ({ event, told })).sort((a, b) => a.event.at - b.event.at || a.told - b.told)
  let world = 0
  const journal = inOrder.map(({ event }): RunView.RunEvent => {
    if (event.event === "world_formed") world = event.world
    if (event.event !== "world_grew") return event
    world += event.ranks.length
    return { ...event, world }
  })
  return { events: journal, formedAt: run.formedAt, formed: run.formed, numbers, seats, grownAt, drops, restarts, lastAt: Math.max(...journal.map((event) => event.at)) }
}

/** The wall time: from a start around formation to an end anywhere from just before the start to after the last event. */
const wallOf = (run: Run, story: Story) => {
  const startedAt = story.formedAt + run.startShift
  const latest = story.lastAt + 60
  return { startedAt, endAt: startedAt - 3 + Math.round(((latest - startedAt + 3) * run.endPermille) / 1_000) }
}

/** ETTR as the launcher says it: RunView's fold of the events heard, handed to the product. */
const productRatio = (run: Run, story: Story, startedAt: number, endAt: number) => {
  const heard = run.heardAll ? story.events : story.events.filter((event) => event.at <= endAt)
  const view = RunView.applyAll(RunView.initial("ettr", 0), heard)
  return RecoveryFigures.effectiveTrainingRatio(view.recovery ?? RecoveryFigures.empty, startedAt, endAt)
}

/**
 * When a restart's absence ends, as far as what was heard says: entering the cohort (final), else running
 * user code (until it enters), else never.
 */
const recoveredAt = (restart: Restart, endAt: number, heardAll: boolean): number | null => {
  const heard = (at: number | null) => (at !== null && (heardAll || at <= endAt) ? at : null)
  return heard(restart.enteredAt) ?? heard(restart.runningAt)
}

const modelRatio = (story: Story, startedAt: number, endAt: number, heardAll: boolean): number | undefined => {
  if (endAt <= startedAt) return undefined
  const restarts = story.restarts
    .filter((restart) => heardAll || restart.knownAt <= endAt)
    .map((restart) => ({ from: Math.min(restart.diedAt, restart.knownAt), to: recoveredAt(restart, endAt, heardAll) }))
  const upTo = (moments: ReadonlyArray<number>, t: number) => moments.filter((moment) => moment <= t).length
  let weighted = 0
  for (let t = startedAt; t < endAt; t++) {
    if (t < story.formedAt) continue
    const absent = restarts.filter((restart) => restart.from <= t && (restart.to === null || t < restart.to)).length
    const lost = upTo(story.drops.map((drop) => drop.knownAt), t)
    const seats = upTo(story.seats, t)
    weighted += (seats - lost - absent) / seats
  }
  return weighted / (endAt - startedAt)
}

const aroundFormation = fc.integer({ min: -60, max: 20 })

const expectClose = (actual: number | undefined, expected: number | undefined) => {
  if (expected === undefined) return expect(actual).toBeUndefined()
  expect(actual).toBeNumber()
  expect(actual!).toBeCloseTo(expected, 9)
}

test("ETTR is the seats at work over the seats the world has, instant by instant, through formation, deaths, restarts and growth", () => {
  fc.assert(
    fc.property(runs({ withDeaths: true, startShift: aroundFormation }), (run) => {
      const story = tell(run)
      const { startedAt, endAt } = wallOf(run, story)
      expectClose(productRatio(run, story, startedAt, endAt), modelRatio(story, startedAt, endAt, run.heardAll))
    }),
    seeded(20_261_204, 400)
  )
}, 60_000)

test("bounds: within [0, 1]; 1 for a run with no death counted from formation on; undefined for a run of no length", () => {
  fc.assert(
    fc.property(runs({ withDeaths: true, startShift: aroundFormation }), (run) => {
      const story = tell(run)
      const { startedAt, endAt } = wallOf(run, story)
      const ratio = productRatio(run, story, startedAt, endAt)
      if (endAt <= startedAt) return expect(ratio).toBeUndefined()
      expect(ratio).toBeGreaterThanOrEqual(0)
      expect(ratio).toBeLessThanOrEqual(1)
    }),
    seeded(20_261_206, 200)
  )
  fc.assert(
    fc.property(runs({ withDeaths: false, startShift: fc.integer({ min: 0, max: 30 }) }), fc.integer({ min: 1, max: 500 }), (run, length) => {
      const story = tell(run)
      const startedAt = story.formedAt + run.startShift
      expect(productRatio(run, story, startedAt, startedAt + length)).toBeCloseTo(1, 12)
      // No length, or less than none: nothing to say.
      expect(productRatio(run, story, startedAt, startedAt)).toBeUndefined()
      expect(productRatio(run, story, startedAt, startedAt - length)).toBeUndefined()
    }),
    seeded(20_261_207, 100)
  )
}, 60_000)
