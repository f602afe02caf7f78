/**
 * Membership: who is in the run, as one pure function over events.
 *
 * Once the world forms, every fact about who is in it lives in this state and
 * nowhere else: which hosts joined (a host that was given up on and came back
 * is listed again), which host and device each rank number runs on, the seat a
 * restarted rank's new number stands in for, which ranks were given up for
 * silence, which hosts can no longer be heard, how many ranks the run has had,
 * and which ranks still have to run user code before the cohort forms.
 *
 * `membership(state, event)` returns what changed because of the event, as
 * effects (ranks left, a host admitted, a seat renumbered, the cohort formed, a
 * host gone), and the next state; `MembershipOwner` is the actor that holds the
 * state and publishes each effect to the parts that act on it (the
 * coordinator, the NCCL rendezvous, the control gate, the journal), so no part
 * is told by hand and none can be forgotten. Readers (the orders' routing, the
 * result table, the control gate's hosts) read the owner's state through the
 * selectors below instead of keeping copies of their own.
 *
 * The maps are Effect's persistent HashMaps: a big world (8,000 ranks) takes
 * one event per rank start, and copying a plain Map for each would be
 * quadratic.
 */
import * as Data from "effect/Data"
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import type { Loss } from "../../kernel/policy/Verdict.ts"
import { type Inventory, withHosts, withRank } from "./Inventory.ts"

/** A host's place in the world, as it joined: its rank numbers then, and their devices by slot. */
export interface HostEntry {
  readonly host: string
  /** The numbers its ranks joined under: also their seats. */
  readonly ranks: ReadonlyArray<number>
  /** Each slot's device: the GPU's index, or `cpu`. */
  readonly devices: ReadonlyArray<string>
  /** Each slot's device as the host's agent named it in its join: the GPU's name ("NVIDIA H200"), or `cpu`. */
  readonly labels: ReadonlyArray<string>
}

/** What the run knows of one rank number. */
export interface RankRecord {
  readonly host: string
  /** The device index, or `cpu`. */
  readonly device: string
  /** The device's name, as its host's agent gave it ("NVIDIA H200", `cpu`). */
  readonly label: string
  /** The seat this number runs in: its own number, or the first number of a restarted rank. */
  readonly seat: number
  /** The last incarnation's pid. */
  readonly pid: number | null
  /** How each incarnation ended, oldest first: "status 0", "signal SIGKILL", … */
  readonly exits: ReadonlyArray<string>
  /**
   * The number its seat ran as until it restarted under this one (the seat itself at the first restart, the
   * previous restart's number at a second); null for a number that joined. Kept here, where the seat's
   * numbers are, so the restart's line and the coordinator's loss name the number that really died.
   */
  readonly replaces: number | null
}

export interface MembershipState {
  /** Every rank number the run has had: the world at formation, then growth and restarts under new numbers. */
  readonly world: number
  /** The world's size when it formed (0 before). */
  readonly formedWith: number
  /** The hosts of formation, then each one that joined since, in order. */
  readonly hosts: ReadonlyArray<HostEntry>
  readonly ranks: HashMap.HashMap<number, RankRecord>
  /** A seat's current number, only where it differs from the seat (a restarted rank). */
  readonly renumbered: HashMap.HashMap<number, number>
  /**
   * The ranks each host's relay speaks for: those it last joined with, then every number a restart of one
   * of them has run under since. Kept as events come (a relay's hello asks it; deriving it from the ranks
   * each time cost 7 ms in a world of 8,000, per hello).
   */
  readonly relays: HashMap.HashMap<string, ReadonlyArray<number>>
  /** Hosts that cannot be heard from any more; one may come back under the same name and join again. */
  readonly gone: HashSet.HashSet<string>
  /** Rank numbers given up on for silence while their processes may live: a host all of whose ranks are silent is gone. */
  readonly silent: HashSet.HashSet<number>
  /**
   * Rank numbers that left the world (lost, given up on, or replaced by a restart's new number): each is
   * said to have left once, whichever way came first.
   */
  readonly left: HashSet.HashSet<number>
  /** Ranks of the formed world that have not yet run user code: the cohort forms when none is left. */
  readonly awaiting: HashSet.HashSet<number>
  readonly cohortFormed: boolean
  /** Every loss the failure policy reported, in order. */
  readonly lost: ReadonlyArray<Loss>
}

export type MembershipEvent = Data.TaggedEnum<{
  /** The join window formed the world. */
  WorldFormed: { readonly hosts: ReadonlyArray<HostEntry> }
  /** A host joined the formed world (growth), or came back after it was given up on. */
  HostJoined: { readonly host: HostEntry }
  RankStarted: { readonly rank: number; readonly pid: number }
  /** The rank runs user code (an entry rank checked in, a command rank started). */
  RankRunning: { readonly rank: number }
  RankExited: { readonly rank: number; readonly exit: string }
  /** A restarted seat runs under a new number from now on (the join gate handed it out). */
  Renumbered: { readonly seat: number; readonly rank: number }
  /** The failure policy reported these rank numbers dead. */
  RanksLost: { readonly ranks: ReadonlyArray<number>; readonly cause: string }
  /** These rank numbers were given up on (silence, an absent NCCL member, a group that never formed): their processes are being killed. */
  RanksGivenUp: { readonly ranks: ReadonlyArray<number>; readonly reason: string }
  /** These rank numbers were given up on for silence: a host none of whose ranks is heard is given up too, for `why`. */
  RanksSilent: { readonly ranks: ReadonlyArray<number>; readonly why: string }
  /** The host's agent can no longer be heard from (its session ended after formation). */
  HostEnded: { readonly host: string; readonly why: string }
}>
export const MembershipEvent = Data.taggedEnum<MembershipEvent>()

export type MembershipEffect = Data.TaggedEnum<{
  /** Every rank of the formed world has run user code: said once. */
  CohortFormed: {}
  /** A host is given up on: its link is to be closed (its ranks then end as lost) and it leaves the rounds. */
  HostGone: { readonly host: string; readonly why: string }
  /** A host joined the formed world: its ranks (numbered after every rank the run has had) are the world's from now on. */
  HostAdmitted: { readonly entry: HostEntry; readonly world: number }
  /** These rank numbers left the world, for `cause`: said once per number, by whichever loss came first. */
  RanksLeft: { readonly ranks: ReadonlyArray<number>; readonly cause: string }
  /**
   * A restarted seat runs as `rank` from now on, on the host and device of `old` (the number that died): `old`
   * has left the world, and `rank` joins it.
   */
  SeatRenumbered: {
    readonly seat: number
    readonly old: number
    readonly rank: number
    readonly host: string
    readonly device: string
    readonly label: string
    readonly world: number
  }
}>
export const MembershipEffect = Data.taggedEnum<MembershipEffect>()

export const empty: MembershipState = {
  world: 0,
  formedWith: 0,
  hosts: [],
  ranks: HashMap.empty(),
  renumbered: HashMap.empty(),
  relays: HashMap.empty(),
  gone: HashSet.empty(),
  silent: HashSet.empty(),
  left: HashSet.empty(),
  awaiting: HashSet.empty(),
  cohortFormed: false,
  lost: []
}

const none: ReadonlyArray<MembershipEffect> = []

/** The host's own ranks, as records keyed by number. */
const recordsOf = (entry: HostEntry, ranks: HashMap.HashMap<number, RankRecord>) =>
  entry.ranks.reduce(
    (map, rank, slot) => HashMap.set(map, rank, { host: entry.host, device: entry.devices[slot] ?? "?", label: entry.labels[slot] ?? "?", seat: rank, pid: null, exits: [], replaces: null }),
    ranks
  )

/** `recordsOf` for every host of a world at once, in one transient map (8,000 persistent inserts cost 0.1 s). */
const worldRecords = (hosts: ReadonlyArray<HostEntry>) =>
  HashMap.mutate(HashMap.empty<number, RankRecord>(), (map) => {
    for (const entry of hosts) recordsOf(entry, map)
  })

/** Change one rank's record; a number the run never had changes nothing. */
const amend = (state: MembershipState, rank: number, change: (record: RankRecord) => RankRecord): MembershipState => {
  const record = HashMap.get(state.ranks, rank)
  return Option.isNone(record) ? state : { ...state, ranks: HashMap.set(state.ranks, rank, change(record.value)) }
}

/** The last time a host joined: a host that came back is judged by its new ranks only. */
export const latestEntry = (state: MembershipState, host: string): HostEntry | undefined => state.hosts.findLast((entry) => entry.host === host)

/** The ranks of `ranks` the world has and that have not left yet: those leave now. */
const leave = (state: MembershipState, ranks: ReadonlyArray<number>, cause: string): readonly [ReadonlyArray<MembershipEffect>, MembershipState] => {
  const leaving = [...new Set(ranks)].filter((rank) => HashMap.has(state.ranks, rank) && !HashSet.has(state.left, rank))
  return leaving.length === 0
    ? [none, state]
    : [[MembershipEffect.RanksLeft({ ranks: leaving, cause })], { ...state, left: leaving.reduce((set, rank) => HashSet.add(set, rank), state.left) }]
}

/** Give a host up, once: a host already gone stays gone, and one that never joined is no one's to give up. */
const giveUpHost = (state: MembershipState, host: string, why: string): readonly [ReadonlyArray<MembershipEffect>, MembershipState] =>
  latestEntry(state, host) === undefined || HashSet.has(state.gone, host)
    ? [none, state]
    : [[MembershipEffect.HostGone({ host, why })], { ...state, gone: HashSet.add(state.gone, host) }]

export const membership = (state: MembershipState, event: MembershipEvent): readonly [ReadonlyArray<MembershipEffect>, MembershipState] => {
  switch (event._tag) {
    case "WorldFormed": {
      const ranks = worldRecords(event.hosts)
      const world = HashMap.size(ranks)
      const relays = event.hosts.reduce((map, entry) => HashMap.set(map, entry.host, entry.ranks), HashMap.empty<string, ReadonlyArray<number>>())
      return [none, { ...empty, world, formedWith: world, hosts: event.hosts, ranks, relays, awaiting: HashSet.fromIterable(HashMap.keys(ranks)) }]
    }
    case "HostJoined": {
      const { host } = event
      const world = state.world + host.ranks.length
      return [[MembershipEffect.HostAdmitted({ entry: host, world })], {
        ...state,
        world,
        hosts: [...state.hosts, host],
        ranks: recordsOf(host, state.ranks),
        relays: HashMap.set(state.relays, host.host, host.ranks),
        gone: HashSet.remove(state.gone, host.host)
      }]
    }
    case "RankStarted":
      return [none, amend(state, event.rank, (record) => ({ ...record, pid: event.pid }))]
    case "RankRunning": {
      const awaiting = HashSet.remove(state.awaiting, event.rank)
      const forms = HashSet.size(awaiting) === 0 && !state.cohortFormed
      return [forms ? [MembershipEffect.CohortFormed()] : none, { ...state, awaiting, cohortFormed: state.cohortFormed || forms }]
    }
    case "RankExited":
      return [none, amend(state, event.rank, (record) => ({ ...record, exits: [...record.exits, event.exit] }))]
    case "Renumbered": {
      const previous = numberOf(state, event.seat)
      const old = HashMap.get(state.ranks, previous)
      if (Option.isNone(old) || HashMap.has(state.ranks, event.rank)) return [none, state]
      const { host } = old.value
      // A seat of an earlier visit of its host is no longer its relay's to speak for.
      const speaks = latestEntry(state, host)?.ranks.includes(event.seat) === true
      const { device, label } = old.value
      const world = state.world + 1
      return [[MembershipEffect.SeatRenumbered({ seat: event.seat, old: previous, rank: event.rank, host, device, label, world })], {
        ...state,
        world,
        left: HashSet.add(state.left, previous),
        ranks: HashMap.set(state.ranks, event.rank, { host, device, label, seat: event.seat, pid: null, exits: [], replaces: previous }),
        renumbered: HashMap.set(state.renumbered, event.seat, event.rank),
        relays: speaks ? HashMap.modify(state.relays, host, (ranks) => [...ranks, event.rank]) : state.relays
      }]
    }
    case "RanksLost":
      return leave({ ...state, lost: [...state.lost, { ranks: event.ranks, cause: event.cause }] }, event.ranks, event.cause)
    case "RanksGivenUp":
      return leave(state, event.ranks, event.reason)
    case "RanksSilent": {
      const silenced = { ...state, silent: event.ranks.reduce((set, rank) => HashSet.add(set, rank), state.silent) }
      // A host none of whose ranks is heard any more is likely cut off: a kill order would never reach it.
      return silenced.hosts.reduce<readonly [ReadonlyArray<MembershipEffect>, MembershipState]>(([effects, next], entry) => {
        if (latestEntry(next, entry.host) !== entry || !entry.ranks.every((seat) => HashSet.has(next.silent, numberOf(next, seat)))) return [effects, next]
        const [more, after] = giveUpHost(next, entry.host, event.why)
        return [[...effects, ...more], after]
      }, [none, silenced])
    }
    case "HostEnded":
      return giveUpHost(state, event.host, event.why)
  }
}

/** The number a seat runs as now. */
export const numberOf = (state: MembershipState, seat: number): number => Option.getOrElse(HashMap.get(state.renumbered, seat), () => seat)

/** The seat a rank number runs in (a number the run never had is its own seat). */
export const seatOf = (state: MembershipState, rank: number): number => Option.match(HashMap.get(state.ranks, rank), { onNone: () => rank, onSome: (record) => record.seat })

/** What the run knows of a rank number. */
export const recordOf = (state: MembershipState, rank: number): RankRecord | undefined => Option.getOrUndefined(HashMap.get(state.ranks, rank))

/** The host a rank number runs on. */
export const hostOf = (state: MembershipState, rank: number): string | undefined => Option.getOrUndefined(Option.map(HashMap.get(state.ranks, rank), (record) => record.host))

/** The ranks a host's relay speaks for (see `relays`); undefined for a host not in the world. */
export const ranksOf = (state: MembershipState, host: string): ReadonlyArray<number> | undefined => Option.getOrUndefined(HashMap.get(state.relays, host))

/** Every host's relay's ranks, in the order the hosts first joined. */
export const ranksByHost = (state: MembershipState): ReadonlyMap<string, ReadonlyArray<number>> =>
  new Map([...new Set(state.hosts.map((entry) => entry.host))].map((host) => [host, ranksOf(state, host) ?? []] as const))

/** The hosts still heard from, each once, in the order they first joined. */
export const liveHosts = (state: MembershipState): ReadonlyArray<string> =>
  [...new Set(state.hosts.map((entry) => entry.host))].filter((host) => !HashSet.has(state.gone, host))

/** Every rank number the run has had, in order, with its record. */
export const rankRecords = (state: MembershipState): ReadonlyArray<readonly [number, RankRecord]> =>
  HashMap.toEntries(state.ranks).sort(([a], [b]) => a - b)

/**
 * The cohort's inventory: each host's devices as they joined, with every rank number that ran on each (a
 * restarted rank's new numbers on its seat's device). Hosts in the order they first joined.
 */
export const inventoryOf = (state: MembershipState): Inventory => {
  const joined = withHosts([], state.hosts)
  return rankRecords(state).reduce((inventory, [rank, record]) => (rank === record.seat ? inventory : withRank(inventory, record.host, record.seat, rank)), joined)
}
