/**
 * A lone host's fold (HostReduction): the weighted mean of the ranks' contributions. A rank hands in its buffer
 * already multiplied by its weight, so the mean is the contributions' sum over the weights' sum; the expected
 * values below are that arithmetic done by hand.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { portableKernels } from "../src/native/PortableKernels.ts"
import { HostReduction, type Round } from "../src/relay/HostReduction.ts"

const dir = mkdtempSync(join(tmpdir(), "cohort-host-reduction-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** A staged contribution of `values` (already weighted) from `rank`. */
const staged = (rank: number, values: ReadonlyArray<number>, weight: number, op: "sum" | "avg" = "avg") => ({
  rank,
  op,
  bytes: values.length * 4,
  weight,
  epoch: 1,
  source: { bytes: new Uint8Array(Float32Array.from(values).buffer), inPlace: false }
})

const fold = (round: Round, final = true) => [...new HostReduction(portableKernels, dir).fold(round, final)]

describe("a lone host's average", () => {
  test("weights of one: the plain mean", () => {
    expect(fold([staged(0, [1, 10], 1), staged(1, [3, 30], 1)])).toEqual([2, 20])
  })

  test("weights 1 and 3: (2·1 + 4·3) / 4", () => {
    expect(fold([staged(0, [2], 1), staged(1, [12], 3)])).toEqual([3.5])
  })

  test("weights 0.5 and 1.5, which add up to the number of ranks: still divided by their sum", () => {
    // x = 2 at weight 0.5 and x = 4 at weight 1.5: (1 + 6) / 2.
    expect(fold([staged(0, [1], 0.5), staged(1, [6], 1.5)])).toEqual([3.5])
  })

  test("a sum is the contributions' sum, whatever the weights", () => {
    expect(fold([staged(0, [1], 0.5, "sum"), staged(1, [6], 1.5, "sum")])).toEqual([7])
  })

  test("a host that is not the last to fold hands the controller the weighted sum, undivided", () => {
    expect(fold([staged(0, [2], 1), staged(1, [12], 3)], false)).toEqual([14])
  })
})
