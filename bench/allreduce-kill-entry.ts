/**
 * Redistribution rank program for a cohort `entry:` job (bench/allreduce.ts):
 * a training loop whose steps are a sleep and a small gradient all-reduce,
 * so an epoch lasts seconds and a rank can be killed in the middle of one.
 *
 * args (`key=value`, all optional): `batch=250` samples per step, `sleep=4`
 * ms per step (the "compute"), `grad=1024` floats all-reduced per step
 * (weighted by the batch, as examples/train.ts does).
 *
 * It prints JSON lines (the benchmark reads them from the run's output):
 *   {"kill":"pid","rank":R,"pid":P}                        at start
 *   {"kill":"epoch","rank":R,"epoch":E,"t":T}              when an epoch's plan arrives
 *   {"kill":"grew","rank":R,"epoch":E,"ranges":K,"t":T,"gap":G,"arrived":A}
 *                                                          when `plan.ranges` has grown
 * Times are wall-clock ms (`performance.timeOrigin + performance.now()`),
 * comparable across the processes of one machine.
 *
 * How growth is seen. `t` is what user code can observe: `plan.ranges.length`
 * is checked every 1 ms by a timer, and after every await of the loop, so
 * `t` is late by at most the time since the previous check; that bound is
 * printed as `gap` (ms). `arrived` is the exact moment the rank applied the
 * EpochExtend order, taken by wrapping `push` on the very array that
 * `plan.ranges` returns (a detail of src/rank/Training.ts; if it
 * changes, `arrived` is left out and `t` still stands).
 */
import type { RankContext } from "cohort"

interface SampleRange {
  readonly start: number
  readonly end: number
}

const option = (args: ReadonlyArray<string>, name: string, fallback: number) => {
  const raw = args.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1)
  return raw === undefined ? fallback : Number(raw)
}
const now = () => performance.timeOrigin + performance.now()

export default async (ctx: RankContext) => {
  const batch = option(ctx.args, "batch", 250)
  const sleep = option(ctx.args, "sleep", 4)
  const grad = new Float32Array(option(ctx.args, "grad", 1024))
  console.log(JSON.stringify({ kill: "pid", rank: ctx.rank, pid: process.pid }))

  for await (const plan of ctx.epochs()) {
    console.log(JSON.stringify({ kill: "epoch", rank: ctx.rank, epoch: plan.epoch, t: now() }))
    let seen = plan.ranges.length
    let lastCheck = now()
    let arrived: number | undefined
    const ranges = plan.ranges as Array<SampleRange>
    if (Array.isArray(ranges) && Object.isExtensible(ranges)) {
      const push = ranges.push
      ranges.push = function(this: Array<SampleRange>, ...items: Array<SampleRange>) {
        arrived ??= now()
        return push.apply(this, items)
      }
    }
    const check = () => {
      const at = now()
      const length = plan.ranges.length
      if (length > seen) {
        seen = length
        console.log(JSON.stringify({ kill: "grew", rank: ctx.rank, epoch: plan.epoch, ranges: length, t: at, gap: at - lastCheck, arrived }))
        arrived = undefined
      }
      lastCheck = at
    }
    const poll = setInterval(check, 1)
    try {
      for await (const indices of plan.batches(batch)) {
        check()
        await Bun.sleep(sleep)
        check()
        await ctx.allreduce(grad, { weight: indices.length })
        check()
        ctx.progress(indices.length)
      }
    } finally {
      clearInterval(poll)
    }
  }
}
