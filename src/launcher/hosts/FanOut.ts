/**
 * Fan-out: an agent for every host.
 *
 * This machine's agents run in-process and join over loopback through the
 * real join channel; another machine's is started over ssh (SshSession), and
 * an `agent: self` host's is started by someone else and dials in. Every ssh
 * host's session opens first and runs its preflight: no agent starts until
 * every host has passed it. Before formation an agent's end fails the window;
 * after it, the host is gone (`onEndedAfterFormation`).
 */
import { rmSync } from "node:fs"
import { dirname } from "node:path"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type { Worker } from "../../config/ClusterConfig.ts"
import { LOG_LEVEL_VARIABLE } from "../../config/LogVerbosity.ts"
import * as Agent from "../../agent/Agent.ts"
import { formatDevices, writeAgentSpec } from "../../agent/AgentSpec.ts"
import { VERSION } from "../../version.ts"
import { saltToHex } from "../../wire/Keys.ts"
import { LaunchInputError, type Plan, sshWorkers } from "../run/Plan.ts"
import { localLockHash } from "../run/Preflight.ts"
import { privateDirectory, writePrivateFile } from "../run/PrivateFiles.ts"
import { agentTag } from "./RemoteCleanup.ts"
import type { RunEnv } from "../run/RunEnv.ts"
import * as SshSession from "./SshSession.ts"
import { invokedAs } from "../../kernel/ProgramName.ts"

export interface FannedOut {
  /** Each host's agent (a launcher-local one, or the ssh session that carries a remote one). */
  readonly agents: ReadonlyArray<Fiber.RuntimeFiber<void>>
  /** Every ssh host passed its preflight; failed with every host's problems at once. */
  readonly hostsChecked: Deferred.Deferred<void, LaunchInputError>
  /** The first agent that ended, and why. */
  readonly agentFailed: Deferred.Deferred<string>
}

export const fanOut = (
  env: RunEnv,
  port: number,
  /** An agent ended once the world had formed: its host is gone. */
  onEndedAfterFormation: (host: string, reason: string) => Effect.Effect<void>
): Effect.Effect<FannedOut, LaunchInputError, Scope.Scope> =>
  Effect.gen(function*() {
    const { admission, plan } = env
    const { config } = plan
    const agentFailed = yield* Deferred.make<string>()
    const saltHex = admission.mode === "open" ? undefined : saltToHex(env.salt)
    const lockHash = localLockHash()
    const sessions = new Map<string, SshSession.SshSession>()
    for (const worker of sshWorkers(plan)) {
      sessions.set(worker.host, yield* SshSession.open({
        worker,
        run: config.name,
        tag: agentTag(config.name, worker.host),
        lockHash,
        grace: env.grace,
        netTimeoutScale: env.scale,
        logLevel: process.env[LOG_LEVEL_VARIABLE],
        tunnelPort: worker.tunnel ? port : undefined,
        // The agent there prefixes its ranks' and relay's lines, and its own say `cohort agent <host>:`.
        output: env.output
      }).pipe(Effect.mapError((error) => new LaunchInputError({ problems: [error.message] }))))
    }
    const hostsChecked = yield* Deferred.make<void, LaunchInputError>()
    yield* Effect.forkScoped(Effect.gen(function*() {
      const judgements = yield* Effect.forEach(sessions.values(), (session) => session.checked, { concurrency: "unbounded" })
      for (const note of judgements.flatMap((judgement) => judgement.notes)) yield* Effect.logInfo(note)
      const problems = judgements.flatMap((judgement) => judgement.problems)
      yield* problems.length === 0 ? Deferred.succeed(hostsChecked, undefined) : Deferred.fail(hostsChecked, new LaunchInputError({ problems }))
    }))
    const saltFile = saltHex !== undefined && plan.hosts.some(({ start }) => start === "self") ? yield* writeSaltFile(saltHex) : undefined
    const agentOf = ({ devices, start, worker }: Plan["hosts"][number]): Effect.Effect<void, Agent.AgentError | SshSession.SessionEnded, Scope.Scope> => {
      switch (start) {
        case "in-process":
          return Agent.run({
            host: worker.host,
            // The plan probed this machine's devices itself: only another host's `all` waits for its join.
            devices: devices!,
            controller: { host: plan.dialAddress, port },
            salt: admission.mode === "open" ? undefined : env.salt,
            version: VERSION,
            path: worker.path,
            inheritedEnv: process.env,
            handshakeMs: env.handshakeMs,
            output: env.output,
            entries: plan.entries
          })
        case "ssh": {
          const session = sessions.get(worker.host)!
          // A tunnelled host dials its own loopback, which the session carries here.
          return Effect.zipRight(
            session.begin(writeAgentSpec({
              host: worker.host,
              controller: { host: worker.tunnel ? "127.0.0.1" : plan.remoteDialAddress, port },
              saltHex,
              devices: worker.devices,
              // The session's shell has entered workers[].path already (from the login directory): the agent
              // runs there, and a relative path resolved again from inside it would name another folder.
              path: "."
            })),
            session.ended
          )
        }
        case "self":
          return Effect.zipRight(selfDeployHint(worker, saltFile, `${plan.remoteDialAddress}:${port}`), Effect.never)
      }
    }
    const agents = yield* Effect.forEach(plan.hosts, (host) =>
      // A failed preflight ends the run; the agents never start.
      Effect.zipRight(Effect.orElse(Deferred.await(hostsChecked), () => Effect.never), agentOf(host)).pipe(
        Effect.scoped,
        // Said in words from here on: the window's verdict, the membership's note of a host gone.
        // The window's verdict names the host; a gone host's line names it itself, so it is given the reason alone.
        Effect.catchAll((error) =>
          Effect.zipRight(Deferred.succeed(agentFailed, error.message), onEndedAfterFormation(host.worker.host, error._tag === "SessionEnded" ? error.reason : `its agent ended: ${error.reason}`))
        ),
        Effect.forkScoped
      ))
    return { agents, hostsChecked, agentFailed }
  })

/** A word as a POSIX shell reads it back: a pasted command must not split or expand a path. */
const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)

/**
 * The run's salt in a file only this user can read, for the `agent: self` hosts' `--salt-file`: one file
 * for every such host (they all need the same salt), removed when the run ends.
 */
const writeSaltFile = (saltHex: string): Effect.Effect<string, LaunchInputError, Scope.Scope> => {
  const file = `.cohort/salts/${process.pid}.salt`
  return Effect.acquireRelease(
    Effect.try({
      // A folder someone else can write could hold a link named like this file: it is refused, never written through.
      try: () => {
        privateDirectory(dirname(file))
        writePrivateFile(file, `${saltHex}\n`)
        return file
      },
      catch: (error) =>
        new LaunchInputError({
          problems: [`cannot write the salt file for the agent: self hosts (${file}): ${error instanceof Error ? error.message : String(error)}`]
        })
    }),
    () => Effect.sync(() => rmSync(file, { force: true }))
  )
}

/**
 * How to start an `agent: self` host's agent, as a command that works pasted on that host: its devices
 * (the agent's default, every GPU, fails on a CPU host) and its checkout as the file declares them. Under
 * pre-shared admission the salt is in `saltFile`, which only this user can read.
 */
const selfDeployHint = (worker: Worker, saltFile: string | undefined, controller: string) => {
  const saltArgument = saltFile === undefined ? "" : ` --salt-file <a copy of ${saltFile}>`
  // The agent's default path is where it is started: a declared one is said, so the ranks run in the checkout.
  const pathArgument = worker.path === "." ? "" : ` --path ${shellWord(worker.path)}`
  // The salt's placeholder comes before the rest: tests and scripts that read this line (chaos, bench) look for it right after --host.
  return Effect.logInfo(
    `waiting for ${worker.host} to join: on it, run  ${invokedAs("agent")} --controller ${controller} --host ${worker.host}${saltArgument} ` +
      `--devices ${formatDevices(worker.devices)}${pathArgument}`
  )
}
