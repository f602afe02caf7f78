/**
 * What the Python client says under -v, and what its reports' metrics may hold (python/cohort/_groups.py's
 * StepLines, _context.py's bounded_metrics and ctx.progress), without torch or a launch: a step line per step
 * and rank was a hundred lines for a tiny epoch, so under debug a rank says an epoch's first step, then at most
 * one line every 5 s (with the steps it stands for), then the epoch's end; under trace, every step. Its clock
 * is driven by hand. Expected lines and reports are literals.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

const STEPS = `
from cohort._groups import StepLines
now = [0.0]
lines = StepLines(every_s=5.0, clock=lambda: now[0])
# Epoch 1: a step every second for 12 s, then its end; epoch 2: two steps.
for second in range(12):
    now[0] = float(second)
    lines.step(1, f"rank 0 epoch 1 step at {second} s")
lines.epoch_end(0, 1)
for second in (20, 21):
    now[0] = float(second)
    lines.step(2, f"rank 0 epoch 2 step at {second} s")
lines.epoch_end(0, 2)
`

const stepLines = (level: string) => {
  const ran = runPython(STEPS, { COHORT_LOG_LEVEL: level })
  expect(ran.stdout).toBe("")
  return ran.stderr.split("\n").filter((line) => line !== "")
}

describe("the client's step lines under -v", () => {
  test("debug (-v): each epoch's first step, then one line per 5 s saying the steps it stands for, then the epoch's end", () => {
    expect(stepLines("debug")).toEqual([
      "cohort client: rank 0 epoch 1 step at 0 s",
      "cohort client: rank 0 epoch 1 step at 5 s (4 step(s) since the last line)",
      "cohort client: rank 0 epoch 1 step at 10 s (4 step(s) since the last line)",
      "cohort client: rank 0 epoch 1: every member saw its end after 12 step(s)",
      "cohort client: rank 0 epoch 2 step at 20 s",
      "cohort client: rank 0 epoch 2: every member saw its end after 2 step(s)"
    ])
  })

  test("trace: every step", () => {
    const lines = stepLines("trace")
    expect(lines.length).toBe(16)
    expect(lines.slice(0, 3)).toEqual([
      "cohort client: rank 0 epoch 1 step at 0 s",
      "cohort client: rank 0 epoch 1 step at 1 s",
      "cohort client: rank 0 epoch 1 step at 2 s"
    ])
  })

  test("info (no -v): nothing", () => {
    expect(stepLines("info")).toEqual([])
  })
})

const PROGRESS = `
import json
from cohort._context import Context, bounded_metrics
class Link:
    def __init__(self): self.reports = []
    def report(self, report): self.reports.append(report)
ctx = Context.__new__(Context)
ctx.rank, ctx._epoch, ctx._done, ctx._replaying, ctx._step_failed = 3, 1, 0, False, False
ctx._link, ctx._warned_metrics = Link(), set()
`

describe("ctx.progress(samples, **metrics): what is shown, and a warning once per name for the rest", () => {
  test("bounded_metrics: names of 1 to 64 characters, finite numbers, 16 at most, in the order given", () => {
    const ran = runPython(`${PROGRESS}
many = {f"m{i}": i for i in range(18)}
print(json.dumps([
    bounded_metrics({"loss": 0.5, "val_acc": 1, "x" * 64: 2.0}),
    bounded_metrics({"loss": float("nan"), "gain": float("inf"), "name": "high", "": 1.0, "y" * 65: 1.0}),
    bounded_metrics(many)[1],
]))`)
    expect(ran.stderr).toBe("")
    expect(JSON.parse(ran.stdout)).toEqual([
      [{ loss: 0.5, val_acc: 1, ["x".repeat(64)]: 2 }, []],
      [{}, [
        ["loss", "its value nan is not a finite number"],
        ["gain", "its value inf is not a finite number"],
        ["name", "its value 'high' is not a number"],
        ["", "its name has 0 characters (1 to 64)"],
        [`${"y".repeat(64)}…`, "its name has 65 characters (1 to 64)"]
      ]],
      [["m16", "a report shows at most 16 metrics"], ["m17", "a report shows at most 16 metrics"]]
    ])
  })

  test("a NaN loss is left out of the report (JSON has no NaN: the relay would close the link), said once; the samples still count", () => {
    const ran = runPython(`${PROGRESS}
ctx.progress(4, loss=float("nan"), val_acc=0.5)
ctx.progress(4, loss=float("nan"), val_acc=0.75)
ctx.progress(4, loss=0.25)
print(json.dumps(ctx._link.reports))`)
    expect(JSON.parse(ran.stdout)).toEqual([
      { _tag: "Progress", epoch: 1, done: 4, metrics: { val_acc: 0.5 } },
      { _tag: "Progress", epoch: 1, done: 8, metrics: { val_acc: 0.75 } },
      { _tag: "Progress", epoch: 1, done: 12, metrics: { loss: 0.25 } }
    ])
    expect(ran.stderr).toBe('cohort: ctx.progress() of rank 3 reported metric "loss": not shown, its value nan is not a finite number (said once per name)\n')
  })
})
