/**
 * StatusBoard: the run's state over HTTP on the mux port.
 *
 * The state's pages (`/`, `/state.json`, `/events`, `/metrics`) need the
 * run's page token: anyone who reaches the port would otherwise read every
 * host, rank, pid, cause and metric of the run (every local user reaches a
 * loopback port). It is made at random for each run (`pageToken`), is
 * printed in the start line's page URL (`/?token=…`, as Jupyter does: the
 * page passes it on to `events` and `state.json`), and is kept in the run's
 * 0600 registry entry, where `bun run status` finds it. It goes in the URL
 * (`?token=`) or in a header (`Authorization: Bearer <token>`, for curl and
 * Prometheus). Without it: 401; a wrong one: 403; neither says anything of
 * the run. No answer carries a CORS header: no other site's page may read
 * the run, and none may start it.
 *
 * - `GET /state.json`: 200 with the last published state, 503 before the
 *   first publication. A big state (thousands of ranks: about 1.3 MB at
 *   8,000) goes gzipped to a client that accepts it, and is rebuilt at most
 *   every 100 ms: while a big world forms it may be that far behind.
 * - `GET /`: the live page (served from here: the machines are offline).
 * - `GET /events`: Server-Sent Events, one `state` event with the whole state
 *   at once and then after each publication, at most every 250 ms; a slow
 *   reader gets the newest state when it catches up, never a backlog.
 * - `GET /metrics`: Prometheus text.
 * - `POST /start` with `Authorization: Bearer <start token>`: arms an operator
 *   start for `start: manual` join windows. The token is derived from the salt
 *   (`Keys.startToken`), never the salt, is needed from loopback too (every
 *   local user reaches it), and travels in a header, never the URL (URLs end
 *   up in logs and shell history). `bun run status --start` reads it from the
 *   run's 0600 registry file. 401 without it, 403 for a wrong one, 409 when
 *   there is nothing to arm (the decision belongs to the join gate, through
 *   `onStart`). No CORS header: a web page must not be able to start a run.
 * - `HEAD` of any GET path: the same status and headers (Content-Length
 *   included), no body, as HTTP says (monitors and `curl -I` ask this way).
 * - Anything else: 404 listing the valid paths.
 *
 * One request per connection (`Connection: close`), except `/events`,
 * which stays open until the client or the run ends. The request line must
 * arrive within the deadline and fit in 2 KiB. Each connection is served
 * from its own socket callbacks, so a slow or idle client never holds up
 * another; the state's pages (`/state.json`,
 * `/events`, `/`) are answered there too, from the newest published state,
 * so the launcher's other work never holds them up either. Only `/metrics`
 * and `/start` run an Effect.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { HttpOwner } from "../front/PortMux.ts"
import type { Connection } from "../../wire/Connection.ts"
import type { RunState } from "./RunView.ts"
import * as CallbackFibers from "../../kernel/CallbackFibers.ts"
import { invokedAs } from "../../kernel/ProgramName.ts"

export type { Phase, RankStatus, RunState } from "./RunView.ts"

export type StartOutcome = { readonly armed: true } | { readonly armed: false; readonly reason: string }

export interface StatusBoardOptions {
  /** The run's start token (`Keys.startToken`): `POST /start` must carry it. */
  readonly startToken: string
  /** The token the state's pages need (hex); made at random when not given (tests give one). */
  readonly pageToken?: string
  /** How long a client has to send its request line (already scaled). */
  readonly requestDeadlineMs: number
  /** Arm an operator start; the join gate decides. Without it, there is never anything to arm. */
  readonly onStart?: () => Effect.Effect<StartOutcome>
  /** The page `GET /` serves (HTML); without it, `/` answers like `/state.json`. */
  readonly page?: string
  /** Prometheus text for `GET /metrics`; without it, 404. */
  readonly metrics?: () => Effect.Effect<string>
}

/** Give the board to the PortMux as its `http` owner. */
export interface StatusBoard extends HttpOwner {
  /** What the state's pages need (`?token=` or `Authorization: Bearer`): the page URL the start line prints carries it. */
  readonly pageToken: string
  readonly publish: (state: RunState) => Effect.Effect<void>
  /** The run is over: send every `/events` client the last state now, then end the streams (at most a second). */
  readonly endStreams: Effect.Effect<void>
}

const MAX_REQUEST_LINE = 2048
/** Request line, headers and body together: the endpoints take no real input. */
const MAX_REQUEST = 16384
const paths = [
  "GET /?token=<page token>",
  "GET /state.json",
  "GET /events",
  "GET /metrics (each with ?token=<page token> or Authorization: Bearer <page token>)",
  "POST /start (Authorization: Bearer <start token>)"
]
/** Bytes of a page token: 128 bits, 32 hex digits in the URL. */
const PAGE_TOKEN_BYTES = 16
/** SSE: no more than one state per client this often. */
const EVENTS_EVERY_MS = 250
/** SSE: a comment this often keeps idle proxies from closing the stream. */
const EVENTS_KEEPALIVE_MS = 15_000
/**
 * Open `/events` streams, from one address and in all. Each holds at most one state in flight, but anyone
 * who reaches the port may open them: past these, a 503 says why (a live page needs one).
 */
export const MAX_EVENT_STREAMS_PER_SOURCE = 16
export const MAX_EVENT_STREAMS = 256
const reasons: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  503: "Service Unavailable"
}

const encoder = new TextEncoder()

/** A state body this big is rebuilt at most every BIG_BODY_REBUILD_MS, and gzipped for clients that take it. */
const BIG_BODY_BYTES = 64 * 1024
const BIG_BODY_REBUILD_MS = 100

interface Body {
  readonly state: RunState
  readonly bytes: Uint8Array<ArrayBuffer>
  readonly builtAt: number
  gzipped?: Uint8Array
}

const acceptsGzip = (head: string): boolean => /\r\naccept-encoding:[^\r]*\bgzip\b/i.test(head)

/** How a request is answered: with its body, or (HEAD) with only the head a GET would have. */
type Answer = "full" | "head"

const respondWith = (
  connection: Connection,
  status: number,
  body: unknown,
  contentType = "application/json",
  answer: Answer = "full",
  headers: ReadonlyArray<string> = []
): Promise<void> =>
  respondBytes(
    connection,
    status,
    encoder.encode(typeof body === "string" && contentType !== "application/json" ? body : JSON.stringify(body)),
    contentType,
    headers,
    answer
  )

/** No CORS header, ever: a page of another site must not read the run's state, nor start it. */
const respondBytes = (
  connection: Connection,
  status: number,
  body: Uint8Array,
  contentType: string,
  headers: ReadonlyArray<string> = [],
  answer: Answer = "full"
): Promise<void> => {
  const head = [
    `HTTP/1.1 ${status} ${reasons[status] ?? ""}`,
    `Content-Type: ${contentType}`,
    ...headers,
    `Content-Length: ${body.length}`,
    "Connection: close",
    "Cache-Control: no-store",
    "",
    ""
  ].join("\r\n")
  // A HEAD answer says how long the body would be (Content-Length above) and sends none.
  const done = answer === "head" ? connection.write(encoder.encode(head)) : connection.write(encoder.encode(head), body)
  connection.end()
  return done
}

/**
 * The state as JSON text, the same as `JSON.stringify(state)`, built from
 * pieces cached by identity. RunView never changes a value in place: an
 * event replaces only the ranks, hosts and arrays it touches, so the text of
 * everything else is reused. Without this, every request re-serialised the
 * whole state (about 1 MB for 8,000 ranks): a few requests a second took a
 * core during a big run's formation.
 */
const pieces = new WeakMap<object, string>()
const elementJson = (value: unknown): string => {
  if (typeof value !== "object" || value === null) return JSON.stringify(value) ?? "null"
  let text = pieces.get(value)
  if (text === undefined) {
    text = JSON.stringify(value) ?? "null"
    pieces.set(value, text)
  }
  return text
}
const arrayJson = (values: ReadonlyArray<unknown>): string => {
  let text = pieces.get(values)
  if (text === undefined) {
    text = `[${values.map(elementJson).join(",")}]`
    pieces.set(values, text)
  }
  return text
}
export const stateJson = (state: RunState): string => {
  const fields: Array<string> = []
  for (const [key, value] of Object.entries(state)) {
    if (value === undefined || typeof value === "function" || typeof value === "symbol") continue
    fields.push(`${JSON.stringify(key)}:${Array.isArray(value) ? arrayJson(value) : JSON.stringify(value)}`)
  }
  return `{${fields.join(",")}}`
}

/** The bearer token of a request head, if it has one. */
const bearerOf = (head: string): string | undefined => /\r\nauthorization:[ \t]*bearer[ \t]+([0-9a-f]{1,128})[ \t]*(?:\r\n|$)/i.exec(head)?.[1]?.toLowerCase()

/** In constant time for tokens of the right length (the length is no secret: every token of a kind has the same). */
const tokenMatches = (token: string | undefined, expected: string): boolean =>
  token !== undefined && /^[0-9a-f]*$/i.test(token) && token.length === expected.length &&
  timingSafeEqual(Buffer.from(token, "hex"), Buffer.from(expected, "hex"))

/** The paths that show the run: the page token opens them. */
const statePaths: ReadonlySet<string> = new Set(["/", "/state.json", "/events", "/metrics"])

export const make = (options: StatusBoardOptions): Effect.Effect<StatusBoard, never, Scope.Scope> =>
  Effect.gen(function*() {
    const pageToken = options.pageToken ?? randomBytes(PAGE_TOKEN_BYTES).toString("hex")
    let published: RunState | undefined
    /**
     * The bytes of the newest state asked for: between two publications every request reuses them. A big
     * world's formation publishes a state per event, thousands a second: a big body is kept a little longer.
     */
    let body: Body | undefined
    const bodyOf = (state: RunState): Body => {
      const fresh = body !== undefined &&
        (body.state === state || (body.bytes.length >= BIG_BODY_BYTES && performance.now() - body.builtAt < BIG_BODY_REBUILD_MS))
      if (fresh) return body!
      body = { state, bytes: encoder.encode(stateJson(state)), builtAt: performance.now() }
      return body
    }
    const sendState = (connection: Connection, state: RunState, gzip: boolean, answer: Answer): Promise<void> => {
      const current = bodyOf(state)
      if (!gzip || current.bytes.length < BIG_BODY_BYTES) return respondBytes(connection, 200, current.bytes, "application/json", [], answer)
      // Level 1: about 2 ms and a tenth of the size at 8,000 ranks; levels above it cost twice as much for little more.
      current.gzipped ??= Bun.gzipSync(current.bytes, { level: 1 })
      return respondBytes(connection, 200, current.gzipped, "application/json", ["Content-Encoding: gzip", "Vary: Accept-Encoding"], answer)
    }
    // HTTP handlers run their effects through fibers owned by the board's scope.
    const callbacks = yield* CallbackFibers.make("status board")
    const streams = new Set<EventStream>()
    const streamsFrom = new Map<string, number>()
    yield* Effect.addFinalizer(() => Effect.sync(() => streams.forEach((stream) => stream.close())))

    const answer = (connection: Connection, requestLine: string, head: string): Promise<void> => {
      const [asked, target] = requestLine.split(" ")
      // HEAD is routed as GET, and answered without the body.
      const headOnly = asked === "HEAD"
      const method = headOnly ? "GET" : asked
      const as: Answer = headOnly ? "head" : "full"
      const respond = (status: number, body: unknown, contentType = "application/json", headers: ReadonlyArray<string> = []) =>
        respondWith(connection, status, body, contentType, as, headers)
      // A target URL cannot parse (`//[`) is the client's mistake: a 400, not an exception in the socket callback.
      const url = URL.parse(target ?? "/", "http://status")
      if (url === null) return respond(400, { error: `malformed request target: ${JSON.stringify(target?.slice(0, 64))}` })
      if (method === "GET" && statePaths.has(url.pathname)) {
        // Before anything of the run is looked at: an answer without the token says nothing of it.
        const given = url.searchParams.get("token") ?? bearerOf(head)
        if (given === undefined) {
          return respond(
            401,
            { error: `this run's pages need its page token: open the page URL the launcher printed (live page: …/?token=…), add ?token=<page token>, or send Authorization: Bearer <page token>; ${invokedAs("status")} finds it in .cohort/runs/` },
            "application/json",
            ['WWW-Authenticate: Bearer realm="cohort run"']
          )
        }
        if (!tokenMatches(given, pageToken)) return respond(403, { error: "wrong page token for this run" })
      }
      if (method === "GET" && url.pathname === "/" && options.page !== undefined) {
        // The token is in the page's URL: no address of it goes to another site (the page loads nothing from one anyway).
        return respond(200, options.page, "text/html; charset=utf-8", ["Referrer-Policy: no-referrer"])
      }
      if (method === "GET" && url.pathname === "/events" && headOnly) {
        // What a GET would open, without opening it: an event stream has no length to give.
        void connection.write(encoder.encode(["HTTP/1.1 200 OK", "Content-Type: text/event-stream", "Cache-Control: no-store", "Connection: close", "", ""].join("\r\n")))
        connection.end()
        return Promise.resolve()
      }
      if (method === "GET" && url.pathname === "/events") {
        const fromSource = streamsFrom.get(connection.address) ?? 0
        if (fromSource >= MAX_EVENT_STREAMS_PER_SOURCE || streams.size >= MAX_EVENT_STREAMS) {
          const limit = fromSource >= MAX_EVENT_STREAMS_PER_SOURCE ? `${MAX_EVENT_STREAMS_PER_SOURCE} from one address` : `${MAX_EVENT_STREAMS} in all`
          return respond(503, { error: `too many /events streams open (at most ${limit}): close one, or poll /state.json` })
        }
        streamsFrom.set(connection.address, fromSource + 1)
        const stream = openEventStream(connection, () => {
          if (!streams.delete(stream)) return
          const left = (streamsFrom.get(connection.address) ?? 1) - 1
          if (left === 0) streamsFrom.delete(connection.address)
          else streamsFrom.set(connection.address, left)
        })
        streams.add(stream)
        if (published !== undefined) stream.offer(published)
        return Promise.resolve()
      }
      if (method === "GET" && url.pathname === "/metrics" && options.metrics !== undefined) {
        return callbacks.promise(options.metrics()).then((text) => respond(200, text, "text/plain; version=0.0.4; charset=utf-8"))
      }
      if (method === "GET" && (url.pathname === "/state.json" || url.pathname === "/")) {
        return published === undefined
          ? respond(503, { error: "no state published yet: the run is still starting" })
          : sendState(connection, published, acceptsGzip(head), as)
      }
      if (url.pathname === "/start") {
        const refuse = (status: number, error: string) => respond(status, { error })
        if (method !== "POST") return refuse(405, "use POST /start")
        if (url.searchParams.has("token")) return refuse(400, "the start token goes in an Authorization: Bearer header, never the URL")
        const token = bearerOf(head)
        if (token === undefined) {
          return refuse(401, `POST /start needs the run's start token (Authorization: Bearer <token>): \`${invokedAs("status")} --start\` sends it from this directory`)
        }
        if (!tokenMatches(token, options.startToken)) return refuse(403, "wrong start token for this run")
        const start = options.onStart ?? (() => Effect.succeed<StartOutcome>({ armed: false, reason: "this run has no manual start" }))
        return callbacks.promise(start()).then((outcome) =>
          outcome.armed ? respond(200, { armed: true }) : refuse(409, outcome.reason)
        )
      }
      return respond(404, { error: `no such path: ${asked} ${url.pathname}`, paths })
    }

    /**
     * Read the request (line, headers, any small body) within the deadline and
     * the size limits, then answer once. The whole request is read before the
     * answer: closing with unread bytes would make the kernel reset the
     * connection under the client's feet.
     */
    const serve = (connection: Connection) => {
      let head = ""
      let answered = false
      const finish = (work: () => Promise<void>) => {
        if (answered) return
        answered = true
        clearTimeout(timer)
        // Whatever a handler throws, synchronously or not, ends this connection only: no stack trace, no leak.
        void new Promise<void>((resolve) => resolve(work())).catch(() => connection.reset())
      }
      const timer = setTimeout(
        () => finish(() => respondWith(connection, 408, { error: `no complete request within ${options.requestDeadlineMs} ms` })),
        options.requestDeadlineMs
      )
      connection.receive({
        data: (bytes) => {
          if (answered) return
          head += new TextDecoder().decode(bytes)
          const lineEnd = head.indexOf("\r\n")
          if ((lineEnd === -1 && head.length > MAX_REQUEST_LINE) || lineEnd > MAX_REQUEST_LINE) {
            finish(() => respondWith(connection, 400, { error: `request line longer than ${MAX_REQUEST_LINE} bytes` }))
            return
          }
          const headEnd = head.indexOf("\r\n\r\n")
          if (headEnd === -1) {
            if (head.length > MAX_REQUEST) finish(() => respondWith(connection, 400, { error: `request longer than ${MAX_REQUEST} bytes` }))
            return
          }
          const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0)
          if (headEnd + 4 + length > MAX_REQUEST) {
            finish(() => respondWith(connection, 400, { error: `request longer than ${MAX_REQUEST} bytes` }))
          } else if (head.length >= headEnd + 4 + length) {
            finish(() => answer(connection, head.slice(0, lineEnd), head.slice(0, headEnd)))
          }
        },
        close: () => {
          answered = true
          clearTimeout(timer)
        }
      })
    }

    return {
      pageToken,
      serve,
      publish: (state) =>
        Effect.sync(() => {
          published = state
          streams.forEach((stream) => stream.offer(state))
        }),
      endStreams: Effect.promise(() => Promise.all([...streams].map((stream) => stream.finish()))).pipe(
        Effect.timeout(Duration.seconds(1)),
        Effect.ignore
      )
    }
  })

interface EventStream {
  /** Send this state when the client is ready for one (the newest wins). */
  readonly offer: (state: RunState) => void
  /** Send what is waiting now, then end the stream. */
  readonly finish: () => Promise<void>
  readonly close: () => void
}

/** Answer `/events` and keep the connection: states go out at most every EVENTS_EVERY_MS, newest first. */
const openEventStream = (connection: Connection, onClosed: () => void): EventStream => {
  let pending: RunState | undefined
  let sending = false
  let lastSentAt = 0
  let timer: ReturnType<typeof setTimeout> | undefined
  const keepAlive = setInterval(() => void connection.write(encoder.encode(": keep-alive\n\n")), EVENTS_KEEPALIVE_MS)
  const pump = () => {
    timer = undefined
    if (sending || pending === undefined || connection.isClosed) return
    const wait = lastSentAt + EVENTS_EVERY_MS - Date.now()
    if (wait > 0) {
      timer = setTimeout(pump, wait)
      return
    }
    const state = pending
    pending = undefined
    sending = true
    lastSentAt = Date.now()
    void connection.write(encoder.encode(`event: state\ndata: ${stateJson(state)}\n\n`)).then(() => {
      sending = false
      if (pending !== undefined && timer === undefined) pump()
    })
  }
  const close = () => {
    clearInterval(keepAlive)
    clearTimeout(timer)
    if (!connection.isClosed) connection.end()
    onClosed()
  }
  void connection.write(encoder.encode([
    "HTTP/1.1 200 OK",
    "Content-Type: text/event-stream",
    "Cache-Control: no-store",
    "Connection: keep-alive",
    "",
    ""
  ].join("\r\n")))
  connection.receive({ data: () => {}, close })
  return {
    offer: (state) => {
      pending = state
      if (timer === undefined) pump()
    },
    finish: async () => {
      clearTimeout(timer)
      timer = undefined
      const last = pending
      pending = undefined
      if (last !== undefined && !connection.isClosed) await connection.write(encoder.encode(`event: state\ndata: ${stateJson(last)}\n\n`))
      close()
    },
    close
  }
}
