/**
 * What a supervisor knows about each child before starting it.
 *
 * The policy never sees processes or fibers, only these descriptions: which
 * ranks a child carries, which host group it belongs to, how OTP would
 * treat it on exit, and how it is stopped.
 */
import type { Shutdown } from "./Shutdown.ts"
import type { RestartType } from "./policy/Strategy.ts"

export interface ChildSpec {
  /** Unique among its siblings; used in directives and logs. */
  readonly id: string
  /** For people: "rank 3 of gpu-a", "relay of gpu-a". */
  readonly label: string
  /** Global ranks whose liveness depends on this child (a rank: itself; an agent: its host's). */
  readonly ranks: ReadonlyArray<number>
  /** Children that live and die together, typically one host's relay, agent and ranks. */
  readonly group?: string | undefined
  readonly restart: RestartType
  /**
   * A significant child takes its group with it: when it ends abnormally under
   * an elastic strategy, every running sibling of its group is stopped and all
   * of the group's ranks are reported dead (an agent or relay whose loss leaves
   * its host's ranks unreachable).
   */
  readonly significant: boolean
  /**
   * How the supervisor stops it (OTP's `shutdown`): SIGTERM and a grace, or a
   * brutal kill. A policy's own kill_all grace replaces the child's grace, and a
   * policy's kill kills. Every child names its own: there is no supervisor-wide
   * default beside it to drift from it.
   */
  readonly shutdown: Shutdown
}

/** The number of distinct ranks the children carry: the world at start. */
export const worldOf = (children: ReadonlyArray<ChildSpec>): number =>
  new Set(children.flatMap((child) => child.ranks)).size
