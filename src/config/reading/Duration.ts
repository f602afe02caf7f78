/**
 * Durations as people write them in cluster files: `250ms`, `5s`, `1.5s`,
 * `10m`, `1h`. Values are whole milliseconds; a fraction of a millisecond is
 * refused rather than rounded, so what is written is what runs.
 */

const units = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const

/**
 * The longest duration a cluster file may give (one week, 168h): a grace, a timeout or a restart window
 * longer than that is a typo, and the strategies' schema (`Strategy.Millis`) holds the same bound.
 */
export const MAX_DURATION_MS = 7 * 24 * units.h
const pattern = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/

/** Milliseconds, or undefined when the text is not a duration. */
export const parseDuration = (text: string): number | undefined => {
  const match = pattern.exec(text.trim())
  if (match === null) return undefined
  const ms = Number(match[1]) * units[match[2] as keyof typeof units]
  const whole = Math.round(ms)
  return Math.abs(ms - whole) < 1e-6 && Number.isSafeInteger(whole) ? whole : undefined
}

/** The shortest exact spelling: 5000 → "5s", 90000 → "90s", 250 → "250ms". */
export const formatDuration = (ms: number): string => {
  if (ms > 0 && ms % units.h === 0) return `${ms / units.h}h`
  if (ms > 0 && ms % units.m === 0) return `${ms / units.m}m`
  if (ms > 0 && ms % units.s === 0) return `${ms / units.s}s`
  return `${ms}ms`
}
