/**
 * The chaos runner's short set: seeded scenarios (policy × topology × fault ×
 * moment) with real processes, each ending as its policy predicts, with
 * nothing left running and nothing hung (chaos/runScenario.ts says what is
 * checked). The long run is `bun run chaos --scenarios 500`.
 *
 * The set is the same on every machine where it can be: the scenarios on
 * this host and a self-deployed agent's are drawn from those two topologies
 * alone, so that a machine that cannot make network-namespace hosts (not
 * root) runs exactly the ones a root machine runs. The netns scenarios come
 * from the seed's draw over all three topologies, its netns ones kept; they
 * run where netns hosts can be made and are skipped (and counted) elsewhere.
 * A seeded draw of this size may miss a rare fault or moment: a cable cut
 * (netns only) and the teardown moment are always in, the first of each in
 * the seed's long draw.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { describe as describeScenario, draw, type Scenario, type Topology } from "../chaos/Scenario.ts"
import { runScenario, summary } from "../chaos/runScenario.ts"
import { type Hosts, makeHosts, netnsUnavailable } from "./support/netns.ts"

const SEED = 20261129
/** Scenarios drawn on this host and a self-deployed agent's. */
const HERE = 12
/** The draw over all three topologies whose netns scenarios run. */
const WITH_NETNS = 30
/** How far the always-included scenarios are looked for (the CLI's --scenarios, to replay them). */
const LONG = 500

const unavailable = netnsUnavailable()
if (unavailable !== undefined) console.log(`chaos: the network-namespace scenarios skipped: ${unavailable}`)

const first = (scenarios: ReadonlyArray<Scenario>, what: string, matches: (scenario: Scenario) => boolean): Scenario => {
  const found = scenarios.find(matches)
  if (found === undefined) throw new Error(`chaos: the first ${LONG} scenarios of seed ${SEED} have no ${what}`)
  return found
}

/** The chosen scenarios, then the always-included ones not among them (each once). */
const withAlways = (chosen: ReadonlyArray<Scenario>, always: ReadonlyArray<Scenario>): Array<Scenario> =>
  [...chosen, ...always.filter((scenario) => !chosen.includes(scenario))]

const hereTopologies: ReadonlyArray<Topology> = ["local", "self"]
const here = draw(SEED, LONG, hereTopologies)
const allTopologies: ReadonlyArray<Topology> = ["local", "self", "netns"]
const everywhere = draw(SEED, LONG, allTopologies)

const hereSet = withAlways(here.slice(0, HERE), [first(here, "teardown moment", (scenario) => scenario.moment === "teardown")])
const netnsSet = withAlways(everywhere.slice(0, WITH_NETNS).filter((scenario) => scenario.topology === "netns"), [
  first(everywhere, "cable cut", (scenario) => scenario.fault.kind === "link_cut"),
  first(everywhere, "teardown moment on netns hosts", (scenario) => scenario.topology === "netns" && scenario.moment === "teardown")
])

let hosts: Hosts | undefined
beforeAll(async () => {
  if (unavailable === undefined) hosts = await makeHosts(2)
})
afterAll(() => hosts?.teardown())

const register = (scenario: Scenario, skip: boolean) =>
  test.skipIf(skip)(describeScenario(scenario), async () => {
    const result = await runScenario(scenario, hosts)
    if (result.mismatches.length > 0 || result.orphans.length > 0 || result.hung) console.log(summary(result))
    expect(result.hung).toBe(false)
    expect(result.mismatches).toEqual([])
    expect(result.orphans).toEqual([])
  }, 120_000)

describe(`chaos, seed ${SEED}`, () => {
  describe(`on this host and a self-deployed agent's (replay: bun chaos/cli.ts --local --seed ${SEED} --scenarios ${LONG} --only I)`, () => {
    for (const scenario of hereSet) register(scenario, false)
  })
  describe(`on network-namespace hosts (replay, as root: bun chaos/cli.ts --seed ${SEED} --scenarios ${LONG} --only I)`, () => {
    for (const scenario of netnsSet) register(scenario, unavailable !== undefined)
  })

  // The set itself: what every machine runs, and what a machine with netns hosts adds.
  test("the set: the same local and self scenarios on every machine; a cable cut and the teardown moment always in", () => {
    expect(new Set(hereSet.map((scenario) => scenario.topology))).toEqual(new Set(["local", "self"]))
    expect(hereSet.slice(0, HERE).map((scenario) => scenario.id)).toEqual(Array.from({ length: HERE }, (_, index) => index + 1))
    expect(hereSet.some((scenario) => scenario.moment === "teardown")).toBe(true)
    expect(new Set(netnsSet.map((scenario) => scenario.topology))).toEqual(new Set(["netns"]))
    expect(netnsSet.some((scenario) => scenario.fault.kind === "link_cut")).toBe(true)
    expect(netnsSet.some((scenario) => scenario.moment === "teardown")).toBe(true)
    for (const set of [hereSet, netnsSet]) expect(new Set(set.map((scenario) => scenario.id)).size).toBe(set.length)
  })
})
