/**
 * Liveness: ranks beat every second, and so does the coordinator toward them (`Tick`). A rank silent for the
 * heartbeat timeout (and not exiting) is lost: the supervisor is told and the rank is killed. Child exits
 * reported by the agents arrive much sooner and take the same path (`RanksDead`, deaths.ts). The tick also ends
 * the waits that have lasted too long: a cut's, a newcomer's welcome, stranded work's. Owns `liveness`'
 * `lastSeen` and `formedAt`.
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import { beatEveryMs } from "../../../config/Heartbeat.ts"
import { CoordinatorBeat } from "../../../wire/messages/CoordinatorMessages.ts"
import { settleCut } from "./cut.ts"
import { markDead, neverAttached } from "./deaths.ts"
import { Instruction } from "./events.ts"
import { rescue } from "./growth.ts"
import { scriptMustAttach } from "./state.ts"
import { type Step, valueOf } from "./step.ts"
import { welcomeNewcomers } from "./welcome.ts"

export const beats = (step: Step, ranks: ReadonlyArray<number>): void => {
  // A beat from a rank that is neither in nor on its way in is ignored.
  for (const rank of ranks) if (step.isAlive(rank) || step.growth.joining.has(rank)) step.heard(rank)
}

export const cohortFormed = (step: Step): void => {
  step.liveness.formedAt ??= step.at
}

export const tick = (step: Step): void => {
  const { at } = step
  const timeout = step.settings.heartbeatTimeoutMs
  // A survivor that neither answers nor goes within a heartbeat timeout is not waited for longer.
  const { cut } = step.consensus
  if (cut !== undefined && at - cut.since > timeout) settleCut(step)
  if (step.growth.unwelcomed.size > 0) welcomeNewcomers(step, (newcomer) => at - newcomer.at > timeout)
  const { strandedSince } = step.growth
  if (HashSet.size(step.members.alive) === 0 && strandedSince !== undefined && at - strandedSince > 2 * beatEveryMs(timeout)) {
    rescue(step, "no member was left", true)
  }
  const { attached } = step.members
  const { exiting, formedAt } = step.liveness
  const beating = step.live().filter((rank) => HashSet.has(attached, rank) && !HashSet.has(exiting, rank))
  if (beating.length > 0) step.send(beating, new CoordinatorBeat())
  // Ranks that never attached count from the cohort's formation; joined ones from their joining.
  const watched = formedAt === undefined ? [...beating] : step.live().filter((rank) => !HashSet.has(exiting, rank))
  for (const [rank, { since }] of step.growth.joining) {
    watched.push(rank)
    if (!HashMap.has(step.liveness.lastSeen, rank)) step.liveness.lastSeen = HashMap.set(step.liveness.lastSeen, rank, since)
  }
  const { lastSeen } = step.liveness
  const silent = watched.filter((rank) => at - (valueOf(lastSeen, rank) ?? formedAt ?? at) > timeout)
  if (silent.length === 0) return
  // Ranks of the formed world that never attached nor beat: their script does not speak to cohort (no cohort.init()).
  const unheard = silent.filter((rank) => !HashSet.has(attached, rank) && !HashMap.has(lastSeen, rank) && !step.growth.joining.has(rank))
  if (unheard.length > 0 && scriptMustAttach(step.settings)) {
    return neverAttached(step, unheard, `never attached within ${(timeout / 1000).toFixed(1)} s of the cohort's formation`)
  }
  const reason = `no heartbeat for ${(timeout / 1000).toFixed(1)} s`
  step.instructions.push(Instruction.LoseRanks({ ranks: silent, reason, cause: "heartbeat", diedAt: silent.map((rank) => valueOf(lastSeen, rank) ?? formedAt ?? at) }))
  markDead(step, silent, reason)
}
