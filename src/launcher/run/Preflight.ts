/**
 * Preflight: what every host reached over ssh must have before any agent
 * starts, checked on all of them side by side, every problem reported at
 * once (host, what is wrong, the fix): the checkout at `path`, Bun there, the
 * same cohort (the lockfile's hash), the native library (built there when it
 * is missing and cargo is), and the GPUs the file lists for it. A launch runs
 * the checks at the start of each agent's own session (SshSession); a dry
 * run in a round of their own.
 */
import { createHash } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import type { Worker } from "../../config/ClusterConfig.ts"
import { agentTag, cleanupScript } from "../hosts/RemoteCleanup.ts"
import { batchModeWarning, shellQuote, sshCommand } from "../hosts/SshFanOut.ts"
import { checkoutRoot } from "../hosts/SyncCheckout.ts"
import { ABI_VERSION } from "../../native/library.ts"

const NATIVE = "src/native/target/release/libcohort_native.so"
/** Prints the ABI version the library file declares (bun -e, on the host). */
const ABI_PROBE = `import { dlopen } from "bun:ffi"; console.log(dlopen("${NATIVE}", { cohort_abi_version: { args: [], returns: "u32" } }).symbols.cohort_abi_version())`

/** The remote half: one `key value` line per fact. */
export const preflightScript = (worker: Worker, run: string): string => [
  // Leftovers of this run from a hard-killed launcher go first.
  cleanupScript(agentTag(run, worker.host)),
  `cd ${shellQuote(worker.path)} 2>/dev/null || { echo "missing-path"; exit 0; }`,
  `if [ -x ./node_modules/.bin/bun ]; then echo "bun ./node_modules/.bin/bun"; elif command -v bun >/dev/null; then echo "bun $(command -v bun)"; else echo "bun none"; fi`,
  `if [ -f bun.lock ]; then echo "lock $(sha256sum bun.lock | cut -c1-64)"; else echo "lock none"; fi`,
  `if [ -f ${NATIVE} ]; then echo "native built"`,
  `elif command -v cargo >/dev/null && [ -x ./node_modules/.bin/bun ]; then ./node_modules/.bin/bun src/native/build.ts >/dev/null 2>&1 && echo "native rebuilt" || echo "native failed"`,
  `else echo "native missing"; fi`,
  // The ABI the library there declares (a stale build of another version fails here, not in the ranks).
  `if [ -f ${NATIVE} ] && [ -x ./node_modules/.bin/bun ]; then echo "abi $(./node_modules/.bin/bun -e ${shellQuote(ABI_PROBE)} 2>/dev/null || echo unreadable)"; fi`,
  ...(worker.devices._tag === "Indices" || worker.devices._tag === "All"
    ? [`if command -v nvidia-smi >/dev/null; then echo "gpus $(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' | paste -sd, -)"; else echo "gpus unknown"; fi`]
    : [])
].join("\n")

export interface Judgement {
  readonly problems: ReadonlyArray<string>
  /** What the preflight did there (a library built, leftovers ended). */
  readonly notes: ReadonlyArray<string>
}

/** Why a host could not be reached, for a line that names the host first. */
export const unreachable = (worker: Worker, said: string | undefined): string =>
  `ssh could not reach ${worker.ssh?.target ?? worker.host} or log in${said ? ` (${said})` : ""}: check the host, ssh.user, ssh.identity_file and that its key is authorised`

/** The problems the remote half's lines show; `notes` for what preflight did there. */
export const judge = (worker: Worker, output: string, localLock: string): Judgement => {
  const facts = new Map(output.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const at = line.indexOf(" ")
    return at < 0 ? [line, ""] : [line.slice(0, at), line.slice(at + 1)]
  }))
  const host = worker.host
  if (facts.has("missing-path")) return { problems: [`${host}: ${worker.path} is not a directory there; give workers[].path as the cohort checkout's path on ${host} (or copy it there with --sync)`], notes: [] }
  const problems: Array<string> = []
  const notes: Array<string> = []
  if (facts.get("bun") === "none") problems.push(`${host}: no Bun in ${worker.path}/node_modules/.bin or on PATH; run  npx --yes bun@1.4.4 install --frozen-lockfile  in ${worker.path} there`)
  const lock = facts.get("lock")
  if (lock === "none") problems.push(`${host}: ${worker.path} has no bun.lock: it is not a cohort checkout`)
  else if (lock !== undefined && lock !== localLock) problems.push(`${host}: ${worker.path} holds another version of cohort (its bun.lock differs from this launcher's); update it (or use --sync)`)
  const native = facts.get("native")
  if (native === "missing") problems.push(`${host}: the native library is not built in ${worker.path} and cargo is not there; install cargo and run  bun run build:native  there`)
  if (native === "failed") problems.push(`${host}: building the native library in ${worker.path} failed; run  bun run build:native  there to see why`)
  if (native === "rebuilt") notes.push(`${host}: built the native library in ${worker.path}`)
  const abi = facts.get("abi")
  if (abi !== undefined && abi !== String(ABI_VERSION)) {
    problems.push(`${host}: the native library in ${worker.path} speaks ABI ${abi}, this launcher ${ABI_VERSION}: run  bun run build:native  there (or use --sync)`)
  }
  const gpus = facts.get("gpus")
  if (worker.devices._tag === "Indices" && gpus !== undefined && gpus !== "unknown") {
    const present = new Set(gpus.split(",").filter(Boolean).map(Number))
    const missing = worker.devices.indices.filter((index) => !present.has(index))
    if (missing.length > 0) {
      problems.push(`${host}: has no GPU ${missing.join(", ")} (nvidia-smi lists ${present.size === 0 ? "none" : [...present].join(", ")}); fix workers[].devices for ${host}`)
    }
  }
  // `all` is resolved by the agent when it joins; a host whose nvidia-smi lists no GPU would only fail there, later.
  if (worker.devices._tag === "All" && gpus === "") {
    problems.push(`${host}: has devices: all, but nvidia-smi lists no GPU there; give a number of CPU ranks or the GPU indices for ${host}`)
  }
  const leftovers = Number(facts.get("leftovers") ?? 0)
  if (leftovers > 0) notes.push(`${host}: ended ${leftovers} agent(s) of this run left behind by an earlier launcher`)
  return { problems, notes }
}

/** This launcher's checkout's bun.lock. */
export const localLockHash = (): string => {
  const lock = join(checkoutRoot(), "bun.lock")
  return existsSync(lock) ? createHash("sha256").update(readFileSync(lock)).digest("hex") : "none"
}

/** `--dry-run`'s round: check every ssh host at once, start nothing; every problem found, or nothing. (A launch checks in the agents' own sessions: SshSession.) */
export const preflight = (workers: ReadonlyArray<Worker>, run: string): Effect.Effect<ReadonlyArray<string>> =>
  Effect.gen(function*() {
    if (workers.length === 0) return []
    for (const worker of workers) {
      const batchMode = batchModeWarning(worker)
      if (batchMode !== undefined) yield* Effect.logWarning(batchMode)
    }
    const lock = localLockHash()
    const results = yield* Effect.forEach(workers, (worker) =>
      Effect.promise(async () => {
        const proc = Bun.spawn(sshCommand(worker, preflightScript(worker, run)), { stdin: "ignore", stdout: "pipe", stderr: "pipe" })
        const [output, errors, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
        if (code !== 0) {
          const said = errors.trim().split("\n").at(-1)?.trim()
          return { problems: [`${worker.host}: ${unreachable(worker, said)}`], notes: [] }
        }
        return judge(worker, output, lock)
      }), { concurrency: "unbounded" })
    for (const note of results.flatMap((result) => result.notes)) yield* Effect.logInfo(note)
    return results.flatMap((result) => result.problems)
  })
