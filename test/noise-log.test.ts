/**
 * Dropped unauthenticated connections are logged once per source prefix a
 * minute, with the count of the rest, not once each: a flood of them, from
 * however many addresses, cannot flood the launcher's logs.
 */
import { expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import { makeNoiseLog, NOISE_SOURCES, noiseLog } from "../src/launcher/front/NoiseLog.ts"

test("a thousand drops from one address are one line; another prefix gets its own; the first line says the rest are counted", async () => {
  const lines: Array<string> = []
  const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => lines.push(String(message))))
  const noise = makeNoiseLog("join")
  await Effect.runPromise(Effect.gen(function*() {
    for (let port = 40_000; port < 41_000; port++) yield* noise.drop(`10.1.2.3:${port}`, "bad-mac: frame 0 failed authentication")
    // The same /24: counted with the first.
    yield* noise.drop("10.1.2.200:5000", "handshake: no Hello within 2000 ms")
    yield* noise.drop("10.9.9.9:5000", "handshake: no Hello within 2000 ms")
    yield* noise.drop("::1:7000", "closed: the peer closed the connection")
  }).pipe(Effect.provide(capture)))
  const counted = "are counted, and logged at most once a minute"
  expect(lines).toEqual([
    `dropped a join connection from 10.1.2.3:40000: bad-mac: frame 0 failed authentication (further ones from 10.1.2.0/24 ${counted})`,
    `dropped a join connection from 10.9.9.9:5000: handshake: no Hello within 2000 ms (further ones from 10.9.9.0/24 ${counted})`,
    `dropped a join connection from ::1:7000: closed: the peer closed the connection (further ones from ::/64 ${counted})`
  ])
})

test("every address of 127.0.0.0/8 is one source; a minute on, its next line carries the count of those not logged", () => {
  let now = 1_000_000
  const noise = noiseLog("closed a connection", () => now)
  const lines: Array<string | undefined> = []
  for (let i = 0; i < 500; i++) lines.push(noise.note(`127.${i % 250}.${i % 7}.${1 + (i % 200)}:${30_000 + i}`, "unknown channel magic"))
  now += 59_999
  lines.push(noise.note("127.0.0.1:1", "unknown channel magic"))
  now += 1
  lines.push(noise.note("127.3.4.5:2", "unknown channel magic"))
  // Nothing since: the next line, a minute on, has no count.
  now += 60_000
  lines.push(noise.note("127.3.4.5:3", "unknown channel magic"))
  const logged = lines.filter((line): line is string => line !== undefined)
  expect(logged).toEqual([
    "closed a connection from 127.0.0.1:30000: unknown channel magic (further ones from 127.0.0.0/8 are counted, and logged at most once a minute)",
    "closed a connection from 127.3.4.5:2: unknown channel magic (and 500 more from 127.0.0.0/8 since the last such line)",
    "closed a connection from 127.3.4.5:3: unknown channel magic"
  ])
})

test("topics are logged apart; past the prefixes it remembers, recent ones are kept and new ones count as other sources", () => {
  let now = 0
  const noise = noiseLog("closed a connection", () => now)
  expect(noise.note("10.0.0.1:1", "a", "a")).toBeDefined()
  expect(noise.note("10.0.0.1:2", "b", "b")).toBeDefined()
  expect(noise.note("10.0.0.1:3", "a", "a")).toBeUndefined()
  // Fill the memory with other /24s, all within the minute (two are there already).
  for (let i = 0; i < NOISE_SOURCES - 2; i++) expect(noise.note(`10.${1 + (i >> 8)}.${i & 255}.1:1`, "a", "a")).toBeDefined()
  expect(noise.note("192.168.7.1:1", "a", "a")).toBe(
    "closed a connection from 192.168.7.1:1: a (further ones from other sources are counted, and logged at most once a minute)"
  )
  expect(noise.note("192.168.8.1:1", "a", "a")).toBeUndefined()
  // A minute on, the old ones are forgotten to make room: a new prefix is its own again.
  now += 60_000
  expect(noise.note("172.16.0.1:1", "a", "a")).toBe(
    "closed a connection from 172.16.0.1:1: a (further ones from 172.16.0.0/24 are counted, and logged at most once a minute)"
  )
})
