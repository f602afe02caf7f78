/**
 * The `--events` file's lines through their Schema (RunEvents.ts): a line of
 * each kind, as the launcher writes it, decodes to the event it records;
 * lines another version could have written (or an edit broke) are refused
 * with one line saying where and what is wrong. Inputs and expectations are
 * literal text and values.
 */
import { describe, expect, test } from "bun:test"
import * as Either from "effect/Either"
import { decodeEventLine, type RunEvent } from "../src/launcher/view/RunEvents.ts"

/** One line of each kind and the event it is; keyed by kind, so a kind added without a line here does not compile. */
const lines: { readonly [Kind in RunEvent["event"]]: readonly [line: string, event: Extract<RunEvent, { event: Kind }>] } = {
  run_started: [
    `{"event":"run_started","at":1000,"run":"mlp","hosts":[{"host":"localhost","ranks":4}],"id":"mlp-4242","join":{"quorum":4,"start":"auto"}}`,
    { event: "run_started", at: 1000, run: "mlp", hosts: [{ host: "localhost", ranks: 4 }], id: "mlp-4242", join: { quorum: 4, start: "auto" } }
  ],
  listening: [`{"event":"listening","at":1001,"address":"127.0.0.1","port":41235}`, { event: "listening", at: 1001, address: "127.0.0.1", port: 41235 }],
  join_window: [
    `{"event":"join_window","at":1002,"windowRemainingMs":4000,"capRemainingMs":60000}`,
    { event: "join_window", at: 1002, windowRemainingMs: 4000, capRemainingMs: 60000 }
  ],
  host_joined: [`{"event":"host_joined","at":1003,"host":"localhost","ranks":[0,1]}`, { event: "host_joined", at: 1003, host: "localhost", ranks: [0, 1] }],
  join_rejected: [
    `{"event":"join_rejected","at":1004,"peer":"10.0.0.9:5000","reason":"bad key"}`,
    { event: "join_rejected", at: 1004, peer: "10.0.0.9:5000", reason: "bad key" }
  ],
  world_formed: [
    `{"event":"world_formed","at":1005,"world":2,"hosts":[{"host":"gpu-a","ranks":[0,1],"devices":["0","1"],"labels":["NVIDIA H200","NVIDIA H200"]}]}`,
    { event: "world_formed", at: 1005, world: 2, hosts: [{ host: "gpu-a", ranks: [0, 1], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] }] }
  ],
  world_grew: [
    `{"event":"world_grew","at":1006,"world":3,"host":"localhost","ranks":[2],"devices":["cpu"],"labels":["cpu"],"replaces":1}`,
    { event: "world_grew", at: 1006, world: 3, host: "localhost", ranks: [2], devices: ["cpu"], labels: ["cpu"], replaces: 1 }
  ],
  ranks_entered: [`{"event":"ranks_entered","at":1007,"ranks":[2],"epoch":3}`, { event: "ranks_entered", at: 1007, ranks: [2], epoch: 3 }],
  rank_started: [`{"event":"rank_started","at":1008,"rank":0,"pid":31337}`, { event: "rank_started", at: 1008, rank: 0, pid: 31337 }],
  cohort_formed: [`{"event":"cohort_formed","at":1009}`, { event: "cohort_formed", at: 1009 }],
  rank_exited: [
    `{"event":"rank_exited","at":1010,"rank":1,"exit":"signal SIGKILL","clean":false}`,
    { event: "rank_exited", at: 1010, rank: 1, exit: "signal SIGKILL", clean: false }
  ],
  rank_lost: [
    `{"event":"rank_lost","at":1011,"ranks":[1],"cause":"exited with signal SIGKILL","kind":"exit","rule":"drop-on-exit","diedAt":1009}`,
    { event: "rank_lost", at: 1011, ranks: [1], cause: "exited with signal SIGKILL", kind: "exit", rule: "drop-on-exit", diedAt: 1009 }
  ],
  rank_restarting: [`{"event":"rank_restarting","at":1012,"rank":1}`, { event: "rank_restarting", at: 1012, rank: 1 }],
  rule_matched: [
    `{"event":"rule_matched","at":1013,"rule":"oom","action":"restart","ranks":[1]}`,
    { event: "rule_matched", at: 1013, rule: "oom", action: "restart", ranks: [1] }
  ],
  work_moved: [`{"event":"work_moved","at":1014,"rank":1,"survivors":[0,2]}`, { event: "work_moved", at: 1014, rank: 1, survivors: [0, 2] }],
  survivors_stepped: [
    `{"event":"survivors_stepped","at":1015,"ranks":[1],"rank":0,"epoch":2}`,
    { event: "survivors_stepped", at: 1015, ranks: [1], rank: 0, epoch: 2 }
  ],
  death_recovered: [
    `{"event":"death_recovered","at":1016,"recoveredAt":1015,"rank":1,"how":"dropped","kind":null,"rule":null,"detectMs":2,"recoverMs":6}`,
    { event: "death_recovered", at: 1016, recoveredAt: 1015, rank: 1, how: "dropped", kind: null, rule: null, detectMs: 2, recoverMs: 6 }
  ],
  rank_running: [`{"event":"rank_running","at":1017,"rank":2}`, { event: "rank_running", at: 1017, rank: 2 }],
  decision: [
    `{"event":"decision","at":1018,"decision":"drop","detail":"rank 1 dropped; 2 ranks go on"}`,
    { event: "decision", at: 1018, decision: "drop", detail: "rank 1 dropped; 2 ranks go on" }
  ],
  host_gone: [
    `{"event":"host_gone","at":1019,"host":"gpu-b","reason":"its agent's link ended"}`,
    { event: "host_gone", at: 1019, host: "gpu-b", reason: "its agent's link ended" }
  ],
  progress: [
    `{"event":"progress","at":1020,"epoch":1,"epochs":5,"samplesDone":640,"datasetSize":20000,"samplesPerSec":null,"metrics":{"loss":0.25}}`,
    { event: "progress", at: 1020, epoch: 1, epochs: 5, samplesDone: 640, datasetSize: 20000, samplesPerSec: null, metrics: { loss: 0.25 } }
  ],
  rank_metrics: [
    `{"event":"rank_metrics","at":1021,"ranks":[{"rank":0,"metrics":{"loss":0.25,"val_acc":0.9}},{"rank":1,"metrics":{}}]}`,
    { event: "rank_metrics", at: 1021, ranks: [{ rank: 0, metrics: { loss: 0.25, val_acc: 0.9 } }, { rank: 1, metrics: {} }] }
  ],
  epoch_done: [
    // A diverged loss: JSON.stringify writes NaN as null.
    `{"event":"epoch_done","at":1021,"epoch":1,"epochs":5,"seconds":2.5,"samples":20000,"metrics":{"loss":null,"accuracy":0.9}}`,
    { event: "epoch_done", at: 1021, epoch: 1, epochs: 5, seconds: 2.5, samples: 20000, metrics: { loss: Number.NaN, accuracy: 0.9 } }
  ],
  checkpoint: [
    `{"event":"checkpoint","at":1022,"epoch":1,"path":"/tmp/ck/epoch-1.bin","reason":"epoch"}`,
    { event: "checkpoint", at: 1022, epoch: 1, path: "/tmp/ck/epoch-1.bin", reason: "epoch" }
  ],
  resources: [
    `{"event":"resources","at":1023,"host":"gpu-a","samples":[{"rank":0,"cpu":0.97,"rssBytes":851443712,"gpuMemoryBytes":null,"gpuUtilization":null}]}`,
    { event: "resources", at: 1023, host: "gpu-a", samples: [{ rank: 0, cpu: 0.97, rssBytes: 851443712, gpuMemoryBytes: null, gpuUtilization: null }] }
  ],
  phase: [`{"event":"phase","at":1024,"phase":"training"}`, { event: "phase", at: 1024, phase: "training" }],
  verdict: [
    `{"event":"verdict","at":1025,"outcome":"completed","exitCode":0,"summary":"completed (4 of 4 ranks)"}`,
    { event: "verdict", at: 1025, outcome: "completed", exitCode: 0, summary: "completed (4 of 4 ranks)" }
  ],
  cleanup_started: [
    `{"event":"cleanup_started","at":1026,"detail":"telling the hosts the run is over"}`,
    { event: "cleanup_started", at: 1026, detail: "telling the hosts the run is over" }
  ],
  cleanup_done: [`{"event":"cleanup_done","at":1027}`, { event: "cleanup_done", at: 1027 }]
}

const problemOf = (line: string): string => {
  const decoded = decodeEventLine(line)
  if (Either.isRight(decoded)) throw new Error(`decoded: ${JSON.stringify(decoded.right)}`)
  return decoded.left.problem
}

describe("a line of each kind decodes to the event it records", () => {
  test.each(Object.entries(lines))("%s", (_, [line, event]) => {
    expect(decodeEventLine(line)).toEqual(Either.right(event))
  })

  test("fields a later version adds are left out; the optional ones may be absent", () => {
    expect(decodeEventLine(`{"event":"cohort_formed","at":5,"epochMs":12}`)).toEqual(Either.right({ event: "cohort_formed", at: 5 }))
    expect(decodeEventLine(`{"event":"run_started","at":5,"run":"r","hosts":[]}`)).toEqual(Either.right({ event: "run_started", at: 5, run: "r", hosts: [] }))
  })
})

describe("a line that is not an event of this version: what is wrong, in a line", () => {
  test.each([
    [`not json`, `not JSON: JSON Parse error: Unexpected identifier "not"`],
    [``, `not JSON: JSON Parse error: Unexpected EOF`],
    [`[1,2]`, `Expected an object, actual [1,2]`],
    [`"rank_exited"`, `Expected an object, actual "rank_exited"`],
    [`{"at":5}`, `event: is missing`],
    [`{"event":"rank_exploded","at":5}`, `unknown event "rank_exploded"`],
    [`{"event":7,"at":5}`, `unknown event 7`],
    [`{"event":"rank_exited","at":5,"rank":1,"exit":"status 0"}`, `in a rank_exited event, clean: is missing`],
    [`{"event":"rank_exited","at":5,"rank":1,"exit":"status 0","clean":"yes"}`, `in a rank_exited event, clean: Expected boolean, actual "yes"`],
    [`{"event":"phase","at":5,"phase":"paused"}`, `in a phase event, phase: Expected "waiting" | "forming" | "training" | "done" | "failed", actual "paused"`],
    [
      `{"event":"world_formed","at":5,"world":1,"hosts":[{"host":"a","ranks":[0],"devices":["cpu"],"labels":[7]}]}`,
      `in a world_formed event, hosts[0].labels[0]: Expected string, actual 7`
    ],
    [
      `{"event":"resources","at":5,"host":"a","samples":[{"rank":0,"cpu":1,"rssBytes":2,"gpuMemoryBytes":"lots","gpuUtilization":null}]}`,
      `in a resources event, samples[0].gpuMemoryBytes: Expected number | null, actual "lots"`
    ],
    [`{"event":"rank_lost","at":5,"ranks":[1],"cause":"x","kind":null}`, `in a rank_lost event, kind: Expected string, actual null`],
    [`{"event":"run_started","at":5,"run":"r","hosts":[],"join":{"quorum":2,"start":"later"}}`, `in a run_started event, join.start: Expected "auto" | "manual" | "hybrid", actual "later"`]
  ])("%s", (line, problem) => {
    expect(problemOf(line)).toBe(problem)
  })

  test("the error says what to do", () => {
    const decoded = decodeEventLine(`{"event":"rank_exploded","at":5}`)
    expect(Either.isLeft(decoded) && decoded.left.message).toBe(
      `not a run event of this cohort version (unknown event "rank_exploded"); an events file written by another version is read with that version`
    )
  })
})
