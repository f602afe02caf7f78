/**
 * Dropped unauthenticated connections, as log lines a flood cannot multiply.
 *
 * A connection that fails its handshake (a bad MAC, silence, garbage) proves
 * nothing about who sent it and gets no answer. Each one logged would let
 * anyone who reaches the port fill the launcher's terminal and log files
 * (10,479 lines in 45 s from one machine, before this counted by source
 * prefix), so a source prefix (`SourcePrefix`: all of loopback is one, else
 * a /24 or a /64) is logged at most once a minute per topic, and each line
 * after the first says how many drops it stands for since the last. The
 * first line says that the rest are counted, so that the quiet after it is
 * not read as the end of the noise.
 *
 * The memory is bounded: past `NOISE_SOURCES` prefixes, those not logged
 * for a minute are forgotten, and if all are recent, a new prefix's drops
 * are counted under "other sources" (logged once a minute too). So however
 * many prefixes a flood comes from, the lines stay at most one a minute per
 * remembered prefix and topic, plus one.
 */
import * as Effect from "effect/Effect"
import { sourcePrefix } from "./SourcePrefix.ts"

/** How often one source prefix's dropped connections are logged. */
export const NOISE_LOG_EVERY_MS = 60_000
/** Source prefixes (and topics) remembered for that. */
export const NOISE_SOURCES = 1_024

const OTHER_SOURCES = "other sources"

export interface NoiseLog {
  /**
   * Count a drop from `peer` ("127.0.0.1:53124"); the line to log now, or undefined when its prefix was logged
   * for this `topic` within the minute (the count then goes into the prefix's next line). For a caller that
   * logs in its own way (the mux, from a socket callback).
   */
  readonly note: (peer: string, reason: string, topic?: string) => string | undefined
  /** Count a drop, and log its line (a warning) when one is due. */
  readonly drop: (peer: string, reason: string) => Effect.Effect<void>
}

/** `what`: how each line starts ("dropped a join connection"); `now`: the clock, in ms. */
export const noiseLog = (what: string, now: () => number = Date.now): NoiseLog => {
  /** By topic, then by prefix: no key is built per drop (a flood makes thousands a second). */
  const topics = new Map<string, Map<string, { loggedAt: number; unlogged: number }>>()
  let remembered = 0
  const note = (peer: string, reason: string, topic = ""): string | undefined => {
    const at = now()
    const colon = peer.lastIndexOf(":")
    const address = colon > 0 ? peer.slice(peer.startsWith("[") ? 1 : 0, peer[colon - 1] === "]" ? colon - 1 : colon) : peer
    let prefix = sourcePrefix(address)
    let sources = topics.get(topic)
    if (sources === undefined) {
      sources = new Map()
      topics.set(topic, sources)
    }
    if (!sources.has(prefix) && remembered >= NOISE_SOURCES) {
      for (const each of topics.values()) {
        for (const [old, seen] of each) {
          if (at - seen.loggedAt < NOISE_LOG_EVERY_MS) continue
          each.delete(old)
          remembered -= 1
        }
      }
      if (remembered >= NOISE_SOURCES) prefix = OTHER_SOURCES
    }
    const seen = sources.get(prefix)
    if (seen !== undefined && at - seen.loggedAt < NOISE_LOG_EVERY_MS) {
      seen.unlogged += 1
      return undefined
    }
    if (seen === undefined) {
      sources.set(prefix, { loggedAt: at, unlogged: 0 })
      remembered += 1
      return `${what} from ${peer}: ${reason} (further ones from ${prefix} are counted, and logged at most once a minute)`
    }
    const more = seen.unlogged === 0 ? "" : ` (and ${seen.unlogged} more from ${prefix} since the last such line)`
    seen.loggedAt = at
    seen.unlogged = 0
    return `${what} from ${peer}: ${reason}${more}`
  }
  return {
    note,
    drop: (peer, reason) =>
      Effect.suspend(() => {
        const line = note(peer, reason)
        return line === undefined ? Effect.void : Effect.logWarning(line)
      })
  }
}

/** A channel owner's drops: "dropped a join connection from …". */
export const makeNoiseLog = (channel: string): NoiseLog => noiseLog(`dropped a ${channel} connection`)
