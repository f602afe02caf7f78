/**
 * torchrun's restarts for a world fixed at formation (issue 38 part 4): for a
 * `command:` job without `dataset_size`, a restart whose scope the file leaves
 * out restarts the group; a written `scope: one` is kept, with a note at its
 * place. Jobs that can take a rank back keep per-rank restarts. Literal files
 * in, the decoded scope and the notes out.
 *
 * Pure parsing, no processes: this file is in the fast tier.
 */
import { describe, expect, test } from "bun:test"
import { loadWithWarnings } from "./support/config-load.ts"

const workers = "workers:\n  - { host: localhost, devices: 2 }\n"
const torchJob = "job: { command: [python3, train.py] }\n"
const clientJob = "job: { command: [python3, train.py], dataset_size: 1000 }\n"
const entryJob = "job: { entry: examples/train.ts, dataset_size: 1000 }\n"

/** The scopes of both phases' restarts (undefined where the phase is no restart), and the warnings said. */
const load = async (text: string) => {
  const { config, warnings } = await loadWithWarnings(text)
  const { afterFormation, beforeFormation } = config.failurePolicy.strategy
  const scope = (strategy: typeof afterFormation) => (strategy._tag === "Restart" ? strategy.scope : undefined)
  return { before: scope(beforeFormation), after: scope(afterFormation), afterFormation, warnings }
}

const scopeOneNote =
  "scope: one restarts a rank on its own into a torch world fixed at formation (a command job without dataset_size): " +
  "its peers' collectives then fail and are restarted one by one; scope: all restarts the group from your snapshot, as torchrun does"

describe("a command job without dataset_size: its restarts restart the group", () => {
  test.each([
    ["the word restart", "failure_policy: { after_formation: restart }\n"],
    ["a restart with max_restarts only (what --policy restart:5 writes)", "failure_policy: { after_formation: { restart: { max_restarts: 5 } } }\n"],
    ["a restart with its backoff but no scope", "failure_policy:\n  after_formation:\n    restart: { max_restarts: 2, backoff: { initial: 100ms } }\n"]
  ])("%s: scope all", async (_, policy) => {
    const loaded = await load(`${workers}${torchJob}${policy}`)
    expect([loaded.before, loaded.after, loaded.warnings]).toEqual([undefined, "all", []])
  })

  test("the rest of the restart is the file's: max_restarts, within and backoff are untouched", async () => {
    const { afterFormation } = await load(`${workers}${torchJob}failure_policy: { after_formation: { restart: { max_restarts: 5, within: 2m } } }\n`)
    expect(afterFormation._tag === "Restart" && [afterFormation.maxRestarts, afterFormation.within, afterFormation.backoff.initial]).toEqual([5, 120_000, 1_000])
  })

  test("a restart before formation too", async () => {
    const loaded = await load(`${workers}${torchJob}failure_policy: { before_formation: restart, after_formation: kill_all }\n`)
    expect([loaded.before, loaded.after]).toEqual(["all", undefined])
  })

  test("scope: all written: kept, nothing said", async () => {
    const loaded = await load(`${workers}${torchJob}failure_policy: { after_formation: { restart: { scope: all } } }\n`)
    expect([loaded.after, loaded.warnings]).toEqual(["all", []])
  })

  test("scope: one written: kept, and said at its place with what it costs", async () => {
    const loaded = await load(`${workers}${torchJob}failure_policy:\n  after_formation:\n    restart: { max_restarts: 3, scope: one }\n`)
    expect([loaded.after, loaded.warnings]).toEqual([
      "one",
      [`cluster.yml: failure_policy.after_formation.restart.scope (line 6, col 33): ${scopeOneNote}`]
    ])
  })

  test("scope: one written before formation: kept there, and said at its own place", async () => {
    const loaded = await load(`${workers}${torchJob}failure_policy:\n  before_formation: { restart: { scope: one } }\n  after_formation: kill_all\n`)
    expect([loaded.before, loaded.after, loaded.warnings]).toEqual([
      "one",
      undefined,
      [`cluster.yml: failure_policy.before_formation.restart.scope (line 5, col 34): ${scopeOneNote}`]
    ])
  })

  test("no restart at all: the policy is what it was (elastic by default)", async () => {
    const loaded = await load(`${workers}${torchJob}`)
    expect([loaded.before, loaded.after, loaded.afterFormation._tag, loaded.warnings]).toEqual([undefined, undefined, "Elastic", []])
  })
})

describe("jobs that take a rank back keep per-rank restarts", () => {
  test.each([
    ["a command job on the Python client (dataset_size)", clientJob],
    ["an entry job", entryJob]
  ])("%s: the word restart is scope one, and scope: one is said nowhere", async (_, job) => {
    expect((await load(`${workers}${job}failure_policy: { after_formation: restart }\n`)).after).toBe("one")
    const written = await load(`${workers}${job}failure_policy: { after_formation: { restart: { scope: one } } }\n`)
    expect([written.after, written.warnings]).toEqual(["one", []])
  })
})
