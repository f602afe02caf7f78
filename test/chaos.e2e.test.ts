/**
 * The chaos runner's short set: 30 seeded scenarios (policy × topology ×
 * fault × moment) with real processes, each ending as its policy predicts,
 * with nothing left running and nothing hung (chaos/runScenario.ts says what
 * is checked). Network-namespace hosts join the draw where this machine can
 * make them (root). The long run is `bun run chaos --scenarios 500`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { describe as describeScenario, draw, type Topology } from "../chaos/Scenario.ts"
import { runScenario, summary } from "../chaos/runScenario.ts"
import { type Hosts, makeHosts, netnsUnavailable } from "./support/netns.ts"

const SEED = 20261129
const SCENARIOS = 30

const unavailable = netnsUnavailable()
if (unavailable !== undefined) console.log(`chaos: network-namespace hosts left out of the draw: ${unavailable}`)
const topologies: ReadonlyArray<Topology> = unavailable === undefined ? ["local", "self", "netns"] : ["local", "self"]

let hosts: Hosts | undefined
beforeAll(async () => {
  if (unavailable === undefined) hosts = await makeHosts(2)
})
afterAll(() => hosts?.teardown())

describe(`chaos, seed ${SEED}`, () => {
  for (const scenario of draw(SEED, SCENARIOS, topologies)) {
    test(describeScenario(scenario), async () => {
      const result = await runScenario(scenario, hosts)
      if (result.mismatches.length > 0 || result.orphans.length > 0 || result.hung) console.log(summary(result))
      expect(result.hung).toBe(false)
      expect(result.mismatches).toEqual([])
      expect(result.orphans).toEqual([])
    }, 120_000)
  }
})
