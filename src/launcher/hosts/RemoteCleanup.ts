/**
 * Leftovers on remote hosts: an agent of this run and host that outlived an
 * earlier, hard-killed launcher. Every agent the fan-out starts carries a tag
 * in its argv (`--tag <run>/<host>`), so cleanup ends exactly those, of this
 * user, and never another run's or another user's processes: TERM, a short
 * wait, KILL. The agent's relay and ranks die with it (parent-death signal).
 * It runs before the agents start (in the preflight round) and after the run.
 */
import * as Effect from "effect/Effect"
import type { Worker } from "../../config/ClusterConfig.ts"
import { shellQuote, sshCommand } from "./SshFanOut.ts"

/** The agent's tag: the run and the host, in characters that are plain in a regular expression. */
export const agentTag = (run: string, host: string): string => `${run}/${host}`.replace(/[^A-Za-z0-9_/-]/g, "_")

/** Shell lines that end this tag's leftovers and print `leftovers N`. */
export const cleanupScript = (tag: string): string => {
  // Written so that this script's own text (in bash -c's argv) does not match: `agent[.]ts`.
  const pattern = shellQuote(`bun[^ ]* src/cli/agent[.]ts --tag ${tag}$`)
  return [
    `leftovers=$(pgrep -u "$(id -u)" -f -- ${pattern} | wc -l)`,
    `if [ "$leftovers" -gt 0 ]; then pkill -TERM -u "$(id -u)" -f -- ${pattern}; sleep 1; pkill -KILL -u "$(id -u)" -f -- ${pattern}; fi`,
    `echo "leftovers $leftovers"`
  ].join("\n")
}

/** How long the round after the run may take per host: an unreachable host must not hold the launcher's exit. */
const CLEANUP_LIMIT_MS = 10_000

/** After the run: one round to every ssh host, side by side; what it ended is logged. */
export const cleanupHosts = (workers: ReadonlyArray<Worker>, run: string): Effect.Effect<void> =>
  Effect.forEach(workers, (worker) =>
    Effect.flatMap(
      Effect.promise(async () => {
        const proc = Bun.spawn(sshCommand(worker, cleanupScript(agentTag(run, worker.host))), { stdin: "ignore", stdout: "pipe", stderr: "ignore" })
        const limit = setTimeout(() => proc.kill("SIGKILL"), CLEANUP_LIMIT_MS)
        const [output] = await Promise.all([new Response(proc.stdout).text(), proc.exited])
        clearTimeout(limit)
        return Number(/leftovers (\d+)/.exec(output)?.[1] ?? 0)
      }),
      (ended) => ended > 0 ? Effect.logWarning(`${worker.host}: ended ${ended} agent(s) of this run left behind`) : Effect.void
    ), { concurrency: "unbounded", discard: true })
