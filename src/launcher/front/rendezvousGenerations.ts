/**
 * The NCCL rendezvous as a machine: `generations(state, event) → [effects, state]`.
 *
 * Everything the RendezvousGate decides lives here, with no socket and no
 * timer: which ranks may dial in (live, or admitted and waiting for their
 * boundary), when a generation starts (every live rank has a link, none is
 * forming or formed), who makes its id (`pickGenerator`), when it forms or is
 * stillborn (someone left or entered while the id was made: start over),
 * when the rendezvous fails for good (an id that could not be made with the
 * same members), whether the new generation may shrink the last one
 * (`shrinkOf`), and which grown ranks are absent. The gate (RendezvousGate.ts)
 * is its interpreter on the kernel: it reads the links, runs the timers, and
 * carries the effects out.
 *
 * `L` is a rank's link: the machine only compares and carries it (a member on
 * another link than the one it joined with is another process).
 */
import * as Data from "effect/Data"
import type { ShrinkOf } from "../../wire/messages/RendezvousMessages.ts"

export interface Generation {
  readonly generation: number
  readonly members: ReadonlyArray<number>
  readonly generator: number
  /** Present when the generation is an earlier one less those who left (see `shrinkOf`). */
  readonly shrinkOf?: ShrinkOf
}

/** A generation as it formed: its members and the link each joined it with (which process it was). */
export interface Formed<L> {
  readonly generation: number
  readonly members: ReadonlyArray<number>
  readonly links: ReadonlyMap<number, L>
}

/**
 * Whether the generation of `members` (ascending), whose members are now on `links`, may be formed by
 * shrinking `parent`: someone left, nobody entered, and every member is still on the link it joined the
 * parent with. A member that came back (a restart) is a new process without the parent's communicator:
 * then every member builds anew, since a shrink is collective.
 */
export const shrinkOf = <L>(parent: Formed<L> | undefined, members: ReadonlyArray<number>, links: ReadonlyMap<number, L>): ShrinkOf | undefined => {
  if (parent === undefined) return undefined
  const stayed = members.every((rank) => parent.links.has(rank) && parent.links.get(rank) === links.get(rank))
  const left = parent.members.filter((rank) => !members.includes(rank))
  return stayed && left.length > 0 ? { generation: parent.generation, left } : undefined
}

/**
 * Who makes a generation's id, as the reference chooses: the first live member of the first preference
 * that has one (the launcher's own host's ranks, then the first declared worker's), else the lowest.
 * `members` are ascending.
 */
export const pickGenerator = (members: ReadonlyArray<number>, preferred: ReadonlyArray<ReadonlySet<number>>): number => {
  for (const ranks of preferred) {
    const found = members.find((rank) => ranks.has(rank))
    if (found !== undefined) return found
  }
  return members[0]!
}

export interface GenerationsState<L> {
  readonly live: ReadonlySet<number>
  /** Admitted, not yet grown: may dial in, not yet members. */
  readonly admitted: ReadonlySet<number>
  readonly preferred: ReadonlyArray<ReadonlySet<number>>
  /** Each rank's current link. */
  readonly links: ReadonlyMap<number, L>
  /** Every generation that formed, oldest first. */
  readonly history: ReadonlyArray<Generation>
  readonly formed: Generation | undefined
  /** The last generation that formed, with its members' links: the parent a shrink would start from. */
  readonly lastFormed: Formed<L> | undefined
  /** The generation whose id is being made, by whom, for whom. */
  readonly forming: { readonly generation: number; readonly generator: number; readonly members: ReadonlyArray<number> } | undefined
  readonly next: number
  readonly failed: boolean
}

export type GenerationsEvent<L> = Data.TaggedEnum<{
  /** The world has formed: these ranks may join; `preferred` orders who makes the ids. */
  Begin: { readonly world: ReadonlyArray<number>; readonly preferred: ReadonlyArray<ReadonlySet<number>> }
  /** Ranks that joined the formed cohort: they may dial in now, and take part from their `Grow`. */
  Admit: { readonly ranks: ReadonlyArray<number> }
  /** Admitted ranks enter: the cohort re-rendezvouses with them. */
  Grow: { readonly ranks: ReadonlyArray<number> }
  /** These ranks left the world: the survivors re-rendezvous. */
  Lose: { readonly ranks: ReadonlyArray<number>; readonly reason: string }
  /** A rank joined with its key checked: on `link` from now on. */
  Joined: { readonly rank: number; readonly link: L }
  /** A rank's link ended (its process died). */
  LinkEnded: { readonly rank: number; readonly link: L }
  IdProvided: { readonly generation: number; readonly id: Uint8Array }
  /** The id could not be had: the generator said why, or its time ran out. */
  IdFailed: { readonly generation: number; readonly reason: string }
  /** The id timeout after these ranks entered: those still without a link are absent. */
  AbsenceDue: { readonly ranks: ReadonlyArray<number> }
}>
interface GenerationsEventDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: GenerationsEvent<this["A"]>
}
export const GenerationsEvent = Data.taggedEnum<GenerationsEventDefinition>()

export type GenerationsEffect<L> = Data.TaggedEnum<{
  /** Refuse a join: close the link and say why. */
  Refuse: { readonly link: L; readonly why: string }
  /** Read this rank's link from now on. */
  Listen: { readonly rank: number; readonly link: L }
  Close: { readonly link: L }
  /** Ask the generator for an id, and give it `idTimeoutMs`. */
  AskId: { readonly generation: number; readonly generator: number }
  /** Tell these members their generation is over (`Reform`). */
  Dissolved: { readonly generation: number; readonly members: ReadonlyArray<number>; readonly reason: string }
  /** Tell the members the generation formed (`Ready`), with its id. */
  Formed: { readonly generation: Generation; readonly id: Uint8Array }
  /** After the id timeout, check these entering ranks for absence. */
  WatchAbsence: { readonly ranks: ReadonlyArray<number> }
  /** The rendezvous failed for good: the cohort cannot form. */
  Failed: { readonly reason: string }
  /** Grown ranks that never dialed in within the id timeout (the launcher declares them lost). */
  Absent: { readonly ranks: ReadonlyArray<number> }
}>
interface GenerationsEffectDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: GenerationsEffect<this["A"]>
}
export const GenerationsEffect = Data.taggedEnum<GenerationsEffectDefinition>()

type Step<L> = readonly [ReadonlyArray<GenerationsEffect<L>>, GenerationsState<L>]

export const before = <L>(): GenerationsState<L> => ({
  live: new Set(),
  admitted: new Set(),
  preferred: [],
  links: new Map(),
  history: [],
  formed: undefined,
  lastFormed: undefined,
  forming: undefined,
  next: 0,
  failed: false
})

const E = GenerationsEffect
const withSet = <A>(set: ReadonlySet<A>, add: Iterable<A>, remove: Iterable<A> = []) => {
  const next = new Set(set)
  for (const each of add) next.add(each)
  for (const each of remove) next.delete(each)
  return next
}

/** The current generation is over: its members abort their communicators. */
const dissolve = <L>([effects, state]: Step<L>, reason: string): Step<L> =>
  state.formed === undefined
    ? [effects, state]
    : [[...effects, E.Dissolved({ generation: state.formed.generation, members: state.formed.members, reason })], { ...state, formed: undefined }]

/** Start a generation once every live rank has joined (and none is forming or formed). */
const advance = <L>([effects, state]: Step<L>): Step<L> => {
  if (state.failed || state.forming !== undefined || state.formed !== undefined || state.live.size === 0) return [effects, state]
  if (![...state.live].every((rank) => state.links.has(rank))) return [effects, state]
  const members = [...state.live].sort((a, b) => a - b)
  const generator = pickGenerator(members, state.preferred)
  const generation = state.next
  return [[...effects, E.AskId({ generation, generator })], { ...state, forming: { generation, generator, members }, next: generation + 1 }]
}

/** Members are a subset of the live ranks until someone leaves: a different size means someone entered. */
const membershipChanged = <L>(state: GenerationsState<L>, members: ReadonlyArray<number>) =>
  members.length !== state.live.size || members.some((rank) => !state.live.has(rank) || !state.links.has(rank))

/** The generation being formed got no id: a membership change retries, anything else fails the rendezvous. */
const noId = <L>([effects, state]: Step<L>, generation: number, reason: string): Step<L> => {
  const { forming } = state
  if (forming?.generation !== generation) return [effects, state]
  const cleared = { ...state, forming: undefined }
  // A member (the generator included) that left, or one that entered, is a membership change, not a failure: retry.
  if (membershipChanged(cleared, forming.members)) return advance([effects, cleared])
  return [[...effects, E.Failed({ reason: `the NCCL rendezvous failed: ${reason}` })], { ...cleared, failed: true }]
}

/** Whatever is forming is stale now (someone left or entered): it is retried as a membership change. */
const interruptForming = <L>(step: Step<L>, reason: string): Step<L> => {
  const forming = step[1].forming
  return forming === undefined ? step : noId(step, forming.generation, reason)
}

export const generations = <L>(state: GenerationsState<L>, event: GenerationsEvent<L>): Step<L> => {
  const none: ReadonlyArray<GenerationsEffect<L>> = []
  switch (event._tag) {
    case "Begin":
      return advance([none, { ...state, live: withSet(state.live, event.world), preferred: event.preferred }])
    case "Admit":
      return [none, { ...state, admitted: withSet(state.admitted, event.ranks) }]
    case "Grow": {
      const entering = event.ranks.filter((rank) => state.admitted.has(rank))
      if (entering.length === 0) return [none, state]
      const grown = { ...state, admitted: withSet(state.admitted, [], entering), live: withSet(state.live, entering) }
      const reason = `rank(s) ${entering.join(", ")} joined`
      const step = interruptForming(dissolve([none, grown], reason), reason)
      // A rank that never dials in would hold every generation back: past the id timeout it is absent.
      const [effects, next] = advance(step)
      return [[...effects, E.WatchAbsence({ ranks: entering })], next]
    }
    case "Lose": {
      const admitted = withSet(state.admitted, [], event.ranks)
      const gone = event.ranks.filter((rank) => state.live.has(rank))
      if (gone.length === 0) return [none, { ...state, admitted }]
      const links = new Map(state.links)
      const closes = gone.flatMap((rank) => {
        const link = links.get(rank)
        links.delete(rank)
        return link === undefined ? [] : [E.Close({ link })]
      })
      const left = { ...state, admitted, live: withSet(state.live, [], gone), links }
      return advance(interruptForming(dissolve([closes, left], event.reason), event.reason))
    }
    case "Joined": {
      const { link, rank } = event
      if (!(state.live.has(rank) || state.admitted.has(rank))) return [[E.Refuse({ link, why: `rank ${rank} is not a live rank of this world` })], state]
      const previous = state.links.get(rank)
      const links = new Map(state.links).set(rank, link)
      const effects: Array<GenerationsEffect<L>> = previous === undefined ? [] : [E.Close({ link: previous })]
      effects.push(E.Listen({ rank, link }))
      // A member coming back (a restart) makes the formed generation stale; an admitted rank waits for its `Grow`.
      const step: Step<L> = [effects, { ...state, links }]
      return advance(state.formed?.members.includes(rank) === true ? dissolve(step, `rank ${rank} rejoined`) : step)
    }
    case "LinkEnded": {
      const { link, rank } = event
      if (state.links.get(rank) !== link) return [none, state]
      const links = new Map(state.links)
      links.delete(rank)
      const step = [none, { ...state, links }] as const
      const dissolved = state.formed?.members.includes(rank) === true ? dissolve(step, `rank ${rank} left`) : step
      return interruptForming(dissolved, `rank ${rank} left while the id was made`)
    }
    case "IdFailed":
      return noId([none, state], event.generation, event.reason)
    case "IdProvided": {
      const { forming } = state
      if (forming?.generation !== event.generation) return [none, state]
      const cleared = { ...state, forming: undefined }
      // Someone left or entered while the id was made: this generation is stillborn; start over.
      if (membershipChanged(cleared, forming.members)) return advance([none, cleared])
      const { generator, members } = forming
      const shrink = shrinkOf(state.lastFormed, members, state.links)
      const formed: Generation = shrink === undefined ? { generation: forming.generation, members, generator } : { generation: forming.generation, members, generator, shrinkOf: shrink }
      return [[E.Formed({ generation: formed, id: event.id })], {
        ...cleared,
        formed,
        lastFormed: { generation: forming.generation, members, links: new Map(members.map((rank) => [rank, state.links.get(rank)!])) },
        history: [...state.history, formed]
      }]
    }
    case "AbsenceDue": {
      const absent = event.ranks.filter((rank) => state.live.has(rank) && !state.links.has(rank))
      return [absent.length === 0 ? none : [E.Absent({ ranks: absent })], state]
    }
  }
}
