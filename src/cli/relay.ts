/**
 * A host's relay process, started by its agent with `COHORT_RELAY_SPEC`,
 * and its host's key as the agent's first IPC message (never in its
 * environment). Not for people: it refuses to run without either.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as LogLevel from "effect/LogLevel"
import * as Relay from "../relay/Relay.ts"
import { readHostKeyMessage, readRelaySpec } from "../wire/messages/Envelope.ts"
import { detectRole, roleVariables } from "../kernel/Role.ts"
import { deadlines, netTimeoutScale, scaled } from "../config/NetTimeouts.ts"
import { dieWithParent } from "../native/library.ts"
import * as Log from "./logger.ts"
import { relayLogLevel, requestedLogLevelOr } from "../config/LogVerbosity.ts"

const role = detectRole(process.env)
if (Either.isLeft(role) || role.right._tag !== "Relay") {
  console.error(Either.isLeft(role) ? role.left.message : `cohort relay: ${roleVariables.relay} is not set: the relay is started by a cohort agent, not by hand`)
  process.exit(2)
}
const spec = readRelaySpec(roleVariables.relay, role.right.spec)
if (typeof spec === "string") {
  console.error(`cohort relay: ${spec}`)
  process.exit(2)
}
// Die with the agent even if it is SIGKILLed, and when its IPC channel closes.
if (dieWithParent(process.ppid) === "parent-gone") process.exit(1)
process.on("disconnect", () => process.exit(1))
process.on("SIGTERM", () => process.exit(0))

const handshakeMs = scaled(deadlines.handshakeMs, netTimeoutScale())
// Not top-level await: the bundle's relay.js is a CommonJS file with bytecode (see bundle.ts), which has none.
const main = async (): Promise<never> => {
  const hostKey = await new Promise<Uint8Array | { readonly problem: string }>((resolve) => {
    const timer = setTimeout(() => resolve({ problem: `no host key from the agent within ${handshakeMs} ms` }), handshakeMs)
    process.once("message", (message) => {
      clearTimeout(timer)
      resolve(readHostKeyMessage(message))
    })
  })
  if (!(hostKey instanceof Uint8Array)) {
    console.error(`cohort relay: ${hostKey.problem}`)
    process.exit(2)
  }
  const program = Relay.run(spec, hostKey, handshakeMs).pipe(
    Effect.scoped,
    Effect.as(0),
    Effect.catchAll((error) => Effect.as(Effect.logError(error.message), 1)),
    Effect.provide(Log.layer(relayLogLevel(requestedLogLevelOr(LogLevel.Warning)), ""))
  )
  process.exit(await Effect.runPromise(program))
}
void main()
