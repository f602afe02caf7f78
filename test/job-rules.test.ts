/**
 * Which jobs have a coordinator and which open NCCL's rendezvous, as a table written out by hand: a command's
 * ranks never dial the rendezvous (they would be counted absent and killed), and a command is coordinated only
 * when it plans epochs (the Python client).
 */
import { expect, test } from "bun:test"
import { isCoordinated, type Job, usesRendezvous } from "../src/config/Job.ts"

const entry: Job["program"] = { _tag: "Entry", entry: "train.ts" }
const command: Job["program"] = { _tag: "Command", command: ["python3", "train.py"] }

test.each([
  // program, backend, dataset size, coordinated, rendezvous
  ["entry", entry, "cpu_sync", 0, true, false],
  ["entry, nccl", entry, "nccl", 100, true, true],
  ["plain command", command, "cpu_sync", 0, false, false],
  ["plain command, nccl", command, "nccl", 0, false, false],
  ["Python client", command, "cpu_sync", 100, true, false],
  ["Python client, nccl", command, "nccl", 100, true, false]
] as const)("%s", (_name, program, backend, datasetSize, coordinated, rendezvous) => {
  expect(isCoordinated({ program, datasetSize })).toBe(coordinated)
  expect(usesRendezvous({ program, backend })).toBe(rendezvous)
})
