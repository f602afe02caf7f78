/**
 * A host's supervision policy, as data for the kernel (`decide`): what becomes
 * of the agent's children when one of them ends.
 *
 * - The relay is significant: when it ends abnormally (killed, crashed, or it
 *   could not be started), the host's ranks go with it. They reach the run
 *   only through it.
 * - Every rank is temporary: the agent restarts nothing. The launcher's
 *   failure policy judges ranks, and it restarts one by ordering a new
 *   incarnation (`StartRank`), which joins the host as a new child. A rank's
 *   end takes nothing else with it: the agent only reports it.
 * - No child carries ranks of the world. Counting deaths is the launcher's
 *   Supervisor's job (by seats). If this one counted them too, the death of a
 *   host's last rank would read as "every rank lost" and stop the relay under
 *   which the launcher may restart that rank. And a rank restarted under its
 *   own number could not join again, since a run never reuses a rank.
 *
 * Under `Elastic` an abnormal end is a loss the survivors carry on from.
 * That is all a host needs: restart types only matter under `Restart`, and
 * they say `temporary` here so the policy reads the same under OTP's
 * one_for_one.
 */
import * as Duration from "effect/Duration"
import type { ChildSpec } from "../kernel/ChildSpec.ts"
import type { Shutdown } from "../kernel/Shutdown.ts"
import type { SupervisorState } from "../kernel/policy/decide.ts"
import { Elastic, type Strategy } from "../kernel/policy/Strategy.ts"

export const hostStrategy: Strategy = new Elastic({})

export const RELAY_ID = "relay"

/** The relay: a child from the start (its process comes later, see `RelayChild`), and its group's anchor. */
export const relaySpec = (host: string, shutdown: Shutdown): ChildSpec => ({
  id: RELAY_ID,
  label: `relay of ${host}`,
  ranks: [],
  group: host,
  restart: "temporary",
  significant: true,
  shutdown
})

/** One incarnation of a rank: a child of its own, since the launcher may order the same rank again. */
export const rankSpec = (host: string, rank: number, incarnation: number, shutdown: Shutdown): ChildSpec => ({
  id: rankChildId(rank, incarnation),
  label: `rank ${rank} (incarnation ${incarnation}) of ${host}`,
  ranks: [],
  group: host,
  restart: "temporary",
  significant: false,
  shutdown
})

export const rankChildId = (rank: number, incarnation: number): string => `rank-${rank}#${incarnation}`

export const isRankChild = (id: string): boolean => id !== RELAY_ID

/** Whether the host takes no more ranks: once its relay has ended (or is being stopped), a new rank could not reach the run. */
export const relayHasEnded = (state: SupervisorState): boolean =>
  state.children.some((child) => child.spec.id === RELAY_ID && (child.status === "exited" || child.status === "stopping"))

/**
 * How long a relay that left cleanly gives the launcher's `RunEnded` to
 * arrive before the agent ends as if it had lost its link. A relay leaves on
 * its own when the launcher has gone silent (a cut cable closes nothing), or
 * a moment before the RunEnded when the run ends.
 */
export const RUN_END_WAIT = Duration.seconds(2)
