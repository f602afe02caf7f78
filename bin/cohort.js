#!/usr/bin/env node
/**
 * `cohort`: the command `npm install -g` (or `npm link`) puts on PATH. It
 * runs cohort's dispatcher (`src/cli/cohort.ts`) with the Bun this package
 * depends on (1.4.4, the `bun` npm package), found inside the installed
 * package, never on PATH: the launcher, its agents, relays and ranks all run
 * under the Bun that started it (`process.execPath`), and cohort is tested
 * with that one.
 *
 * Node runs this file only to start Bun: the arguments, stdin, stdout and
 * stderr pass through as they are, the working directory stays the user's
 * (the run's `.cohort/` is made there), SIGINT, SIGTERM and SIGHUP are
 * handed on, and this process exits with Bun's status, or 128 + the number
 * of the signal that ended it (as a shell reports it).
 */
import { spawn } from "node:child_process"
import { constants } from "node:os"
import { join } from "node:path"
import { findBun, packageRoot } from "./bun-path.js"

const dispatcher = join(packageRoot, "src", "cli", "cohort.ts")

const fail = (message) => {
  process.stderr.write(`cohort: ${message}\n`)
  process.exit(2)
}

const found = findBun()
if (found.problem !== undefined) fail(found.problem)
const bun = found.path
// Bun reads the bunfig.toml of the folder it starts in: the user's project's (its preload, say) is not cohort's,
// so none is read. --no-install: a missing import fails, never fetched at run time (as the checkout's bunfig says).
const child = spawn(bun, ["--config=/dev/null", "--no-install", dispatcher, ...process.argv.slice(2)], { stdio: "inherit" })

// Node sets every signal back to its default as it starts, so a `nohup` before `cohort` is lost here (and a
// SIGHUP stops the run, as without nohup): the README says to use setsid or a disowned job instead.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  // A terminal's Ctrl-C reaches both processes; the launcher counts copies of one stop once.
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
  })
}

child.on("error", (error) => fail(`cannot start ${bun}: ${error.message}`))
child.on("exit", (code, signal) => {
  process.exit(code ?? 128 + (signal === null ? 0 : (constants.signals[signal] ?? 0)))
})
