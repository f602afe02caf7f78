import { describe, expect, test } from "bun:test"
import { ModelRoot } from "../src/launcher/training/ModelRoot.ts"

const f32 = (...values: Array<number>) => new Float32Array(values)

describe("ModelRoot", () => {
  test("without an outer optimizer a sync is the plain average, and the first sync only sets the anchor", () => {
    const root = new ModelRoot(undefined, 0.5)
    expect([...root.sync(f32(1, 2))]).toEqual([1, 2])
    expect([...root.sync(f32(3, 5))]).toEqual([3, 5])
    expect([...root.snapshot()!.anchor]).toEqual([3, 5])
  })

  test("DiLoCo: Nesterov momentum on the outer gradient anchor − average", () => {
    const root = new ModelRoot({ kind: "diloco", lr: 0.5, momentum: 0.5 }, 0.5)
    root.sync(f32(4))
    // gradient 4 − 2 = 2; velocity 2; update 0.5·2 + 2 = 3; anchor 4 − 0.5·3 = 2.5
    expect([...root.sync(f32(2))]).toEqual([2.5])
    // gradient 2.5 − 2.5 = 0; velocity 0.5·2 = 1; update 0.5·1 + 0 = 0.5; anchor 2.5 − 0.25 = 2.25
    expect([...root.sync(f32(2.5))]).toEqual([2.25])
  })

  test("SlowMo: heavy-ball momentum", () => {
    const root = new ModelRoot({ kind: "slowmo", lr: 1, momentum: 0.5 }, 0.5)
    root.sync(f32(4))
    expect([...root.sync(f32(2))]).toEqual([2]) // velocity 2, anchor 4 − 2
    expect([...root.sync(f32(2))]).toEqual([1]) // gradient 0, velocity 1, anchor 2 − 1
  })

  test("elastic averaging: the rank and the centre each move α of the way to the other", () => {
    const root = new ModelRoot(undefined, 0.25)
    expect([...root.elastic(f32(8))]).toEqual([8]) // the first exchange places the centre
    expect([...root.elastic(f32(0))]).toEqual([2]) // rank 0 → 0 − 0.25·(0 − 8)
    expect([...root.snapshot()!.anchor]).toEqual([6]) // centre 8 + 0.25·(0 − 8)
  })

  test("a model of another size starts over; snapshot and restore carry anchor and momentum", () => {
    const root = new ModelRoot({ kind: "slowmo", lr: 1, momentum: 0.5 }, 0.5)
    root.sync(f32(4))
    root.sync(f32(2))
    const copy = new ModelRoot({ kind: "slowmo", lr: 1, momentum: 0.5 }, 0.5)
    copy.restore(root.snapshot()!)
    expect([...copy.sync(f32(2))]).toEqual([...root.sync(f32(2))])
    expect([...root.sync(f32(1, 1))]).toEqual([1, 1])
  })
})
