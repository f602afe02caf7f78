/**
 * Dropped unauthenticated connections are logged once per source address a
 * minute, not once each: a flood of them cannot flood the launcher's logs.
 */
import { expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import { makeNoiseLog } from "../src/actors/launcher/NoiseLog.ts"

test("a thousand drops from one address are one line; another address gets its own", async () => {
  const lines: Array<string> = []
  const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => lines.push(String(message))))
  const noise = makeNoiseLog("join")
  await Effect.runPromise(Effect.gen(function*() {
    for (let port = 40_000; port < 41_000; port++) yield* noise.drop(`10.1.2.3:${port}`, "bad-mac: frame 0 failed authentication")
    yield* noise.drop("10.9.9.9:5000", "handshake: no Hello within 2000 ms")
    yield* noise.drop("[::1]:7000", "closed: the peer closed the connection")
  }).pipe(Effect.provide(capture)))
  expect(lines).toEqual([
    "dropped a join connection from 10.1.2.3:40000: bad-mac: frame 0 failed authentication",
    "dropped a join connection from 10.9.9.9:5000: handshake: no Hello within 2000 ms",
    "dropped a join connection from [::1]:7000: closed: the peer closed the connection"
  ])
})
