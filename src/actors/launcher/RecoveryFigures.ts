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
 * - ETTR: the time the cohort spent with every rank alive, plus the time with fewer weighted by the
 *   share alive, over the run's wall time (from its start to its end, or now). A restarted rank counts
 *   as absent from its death to its recovery. The join window and the time before a death is known
 *   count as they are, so 100% is never quite reached. Work done again (a group restarted from its
 *   checkpoint) is not in it: the wall time to finish the same job tells that.
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
}

export const empty: RecoveryState = { deaths: [], replacing: {} }

/** The events the figures are made of, as the journal records them. */
export type RecoveryEvent =
  | { readonly event: "rank_lost"; readonly at: number; readonly ranks: ReadonlyArray<number>; readonly kind?: string; readonly rule?: string; readonly diedAt?: number }
  | { readonly event: "rank_restarting"; readonly at: number; readonly rank: number; readonly kind?: string; readonly rule?: string; readonly diedAt?: number }
  | { readonly event: "survivors_stepped"; readonly at: number; readonly ranks: ReadonlyArray<number> }
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
    case "world_grew":
      return event.replaces === undefined || event.ranks.length === 0
        ? state
        : { ...state, replacing: { ...state.replacing, [event.ranks[0]!]: event.replaces } }
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

/** The world over time as RunView keeps it: every rank the run has had, and those alive, from `at` on. */
export interface WorldPoint {
  readonly at: number
  readonly ranks: number
  readonly alive: number
}

/**
 * ETTR over [startedAt, endAt]: each stretch of the world's timeline counts its share alive (alive/ranks);
 * before the world formed nothing counts; a restarted rank is one rank of the formed world absent from its
 * death to its recovery (or the end). undefined for a run of no length.
 */
export const effectiveTrainingRatio = (
  timeline: ReadonlyArray<WorldPoint>,
  startedAt: number,
  endAt: number,
  recovery: RecoveryState = empty
): number | undefined => {
  const wall = endAt - startedAt
  if (wall <= 0) return undefined
  let weighted = 0
  timeline.forEach((point, index) => {
    const from = Math.max(point.at, startedAt)
    const to = Math.min(timeline[index + 1]?.at ?? endAt, endAt)
    if (to > from && point.ranks > 0) weighted += (to - from) * Math.min(1, point.alive / point.ranks)
  })
  const formed = timeline[0]?.ranks ?? 0
  for (const death of recovery.deaths) {
    if (death.how !== "restarted" || formed === 0) continue
    const absent = Math.min(death.recoveredAt ?? endAt, endAt) - Math.max(death.diedAt, startedAt)
    if (absent > 0) weighted -= absent / formed
  }
  return Math.max(0, weighted) / wall
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
