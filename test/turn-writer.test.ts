/**
 * TurnWriter: the launcher's terminal lines, written once per turn of the
 * event loop, in order, one call per run of lines for the same stream.
 */
import { expect, test } from "bun:test"
import * as TurnWriter from "../src/cli/TurnWriter.ts"

const setUp = () => {
  const calls: Array<[string, string]> = []
  const turns: Array<() => void> = []
  const writer = TurnWriter.make((text, stream) => void calls.push([stream, text]), (flush) => void turns.push(flush))
  return { calls, turns, writer }
}

test("nothing is written before the turn ends; then each run of one stream's lines is one call, in order", () => {
  const { calls, turns, writer } = setUp()
  writer.write("a\n", "stderr")
  writer.write("b\n", "stderr")
  writer.write("out\n", "stdout")
  writer.write("c\n", "stderr")
  expect(calls).toEqual([])
  expect(turns).toHaveLength(1)
  turns[0]!()
  expect(calls).toEqual([["stderr", "a\nb\n"], ["stdout", "out\n"], ["stderr", "c\n"]])
  // The next line waits for the next turn.
  writer.write("d\n", "stderr")
  expect(turns).toHaveLength(2)
  turns[1]!()
  expect(calls.at(-1)).toEqual(["stderr", "d\n"])
})

test("flush writes what is queued at once, and the turn's own flush then finds nothing", () => {
  const { calls, turns, writer } = setUp()
  writer.write("last words\n", "stderr")
  writer.flush()
  expect(calls).toEqual([["stderr", "last words\n"]])
  turns[0]!()
  expect(calls).toHaveLength(1)
})

test("64 KiB queued is written without waiting for the turn", () => {
  const { calls, writer } = setUp()
  const line = `${"x".repeat(1023)}\n`
  for (let i = 0; i < 63; i++) writer.write(line, "stdout")
  expect(calls).toEqual([])
  writer.write(line, "stdout")
  expect(calls).toEqual([["stdout", line.repeat(64)]])
})
