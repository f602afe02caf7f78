/**
 * The failure policy as `--dry-run` shows it: for each cause of death and each phase, what happens
 * and which rule decides it. A cell lists the rules that may apply to such a death, in order, each
 * with what it still asks of the death (`exit_code 1, 2`, `hosts spot-*`), up to the first that
 * takes every such death; if none does, the phase's strategy has the rest (`else elastic`).
 */
import { actionName, type Cause, causes, codesText, type FailureRule, type PolicyPhase, type RuleAction, type RuleWhen } from "./FailureRules.ts"
import { formatDuration } from "../../config/reading/Duration.ts"
import type { Simple, Strategy } from "./Strategy.ts"

/**
 * The causes whose deaths carry an exit status, those that carry a signal, and those that may have a
 * failure signature (a rank's own end; a secondary death has one, but is never counted as a repeat).
 */
const withExitCode: ReadonlyArray<Cause> = ["exit", "exception", "peer_lost"]
const withSignal: ReadonlyArray<Cause> = ["signal", "oom"]
const withSignature: ReadonlyArray<Cause> = ["exit", "exception", "nccl"]

/** A strategy in a few words: `kill_all`, `elastic (max_failure 25%)`, `elastic (no limit)`, `restart (3 within 10m)`. */
export const strategyWords = (strategy: Simple): string => {
  switch (strategy._tag) {
    case "KillAll":
      return strategy.grace === 0 ? "kill_all (no grace)" : "kill_all"
    case "Elastic":
      return strategy.maxFailure === undefined
        ? "elastic (no limit)"
        : `elastic (max_failure ${strategy.maxFailure._tag === "Count" ? strategy.maxFailure.n : `${strategy.maxFailure.p}%`})`
    case "Restart":
      return `restart (${strategy.maxRestarts} within ${formatDuration(strategy.within)}${strategy.scope === "all" ? ", all" : ""})`
  }
}

/** A rule's action in the table: a restart with its intensity. */
const actionWords = (action: RuleAction): string =>
  action._tag === "Restart" ? `restart (${action.maxRestarts} within ${formatDuration(action.within)})` : actionName(action)

/**
 * What a rule still asks of a death of this cause in this phase: undefined when it can never match one
 * (another cause, another phase, an exit status asked of a death that has none), [] when it takes all.
 */
const remainingConditions = (when: RuleWhen, cause: Cause, phase: PolicyPhase): ReadonlyArray<string> | undefined => {
  if (when.phase !== undefined && when.phase !== phase) return undefined
  if (when.causes !== undefined && !when.causes.includes(cause)) return undefined
  if (when.exitCodes !== undefined && !withExitCode.includes(cause)) return undefined
  if (when.signals !== undefined && !withSignal.includes(cause)) return undefined
  if (when.sameErrorOn !== undefined && !withSignature.includes(cause)) return undefined
  return [
    ...(when.exitCodes === undefined ? [] : [`exit_code ${when.exitCodes.op === "in" ? "" : "not "}${codesText(when.exitCodes.values)}`]),
    ...(when.signals === undefined ? [] : [`signal ${when.signals.join(", ")}`]),
    ...(when.ranks === undefined ? [] : [`ranks ${when.ranks.join(", ")}`]),
    ...(when.hosts === undefined ? [] : [`hosts ${when.hosts.join(", ")}`]),
    ...(when.log === undefined ? [] : [`log /${when.log}/`]),
    ...(when.sameErrorOn === undefined ? [] : [`the same error on ${when.sameErrorOn} ranks`])
  ]
}

/** One cell: the rules that may decide, in order, then the strategy for what none of them takes. */
export const policyCell = (rules: ReadonlyArray<FailureRule>, fallback: Simple, cause: Cause, phase: PolicyPhase): string => {
  const parts: Array<string> = []
  for (const rule of rules) {
    const conditions = remainingConditions(rule.when, cause, phase)
    if (conditions === undefined) continue
    const decision = `${actionWords(rule.then)} [${rule.name}]`
    if (conditions.length === 0) return [...parts, parts.length === 0 ? decision : `else ${decision}`].join("; ")
    parts.push(`${conditions.join(" and ")}: ${decision}`)
  }
  const rest = strategyWords(fallback)
  return parts.length === 0 ? rest : [...parts, `else ${rest}`].join("; ")
}

/**
 * The table's lines: a header, then for each cause a row per phase (one row, `both`, when the two
 * phases treat it alike).
 */
export const policyTable = (strategy: Strategy): ReadonlyArray<string> => {
  const rules = strategy._tag === "Phased" ? strategy.rules ?? [] : []
  const before = strategy._tag === "Phased" ? strategy.beforeFormation : strategy
  const after = strategy._tag === "Phased" ? strategy.afterFormation : strategy
  const rows = causes.flatMap((cause) => {
    const early = policyCell(rules, before, cause, "before_formation")
    const late = policyCell(rules, after, cause, "after_formation")
    return early === late ? [[cause, "both", early]] : [[cause, "before", early], [cause, "after", late]]
  })
  const header = ["cause", "formation", "what happens"]
  const widths = [0, 1].map((column) => Math.max(header[column]!.length, ...rows.map((row) => row[column]!.length)))
  const line = (row: ReadonlyArray<string>) => `${row[0]!.padEnd(widths[0]!)}  ${row[1]!.padEnd(widths[1]!)}  ${row[2]!}`.trimEnd()
  return [line(header), ...rows.map(line)]
}
