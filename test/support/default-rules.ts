/**
 * The failure rules a file gets when it says none and its after_formation is elastic, written out here
 * from the documented words (issue 34: after formation, the same error on a second rank, neither death
 * secondary, is a bug every rank will meet, and the run fails with it; one rank's error, or a death that
 * only followed another's, stays elastic), not taken from the code: tests that decode a policy expect
 * this one rule, `{ name: repeated-error, when: { same_error_on: 2, phase: after_formation }, then: fail }`.
 */
import { FailRun, FailureRule, RuleWhen } from "../../src/actors/FailureRules.ts"
import { type Phased, Phased as PhasedClass } from "../../src/actors/Strategy.ts"

export const readmeDefaultRules: ReadonlyArray<FailureRule> = [
  new FailureRule({ name: "repeated-error", when: new RuleWhen({ sameErrorOn: 2, phase: "after_formation" }), then: new FailRun() })
]

/** A phased strategy with an elastic after_formation, as a file without rules decodes to. */
export const withDefaultRules = (phased: Phased): Phased =>
  new PhasedClass({ beforeFormation: phased.beforeFormation, afterFormation: phased.afterFormation, rules: readmeDefaultRules })
