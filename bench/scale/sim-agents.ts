/**
 * Many simulated hosts in one process, for `bench/scale.ts`. Each speaks the
 * real protocol through the real wire modules, as an agent and then its relay
 * would, but starts no process:
 *  - join: `Link.dial` on the join channel, `Hello`, then `Accept` and
 *    `WorldFormed`; every `StartRank` is answered at once with `RankStarted`
 *    and `RankRunning` (a fake pid);
 *  - once the host's ranks all "run", the control channel: `RelayHello`,
 *    `RelayAccepted`, a `FromRank` `Attach` for each rank; after the `beat`
 *    command, a `HostBeats` naming every rank every `beatEveryMs`, the
 *    hosts' phases spread over the interval as unsynchronised relays would
 *    be (the ranks' own beats, one a second each, are counted as carried).
 * Whatever the launcher sends afterwards is read and dropped.
 *
 * Talks to the benchmark by lines: stdin gets one JSON `go` object, then
 * `beat`, then `stop` (EOF stops it too: it never outlives the benchmark);
 * stdout gets one JSON object per line (`ready`, `dialing`, `accepted`,
 * `world`, `attached`, `error`, `stats`).
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Codec from "../../src/wire/Codec.ts"
import { controlCodec, FromRank, HostBeats, RelayHello } from "../../src/wire/messages/ControlMessages.ts"
import { Attach } from "../../src/wire/messages/CoordinatorMessages.ts"
import { Hello, joinCodec, RankExited, RankRunning, RankStarted } from "../../src/wire/messages/JoinMessages.ts"
import { hostKey, saltFromHex } from "../../src/wire/Keys.ts"
import * as Link from "../../src/wire/Link.ts"
import { fairScheduler } from "../../src/kernel/FairScheduler.ts"
import { VERSION } from "../../src/version.ts"

interface Go {
  readonly port: number
  readonly saltHex: string
  readonly hosts: ReadonlyArray<string>
  readonly devices: number
  /** How often each host's HostBeats goes up. */
  readonly beatEveryMs: number
}

const wallClock = () => performance.timeOrigin + performance.now()
const say = (message: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(message)}\n`)

const lines = (async function*() {
  const decoder = new TextDecoder()
  let pending = ""
  for await (const chunk of Bun.stdin.stream()) {
    pending += decoder.decode(chunk, { stream: true })
    const parts = pending.split("\n")
    pending = parts.pop()!
    for (const line of parts) if (line.trim() !== "") yield line.trim()
  }
})()
const nextLine = async () => {
  const next = await lines.next()
  // EOF: the benchmark is gone.
  if (next.done === true) process.exit(0)
  return next.value
}

say({ t: "ready" })
const go = JSON.parse(await nextLine()) as Go
const salt = saltFromHex(go.saltHex)
if (salt === undefined) throw new Error("bad salt")

type Stage = "accepted" | "world" | "attached" | "planned"
const STAGES: ReadonlyArray<Stage> = ["accepted", "world", "attached", "planned"]
const reached: Record<Stage, number> = { accepted: 0, world: 0, attached: 0, planned: 0 }
/** Hosts that failed before reaching each stage. */
const missed: Record<Stage, number> = { accepted: 0, world: 0, attached: 0, planned: 0 }
const said = new Set<Stage>()
let heartbeats = 0
let received = 0
/** A stage is done once every host has reached it or failed before it: say when, and how many failed. */
/** Each host's ms from its dial to its Accept: a dial the listen queue dropped shows as a SYN retransmit (1 s, 3 s…). */
const admissions: Array<number> = []
const check = (stage: Stage) => {
  if (said.has(stage) || reached[stage] + missed[stage] < go.hosts.length) return
  said.add(stage)
  say({ t: stage, at: wallClock(), failed: missed[stage], ...(stage === "accepted" ? { admissions } : {}) })
}
const reach = (stage: Stage, mine: Set<Stage>) => {
  mine.add(stage)
  reached[stage] += 1
  check(stage)
}
const beating = Effect.runSync(Deferred.make<void>())

const simHost = (host: string, slot: number) => {
  const mine = new Set<Stage>()
  return Effect.gen(function*() {
    const dial = <In, Out>(channel: "join" | "control", inbound: Codec.Codec<In>, outbound: Codec.Codec<Out>) =>
      // A relay holds its host's key, not the salt.
      Link.dial({
        channel,
        host: "127.0.0.1",
        port: go.port,
        salt: channel === "control" ? hostKey(salt, host) : salt,
        keyId: channel === "control" ? host : "",
        inbound,
        outbound,
        handshakeMs: 60_000
      })
    const dialedAt = performance.now()
    const join = yield* dial("join", joinCodec, joinCodec)
    yield* join.send(new Hello({
      host,
      devices: Array.from({ length: go.devices }, (_, index) => index),
      deviceLabels: Array.from({ length: go.devices }, () => "cpu"),
      pid: process.pid,
      version: VERSION
    }))
    const answer = yield* join.receive
    if (answer._tag !== "Accept") return yield* Effect.fail(`expected Accept, got ${answer._tag}${answer._tag === "Reject" ? `: ${answer.reason}` : ""}`)
    admissions.push(performance.now() - dialedAt)
    reach("accepted", mine)
    const world = yield* join.receive
    if (world._tag !== "WorldFormed") return yield* Effect.fail(`expected WorldFormed, got ${world._tag}`)
    reach("world", mine)

    const running = new Set<number>()
    while (running.size < answer.ranks.length) {
      const order = yield* join.receive
      if (order._tag === "StartRank") {
        // The agent reports the process, then (a command: rank) that it runs user code.
        yield* join.send(new RankStarted({ rank: order.rank, incarnation: order.incarnation, pid: 100_000 + order.rank }))
        yield* join.send(new RankRunning({ rank: order.rank, incarnation: order.incarnation }))
        running.add(order.rank)
      } else if (order._tag === "RunEnded" || order._tag === "Abort") return
    }
    // From now on the join link only carries stops and the run's end.
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(join.receive, (order) =>
      order._tag === "StopRank"
        ? join.send(new RankExited({ rank: order.rank, incarnation: order.incarnation, code: null, signal: "SIGTERM" }))
        : Effect.void)).pipe(Effect.ignore))

    // The relay's side: register the host's ranks, attach them, then beat.
    const control = yield* dial("control", controlCodec, controlCodec)
    yield* control.send(new RelayHello({ host, ranks: answer.ranks }))
    const registered = yield* control.receive
    if (registered._tag !== "RelayAccepted") return yield* Effect.fail(`expected RelayAccepted, got ${registered._tag}`)
    // Planned: the coordinator's first epoch has reached every rank of the host (after its Welcome).
    const planned = new Set<number>()
    yield* Effect.forkScoped(Effect.forever(Effect.map(control.receive, (message) => {
      received += 1
      if (message._tag !== "ToRanks" || message.order._tag !== "EpochStart" || planned.size === answer.ranks.length) return
      for (const rank of message.ranks) planned.add(rank)
      if (planned.size === answer.ranks.length) reach("planned", mine)
    })).pipe(Effect.ignore))
    for (const rank of answer.ranks) yield* control.send(new FromRank({ rank, report: new Attach() }))
    reach("attached", mine)

    yield* Deferred.await(beating)
    yield* Effect.sleep(Duration.millis((slot * go.beatEveryMs) / go.hosts.length))
    // Built once: constructing (and so validating) a message costs more than sending it.
    // As a relay beats for its ranks, each beating once a second: one HostBeats naming them all every interval.
    const beat = control.send(new HostBeats({ ranks: answer.ranks }))
    const beatsCarried = (answer.ranks.length * go.beatEveryMs) / 1000
    yield* Effect.repeat(Effect.map(beat, () => void (heartbeats += beatsCarried)), Schedule.fixed(Duration.millis(go.beatEveryMs)))
  }).pipe(
    Effect.scoped,
    Effect.catchAll((error) =>
      Effect.sync(() => {
        say({ t: "error", host, error: typeof error === "string" ? error : error.message })
        for (const stage of STAGES) {
          if (mine.has(stage)) continue
          missed[stage] += 1
          check(stage)
        }
      })
    )
  )
}

say({ t: "dialing", at: wallClock() })
// Every host dials at once, as a scheduler's agents would (srun, a Kubernetes Job).
// With the launcher's scheduler: 250 hosts' fibers on Effect's default one kept this process's event loop from a
// new connection's first write for seconds, past the launcher's 5 s deadline for a channel's magic.
for (const [slot, host] of go.hosts.entries()) Effect.runFork(Effect.withScheduler(simHost(host, slot), fairScheduler))

while (true) {
  const command = await nextLine()
  if (command === "beat") Effect.runSync(Deferred.succeed(beating, undefined))
  else if (command === "stats") say({ t: "stats", heartbeats, received })
  else if (command === "stop") {
    await new Promise((done) => process.stdout.write(`${JSON.stringify({ t: "stats", heartbeats, received })}\n`, done))
    process.exit(0)
  }
}
