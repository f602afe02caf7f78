/**
 * `bun run agent --controller HOST:PORT [options]`: a self-deployed agent
 * (see agentMain.ts for its options and exit codes). The program comes from
 * cohort's bundle (`bundle.ts`): an agent started over ssh loads it after the
 * handshake, on the way to its dial.
 */
import { runAgentProgram } from "./bundle.ts"

await runAgentProgram()
