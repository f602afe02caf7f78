/**
 * Dropped unauthenticated connections, as log lines a flood cannot multiply.
 *
 * A connection that fails its handshake (a bad MAC, silence, garbage) proves
 * nothing about who sent it and gets no answer. Each one logged would let
 * anyone who reaches the port fill the launcher's terminal and log files, so
 * a source address is logged at most once a minute, with a count of the
 * drops not logged since. The memory of sources is bounded: past the bound it
 * starts afresh, which only spaces the lines out less.
 */
import * as Effect from "effect/Effect"

/** How often one source address's dropped connections are logged. */
const NOISE_LOG_EVERY_MS = 60_000
/** Source addresses remembered for that; past it the memory starts afresh (it only spaces out log lines). */
const NOISE_SOURCES = 1_024

/**
 * Dropped unauthenticated connections, logged at most once a minute per source address with a count of
 * those not logged since: a flood of them costs no log volume and no state beyond a bounded map.
 */
export const makeNoiseLog = (channel: string) => {
  const sources = new Map<string, { loggedAt: number; unlogged: number }>()
  return {
    drop: (peer: string, reason: string) =>
      Effect.suspend(() => {
        const address = peer.slice(0, peer.lastIndexOf(":") > 0 ? peer.lastIndexOf(":") : peer.length)
        const now = Date.now()
        const seen = sources.get(address)
        if (seen !== undefined && now - seen.loggedAt < NOISE_LOG_EVERY_MS) {
          seen.unlogged += 1
          return Effect.void
        }
        if (sources.size >= NOISE_SOURCES) sources.clear()
        sources.set(address, { loggedAt: now, unlogged: 0 })
        const more = seen === undefined || seen.unlogged === 0 ? "" : ` (and ${seen.unlogged} more from ${address} since the last such line)`
        return Effect.logWarning(`dropped a ${channel} connection from ${peer}: ${reason}${more}`)
      })
  }
}
