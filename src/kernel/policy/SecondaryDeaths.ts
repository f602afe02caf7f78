/**
 * Secondary deaths and the root cause: which deaths only followed another one, and which started it all.
 *
 * When a rank is lost, the members waiting on it in a collective often fail too: gloo says its peer closed
 * the connection, NCCL reports a remote error, the cohort client raises its member-lost error. Their deaths
 * are real (their processes are gone) but they are not what went wrong, and a policy that counts them as
 * bugs fails an elastic run for the loss of one machine, blaming a survivor. A death is **secondary**
 * (cause `peer_lost`) when it is explained by another:
 *
 * - it carries a peer-loss signature (`FailureSignature.peerLossOf`), or
 * - it is the rank's own end (an exit, an exception, an NCCL error: not a signal, an OOM kill or silence)
 *   and it comes within `PEER_LOSS_WINDOW_MS` of a death the run already knows, of another rank. Every rank
 *   of a run is in one group (its world): the window is the run's.
 *
 * A death with the same signature as an earlier death that was not secondary is never explained away by
 * the window: two ranks failing with one KeyError a moment apart is a bug met twice, not one loss and its
 * echo (`sameErrorOn` counts those ranks, for the rule `repeated-error`).
 *
 * The **root cause** of a death is itself when it is not secondary, else the root cause of the death it
 * followed; the verdict leads with it. All of this is pure, over the deaths in the order `decide` met them.
 */
import type { Cause } from "./FailureRules.ts"
import type { Signature } from "./FailureSignature.ts"

/**
 * How long after a known death another rank's own end is taken to have followed it. gloo's survivors fail
 * 2.6–4.0 s after a peer is SIGKILLed (measured with the torch e2e fixture); NCCL's watchdog takes longer
 * with its default timeouts, but says `ncclRemoteError`, which the signature catches at any distance.
 */
export const PEER_LOSS_WINDOW_MS = 10_000

/** The causes that are a rank's own end: only these can be an echo of another's death by timing alone. */
const endsOfItsOwn: ReadonlyArray<Cause> = ["exit", "exception", "nccl"]

/** A death the run has met, in the order it met them. */
export interface DeathRecord {
  readonly ranks: ReadonlyArray<number>
  /** "rank 2 of gpu-a exited with signal SIGKILL": as the verdict and the losses say it. */
  readonly what: string
  /** When it died (the reporter's moment, else when the policy heard). */
  readonly at: number
  /** Its cause as the rules matched it: `peer_lost` for a secondary death. */
  readonly cause: Cause
  readonly signature?: Signature | undefined
  /** Secondary: the record it followed (by the window), or none when only its signature explains it. */
  readonly followed?: DeathRecord | undefined
  readonly secondary: boolean
}

/** What a new death is, against the deaths before it. */
export type Classification =
  | {
    readonly _tag: "Secondary"
    /** The known death it followed: the latest one in the window, else (by signature alone) the latest one at all. */
    readonly followed: DeathRecord | undefined
    /** `signature` (it said it lost a peer) or `window` (it came right after a known death). */
    readonly by: "signature" | "window"
  }
  | {
    readonly _tag: "Primary"
    /** The earlier deaths, not secondary, of other ranks with the same signature, in order. */
    readonly sameError: ReadonlyArray<DeathRecord>
  }

export interface NewDeath {
  readonly ranks: ReadonlyArray<number>
  readonly at: number
  /** Its cause as cohort told it (exit, signal, heartbeat, …). */
  readonly cause: Cause
  readonly signature?: Signature | undefined
  /** The peer-loss signature it carries, by name. */
  readonly peerLoss?: string | undefined
}

const sharesRank = (one: ReadonlyArray<number>, other: ReadonlyArray<number>) => one.some((rank) => other.includes(rank))

/** Whether the new death is secondary, or the same failure as earlier ones, or neither. */
export const classify = (history: ReadonlyArray<DeathRecord>, death: NewDeath, windowMs = PEER_LOSS_WINDOW_MS): Classification => {
  // Another rank's deaths: a restarted rank's earlier incarnation explains nothing of its own.
  const others = history.filter((known) => !sharesRank(known.ranks, death.ranks))
  const sameError = death.signature === undefined
    ? []
    : others.filter((known) => !known.secondary && known.signature?.key === death.signature!.key)
  if (death.peerLoss !== undefined) {
    const inWindow = others.filter((known) => Math.abs(death.at - known.at) <= windowMs).at(-1)
    return { _tag: "Secondary", followed: inWindow ?? others.at(-1), by: "signature" }
  }
  if (sameError.length > 0) return { _tag: "Primary", sameError: distinctRanks(sameError) }
  if (endsOfItsOwn.includes(death.cause)) {
    const followed = others.filter((known) => Math.abs(death.at - known.at) <= windowMs).at(-1)
    if (followed !== undefined) return { _tag: "Secondary", followed, by: "window" }
  }
  return { _tag: "Primary", sameError: [] }
}

/** One record per rank: a rank met twice (restarted, then failed again) is one rank of a repeated error. */
const distinctRanks = (records: ReadonlyArray<DeathRecord>): ReadonlyArray<DeathRecord> => {
  const seen = new Set<number>()
  return records.filter((record) => {
    if (sharesRank(record.ranks, [...seen])) return false
    for (const rank of record.ranks) seen.add(rank)
    return true
  })
}

/** The death that started the chain this one is part of: itself unless it is secondary. */
export const rootOf = (record: DeathRecord): DeathRecord => {
  let root = record
  // A chain of deaths is finite and acyclic: each follows one met before it.
  while (root.secondary && root.followed !== undefined) root = root.followed
  return root
}

/** The first death that was not secondary: the root cause of a run's losses, when nothing else names one. */
export const firstRoot = (history: ReadonlyArray<DeathRecord>): DeathRecord | undefined =>
  history.find((record) => !record.secondary) ?? history[0]

/**
 * The tail of a failed verdict: the root cause (unless the verdict already leads with it), then the
 * other deaths, in the order they came, a lost host's ranks said once (`sayHostsOnce`). `named`: the
 * deaths the verdict's own words already name.
 */
export const chainText = (history: ReadonlyArray<DeathRecord>, root: DeathRecord | undefined, named: ReadonlyArray<DeathRecord>): string => {
  const rest = history.filter((record) => record !== root && !named.includes(record))
  const shownRoot = root === undefined || named.includes(root) ? undefined : root
  const said = sayHostsOnce(shownRoot === undefined ? rest : [shownRoot, ...rest]).map((death) => death.what)
  const others = shownRoot === undefined ? said : said.slice(1)
  const rootText = shownRoot === undefined ? "" : `; root cause: ${said[0]}`
  return `${rootText}${others.length === 0 ? "" : `; other deaths: ${others.join("; ")}`}`
}

/** A rank's end with its host, as the launcher says it (RemoteRanks): `host gpu-b lost (its ssh session ended with signal SIGKILL)`. */
export const hostLostDetail = (host: string, why: string): string => `host ${host} lost (${why})`

/**
 * A death that is its host's loss and nothing more: its ranks given up with it (`rank(s) 2, 3 lost: host gpu-b
 * lost (why)`, `rank 2 of gpu-b lost: …`), or a rank's end with it (`rank 2 of gpu-b exited with crash: …`). Only
 * that: a rule's death (`… (rule spot)`) or an echo's says more, and is kept as it is. `why` may hold one level
 * of parentheses (an exit's own words).
 */
const HOST_LOST = /^rank(?:\(s\))? [\d, ]+(?: of \S+)? (?:lost|exited with crash): host (\S+) lost \(((?:[^()]|\([^()]*\))*)\)$/

/**
 * Deaths as a verdict lists them, each lost host once: the deaths that are only its loss become one, at the
 * first one's place, `host gpu-b lost with ranks 2, 3 (its ssh session ended with signal SIGKILL)`. Its
 * ranks all died of the one cause, and a line per rank said it as many times (with the agent's last words,
 * a verdict of 600 characters for one machine).
 */
export const sayHostsOnce = <D extends { readonly ranks: ReadonlyArray<number>; readonly what: string }>(
  deaths: ReadonlyArray<D>,
  /** Why a host went, as it is known by the end (its session's reason may come after its link's end): said instead. */
  goneFor: (host: string) => string | undefined = () => undefined
): ReadonlyArray<{ readonly ranks: ReadonlyArray<number>; readonly what: string }> => {
  const said: Array<{ ranks: Array<number>; what: string; host?: { readonly name: string; readonly why: string } }> = []
  for (const death of deaths) {
    const lost = HOST_LOST.exec(death.what)
    const same = lost === null ? undefined : said.find((entry) => entry.host?.name === lost[1] && entry.host.why === lost[2])
    if (same !== undefined) same.ranks.push(...death.ranks.filter((rank) => !same.ranks.includes(rank)))
    else said.push({ ranks: [...death.ranks], what: death.what, ...(lost === null ? {} : { host: { name: lost[1]!, why: lost[2]! } }) })
  }
  return said.map(({ host, ranks, what }) =>
    host === undefined
      ? { ranks, what }
      : { ranks, what: `host ${host.name} lost with rank${ranks.length === 1 ? "" : "s"} ${ranks.join(", ")} (${goneFor(host.name) ?? host.why})` }
  )
}

/** How a secondary death says what it followed: `peer_lost, after rank 2's death`. */
export const followedText = (classification: Extract<Classification, { readonly _tag: "Secondary" }>, label: (ranks: ReadonlyArray<number>) => string): string =>
  classification.followed === undefined
    ? "peer_lost: it lost a peer before cohort knew of any death"
    : `peer_lost, after ${label(rootOf(classification.followed).ranks)}'s death`
