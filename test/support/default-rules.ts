/**
 * The failure rules a file gets when it says none and its after_formation is elastic, written out here
 * from the README's words (a rank that threw, or exited 1 to 127, after formation fails the run), not
 * taken from the code: tests that decode a policy expect these.
 */
import { ExitCodes, FailRun, FailureRule, RuleWhen } from "../../src/actors/FailureRules.ts"
import { type Phased, Phased as PhasedClass } from "../../src/actors/Strategy.ts"

const oneTo127: Array<number> = []
for (let status = 1; status <= 127; status++) oneTo127.push(status)

export const readmeDefaultRules: ReadonlyArray<FailureRule> = [
  new FailureRule({ name: "exception", when: new RuleWhen({ causes: ["exception"], phase: "after_formation" }), then: new FailRun() }),
  new FailureRule({ name: "exit-status", when: new RuleWhen({ causes: ["exit"], exitCodes: new ExitCodes({ op: "in", values: oneTo127 }), phase: "after_formation" }), then: new FailRun() })
]

/** A phased strategy with an elastic after_formation, as a file without rules decodes to. */
export const withDefaultRules = (phased: Phased): Phased =>
  new PhasedClass({ beforeFormation: phased.beforeFormation, afterFormation: phased.afterFormation, rules: readmeDefaultRules })
