/**
 * The relay's verdict on a rank's `hello`: which connections it serves.
 *
 * The socket is in the host's private run directory, so whatever dials it
 * runs as the run's user on this host; but that is still not proof of being
 * one of the host's ranks (a stale process of an earlier incarnation, a
 * script, a misconfigured client). The relay serves at most one connection
 * per slot of the host, never two for the same rank, and never one for a
 * rank it knows is not the host's. The launcher numbers every rank the run
 * has from 0 up, never reusing one, so the numbers below the world's size
 * when the host joined that are not the host's own are other hosts' ranks
 * (or ended ones). A number from there on may be one of the host's ranks
 * restarted under a new number; the slots bound them.
 */

export interface HostSeats {
  readonly host: string
  /** The ranks the host was admitted with, by slot: it has as many slots. */
  readonly ranks: ReadonlyArray<number>
  /** The world's size when the host joined: every rank number the run had had by then (0 up). */
  readonly worldSize: number
}

export interface HelloClaim {
  readonly rank: number
  /** The protocol version the client speaks; undefined from a client older than versioning. */
  readonly version: number | undefined
}

/**
 * Why the relay refuses `claim`, in one line for the rank to raise; undefined: it serves the connection as
 * that rank. `connected`: the ranks it serves now; `said`: the rank this connection said hello as already.
 */
export const helloRefusal = (
  seats: HostSeats,
  protocol: number,
  connected: ReadonlyArray<number>,
  said: number | undefined,
  claim: HelloClaim
): string | undefined => {
  const { rank } = claim
  // A client of another protocol would misread what comes next: refused, with both numbers, before it is counted in.
  if (claim.version !== undefined && claim.version !== protocol) {
    return `rank ${rank} speaks version ${claim.version} of the rank-relay protocol and this relay speaks ${protocol}: ` +
      "use the client that comes with this cohort (python/cohort in its checkout)"
  }
  if (said !== undefined) return `this connection already speaks for rank ${said}: a rank says hello once`
  if (connected.includes(rank)) return `rank ${rank} is already connected to the relay of ${seats.host}: one connection per rank`
  if (rank < seats.worldSize && !seats.ranks.includes(rank)) {
    return `rank ${rank} belongs to another host (or has ended): the relay of ${seats.host} serves ranks ${seats.ranks.join(", ")} ` +
      `and their restarts under new numbers (${seats.worldSize} on)`
  }
  if (connected.length >= seats.ranks.length) {
    return `the relay of ${seats.host} already serves ${connected.length} rank(s) (${[...connected].sort((a, b) => a - b).join(", ")}), ` +
      `one per slot of the host: rank ${rank} has no slot`
  }
  return undefined
}
