/** `bun run bench`: every benchmark, one after the other; paste the output into bench/README.md. */
import { allreduce } from "./allreduce.ts"
import { failureReaction } from "./failure-reaction.ts"
import { frameThroughput } from "./frame-throughput.ts"
import { growth } from "./growth.ts"
import { launchLatency } from "./launch-latency.ts"
import { localFrames } from "./local-frames.ts"
import { multihostFormation } from "./multihost-formation.ts"
import { nativeKernels } from "./native-kernels.ts"
import { orderlyStop } from "./orderly-stop.ts"
import { recovery } from "./recovery.ts"
import { scale } from "./scale.ts"
import { torchRecovery } from "./torch-recovery.ts"

console.log(`bun ${Bun.version}, ${navigator.hardwareConcurrency} cores, ${new Date().toISOString()}\n`)
console.log(await failureReaction())
console.log()
console.log(await orderlyStop())
console.log()
console.log(await recovery())
console.log()
console.log(await torchRecovery())
console.log()
console.log(await frameThroughput())
console.log()
console.log(await localFrames())
console.log()
console.log(await launchLatency())
console.log()
console.log(await nativeKernels())
console.log()
console.log(await allreduce())
console.log()
console.log(await multihostFormation())
console.log()
console.log(await scale())
console.log()
console.log(await growth())
