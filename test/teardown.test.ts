/**
 * The end of a run, in order: the verdict reaches everyone who reads the run
 * (the phase, the verdict event, so /state.json, `bun run status` and
 * `--events`) before the cleanup starts, and while the cleanup runs the run
 * reads as ended and cleaning up. The cleanup here is held until the test
 * lets it go: what was said by then is what a status read sees during a slow
 * cleanup (the agents' grace, an ssh pass per host).
 *
 * The result carries the cohort's inventory from membership: each host's
 * devices as its Hello named them (a GPU by its index, a CPU slot as `cpu`).
 */
import { describe, expect } from "bun:test"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import { Verdict } from "../src/kernel/policy/Verdict.ts"
import type { JoinLink, Member } from "../src/launcher/front/JoinGate.ts"
import * as MembershipOwner from "../src/launcher/membership/MembershipOwner.ts"
import { makePlan, type Plan } from "../src/launcher/run/Plan.ts"
import * as RunView from "../src/launcher/view/RunView.ts"
import { end, type EndingEnv } from "../src/launcher/run/Teardown.ts"
import { parseCluster } from "../src/config/ClusterConfig.ts"
import { effect } from "./support/effect.ts"
import { entryPoints } from "../src/cli/entryPoints.ts"

const plan = (more = ""): Effect.Effect<Plan> =>
  Effect.map(
    Effect.orDie(parseCluster(`name: ending\nworkers:\n  - { host: localhost, devices: 2 }\njob: { entry: examples/train.ts, checkpoint: /tmp/ending.json }\n${more}`, "cluster.yml")),
    (config) => Either.getOrThrow(makePlan(config, entryPoints))
  )

/** An environment that writes down, in order, every phase entered, every event recorded, and the streams' end. */
const recordingEnv = (said: Array<RunView.RunEvent | string>, more = "") =>
  Effect.map(plan(more), (plan): EndingEnv => ({
    plan,
    enter: (phase) => Effect.sync(() => void said.push(`enter ${phase}`)),
    record: (event) => Effect.sync(() => void said.push(event)),
    board: { endStreams: Effect.sync(() => void said.push("streams ended")) }
  }))

const names = (said: ReadonlyArray<RunView.RunEvent | string>) => said.map((entry) => (typeof entry === "string" ? entry : entry.event))

/** What a status read would see: the view folded from the events recorded so far. */
const view = (said: ReadonlyArray<RunView.RunEvent | string>) =>
  said.flatMap((entry) => (typeof entry === "string" ? [] : [entry])).reduce(RunView.apply, RunView.initial("ending", 0))

// The owner keeps each host's link for the end of the run; this test never says anything down them.
const noLink = {} as JoinLink
const member = (host: string, ranks: ReadonlyArray<number>, devices: ReadonlyArray<number>, deviceLabels: ReadonlyArray<string>): Member => ({
  host,
  ranks,
  devices,
  deviceLabels,
  pid: 1,
  link: noLink
})

describe("the end of a run", () => {
  effect.live("the verdict is said before the cleanup begins, and the run reads as ended while the cleanup is held", () =>
    Effect.gen(function*() {
      const said: Array<RunView.RunEvent | string> = []
      const env = yield* recordingEnv(said)
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const membership = yield* MembershipOwner.make([
        member("gpu-a", [0, 1], [2, 3], ["NVIDIA H200", "NVIDIA H200"]),
        member("localhost", [2], [0], ["cpu"])
      ], { cohortFormed: Effect.void })
      const ending = yield* Effect.fork(end(env, {
        verdict: Verdict.Completed({ dead: 0, world: 3, tolerated: 0 }),
        membership,
        cleanUp: {
          detail: "waiting up to 3 s for 2 agent(s) to leave, then ending what is left on gpu-a",
          run: Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(release))
        },
        checkpointEpoch: Effect.succeed(4),
        port: 4242
      }))

      // The cleanup has begun and is held: everything a reader sees was said before it.
      yield* Deferred.await(started)
      expect(names(said)).toEqual(["enter done", "verdict", "cleanup_started"])
      expect(view(said)).toMatchObject({
        phase: "done",
        verdict: "run completed",
        cleanup: { detail: "waiting up to 3 s for 2 agent(s) to leave, then ending what is left on gpu-a" }
      })
      expect(said[1]).toMatchObject({ event: "verdict", outcome: "completed", exitCode: 0, summary: "run completed" })
      expect(Option.isNone(yield* Fiber.poll(ending))).toBe(true)

      yield* Deferred.succeed(release, undefined)
      const result = yield* Fiber.join(ending)
      expect(names(said)).toEqual(["enter done", "verdict", "cleanup_started", "cleanup_done", "streams ended"])
      expect(view(said)).toMatchObject({ phase: "done", verdict: "run completed", cleanup: null })
      expect(result).toMatchObject({
        run: "ending",
        outcome: "completed",
        exitCode: 0,
        summary: "run completed",
        world: 3,
        port: 4242,
        checkpoint: { path: "/tmp/ending.json", epoch: 4 }
      })
      // A GPU by its index, a CPU slot as cpu; each labelled as its host's agent named it.
      expect(result.ranks.map((rank) => [rank.rank, rank.host, rank.device])).toEqual([[0, "gpu-a", "2"], [1, "gpu-a", "3"], [2, "localhost", "cpu"]])
      expect(result.inventory).toEqual([
        { host: "gpu-a", devices: [{ device: "2", label: "NVIDIA H200", ranks: [0] }, { device: "3", label: "NVIDIA H200", ranks: [1] }] },
        { host: "localhost", devices: [{ device: "cpu", label: "cpu", ranks: [2] }] }
      ])
    }))

  effect.live("a run that never formed: failed at once, nothing to clean up is said as nothing, and no inventory", () =>
    Effect.gen(function*() {
      const said: Array<RunView.RunEvent | string> = []
      const env = yield* recordingEnv(said)
      const result = yield* end(env, {
        verdict: Verdict.Failed({ kind: "join", message: "the join window failed: quorum not met" }),
        membership: undefined,
        cleanUp: undefined,
        checkpointEpoch: Effect.succeed(undefined),
        port: 4242
      })
      expect(names(said)).toEqual(["enter failed", "verdict", "streams ended"])
      expect(view(said)).toMatchObject({ phase: "failed", verdict: "run failed: the join window failed: quorum not met", cleanup: null })
      expect(result).toMatchObject({ outcome: "failed", exitCode: 1, world: 2, ranks: [], inventory: [], checkpoint: undefined })
    }))

  effect.live("failure_policy.degraded_exit: a run that completed with ranks lost exits with it; a clean completion and a failure keep theirs", () =>
    Effect.gen(function*() {
      const exitOf = (verdict: Verdict, more: string) =>
        Effect.gen(function*() {
          const env = yield* recordingEnv([], more)
          const result = yield* end(env, { verdict, membership: undefined, cleanUp: undefined, checkpointEpoch: Effect.succeed(undefined), port: 1 })
          return [result.outcome, result.exitCode]
        })
      const degraded = Verdict.Completed({ dead: 1, world: 2, tolerated: 0 })
      expect(yield* exitOf(degraded, "")).toEqual(["degraded", 0])
      expect(yield* exitOf(degraded, "failure_policy: { degraded_exit: 3 }\n")).toEqual(["degraded", 3])
      expect(yield* exitOf(Verdict.Completed({ dead: 0, world: 2, tolerated: 1 }), "failure_policy: { degraded_exit: 3 }\n")).toEqual(["completed", 0])
      expect(yield* exitOf(Verdict.Failed({ kind: "max-failure", message: "max_failure exceeded" }), "failure_policy: { degraded_exit: 3 }\n")).toEqual(["failed", 1])
    }))
})
