/**
 * How a child is stopped, as data (OTP's `shutdown` in a child spec): a
 * grace (SIGTERM, or the end of an actor's mailbox, then a kill once the
 * grace is over) or a brutal kill at once.
 *
 * The run's grace (`failure_policy.grace`) is read here once, as a Duration,
 * and every margin the launcher adds around it is derived here too
 * (`margins`): the ssh session that carries a host's agent, the remote
 * shell's own timer and the teardown's wait for the agents, each with why it
 * exists, so none is re-derived where it is used. The wire carries the grace
 * in whole milliseconds (`wireMillis`).
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { ChildHandle, StopMode } from "./ChildHandle.ts"

export type Shutdown = Data.TaggedEnum<{
  /** Asked first, then killed once `grace` is over. */
  Grace: { readonly grace: Duration.Duration }
  /** Killed at once: for a child that has nothing to save and no one to tell. */
  BrutalKill: {}
}>
export const Shutdown = Data.taggedEnum<Shutdown>()

/**
 * The failure policy's grace as a Duration: the one place its milliseconds
 * become one. (The config keeps milliseconds; everything past it carries the
 * Duration.)
 */
export const graceOf = (policy: { readonly grace: number }): Duration.Duration => Duration.millis(policy.grace)

/**
 * A Duration as the wire carries a grace (`HostRunSpec.graceMs`,
 * `StopRank.graceMs`): whole milliseconds, as their schemas ask, so a
 * fraction never makes a message unsendable.
 */
export const wireMillis = (duration: Duration.Duration): number => Math.round(Duration.toMillis(duration))

/** What the launcher gives around the run's grace, each for its own reason. */
export interface Margins {
  /**
   * The grace of the local ssh process that carries a host's agent, when its
   * Scope closes. The remote shell passes the TERM on and gives the agent
   * `remoteShellSeconds` (up to a second more than the grace, rounded up), and
   * the agent's end must then come back over ssh. Two seconds more than the
   * grace covers both, so the session is not killed while its agent is still
   * leaving in good order.
   */
  readonly sshSession: Duration.Duration
  /**
   * The remote shell's wait between passing TERM to the agent and KILLing it,
   * in whole seconds: `sleep` takes whole seconds in every POSIX shell, so the
   * grace is rounded up (the agent never gets less than its grace). At least
   * one: even under `grace: 0s` the agent gets a moment to pass the stop on to
   * its relay and ranks, which would otherwise die only by losing their parent.
   */
  readonly remoteShellSeconds: number
  /**
   * How long the teardown waits for each agent to leave once told the run is
   * over: the agent stops its relay, which has the grace to end, then leaves;
   * a second more carries the message there and the agent's own end back,
   * before the remote cleanup ends whatever is still there.
   */
  readonly teardown: Duration.Duration
}

export const margins = (grace: Duration.Duration): Margins => ({
  sshSession: Duration.sum(grace, Duration.seconds(2)),
  remoteShellSeconds: Math.max(1, Math.ceil(Duration.toSeconds(grace))),
  teardown: Duration.sum(grace, Duration.seconds(1))
})

/**
 * The shutdown in force when a supervisor stops a child: the policy's `kill`
 * kills at once; a brutal-kill child is killed at once whatever the policy
 * says (it asked never to be asked); otherwise the child gets SIGTERM and the
 * grace the policy names (kill_all's own), or else its own.
 */
export const inForce = (own: Shutdown, mode: StopMode, policyGrace: Duration.Duration | undefined): Shutdown =>
  mode === "kill" || own._tag === "BrutalKill"
    ? Shutdown.BrutalKill()
    : policyGrace === undefined
    ? own
    : Shutdown.Grace({ grace: policyGrace })

/** Stop a child as `shutdown` says, through its handle. */
export const stop = (handle: Pick<ChildHandle, "stop">, shutdown: Shutdown): Effect.Effect<void> =>
  Shutdown.$match(shutdown, {
    BrutalKill: () => handle.stop("kill", Duration.zero),
    Grace: ({ grace }) => handle.stop("graceful", grace)
  })
