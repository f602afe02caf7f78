/**
 * The Python client's own parts, without torch and without a launch: the one-line errors a user sees when the
 * script runs outside cohort, with a broken environment, or with another version's client; how a plan's ranges
 * are cut into batches; and the relay's frames read back from a stream cut anywhere. Run with the python3 on
 * PATH (any 3.9+: none of this imports torch). Expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import { pythonEnvelope, runPython } from "./support/python-client.ts"

const initOnly = "import cohort\ncohort.init()"

const envelope = pythonEnvelope

describe("cohort.init() says what is wrong in one line, without a traceback", () => {
  const cases: ReadonlyArray<[string, Record<string, string>, string]> = [
    [
      "outside cohort",
      {},
      "cohort: cohort.init() runs inside a rank that cohort started, and COHORT_RANK_ENVELOPE is not set: launch the script with " +
        "`bun run launch cluster.yml` (job.command: [python3, your_script.py], job.dataset_size: the samples of an epoch), or run it without cohort.init()"
    ],
    [
      "an envelope that is not JSON",
      { COHORT_RANK_ENVELOPE: "{ranks: [0", COHORT_LOCAL_SLOT: "0" },
      "cohort: COHORT_RANK_ENVELOPE is not JSON: it is set by cohort for its own processes; do not set it by hand"
    ],
    [
      "a newer version's launcher",
      { COHORT_RANK_ENVELOPE: envelope({ protocol: 3 }), COHORT_LOCAL_SLOT: "0" },
      "cohort: this cohort speaks version 3 of the rank-relay protocol and this Python client speaks 2: use the client that comes with " +
        "the launcher (its python/ folder, which cohort puts on PYTHONPATH), not another copy"
    ],
    [
      "an older version's launcher (version 1: its groups met at a TCPStore on a rank)",
      { COHORT_RANK_ENVELOPE: envelope({ protocol: 1 }), COHORT_LOCAL_SLOT: "0" },
      "cohort: this cohort speaks version 1 of the rank-relay protocol and this Python client speaks 2: use the client that comes with " +
        "the launcher (its python/ folder, which cohort puts on PYTHONPATH), not another copy"
    ],
    [
      "an envelope from before versions",
      { COHORT_RANK_ENVELOPE: envelope({ protocol: undefined }), COHORT_LOCAL_SLOT: "0" },
      "cohort: the cohort that started this rank names no rank-relay protocol version (it is older than this Python client, which speaks 2): " +
        "use the client that comes with the launcher (its python/ folder)"
    ],
    // (JSON has no 2.0 apart from 2: JSON.stringify writes 2.0 as 2, which is version 2.)
    ...([["2.5", 2.5], ['"2"', "2"], ["true", true], ["[2]", [2]]] as const).map(([shown, protocol]): [string, Record<string, string>, string] => [
      `a protocol version of the wrong type (${shown})`,
      { COHORT_RANK_ENVELOPE: envelope({ protocol }), COHORT_LOCAL_SLOT: "0" },
      `cohort: COHORT_RANK_ENVELOPE is not a valid cohort envelope: protocol is ${shown}, not a whole number; ` +
        "it is set by cohort for its own processes, do not set it by hand"
    ]),
    [
      "a backend the client does not offer",
      { COHORT_RANK_ENVELOPE: envelope({ backend: "cpu_cadence" }), COHORT_LOCAL_SLOT: "0" },
      "cohort: job.backend is cpu_cadence: the Python client averages the gradients at every step, which is cpu_sync (gloo) or nccl; " +
        "local steps between averages (cpu_cadence, cpu_async) are for entry: jobs only"
    ],
    [
      "a job without a dataset (no coordinator to join)",
      { COHORT_RANK_ENVELOPE: envelope({ datasetSize: 0 }), COHORT_LOCAL_SLOT: "0" },
      "cohort: cohort.init() needs job.dataset_size in the cluster file, or --set job.dataset_size=N on the command line (the samples an epoch covers): without it cohort runs the " +
        "command as torchrun would, with no coordinator to join; use torch.distributed's own env:// init there"
    ],
    [
      "a slot past the host's ranks",
      { COHORT_RANK_ENVELOPE: envelope(), COHORT_LOCAL_SLOT: "2" },
      "cohort: COHORT_LOCAL_SLOT 2 is out of range: host localhost has 2 slot(s)"
    ],
    [
      "a slot that is not a number",
      { COHORT_RANK_ENVELOPE: envelope(), COHORT_LOCAL_SLOT: "one" },
      "cohort: COHORT_LOCAL_SLOT is 'one', not a whole number: it is set by cohort; do not set it by hand"
    ],
    [
      "an envelope missing a field",
      { COHORT_RANK_ENVELOPE: envelope({ socket: undefined }), COHORT_LOCAL_SLOT: "0" },
      "cohort: COHORT_RANK_ENVELOPE is not a valid cohort envelope: socket is missing or not a str; it is set by cohort for its own processes, do not set it by hand"
    ]
  ]
  for (const [name, env, line] of cases) {
    test(name, () => {
      const ran = runPython(initOnly, env)
      expect(ran.code).toBe(1)
      expect(ran.stderr).toBe(`${line}\n`)
    })
  }
})

describe("the client's pure parts", () => {
  test("batches are cut from the ranges in plan order, skipping what was handed out", () => {
    const ran = runPython(
      [
        "from cohort._context import take",
        "r = [(0, 5), (10, 13)]",
        "print(take(r, 0, 4)); print(take(r, 3, 4)); print(take(r, 7, 4)); print(take(r, 8, 4)); print(take([], 0, 4))"
      ].join("\n")
    )
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual(["[0, 1, 2, 3]", "[3, 4, 10, 11]", "[12]", "[]", "[]"])
  })

  test("frames cut anywhere are read back whole, in order; an oversized length is refused", () => {
    const ran = runPython(
      [
        "from cohort._relay import FrameReader, encode_frame",
        "from cohort import CohortError",
        "data = encode_frame({'t': 'order', 'order': {'_tag': 'EpochEnd', 'epoch': 3}}) + encode_frame({'t': 'refused', 'reason': 'x'})",
        "reader = FrameReader(); out = []",
        "for i in range(len(data)): out += reader.push(data[i:i + 1])",
        "print(out)",
        "try: FrameReader().push(b'\\xff\\xff\\xff\\x7f')",
        "except CohortError as e: print(e)"
      ].join("\n")
    )
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual([
      "[{'t': 'order', 'order': {'_tag': 'EpochEnd', 'epoch': 3}}, {'t': 'refused', 'reason': 'x'}]",
      "the relay announced a frame of 2147483647 bytes, more than 268435456"
    ])
  })
})

describe("backend: nccl on a torch without NCCL (issue 35, part 6)", () => {
  const torchPython = "/usr/bin/python3"
  const hasTorch = Bun.spawnSync([torchPython, "-c", "import torch.distributed as d; raise SystemExit(0 if not d.is_nccl_available() else 3)"]).exitCode === 0
  test.skipIf(!hasTorch)("cohort.init() says it in one line, before reaching for the relay, in well under 2 s", () => {
    const started = performance.now()
    const ran = Bun.spawnSync([torchPython, "-c", initOnly], {
      env: { PATH: "/usr/bin:/bin", PYTHONPATH: `${import.meta.dir}/../python`, COHORT_RANK_ENVELOPE: envelope({ backend: "nccl" }), COHORT_LOCAL_SLOT: "0" },
      stdout: "pipe",
      stderr: "pipe"
    })
    const seconds = (performance.now() - started) / 1000
    expect(ran.stderr.toString().trim()).toMatch(
      /^cohort: job\.backend is nccl, but this torch \(\d+\.\d+[^)]*\) was built without NCCL: install a CUDA build of torch on this host, or set job\.backend: cpu_sync$/
    )
    expect(ran.exitCode).toBe(1)
    // torch's import is most of it (1–3 s on a loaded machine); it used to take a failed rendezvous, 67 s.
    expect(seconds).toBeLessThan(15)
  }, 30_000)
})
