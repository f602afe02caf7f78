/**
 * Role detection: one clear role, or a loud error naming every variable.
 */
import { expect, test } from "bun:test"
import * as Either from "effect/Either"
import { detectRole } from "../src/kernel/Role.ts"

test("each role from its variables; none is the user's own command", () => {
  expect(detectRole({})).toEqual(Either.right({ _tag: "User" }))
  expect(detectRole({ COHORT_AGENT_SPEC: "a" })).toEqual(Either.right({ _tag: "Agent", spec: "a" }))
  expect(detectRole({ COHORT_RELAY_SPEC: "r" })).toEqual(Either.right({ _tag: "Relay", spec: "r" }))
  expect(detectRole({ COHORT_RANK_ENVELOPE: "e", COHORT_LOCAL_SLOT: "2" })).toEqual(
    Either.right({ _tag: "Rank", envelope: "e", slot: 2 })
  )
})

test.each([
  [{ COHORT_AGENT_SPEC: "a", COHORT_RELAY_SPEC: "r" }, "COHORT_AGENT_SPEC=set, COHORT_RELAY_SPEC=set, COHORT_RANK_ENVELOPE=unset, COHORT_LOCAL_SLOT=unset"],
  [{ COHORT_RANK_ENVELOPE: "e" }, "COHORT_AGENT_SPEC=unset, COHORT_RELAY_SPEC=unset, COHORT_RANK_ENVELOPE=set, COHORT_LOCAL_SLOT=unset"],
  [{ COHORT_LOCAL_SLOT: "0" }, "COHORT_RANK_ENVELOPE=unset, COHORT_LOCAL_SLOT=set"],
  [{ COHORT_AGENT_SPEC: "a", COHORT_RANK_ENVELOPE: "e", COHORT_LOCAL_SLOT: "0" }, "COHORT_AGENT_SPEC=set, COHORT_RELAY_SPEC=unset, COHORT_RANK_ENVELOPE=set, COHORT_LOCAL_SLOT=set"],
  [{ COHORT_RANK_ENVELOPE: "e", COHORT_LOCAL_SLOT: "two" }, `COHORT_LOCAL_SLOT must be a slot number ≥ 0, got "two"`]
])("refuses %p", (env, named) => {
  const out = detectRole(env)
  expect(Either.isLeft(out)).toBe(true)
  if (Either.isLeft(out)) {
    expect(out.left.message).toContain(named)
    expect(out.left.message).toStartWith("inconsistent role variables:")
  }
})
