/**
 * The live page against a real run, in chromium: `bun run launch` of three
 * CPU ranks of examples/train.ts under an elastic policy, with a join window
 * that waits for the operator's start (`POST /start`), so the page is open
 * while the run is still `waiting`. The page follows the run from waiting
 * (through forming, when it is slow enough to see) to training; every rank's
 * cell runs; rank 1 is SIGKILLed by its pid (from /state.json) and its cell
 * turns dead, the death listed with its cause; the run ends DEGRADED, and
 * the page shows `done` with the verdict, then the closed connection.
 * Screenshots (waiting, training, dead rank, done) go to a temp dir, whose
 * path is printed. Skips, saying why, when no browser can be had.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Browser, Page } from "playwright-core"
import { fetchState, postStart, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { browserUnavailable, launchBrowser } from "./support/browser.ts"
import { waitFor } from "./support/processes.ts"

const unavailable = await browserUnavailable()
if (unavailable !== undefined) console.log(`dashboard live test: skipped: no browser: ${unavailable}`)

const RANKS = 3
const VICTIM = 1
/** How long the page may take to show what the run did (states go out at most every 250 ms). */
const waitMs = 20_000

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
const exactly = (text: string) => new RegExp(`^${escapeRegExp(text)}$`)

const waitPhase = (page: Page, phase: string, timeout = waitMs) =>
  page.getByTestId("phase").filter({ hasText: exactly(phase) }).waitFor({ timeout })
const waitAttr = (page: Page, testid: string, attr: string, value: string, timeout = waitMs) =>
  page.locator(`[data-testid="${testid}"][${attr}="${value}"]`).waitFor({ state: "attached", timeout })
const textOf = async (page: Page, testid: string) => (await page.getByTestId(testid).first().textContent({ timeout: waitMs })) ?? ""

/**
 * Every phase word the page has shown, in order, kept in the page itself
 * (`window.__phases`): installed before the page's own script runs, so no
 * change is missed between two looks from here.
 */
const recordPhases = `
window.__phases = [];
document.addEventListener("DOMContentLoaded", function () {
  var el = document.getElementById("phase");
  var note = function () {
    var text = el.textContent;
    if (text && window.__phases[window.__phases.length - 1] !== text) window.__phases.push(text);
  };
  new MutationObserver(note).observe(el, { childList: true, characterData: true, subtree: true });
  note();
});
`

describe.skipIf(unavailable !== undefined)("the live page follows a real run", () => {
  let browser: Browser
  const dirs: Array<string> = []
  let screenshots = ""

  beforeAll(async () => {
    browser = await launchBrowser()
    screenshots = mkdtempSync(join(tmpdir(), "cohort-dashboard-live-"))
    console.log(`dashboard live test: screenshots in ${screenshots}`)
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true }))
  })

  test("waiting → training → a rank SIGKILLed shows dead, with its cause → done, with the verdict", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-live-"))
    dirs.push(dir)
    const file = join(dir, "cluster.yml")
    writeFileSync(file, `
name: live-page
controller:
  host: 127.0.0.1
  port: 0
  join: { start: manual, timeout: 60s }
workers:
  - { host: localhost, devices: ${RANKS}, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1" } }
# Epochs of most of a second: with 60,000 samples a fast machine ran all 8 before the test's kill landed.
job: { entry: examples/train.ts, dataset_size: 240000, epochs: 8 }
failure_policy:
  after_formation:
    elastic: { max_failure: 50% }
  grace: 2s
`)
    const launch = spawnLaunch(file)
    const pageErrors: Array<string> = []
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } })
    try {
      page.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`))
      page.on("console", (message) => {
        // A refused reconnection once the launcher has gone is not the page's fault.
        if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) pageErrors.push(`console: ${message.text()}`)
      })
      await page.addInitScript(recordPhases)
      const exited = launch.proc.exited

      // The page opens as soon as the launcher listens.
      await waitFor(() => launch.stderr.lines.some((line) => /listening on [\d.]+:\d+/.test(line)), "the launcher to listen", 20_000)
      const listening = launch.stderr.lines.find((line) => /listening on [\d.]+:\d+/.test(line))!
      const port = Number(/listening on [\d.]+:(\d+)/.exec(listening)![1])
      // The page URL as the start line prints it, its page token included.
      await page.goto(/live page: (\S+)/.exec(listening)![1]!)

      // Waiting for the operator's start (start: manual): the page says what the window waits for.
      await waitPhase(page, "waiting")
      await waitAttr(page, "connection", "data-state", "live")
      expect(await textOf(page, "run")).toBe("live-page")
      await page.getByTestId("countdown").filter({ hasText: /^join window waits for (the quorum \(\d+\/\d+ ranks\)|the operator's start \(bun run status --start\))/ }).waitFor({ timeout: waitMs })
      await page.screenshot({ path: join(screenshots, "1-waiting.png"), fullPage: true })
      expect((await postStart(port, "live-page")).status).toBe(200)

      // Training: every rank's cell, running.
      await waitPhase(page, "training")
      for (let rank = 0; rank < RANKS; rank++) await waitAttr(page, `rank-${rank}`, "data-state", "running")
      expect(await page.locator('[data-testid^="rank-"]').count()).toBe(RANKS)
      expect(await page.getByTestId("countdown").isHidden()).toBe(true)
      // Mid-run: into epoch 2, the throughput chart drawn.
      await page.getByTestId("epoch").filter({ hasText: /^epoch [2-7]\/8$/ }).waitFor({ timeout: waitMs })
      await page.locator('[data-testid="throughput"] polyline').waitFor({ state: "attached", timeout: waitMs })
      const state = await fetchState(port)
      const victim = state?.ranks.find((rank) => rank.rank === VICTIM)?.pid
      if (typeof victim !== "number") throw new Error(`the status endpoint shows no pid for rank ${VICTIM}`)
      expect(await textOf(page, `rank-${VICTIM}`)).toContain(`pid ${victim}`)
      await page.screenshot({ path: join(screenshots, "2-training.png"), fullPage: true })

      // The kill: the cell turns dead, the death is listed with its cause.
      process.kill(victim, "SIGKILL")
      await waitAttr(page, `rank-${VICTIM}`, "data-state", "dead")
      const death = page.locator(`[data-testid="death"][data-rank="${VICTIM}"]`)
      await death.waitFor({ timeout: waitMs })
      expect(await death.textContent()).toMatch(new RegExp(`^r${VICTIM} on localhost at [\\d:]+: rank ${VICTIM} of localhost exited with signal SIGKILL$`))
      // The recovery figures of that death: known at once, its samples with the survivors soon after.
      const figures = page.getByTestId("recovery").filter({ hasText: /recovered in \d+ ms; effective training \d+\.\d%$/ })
      await figures.waitFor({ timeout: waitMs })
      expect(await figures.textContent()).toMatch(/^1 death\(s\) carried: detected in \d+ ms, recovered in \d+ ms; effective training \d+\.\d%$/)
      expect(await textOf(page, `rank-${VICTIM}`)).toContain("signal SIGKILL")
      for (const rank of [0, 2]) expect(await page.locator(`[data-testid="rank-${rank}"]`).getAttribute("data-state")).toBe("running")
      await page.screenshot({ path: join(screenshots, "3-dead-rank.png"), fullPage: true })

      // The end: the page shows done and the verdict. It has until a moment after the launcher's exit.
      const shownDone = waitPhase(page, "done", 60_000).then(() => true, () => false)
      expect(await exited).toBe(0)
      await Promise.all([launch.stdout.done, launch.stderr.done])
      const verdict = launch.stderr.lines.at(-1)!
      expect(verdict).toMatch(/^cohort: run completed DEGRADED \(1 of 3 ranks lost: rank 1 of localhost exited with signal SIGKILL\)$/)
      const done = await Promise.race([shownDone, Bun.sleep(3_000).then(() => false)])
      await page.screenshot({ path: join(screenshots, "4-done.png"), fullPage: true })
      const shown = {
        phase: await textOf(page, "phase"),
        verdict: (await page.getByTestId("verdict").isVisible()) ? await textOf(page, "verdict") : null,
        connection: await page.getByTestId("connection").getAttribute("data-state")
      }
      const phases = (await page.evaluate("window.__phases")) as Array<string>
      if (!done) console.log(`dashboard live test: the launcher exited 0, but 3 s later the page still shows ${JSON.stringify(shown)} (phases shown: ${phases.join(" → ")})`)
      expect(shown).toEqual({ phase: "done", verdict: verdict.replace(/^cohort: /, ""), connection: "closed" })
      expect(await page.locator('[data-testid^="rank-"]').count()).toBe(RANKS)
      expect(await page.locator(`[data-testid="rank-${VICTIM}"]`).getAttribute("data-state")).toBe("dead")
      for (const rank of [0, 2]) expect(await page.locator(`[data-testid="rank-${rank}"]`).getAttribute("data-state")).toBe("exited")

      // What the page showed, in order: waiting (forming, if slow enough to see), training, done.
      expect(phases.filter((phase) => phase !== "forming")).toEqual(["waiting", "training", "done"])
      expect(phases.indexOf("forming")).toBeLessThan(phases.indexOf("training"))
      expect(pageErrors).toEqual([])
    } finally {
      await page.close()
      launch.proc.kill("SIGKILL")
    }
  }, 90_000)
})
