/** `bun run bench`: every benchmark, one after the other; paste the output into bench/README.md. */
import { failureReaction } from "./failure-reaction.ts"

console.log(`bun ${Bun.version}, ${navigator.hardwareConcurrency} cores, ${new Date().toISOString()}\n`)
console.log(await failureReaction())
