import { test } from "bun:test"
import * as fc from "fast-check"
import * as Arbitrary from "effect/Arbitrary"
import * as EFC from "effect/FastCheck"
import { Strategy, KillAll, Elastic, Restart, Phased, Backoff } from "../src/actors/Strategy.ts"
test("exp", () => {
  const a = Arbitrary.make(Strategy)
  const xs = EFC.sample(a, { numRuns: 20, seed: 1 })
  for (const x of xs) console.log(x.constructor.name, x instanceof KillAll || x instanceof Elastic || x instanceof Restart || x instanceof Phased, JSON.stringify(x))
  // v3 arb inside v4 property?
  try {
    fc.assert(fc.property(a as any, fc.integer(), (s: any, n) => { void s; void n; return true }), { numRuns: 50, seed: 3 })
    console.log("v3 arb in v4 assert ok")
  } catch (e) { console.log("mix failed", String(e).slice(0, 300)) }
  try {
    const lazy = Arbitrary.makeLazy(Strategy)(fc as any) as unknown as fc.Arbitrary<Strategy>
    const ys = fc.sample(lazy, { numRuns: 10, seed: 1 })
    for (const y of ys) console.log("lazy", y.constructor.name, JSON.stringify(y))
    console.log(fc.sample(Arbitrary.makeLazy(Backoff)(fc as any) as unknown as fc.Arbitrary<Backoff>, 3))
  } catch (e) { console.log("lazy failed", String(e).slice(0, 300)) }
})
