/**
 * The status endpoint on the mux port, spoken to with real HTTP clients. The
 * state's pages are asked with the board's page token (a fixed one here)
 * unless a test says otherwise.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import { pageAddress } from "../src/launcher/front/Listen.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import * as RunView from "../src/launcher/view/RunView.ts"
import * as StatusBoard from "../src/launcher/view/StatusBoard.ts"
import { Connection, forwardingHandlers, type SocketData } from "../src/wire/Connection.ts"
import { newSalt, startToken } from "../src/wire/Keys.ts"
import { effect, eventually } from "./support/effect.ts"
import { waitFor } from "./support/processes.ts"

const state: StatusBoard.RunState = {
  ...RunView.initial("board", 0),
  phase: "training",
  joinedRanks: 2,
  joinedHosts: 1,
  windowRemainingMs: null,
  capRemainingMs: null,
  ranks: [
    { rank: 0, host: "node-a", device: "cpu:0", pid: 100, state: "running", exit: null, restarts: 0, startedAt: 1, endedAt: null, resources: null },
    { rank: 1, host: "node-a", device: "cpu:1", pid: null, state: "dead", exit: "signal SIGKILL", restarts: 0, startedAt: 1, endedAt: 2, resources: null }
  ]
}

/** The page token the boards of these tests are given. */
const PAGE = "0123456789abcdef0123456789abcdef"

const setup = (onStart?: () => Effect.Effect<StatusBoard.StartOutcome>, extra: Partial<StatusBoard.StatusBoardOptions> = {}) =>
  Effect.gen(function*() {
    const salt = newSalt()
    const token = startToken(salt)
    const board = yield* StatusBoard.make({ startToken: token, pageToken: PAGE, requestDeadlineMs: 300, ...(onStart ? { onStart } : {}), ...extra })
    const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 1_000, owners: { http: board } })
    /** A state page's URL with the page token; any other path as it is. */
    const url = (path: string) => `http://127.0.0.1:${mux.port}${path}${["/", "/state.json", "/events", "/metrics"].includes(path) ? `?token=${PAGE}` : ""}`
    const bare = (path: string) => `http://127.0.0.1:${mux.port}${path}`
    return { board, mux, salt, token, url, bare }
  })

const fetchJson = (url: string, init?: RequestInit) =>
  Effect.promise(async () => {
    // A fresh connection per request: the server closes after each answer.
    const response = await fetch(url, { ...init, keepalive: false })
    return { status: response.status, connection: response.headers.get("connection"), body: await response.json() }
  })

/** Send raw bytes and keep the connection open; resolves with whatever comes back before the server closes. */
const raw = (port: number, bytes: string) =>
  Effect.promise(() =>
    new Promise<string>((resolve) => {
      let received = ""
      void Bun.connect({
        hostname: "127.0.0.1",
        port,
        socket: {
          open: (socket) => {
            if (bytes.length > 0) socket.write(bytes)
            socket.flush()
          },
          data: (_socket, chunk) => void (received += new TextDecoder().decode(chunk)),
          close: () => resolve(received),
          error: () => resolve(received)
        }
      })
    })
  )

describe("StatusBoard", () => {
  effect.live("503 before the first publication, then the published state as JSON", () =>
    Effect.gen(function*() {
      const { board, url } = yield* setup()
      const before = yield* fetchJson(url("/state.json"))
      expect(before.status).toBe(503)
      yield* board.publish(state)
      expect(yield* fetchJson(url("/state.json"))).toEqual({ status: 200, connection: "close", body: state })
      expect((yield* fetchJson(url("/"))).body).toEqual(state)
    }))

  effect.live("unknown paths get 404 with the list of valid ones", () =>
    Effect.gen(function*() {
      const { url } = yield* setup()
      const response = yield* fetchJson(url("/nope"))
      expect(response.status).toBe(404)
      expect((response.body as { paths: unknown }).paths).toEqual([
        "GET /?token=<page token>",
        "GET /state.json",
        "GET /events",
        "GET /metrics (each with ?token=<page token> or Authorization: Bearer <page token>)",
        "POST /start (Authorization: Bearer <start token>)"
      ])
    }))

  effect.live("POST /start needs the start token in a header, from loopback too; no CORS; 409 when nothing can be armed", () =>
    Effect.gen(function*() {
      let armed = 0
      const { token, url } = yield* setup(() => Effect.sync(() => (++armed === 1 ? { armed: true } : { armed: false, reason: "already armed" })))
      const bearer = (value: string) => ({ method: "POST", headers: { Authorization: `Bearer ${value}` } })
      expect(yield* fetchJson(url("/start"), { method: "POST" })).toEqual({
        status: 401,
        connection: "close",
        body: { error: "POST /start needs the run's start token (Authorization: Bearer <token>): `bun run status --start` sends it from this directory" }
      })
      expect(yield* fetchJson(url("/start"), bearer("0".repeat(64)))).toEqual({ status: 403, connection: "close", body: { error: "wrong start token for this run" } })
      expect((yield* fetchJson(url(`/start?token=${token}`), { method: "POST" })).status).toBe(400)
      expect(armed).toBe(0)
      const response = yield* Effect.promise(() => fetch(url("/start"), { ...bearer(token), keepalive: false }))
      expect([response.status, response.headers.get("access-control-allow-origin"), yield* Effect.promise(() => response.json())]).toEqual([200, null, { armed: true }])
      expect((yield* fetchJson(url("/start"), bearer(token))).status).toBe(409)
      expect((yield* fetchJson(url("/start"))).status).toBe(405)
      const plain = yield* setup()
      expect(yield* fetchJson(plain.url("/start"), bearer(plain.token))).toEqual({
        status: 409,
        connection: "close",
        body: { error: "this run has no manual start" }
      })
    }))

  test("the start token is HKDF-SHA256 of the salt under its own label (a known answer, computed apart from cohort)", () => {
    expect(startToken(new Uint8Array([...Array(16).keys()]))).toBe("a44b42660d9d5c4881da749a6d64418c625103035892f0d72b76a3f27123c38c")
  })

  effect.live("a request line over 2 KiB is refused; a silent client gets 408 at the deadline", () =>
    Effect.gen(function*() {
      const { mux } = yield* setup()
      const long = yield* raw(mux.port, `GET /${"a".repeat(3000)} HTTP/1.1\r\n\r\n`)
      expect(long).toStartWith("HTTP/1.1 400 Bad Request")
      const silent = yield* raw(mux.port, "GET ")
      expect(silent).toStartWith("HTTP/1.1 408 Request Timeout")
    }))

  effect.live("a malformed request target gets 400 and its connection is closed, every time; the board goes on serving", () =>
    Effect.gen(function*() {
      const { board, mux, url } = yield* setup()
      yield* board.publish(state)
      // `new URL("//[", base)` throws: the answer must come from the board, not an exception in the socket callback.
      const answers = yield* Effect.all(Array.from({ length: 20 }, () => raw(mux.port, "GET //[ HTTP/1.1\r\n\r\n")), { concurrency: "unbounded" })
      for (const answer of answers) expect(answer).toStartWith("HTTP/1.1 400 Bad Request")
      expect(answers[0]).toContain("malformed request target")
      expect((yield* fetchJson(url("/state.json"))).status).toBe(200)
    }))

  effect.live("a slow client does not hold up others", () =>
    Effect.gen(function*() {
      const { board, mux, url } = yield* setup()
      yield* board.publish(state)
      const slow = yield* Effect.fork(raw(mux.port, "GET /sta"))
      for (let i = 0; i < 10; i++) expect((yield* fetchJson(url("/state.json"))).status).toBe(200)
      // All ten were answered while the slow client still waited for its deadline.
      expect(slow.unsafePoll()).toBeNull()
      expect(yield* Effect.fromFiber(slow)).toStartWith("HTTP/1.1 408")
    }))

  effect.live("a big state: gzipped for a client that accepts it, plain for one that does not; rebuilt within 100 ms of a change", () =>
    Effect.gen(function*() {
      const { board, mux, url } = yield* setup()
      const bigState = (pid: number): StatusBoard.RunState => ({
        ...state,
        ranks: Array.from({ length: 2_000 }, (_, rank) => ({ ...state.ranks[0]!, rank, pid: pid + rank }))
      })
      const first = bigState(1_000)
      yield* board.publish(first)
      const plain = yield* raw(mux.port, `GET /state.json?token=${PAGE} HTTP/1.1\r\nHost: x\r\n\r\n`)
      expect(plain).not.toContain("Content-Encoding")
      expect(JSON.parse(plain.slice(plain.indexOf("\r\n\r\n") + 4))).toEqual(first)
      // fetch asks for gzip and inflates it.
      const zipped = yield* Effect.promise(() => fetch(url("/state.json")))
      expect(zipped.headers.get("content-encoding")).toBe("gzip")
      expect(Number(zipped.headers.get("content-length"))).toBeLessThan(JSON.stringify(first).length / 4)
      expect(yield* Effect.promise(() => zipped.json())).toEqual(first)
      const second = bigState(50_000)
      yield* board.publish(second)
      // A big body is rebuilt at most every 100 ms: the new state comes within the deadline. It is 30 times
      // that interval, so that a loaded machine's slow requests cannot fail it, while a body that is never
      // rebuilt (or kept for seconds) still does.
      yield* eventually(Effect.map(fetchJson(url("/state.json")), ({ body }) => (body as StatusBoard.RunState).ranks[0]!.pid === 50_000), "the new state", 3_000)
      expect((yield* fetchJson(url("/state.json"))).body).toEqual(second)
    }))

  effect.live("GET / serves the page and GET /metrics the metrics text, when they are given", () =>
    Effect.gen(function*() {
      const { url } = yield* setup(undefined, { page: "<!doctype html><p>page</p>", metrics: () => Effect.succeed("cohort_up 1\n") })
      const page = yield* Effect.promise(() => fetch(url("/")))
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
      expect(yield* Effect.promise(() => page.text())).toBe("<!doctype html><p>page</p>")
      const metrics = yield* Effect.promise(() => fetch(url("/metrics")))
      expect(metrics.headers.get("content-type")).toStartWith("text/plain; version=0.0.4")
      expect(yield* Effect.promise(() => metrics.text())).toBe("cohort_up 1\n")
    }))

  effect.live("GET /events: the state at once, then the newest after each publication, at most every 250 ms; the stream ends with the board", () =>
    Effect.gen(function*() {
      const events: Array<{ at: number; state: StatusBoard.RunState }> = []
      const ended = yield* Effect.scoped(Effect.gen(function*() {
        const started = yield* setup()
        yield* started.board.publish(state)
        const response = yield* Effect.promise(() => fetch(started.url("/events")))
        expect(response.headers.get("content-type")).toBe("text/event-stream")
        const reader = response.body!.getReader()
        const ended = (async () => {
          let buffer = ""
          for (;;) {
            const { done, value } = await reader.read()
            if (done) return
            buffer += new TextDecoder().decode(value)
            let end: number
            while ((end = buffer.indexOf("\n\n")) >= 0) {
              const block = buffer.slice(0, end)
              buffer = buffer.slice(end + 2)
              const data = /^event: state\ndata: (.*)$/s.exec(block)
              if (data !== null) events.push({ at: performance.now(), state: JSON.parse(data[1]!) })
            }
          }
        })()
        yield* Effect.promise(() => waitFor(() => events.length === 1, "the first state"))
        expect(events[0]!.state).toEqual(state)
        // A burst of publications: the client gets the newest, not a backlog.
        for (let epoch = 1; epoch <= 20; epoch++) {
          yield* started.board.publish({ ...state, training: { epoch, epochs: 20, samplesDone: 0, datasetSize: 1, samplesPerSec: null, metrics: {} } })
        }
        yield* Effect.promise(() => waitFor(() => events.at(-1)?.state.training?.epoch === 20, "the newest state", 4_000))
        expect(events.length).toBeLessThanOrEqual(3)
        const gaps = events.slice(1).map((event, index) => event.at - events[index]!.at)
        expect(gaps.every((gap) => gap >= 200)).toBe(true)
        return ended
      }))
      // The board's scope has closed: the stream ends (a test timeout otherwise).
      yield* Effect.promise(() => ended)
    }))

  effect.live("endStreams: the state waiting behind the 250 ms pacing goes out at once, then the stream ends", () =>
    Effect.gen(function*() {
      /**
       * One try: open the stream, wait until its first state has come (so the next one waits behind the
       * pacing), publish the last state, end the streams. Returns the states read and when the stream ended,
       * in ms after the request went out. The board sends the first state once the request is in, so a state
       * held for the pacing cannot go out before 250 ms after the request: a stream that ends sooner proves
       * endStreams sent it at once, on any machine, however slow.
       */
      const attempt = Effect.scoped(Effect.gen(function*() {
        const { board, url } = yield* setup()
        yield* board.publish(state)
        const requestedAt = performance.now()
        const response = yield* Effect.promise(() => fetch(url("/events")))
        const reader = response.body!.getReader()
        let text = ""
        const read = (async () => {
          for (;;) {
            const { done, value } = await reader.read()
            if (done) return performance.now() - requestedAt
            text += new TextDecoder().decode(value)
          }
        })()
        yield* Effect.promise(() => waitFor(() => text.includes("\n\n"), "the first state on the stream"))
        yield* board.publish({ ...state, phase: "done", verdict: "run completed" })
        yield* board.endStreams
        const endedMs = yield* Effect.promise(() => read)
        const states = [...text.matchAll(/^data: (.*)$/gm)].map((match) => JSON.parse(match[1]!) as StatusBoard.RunState)
        return { states, endedMs }
      }))
      // The time is the proof, and a busy machine can make a good try slow: up to five tries, one must end
      // before the pacing could have let the state out. A board that holds the state for the pacing fails
      // every try; every try must carry both states.
      const tries: Array<number> = []
      for (let index = 0; index < 5 && !tries.some((ms) => ms < 250); index++) {
        const { states, endedMs } = yield* attempt
        expect(states.map((each) => each.phase)).toEqual(["training", "done"])
        expect(states.at(-1)!.verdict).toBe("run completed")
        tries.push(endedMs)
      }
      expect({ tries, anyBeforeThePacing: tries.some((ms) => ms < 250) }).toEqual({ tries, anyBeforeThePacing: true })
    }))

  effect.live("GET /events: 16 streams from one address at most; the next gets a 503 saying so, and a closed one frees its place", () =>
    Effect.gen(function*() {
      const { board, url } = yield* setup()
      yield* board.publish(state)
      const open = () => {
        const abort = new AbortController()
        return fetch(url("/events"), { signal: abort.signal }).then((response) => ({ response, abort }))
      }
      const streams = yield* Effect.promise(() => Promise.all(Array.from({ length: 16 }, open)))
      expect(streams.map(({ response }) => response.status)).toEqual(Array(16).fill(200))
      const refused = yield* Effect.promise(open)
      expect(refused.response.status).toBe(503)
      expect(((yield* Effect.promise(() => refused.response.json())) as { error: string }).error).toBe(
        "too many /events streams open (at most 16 from one address): close one, or poll /state.json"
      )
      streams[0]!.abort.abort()
      // The server sees the close a moment later: ask until a place is free (3 s at most).
      const freed = yield* Effect.promise(async () => {
        for (const deadline = performance.now() + 3_000; performance.now() < deadline; await Bun.sleep(20)) {
          const next = await open()
          if (next.response.status === 200) return next
        }
        return undefined
      })
      expect(freed?.response.status).toBe(200)
      for (const { abort } of [...streams.slice(1), freed!]) abort.abort()
    }))

  effect.live("the state's pages without the page token: 401, with another: 403, and neither says anything of the run", () =>
    Effect.gen(function*() {
      const { bare, board } = yield* setup(undefined, { page: "<!doctype html><p>page</p>", metrics: () => Effect.succeed("cohort_up 1\n") })
      yield* board.publish(state)
      const missing = {
        error: "this run's pages need its page token: open the page URL the launcher printed (live page: …/?token=…), add ?token=<page token>, or send Authorization: Bearer <page token>; bun run status finds it in .cohort/runs/"
      }
      const wrong = { error: "wrong page token for this run" }
      const answers: Array<unknown> = []
      for (const path of ["/", "/state.json", "/events", "/metrics"]) {
        for (const [query, headers] of [
          ["", {}],
          [`?token=${"f".repeat(32)}`, {}],
          // The token of another kind, the start token's length, and a few digits: each simply wrong.
          ["", { Authorization: `Bearer ${"a".repeat(64)}` }],
          ["?token=12", {}],
          ["?token=not-hex", {}]
        ] as const) {
          const response = yield* Effect.promise(() => fetch(bare(`${path}${query}`), { headers, keepalive: false }))
          answers.push({
            path: `${path}${query}`,
            status: response.status,
            authenticate: response.headers.get("www-authenticate"),
            cors: response.headers.get("access-control-allow-origin"),
            body: yield* Effect.promise(() => response.json())
          })
        }
      }
      expect(answers).toEqual(["/", "/state.json", "/events", "/metrics"].flatMap((path) => [
        { path, status: 401, authenticate: 'Bearer realm="cohort run"', cors: null, body: missing },
        { path: `${path}?token=${"f".repeat(32)}`, status: 403, authenticate: null, cors: null, body: wrong },
        { path, status: 403, authenticate: null, cors: null, body: wrong },
        { path: `${path}?token=12`, status: 403, authenticate: null, cors: null, body: wrong },
        { path: `${path}?token=not-hex`, status: 403, authenticate: null, cors: null, body: wrong }
      ]))
      // HEAD is held to the same: a 401 and nothing else.
      const head = yield* Effect.promise(() => fetch(bare("/state.json"), { method: "HEAD", keepalive: false }))
      expect(head.status).toBe(401)
    }))

  effect.live("the page token opens every state page, in the URL or in a bearer header; no answer carries a CORS header", () =>
    Effect.gen(function*() {
      const { bare, board, url } = yield* setup(undefined, { page: "<!doctype html><p>page</p>", metrics: () => Effect.succeed("cohort_up 1\n") })
      yield* board.publish(state)
      const seen: Array<unknown> = []
      for (const path of ["/", "/state.json", "/metrics"]) {
        for (const [target, headers] of [[url(path), {}], [bare(path), { Authorization: `Bearer ${PAGE}` }], [bare(path), { Authorization: `bearer ${PAGE.toUpperCase()}` }]] as const) {
          const response = yield* Effect.promise(() => fetch(target, { headers, keepalive: false }))
          seen.push({ path, status: response.status, cors: response.headers.get("access-control-allow-origin"), body: (yield* Effect.promise(() => response.text())).slice(0, 15) })
        }
      }
      const stateStart = JSON.stringify(state).slice(0, 15)
      expect(seen).toEqual([
        ...Array(3).fill({ path: "/", status: 200, cors: null, body: "<!doctype html>" }),
        ...Array(3).fill({ path: "/state.json", status: 200, cors: null, body: stateStart }),
        ...Array(3).fill({ path: "/metrics", status: 200, cors: null, body: "cohort_up 1\n" })
      ])
      const page = yield* Effect.promise(() => fetch(url("/"), { keepalive: false }))
      expect(page.headers.get("referrer-policy")).toBe("no-referrer")
      yield* Effect.promise(() => page.text())
      // The stream, as the page opens it (EventSource takes no header: the token rides in the URL).
      const stream = yield* Effect.promise(() => fetch(url("/events")))
      expect([stream.status, stream.headers.get("content-type"), stream.headers.get("access-control-allow-origin")]).toEqual([200, "text/event-stream", null])
      yield* Effect.promise(() => stream.body!.cancel())
      // The refusals and the 404 carry none either.
      for (const path of ["/state.json", "/nope", "/start"]) {
        const response = yield* Effect.promise(() => fetch(bare(path), { keepalive: false }))
        expect({ path, cors: response.headers.get("access-control-allow-origin") }).toEqual({ path, cors: null })
        yield* Effect.promise(() => response.text())
      }
    }))

  effect.live("without a page token given, each board makes its own: 32 hex digits, never another board's", () =>
    Effect.gen(function*() {
      const one = yield* StatusBoard.make({ startToken: startToken(newSalt()), requestDeadlineMs: 300 })
      const two = yield* StatusBoard.make({ startToken: startToken(newSalt()), requestDeadlineMs: 300 })
      expect(one.pageToken).toMatch(/^[0-9a-f]{32}$/)
      expect(two.pageToken).toMatch(/^[0-9a-f]{32}$/)
      expect(one.pageToken).not.toBe(two.pageToken)
    }))

  /**
   * HEAD straight to the board, on a listener of the test's own: the mux routes a connection to HTTP by its first
   * four bytes (`GET `, `POST`), and which of them it takes is the mux's business, not the board's.
   */
  const boardAlone = (extra: Partial<StatusBoard.StatusBoardOptions> = {}) =>
    Effect.gen(function*() {
      const board = yield* StatusBoard.make({ startToken: startToken(newSalt()), pageToken: PAGE, requestDeadlineMs: 300, ...extra })
      const server = yield* Effect.acquireRelease(
        Effect.sync(() =>
          Bun.listen<SocketData>({
            hostname: "127.0.0.1",
            port: 0,
            socket: { ...forwardingHandlers, open: (socket) => board.serve(new Connection(socket)) }
          })
        ),
        (server) => Effect.sync(() => server.stop(true))
      )
      return { board, port: server.port }
    })

  /** The whole answer to a raw request: the head's lines and whatever came after it. */
  const ask = (port: number, request: string) =>
    Effect.map(raw(port, request), (answer) => {
      const end = answer.indexOf("\r\n\r\n")
      return { lines: answer.slice(0, end).split("\r\n"), body: answer.slice(end + 4) }
    })

  effect.live("HEAD answers as GET would, the same status and headers (Content-Length too), without the body", () =>
    Effect.gen(function*() {
      const { board, port } = yield* boardAlone({ page: "<!doctype html><p>page</p>", metrics: () => Effect.succeed("cohort_up 1\n") })
      // Before the first state: the 503 GET gets, head only.
      const early = yield* ask(port, `HEAD /state.json?token=${PAGE} HTTP/1.1\r\nHost: x\r\n\r\n`)
      expect(early.lines[0]).toBe("HTTP/1.1 503 Service Unavailable")
      expect(early.body).toBe("")
      yield* board.publish(state)
      for (const path of ["/state.json", "/", "/metrics"]) {
        const get = yield* ask(port, `GET ${path}?token=${PAGE} HTTP/1.1\r\nHost: x\r\n\r\n`)
        const head = yield* ask(port, `HEAD ${path}?token=${PAGE} HTTP/1.1\r\nHost: x\r\n\r\n`)
        expect({ path, lines: head.lines }).toEqual({ path, lines: get.lines })
        expect(head.lines).toContain(`Content-Length: ${Buffer.byteLength(get.body)}`)
        expect(get.body.length).toBeGreaterThan(0)
        expect(head.body).toBe("")
      }
      const page = yield* ask(port, `HEAD /?token=${PAGE} HTTP/1.1\r\n\r\n`)
      expect(page.lines).toContain("Content-Type: text/html; charset=utf-8")
      expect(page.lines).toContain(`Content-Length: ${"<!doctype html><p>page</p>".length}`)
      // What a client reads: the status and the length, no body.
      const response = yield* Effect.promise(() => fetch(`http://127.0.0.1:${port}/state.json`, { method: "HEAD", headers: { Authorization: `Bearer ${PAGE}` }, keepalive: false }))
      expect(response.status).toBe(200)
      expect(Number(response.headers.get("content-length"))).toBe(JSON.stringify(state).length)
      expect(yield* Effect.promise(() => response.text())).toBe("")
    }))

  effect.live("HEAD of /events says what a GET would open and closes; HEAD of an unknown path is a 404, of /start a 405", () =>
    Effect.gen(function*() {
      const { board, port } = yield* boardAlone()
      yield* board.publish(state)
      const events = yield* ask(port, `HEAD /events?token=${PAGE} HTTP/1.1\r\n\r\n`)
      expect(events.lines[0]).toBe("HTTP/1.1 200 OK")
      expect(events.lines).toContain("Content-Type: text/event-stream")
      expect(events.body).toBe("")
      const missing = yield* ask(port, "HEAD /nope HTTP/1.1\r\n\r\n")
      expect(missing.lines[0]).toBe("HTTP/1.1 404 Not Found")
      expect(missing.body).toBe("")
      const start = yield* ask(port, "HEAD /start HTTP/1.1\r\n\r\n")
      expect(start.lines[0]).toBe("HTTP/1.1 405 Method Not Allowed")
      expect(start.body).toBe("")
    }))

  test("the page's address in the start line is one a browser can open, never 0.0.0.0", () => {
    const plan = (bindAddress: string, remoteDialAddress: string) => ({ bindAddress, dialAddress: "127.0.0.1", remoteDialAddress })
    // Bound to loopback: loopback.
    expect(pageAddress(plan("127.0.0.1", "127.0.0.1"), "gpu-a")).toBe("127.0.0.1")
    // Bound to every interface: the address the other hosts dial...
    expect(pageAddress(plan("0.0.0.0", "10.0.0.1"), "gpu-a")).toBe("10.0.0.1")
    expect(pageAddress(plan("0.0.0.0", "launcher.example"), "gpu-a")).toBe("launcher.example")
    // ...unless that is a loopback one (self-deployed agents on this machine): this host's name.
    for (const loopback of ["127.0.0.1", "127.0.1.1", "localhost", "::1"]) expect(pageAddress(plan("0.0.0.0", loopback), "gpu-a")).toBe("gpu-a")
  })
})
