/**
 * The join window's verdict, as a pure function of what has happened so far.
 *
 * The JoinGate asks it on every join and on a timer. In order:
 * 1. an operator start was armed (`manual` or `hybrid`) and the quorum is in → formed;
 * 2. the target is reached (not `manual`) → formed, without waiting out the window;
 * 3. the window is still open → open (a quorum alone never closes it early);
 * 4. the quorum is in (not `manual`) → formed;
 * 5. the hard cap is not reached → open (the first moment with a quorum forms);
 * 6. `manual` with a quorum but no start → failed: the operator never said go;
 * 7. otherwise → failed: the quorum was not met, naming the declared hosts
 *    that never joined (the first MISSING_NAMED of them, and how many more).
 * A flood of rejected joins fails the window whatever else holds.
 *
 * Where a host's rank count is known only once it joins (`devices: all` on
 * another machine, resolved there), the file's defaults cannot be counted in
 * ranks: the quorum and the target are then every declared host, whatever it
 * brings (`everyHostForQuorum`, `everyHostForTarget`).
 */
import type { StartMode } from "../../config/ClusterConfig.ts"

export const FLOOD_LIMIT = 1024

/** Hosts named in a failed quorum's reason; the rest are counted. */
export const MISSING_NAMED = 8

export interface JoinRules {
  /** Rejected joins that fail the window (default `FLOOD_LIMIT`; tests use a small one). */
  readonly floodLimit?: number | undefined
  readonly minRanks: number
  readonly targetRanks: number | undefined
  readonly timeoutMs: number
  readonly maxTimeoutMs: number
  readonly start: StartMode
  /** The quorum also needs every declared host in (none `missing`). */
  readonly everyHostForQuorum?: boolean | undefined
  /** Without `targetRanks`: the target is every declared host in (not under `manual`). */
  readonly everyHostForTarget?: boolean | undefined
}

export interface JoinProgress {
  readonly joinedRanks: number
  readonly rejected: number
  readonly startArmed: boolean
  /** Since the window opened. */
  readonly elapsedMs: number
  /** Declared hosts that have not joined, in the cluster file's order (named when the quorum is not met). */
  readonly missing?: ReadonlyArray<string> | undefined
}

export type JoinVerdict =
  | { readonly _tag: "Open" }
  | { readonly _tag: "Formed"; readonly ranks: number }
  | { readonly _tag: "Failed"; readonly reason: string }

export const joinVerdict = (rules: JoinRules, progress: JoinProgress): JoinVerdict => {
  const { elapsedMs, joinedRanks } = progress
  if (progress.rejected >= (rules.floodLimit ?? FLOOD_LIMIT)) {
    return { _tag: "Failed", reason: `${progress.rejected} joins were rejected: refusing to go on (flood guard)` }
  }
  const everyHostIn = (progress.missing ?? []).length === 0
  const quorum = joinedRanks >= rules.minRanks && (rules.everyHostForQuorum !== true || everyHostIn)
  if (progress.startArmed && rules.start !== "auto" && quorum) return { _tag: "Formed", ranks: joinedRanks }
  const target = rules.targetRanks !== undefined ? joinedRanks >= rules.targetRanks : rules.everyHostForTarget === true && everyHostIn
  if (target && rules.start !== "manual") return { _tag: "Formed", ranks: joinedRanks }
  if (elapsedMs < rules.timeoutMs) return { _tag: "Open" }
  if (rules.start !== "manual" && quorum) return { _tag: "Formed", ranks: joinedRanks }
  if (elapsedMs < rules.maxTimeoutMs) return { _tag: "Open" }
  if (rules.start === "manual" && quorum) {
    return { _tag: "Failed", reason: `operator start not received (POST /start) within ${rules.maxTimeoutMs} ms` }
  }
  const needed = rules.everyHostForQuorum === true ? `every declared host (${joinedRanks} rank(s) joined)` : `${joinedRanks}/${rules.minRanks} ranks`
  return { _tag: "Failed", reason: `quorum not met: ${needed}${neverJoined(progress.missing ?? [])}` }
}

/** " (never joined: a, b and 3 more)", or nothing when every declared host joined. */
const neverJoined = (missing: ReadonlyArray<string>): string => {
  if (missing.length === 0) return ""
  const named = missing.slice(0, MISSING_NAMED).join(", ")
  const more = missing.length - MISSING_NAMED
  return ` (never joined: ${named}${more > 0 ? ` and ${more} more` : ""})`
}
