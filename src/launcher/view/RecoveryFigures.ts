/**
 * Recovery figures, folded from the run's events: for each death the policy carried (a rank dropped
 * under elastic, or restarted), how long cohort took to know it and to recover from it, and for the
 * run its effective training time ratio (ETTR).
 *
 * - A death's moment (`diedAt`) is when its rank's agent saw it end (that host's clock), its last
 *   beat for a silent rank, or when the launcher saw it go (a lost link).
 * - Known (`knownAt`): when the policy reported it dead (`rank_lost`) or ordered its restart
 *   (`rank_restarting`). Time to detect = knownAt − diedAt.
 * - Recovered (`recoveredAt`): under elastic, when the survivors train again: their next counted
 *   step, the first report of more samples heard from one of them after the death (`survivors_stepped`,
 *   SurvivorsStep). Not when its remaining samples were handed to them (`work_moved`): ranks that keep
 *   their own process groups (the Python client) are still re-forming theirs then, and a figure taken
 *   there said a few ms of survivors that had not stepped. Under restart, when its new incarnation trains
 *   again: it enters the cohort at an epoch boundary (`ranks_entered`), or, in a run without training,
 *   runs user code (`rank_running`); under its new number when it has one (`world_grew`'s `replaces`).
 *   Time to recover = recoveredAt − diedAt. A dropped rank that died with no epoch under way (no
 *   training, or between epochs), or whose survivors never step again, has none.
 * - ETTR: at each instant, the world's seats at work over the seats it has, averaged over the run's wall
 *   time (from its start to its end, or now). A seat is a place in the world: one per rank at formation and
 *   per rank that grew it; a restart under a new number keeps its seat. A dropped rank's seat is lost from
 *   when the policy knew; a restarted one is absent from its death to its recovery (a rank given up for
 *   silence and then restarted is that one absence, not a loss as well). Before formation nothing counts.
 *   So a restart in a world of 6 costs a sixth of its absence, whatever the world was at formation, and the
 *   join window and the time before a death is known count as they are, so 100% is never quite reached.
 *   Work done again (a group restarted from its checkpoint) is not in it: the wall time to finish the same
 *   job tells that.
 */

export interface DeathFigures {
  readonly rank: number
  /** The cause as the failure rules name it, and the rule that decided it, when known. */
  readonly kind: string | null
  readonly rule: string | null
  readonly how: "dropped" | "restarted"
  readonly diedAt: number
  readonly knownAt: number
  readonly recoveredAt: number | null
  /** A restart's recovery by entering the cohort (training again), final; by running user code, until it enters. */
  readonly entered?: boolean
}

export interface RecoveryState {
  readonly deaths: ReadonlyArray<DeathFigures>
  /** A restarted rank's new number → the number it died under. */
  readonly replacing: Readonly<Record<number, number>>
  /**
   * The world's seats over time, oldest first: formation's, then each growth's (never a restart's new
   * number). Every one is kept, unlike the run view's display series: ETTR must see formation in a long run.
   * (Optional: a state served by an older launcher has none.)
   */
  readonly seats?: ReadonlyArray<SeatsPoint>
}

/** From `at` on, the world has `seats` seats. */
export interface SeatsPoint {
  readonly at: number
  readonly seats: number
}

export const empty: RecoveryState = { deaths: [], replacing: {}, seats: [] }

/** The events the figures are made of, as the journal records them. */
export type RecoveryEvent =
  | { readonly event: "rank_lost"; readonly at: number; readonly ranks: ReadonlyArray<number>; readonly kind?: string; readonly rule?: string; readonly diedAt?: number }
  | { readonly event: "rank_restarting"; readonly at: number; readonly rank: number; readonly kind?: string; readonly rule?: string; readonly diedAt?: number }
  | { readonly event: "survivors_stepped"; readonly at: number; readonly ranks: ReadonlyArray<number> }
  | { readonly event: "world_formed"; readonly at: number; readonly world: number }
  | { readonly event: "world_grew"; readonly at: number; readonly ranks: ReadonlyArray<number>; readonly replaces?: number }
  | { readonly event: "rank_running"; readonly at: number; readonly rank: number }
  | { readonly event: "ranks_entered"; readonly at: number; readonly ranks: ReadonlyArray<number> }

/** The last death of `rank` carried as `how` and not recovered yet, by its position. */
const openDeath = (deaths: ReadonlyArray<DeathFigures>, rank: number, how: DeathFigures["how"]): number => {
  for (let at = deaths.length - 1; at >= 0; at--) {
    const death = deaths[at]!
    if (death.rank === rank && death.how === how) return death.recoveredAt === null ? at : -1
  }
  return -1
}

const recovered = (state: RecoveryState, index: number, at: number): RecoveryState =>
  index === -1 ? state : { ...state, deaths: state.deaths.map((death, position) => (position === index ? { ...death, recoveredAt: at } : death)) }

/** A death as the policy carried it, known at the event's moment. */
const newDeath = (
  rank: number,
  how: DeathFigures["how"],
  event: { readonly at: number; readonly kind?: string; readonly rule?: string; readonly diedAt?: number }
): DeathFigures => ({
  rank,
  kind: event.kind ?? null,
  rule: event.rule ?? null,
  how,
  // Never after it was known: another host's clock may run ahead of the launcher's.
  diedAt: Math.min(event.diedAt ?? event.at, event.at),
  knownAt: event.at,
  recoveredAt: null
})

export const apply = (state: RecoveryState, event: RecoveryEvent): RecoveryState => {
  switch (event.event) {
    case "rank_lost":
      return { ...state, deaths: [...state.deaths, ...event.ranks.map((rank) => newDeath(rank, "dropped", event))] }
    case "rank_restarting": {
      // A rank given up for silence and then restarted is one death, carried by the restart.
      const given = openDeath(state.deaths, event.rank, "dropped")
      if (given !== -1) {
        return { ...state, deaths: state.deaths.map((death, position) => (position === given ? { ...death, how: "restarted" as const } : death)) }
      }
      return { ...state, deaths: [...state.deaths, newDeath(event.rank, "restarted", event)] }
    }
    case "survivors_stepped":
      // Each of the deaths the step was the first after; a restarted one recovers when its new incarnation trains.
      return event.ranks.reduce((current, rank) => recovered(current, openDeath(current.deaths, rank, "dropped"), event.at), state)
    case "world_formed":
      return { ...state, seats: [{ at: event.at, seats: event.world }] }
    case "world_grew": {
      if (event.ranks.length === 0) return state
      if (event.replaces !== undefined) return { ...state, replacing: { ...state.replacing, [event.ranks[0]!]: event.replaces } }
      // Growth in the same ms as formation adds to it: the point of formation stays.
      const seats = state.seats ?? []
      return { ...state, seats: [...seats, { at: event.at, seats: (seats.at(-1)?.seats ?? 0) + event.ranks.length }] }
    }
    case "rank_running": {
      const rank = state.replacing[event.rank] ?? event.rank
      return recovered(state, openDeath(state.deaths, rank, "restarted"), event.at)
    }
    case "ranks_entered":
      // A restarted rank of a training run trains again only once it enters, at an epoch boundary.
      return event.ranks.reduce((current, entering) => {
        const rank = current.replacing[entering] ?? entering
        const index = current.deaths.findLastIndex((death) => death.rank === rank && death.how === "restarted")
        if (index === -1 || current.deaths[index]!.entered === true) return current
        return { ...current, deaths: current.deaths.map((death, position) => (position === index ? { ...death, recoveredAt: event.at, entered: true } : death)) }
      }, state)
  }
}

/** The deaths `after` has recovered (or recovered again, a restart entering) that `before` had not: said as they happen. */
export const recoveredSince = (before: RecoveryState, after: RecoveryState): ReadonlyArray<DeathFigures> =>
  after.deaths.filter((death, index) => death.recoveredAt !== null && before.deaths[index]?.recoveredAt !== death.recoveredAt)

/** Times to detect and to recover, in ms, in the deaths' order (recoveries only for those that recovered). */
export const times = (state: RecoveryState): { readonly detect: ReadonlyArray<number>; readonly recover: ReadonlyArray<number> } => ({
  detect: state.deaths.map((death) => death.knownAt - death.diedAt),
  recover: state.deaths.flatMap((death) => (death.recoveredAt === null ? [] : [Math.max(0, death.recoveredAt - death.diedAt)]))
})

/**
 * ETTR over [startedAt, endAt] (see the header): one sweep over the moments the seats, the losses and the
 * absences change, each stretch counting its seats at work over its seats; undefined for a run of no length.
 */
export const effectiveTrainingRatio = (recovery: RecoveryState, startedAt: number, endAt: number): number | undefined => {
  const wall = endAt - startedAt
  if (wall <= 0) return undefined
  // Each moment's change to the seats the world has and to those not at work.
  const changes: Array<{ readonly at: number; readonly seats: number; readonly away: number }> = []
  let had = 0
  for (const point of recovery.seats ?? []) {
    changes.push({ at: point.at, seats: point.seats - had, away: 0 })
    had = point.seats
  }
  for (const death of recovery.deaths) {
    if (death.how === "dropped") changes.push({ at: death.knownAt, seats: 0, away: 1 })
    else {
      changes.push({ at: Math.min(death.diedAt, death.knownAt), seats: 0, away: 1 })
      if (death.recoveredAt !== null) changes.push({ at: death.recoveredAt, seats: 0, away: -1 })
    }
  }
  changes.sort((a, b) => a.at - b.at)
  let seats = 0
  let away = 0
  let weighted = 0
  changes.forEach((change, index) => {
    seats += change.seats
    away += change.away
    const from = Math.max(change.at, startedAt)
    const to = Math.min(changes[index + 1]?.at ?? endAt, endAt)
    if (to > from && seats > 0) weighted += ((to - from) * Math.min(seats, Math.max(0, seats - away))) / seats
  })
  return weighted / wall
}

/**
 * "3 death(s): detected in 9/12/31 ms, recovered in 22/25/40 ms; effective training 97.4%". For a run that
 * failed (`failed`), both say they cover the time before the failure: a run stopped early has figures of its
 * shorter life, and a high ratio must not read as a healthy run.
 */
export const describeFigures = (state: RecoveryState, ettr: number | undefined, failed = false): string | undefined => {
  const { detect, recover } = times(state)
  const ratio = ettr === undefined ? "" : `effective training ${(ettr * 100).toFixed(1)}%${failed ? " until the run failed" : ""}`
  if (state.deaths.length === 0) return ratio === "" ? undefined : ratio
  const ms = (values: ReadonlyArray<number>) => values.map((value) => Math.round(value)).join("/")
  const recovery = recover.length === 0 ? "none recovered" : `recovered in ${ms(recover)} ms`
  const deaths = `${state.deaths.length} death(s)${failed ? " before the run failed" : ""}`
  return `${deaths}: detected in ${ms(detect)} ms, ${recovery}${ratio === "" ? "" : `; ${ratio}`}`
}
