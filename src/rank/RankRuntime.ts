/**
 * The rank runtime: the process an `entry:` rank runs in.
 *
 * It reads its identity from the host envelope and its local slot, imports
 * the user's module, checks in with its agent (the rank now runs user code:
 * this is what forms the cohort), and calls the module's default export with
 * a `RankContext`. The export's outcome is the exit status: returning is 0,
 * throwing is 1 with the error printed.
 *
 * It ends with its agent: the IPC channel closing is the control link's EOF
 * (and PR_SET_PDEATHSIG covers a SIGKILLed agent).
 */
import { pathToFileURL } from "node:url"
import { resolve } from "node:path"
import type { HostEnvelope } from "../wire/messages/Envelope.ts"
import type { RankContext, Rendezvous } from "./RankContext.ts"
import { connectRelay, type RelayClient } from "./RelayClient.ts"
import { SharedTensors } from "./SharedTensors.ts"
import { type Training, training as makeTraining } from "./Training.ts"

export interface RuntimeOptions {
  readonly envelope: HostEnvelope
  readonly slot: number
  readonly restartCount: number
  readonly cwd: string
  /** Tell the agent the rank runs user code. */
  readonly checkIn: () => void
  /**
   * Tell the agent the user's code threw (its error's class and message, and NCCL's asynchronous error when a
   * communicator cohort built holds one: the death is NCCL's), before the rank exits with status 1.
   */
  readonly threw?: ((error: { readonly errorClass: string; readonly message: string; readonly ncclError?: number }) => Promise<void>) | undefined
  /** Tell the agent the rank lost its relay, before it exits with status 1 for that. */
  readonly relayLost?: (() => Promise<void>) | undefined
}

/** An error as the failure rules and the verdict name it: its class and its message's first line. */
export const thrownError = (error: unknown): { readonly errorClass: string; readonly message: string } =>
  error instanceof Error
    ? { errorClass: error.name || error.constructor?.name || "Error", message: (error.message.split("\n")[0] ?? "").slice(0, 500) }
    : { errorClass: typeof error, message: String(error).split("\n")[0]!.slice(0, 500) }

/** The context for a slot, or why there is none. */
export const contextFor = (
  envelope: HostEnvelope,
  slot: number,
  restartCount: number,
  signal: AbortSignal,
  onSignalRead: () => void,
  train: Training["context"],
  rendezvous?: Rendezvous
): RankContext | string => {
  const rank = envelope.ranks[slot]
  const device = envelope.devices[slot]
  if (rank === undefined || device === undefined) {
    return `COHORT_LOCAL_SLOT ${slot} is out of range: host ${envelope.host} has ${envelope.ranks.length} slot(s)`
  }
  return {
    run: envelope.run,
    rank,
    worldSize: envelope.worldSize,
    localRank: slot,
    localWorldSize: envelope.ranks.length,
    groupRank: envelope.groupRank,
    host: envelope.host,
    device,
    args: envelope.args,
    backend: envelope.backend,
    restartCount,
    rendezvous,
    datasetSize: envelope.datasetSize,
    epochCount: envelope.epochs,
    cadence: envelope.cadence,
    ...train,
    get signal() {
      onSignalRead()
      return signal
    }
  }
}

const fail = (message: string): never => {
  console.error(`cohort rank: ${message}`)
  process.exit(1)
}

/** Run the user's entry; resolves with the exit status. */
export const runRank = async (options: RuntimeOptions): Promise<number> => {
  const { envelope } = options
  if (envelope.entry === undefined) return fail("the envelope names no entry module (a command: job does not use the rank runtime)")
  const shutdown = new AbortController()
  let handlesShutdown = false
  const rank = envelope.ranks[options.slot]
  let rendezvous: Rendezvous | undefined
  if (envelope.backend === "nccl" && rank !== undefined) {
    // Only NCCL ranks pay for the wire: the module is loaded here, not at start.
    const { connect, ncclUniqueId } = await import("./Rendezvous.ts")
    try {
      rendezvous = await connect({ envelope, rank, incarnation: options.restartCount, makeId: ncclUniqueId })
    } catch (error) {
      return fail(`cannot join the NCCL rendezvous: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  if (rank === undefined) return fail(`COHORT_LOCAL_SLOT ${options.slot} is out of range: host ${envelope.host} has ${envelope.ranks.length} slot(s)`)

  /** Wakes whatever the training context is waiting on (bound once it exists). */
  let wakeWaits = (_reason: string) => {}
  const stopRank = (reason: string) => {
    shutdown.abort(new Error(reason))
    // A rank waiting for work (its share used up) would otherwise wait on until killed.
    wakeWaits(reason)
    // Code that never looked at the signal cannot wind down: end now.
    if (!handlesShutdown) process.exit(143)
  }
  // The relay (collectives, plans, heartbeats) is dialled once user code runs: it starts when every rank of the host does.
  const tensors = new SharedTensors(envelope.dir, rank)
  let relay: Promise<RelayClient> | undefined
  let relayConnected = false
  let startRelay = () => {}
  const client = new Promise<RelayClient>((resolve, reject) => {
    startRelay = () => {
      relay = connectRelay({
        socket: envelope.socket,
        dir: envelope.dir,
        rank,
        heartbeatTimeoutMs: envelope.heartbeatTimeoutMs,
        tensors,
        onOrder: (order) => train.onOrder(order),
        onLost: (reason) => {
          console.error(`cohort rank: ${reason}; exiting`)
          // Said first: the agent reports the exit as the relay's loss (relay_lost), not as a status 1 of the rank's own.
          void (options.relayLost?.() ?? Promise.resolve()).finally(() => process.exit(1))
        }
      })
      relay.then((connected) => {
        relayConnected = true
        connected.report({ _tag: "Attach" })
        resolve(connected)
      }, (error: Error) => {
        train.stop(error.message)
        reject(error)
      })
    }
  })
  client.catch(() => undefined)
  const train =  makeTraining(client, { datasetSize: envelope.datasetSize, rank, backend: envelope.backend, tensors }, (reason) => stopRank(`cohort stopped the run: ${reason}`))
  wakeWaits = (reason) => train.stop(reason)
  const context = contextFor(envelope, options.slot, options.restartCount, shutdown.signal, () => (handlesShutdown = true), train.context, rendezvous)
  if (typeof context === "string") return fail(context)

  process.on("SIGTERM", () => stopRank("cohort is stopping this rank"))

  const path = resolve(options.cwd, envelope.entry)
  let module: { default?: unknown }
  try {
    module = await import(pathToFileURL(path).href)
  } catch (error) {
    return fail(`cannot load the entry module ${envelope.entry} (${path}): ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
  }
  if (typeof module.default !== "function") {
    return fail(`${envelope.entry} has no default export function: write \`export default async (ctx: RankContext) => { … }\``)
  }
  options.checkIn()
  startRelay()
  const leave = async () => {
    // A job without a dataset gives a rank no work to hand back: one that never needed its relay leaves
    // without waiting for it to start (its exit with status 0 says the same as an `Exiting` would).
    if (!relayConnected && envelope.datasetSize === 0) return
    const connected = await relay?.catch(() => undefined)
    connected?.report({ _tag: "Exiting" })
    connected?.close()
  }
  try {
    await module.default(context)
    await rendezvous?.close()
    await leave()
    return 0
  } catch (error) {
    console.error(`rank ${context.rank} failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    // Said before the exit, so the agent's report of it names an exception (or NCCL's error), not just a status.
    const ncclError = await rendezvous?.pendingError().catch(() => 0) ?? 0
    await options.threw?.({ ...thrownError(error), ...(ncclError === 0 ? {} : { ncclError }) })
    return 1
  }
}
