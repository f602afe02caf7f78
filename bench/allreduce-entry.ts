/**
 * All-reduce bandwidth rank program for a cohort `entry:` job (bench/allreduce.ts).
 *
 * args: `plan=<bytes>:<warm-up>:<iterations>,…` and `ops=sum,avg,tensor`. For
 * each size (in the order given) every rank allocates `bytes / 4` zeros twice:
 * an ordinary Float32Array (ops `sum` and `avg`) and a `ctx.tensor` in shared
 * memory (op `tensor`: a sum reduced where it lies). It makes `warm-up`
 * untimed calls of each op, meets the others at `ctx.barrier()`, then makes
 * `iterations` rounds: one `ctx.allreduce` per op per round, the ops
 * alternating, each call timed alone with `performance.now()`. Then one
 * untimed correctness check per buffer: every rank writes rank + 1, sums, and
 * expects N (N + 1) / 2 in every element.
 *
 * Rank 0 prints one JSON line per size and op:
 *   {"allreduce":{"n":N,"bytes":B,"op":"sum","ms":[…],"ok":true}}
 * Zeros keep the values from growing over repeated sums (no infinities, no
 * denormals); the time of a float add does not depend on its value.
 */
import type { RankContext } from "cohort"

const option = (args: ReadonlyArray<string>, name: string) => args.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1)

export default async (ctx: RankContext) => {
  const plan = (option(ctx.args, "plan") ?? "4:20:200").split(",").map((step) => step.split(":").map(Number) as [number, number, number])
  const ops = (option(ctx.args, "ops") ?? "sum").split(",") as Array<"sum" | "avg" | "tensor">
  const n = ctx.worldSize
  for (const [bytes, warm, iterations] of plan) {
    const buffer = new Float32Array(bytes / 4).fill(0)
    const shared = ctx.tensor(bytes / 4)
    const call = (op: "sum" | "avg" | "tensor") =>
      op === "tensor" ? ctx.allreduce(shared, { op: "sum" }) : ctx.allreduce(buffer, { op })
    for (let i = 0; i < warm; i++) for (const op of ops) await call(op)
    await ctx.barrier()
    const times = new Map(ops.map((op) => [op, [] as Array<number>]))
    for (let i = 0; i < iterations; i++) {
      for (const op of ops) {
        const start = performance.now()
        await call(op)
        times.get(op)!.push(performance.now() - start)
      }
    }
    const expected = (n * (n + 1)) / 2
    let ok = true
    for (const checked of [buffer, shared]) {
      checked.fill(ctx.rank + 1)
      await ctx.allreduce(checked, { op: "sum" })
      ok &&= checked.every((value) => value === expected)
    }
    if (ctx.rank === 0) for (const op of ops) console.log(JSON.stringify({ allreduce: { n, bytes, op, ms: times.get(op), ok } }))
    if (!ok) throw new Error(`rank ${ctx.rank}: ${bytes} bytes: expected every element to be ${expected} after the sum`)
  }
  await ctx.barrier()
}
