/**
 * Formation: the join window's outcome, and the world told to every host.
 *
 * The window forms, or the run ends before it does: a host failed its
 * preflight (a refusal: the plan cannot run as written), an agent ended, a
 * stop was asked for, or one of the run's actors failed. Once it forms, every
 * host is told the world (with rank 0's store, torchrun's MASTER_PORT, on
 * this machine) and NCCL's rendezvous opens to the world's ranks.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import { WorldFormed } from "../../wire/messages/JoinMessages.ts"
import type { StopRequest } from "../../kernel/StopRequests.ts"
import type { FannedOut } from "../hosts/FanOut.ts"
import type * as JoinGate from "../front/JoinGate.ts"
import type { Listening } from "../front/Listen.ts"
import { rankRecords } from "../membership/Membership.ts"
import type { MembershipOwner } from "../membership/MembershipOwner.ts"
import type { LaunchInputError, Plan } from "./Plan.ts"
import type { RunEnv } from "./RunEnv.ts"

export type Outcome = JoinGate.Formation | { readonly _tag: "Refused"; readonly error: LaunchInputError }

/** Whichever comes first: the window's outcome, or what ends the run before it. */
export const awaitFormation = (
  listening: Listening,
  fannedOut: FannedOut,
  stopped: Deferred.Deferred<StopRequest>,
  actorFailed: Deferred.Deferred<{ readonly actor: string; readonly reason: string }>
): Effect.Effect<Outcome> =>
  Effect.raceAll<Effect.Effect<Outcome>>([
    listening.gate.formation,
    Effect.matchEffect(Deferred.await(fannedOut.hostsChecked), { onFailure: (error) => Effect.succeed({ _tag: "Refused" as const, error }), onSuccess: () => Effect.never }),
    Effect.map(Deferred.await(fannedOut.agentFailed), (reason): Outcome => ({ _tag: "Failed", reason })),
    Effect.map(Deferred.await(stopped), ({ reason }): Outcome => ({ _tag: "Failed", reason: `${reason} before the world formed` })),
    Effect.map(Deferred.await(actorFailed), ({ actor, reason }): Outcome => ({ _tag: "Failed", reason: `internal error: the ${actor} failed: ${reason}` }))
  ])

/** A free TCP port on this machine, for rank 0's store (torchrun's MASTER_PORT). */
const freePort = (address: string): number => {
  const probe = Bun.listen({ hostname: address, port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/**
 * Who may make NCCL's ids, most preferred first (the reference's choice): the ranks on the launcher's own
 * host (its agent runs in-process), then those of the first declared worker that runs ranks.
 */
export const generatorPreference = (
  plan: Pick<Plan, "hosts">,
  hosts: ReadonlyArray<{ readonly host: string; readonly ranks: ReadonlyArray<number> }>
): ReadonlyArray<ReadonlySet<number>> => {
  const ranksOf = (names: ReadonlySet<string>) => new Set(hosts.filter((entry) => names.has(entry.host)).flatMap((entry) => entry.ranks))
  const local = new Set(plan.hosts.filter((host) => host.start === "in-process").map((host) => host.worker.host))
  const first = plan.hosts[0] === undefined ? new Set<string>() : new Set([plan.hosts[0].worker.host])
  return [ranksOf(local), ranksOf(first)]
}

/** Tell every host the world that formed; what was said is what a host joining later is told about rank 0's store. */
export const tellWorld = (env: RunEnv, listening: Listening, membership: MembershipOwner, members: ReadonlyArray<JoinGate.Member>): Effect.Effect<WorldFormed> =>
  Effect.gen(function*() {
    const { plan } = env
    const state = membership.snapshot()
    yield* Effect.logInfo(`world formed: ${state.world} rank(s) on ${members.length} host(s) (${members.map((member) => `${member.host}: ${member.ranks.join(", ")}`).join("; ")})`)
    const worldFormed = new WorldFormed({
      worldSize: state.world,
      hosts: members.map((member) => ({ host: member.host, ranks: member.ranks })),
      master: { addr: plan.dialAddress, port: freePort(plan.bindAddress) }
    })
    const ranks = rankRecords(state).map(([rank]) => rank)
    if (listening.rendezvous !== undefined) yield* listening.rendezvous.begin(ranks, generatorPreference(plan, state.hosts))
    yield* Effect.forEach(members, (member) => Effect.ignore(member.link.send(worldFormed)), { discard: true })
    yield* env.record({
      event: "world_formed",
      at: Date.now(),
      world: state.world,
      hosts: state.hosts.map((entry) => ({ host: entry.host, ranks: entry.ranks, devices: entry.devices, labels: entry.labels }))
    })
    return worldFormed
  })
