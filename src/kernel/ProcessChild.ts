/**
 * OS processes as supervised children.
 *
 * Each child is started in a session and process group of its own, so a stop
 * reaches everything it started, and a Ctrl-C at the terminal reaches only
 * the launcher, which then stops its children in order. Each child also dies
 * with its parent, even when the parent is SIGKILLed: a Bun child does not on
 * its own, so the child runs under `setpriv --pdeathsig KILL` (the kernel's
 * PR_SET_PDEATHSIG, which survives the exec into the real program). The
 * signal follows the spawning thread, so spawn only from the main thread.
 *
 * The exit is observed through `proc.exited`, an event, never by polling.
 */
import * as Schema from "effect/Schema"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { ChildHandle, StopMode } from "./ChildHandle.ts"
import { ChildExit } from "./ChildExit.ts"
import * as Shutdown from "./Shutdown.ts"

/** A Schema, not a plain tagged error: an agent reports it to the launcher as a rank's exit (RankChild). */
export class SpawnError extends Schema.TaggedError<SpawnError>()("SpawnError", { command: Schema.String, reason: Schema.String }) {
  override get message(): string {
    return `could not start \`${this.command}\`: ${this.reason}`
  }
}

type Stdio = "inherit" | "pipe" | "ignore"

export interface ProcessSpec {
  readonly cmd: ReadonlyArray<string>
  /** Who the child is, for its lines (`rank 3 of gpu-a`); default `pid N`. */
  readonly label?: string | undefined
  readonly cwd?: string | undefined
  /** Added to this process's environment, or (with `inheritEnv: false`) the whole environment. */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** Start from this process's environment (default true); false when `env` is complete and scrubbed. */
  readonly inheritEnv?: boolean | undefined
  /** Open an IPC channel to a Bun child: its messages arrive here, and it sees `disconnect` when we go. */
  readonly ipc?: ((message: unknown) => void) | undefined
  readonly stdin?: Stdio | undefined
  readonly stdout?: Stdio | undefined
  readonly stderr?: Stdio | undefined
  /** Kill the child when this process dies, however it dies (default true). */
  readonly dieWithParent?: boolean | undefined
  /**
   * Receive the child's output line by line (stdout and stderr are piped for
   * it) instead of letting it through untouched: for prefixes and log files.
   */
  readonly onLine?: ((line: string, stream: "stdout" | "stderr") => void) | undefined
  /** How a closing Scope stops it: SIGTERM and this grace before SIGKILL, or SIGKILL at once. */
  readonly shutdown: Shutdown.Shutdown
}

export interface ProcessChild extends ChildHandle {
  readonly pid: number
  readonly subprocess: Bun.Subprocess<"pipe" | "inherit" | "ignore", "pipe" | "inherit" | "ignore", "pipe" | "inherit" | "ignore">
}

const setpriv = Bun.which("setpriv")
let warnedNoSetpriv = false

/** The argv that makes `cmd` die with this process. */
const withParentDeath = (cmd: ReadonlyArray<string>): ReadonlyArray<string> => {
  if (setpriv !== null) return [setpriv, "--pdeathsig", "KILL", "--", ...cmd]
  if (!warnedNoSetpriv) {
    warnedNoSetpriv = true
    console.error(
      "cohort: `setpriv` (util-linux) is not on PATH: children will outlive a SIGKILLed launcher. " +
        "Install util-linux to fix this."
    )
  }
  return cmd
}

const exitOf = (proc: Bun.Subprocess): ChildExit =>
  proc.signalCode !== null
    ? ChildExit.Signaled({ signal: String(proc.signalCode) })
    : ChildExit.Exited({ code: proc.exitCode ?? -1 })

/**
 * Start a process whose lifetime is bound to the current Scope: closing the
 * Scope stops it gracefully and waits for it to end.
 */
export const spawn = (spec: ProcessSpec): Effect.Effect<ProcessChild, SpawnError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try({
      try: () => start(spec),
      catch: (error) =>
        new SpawnError({ command: spec.cmd.join(" "), reason: error instanceof Error ? error.message : String(error) })
    }),
    (child) => Shutdown.stop(child, spec.shutdown)
  )

const start = (spec: ProcessSpec): ProcessChild => {
  if (spec.cmd.length === 0) throw new Error("empty command")
  const cmd = spec.dieWithParent === false ? spec.cmd : withParentDeath(spec.cmd)
  const proc = Bun.spawn([...cmd], {
    cwd: spec.cwd,
    // Bun.spawn's env replaces the whole environment: merge explicitly.
    env: spec.inheritEnv === false ? { ...spec.env } : { ...process.env, ...spec.env },
    stdin: spec.stdin ?? "ignore",
    stdout: spec.onLine !== undefined ? "pipe" : spec.stdout ?? "inherit",
    stderr: spec.onLine !== undefined ? "pipe" : spec.stderr ?? "inherit",
    detached: true,
    ...(spec.ipc === undefined ? {} : { ipc: (message: unknown) => spec.ipc!(message) })
  })
  const pid = proc.pid
  const onLine = spec.onLine
  const forwarded = onLine === undefined
    ? Promise.resolve()
    : Promise.all([
      forwardLines(proc.stdout as ReadableStream<Uint8Array>, (line) => onLine(line, "stdout")),
      forwardLines(proc.stderr as ReadableStream<Uint8Array>, (line) => onLine(line, "stderr"))
    ])

  const alive = () => proc.exitCode === null && proc.signalCode === null
  /** Signal the child's process group; false when the group is already empty. */
  const signalGroup = (sig: NodeJS.Signals): boolean => {
    try {
      process.kill(-pid, sig)
      return true
    } catch {
      return false
    }
  }
  /**
   * Signal the child's whole group while the child is unreaped: until Bun
   * reaps it, its pid (and so its group id) cannot be handed to anyone else.
   */
  const signal = (sig: NodeJS.Signals) => {
    // A group already gone while the leader is not reaped yet: signal the leader alone.
    if (alive() && !signalGroup(sig)) proc.kill(sig)
  }

  // When the child ends, whatever it started in its group goes too: a rank's
  // helpers must not outlive it. The group id cannot name anyone else yet: a
  // pid stays allocated while any process still carries it as its group.
  // Then the exit is reported after the child's last line of output, so no
  // output trails the verdict; a pipe held open by an escaped descendant
  // delays the report by at most a second.
  const ended = proc.exited.then(async () => {
    signalGroup("SIGKILL")
    let timer: ReturnType<typeof setTimeout> | undefined
    await Promise.race([forwarded, new Promise((resolve) => (timer = setTimeout(resolve, 1_000)))])
    clearTimeout(timer)
    return exitOf(proc)
  })
  const exited = Effect.promise(() => ended)

  const stop = (mode: StopMode, grace: Duration.DurationInput) =>
    Effect.gen(function*() {
      if (!alive()) return
      if (mode === "kill") {
        signal("SIGKILL")
      } else {
        signal("SIGTERM")
        // The wait itself must stay interruptible, or the timeout could never cut it short.
        const ended = yield* Effect.timeout(Effect.interruptible(exited), grace).pipe(Effect.option)
        if (ended._tag === "None") {
          signal("SIGKILL")
          // Said, or a rank that ignores SIGTERM is only "exited with SIGKILL", as if something else had killed it.
          // A grace of 0 (`grace: 0s`) asked for the kill: nothing to say.
          if (Duration.greaterThan(Duration.decode(grace), Duration.zero)) {
            yield* Effect.logWarning(`${spec.label ?? `pid ${pid}`} did not stop within the grace (${Duration.format(grace)}): killed (SIGKILL)`)
          }
        }
      }
      yield* exited
    }).pipe(Effect.uninterruptible)

  return { pid, subprocess: proc, describe: `pid ${pid}`, exited, stop }
}

/**
 * Call `emit` for each line of `stream` (a last unterminated line included).
 * Lines are split on bytes, then decoded: a line that is not UTF-8 (a binary
 * dump, a mangled locale) is skipped, never fatal, and never garbles the
 * lines around it.
 */
export const forwardLines = async (stream: ReadableStream<Uint8Array>, emit: (line: string) => void): Promise<void> => {
  const decoder = new TextDecoder("utf-8", { fatal: true })
  let pending: Array<Uint8Array> = []
  const flush = (tail: Uint8Array) => {
    const bytes = pending.length === 0 ? tail : Buffer.concat([...pending, tail])
    pending = []
    try {
      emit(decoder.decode(bytes))
    } catch {
      // Not UTF-8: skipped.
    }
  }
  try {
    for await (const chunk of stream) {
      let from = 0
      let newline: number
      while ((newline = chunk.indexOf(10, from)) !== -1) {
        flush(chunk.subarray(from, newline))
        from = newline + 1
      }
      if (from < chunk.length) pending.push(chunk.slice(from))
    }
  } catch {
    // A stream torn down with its process ends the output; the exit says the rest.
  }
  if (pending.length > 0) flush(new Uint8Array(0))
}
