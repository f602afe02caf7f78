/**
 * The failure rules a file gets when it says none and its after_formation is elastic, written out here
 * from the README's words, not taken from the code; tests that decode a policy expect these two:
 * - `member-lost` (issue 35): after formation, a secondary death (`peer_lost`) with exit status 75, a Python
 *   rank that left cohort.MemberLost uncaught, is restarted, not counted: `{ restart: { max_restarts: 1000,
 *   within: 10m, backoff: { initial: 0s, max: 30s, factor: 2, jitter: 0 }, scope: one } }`;
 * - `repeated-error` (issue 34): after formation, the same error on a second rank, neither death secondary,
 *   is a bug every rank will meet, and the run fails with it: `{ same_error_on: 2, phase: after_formation }`.
 */
import { ExitCodes, FailRun, FailureRule, RuleWhen } from "../../src/kernel/policy/FailureRules.ts"
import { Backoff, type Phased, Phased as PhasedClass, Restart } from "../../src/kernel/policy/Strategy.ts"

export const readmeDefaultRules: ReadonlyArray<FailureRule> = [
  new FailureRule({
    name: "member-lost",
    when: new RuleWhen({ causes: ["peer_lost"], exitCodes: new ExitCodes({ op: "in", values: [75] }), phase: "after_formation" }),
    then: new Restart({ maxRestarts: 1_000, within: 600_000, backoff: new Backoff({ initial: 0, max: 30_000, factor: 2, jitter: 0 }), scope: "one" })
  }),
  new FailureRule({ name: "repeated-error", when: new RuleWhen({ sameErrorOn: 2, phase: "after_formation" }), then: new FailRun() })
]

/** A phased strategy with an elastic after_formation, as a file without rules decodes to. */
export const withDefaultRules = (phased: Phased): Phased =>
  new PhasedClass({ beforeFormation: phased.beforeFormation, afterFormation: phased.afterFormation, rules: readmeDefaultRules })
