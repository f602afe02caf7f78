/**
 * A child's output, line by line, as the launcher forwards it.
 */
import { expect, test } from "bun:test"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ProcessChild from "../src/kernel/ProcessChild.ts"
import { forwardLines } from "../src/kernel/ProcessChild.ts"
import { Shutdown } from "../src/kernel/Shutdown.ts"

const streamOf = (...chunks: Array<Uint8Array | string>) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk)
      controller.close()
    }
  })

const lines = async (...chunks: Array<Uint8Array | string>) => {
  const out: Array<string> = []
  await forwardLines(streamOf(...chunks), (line) => out.push(line))
  return out
}

test("lines split across chunks, several per chunk, and a last one without a newline", async () => {
  expect(await lines("al", "pha\nbeta\ngam", "ma\n", "delta")).toEqual(["alpha", "beta", "gamma", "delta"])
})

test("a multi-byte character split between chunks survives", async () => {
  const bytes = new TextEncoder().encode("größe ✓\n")
  expect(await lines(bytes.subarray(0, 3), bytes.subarray(3, 9), bytes.subarray(9))).toEqual(["größe ✓"])
})

test("a line that is not UTF-8 is skipped; its neighbours are intact", async () => {
  expect(await lines("before\n", new Uint8Array([0xff, 0xfe, 0x0a]), "after\n")).toEqual(["before", "after"])
})

test("a real child's stdout and stderr arrive as lines, through ProcessChild", async () => {
  const seen: Array<string> = []
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const child = yield* ProcessChild.spawn({
      cmd: ["sh", "-c", "echo one; echo two >&2; printf 'bad \\377\\n'; echo three"],
      onLine: (line, stream) => seen.push(`${stream}:${line}`),
      shutdown: Shutdown.Grace({ grace: Duration.seconds(5) })
    })
    yield* child.exited
  })))
  expect(seen.filter((line) => line.startsWith("stdout:"))).toEqual(["stdout:one", "stdout:three"])
  expect(seen.filter((line) => line.startsWith("stderr:"))).toEqual(["stderr:two"])
})
