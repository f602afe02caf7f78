/**
 * The agent against a real launcher front (PortMux, JoinGate, ControlGate)
 * over loopback, with real relay and rank processes: it carries out
 * StartRank / StopRank, reports what became of each rank, and stops every
 * child it started on Abort (the ranks side by side, then the relay) and on
 * the link's EOF. Its relay's death takes the host's ranks.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Agent from "../src/agent/Agent.ts"
import * as ControlGate from "../src/launcher/front/ControlGate.ts"
import * as JoinGate from "../src/launcher/front/JoinGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { VERSION } from "../src/version.ts"
import { Abort, type JoinMessage, RankExited, StartRank, StopRank, WorldFormed } from "../src/wire/messages/JoinMessages.ts"
import { newSalt } from "../src/wire/Keys.ts"
import { effect, eventually } from "./support/effect.ts"
import { repoRoot } from "./support/launch-scenario.ts"
import { allPids, commandLine, environment, isRunning, pidFiles } from "./support/processes.ts"
import { runSpec } from "./support/run-spec.ts"
import { entryPoints } from "../src/cli/entryPoints.ts"

/** A launcher front with one declared two-rank host, the agent joined, and the world formed; the ranks hold until stopped. */
const joinAgent = (extraArgs: (dir: string) => ReadonlyArray<string> = () => []) => Effect.gen(function*() {
  const salt = newSalt()
  const dir = mkdtempSync(join(tmpdir(), "cohort-agent-"))
  const gate = yield* JoinGate.make({
    rules: { minRanks: 2, targetRanks: 2, timeoutMs: 10_000, maxTimeoutMs: 20_000, start: "auto" },
    declared: new Map([["localhost", 2]]),
    admission: { mode: "open", warning: undefined },
    specFor: () => runSpec({ run: "agent-test", args: ["hold", `pidfile=${dir}`, ...extraArgs(dir)] }),
    salt,
    version: VERSION,
    handshakeMs: 5_000
  })
  const control = yield* ControlGate.make({
    salt,
    ranksOf: (host) => Effect.succeed(host === "localhost" ? [0, 1] : undefined),
    handshakeMs: 5_000,
    beatEveryMs: 1_000,
    onMessage: () => Effect.void,
    onClosed: () => Effect.void
  })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { join: gate.owner, control: control.owner } })
  const lines: Array<string> = []
  const agent = yield* Effect.forkScoped(Effect.scoped(Agent.run({
    entries: entryPoints,
    host: "localhost",
    devices: { devices: [{ kind: "cpu", slot: 0 }, { kind: "cpu", slot: 1 }], labels: ["cpu", "cpu"] },
    controller: { host: "127.0.0.1", port: mux.port },
    version: VERSION,
    path: repoRoot,
    inheritedEnv: process.env,
    handshakeMs: 5_000,
    output: (line) => lines.push(line)
  })))
  const formation = yield* gate.formation
  if (formation._tag !== "Formed") return yield* Effect.dieMessage(`the window failed: ${formation.reason}`)
  const link = formation.members[0]!.link
  yield* link.send(new WorldFormed({ worldSize: 2, hosts: [{ host: "localhost", ranks: [0, 1] }], master: { addr: "127.0.0.1", port: 29_500 } }))
  const received: Array<JoinMessage> = []
  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(link.receive, (message) => Effect.sync(() => received.push(message)))).pipe(Effect.ignore))
  const pids = () => pidFiles(dir)
  return { agent, control, dir, lines, link, pids, port: mux.port, received }
})
const joinedAgent = joinAgent()

type Joined = Effect.Effect.Success<typeof joinedAgent>

const startBoth = ({ link, pids, received }: Joined) =>
  Effect.gen(function*() {
    yield* link.send(new StartRank({ rank: 0, incarnation: 0 }))
    yield* link.send(new StartRank({ rank: 1, incarnation: 0 }))
    yield* eventually(Effect.sync(() => received.filter((message) => message._tag === "RankRunning").length === 2 && pids().length === 2), "both ranks running user code", 10_000)
    return pids()
  })

/** A process's JSON variable, parsed; undefined when it is gone or has none. */
const jsonVariable = (pid: number, name: string): { readonly socket?: unknown } | undefined => {
  try {
    return JSON.parse(environment(pid)[name] ?? "null") ?? undefined
  } catch {
    return undefined
  }
}

/**
 * This agent's relay: the one serving the socket its ranks were given. It starts once both ranks run. Not the
 * relay whose spec names this test's port: a port comes back in a later test while an earlier test's relay
 * may still be leaving (the suite once found such a relay, which left at once, ranks still running); a run
 * directory does not come back.
 */
const relayOf = ({ pids }: Joined) => {
  const socket = pids().map((pid) => jsonVariable(pid, "COHORT_RANK_ENVELOPE")?.socket).find((found) => typeof found === "string")
  if (socket === undefined) return undefined
  return allPids().find((pid) => {
    try {
      return commandLine(pid).includes("/relay.") && jsonVariable(pid, "COHORT_RELAY_SPEC")?.socket === socket
    } catch {
      return false
    }
  })
}

describe("the agent", () => {
  effect.live("starts ranks as ordered, reports started, running and exited; a StopRank for another incarnation is ignored", () =>
    Effect.gen(function*() {
      const joined = yield* joinedAgent
      const [first, second] = yield* startBoth(joined)
      expect(joined.received.filter((message) => message._tag === "RankStarted").map((message) => message._tag === "RankStarted" && message.rank).sort()).toEqual([0, 1])
      yield* eventually(Effect.map(joined.control.registered, (hosts) => hosts.has("localhost")), "the relay registered with the launcher")
      yield* joined.link.send(new StopRank({ rank: 1, incarnation: 7, mode: "kill", graceMs: 0 }))
      yield* joined.link.send(new StopRank({ rank: 0, incarnation: 0, mode: "graceful", graceMs: 2_000 }))
      yield* eventually(Effect.sync(() => joined.received.some((message) => message._tag === "RankExited" && message.rank === 0)), "rank 0's exit reported")
      // Rank 0 honoured its signal and returned: status 0. Rank 1 still runs.
      expect(joined.received.find((message) => message._tag === "RankExited")).toMatchObject({ rank: 0, incarnation: 0, code: 0, signal: null })
      expect(joined.lines).toContain("[localhost:cpu:r0] rank 0: stopped by cohort")
      expect([first, second].filter((pid) => isRunning(pid!)).length).toBe(1)
      yield* joined.link.send(new StopRank({ rank: 1, incarnation: 0, mode: "kill", graceMs: 0 }))
      yield* eventually(Effect.sync(() => joined.received.filter((message) => message._tag === "RankExited").length === 2), "rank 1's exit reported")
      expect(joined.received.filter((message) => message._tag === "RankExited").at(-1)).toMatchObject({ rank: 1, signal: "SIGKILL" })
    }), 20_000)

  effect.live("Abort: every rank is stopped and the agent ends", () =>
    Effect.gen(function*() {
      const joined = yield* joinedAgent
      const pids = yield* startBoth(joined)
      yield* joined.link.send(new Abort({ reason: "test" }))
      yield* Fiber.join(joined.agent)
      expect(pids.every((pid) => !isRunning(pid))).toBe(true)
    }), 20_000)

  effect.live("the launcher's link ends: every rank is stopped and the agent ends, with a transient failure (worth dialling again)", () =>
    Effect.gen(function*() {
      const joined = yield* joinedAgent
      const pids = yield* startBoth(joined)
      yield* joined.link.close
      const ended = yield* Effect.flip(Fiber.join(joined.agent))
      expect(ended.reason).toContain("lost the launcher")
      expect(ended.permanent).toBeUndefined()
      expect(pids.every((pid) => !isRunning(pid))).toBe(true)
    }), 20_000)

  effect.live("the relay dies under running ranks: the host's ranks are stopped and reported", () =>
    Effect.gen(function*() {
      const joined = yield* joinedAgent
      const pids = yield* startBoth(joined)
      yield* eventually(Effect.sync(() => relayOf(joined) !== undefined), "the relay started")
      process.kill(relayOf(joined)!, "SIGKILL")
      yield* eventually(Effect.sync(() => joined.received.filter((message) => message._tag === "RankExited").length === 2), "both ranks' exits reported")
      expect(pids.every((pid) => !isRunning(pid))).toBe(true)
      expect(joined.lines.some((line) => line.includes("stopped by cohort"))).toBe(true)
      // A host without its relay starts no more ranks: the order is answered at once, with why.
      yield* joined.link.send(new StartRank({ rank: 0, incarnation: 1 }))
      yield* eventually(Effect.sync(() => joined.received.some((message) => message._tag === "RankExited" && message.incarnation === 1)), "the new order answered")
      expect(joined.received.filter((message) => message._tag === "RankExited" && message.incarnation === 1)).toEqual([
        new RankExited({ rank: 0, incarnation: 1, code: null, signal: null, detail: "the host's relay is gone: localhost starts no more ranks" })
      ])
      expect(joined.received.some((message) => message._tag === "RankStarted" && message.incarnation === 1)).toBe(false)
    }), 20_000)

  effect.live("Abort: the ranks stop side by side, and the relay only once they have ended", () =>
    Effect.gen(function*() {
      // Each rank says it heard its stop, then takes 1 s before it saves. Stopped side by side, both hear the stop
      // before either has saved; stopped one after the other, the second would hear it only once the first had
      // saved and ended, whatever the load. The order of their lines tells the two apart, a second to spare.
      const joined = yield* joinAgent((dir) => [`save=1000:${dir}`])
      const ranks = yield* startBoth(joined)
      yield* eventually(Effect.sync(() => relayOf(joined) !== undefined), "the relay started")
      const relay = relayOf(joined)!
      yield* joined.link.send(new Abort({ reason: "test" }))
      let ranksLeftWhenTheRelayWent: number | undefined
      yield* eventually(
        Effect.sync(() => {
          const left = ranks.filter((pid) => isRunning(pid)).length
          if (!isRunning(relay)) ranksLeftWhenTheRelayWent = left
          return ranksLeftWhenTheRelayWent !== undefined
        }),
        "the relay stopped",
        10_000
      )
      expect(ranksLeftWhenTheRelayWent).toBe(0)
      const said = (rank: number, what: string) => joined.lines.indexOf(`[localhost:cpu:r${rank}] rank ${rank}: ${what}`)
      yield* eventually(Effect.sync(() => said(0, "saved") >= 0 && said(1, "saved") >= 0), "both ranks' saves told")
      const heard = [0, 1].map((rank) => said(rank, "stopped by cohort"))
      expect(heard.every((at) => at >= 0)).toBe(true)
      expect(Math.max(...heard)).toBeLessThan(Math.min(said(0, "saved"), said(1, "saved")))
      yield* Fiber.join(joined.agent)
    }), 20_000)
})
