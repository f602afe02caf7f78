/**
 * Each rank's last lines of output, as the launcher received them: what a failure rule's `log` pattern
 * is searched in when the rank dies. Every line of a rank reaches the launcher's output prefixed
 * `[host:device:rN] ` (from this machine's agent, an ssh session or a self-deployed agent's forwarding),
 * so one keeper in front of the output sees them all, whatever way they came.
 */
import type { OutputSink } from "../../agent/Agent.ts"

/** How many lines are kept per rank (the rules' `log` looks at these). */
export const KEPT_LINES = 50

const RANK_PREFIX = /^\[[^\]]*:r(\d+)\] /

export interface LastLines {
  /** The sink to give everyone else: it keeps each rank's lines, then passes every line on. */
  readonly output: OutputSink
  /** A rank's last lines, oldest first, without their prefix. */
  readonly of: (rank: number) => ReadonlyArray<string>
  /**
   * A rank's last lines on stderr, oldest first: where a program says what it died of (a traceback, an error),
   * apart from its progress on stdout, which may mention an error count without being one.
   */
  readonly errorsOf: (rank: number) => ReadonlyArray<string>
}

const keep = (lines: Map<number, Array<string>>, rank: number, line: string, kept: number) => {
  const mine = lines.get(rank) ?? []
  mine.push(line)
  if (mine.length > kept) mine.splice(0, mine.length - kept)
  lines.set(rank, mine)
}

export const make = (next: OutputSink, kept = KEPT_LINES): LastLines => {
  const lines = new Map<number, Array<string>>()
  const errors = new Map<number, Array<string>>()
  return {
    output: (line, stream) => {
      const match = RANK_PREFIX.exec(line)
      if (match !== null) {
        const rank = Number(match[1])
        const text = line.slice(match[0].length)
        keep(lines, rank, text, kept)
        if (stream === "stderr") keep(errors, rank, text, kept)
      }
      next(line, stream)
    },
    of: (rank) => lines.get(rank) ?? [],
    errorsOf: (rank) => errors.get(rank) ?? []
  }
}
