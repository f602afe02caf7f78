/**
 * `bun run chaos [--seed S] [--scenarios N] [--only I,J] [--local]`: draw N
 * scenarios from the seed (printed, for replay; `--only` replays some of
 * them by number), run each with real processes, and report:
 * scenarios run, verdicts as predicted, orphans found, hangs. Exit 1 when any
 * scenario did not go as its policy predicts. Network-namespace hosts are
 * used when this machine can make them (root); `--local` leaves them out.
 */
import { type Hosts, makeHosts, netnsUnavailable } from "../test/support/netns.ts"
import { draw, type Topology } from "./Scenario.ts"
import { runScenario, summary } from "./runScenario.ts"

const usage = "usage: bun run chaos [--seed S] [--scenarios N] [--only I,J] [--local]"
const args = process.argv.slice(2)
const value = (name: string) => {
  const index = args.indexOf(name)
  return index < 0 ? undefined : args[index + 1]
}
if (args.includes("-h") || args.includes("--help")) {
  console.log(usage)
  process.exit(0)
}
const seed = Number(value("--seed") ?? Math.floor(Math.random() * 1_000_000))
const count = Number(value("--scenarios") ?? 30)
if (!Number.isInteger(seed) || !Number.isInteger(count) || count < 1) {
  console.error(`cohort chaos: --seed and --scenarios take whole numbers\n${usage}`)
  process.exit(2)
}
const unavailable = args.includes("--local") ? "--local" : netnsUnavailable()
const topologies: Array<Topology> = unavailable === undefined ? ["local", "self", "netns"] : ["local", "self"]
console.log(`chaos: seed ${seed}, ${count} scenario(s), topologies ${topologies.join(", ")}${unavailable === undefined ? "" : ` (no netns: ${unavailable})`}`)

const hosts: Hosts | undefined = unavailable === undefined ? await makeHosts(2) : undefined
const results = []
try {
  const only = value("--only")?.split(",").map(Number)
  for (const scenario of draw(seed, count, topologies).filter((each) => only === undefined || only.includes(each.id))) {
    const result = await runScenario(scenario, hosts)
    results.push(result)
    console.log(summary(result))
  }
} finally {
  hosts?.teardown()
}
const asPredicted = results.filter((result) => result.mismatches.length === 0 && !result.hung).length
const orphans = results.reduce((sum, result) => sum + result.orphans.length, 0)
const hangs = results.filter((result) => result.hung).length
console.log(`chaos: ${results.length} scenario(s) run, ${asPredicted} verdict(s) as predicted, ${orphans} orphan(s), ${hangs} hang(s); seed ${seed}`)
process.exit(asPredicted === results.length && orphans === 0 ? 0 : 1)
