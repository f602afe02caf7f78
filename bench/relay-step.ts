/**
 * What the relay's pure state costs on the gradient path: the steps of one
 * round on a lone host of four ranks (four socket reduces, the round ready,
 * the barrier quiet), stepped 200,000 times, five times over.
 *
 * `bun bench/relay-step.ts`
 */
import { registered, RelayEvent, relayStep } from "../src/relay/RelayState.ts"
const E = RelayEvent
let state = registered([0, 1, 2, 3], 4)
const round = [0, 1, 2, 3].map((rank) => ({ rank, op: "avg" as const, bytes: 4, weight: 1, epoch: 1, source: rank }))
const N = 200_000
for (let rep = 0; rep < 5; rep++) {
  const t = performance.now()
  for (let i = 0; i < N; i++) {
    // A round's events on a lone host: four socket reduces, the round ready, the barrier quiet.
    for (let r = 0; r < 4; r++) state = relayStep(state, E.SocketReduce({ rank: r }))[1]
    state = relayStep(state, E.RoundReady({ round, live: 4 }))[1]
    state = relayStep(state, E.BarrierQuiet({ allIdle: false }))[1]
  }
  console.log(`${(((performance.now() - t) * 1000) / N).toFixed(3)} µs per round (6 steps)`)
}
