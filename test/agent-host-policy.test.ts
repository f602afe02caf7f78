/**
 * A host's policy, as `decide` reads it: the relay is significant (its
 * abnormal end stops the host's ranks), ranks are temporary (an end stops
 * nothing else), and no child counts as a rank of the world. The expected
 * directives are written out by hand.
 */
import { describe, expect, test } from "bun:test"
import { hostStrategy, rankSpec, relayHasEnded, relaySpec } from "../src/agent/HostPolicy.ts"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import { decide, Directive, initialState, SupervisionEvent, type SupervisorState } from "../src/kernel/policy/decide.ts"
import { Verdict } from "../src/kernel/policy/Verdict.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

const host = "gpu-a"

/** Feed events in order; the directives of the last one, and the state after it. */
const after = (events: ReadonlyArray<SupervisionEvent>, state: SupervisorState = initialState([relaySpec(host, anyShutdown)])) => {
  let directives: ReadonlyArray<Directive> = []
  for (const event of events) [directives, state] = decide(hostStrategy, state, event, 0)
  return { directives, state }
}

const joined = (...children: ReadonlyArray<ChildSpec>) => SupervisionEvent.ChildrenJoined({ children })
const exited = (id: string, exit: ChildExit) => SupervisionEvent.ChildExited({ id, exit })

/** The relay booted, and the launcher's orders for ranks 0 and 1 joined. */
const serving = [SupervisionEvent.Boot(), SupervisionEvent.CohortFormed(), joined(rankSpec(host, 0, 0, anyShutdown), rankSpec(host, 1, 0, anyShutdown))]

const terminations = (directives: ReadonlyArray<Directive>) =>
  directives.flatMap((directive) => (directive._tag === "Terminate" ? [{ ids: directive.ids, mode: directive.mode }] : []))

const statuses = (state: SupervisorState) => Object.fromEntries(state.children.map((child) => [child.spec.id, child.status]))

describe("a host's policy", () => {
  test("the relay killed under running ranks: both ranks are stopped gracefully, nothing is reported dead", () => {
    const { directives, state } = after([...serving, exited("relay", ChildExit.Signaled({ signal: "SIGKILL" }))])
    expect(terminations(directives)).toEqual([{ ids: ["rank-1#0", "rank-0#0"], mode: "graceful" }])
    expect(directives.some((directive) => directive._tag === "ReportDead" || directive._tag === "Verdict")).toBe(false)
    expect(statuses(state)).toEqual({ "relay": "exited", "rank-0#0": "stopping", "rank-1#0": "stopping" })
    expect(relayHasEnded(state)).toBe(true)
  })

  test("a relay that could not be started takes the ranks too", () => {
    const { directives } = after([...serving, exited("relay", ChildExit.Crashed({ detail: "cannot hand the relay its key" }))])
    expect(terminations(directives)).toEqual([{ ids: ["rank-1#0", "rank-0#0"], mode: "graceful" }])
  })

  test("once the ranks taken with the relay have ended, the host is done: a verdict with no world", () => {
    const { directives } = after([
      ...serving,
      exited("relay", ChildExit.Signaled({ signal: "SIGKILL" })),
      exited("rank-1#0", ChildExit.Exited({ code: 0 })),
      exited("rank-0#0", ChildExit.Signaled({ signal: "SIGKILL" }))
    ])
    expect(directives.filter((directive) => directive._tag === "Verdict")).toEqual([
      Directive.Verdict({ verdict: Verdict.Completed({ dead: 0, world: 0, tolerated: 0 }) })
    ])
  })

  test("a rank's end, clean or not, stops nothing else", () => {
    for (const exit of [ChildExit.Exited({ code: 3 }), ChildExit.Signaled({ signal: "SIGKILL" }), ChildExit.Exited({ code: 0 })]) {
      const { directives, state } = after([...serving, exited("rank-0#0", exit)])
      expect(directives).toEqual([])
      expect(statuses(state)).toEqual({ "relay": "running", "rank-0#0": "exited", "rank-1#0": "running" })
    }
  })

  test("the relay leaving cleanly stops nothing (the agent waits for RunEnded instead)", () => {
    const { directives, state } = after([...serving, exited("relay", ChildExit.Exited({ code: 0 }))])
    expect(directives).toEqual([])
    expect(statuses(state)).toEqual({ "relay": "exited", "rank-0#0": "running", "rank-1#0": "running" })
  })

  test("a rank the launcher restarts under its own number joins as a new incarnation", () => {
    const { directives } = after([...serving, exited("rank-0#0", ChildExit.Exited({ code: 1 })), joined(rankSpec(host, 0, 1, anyShutdown))])
    expect(directives.filter((directive) => directive._tag === "Start")).toEqual([Directive.Start({ id: "rank-0#1" })])
  })

  test("an abort stops every child at once, gracefully", () => {
    const { directives } = after([...serving, SupervisionEvent.AbortRequested({ reason: "the run has ended" })])
    expect(terminations(directives)).toEqual([{ ids: ["rank-1#0", "rank-0#0", "relay"], mode: "graceful" }])
  })

  test("the relay has not ended while it waits to boot, runs, or waits for its ranks", () => {
    expect(relayHasEnded(initialState([relaySpec(host, anyShutdown)]))).toBe(false)
    expect(relayHasEnded(after(serving).state)).toBe(false)
  })
})
