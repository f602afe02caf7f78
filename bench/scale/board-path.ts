/**
 * The status board alone, in this process: an 8,000-rank state (1,000 hosts,
 * every rank started) published once, `GET /state.json` at 200/s for 5 s from
 * `status-client.ts`; with CHURN=1 a rank changes every 100 ms, so the next
 * request serialises a new state. Latency p50/p99 and this process's CPU
 * (JSC's GC threads included).
 *
 * `bun bench/scale/board-path.ts`
 */
import * as Effect from "effect/Effect"
import * as RunView from "../../src/launcher/view/RunView.ts"
import * as PortMux from "../../src/launcher/front/PortMux.ts"
import * as StatusBoard from "../../src/launcher/view/StatusBoard.ts"
import { newSalt, startToken } from "../../src/wire/Keys.ts"
import { median, percentile } from "../stats.ts"

const hosts = Array.from({ length: 1000 }, (_, host) => ({
  host: `sim-${String(host).padStart(4, "0")}`,
  ranks: Array.from({ length: 8 }, (_, slot) => host * 8 + slot),
  devices: Array.from({ length: 8 }, () => "cpu"),
  labels: Array.from({ length: 8 }, () => "cpu")
}))
let state = RunView.apply(RunView.initial("scale", Date.now()), { event: "run_started", at: Date.now(), run: "scale", hosts: hosts.map(({ host }) => ({ host, ranks: 8 })) })
state = RunView.apply(state, { event: "world_formed", at: Date.now(), world: 8000, hosts })
for (let rank = 0; rank < 8000; rank++) state = RunView.apply(state, { event: "rank_started", at: Date.now(), rank, pid: 100_000 + rank })

const program = Effect.gen(function*() {
  const board = yield* StatusBoard.make({ startToken: startToken(newSalt()), requestDeadlineMs: 5_000 })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { http: board } })
  yield* board.publish(state)
  const client = Bun.spawn([process.execPath, `${import.meta.dir}/status-client.ts`, "200"], { stdin: "pipe", stdout: "pipe" })
  yield* Effect.sleep("500 millis")
  client.stdin.write(`${mux.port} ${board.pageToken}\n`)
  client.stdin.flush()
  const churn = process.env.CHURN === "1"
  const before = process.cpuUsage()
  const t0 = performance.now()
  for (let step = 0; step < 50; step++) {
    yield* Effect.sleep("100 millis")
    if (!churn) continue
    state = RunView.apply(state, { event: "rank_started", at: Date.now(), rank: step, pid: step })
    yield* board.publish(state)
  }
  const used = process.cpuUsage(before)
  // A saturated board stretches the 5 s loop: the share is over the time it really took.
  const seconds = (performance.now() - t0) / 1000
  client.stdin.write("stop\n")
  client.stdin.flush()
  const text = yield* Effect.promise(() => new Response(client.stdout).text())
  const { samples } = JSON.parse(text.split("\n")[1]!) as { samples: Array<{ ms: number; status: number }> }
  const ms = samples.filter((sample) => sample.status === 200).map((sample) => sample.ms)
  return `${churn ? "a rank changes every 100 ms" : "one state"}: ${ms.length} answers of ${samples.length}, p50 ${median(ms).toFixed(1)} ms, ` +
    `p99 ${percentile(ms, 0.99).toFixed(1)} ms, board CPU ${(((used.user + used.system) / 1e6 / seconds) * 100).toFixed(0)}% of one core over ${seconds.toFixed(1)} s`
})

console.log(await Effect.runPromise(Effect.scoped(program)))
process.exit(0)
