/**
 * The process groups' rendezvous store, as a pure state and one step function: the keys torch.distributed and
 * gloo write while a generation of a Python job's group forms, kept by the launcher.
 *
 * Why here and not in a TCPStore on a rank: a TCPStore listens on a port anyone who reaches the host can
 * dial, and it has no authentication. A probe as a second local user read every member's gloo address from
 * one, stalled a re-form for minutes by adding to torch's barrier counter, and pointed a survivor's gloo pair
 * at a listener of its own by overwriting an address. Here a store call travels the rank's own path: its Unix
 * socket to the host's relay (a 0700 directory of the run's user), then the relay's authenticated control link
 * (frames under the host's key). Nobody without a key of the run reaches it, at formation or at any re-form.
 *
 * Who may call: only a member of the generation announced last, and only on that generation's keys. An older
 * generation is over (its pending waits are answered with an error, so a survivor stuck in a rendezvous that
 * lost a member returns at once); a rank outside the members is refused and logged once. What a member may
 * store is bounded (keys, bytes, pending waits), so one rank cannot grow the launcher without end.
 *
 * A rendezvous that does not complete is never silent: when a generation has not formed (every member's
 * `GroupFormed`) within `formWithinMs` of its announcement, its members are lost with cause `rendezvous` and
 * the failure policy decides. Those who never came to the store at all are the ones lost when there are such
 * (they held everyone up); otherwise every member that has not formed.
 *
 * The semantics are torch's `Store`: `get` and `wait` block until their keys exist; `add` keeps a decimal
 * counter (a missing key counts from 0) and `get` of it gives its digits; `compare_set` sets `desired` when the
 * key holds `expected` (or is missing and `expected` is empty) and answers what the key then holds, or, when the
 * key is missing, `expected`. Values travel as base64; a counter's digits are ASCII.
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import { StoreAnswer, type StoreCall } from "../../wire/messages/CoordinatorMessages.ts"

/** Keys one generation may hold: per member, and a margin (gloo writes about two per member, torch a few more). */
export const KEYS_PER_MEMBER = 64
export const KEYS_MARGIN = 64
/** Bytes of values one generation may hold (base64 text): gloo's addresses and NCCL's ids are a few hundred. */
export const BYTES_PER_GENERATION = 16 << 20
/** Calls waiting for keys, per member (gloo waits for one peer at a time). */
export const WAITS_PER_MEMBER = 16

export interface StoreSettings {
  /** How long after its announcement a generation must have formed. */
  readonly formWithinMs: number
}

interface Waiter {
  readonly rank: number
  readonly id: number
  readonly op: "get" | "wait"
  readonly keys: ReadonlyArray<string>
}

/** The generation announced last, and its rendezvous so far. */
export interface GenerationStore {
  readonly generation: number
  readonly members: HashSet.HashSet<number>
  readonly announcedAt: number
  readonly keys: HashMap.HashMap<string, string>
  /** Characters of values held. */
  readonly bytes: number
  /** Members that have called the store at least once. */
  readonly came: HashSet.HashSet<number>
  /** Members that said they formed the generation's groups. */
  readonly formed: HashSet.HashSet<number>
  readonly waiting: ReadonlyArray<Waiter>
  /** Its deadline has passed and its laggards were lost: judged once. */
  readonly overdue: boolean
}

export interface GroupStoreState {
  readonly settings: StoreSettings
  readonly current: GenerationStore | undefined
  /** Ranks whose refused calls were logged (once each). */
  readonly warned: HashSet.HashSet<number>
}

export const initialState = (settings: StoreSettings): GroupStoreState => ({ settings, current: undefined, warned: HashSet.empty() })

export type StoreEvent =
  | { readonly _tag: "Announced"; readonly generation: number; readonly members: ReadonlyArray<number>; readonly at: number }
  | { readonly _tag: "Called"; readonly rank: number; readonly call: StoreCall; readonly at: number }
  | { readonly _tag: "Formed"; readonly rank: number; readonly generation: number; readonly at: number }
  | { readonly _tag: "Tick"; readonly at: number }

export type StoreInstruction =
  | { readonly _tag: "Answer"; readonly rank: number; readonly answer: StoreAnswer }
  | { readonly _tag: "Lose"; readonly ranks: ReadonlyArray<number>; readonly reason: string }
  | { readonly _tag: "Warn"; readonly message: string }

type Step = readonly [ReadonlyArray<StoreInstruction>, GroupStoreState]

const answer = (rank: number, fields: ConstructorParameters<typeof StoreAnswer>[0]): StoreInstruction => ({
  _tag: "Answer",
  rank,
  answer: new StoreAnswer(fields)
})

const seconds = (ms: number): string => `${Math.round(ms / 100) / 10} s`
const list = (ranks: Iterable<number>): string => [...ranks].sort((a, b) => a - b).join(", ")

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

const decodeText = (base64: string): string => Buffer.from(base64, "base64").toString("latin1")
const encodeText = (text: string): string => Buffer.from(text, "latin1").toString("base64")

/** A counter's value: a missing key counts from 0; a key that holds something other than digits is an error. */
const counterOf = (value: string | undefined): number | undefined => {
  if (value === undefined) return 0
  const text = decodeText(value)
  return /^-?\d{1,18}$/.test(text) ? Number(text) : undefined
}

// ---------------------------------------------------------------------------
// The step
// ---------------------------------------------------------------------------

export const step = (state: GroupStoreState, event: StoreEvent): Step => {
  switch (event._tag) {
    case "Announced":
      return announce(state, event.generation, event.members, event.at)
    case "Called":
      return called(state, event.rank, event.call)
    case "Formed":
      return formed(state, event.rank, event.generation)
    case "Tick":
      return tick(state, event.at)
  }
}

const announce = (state: GroupStoreState, generation: number, members: ReadonlyArray<number>, at: number): Step => {
  const previous = state.current
  if (previous !== undefined && generation <= previous.generation) return [[], state]
  // Whoever still waits in the old generation's rendezvous gives up on it now, not at torch's timeout.
  const over = (previous?.waiting ?? []).map((waiter) =>
    answer(waiter.rank, { id: waiter.id, error: `generation ${previous!.generation} is over: generation ${generation} was announced` })
  )
  const current: GenerationStore = {
    generation,
    members: HashSet.fromIterable(members),
    announcedAt: at,
    keys: HashMap.empty(),
    bytes: 0,
    came: HashSet.empty(),
    formed: HashSet.empty(),
    waiting: [],
    overdue: false
  }
  return [over, { ...state, current }]
}

/** Why `rank` may not call `generation`'s store, or undefined when it may. `quiet`: normal, not logged. */
const refusal = (current: GenerationStore | undefined, rank: number, generation: number): { why: string; quiet: boolean } | undefined => {
  if (current === undefined || generation > current.generation) {
    return { why: `generation ${generation} has not been announced`, quiet: false }
  }
  // A rank still forming an older generation learns of the new one a moment later: nothing to report.
  if (generation < current.generation) return { why: `generation ${generation} is over: generation ${current.generation} was announced`, quiet: true }
  if (!HashSet.has(current.members, rank)) return { why: `rank ${rank} is not a member of generation ${generation}`, quiet: false }
  return undefined
}

const called = (state: GroupStoreState, rank: number, call: StoreCall): Step => {
  const refused = refusal(state.current, rank, call.generation)
  if (refused !== undefined) {
    const reply = answer(rank, { id: call.id, error: refused.why })
    if (refused.quiet || HashSet.has(state.warned, rank)) return [[reply], state]
    const log: StoreInstruction = {
      _tag: "Warn",
      message: `refused rank ${rank}'s process-group store call: ${refused.why} (further refusals of this rank are not logged)`
    }
    return [[reply, log], { ...state, warned: HashSet.add(state.warned, rank) }]
  }
  const current = { ...state.current!, came: HashSet.add(state.current!.came, rank) }
  const [instructions, next] = apply(current, rank, call)
  return [instructions, { ...state, current: next }]
}

const keyLimit = (current: GenerationStore): number => HashSet.size(current.members) * KEYS_PER_MEMBER + KEYS_MARGIN
/** Every member has said it formed the generation. */
const allFormed = (current: GenerationStore): boolean => HashSet.size(current.formed) === HashSet.size(current.members)

/** `call` on the generation's keys: its answer (now, or once its keys exist), and any waiters it releases. */
const apply = (current: GenerationStore, rank: number, call: StoreCall): readonly [ReadonlyArray<StoreInstruction>, GenerationStore] => {
  const { id } = call
  const fail = (why: string) => [[answer(rank, { id, error: why })], current] as const
  const key = call.keys[0]
  const single = call.op !== "wait" && call.op !== "check" && call.op !== "num_keys"
  if (single && (key === undefined || call.keys.length !== 1)) return fail(`a store ${call.op} names exactly one key, got ${call.keys.length}`)
  const held = (name: string) => Option.getOrUndefined(HashMap.get(current.keys, name))
  switch (call.op) {
    case "set":
      if (call.value === undefined) return fail("a store set needs a value")
      return write(current, rank, id, key!, call.value, {})
    case "add": {
      if (call.amount === undefined) return fail("a store add needs an amount")
      const count = counterOf(held(key!))
      if (count === undefined) return fail(`store key ${key} holds no counter: add needs one it made`)
      const total = count + call.amount
      return write(current, rank, id, key!, encodeText(String(total)), { number: total })
    }
    case "compare_set": {
      if (call.value === undefined || call.expected === undefined) return fail("a store compare_set needs an expected and a desired value")
      const now = held(key!)
      const matches = now === undefined ? call.expected === "" : now === call.expected
      if (matches) return write(current, rank, id, key!, call.value, { value: call.value })
      return [[answer(rank, { id, value: now ?? call.expected })], current]
    }
    case "get":
    case "wait": {
      if (call.keys.length === 0) return fail(`a store ${call.op} names at least one key`)
      const missing = call.keys.filter((name) => held(name) === undefined)
      if (missing.length === 0) return [[answer(rank, call.op === "get" ? { id, value: held(key!)! } : { id })], current]
      const mine = current.waiting.filter((waiter) => waiter.rank === rank).length
      if (mine >= WAITS_PER_MEMBER) return fail(`rank ${rank} already waits for ${mine} store keys (at most ${WAITS_PER_MEMBER})`)
      return [[], { ...current, waiting: [...current.waiting, { rank, id, op: call.op, keys: call.keys }] }]
    }
    case "check":
      return [[answer(rank, { id, flag: call.keys.every((name) => held(name) !== undefined) })], current]
    case "delete_key": {
      const now = held(key!)
      if (now === undefined) return [[answer(rank, { id, flag: false })], current]
      return [[answer(rank, { id, flag: true })], { ...current, keys: HashMap.remove(current.keys, key!), bytes: current.bytes - now.length }]
    }
    case "num_keys":
      return [[answer(rank, { id, number: HashMap.size(current.keys) })], current]
  }
}

/** Store `value` at `key` (within the generation's bounds), answer `reply`, and release the waits it completes. */
const write = (
  current: GenerationStore,
  rank: number,
  id: number,
  key: string,
  value: string,
  reply: Omit<ConstructorParameters<typeof StoreAnswer>[0], "id">
): readonly [ReadonlyArray<StoreInstruction>, GenerationStore] => {
  const before = Option.getOrUndefined(HashMap.get(current.keys, key))
  const keys = HashMap.size(current.keys) + (before === undefined ? 1 : 0)
  if (keys > keyLimit(current)) {
    return [[answer(rank, { id, error: `generation ${current.generation}'s store holds its limit of ${keyLimit(current)} keys` })], current]
  }
  const bytes = current.bytes - (before?.length ?? 0) + value.length
  if (bytes > BYTES_PER_GENERATION) {
    return [[answer(rank, { id, error: `generation ${current.generation}'s store holds its limit of ${BYTES_PER_GENERATION} bytes` })], current]
  }
  const written = { ...current, keys: HashMap.set(current.keys, key, value), bytes }
  const released: Array<StoreInstruction> = [answer(rank, { id, ...reply })]
  const still: Array<Waiter> = []
  for (const waiter of written.waiting) {
    if (!waiter.keys.every((name) => HashMap.has(written.keys, name))) {
      still.push(waiter)
      continue
    }
    const first = Option.getOrThrow(HashMap.get(written.keys, waiter.keys[0]!))
    released.push(answer(waiter.rank, waiter.op === "get" ? { id: waiter.id, value: first } : { id: waiter.id }))
  }
  return [released, still.length === written.waiting.length ? written : { ...written, waiting: still }]
}

const formed = (state: GroupStoreState, rank: number, generation: number): Step => {
  const { current } = state
  if (current === undefined || current.generation !== generation || !HashSet.has(current.members, rank)) return [[], state]
  const next = { ...current, formed: HashSet.add(current.formed, rank) }
  // Formed by every member: its keys have done their work (nobody reads them again).
  if (allFormed(next)) return [[], { ...state, current: { ...next, keys: HashMap.empty(), bytes: 0 } }]
  return [[], { ...state, current: next }]
}

const tick = (state: GroupStoreState, at: number): Step => {
  const { current } = state
  const { formWithinMs } = state.settings
  if (current === undefined || current.overdue || allFormed(current)) return [[], state]
  if (at - current.announcedAt < formWithinMs) return [[], state]
  const members = [...current.members]
  const absent = members.filter((rank) => !HashSet.has(current.came, rank))
  const lost = absent.length > 0 ? absent : members.filter((rank) => !HashSet.has(current.formed, rank))
  const within = seconds(formWithinMs)
  const waited = members.filter((rank) => !absent.includes(rank))
  // Said after "rank N lost: ".
  const reason = absent.length === 0
    ? `did not complete generation ${current.generation}'s rendezvous within ${within}`
    : waited.length === 0
    ? `never came to generation ${current.generation}'s rendezvous within ${within} (no member did)`
    : `never came to generation ${current.generation}'s rendezvous within ${within} (rank(s) ${list(waited)} waited for it)`
  return [[{ _tag: "Lose", ranks: lost.sort((a, b) => a - b), reason }], { ...state, current: { ...current, overdue: true } }]
}
