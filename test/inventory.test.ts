/**
 * The cohort's inventory by worked examples: hosts joining, coming back and
 * restarting ranks, and the one line people read.
 */
import { describe, expect, test } from "bun:test"
import * as Inventory from "../src/launcher/membership/Inventory.ts"

const h200 = (ranks: ReadonlyArray<number>, device = "0") => ({ device, label: "NVIDIA H200", ranks })
const cpu = (ranks: ReadonlyArray<number>) => ({ device: "cpu", label: "cpu", ranks })

describe("building it", () => {
  test("hosts in the order they joined, one device per slot (CPU slots too, though each says cpu)", () => {
    const inventory = Inventory.withHost(
      Inventory.withHost([], "gpu-a", [0, 1], ["0", "1"], ["NVIDIA H200", "NVIDIA H200"]),
      "cpu-b",
      [2, 3, 4],
      ["cpu", "cpu", "cpu"],
      ["cpu", "cpu", "cpu"]
    )
    expect(inventory).toEqual([
      { host: "gpu-a", devices: [h200([0]), h200([1], "1")] },
      { host: "cpu-b", devices: [cpu([2]), cpu([3]), cpu([4])] }
    ])
  })

  test("a host that comes back adds its new ranks slot by slot, keeps the label it gives now, and may bring a slot more", () => {
    const first = Inventory.withHost([], "a", [0], ["0"], ["NVIDIA A100"])
    const back = Inventory.withHost(first, "a", [5, 6], ["0", "1"], ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"])
    expect(back).toEqual([{
      host: "a",
      devices: [{ device: "0", label: "NVIDIA A100-SXM4-80GB", ranks: [0, 5] }, { device: "1", label: "NVIDIA A100-SXM4-80GB", ranks: [6] }]
    }])
    // Fewer slots than before: the others are kept as they were.
    expect(Inventory.withHost(back, "a", [9], ["0"], ["NVIDIA A100-SXM4-80GB"])[0]!.devices.map((device) => device.ranks)).toEqual([[0, 5, 9], [6]])
  })

  test("a restarted rank's new number goes on the device its old number ran on; an unknown old number changes nothing", () => {
    const formed = Inventory.withHost([], "a", [0, 1], ["0", "1"], ["NVIDIA H200", "NVIDIA H200"])
    const once = Inventory.withRank(formed, "a", 1, 7)
    const twice = Inventory.withRank(once, "a", 7, 9)
    expect(twice).toEqual([{ host: "a", devices: [h200([0]), h200([1, 7, 9], "1")] }])
    expect(Inventory.withRank(twice, "a", 42, 10)).toEqual(twice)
    expect(Inventory.withRank(twice, "b", 0, 10)).toEqual(twice)
    // The same number twice is listed once.
    expect(Inventory.withRank(twice, "a", 1, 9)).toEqual(twice)
  })
})

describe("many hosts at once (withHosts, a world forming)", () => {
  test("the same worked examples in one call: hosts in order, a host that comes back merged slot by slot into its first entry", () => {
    const inventory = Inventory.withHosts([{ host: "z", devices: [cpu([9])] }], [
      { host: "gpu-a", ranks: [0, 1], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] },
      { host: "cpu-b", ranks: [2, 3], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] },
      { host: "gpu-a", ranks: [5], devices: ["0"], labels: ["NVIDIA H200 NVL"] },
      { host: "z", ranks: [4], devices: ["cpu"], labels: ["cpu"] }
    ])
    expect(inventory).toEqual([
      { host: "z", devices: [cpu([4, 9])] },
      { host: "gpu-a", devices: [{ device: "0", label: "NVIDIA H200 NVL", ranks: [0, 5] }, h200([1], "1")] },
      { host: "cpu-b", devices: [cpu([2]), cpu([3])] }
    ])
    expect(Inventory.withHosts([], [])).toEqual([])
  })
})

describe("the line people read", () => {
  test.each([
    ["one host of GPUs", [{ host: "gpu-a", devices: [h200([0]), h200([1], "1")] }], "gpu-a: 2 × NVIDIA H200"],
    [
      "two hosts, as the issue writes it",
      [{ host: "gpu-a", devices: [h200([0]), h200([1], "1")] }, { host: "gpu-b", devices: Array.from({ length: 8 }, (_, slot) => cpu([2 + slot])) }],
      "gpu-a: 2 × NVIDIA H200; gpu-b: 8 × cpu"
    ],
    [
      "a host with mixed GPUs lists each kind, in the order of its devices",
      [{ host: "lab", devices: [{ device: "0", label: "NVIDIA RTX 4090", ranks: [0] }, h200([1], "1"), { device: "2", label: "NVIDIA RTX 4090", ranks: [2] }] }],
      "lab: 2 × NVIDIA RTX 4090, 1 × NVIDIA H200"
    ],
    ["a restart counts no device twice", [{ host: "a", devices: [h200([0, 3, 4])] }], "a: 1 × NVIDIA H200"],
    ["nothing formed", [], ""],
    // From a launcher's /state.json, which anyone reaching the port may have written: read, never obeyed.
    ["a label that would move the cursor is escaped", [{ host: "a", devices: [{ device: "0", label: "GPU\u001b[2K\rcohort: done", ranks: [0] }] }], "a: 1 × GPU\\x1b[2K\\x0dcohort: done"]
  ] as const)("%s", (_, inventory, line) => {
    expect(Inventory.describe(inventory)).toBe(line)
  })
})
