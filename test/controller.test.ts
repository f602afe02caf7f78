/**
 * The Controller, the CPU data plane's root, with the real native kernels
 * and a `send` that records what each host is told: weighted averages
 * (Σ data / Σ weight) and sums across two or three hosts, rounds that wait
 * for every non-idle host, `idle` / `leave` unblocking a round, `wakeAll`,
 * mismatched folds, folds from a host that left, unaligned byte views and
 * zero-length (barrier) folds; and, lightly, `sync` rounds without an outer
 * optimizer and a malformed elastic push.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Controller from "../src/launcher/training/Controller.ts"
import * as Native from "../src/native/Native.ts"
import { ModelRoot } from "../src/launcher/training/ModelRoot.ts"
import { type ElasticPulled, ElasticPush, HostFold, type Reduced } from "../src/wire/messages/ControlMessages.ts"

const native = Effect.runSync(Native.load())

interface Sent {
  readonly host: string
  readonly message: Reduced | ElasticPulled
}

const setUp = (hosts: ReadonlyArray<string>, options: { readonly kernels: Native.Kernels | undefined } = { kernels: native.kernels }) => {
  const sent: Array<Sent> = []
  const controller = Controller.make({
    hosts,
    kernels: options.kernels,
    // No outer optimizer: a `sync` round's result is the plain average.
    root: new ModelRoot(undefined, 0.5),
    send: (host, message) => Effect.sync(() => void sent.push({ host, message }))
  })
  const run = <A>(effect: Effect.Effect<A>) => Effect.runSync(effect)
  /** What has been sent since the last call, then forget it. */
  const drain = () => sent.splice(0, sent.length)
  return { controller, run, drain }
}

/** The fold's bytes: a copy of the floats, at byte offset 0. */
const bytesOf = (values: ReadonlyArray<number>) => new Uint8Array(Float32Array.from(values).buffer)

const fold = (values: ReadonlyArray<number>, options: { op?: HostFold["op"]; weight?: number; ranks?: number; epoch?: number } = {}) =>
  new HostFold({ op: options.op ?? "avg", weight: options.weight ?? 1, ranks: options.ranks ?? 1, epoch: options.epoch ?? 0, data: bytesOf(values) })

const floatsOf = (message: { readonly data: Uint8Array }) => {
  const copy = message.data.slice()
  return Array.from(new Float32Array(copy.buffer, 0, copy.byteLength / 4))
}

const f = Math.fround

describe("Controller growth", () => {
  test("a host that enters at epoch 3 is not waited for in epoch 2's rounds, and is in every round of epoch 3 on", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.enter("c", 3))
    // The newcomer is at its first step already; the others finish epoch 2 without it.
    run(controller.fold("c", fold([30], { epoch: 3 })))
    run(controller.fold("a", fold([2], { epoch: 2 })))
    run(controller.fold("b", fold([4], { epoch: 2 })))
    const epoch2 = drain()
    expect(epoch2.map(({ host }) => host)).toEqual(["a", "b"])
    expect(floatsOf(epoch2[0]!.message)).toEqual([3])
    // Epoch 3's first round: c's fold was waiting; the round is everyone's.
    run(controller.fold("a", fold([0], { epoch: 3 })))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([0], { epoch: 3 })))
    const epoch3 = drain()
    expect(epoch3.map(({ host }) => host)).toEqual(["a", "b", "c"])
    expect(floatsOf(epoch3[0]!.message)).toEqual([10])
  })

  test("a host already in the rounds stays in them when a restarted rank of it enters later", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.enter("b", 3))
    run(controller.fold("a", fold([2], { epoch: 2 })))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([4], { epoch: 2 })))
    expect(drain().map(({ host }) => host)).toEqual(["a", "b"])
  })
})

describe("Controller", () => {
  test("two hosts: the weighted average is Σ data / Σ weight, sent to both", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    // Each host's data is already the sum over its ranks; its weight is how much it counts.
    run(controller.fold("a", fold([2, 4, 6], { weight: 2, ranks: 2 })))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([1, 2, 3], { weight: 1 })))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b"])
    for (const { message } of sent) {
      expect(message.failure).toBeUndefined()
      expect(floatsOf(message)).toEqual([1, 2, 3])
    }
  })

  test("three hosts with unequal weights", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("c", fold([0.5, -4], { weight: 3 })))
    run(controller.fold("a", fold([1.5, 8], { weight: 1 })))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([2, 1], { weight: 4 })))
    const sent = drain()
    expect(sent.map(({ host }) => host).sort()).toEqual(["a", "b", "c"])
    const expected = [f(f(f(1.5 + 2) + 0.5) * f(1 / 8)), f(f(f(8 + 1) + -4) * f(1 / 8))]
    for (const { message } of sent) {
      expect(message.failure).toBeUndefined()
      const got = floatsOf(message)
      expect(got[0]).toBeCloseTo(expected[0]!, 6)
      expect(got[1]).toBeCloseTo(expected[1]!, 6)
    }
  })

  test("sum adds the folds and ignores the weights", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("a", fold([1, 10, -3], { op: "sum", weight: 7 })))
    run(controller.fold("b", fold([2, 20, 3], { op: "sum", weight: 2 })))
    run(controller.fold("c", fold([4, 40, 0.25], { op: "sum", weight: 1 })))
    const sent = drain()
    expect(sent).toHaveLength(3)
    for (const { message } of sent) expect(floatsOf(message)).toEqual([7, 70, 0.25])
  })

  test("avg with a total weight of zero leaves the sum undivided (no NaN)", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.fold("a", fold([1, 2], { weight: 0 })))
    run(controller.fold("b", fold([3, 4], { weight: 0 })))
    for (const { message } of drain()) expect(floatsOf(message)).toEqual([4, 6])
  })

  test("a round waits for every non-idle host; each round is reduced once", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("a", fold([1])))
    run(controller.fold("b", fold([2])))
    expect(drain()).toEqual([])
    run(controller.fold("c", fold([3])))
    expect(drain()).toHaveLength(3)
    // The next round starts empty.
    run(controller.fold("a", fold([10])))
    run(controller.fold("b", fold([20])))
    expect(drain()).toEqual([])
    run(controller.fold("c", fold([30])))
    const sent = drain()
    expect(sent).toHaveLength(3)
    expect(floatsOf(sent[0]!.message)).toEqual([20])
  })

  test("idle unblocks a waiting round; the idle host is not sent the result", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("a", fold([1, 1], { weight: 1 })))
    run(controller.fold("b", fold([3, 5], { weight: 1 })))
    expect(drain()).toEqual([])
    run(controller.idle("c", 0))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b"])
    for (const { message } of sent) expect(floatsOf(message)).toEqual([2, 3])
  })

  test("an idle host stays out of later rounds until it folds again", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.idle("b", 0))
    run(controller.fold("a", fold([4])))
    expect(drain().map(({ host }) => host)).toEqual(["a"])
    // b folds again: it is back, and the round waits for a.
    run(controller.fold("b", fold([6])))
    expect(drain()).toEqual([])
    run(controller.fold("a", fold([2])))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b"])
    for (const { message } of sent) expect(floatsOf(message)).toEqual([4])
  })

  test("idle from a host with a fold pending is ignored", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.fold("b", fold([1])))
    run(controller.idle("b", 0))
    expect(drain()).toEqual([])
    run(controller.fold("a", fold([3])))
    expect(drain().map(({ host }) => host)).toEqual(["a", "b"])
  })

  test("every host idle: no round, nothing sent", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.idle("a", 0))
    run(controller.idle("b", 0))
    expect(drain()).toEqual([])
  })

  test("wakeAll clears idleness: the next round waits for every host", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.idle("b", 0))
    run(controller.idle("c", 0))
    run(controller.wakeAll(1))
    expect(drain()).toEqual([])
    run(controller.fold("a", fold([1])))
    expect(drain()).toEqual([])
    run(controller.fold("c", fold([2])))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([3])))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b", "c"])
    for (const { message } of sent) expect(floatsOf(message)).toEqual([2])
  })

  test("a HostIdle sent before an epoch's end (it crossed the EpochEnd on the way) is stale and ignored", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.wakeAll(1))
    run(controller.idle("b", 0))
    run(controller.fold("a", fold([4])))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([2])))
    expect(drain().map(({ host }) => host)).toEqual(["a", "b"])
    // One sent after the relay passed the end on counts.
    run(controller.idle("b", 1))
    run(controller.fold("a", fold([4])))
    expect(drain().map(({ host }) => host)).toEqual(["a"])
  })

  test("leave unblocks a waiting round and drops the leaver from it", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("a", fold([1, 2])))
    run(controller.fold("c", fold([3, 4])))
    expect(drain()).toEqual([])
    run(controller.leave("b"))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "c"])
    for (const { message } of sent) expect(floatsOf(message)).toEqual([2, 3])
  })

  test("leave drops the leaver's pending fold", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("b", fold([100])))
    run(controller.fold("a", fold([1])))
    run(controller.leave("b"))
    expect(drain()).toEqual([])
    run(controller.fold("c", fold([3])))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "c"])
    for (const { message } of sent) expect(floatsOf(message)).toEqual([2])
  })

  test("a fold from a host that left gets a failure, and no round is disturbed", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.leave("b"))
    run(controller.fold("b", fold([5])))
    const sent = drain()
    expect(sent).toHaveLength(1)
    expect(sent[0]!.host).toBe("b")
    expect(sent[0]!.message.failure).toBe("host b has left the data plane")
    expect(sent[0]!.message.data.byteLength).toBe(0)
    // a is alone now: its fold is its own round.
    run(controller.fold("a", fold([7], { weight: 1 })))
    const alone = drain()
    expect(alone.map(({ host }) => host)).toEqual(["a"])
    expect(floatsOf(alone[0]!.message)).toEqual([7])
  })

  test("a fold from a host that was never in the world gets a failure", () => {
    const { controller, run, drain } = setUp(["a"])
    run(controller.fold("z", fold([1])))
    const sent = drain()
    expect(sent).toHaveLength(1)
    expect(sent[0]!.host).toBe("z")
    expect(sent[0]!.message.failure).toContain("host z")
  })

  test("mismatched lengths fail the round with a message naming both hosts", () => {
    const { controller, run, drain } = setUp(["alpha", "beta"])
    run(controller.fold("alpha", fold([1, 2, 3])))
    run(controller.fold("beta", fold([1, 2])))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["alpha", "beta"])
    for (const { message } of sent) {
      expect(message.data.byteLength).toBe(0)
      expect(message.failure).toBe("collectives out of step across hosts: alpha sent avg of 3 floats, beta avg of 2")
    }
  })

  test("mismatched ops fail the round with a message naming both hosts and ops", () => {
    const { controller, run, drain } = setUp(["alpha", "beta", "gamma"])
    run(controller.fold("alpha", fold([1, 2], { op: "avg" })))
    run(controller.fold("beta", fold([1, 2], { op: "avg" })))
    run(controller.fold("gamma", fold([1, 2], { op: "sum" })))
    const sent = drain()
    expect(sent).toHaveLength(3)
    for (const { message } of sent) {
      expect(message.failure).toContain("alpha sent avg of 2 floats")
      expect(message.failure).toContain("gamma sum of 2")
    }
  })

  test("a failed round is over: the next round proceeds normally", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.fold("a", fold([1])))
    run(controller.fold("b", fold([1, 2])))
    expect(drain().every(({ message }) => message.failure !== undefined)).toBe(true)
    run(controller.fold("a", fold([1], { op: "sum" })))
    run(controller.fold("b", fold([2], { op: "sum" })))
    for (const { message } of drain()) {
      expect(message.failure).toBeUndefined()
      expect(floatsOf(message)).toEqual([3])
    }
  })

  test("unaligned Uint8Array views (byteOffset not a multiple of 4) are reduced correctly", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    const unaligned = (values: ReadonlyArray<number>, offset: number) => {
      const bytes = bytesOf(values)
      const backing = new Uint8Array(bytes.byteLength + offset + 3).fill(0xff)
      backing.set(bytes, offset)
      const view = backing.subarray(offset, offset + bytes.byteLength)
      expect(view.byteOffset % 4).toBe(offset % 4)
      return view
    }
    const data = [[1.5, -2, 3, 1e6], [0.5, 4, -3, 1e6], [2, 1, 0, -2e6]]
    run(controller.fold("a", new HostFold({ op: "sum", weight: 1, ranks: 1, epoch: 0, data: unaligned(data[0]!, 1) })))
    run(controller.fold("b", new HostFold({ op: "sum", weight: 1, ranks: 1, epoch: 0, data: unaligned(data[1]!, 2) })))
    run(controller.fold("c", new HostFold({ op: "sum", weight: 1, ranks: 1, epoch: 0, data: unaligned(data[2]!, 7) })))
    const sent = drain()
    expect(sent).toHaveLength(3)
    for (const { message } of sent) {
      expect(message.failure).toBeUndefined()
      expect(floatsOf(message)).toEqual([4, 3, 0, 0])
    }
  })

  test("an aligned view at a non-zero offset reads only its own bytes", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    const backing = Float32Array.from([99, 1, 2, 99])
    const view = new Uint8Array(backing.buffer, 4, 8)
    run(controller.fold("a", new HostFold({ op: "sum", weight: 1, ranks: 1, epoch: 0, data: view })))
    run(controller.fold("b", fold([10, 20], { op: "sum" })))
    for (const { message } of drain()) expect(floatsOf(message)).toEqual([11, 22])
    // The input was not written to.
    expect(Array.from(backing)).toEqual([99, 1, 2, 99])
  })

  test("zero-length folds are a barrier: every host gets an empty result", () => {
    const { controller, run, drain } = setUp(["a", "b", "c"])
    run(controller.fold("a", fold([])))
    run(controller.fold("b", fold([])))
    expect(drain()).toEqual([])
    run(controller.fold("c", fold([], { op: "avg", weight: 3 })))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b", "c"])
    for (const { message } of sent) {
      expect(message.failure).toBeUndefined()
      expect(message.data.byteLength).toBe(0)
    }
  })

  test("zero-length folds need no native library; data without it is a failure, not a crash", () => {
    const { controller, run, drain } = setUp(["a", "b"], { kernels: undefined })
    run(controller.fold("a", fold([])))
    run(controller.fold("b", fold([])))
    for (const { message } of drain()) {
      expect(message.failure).toBeUndefined()
      expect(message.data.byteLength).toBe(0)
    }
    run(controller.fold("a", fold([1])))
    run(controller.fold("b", fold([2])))
    const sent = drain()
    expect(sent).toHaveLength(2)
    for (const { message } of sent) expect(message.failure).toContain("native library")
  })

  test("sync rounds average like avg (no outer optimizer) and wait for every host", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.fold("a", fold([2, 8], { op: "sync", weight: 2 })))
    expect(drain()).toEqual([])
    run(controller.fold("b", fold([4, 0], { op: "sync", weight: 2 })))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["a", "b"])
    for (const { message } of sent) {
      expect(message.failure).toBeUndefined()
      expect(floatsOf(message)).toEqual([1.5, 2])
    }
  })

  test("an elastic push of a tensor that is not whole floats is answered with a failure", () => {
    const { controller, run, drain } = setUp(["a", "b"])
    run(controller.elastic("a", new ElasticPush({ rank: 3, data: new Uint8Array(6) })))
    const sent = drain()
    expect(sent).toHaveLength(1)
    expect(sent[0]!.host).toBe("a")
    expect(sent[0]!.message._tag).toBe("ElasticPulled")
    expect(sent[0]!.message.failure).toContain("not whole floats")
  })

  test("one host alone: its fold is the round", () => {
    const { controller, run, drain } = setUp(["solo"])
    run(controller.fold("solo", fold([6, 9], { weight: 3 })))
    const sent = drain()
    expect(sent.map(({ host }) => host)).toEqual(["solo"])
    expect(floatsOf(sent[0]!.message)).toEqual([2, 3])
  })
})
