/**
 * The Controller: the CPU data plane's root. Every host's relay folds its
 * ranks and sends one `HostFold` per round; the controller waits for every
 * host that still has an active rank, sums the folds with the native kernel,
 * divides once by the summed weight for an average, and sends the result to
 * each host that contributed. A host whose ranks are all waiting for work
 * (`HostIdle`), all dead, or whose relay is gone, leaves the round at once.
 *
 * A world on one host reaches it only for `ctx.sync` rounds (that relay
 * finishes other rounds itself): the model root, with the outer optimizer's
 * state, lives here.
 *
 * Growth: a host that joins the formed world `enter`s at an epoch, and takes
 * part in rounds of that epoch on. Every fold names its round's epoch; a
 * round is the earliest epoch any host has a fold for, so a newcomer that is
 * already at its first step waits while the others finish the epoch before. `cpu_async` exchanges (`ElasticPush`) skip rounds
 * altogether: each is answered on its own from the root's centre variable.
 */
import * as Effect from "effect/Effect"
import type { Kernels } from "../../native/Native.ts"
import { type ElasticPush, ElasticPulled, type HostFold, Reduced } from "../../wire/messages/ControlMessages.ts"
import type { ModelRoot } from "./ModelRoot.ts"

export interface ControllerOptions {
  /** Every host of the world. */
  readonly hosts: ReadonlyArray<string>
  readonly kernels: Kernels | undefined
  readonly send: (host: string, message: Reduced | ElasticPulled) => Effect.Effect<void>
  /** Where `sync` rounds and `cpu_async` exchanges end (see ModelRoot). */
  readonly root: ModelRoot
}

export interface Controller {
  readonly fold: (host: string, fold: HostFold) => Effect.Effect<void>
  /** The host's ranks all wait for work; `afterEpoch`: the last epoch end it had seen (older ones are stale). */
  readonly idle: (host: string, afterEpoch: number) => Effect.Effect<void>
  readonly elastic: (host: string, push: ElasticPush) => Effect.Effect<void>
  /** Epoch `epoch` has ended: every host takes part in the next round (its relays wake their ranks alike). */
  readonly wakeAll: (epoch: number) => Effect.Effect<void>
  /** The host's relay is gone, or its ranks are: it leaves every round. */
  readonly leave: (host: string) => Effect.Effect<void>
  /** A host that joined the formed world takes part in rounds of `epoch` on. */
  readonly enter: (host: string, epoch: number) => Effect.Effect<void>
}

const view = (data: Uint8Array) => {
  // CBOR hands back views at any offset; Float32Array needs 4-byte alignment.
  const aligned = data.byteOffset % 4 === 0 ? data : data.slice()
  return new Float32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 4)
}

const bytesOf = (values: Float32Array) => new Uint8Array(values.buffer, values.byteOffset, values.byteLength)

export const make = (options: ControllerOptions): Controller => {
  /** Each host in the rounds, with the first epoch whose rounds it takes part in. */
  const members = new Map(options.hosts.map((host) => [host, 0]))
  const idle = new Set<string>()
  const pending = new Map<string, HostFold>()
  let endedEpoch = 0

  const reduce = (round: ReadonlyArray<[string, HostFold]>): Reduced => {
    const [, first] = round[0]!
    const ragged = round.find(([, fold]) => fold.data.byteLength % 4 !== 0)
    if (ragged !== undefined) {
      return new Reduced({ data: new Uint8Array(0), failure: `host ${ragged[0]} sent ${ragged[1].data.byteLength} bytes: not whole f32 values` })
    }
    const odd = round.find(([, fold]) => fold.data.byteLength !== first.data.byteLength || fold.op !== first.op)
    if (odd !== undefined) {
      return new Reduced({
        data: new Uint8Array(0),
        failure: `collectives out of step across hosts: ${round[0]![0]} sent ${first.op} of ${first.data.byteLength / 4} floats, ` +
          `${odd[0]} ${odd[1].op} of ${odd[1].data.byteLength / 4}`
      })
    }
    const out = new Float32Array(first.data.byteLength / 4)
    if (out.length > 0) {
      if (options.kernels === undefined) return new Reduced({ data: new Uint8Array(0), failure: "the launcher could not load the native library for the CPU data plane" })
      options.kernels.sum("f32", round.map(([, fold]) => view(fold.data)), out)
      const weight = round.reduce((sum, [, fold]) => sum + fold.weight, 0)
      if (first.op !== "sum" && weight > 0) options.kernels.scale("f32", out, 1 / weight)
    }
    if (first.op === "sync") return new Reduced({ data: bytesOf(options.root.sync(out)) })
    return new Reduced({ data: new Uint8Array(out.buffer) })
  }

  const advance = Effect.suspend(() => {
    let epoch = Number.POSITIVE_INFINITY
    for (const fold of pending.values()) epoch = Math.min(epoch, fold.epoch)
    const active = [...members].flatMap(([host, from]) => (from <= epoch && !idle.has(host) ? [host] : []))
    if (active.length === 0 || active.some((host) => !pending.has(host))) return Effect.void
    const round = active.map((host): [string, HostFold] => [host, pending.get(host)!])
    for (const host of active) pending.delete(host)
    const result = reduce(round)
    return Effect.forEach(round, ([host]) => options.send(host, result), { discard: true })
  })

  return {
    fold: (host, fold) =>
      Effect.suspend(() => {
        if (!members.has(host)) return options.send(host, new Reduced({ data: new Uint8Array(0), failure: `host ${host} has left the data plane` }))
        idle.delete(host)
        pending.set(host, fold)
        return advance
      }),
    elastic: (host, push) =>
      Effect.suspend(() => {
        if (push.data.byteLength % 4 !== 0) {
          return options.send(host, new ElasticPulled({ rank: push.rank, data: new Uint8Array(0), failure: "a sync of a tensor whose size is not whole floats" }))
        }
        return options.send(host, new ElasticPulled({ rank: push.rank, data: bytesOf(options.root.elastic(view(push.data))) }))
      }),
    idle: (host, afterEpoch) => Effect.suspend(() => {
      if (!pending.has(host) && afterEpoch >= endedEpoch) idle.add(host)
      return advance
    }),
    wakeAll: (epoch) => Effect.sync(() => {
      endedEpoch = Math.max(endedEpoch, epoch)
      idle.clear()
    }),
    enter: (host, epoch) => Effect.suspend(() => {
      // A host already in the rounds (a restarted rank of it entering) stays in them.
      members.set(host, Math.min(members.get(host) ?? epoch, epoch))
      idle.delete(host)
      return advance
    }),
    leave: (host) => Effect.suspend(() => {
      members.delete(host)
      idle.delete(host)
      pending.delete(host)
      return advance
    })
  }
}
