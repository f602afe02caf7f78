/**
 * Which role this process plays, from its environment.
 *
 * Every cohort process is started by cohort, and each role is named by one
 * internal variable: an agent gets its spec, a relay its spec, a rank its
 * host envelope plus its local slot. No variable means the user's own
 * command (launch, status). Any other combination is a mistake that would
 * otherwise run the wrong code quietly: it is refused with every variable
 * named, set or missing.
 */
import * as Either from "effect/Either"

export const roleVariables = {
  agent: "COHORT_AGENT_SPEC",
  relay: "COHORT_RELAY_SPEC",
  rankEnvelope: "COHORT_RANK_ENVELOPE",
  rankSlot: "COHORT_LOCAL_SLOT"
} as const

export type Role =
  | { readonly _tag: "User" }
  | { readonly _tag: "Agent"; readonly spec: string }
  | { readonly _tag: "Relay"; readonly spec: string }
  | { readonly _tag: "Rank"; readonly envelope: string; readonly slot: number }

/** A plain Error (not effect's Data): role detection is on every rank's start-up path and must load fast. */
export class RoleError extends Error {
  readonly _tag = "RoleError"
  constructor(readonly problem: string) {
    super(
      `inconsistent role variables: ${problem}. These are set by cohort for its own ` +
        "processes; unset them (or start the process through cohort) and try again."
    )
  }
}

export const detectRole = (env: Readonly<Record<string, string | undefined>>): Either.Either<Role, RoleError> => {
  const set = (name: string) => env[name] !== undefined && env[name] !== ""
  const names = Object.values(roleVariables)
  const present = names.filter(set)
  const describe = () => names.map((name) => `${name}=${set(name) ? "set" : "unset"}`).join(", ")
  if (present.length === 0) return Either.right({ _tag: "User" })
  if (present.length === 1 && present[0] === roleVariables.agent) {
    return Either.right({ _tag: "Agent", spec: env[roleVariables.agent]! })
  }
  if (present.length === 1 && present[0] === roleVariables.relay) {
    return Either.right({ _tag: "Relay", spec: env[roleVariables.relay]! })
  }
  if (present.length === 2 && set(roleVariables.rankEnvelope) && set(roleVariables.rankSlot)) {
    const slot = Number(env[roleVariables.rankSlot])
    if (!Number.isInteger(slot) || slot < 0) {
      return Either.left(new RoleError(`${roleVariables.rankSlot} must be a slot number ≥ 0, got "${env[roleVariables.rankSlot]}"`))
    }
    return Either.right({ _tag: "Rank", envelope: env[roleVariables.rankEnvelope]!, slot })
  }
  return Either.left(new RoleError(describe()))
}
