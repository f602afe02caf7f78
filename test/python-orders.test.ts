/**
 * The Python client's handling of the coordinator's orders (Orders.take and Orders.wait, python/cohort/_relay.py),
 * without torch or a launch: orders given one by one, and what the rank then knows, against literals.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

const SET_UP = `
import json, threading, time
from cohort._relay import Orders
orders = Orders()
def known():
    return {
        "welcome": orders.welcome, "epochs": {str(k): {"ranges": [list(r) for r in v["ranges"]], "ended": v["ended"]} for k, v in sorted(orders.epochs.items())},
        "finished": orders.finished, "saved": sorted(orders.saved), "group": orders.group, "stop": orders.stop_reason,
        "cut": sorted(orders.cut_asked), "answers": sorted(orders.store_answers),
    }
`

const run = (body: string) => {
  const ran = runPython(`${SET_UP}\n${body}`)
  expect(ran.stderr).toBe("")
  return JSON.parse(ran.stdout.trim())
}

describe("Orders: what each order tells the rank", () => {
  test("an epoch's plan, grown by a death, then ended; the training's end", () => {
    expect(run(`
orders.take({"_tag": "Welcome", "firstEpoch": 2})
orders.take({"_tag": "EpochStart", "epoch": 2, "ranges": [{"start": 0, "end": 4}]})
orders.take({"_tag": "EpochExtend", "epoch": 2, "ranges": [{"start": 10, "end": 12}, {"start": 20, "end": 21}]})
orders.take({"_tag": "EpochExtend", "epoch": 7, "ranges": [{"start": 0, "end": 1}]})
orders.take({"_tag": "EpochEnd", "epoch": 2})
orders.take({"_tag": "EpochEnd", "epoch": 9})
orders.take({"_tag": "CheckpointSaved", "epoch": 2})
orders.take({"_tag": "TrainingDone"})
print(json.dumps(known()))
`)).toEqual({
      welcome: { _tag: "Welcome", firstEpoch: 2 },
      // An extension or end of an epoch the rank was never given is no plan of its.
      epochs: { "2": { ranges: [[0, 4], [10, 12], [20, 21]], ended: true } },
      finished: true,
      saved: [2],
      group: null,
      stop: null,
      cut: [],
      answers: []
    })
  })

  test("groups: a newer generation replaces the one held, an older or equal one does not", () => {
    expect(run(`
orders.take({"_tag": "Group", "generation": 3, "members": [0, 1, 2]})
orders.take({"_tag": "Group", "generation": 2, "members": [0, 1, 2, 3]})
orders.take({"_tag": "Group", "generation": 3, "members": [9]})
first = orders.group["members"]
orders.take({"_tag": "Group", "generation": 4, "members": [0, 2]})
print(json.dumps([first, known()["group"]]))
`)).toEqual([
      [0, 1, 2],
      { _tag: "Group", generation: 4, members: [0, 2] }
    ])
  })

  test("a store answer is kept only while its call waits; a cut is asked by epoch; a stop says its reason", () => {
    expect(run(`
orders.store_pending.add(5)
orders.take({"_tag": "StoreAnswer", "id": 5, "value": "a"})
orders.take({"_tag": "StoreAnswer", "id": 6, "value": "b"})
orders.take({"_tag": "OfferCut", "epoch": 3})
orders.take({"_tag": "Stop", "reason": "max_failure exceeded"})
orders.take({"_tag": "SomethingNew", "epoch": 1})
print(json.dumps(known()))
`)).toEqual({
      welcome: null,
      epochs: {},
      finished: false,
      saved: [],
      group: null,
      stop: "max_failure exceeded",
      cut: [3],
      answers: [5]
    })
  })

  test("wait: true once ready (an order from another thread), false at its timeout, and a stop ends it", () => {
    expect(run(`
threading.Timer(0.05, lambda: orders.take({"_tag": "TrainingDone"})).start()
ready = orders.wait(lambda: orders.finished, 10)
timed_out = orders.wait(lambda: 2 in orders.saved, 0.05)
threading.Timer(0.05, lambda: orders.take({"_tag": "Stop", "reason": "stop"})).start()
stopped = orders.wait(lambda: 2 in orders.saved, 10)
through = orders.wait_through_stop(lambda: 2 in orders.saved, 0.05)
threading.Timer(0.05, lambda: orders.take({"_tag": "CheckpointSaved", "epoch": 2})).start()
after = orders.wait_through_stop(lambda: 2 in orders.saved, 10)
print(json.dumps([ready, timed_out, stopped, through, after]))
`)).toEqual([true, false, false, false, true])
  })
})
