/**
 * A child's stop as data (Shutdown): the margins around the run's grace,
 * worked out by hand for each grace; the shutdown in force for each mix of a
 * child's own and the policy's; and the supervisor stopping each child as
 * its spec says, seen through handles that record how they were stopped.
 */
import { describe, expect, test } from "bun:test"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildHandle } from "../src/kernel/ChildHandle.ts"
import { SupervisionEvent } from "../src/kernel/policy/decide.ts"
import { graceOf, inForce, margins, Shutdown, wireMillis } from "../src/kernel/Shutdown.ts"
import { Elastic, KillAll, type Strategy } from "../src/kernel/policy/Strategy.ts"
import * as Supervisor from "../src/kernel/Supervisor.ts"
import { effect, eventually } from "./support/effect.ts"

describe("margins around the run's grace", () => {
  // [grace ms, ssh session ms, remote shell's sleep in s, teardown's wait ms]
  const table: ReadonlyArray<readonly [number, number, number, number]> = [
    [0, 2_000, 1, 1_000],
    [1, 2_001, 1, 1_001],
    [999, 2_999, 1, 1_999],
    [1_000, 3_000, 1, 2_000],
    [1_001, 3_001, 2, 2_001],
    [1_500, 3_500, 2, 2_500],
    [5_000, 7_000, 5, 6_000],
    [604_800_000, 604_802_000, 604_800, 604_801_000]
  ]
  for (const [grace, sshSession, remoteShellSeconds, teardown] of table) {
    test(`grace ${grace} ms`, () => {
      const got = margins(Duration.millis(grace))
      expect({
        sshSession: Duration.toMillis(got.sshSession),
        remoteShellSeconds: got.remoteShellSeconds,
        teardown: Duration.toMillis(got.teardown)
      }).toStrictEqual({ sshSession, remoteShellSeconds, teardown })
    })
  }

  test("the config's milliseconds become a Duration once, and go back to whole milliseconds on the wire", () => {
    expect(Duration.toMillis(graceOf({ grace: 5_000 }))).toBe(5_000)
    expect(Duration.toMillis(graceOf({ grace: 0 }))).toBe(0)
    expect([0.4, 1.5, 2_000, 2_000.6].map((ms) => wireMillis(Duration.millis(ms)))).toStrictEqual([0, 2, 2_000, 2_001])
  })
})

describe("the shutdown in force", () => {
  const ownGrace = Shutdown.Grace({ grace: Duration.millis(300) })
  const brutal = Shutdown.BrutalKill()
  // [the child's own, the policy's mode, the policy's grace (ms), what is done: kill, or SIGTERM and this many ms]
  const table: ReadonlyArray<readonly [Shutdown, "kill" | "graceful", number | undefined, "kill" | number]> = [
    [ownGrace, "graceful", undefined, 300],
    [ownGrace, "graceful", 100, 100],
    [ownGrace, "graceful", 0, 0],
    [ownGrace, "kill", undefined, "kill"],
    [ownGrace, "kill", 100, "kill"],
    [brutal, "graceful", undefined, "kill"],
    [brutal, "graceful", 100, "kill"],
    [brutal, "kill", undefined, "kill"]
  ]
  for (const [own, mode, policy, done] of table) {
    test(`${own._tag} child, ${mode} stop, policy grace ${policy ?? "none"}: ${done === "kill" ? "killed" : `${done} ms`}`, () => {
      const got = inForce(own, mode, policy === undefined ? undefined : Duration.millis(policy))
      expect(got._tag === "BrutalKill" ? "kill" : Duration.toMillis(got.grace)).toBe(done)
    })
  }
})

/** A child that records how it was told to stop, and ends at once when stopped (or `exit 1` when `fail` runs). */
const recording = (id: string, shutdown: Shutdown, stops: Map<string, string>) => {
  const fails: Array<Effect.Effect<void>> = []
  const child: Supervisor.SupervisedChild = {
    ...Supervisor.rankChild(Number(id.slice(5)), Effect.gen(function*() {
      const exited = yield* Deferred.make<ChildExit>()
      fails.push(Effect.asVoid(Deferred.succeed(exited, ChildExit.Exited({ code: 1 }))))
      const handle: ChildHandle = {
        describe: id,
        exited: Deferred.await(exited),
        stop: (mode, grace) =>
          Effect.zipRight(
            Effect.sync(() => stops.set(id, mode === "kill" ? "kill" : `term, kill after ${Duration.toMillis(grace)} ms`)),
            Deferred.succeed(exited, ChildExit.Signaled({ signal: mode === "kill" ? "SIGKILL" : "SIGTERM" }))
          )
      }
      return handle
    }), undefined, shutdown)
  }
  return { child, fail: Effect.suspend(() => fails[0] ?? Effect.dieMessage(`${id} never started`)) }
}

describe("the supervisor stops each child as its spec says", () => {
  const kinds = {
    "rank-0": Shutdown.BrutalKill(),
    "rank-1": Shutdown.Grace({ grace: Duration.millis(300) }),
    "rank-2": Shutdown.Grace({ grace: Duration.seconds(2) }),
    "rank-3": Shutdown.Grace({ grace: Duration.millis(700) })
  }
  const started = (strategy: Strategy) =>
    Effect.gen(function*() {
      const stops = new Map<string, string>()
      const children = Object.entries(kinds).map(([id, shutdown]) => recording(id, shutdown, stops))
      const supervisor = yield* Supervisor.start({ name: "test", strategy, children: children.map(({ child }) => child) })
      const fail = (index: number) => children[index]!.fail
      return { fail, stops, supervisor }
    })
  /** Every child has a handle: it is started, and a stop now reaches it. */
  const running = (supervisor: Supervisor.Supervisor) =>
    eventually(
      Effect.map(Effect.forEach(Object.keys(kinds), supervisor.handle), (handles) => handles.every((handle) => handle !== undefined)),
      "every child started"
    )

  effect.live("an abort: brutal kill at once, each grace its own", () =>
    Effect.gen(function*() {
      const { stops, supervisor } = yield* started(new Elastic({}))
      yield* running(supervisor)
      yield* supervisor.send(SupervisionEvent.AbortRequested({ reason: "test" }))
      yield* supervisor.verdict
      expect(Object.fromEntries(stops)).toStrictEqual({
        "rank-0": "kill",
        "rank-1": "term, kill after 300 ms",
        "rank-2": "term, kill after 2000 ms",
        "rank-3": "term, kill after 700 ms"
      })
    }))

  effect.live("kill_all { grace: 100 ms }: the policy's grace replaces each child's, a brutal kill stays one", () =>
    Effect.gen(function*() {
      const { fail, stops, supervisor } = yield* started(new KillAll({ grace: 100 }))
      yield* running(supervisor)
      yield* fail(3)
      yield* supervisor.verdict
      expect(Object.fromEntries(stops)).toStrictEqual({
        "rank-0": "kill",
        "rank-1": "term, kill after 100 ms",
        "rank-2": "term, kill after 100 ms"
      })
    }))

  effect.live("kill_all { grace: 0 }: every sibling is killed, whatever its own shutdown", () =>
    Effect.gen(function*() {
      const { fail, stops, supervisor } = yield* started(new KillAll({ grace: 0 }))
      yield* running(supervisor)
      yield* fail(0)
      yield* supervisor.verdict
      expect(Object.fromEntries(stops)).toStrictEqual({ "rank-1": "kill", "rank-2": "kill", "rank-3": "kill" })
    }))
})
