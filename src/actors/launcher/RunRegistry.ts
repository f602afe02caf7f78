/**
 * Where `bun run status` finds a running launcher without being told:
 * `.cohort/runs/<run>.json` under the launch's working directory, holding
 * the address and port to ask (and the start token), written once the port listens and removed
 * when the run ends. A file left by a killed launcher names a dead pid;
 * readers skip it.
 */
import { rmSync } from "node:fs"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { PrivateFileError, privateDirectory, writePrivateFile } from "./PrivateFiles.ts"

export const RUNS_DIR = ".cohort/runs"

export interface RunEntry {
  readonly run: string
  readonly address: string
  readonly port: number
  readonly pid: number
  readonly startedAt: number
  /** `POST /start`'s token (`Keys.startToken`): the file is 0600, so only this user's `bun run status --start` reads it. */
  readonly startToken: string
}

const fileOf = (run: string) => join(RUNS_DIR, `${run.replace(/[^A-Za-z0-9_.-]/g, "_")}.json`)

/**
 * Announce this run until the Scope closes; a directory that cannot be written only costs the discovery. The
 * folder must be this user's alone (see PrivateFiles): one another user could write is refused, with a warning.
 */
export const register = (entry: RunEntry): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      try {
        privateDirectory(RUNS_DIR)
        writePrivateFile(fileOf(entry.run), `${JSON.stringify(entry)}\n`)
        return Effect.succeed(true)
      } catch (error) {
        return error instanceof PrivateFileError
          ? Effect.as(Effect.logWarning(`\`bun run status\` will not find this run: ${error.message}`), false)
          : Effect.succeed(false)
      }
    }),
    (written) => Effect.sync(() => written && rmSync(fileOf(entry.run), { force: true }))
  ).pipe(Effect.asVoid)
