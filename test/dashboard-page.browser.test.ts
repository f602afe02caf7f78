/**
 * The live status page in a real browser: `dashboardPage` served with a
 * scripted `/events` stream and `/state.json` by a small Bun.serve that,
 * like the launcher, answers them only with the run's page token (the page
 * is opened at `/?token=…`, as the launcher prints it, and must pass it on), driven
 * through a run's phases (waiting → forming → training with a dead rank →
 * done) and through a dropped and a vanished launcher. Needs chromium
 * (test/support/browser.ts installs Debian's as root); skips, saying why,
 * when it cannot be had. The page's static checks run regardless.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Browser, Page } from "playwright-core"
import { dashboardPage } from "../src/launcher/view/dashboard/page.ts"
import type { HostStatus, RankStatus, RunState } from "../src/launcher/view/RunView.ts"
import { browserUnavailable, launchBrowser } from "./support/browser.ts"

const unavailable = await browserUnavailable()
if (unavailable !== undefined) console.log(`dashboard browser test: skipped: no browser: ${unavailable}`)

const waitMs = 10_000
const t0 = Date.UTC(2025, 0, 1, 12, 0, 0)
/** Angle brackets in a user-chosen host name must show as text, never as markup. */
const oddHost = "<b>beta</b>"

// ---- states, by hand ----

const hosts = (beta: HostStatus["state"], betaReason: string | null = null): Array<HostStatus> => [
  { host: "alpha", declaredRanks: 4, state: "joined", reason: null },
  { host: oddHost, declaredRanks: 4, state: beta, reason: betaReason }
]

const rank = (n: number, change: Partial<RankStatus> = {}): RankStatus => ({
  rank: n,
  host: n < 4 ? "alpha" : oddHost,
  device: n < 4 ? String(n) : "cpu",
  pid: null,
  state: "starting",
  exit: null,
  restarts: 0,
  startedAt: null,
  endedAt: null,
  resources: null,
  ...change
})

const running = (n: number): RankStatus =>
  rank(n, {
    pid: 4000 + n,
    state: "running",
    startedAt: t0 + 9_000,
    resources: {
      cpu: 0.97,
      rssBytes: 512 * 1048576,
      gpuMemoryBytes: n < 4 ? 30 * 1073741824 : null,
      gpuUtilization: n < 4 ? 0.85 : null,
      at: t0 + 20_000
    }
  })

const death = { rank: 5, host: oddHost, cause: "heartbeat missed for 10 s (host beta)", at: t0 + 25_000 }
const verdict = "cohort: run completed DEGRADED (1 of 8 ranks lost: r5 heartbeat missed for 10 s)"

const base: RunState = {
  run: "spirals-test",
  phase: "waiting",
  startedAt: t0,
  updatedAt: t0 + 1_000,
  world: 8,
  joinedRanks: 4,
  joinedHosts: 1,
  windowRemainingMs: 25_000,
  capRemainingMs: 120_000,
  hosts: hosts("waiting"),
  ranks: [],
  deaths: [],
  training: null,
  throughput: [],
  verdict: null,
  joinedAfterFormation: 0,
  worldSizes: []
}

const waiting = base

const forming: RunState = {
  ...base,
  phase: "forming",
  updatedAt: t0 + 8_000,
  joinedRanks: 8,
  joinedHosts: 2,
  windowRemainingMs: 17_000,
  hosts: hosts("joined"),
  ranks: [0, 1, 2, 3, 4, 5, 6, 7].map((n) => rank(n))
}

const throughput = Array.from({ length: 40 }, (_, i) => ({ at: t0 + 10_000 + i * 500, samplesPerSec: 9_000 + 3_000 * Math.sin(i / 5) }))

const training: RunState = {
  ...forming,
  phase: "training",
  updatedAt: t0 + 30_000,
  ranks: [0, 1, 2, 3, 4, 5, 6, 7].map((n) =>
    n === 5 ? rank(5, { pid: 4005, state: "dead", exit: "signal SIGKILL", startedAt: t0 + 9_000, endedAt: t0 + 25_000 })
    : n === 2 ? { ...running(2), restarts: 1, exit: "status 1" }
    // Its own latest report (ctx.progress(…, loss=…, val_acc=…)); a user-chosen name is text, never markup.
    : n === 0 ? { ...running(0), metrics: { loss: 0.2345, val_acc: 0.9125, "<i>gain</i>": 1234.5 } }
    : running(n)
  ),
  deaths: [death],
  training: { epoch: 3, epochs: 10, samplesDone: 30_000, datasetSize: 50_000, samplesPerSec: 12_345, metrics: { loss: 0.1234, accuracy: 0.9312 } },
  throughput
}

const done: RunState = {
  ...training,
  phase: "done",
  updatedAt: t0 + 60_000,
  ranks: training.ranks.map((r) => (r.state === "dead" ? r : { ...r, state: "exited", exit: "status 0", endedAt: t0 + 59_000 })),
  hosts: hosts("gone", "agent disconnected after the run"),
  training: { epoch: 10, epochs: 10, samplesDone: 50_000, datasetSize: 50_000, samplesPerSec: 12_000, metrics: { loss: 0.0317, accuracy: 0.988 } },
  verdict
}

// ---- a scripted launcher ----

/** The page token of the scripted launcher: its URL carries it, its state and stream need it. */
const PAGE_TOKEN = "feedfacefeedfacefeedfacefeedface"

interface FakeLauncher {
  readonly url: string
  /** Requests for the state or the stream that came without the page token (answered 401). */
  readonly refused: () => number
  /** The new current state, sent to every open /events stream. */
  publish(state: RunState): void
  /** Ends every open /events stream (the server stays up: clients reconnect). */
  dropStreams(): void
  /** The launcher exits: streams end and the port closes. */
  stop(): void
  readonly connections: () => number
}

const fakeLauncher = (first: RunState | undefined): FakeLauncher => {
  let current = first
  const encoder = new TextEncoder()
  const streams = new Set<ReadableStreamDefaultController<Uint8Array>>()
  let connections = 0
  let refused = 0
  const frame = (state: RunState) => encoder.encode(`event: state\ndata: ${JSON.stringify(state)}\n\n`)
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0, // an SSE stream may be quiet for long: Bun's default 10 s would cut it
    fetch(request) {
      const url = new URL(request.url)
      const path = url.pathname
      if (url.searchParams.get("token") !== PAGE_TOKEN) {
        refused += 1
        return Response.json({ error: "this run's pages need its page token" }, { status: 401 })
      }
      if (path === "/") return new Response(dashboardPage, { headers: { "content-type": "text/html; charset=utf-8" } })
      if (path === "/state.json") {
        return current === undefined
          ? Response.json({ error: "no state yet" }, { status: 503 })
          : Response.json(current)
      }
      if (path === "/events") {
        connections += 1
        let mine: ReadableStreamDefaultController<Uint8Array> | undefined
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            mine = controller
            streams.add(controller)
            if (current !== undefined) controller.enqueue(frame(current))
          },
          cancel() {
            if (mine !== undefined) streams.delete(mine)
          }
        })
        return new Response(body, { headers: { "content-type": "text/event-stream", "cache-control": "no-store" } })
      }
      return new Response("not found", { status: 404 })
    }
  })
  const dropStreams = () => {
    for (const controller of streams) {
      try {
        controller.close()
      } catch {
        // already closed by the client
      }
    }
    streams.clear()
  }
  return {
    url: `http://127.0.0.1:${server.port}/?token=${PAGE_TOKEN}`,
    refused: () => refused,
    publish(state) {
      current = state
      for (const controller of streams) controller.enqueue(frame(state))
    },
    dropStreams,
    stop() {
      dropStreams()
      void server.stop(true)
    },
    connections: () => connections
  }
}

// ---- browser helpers: waits on conditions, never fixed sleeps ----

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
const exactly = (text: string) => new RegExp(`^${escapeRegExp(text)}$`)

const waitPhase = (page: Page, phase: string) => page.getByTestId("phase").filter({ hasText: exactly(phase) }).waitFor({ timeout: waitMs })
const waitAttr = (page: Page, testid: string, attr: string, value: string) =>
  page.locator(`[data-testid="${testid}"][${attr}="${value}"]`).waitFor({ state: "attached", timeout: waitMs })
const textOf = async (page: Page, testid: string) => (await page.getByTestId(testid).textContent({ timeout: waitMs })) ?? ""

describe("dashboard page, static", () => {
  test("is one self-contained document of modest size", () => {
    expect(dashboardPage.startsWith("<!doctype html>")).toBe(true)
    expect(Buffer.byteLength(dashboardPage)).toBeLessThan(16 * 1024)
    // Offline machines: nothing may come from elsewhere.
    expect(dashboardPage).not.toMatch(/(src|href)\s*=\s*["']?(https?:)?\/\//i)
    expect(dashboardPage).not.toMatch(/@import|url\(/i)
    expect(dashboardPage).not.toContain("innerHTML")
    expect(dashboardPage).toContain('data-testid="phase"')
  })
})

describe.skipIf(unavailable !== undefined)("dashboard page in chromium", () => {
  let browser: Browser
  let screenshotDir = ""
  const pageErrors: Array<string> = []

  beforeAll(async () => {
    browser = await launchBrowser()
    screenshotDir = mkdtempSync(join(tmpdir(), "cohort-dashboard-"))
    console.log(`dashboard browser test: screenshots in ${screenshotDir}`)
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
  })

  const openPage = async (url: string, width = 1280, height = 900): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width, height } })
    page.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`))
    page.on("console", (message) => {
      // Refused or cut connections and the 503 before the first state are the scenario, not faults.
      if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) pageErrors.push(`console: ${message.text()}`)
    })
    await page.goto(url)
    return page
  }

  test("follows a run from waiting to done, then the launcher's exit", async () => {
    const launcher = fakeLauncher(undefined)
    const errorsBefore = pageErrors.length
    try {
      const page = await openPage(launcher.url)

      // Before the first state: /state.json answers 503, the stream is silent.
      await page.getByTestId("counts").filter({ hasText: "first state" }).waitFor({ timeout: waitMs })
      expect(await textOf(page, "phase")).toBe("")

      launcher.publish(waiting)
      await waitPhase(page, "waiting")
      expect(await textOf(page, "run")).toBe("spirals-test")
      expect(await textOf(page, "counts")).toContain("4/8 ranks joined")
      expect(await textOf(page, "counts")).toContain("1/2 hosts")
      await page.getByTestId("countdown").filter({ hasText: /join window closes in 2[45] s/ }).waitFor({ timeout: waitMs })
      // It counts down between updates, from the launcher's figure.
      await page.getByTestId("countdown").filter({ hasText: /closes in 2[0-4] s/ }).waitFor({ timeout: waitMs })
      await waitAttr(page, "connection", "data-state", "live")
      await page.screenshot({ path: join(screenshotDir, "1-waiting.png"), fullPage: true })

      launcher.publish(forming)
      await waitPhase(page, "forming")
      expect(await page.getByTestId("countdown").isHidden()).toBe(true)
      for (const n of [0, 1, 2, 3, 4, 5, 6, 7]) await waitAttr(page, `rank-${n}`, "data-state", "starting")

      launcher.publish(training)
      await waitPhase(page, "training")
      for (const status of training.ranks) await waitAttr(page, `rank-${status.rank}`, "data-state", status.state)
      expect(await page.locator('[data-testid^="rank-"]').count()).toBe(8)
      expect(await page.locator('[data-state="dead"][data-testid^="rank-"]').count()).toBe(1)
      expect(await textOf(page, "rank-5")).toContain("dead")
      expect(await textOf(page, "rank-5")).toContain("signal SIGKILL")
      expect(await textOf(page, "rank-0")).toContain("pid 4000")
      expect(await textOf(page, "rank-0")).toContain("512 MiB")
      expect(await textOf(page, "rank-0")).toContain("30.0 GiB")
      expect(await textOf(page, "rank-0")).toContain("85% util")
      expect(await textOf(page, "rank-4")).not.toContain("gpu")
      expect(await textOf(page, "rank-2")).toContain("1 restart")
      expect(await textOf(page, "deaths")).toContain(death.cause)
      expect(await textOf(page, "deaths")).toContain("r5")
      expect(await textOf(page, "epoch")).toBe("epoch 3/10")
      expect(await textOf(page, "samples")).toContain("(60%)")
      expect(await textOf(page, "rate")).toContain("samples/s")
      expect(await textOf(page, "metrics")).toContain("loss 0.1234")
      expect(await textOf(page, "metrics")).toContain("accuracy 93.12%")
      // Each rank's own figures in its cell, beside the averages: rank 0 reported some, rank 1 none.
      expect(await page.locator('[data-testid="rank-0"] [data-testid="rankmetrics"] .metric').allTextContents()).toEqual([
        "loss 0.2345",
        "val_acc 91.25%",
        "<i>gain</i> 1,235"
      ])
      expect(await page.locator('[data-testid="rank-0"] [data-testid="rankmetrics"] i').count()).toBe(0)
      expect(await page.locator('[data-testid="rank-1"] [data-testid="rankmetrics"]').count()).toBe(0)
      expect(await page.getByTestId("throughput").getAttribute("data-points")).toBe("40")
      const line = await page.locator('[data-testid="throughput"] polyline').getAttribute("points")
      expect(line?.trim().split(/\s+/).length).toBe(40)
      // Ranks are grouped by host, and the odd host name is text, not a <b> element.
      expect(await page.locator(`[data-testid="host"][data-host="${oddHost}"] [data-testid^="rank-"]`).count()).toBe(4)
      expect(await page.locator(".hostname").allTextContents()).toContain(oddHost)
      expect(await page.locator("#hosts b", { hasText: exactly("beta") }).count()).toBe(0)
      expect(await page.getByText(oddHost).first().isVisible()).toBe(true)
      await page.screenshot({ path: join(screenshotDir, "2-training.png"), fullPage: true })

      // Phone width: everything wraps, nothing scrolls sideways.
      await page.setViewportSize({ width: 375, height: 740 })
      await page.emulateMedia({ colorScheme: "dark" }) // the screenshot shows the dark scheme too
      await page.getByTestId("rank-7").waitFor({ timeout: waitMs })
      const scrollWidth = Number(await page.evaluate("document.documentElement.scrollWidth"))
      expect(scrollWidth).toBeLessThanOrEqual(375)
      await page.screenshot({ path: join(screenshotDir, "3-training-phone.png"), fullPage: true })
      await page.setViewportSize({ width: 1280, height: 900 })
      await page.emulateMedia({ colorScheme: "light" })

      launcher.publish(done)
      await waitPhase(page, "done")
      expect(await textOf(page, "verdict")).toBe(verdict)
      for (const status of done.ranks) await waitAttr(page, `rank-${status.rank}`, "data-state", status.state)
      expect(await textOf(page, "hosts-gone")).toContain(`${oddHost}: agent disconnected after the run`)

      // The launcher exits: the page keeps the last state and says the connection is closed.
      launcher.stop()
      await waitAttr(page, "connection", "data-state", "closed")
      expect(await textOf(page, "connection")).toContain("closed")
      expect(await textOf(page, "phase")).toBe("done")
      expect(await textOf(page, "verdict")).toBe(verdict)
      expect(await page.locator('[data-testid^="rank-"]').count()).toBe(8)
      await page.screenshot({ path: join(screenshotDir, "4-done-closed.png"), fullPage: true })
      await page.close()
      expect(pageErrors.slice(errorsBefore)).toEqual([])
      // The page asked for its state and its stream with the token of its own URL, every time.
      expect(launcher.refused()).toBe(0)
    } finally {
      launcher.stop()
    }
  }, 60_000)

  test("reconnects after a dropped stream, and says so when the launcher vanishes mid-run", async () => {
    const launcher = fakeLauncher(training)
    const errorsBefore = pageErrors.length
    try {
      const page = await openPage(launcher.url)
      await waitPhase(page, "training")
      await waitAttr(page, "connection", "data-state", "live")

      // The stream ends mid-run; meanwhile the run moves on. EventSource retries and catches up.
      launcher.dropStreams()
      await waitAttr(page, "connection", "data-state", "reconnecting")
      launcher.publish({ ...training, updatedAt: training.updatedAt + 5_000, training: { ...training.training!, epoch: 4, samplesDone: 5_000 } })
      await page.getByTestId("epoch").filter({ hasText: exactly("epoch 4/10") }).waitFor({ timeout: waitMs })
      await waitAttr(page, "connection", "data-state", "live")
      expect(launcher.connections()).toBeGreaterThanOrEqual(2)
      // The reconnections carried the token too.
      expect(launcher.refused()).toBe(0)

      // The launcher dies before the run ends: the last state stays, and the page keeps trying.
      launcher.stop()
      await waitAttr(page, "connection", "data-state", "reconnecting")
      await page.getByTestId("connection").filter({ hasText: "reconnecting" }).waitFor({ timeout: waitMs })
      expect(await textOf(page, "phase")).toBe("training")
      expect(await textOf(page, "epoch")).toBe("epoch 4/10")
      await page.screenshot({ path: join(screenshotDir, "5-launcher-vanished.png"), fullPage: true })
      await page.close()
      expect(pageErrors.slice(errorsBefore)).toEqual([])
    } finally {
      launcher.stop()
    }
  }, 60_000)
})
