/**
 * The Python client's save on stop (Checkpoint.save after cohort.Stopped, python/cohort/_context.py), without
 * torch or a launch: a Context over fake orders and a fake link that records its reports. A stopped rank may save
 * once: at the members' agreed boundary mid-epoch that save is its cut (CutOffer with the state), otherwise its
 * offer for the epoch just trained; a second save raises Stopped again, and the reason is said once.
 * Expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

const SET_UP = `
import json
from cohort._context import Context, TERM_REASON
from cohort._errors import Stopped
from cohort._relay import Orders

class Link:
    def __init__(self, orders):
        self.reports, self.orders = [], orders
    def close(self):
        pass
    def report(self, report):
        self.reports.append(report)
        # The coordinator answers every CheckpointSave at once.
        if report["_tag"] == "CheckpointSave":
            self.orders.take({"_tag": "CheckpointSaved", "epoch": report["epoch"]})

class Envelope:
    run, host, rank, local_rank, local_world_size, restart_count = "r", "localhost", 1, 1, 2, 0
    backend, dataset_size, epochs, heartbeat_timeout_s, checkpoint_pickle = "cpu_sync", 10, 2, 6.0, False

orders = Orders()
orders.welcome = {"firstEpoch": 1}
link = Link(orders)
ctx = Context(Envelope(), orders, link, None)
`

const run = (body: string) => {
  const ran = runPython(`${SET_UP}\n${body}`)
  expect(ran.stderr).toBe("")
  return ran.stdout.trim().split("\n")
}

describe("a save in `except cohort.Stopped`", () => {
  test("at the agreed boundary mid-epoch: the save is the cut, sent with the done work; a second save raises Stopped", () => {
    const lines = run(`
ctx._epoch, ctx._done, ctx._rounds = 2, 384, 3
try:
    ctx._stop_owing_cut(2)
except Stopped as stopped:
    print(stopped)
    ctx.checkpoint.save({"step": 3})
print(json.dumps([{k: v for k, v in r.items() if k != "state"} for r in link.reports]))
print("state" in link.reports[0])
try:
    ctx.checkpoint.save({"step": 3})
except Stopped as again:
    print("again:", again)
ctx._settle_owed_cut()
print(len(link.reports))
`)
    expect(lines).toEqual([
      "cohort is stopping this rank: the run is stopping mid-epoch (a save in `except cohort.Stopped` keeps the epoch's progress)",
      '[{"_tag": "CutOffer", "epoch": 2, "done": 384, "rounds": 3, "steady": true}]',
      "True",
      "again: cohort is stopping this rank: the run is stopping mid-epoch (a save in `except cohort.Stopped` keeps the epoch's progress)",
      "1"
    ])
  })

  test("stopped outside the steps (SIGTERM after the epoch): the save is the epoch's offer, answered, and it returns", () => {
    const lines = run(`
ctx._epoch = 1
try:
    ctx._stop(TERM_REASON)
except Stopped as stopped:
    print(stopped)
    ctx.checkpoint.save({"epoch": 1})
print(json.dumps([{k: v for k, v in r.items() if k != "state"} for r in link.reports]))
print(sorted(orders.saved))
`)
    expect(lines).toEqual([
      "cohort is stopping this rank: it received SIGTERM",
      '[{"_tag": "CheckpointSave", "epoch": 1}]',
      "[1]"
    ])
  })

  test("a rank that stopped owing its cut and saved nothing answers it without a state at exit", () => {
    const lines = run(`
ctx._epoch, ctx._done, ctx._rounds = 1, 0, 0
try:
    ctx._stop_owing_cut(1)
except Stopped:
    pass
ctx._settle_owed_cut()
ctx._settle_owed_cut()
print(json.dumps(link.reports))
`)
    expect(lines).toEqual(['[{"_tag": "CutOffer", "epoch": 1, "done": 0, "rounds": 0, "steady": true}]'])
  })

  test("a SIGTERM that comes while the rank saves after Stopped does not cut the save short", () => {
    const lines = run(`
import os, signal, cohort
cohort._install_stops(ctx, orders)
ctx._epoch, ctx._done, ctx._rounds = 2, 128, 1
try:
    ctx._stop_owing_cut(2)
except Stopped:
    os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's, after the cut's order
    ctx.checkpoint.save({"step": 1})
print(json.dumps([[r["_tag"], "state" in r] for r in link.reports]), flush=True)
`)
    expect(lines).toEqual(['[["CutOffer", true]]'])
  })

  test("the stop's reason from cohort wins over SIGTERM's, and is said once", () => {
    const lines = run(`
orders.take({"_tag": "Stop", "reason": "max_failure exceeded: 2/4 ranks dead, threshold 1"})
try:
    ctx._stop(TERM_REASON)
except Stopped as stopped:
    print(stopped)
    print(stopped.code)
`)
    expect(lines).toEqual(["cohort is stopping this rank: max_failure exceeded: 2/4 ranks dead, threshold 1", "143"])
  })
})
