/**
 * What scripts/mutate-python.py found untested in the Python client's envelope (python/cohort/_envelope.py):
 * the values read_envelope gives (every other test reads only its refusals), the accepted side of the slot's
 * bound, the defaults of COHORT_RESTART_COUNT and checkpointPickle, death_patience_s, and the refusals that
 * fell through to a traceback when their check was dropped. Without torch, with the python3 on PATH; the
 * expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import { pythonEnvelope, runPython } from "./support/python-client.ts"

/** Each environment's read_envelope, one JSON line per case: the Envelope's fields and patience, or the error. */
const readEach = (environs: ReadonlyArray<Record<string, string>>) => {
  const ran = runPython(`
import dataclasses, json, os
from cohort import CohortError
from cohort._envelope import death_patience_s, read_envelope
for environ in json.loads(os.environ["CASES"]):
    try:
        envelope = read_envelope(environ)
        print(json.dumps({"envelope": dataclasses.asdict(envelope), "patience_s": death_patience_s(envelope)}))
    except CohortError as error:
        print(json.dumps({"error": str(error)}))
`, { CASES: JSON.stringify(environs) })
  expect(ran.stderr).toBe("")
  return ran.stdout.trim().split("\n").map((line) => JSON.parse(line))
}

const hostOfTwo = (changes: Record<string, unknown> = {}) =>
  pythonEnvelope({ ranks: [4, 7], groupRank: 3, worldSize: 8, heartbeatTimeoutMs: 1500, ...changes })

describe("read_envelope: what the rank is told", () => {
  test("the second slot of a host, its heartbeat timeout in seconds, and the defaults", () => {
    expect(readEach([{ COHORT_RANK_ENVELOPE: hostOfTwo(), COHORT_LOCAL_SLOT: "1" }])).toEqual([
      {
        envelope: {
          run: "r",
          host: "localhost",
          rank: 7,
          local_rank: 1,
          local_world_size: 2,
          group_rank: 3,
          world_size: 8,
          backend: "cpu_sync",
          socket: "/nonexistent/relay.sock",
          dir: "/nonexistent",
          dataset_size: 10,
          epochs: 1,
          heartbeat_timeout_s: 1.5,
          controller_host: "127.0.0.1",
          controller_port: 29400,
          // No COHORT_RESTART_COUNT: the first run; no checkpointPickle: states never travel as a pickle.
          restart_count: 0,
          checkpoint_pickle: false
        },
        // Twice the heartbeat timeout, and 5 s more.
        patience_s: 8
      }
    ])
  })

  test("a restart's count, a count that is not a number, and the pickle opt-in", () => {
    const picked = readEach([
      { COHORT_RANK_ENVELOPE: hostOfTwo(), COHORT_LOCAL_SLOT: "0", COHORT_RESTART_COUNT: "3" },
      { COHORT_RANK_ENVELOPE: hostOfTwo(), COHORT_LOCAL_SLOT: "0", COHORT_RESTART_COUNT: "x" },
      { COHORT_RANK_ENVELOPE: hostOfTwo({ checkpointPickle: true }), COHORT_LOCAL_SLOT: "0" }
    ]).map(({ envelope }) => [envelope.restart_count, envelope.checkpoint_pickle])
    expect(picked).toEqual([[3, false], [0, false], [0, true]])
  })
})

describe("read_envelope: refusals in one line, not a traceback", () => {
  const invalid = "COHORT_RANK_ENVELOPE is not a valid cohort envelope"
  const byHand = "it is set by cohort for its own processes, do not set it by hand"
  const cases: ReadonlyArray<[string, Record<string, string>, string]> = [
    ["an envelope that is JSON but not an object", { COHORT_RANK_ENVELOPE: "[2]", COHORT_LOCAL_SLOT: "0" }, `${invalid}: expected a JSON object`],
    [
      "no COHORT_LOCAL_SLOT",
      { COHORT_RANK_ENVELOPE: hostOfTwo() },
      "cohort.init() runs inside a rank that cohort started, and COHORT_LOCAL_SLOT is not set: launch the script with " +
        "`bun run launch cluster.yml` (job.command: [python3, your_script.py], job.dataset_size: the samples of an epoch), or run it without cohort.init()"
    ],
    ["a slot below the host's first", { COHORT_RANK_ENVELOPE: hostOfTwo(), COHORT_LOCAL_SLOT: "-1" }, "COHORT_LOCAL_SLOT -1 is out of range: host localhost has 2 slot(s)"],
    ["a whole-number field given as true", { COHORT_RANK_ENVELOPE: hostOfTwo({ groupRank: true }), COHORT_LOCAL_SLOT: "0" }, `${invalid}: groupRank is missing or not a int; ${byHand}`],
    [
      "a pickle opt-in that is not true or false",
      { COHORT_RANK_ENVELOPE: hostOfTwo({ checkpointPickle: "yes" }), COHORT_LOCAL_SLOT: "0" },
      `${invalid}: checkpointPickle is not true or false; ${byHand}`
    ]
  ]
  test("each case's line", () => {
    expect(readEach(cases.map(([, environ]) => environ))).toEqual(cases.map(([, , line]) => ({ error: line })))
  })
})
