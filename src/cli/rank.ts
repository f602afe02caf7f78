/**
 * An `entry:` rank's process, started by its agent with the host envelope
 * and a local slot in its environment. Not for people: it refuses to run
 * without them.
 */
import * as Either from "effect/Either"
import { readHostEnvelope } from "../wire/messages/Envelope.ts"
import { runRank } from "../rank/RankRuntime.ts"
import { detectRole, roleVariables } from "../kernel/Role.ts"
import { dieWithParent } from "../native/library.ts"

// Die with the agent even if it is SIGKILLed (setpriv does it too where it exists; this needs no setpriv).
if (dieWithParent(process.ppid) === "parent-gone") process.exit(1)

const role = detectRole(process.env)
if (Either.isLeft(role) || role.right._tag !== "Rank") {
  console.error(Either.isLeft(role) ? role.left.message : `cohort rank: ${roleVariables.rankEnvelope} and ${roleVariables.rankSlot} are not set: ranks are started by a cohort agent, not by hand`)
  process.exit(2)
}
const envelope = readHostEnvelope(roleVariables.rankEnvelope, role.right.envelope)
if (typeof envelope === "string") {
  console.error(`cohort rank: ${envelope}`)
  process.exit(2)
}
// The agent is gone: the rank's control link has ended, and so has the run here.
process.on("disconnect", () => {
  console.error("cohort rank: lost its agent; exiting")
  process.exit(1)
})

/** A word to the agent before an exit: the send's callback runs once the message is on its way (a second at most). */
const tell = (message: object) =>
  new Promise<void>((resolve) => {
    if (process.send === undefined) return resolve()
    const timer = setTimeout(resolve, 1_000)
    process.send(message, undefined, undefined, () => {
      clearTimeout(timer)
      resolve()
    })
  })

const status = await runRank({
  envelope,
  slot: role.right.slot,
  restartCount: Number(process.env.COHORT_RESTART_COUNT ?? 0),
  cwd: process.cwd(),
  checkIn: () => process.send?.({ _tag: "Running" }),
  threw: (error) => tell({ _tag: "Threw", ...error }),
  relayLost: () => tell({ _tag: "RelayLost" })
})
process.exit(status)
