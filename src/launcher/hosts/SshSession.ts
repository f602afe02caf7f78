/**
 * One ssh session per remote host carries both halves of its start: the
 * host's preflight, then its agent. The handshake is most of an ssh start
 * (about 0.45 s here), so a separate preflight round would put two of them
 * in a row before any agent could dial.
 *
 * The session runs the preflight script (Preflight.ts), prints a line that
 * says it is done, and waits for the agent's spec on its stdin. The launcher
 * reads every host's facts, and only when every host passes does it send the
 * specs: no agent starts while any host has a problem, and every problem is
 * reported at once. A session whose stdin closes before its spec (the run was
 * called off) ends without starting anything.
 */
import { constants as osConstants } from "node:os"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type { Worker } from "../../config/ClusterConfig.ts"
import { describe as describeExit } from "../../kernel/ChildExit.ts"
import type { ChildExit } from "../../kernel/ChildExit.ts"
import * as ProcessChild from "../../kernel/ProcessChild.ts"
import { margins, Shutdown } from "../../kernel/Shutdown.ts"
import { judge, type Judgement, preflightScript, unreachable } from "../run/Preflight.ts"
import { batchModeWarning, remoteAgentScript, sshCommand } from "./SshFanOut.ts"

/** The line after the preflight's facts: what follows is the agent's own output. */
const CHECKED = "cohort-preflight-done"

/**
 * The preflight runs in a subshell: its `cd` into the checkout (and its early `exit` when there is none) stay
 * there, so the agent half enters `path` once, from the login directory, as the reference does. Run in the
 * same shell, a relative `path: work/run` was entered twice (`cd: work/run: No such file or directory`).
 */
export const sessionScript = (worker: Worker, run: string, tag: string, grace: Duration.Duration, netTimeoutScale: number, logLevel?: string): string =>
  [`(\n${preflightScript(worker, run)}\n)`, `echo ${CHECKED}`, remoteAgentScript(worker, tag, grace, netTimeoutScale, logLevel)].join("\n")

/** A rank's or relay's line as its agent prefixes it: `[host:cpu:r2] `, `[host:relay] `. */
const PREFIXED = /^\[[^\]\s]*:[^\]\s]*\] /

/** The most of an agent's last words a reason carries: one line, not a page. */
export const LAST_WORDS_CHARS = 160

/** A line that may be the session's last words: one the agent, its shell or ssh said on stderr, not a rank's or relay's. */
export const isOwnLine = (line: string, stream: "stdout" | "stderr"): boolean => stream === "stderr" && line.trim() !== "" && !PREFIXED.test(line)

/** The last words as a reason ends with them: the agent's own prefix dropped (the reason names the host), cut at LAST_WORDS_CHARS. */
export const lastWords = (host: string, line: string): string => {
  const own = `cohort agent ${host}: `
  const text = (line.startsWith(own) ? line.slice(own.length) : line).trim()
  return text.length > LAST_WORDS_CHARS ? `${text.slice(0, LAST_WORDS_CHARS - 1)}…` : text
}

/** A signal's name from a shell's status for it (128 + its number): `wait` says so of a killed agent. */
const signalOfStatus = (code: number): string | undefined =>
  code > 128 ? Object.entries(osConstants.signals).find(([, number]) => number === code - 128)?.[0] : undefined

/**
 * Why the session of `host` ended after its agent started, without the host's name (the line that says it
 * names the host once): the ssh process here ended by a signal (its session was killed), its connection was
 * lost (ssh's 255), or the agent there ended (the remote shell passes on its status; 128 + n: signal n), then
 * the agent's last words, if it had any.
 */
export const endedReason = (host: string, exit: ChildExit, said: string | undefined): string => {
  const words = said === undefined ? "" : `: ${lastWords(host, said)}`
  if (exit._tag === "Signaled") return `its ssh session ended with signal ${exit.signal}${words}`
  if (exit._tag === "Exited" && exit.code === 255) return `its ssh connection was lost${words}`
  const signal = exit._tag === "Exited" ? signalOfStatus(exit.code) : undefined
  return `its agent ended with ${signal === undefined ? describeExit(exit) : `signal ${signal}`}${words}`
}

/** The session could not be started here (no ssh on PATH, …): `<host>: <why>`. */
export class SessionNotStarted extends Data.TaggedError("SessionNotStarted")<{
  readonly host: string
  readonly cause: ProcessChild.SpawnError
}> {
  override get message(): string {
    return `${this.host}: ${this.cause.message}`
  }
}

/** The session ended before the run did: its ssh killed or cut off, or its agent ended abnormally (`reason` says which, and how, without the host). */
export class SessionEnded extends Data.TaggedError("SessionEnded")<{
  readonly host: string
  readonly exit: ChildExit
  readonly reason: string
}> {
  override get message(): string {
    return `${this.host}: ${this.reason}`
  }
}

export interface SessionOptions {
  readonly worker: Worker
  /** The run's name: the preflight ends this run's leftovers on the host. */
  readonly run: string
  /** Marks the agent for cleanup: see RemoteCleanup.agentTag. */
  readonly tag: string
  /** This launcher's bun.lock hash: the host must hold the same. */
  readonly lockHash: string
  /** The run's grace: the agent's there, and (with its margin) this session's own. */
  readonly grace: Duration.Duration
  readonly netTimeoutScale: number
  /** The launcher's COHORT_LOG_LEVEL, for the agent there and everything it starts. */
  readonly logLevel?: string | undefined
  /** `tunnel: true`: the launcher's port, carried to the host's loopback. */
  readonly tunnelPort?: number | undefined
  readonly output: (line: string, stream: "stdout" | "stderr") => void
}

export interface SshSession {
  /** The host's preflight, judged: its problems (none: it may start) and what it did there. */
  readonly checked: Effect.Effect<Judgement>
  /** Start the host's agent with this spec (one line of JSON, see AgentSpec). */
  readonly begin: (spec: string) => Effect.Effect<void>
  /** Until the session ends; fails with why, naming the host. */
  readonly ended: Effect.Effect<void, SessionEnded>
}

/** Open the host's session: its preflight runs at once, its agent when `begin` is called. */
export const open = (options: SessionOptions): Effect.Effect<SshSession, SessionNotStarted, Scope.Scope> =>
  Effect.gen(function*() {
    const { worker } = options
    const batchMode = batchModeWarning(worker)
    if (batchMode !== undefined) yield* Effect.logWarning(batchMode)
    const checked = yield* Deferred.make<Judgement>()
    const facts: Array<string> = []
    let checking = true
    const lastLines: Array<string> = []
    const child = yield* ProcessChild.spawn({
      cmd: sshCommand(worker, sessionScript(worker, options.run, options.tag, options.grace, options.netTimeoutScale, options.logLevel), options.tunnelPort),
      stdin: "pipe",
      onLine: (raw, stream) => {
        const line = raw.trimEnd()
        if (checking && stream === "stdout") {
          if (line !== CHECKED) facts.push(line)
          else {
            checking = false
            Deferred.unsafeDone(checked, Effect.succeed(judge(worker, facts.join("\n"), options.lockHash)))
          }
          return
        }
        // Last words are the agent's own (and the remote shell's, and ssh's): a rank's or relay's line is theirs,
        // and a verdict built on one would pass a rank's progress off as why the host went.
        if (isOwnLine(line, stream)) {
          lastLines.push(line)
          if (lastLines.length > 5) lastLines.shift()
        }
        // ssh's own complaints during the preflight belong in its verdict, not in the run's output.
        if (!checking) options.output(line, stream)
      },
      shutdown: Shutdown.Grace({ grace: margins(options.grace).sshSession })
    }).pipe(Effect.mapError((cause) => new SessionNotStarted({ host: worker.host, cause })))

    const endedEarly = (exit: ChildExit): Judgement => {
      const said = lastLines.at(-1)
      if (exit._tag === "Exited" && exit.code === 255) return { problems: [`${worker.host}: ${unreachable(worker, said)}`], notes: [] }
      const judged = judge(worker, facts.join("\n"), options.lockHash)
      if (judged.problems.length > 0) return judged
      return { problems: [`${worker.host}: the preflight there ended with ${describeExit(exit)}${said === undefined ? "" : `: ${said}`}`], notes: judged.notes }
    }
    const exited = yield* Effect.forkScoped(Effect.tap(child.exited, (exit) => checking ? Deferred.succeed(checked, endedEarly(exit)) : Effect.void))

    const stdin = child.subprocess.stdin as import("bun").FileSink
    return {
      checked: Deferred.await(checked),
      begin: (spec) => Effect.promise(async () => {
        stdin.write(`${spec}\n`)
        await stdin.flush()
      }),
      ended: Effect.gen(function*() {
        const exit = yield* Fiber.join(exited)
        if (exit._tag === "Exited" && exit.code === 0) return
        return yield* new SessionEnded({ host: worker.host, exit, reason: endedReason(worker.host, exit, lastLines.at(-1)) })
      })
    }
  })
