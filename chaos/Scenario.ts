/**
 * A chaos scenario: a failure policy, a topology and a fault at a moment,
 * drawn from a seed, and what the policy says must come of it. Pure: the
 * same seed gives the same scenarios, printed so any one can be replayed.
 *
 * Only combinations whose outcome the policy decides are drawn. A restart
 * policy after a whole host is lost, for one, depends on timing (the host's
 * ranks cannot come back where no agent is left), so it is not drawn.
 */

export type Policy = "kill_all" | "elastic" | "elastic_max1" | "elastic_half" | "restart"

/**
 * - local: one host, three ranks, its agent in the launcher.
 * - self: this host with two ranks, plus a host of two ranks whose agent the
 *   runner starts as `bun run agent` (a self-deployed agent).
 * - netns: two network-namespace hosts of two ranks each, reached over ssh.
 */
export type Topology = "local" | "self" | "netns"

export type Moment = "before_formation" | "forming" | "mid_epoch" | "teardown"

export type Fault =
  | { readonly kind: "none" }
  | { readonly kind: "rank_signal"; readonly signal: "SIGKILL" | "SIGTERM" }
  | { readonly kind: "rank_exit"; readonly code: number }
  /** SIGSTOP: alive, but its heartbeats stop. */
  | { readonly kind: "rank_freeze" }
  | { readonly kind: "relay_kill" }
  | { readonly kind: "agent_kill" }
  | { readonly kind: "launcher_signal"; readonly signal: "SIGKILL" | "SIGTERM" }
  /** The second host's cable is cut (netns only). */
  | { readonly kind: "link_cut" }
  /** The self-deployed agent dials 1.5 s late. */
  | { readonly kind: "slow_joiner" }
  /** A connection that sends the join channel's magic and then nothing. */
  | { readonly kind: "stalled_hello" }
  /** Joins, relays and rendezvous joins under wrong keys, and half-sent 16 MiB frames (chaos/Forgery.ts). */
  | { readonly kind: "forged_frames" }

export interface Scenario {
  readonly id: number
  readonly seed: number
  readonly policy: Policy
  readonly topology: Topology
  readonly fault: Fault
  readonly moment: Moment
}

export type Outcome = "completed" | "degraded" | "failed" | "interrupted" | "killed"

export interface Prediction {
  readonly outcome: Outcome
  /** The launcher's exit status; "SIGKILL" when the runner killed it. */
  readonly exit: 0 | 1 | 130 | 143 | "SIGKILL"
  /** The verdict line, the launcher's last on stderr (none when it was killed). */
  readonly verdict: RegExp | undefined
  /** The last phase the status stream shows (none when the launcher was killed). */
  readonly phase: "done" | "failed" | undefined
  /** Ranks lost, for a degraded run. */
  readonly lost: number
  /** Survivors' weights and the epochs' coverage are checked. */
  readonly trained: boolean
}

export const worldOf = (topology: Topology): number => (topology === "local" ? 3 : 4)

/** The ranks a host-wide fault takes: the whole world locally, the second host's two elsewhere. */
const hostRanks = (topology: Topology) => (topology === "local" ? 3 : 2)

/** A small, seeded generator (mulberry32): replays must not depend on the runtime's Math.random. */
export const random = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const pick = <A>(next: () => number, values: ReadonlyArray<A>): A => values[Math.floor(next() * values.length)]!

const completed = (trained = true): Prediction => ({ outcome: "completed", exit: 0, verdict: /^cohort: run completed$/, phase: "done", lost: 0, trained })
const failed = (verdict: RegExp): Prediction => ({ outcome: "failed", exit: 1, verdict, phase: "failed", lost: 0, trained: false })
const degraded = (lost: number, world: number): Prediction => ({
  outcome: "degraded",
  exit: 0,
  verdict: new RegExp(`^cohort: run completed DEGRADED \\(${lost} of ${world} ranks lost`),
  phase: "done",
  lost,
  trained: true
})

/** What the policy makes of `lost` ranks dying mid-run (undefined: not decided by the policy alone). */
const afterDeaths = (policy: Policy, lost: number, world: number, restartable: boolean): Prediction | undefined => {
  if (policy === "kill_all") return failed(/^cohort: run failed: /)
  if (lost >= world) return policy === "restart" ? undefined : failed(/^cohort: run failed: /)
  switch (policy) {
    case "elastic":
      return degraded(lost, world)
    case "elastic_max1":
      return failed(/^cohort: run failed: max_failure exceeded/)
    case "elastic_half":
      return lost >= Math.ceil(world / 2) ? failed(/^cohort: run failed: max_failure exceeded/) : degraded(lost, world)
    case "restart":
      return restartable ? completed() : undefined
  }
}

export const predict = (scenario: Omit<Scenario, "id" | "seed">): Prediction | undefined => {
  const { fault, moment, policy, topology } = scenario
  const world = worldOf(topology)
  switch (fault.kind) {
    case "none":
    case "slow_joiner":
    case "stalled_hello":
    case "forged_frames":
      return completed()
    case "rank_signal":
      // SIGTERM asks the example to finish its step and return: a clean exit with work left, which is a
      // loss like any death (and under restart, restarted like one).
      return moment === "mid_epoch" ? afterDeaths(policy, 1, world, true) : undefined
    case "rank_exit":
      // One rank's exit, whatever its status, is elastic under the default rule (repeated-error fails a run only
      // when a second rank dies of the same failure: README, Failure rules).
      return moment === "mid_epoch" ? afterDeaths(policy, 1, world, true) : undefined
    case "rank_freeze":
      return moment === "mid_epoch" ? afterDeaths(policy, 1, world, true) : undefined
    case "relay_kill":
    case "link_cut":
      return moment === "mid_epoch" ? afterDeaths(policy, hostRanks(topology), world, false) : undefined
    case "agent_kill":
      if (topology === "local") return undefined
      if (moment === "before_formation") return failed(/^cohort: run failed: the join window failed: /)
      return moment === "mid_epoch" ? afterDeaths(policy, hostRanks(topology), world, false) : undefined
    case "launcher_signal":
      if (fault.signal === "SIGKILL") return { outcome: "killed", exit: "SIGKILL", verdict: undefined, phase: undefined, lost: 0, trained: false }
      // SIGTERM after the world formed: the ranks are stopped in order, and the run is interrupted (128 + 15).
      return moment === "forming" || moment === "mid_epoch"
        ? { outcome: "interrupted", exit: 143, verdict: /^cohort: run failed: (aborted|interrupted)/, phase: "failed", lost: 0, trained: false }
        : undefined
  }
}

const POLICIES: ReadonlyArray<Policy> = ["kill_all", "elastic", "elastic_max1", "elastic_half", "restart"]

const FAULTS: ReadonlyArray<readonly [Fault, ReadonlyArray<Moment>]> = [
  [{ kind: "none" }, ["mid_epoch"]],
  [{ kind: "rank_signal", signal: "SIGKILL" }, ["mid_epoch"]],
  [{ kind: "rank_signal", signal: "SIGTERM" }, ["mid_epoch"]],
  [{ kind: "rank_exit", code: 3 }, ["mid_epoch"]],
  [{ kind: "rank_freeze" }, ["mid_epoch"]],
  [{ kind: "relay_kill" }, ["mid_epoch"]],
  [{ kind: "agent_kill" }, ["before_formation", "mid_epoch"]],
  [{ kind: "launcher_signal", signal: "SIGKILL" }, ["forming", "mid_epoch", "teardown"]],
  [{ kind: "launcher_signal", signal: "SIGTERM" }, ["forming", "mid_epoch"]],
  [{ kind: "link_cut" }, ["mid_epoch"]],
  [{ kind: "slow_joiner" }, ["before_formation"]],
  [{ kind: "stalled_hello" }, ["before_formation"]],
  [{ kind: "forged_frames" }, ["mid_epoch"]]
]

const fits = (fault: Fault, topology: Topology): boolean =>
  fault.kind === "link_cut" ? topology === "netns" : fault.kind === "slow_joiner" ? topology === "self" : fault.kind === "agent_kill" ? topology !== "local" : true

/**
 * `count` scenarios from `seed`, each one decided by its policy. `topologies`
 * are the ones this machine can make (netns needs root).
 */
export const draw = (seed: number, count: number, topologies: ReadonlyArray<Topology>): Array<Scenario> => {
  const next = random(seed)
  const scenarios: Array<Scenario> = []
  while (scenarios.length < count) {
    const topology = pick(next, topologies)
    const [fault, moments] = pick(next, FAULTS.filter(([candidate]) => fits(candidate, topology)))
    const scenario = { policy: pick(next, POLICIES), topology, fault, moment: pick(next, moments) }
    if (predict(scenario) !== undefined) scenarios.push({ id: scenarios.length + 1, seed, ...scenario })
  }
  return scenarios
}

export const describe = (scenario: Scenario): string => {
  const fault = scenario.fault
  const what = fault.kind === "rank_signal" || fault.kind === "launcher_signal" ? `${fault.kind}(${fault.signal})` : fault.kind === "rank_exit" ? `rank_exit(${fault.code})` : fault.kind
  return `#${scenario.id} seed ${scenario.seed}: ${scenario.topology}, ${scenario.policy}, ${what} ${scenario.moment}`
}
