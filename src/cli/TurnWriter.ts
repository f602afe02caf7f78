/**
 * The launcher's terminal output, written once per turn of the event loop.
 *
 * Each `write` to a pipe or a terminal is a system call. A thousand hosts
 * joining, or thousands of ranks printing, put hundreds of lines in one turn
 * of the event loop, and the launcher's thread wrote them one call each while
 * status requests and frames waited. Lines are queued in order and written
 * together at the end of the turn (`setImmediate`), as one call per run of
 * lines for the same stream, so stdout and stderr keep their order; a queue
 * past 64 KiB is written at once. `flush` writes what is queued now: the
 * console calls it as it closes, and the process's exit calls it, so a line
 * queued before `process.exit` is not lost.
 */

export type Stream = "stdout" | "stderr"

export interface TurnWriter {
  readonly write: (text: string, stream: Stream) => void
  readonly flush: () => void
}

/** Past this much queued text, write at once rather than hold it to the end of the turn. */
const MAX_QUEUED = 64 * 1024

export const make = (
  out: (text: string, stream: Stream) => void = (text, stream) => void (stream === "stdout" ? process.stdout : process.stderr).write(text),
  later: (flush: () => void) => void = (flush) => void setImmediate(flush)
): TurnWriter => {
  const queued: Array<{ stream: Stream; text: string }> = []
  let size = 0
  let scheduled = false
  const flush = () => {
    scheduled = false
    size = 0
    for (const { stream, text } of queued.splice(0)) out(text, stream)
  }
  return {
    write: (text, stream) => {
      const last = queued[queued.length - 1]
      if (last !== undefined && last.stream === stream) last.text += text
      else queued.push({ stream, text })
      size += text.length
      if (size >= MAX_QUEUED) return flush()
      if (!scheduled) {
        scheduled = true
        later(() => {
          if (scheduled) flush()
        })
      }
    },
    flush
  }
}

/** The process's own streams, once per turn; whatever is queued goes out as the process exits. */
export const forProcess = (): TurnWriter => {
  const writer = make()
  process.once("exit", writer.flush)
  return writer
}
