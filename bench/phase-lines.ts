/**
 * Reading a launcher's stderr as it comes: when each phase line arrived (ms
 * after `t0` on the wall clock every process of a machine shares), and the
 * last lines, for diagnostics.
 */
export const wallClock = () => performance.timeOrigin + performance.now()

/** cohort's own stderr lines that mark its phases. */
export const PHASES = [
  ["listening", / listening on /],
  // The first host's agent has joined (on one host: the launcher's own, in-process).
  ["agent joined", /^cohort: \S+ joined with rank/],
  ["world formed", /^cohort: world formed/],
  ["cohort formed", /^cohort: cohort formed/]
] as const
export type Phase = typeof PHASES[number][0]

export const drainPhases = async <P extends string>(
  stream: ReadableStream<Uint8Array>,
  t0: number,
  patterns: ReadonlyArray<readonly [P, RegExp]>,
  phases: Partial<Record<P, number>>,
  tail: Array<string>
): Promise<void> => {
  const decoder = new TextDecoder()
  let pending = ""
  for await (const chunk of stream) {
    const at = wallClock() - t0
    pending += decoder.decode(chunk, { stream: true })
    const lines = pending.split("\n")
    pending = lines.pop()!
    for (const line of lines) {
      for (const [phase, pattern] of patterns) if (phases[phase] === undefined && pattern.test(line)) phases[phase] = at
      tail.push(line)
      if (tail.length > 20) tail.shift()
    }
  }
  if (pending !== "") tail.push(pending)
}

export interface PhasedRun {
  /** When the launcher was spawned. */
  readonly t0: number
  readonly phases: Partial<Record<Phase, number>>
  readonly tail: ReadonlyArray<string>
  /** "ok", or how it ended otherwise. */
  readonly status: string
}

/** Spawn a launcher, note its phases as they come, and kill it if it has not exited within `deadlineMs`. */
export const runPhased = async (
  cmd: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: Record<string, string | undefined> },
  deadlineMs: number
): Promise<PhasedRun> => {
  const phases: Partial<Record<Phase, number>> = {}
  const tail: Array<string> = []
  const t0 = wallClock()
  const proc = Bun.spawn([...cmd], { cwd: options.cwd, env: options.env, stdin: "ignore", stdout: "ignore", stderr: "pipe" })
  const draining = drainPhases(proc.stderr, t0, PHASES, phases, tail)
  let hung = false
  const deadline = setTimeout(() => {
    hung = true
    proc.kill("SIGKILL")
  }, deadlineMs)
  const code = await proc.exited
  clearTimeout(deadline)
  await draining
  return { t0, phases, tail, status: hung ? `no exit within ${deadlineMs} ms (killed)` : code === 0 ? "ok" : `exit status ${code}` }
}
