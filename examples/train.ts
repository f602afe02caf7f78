/**
 * A first cohort job: every rank does a few steps of pretend work and says so.
 * Run it with `bun run launch examples/local.yml`. The coordinator and the
 * data plane (real gradients, shards per epoch) join the context in later
 * versions; the shape of an entry stays this one.
 */
import type { RankContext } from "cohort"

export default async (ctx: RankContext) => {
  const steps = Number(ctx.args[0] ?? 5)
  console.log(`rank ${ctx.rank}/${ctx.worldSize} on ${ctx.host} (${ctx.device.kind} ${ctx.device.kind === "gpu" ? ctx.device.index : ctx.device.slot}) starts`)
  let loss = 1
  for (let step = 1; step <= steps; step++) {
    if (ctx.signal.aborted) {
      console.log(`rank ${ctx.rank}: stopping early at step ${step}`)
      return
    }
    await Bun.sleep(50)
    loss *= 0.8 + 0.02 * ctx.rank
    console.log(`step ${step}/${steps} loss ${loss.toFixed(4)}`)
  }
  console.log(`rank ${ctx.rank}: done`)
}
