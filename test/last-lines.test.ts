/** The launcher's keeper of each rank's last lines (what a rule's `log` searches): by the prefix, the newest 50. */
import { expect, test } from "bun:test"
import * as LastLines from "../src/launcher/hosts/LastLines.ts"

test("lines are kept per rank by their prefix, without it, the newest ones only; every line still passes on", () => {
  const passed: Array<string> = []
  const kept = LastLines.make((line) => passed.push(line), 3)
  const lines = [
    "[gpu-a:0:r0] step 1",
    "[gpu-a:1:r1] step 1",
    "[gpu-a:relay] registered",
    "cohort: a line of the launcher's",
    "[gpu-a:0:r0] step 2",
    "[gpu-a:0:r0] step 3",
    "[gpu-a:0:r0] CUDA error: illegal memory access",
    "[node-b:cpu:r12] [not a prefix] text"
  ]
  for (const line of lines) kept.output(line, "stderr")
  expect(passed).toEqual(lines)
  expect(kept.of(0)).toEqual(["step 2", "step 3", "CUDA error: illegal memory access"])
  expect(kept.of(1)).toEqual(["step 1"])
  expect(kept.of(12)).toEqual(["[not a prefix] text"])
  expect(kept.of(7)).toEqual([])
})

test("a rank's stderr lines are kept apart too: what its failure signature is read from", () => {
  const kept = LastLines.make(() => {}, 2)
  kept.output("[gpu-a:0:r0] communicator 0: async error 0", "stdout")
  kept.output("[gpu-a:0:r0] Traceback (most recent call last):", "stderr")
  kept.output("[gpu-a:0:r0] step 4", "stdout")
  kept.output("[gpu-a:0:r0] KeyError: 'x'", "stderr")
  kept.output("[gpu-a:0:r0] ValueError: y", "stderr")
  expect(kept.errorsOf(0)).toEqual(["KeyError: 'x'", "ValueError: y"])
  expect(kept.of(0)).toEqual(["KeyError: 'x'", "ValueError: y"])
  expect(kept.errorsOf(1)).toEqual([])
})
