/**
 * The agent's program (`src/cli/agent.ts` runs it from the bundle):
 * `bun run agent --controller HOST:PORT [options]`, a self-deployed agent.
 * It dials a launcher, joins its run with this machine's devices, and runs
 * the ranks it is given. The launcher's ssh fan-out starts the same program
 * with `COHORT_AGENT_SPEC=fd:3`: its spec (salt included) is on file
 * descriptor 3, read once and closed, so that it is in no environment.
 *
 * The salt is never an argument: `--salt-file FILE`, `--salt-stdin`, or
 * `COHORT_SALT`; with none the agent asks for open admission, and a launcher
 * that needs the salt says so (exit 2: dialling again cannot help).
 *
 * A self-deployed agent's ranks' and relay's lines go to the launcher over
 * the join link, so its terminal and `--log-dir` show every host; here only
 * the agent's own lines appear, unless `--local-output`.
 *
 * Exit status: 0 the run ended, 1 transient (the launcher was not there, or
 * went away; `--persist` dials again after 5 s, doubling to 60 s), 2
 * permanent (refused, or bad arguments). A dial the launcher closes before
 * answering (a busy launcher, or one under a flood of strangers) is made
 * again first, a few times over about 16 s (`HandshakeRetry`), each time
 * with a line saying so.
 */
import { closeSync, readFileSync } from "node:fs"
import { hostname } from "node:os"
import { resolve } from "node:path"
import * as Effect from "effect/Effect"
import { listenForStops } from "../kernel/signals.ts"
import { exitStatusFor, type StopSignal } from "../kernel/StopRequests.ts"
import * as Agent from "../agent/Agent.ts"
import { type AgentLaunch, isSaltHex, parseDevices, parseEndpoint, readAgentSpec } from "../agent/AgentSpec.ts"
import { resolveDevices } from "../agent/Devices.ts"
import { roleVariables } from "../kernel/Role.ts"
import { deadlines, netTimeoutScale, scaled } from "../config/NetTimeouts.ts"
import { requestedLogLevel } from "../config/LogVerbosity.ts"
import { dieWithParent } from "../native/library.ts"
import { VERSION } from "../version.ts"
import { saltFromHex } from "../wire/Keys.ts"
import { printableLine } from "../wire/Printable.ts"
import * as Log from "./logger.ts"
import * as TurnWriter from "./TurnWriter.ts"
import { didYouMean } from "../config/reading/DidYouMean.ts"
import { entryPoints } from "./entryPoints.ts"
import { invokedAs } from "../kernel/ProgramName.ts"

/** `bun run agent`, or `cohort agent` installed: the usage says it as the user ran it. */
const invoked = invokedAs("agent")
const usage = `usage: ${invoked} --controller HOST:PORT [--host NAME] [--devices N|I,J|all] [--path DIR]
${" ".repeat(invoked.length + 8)}[--salt-file FILE | --salt-stdin] [--persist] [--local-output]

Joins the run of the launcher at HOST:PORT with this machine's devices and runs the ranks it is given.

  --controller HOST:PORT  the launcher's port, as this machine reaches it
  --host NAME             this host's name in the run (default: the hostname)
  --devices N|I,J|all     N CPU ranks, GPU indices, or every GPU (default: all)
  --path DIR              where ranks run: the project checkout (default: here)
  --salt-file FILE        the run's salt (32 hex digits) from a file; or --salt-stdin, or COHORT_SALT.
                          Without one, the agent asks for open admission (a launcher that needs
                          the salt refuses it: exit 2).
  --persist               dial again after a transient failure (5 s, doubling to 60 s)
  --local-output          print the ranks' and the relay's lines here too; they always go to the
                          launcher, whose terminal and --log-dir show them with every other host's

Exit status: 0 the run ended, 1 transient failure, 2 refused or bad input.`

// The ranks' lines and the agent's own, written once per turn of the event loop, in order (over ssh each call is a
// system call on the session's pipe).
const turns = TurnWriter.forProcess()

const fail = (message: string): never => {
  turns.write(`cohort agent: ${message}\n`, "stderr")
  process.exit(2)
}

/** An agent started by hand: its launch, whether --devices was given (else it is `all`), and --local-output. */
interface ByHand {
  readonly launch: AgentLaunch
  readonly devicesGiven: boolean
  readonly localOutput: boolean
}

const fromArguments = (args: ReadonlyArray<string>): ByHand => {
  const values = new Map<string, string>()
  const flags = new Set<string>()
  // --tag: a label in the process list, by which the launcher finds its own agents' leftovers.
  const valued = ["--controller", "--host", "--devices", "--path", "--salt-file", "--tag"]
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--persist" || arg === "--salt-stdin" || arg === "--local-output") flags.add(arg)
    else if (valued.includes(arg)) {
      const value = args[++i]
      if (value === undefined || value.startsWith("--")) fail(`${arg} needs a value\n\n${usage}`)
      values.set(arg, value!)
    } else fail(`unknown argument ${arg}${didYouMean(arg, [...valued.filter((flag) => flag !== "--tag"), "--persist", "--salt-stdin", "--local-output", "--help"])}\n\n${usage}`)
  }
  const controllerText = values.get("--controller") ?? fail(`--controller HOST:PORT is required\n\n${usage}`)
  const controller = parseEndpoint(controllerText)
  if (typeof controller === "string") fail(`--controller: ${controller}`)
  const devices = parseDevices(values.get("--devices") ?? "all")
  if (typeof devices === "string") fail(`--devices: ${devices}`)
  const saltFile = values.get("--salt-file")
  const saltText = saltFile !== undefined
    ? readFileSync(saltFile, "utf8")
    : flags.has("--salt-stdin")
    ? readFileSync(0, "utf8")
    : process.env.COHORT_SALT
  const saltHex = saltText?.trim()
  if (saltHex !== undefined && saltHex !== "" && !isSaltHex(saltHex)) {
    fail(`the salt (${saltFile ?? (flags.has("--salt-stdin") ? "stdin" : "COHORT_SALT")}) must be 32 hex digits, as the launcher prints it`)
  }
  const launch: AgentLaunch = {
    host: values.get("--host") ?? hostname(),
    controller: controller as { host: string; port: number },
    saltHex: saltHex === "" ? undefined : saltHex,
    devices: devices as Exclude<typeof devices, string>,
    path: resolve(values.get("--path") ?? "."),
    persist: flags.has("--persist")
  }
  return { launch, devicesGiven: values.has("--devices"), localOutput: flags.has("--local-output") }
}

const args = process.argv.slice(2)
if (args.includes("--help") || args.includes("-h")) {
  console.log(usage)
  process.exit(0)
}
/** The spec itself, or (`fd:N`, as the ssh fan-out starts agents) read from descriptor N, which is closed then. */
const readSpecVariable = (value: string | undefined): string | undefined => {
  const fd = /^fd:(\d+)$/.exec(value ?? "")
  if (fd === null) return value
  try {
    const text = readFileSync(Number(fd[1]), "utf8").trim()
    closeSync(Number(fd[1]))
    return text
  } catch (error) {
    return fail(`${roleVariables.agent}=${value}, but descriptor ${fd[1]} cannot be read (${(error as Error).message}): it is set by cohort's ssh fan-out; do not set it by hand`)
  }
}
const specText = readSpecVariable(process.env[roleVariables.agent])
// Started by hand (a self-deployed agent), or by cohort's ssh fan-out with a spec.
const byHand = specText !== undefined && specText !== "" ? undefined : fromArguments(args)
const launch = byHand?.launch ?? readAgentSpec(specText!)
if (typeof launch === "string") fail(launch)
const { controller, host, path, persist, saltHex } = launch as AgentLaunch
// Started by the launcher's ssh session: it ends with that session's shell.
if (specText !== undefined && dieWithParent(process.ppid) === "parent-gone") process.exit(1)

let scale = 1
try {
  scale = netTimeoutScale()
  requestedLogLevel()
} catch (error) {
  fail((error as Error).message)
}
// Started with a spec (ssh), its devices are the cluster file's; by hand, the --devices flag's.
const devices = resolveDevices(host, (launch as AgentLaunch).devices, byHand === undefined ? "file" : byHand.devicesGiven ? "flag" : "flag-default")
if (typeof devices === "string") fail(devices)
// The agent's own role variable must not reach the relay and ranks it starts.
const inheritedEnv = { ...process.env, [roleVariables.agent]: undefined, COHORT_SALT: undefined }

const once = Effect.gen(function*() {
  yield* Agent.run({
    host,
    devices: devices as Exclude<typeof devices, string>,
    controller,
    salt: saltHex === undefined ? undefined : saltFromHex(saltHex),
    version: VERSION,
    path,
    inheritedEnv,
    entries: entryPoints,
    handshakeMs: scaled(deadlines.handshakeMs, scale),
    // Over ssh the session carries this process's output to the launcher. A self-deployed agent sends its
    // ranks' lines up its join link instead, and (as mpirun's daemons do) shows only its own here, unless asked.
    forwardOutput: byHand !== undefined,
    // Over ssh the launcher escapes what it receives (or not, with --raw-output); shown here by hand, the
    // terminal controls in a rank's line are escaped here, as the launcher would.
    output: byHand === undefined
      ? (line, stream) => turns.write(`${line}\n`, stream)
      : byHand.localOutput
      ? (line, stream) => turns.write(`${printableLine(line)}\n`, stream)
      : () => {}
  })
}).pipe(
  Effect.scoped,
  Effect.as(0),
  Effect.catchAll((error) => Effect.as(Effect.logError(error.message), error.permanent === true ? 2 : 1))
)

const program = Effect.gen(function*() {
  let backoff = 5_000
  while (true) {
    const status = yield* once
    if (status !== 1 || !persist) return status
    yield* Effect.logWarning(`dialling ${controller.host}:${controller.port} again in ${backoff / 1000} s`)
    yield* Effect.sleep(backoff)
    backoff = Math.min(backoff * 2, 60_000)
  }
})

let interrupted: StopSignal | undefined
const fiber = Effect.runFork(program.pipe(Effect.provide(Log.layer(undefined, `cohort agent ${host}: `, (text) => turns.write(text, "stderr")))))
// Copies of one stop (a group Ctrl-C reaches `bun run` and this process) count once; a later one exits at once.
listenForStops({
  stop: ({ signal }) => {
    interrupted = signal ?? "SIGTERM"
    // Interrupting closes the agent's scope: its relay and ranks are stopped side by side.
    Effect.runFork(fiber.interruptAsFork(fiber.id()))
  },
  // No parent watch: an agent outlives the shell or batch script that started it in the background, as before.
  insist: (signal) => process.exit(exitStatusFor(signal))
})
const exit = await Effect.runPromise(fiber.await)
process.exit(exit._tag === "Success" ? exit.value : interrupted !== undefined ? exitStatusFor(interrupted) : 1)
