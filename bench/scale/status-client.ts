/**
 * `GET /state.json` at a fixed rate, for `bench/scale.ts`: one new TCP
 * connection per request (the board answers `Connection: close`), fired on
 * an open-loop schedule (a slow answer does not delay the next request), timed
 * from the moment the connection is asked for until the server has closed it
 * after the whole body. It asks for gzip, as real clients do. It dials from
 * 127.0.0.2, not the simulated hosts' 127.0.0.1: a source address of its own.
 *
 * `bun bench/scale/status-client.ts RATE`; starts once stdin gives the port
 * and the run's page token (`PORT TOKEN`: so its own start-up is over by then), runs until stdin says `stop` (or
 * closes), then prints one JSON line: every request's start (wall clock),
 * latency in ms, status and bytes.
 */
import { connect } from "node:net"

/** The address the requests come from (`SCALE_STATUS_SOURCE`; any 127.x.y.z reaches a launcher bound to every interface). */
const SOURCE = process.env.SCALE_STATUS_SOURCE ?? "127.0.0.2"

const interval = 1000 / Number(process.argv[2] ?? 200)
const wallClock = () => performance.timeOrigin + performance.now()
/** As fetch, curl --compressed and browsers ask: a big state comes gzipped (the body is not inflated here); with the page token. */
const requestWith = (token: string) =>
  new TextEncoder().encode(`GET /state.json HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
let request = requestWith("")

interface Sample {
  at: number
  ms: number
  status: number
  bytes: number
}
const samples: Array<Sample> = []
let inFlight = 0
let stopping = false

const fire = () => {
  const at = wallClock()
  const t0 = performance.now()
  let bytes = 0
  let head = ""
  let done = false
  inFlight += 1
  const finish = (status: number) => {
    if (done) return
    done = true
    inFlight -= 1
    samples.push({ at, ms: performance.now() - t0, status, bytes })
  }
  // node:net, for its localAddress: the client dials from an address of its own (127.0.0.2), as an operator's
  // poller is not on one of the hosts; from 127.0.0.1 its connections counted against the launcher's cap on
  // unauthenticated connections per source address (1,024) together with 1,000 hosts dialing at once.
  const socket = connect({ host: "127.0.0.1", port, localAddress: SOURCE })
  socket.on("connect", () => void socket.write(request))
  socket.on("data", (chunk: Buffer) => {
    bytes += chunk.length
    if (head.length < 16) head += new TextDecoder().decode(chunk.subarray(0, 16))
  })
  socket.on("close", () => finish(Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0)))
  socket.on("error", () => finish(0))
}

const input = Bun.stdin.stream().getReader()
const decoder = new TextDecoder()
let received = ""
const readUntil = async (pattern: RegExp): Promise<RegExpExecArray | undefined> => {
  while (true) {
    const match = pattern.exec(received)
    if (match !== null) return match
    const { done, value } = await input.read()
    if (done) return undefined
    received += decoder.decode(value, { stream: true })
  }
}
process.stdout.write("ready\n")
const portLine = await readUntil(/^(\d+) ?([0-9a-f]*)\n/)
if (portLine === undefined) process.exit(0)
const port = Number(portLine[1])
request = requestWith(portLine[2] ?? "")

// Drift-free: request i goes out at start + i × interval, whatever the timers do.
const start = performance.now()
let sent = 0
const pace = () => {
  if (stopping) return
  const now = performance.now()
  while (start + sent * interval <= now) {
    sent += 1
    fire()
  }
  setTimeout(pace, Math.max(0, start + sent * interval - performance.now()))
}
pace()

const finish = async () => {
  stopping = true
  const deadline = performance.now() + 5_000
  while (inFlight > 0 && performance.now() < deadline) await Bun.sleep(10)
  // Exit only once the pipe has taken the whole line: process.exit right after a write can cut a long one short.
  await new Promise((done) => process.stdout.write(`${JSON.stringify({ samples, unfinished: inFlight })}\n`, done))
  process.exit(0)
}

await readUntil(/stop/)
await finish()
