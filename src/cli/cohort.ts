/**
 * `cohort <command> [args]`: the installed command's one program (`bin/cohort.js`
 * runs it with the package's Bun). Each command is the checkout's script of
 * the same name, with the same arguments and exit statuses:
 *
 *   cohort launch …   = bun run launch …   (launch.ts)
 *   cohort agent …    = bun run agent …    (agent.ts)
 *   cohort status …   = bun run status …   (status.ts)
 *
 * The program runs in this process, in the directory the user is in: its
 * `.cohort/` (run registry, checkpoints, salts) is made there, while
 * cohort's own files (the relay's and the ranks' programs, the bundle) are
 * found in the package, next to this file. Only what answers at once is
 * loaded before the command's program: `cohort --help` and a mistyped
 * command need nothing else.
 */
import { nearest } from "../config/reading/DidYouMean.ts"
import { markInvokedAsCohort, type Tool } from "../kernel/ProgramName.ts"
import { VERSION } from "../version.ts"

const tools: Record<Tool, string> = {
  launch: "run a cluster: a cluster file, or -n N -- PROGRAM (torchrun's spelling)",
  agent: "join a launcher's run from this machine (a host with agent: self)",
  status: "a running launch's state, from .cohort/runs/ here or its HOST:PORT"
}

const help = `usage: cohort <command> [options]

${Object.entries(tools).map(([name, what]) => `  ${name.padEnd(16)}${what}`).join("\n")}
  help [COMMAND]  this help, or a command's (cohort help launch = cohort launch --help)
  --version       cohort's version

Each command's options: cohort COMMAND --help. A run writes its state under .cohort/ in
the directory it is started in.
Examples: cohort launch cluster.yml
          cohort launch -n 4 -- python3 train.py --lr 0.1
          cohort status --watch`

const isTool = (word: string | undefined): word is Tool => word !== undefined && Object.hasOwn(tools, word)

/** Run `tool` with the words after it, as its script would be run. */
const run = async (tool: Tool, args: ReadonlyArray<string>): Promise<void> => {
  markInvokedAsCohort()
  // The programs read their arguments from process.argv after the script's name, as under `bun run`.
  process.argv.splice(2, process.argv.length - 2, ...args)
  // Each program exits the process itself once done.
  if (tool === "launch") await import("./launch.ts")
  else if (tool === "agent") await import("./agent.ts")
  else await import("./status.ts")
}

const [command, ...rest] = process.argv.slice(2)
if (isTool(command)) await run(command, rest)
else if (command === undefined || command === "--help" || command === "-h" || command === "help") {
  const about = rest[0]
  if (command === "help" && isTool(about)) await run(about, ["--help"])
  else if (command === "help" && about !== undefined) {
    process.stderr.write(`cohort: no command ${about}; the commands are ${Object.keys(tools).join(", ")}\n`)
    process.exit(2)
  } else {
    console.log(help)
    // Without a command it is a mistake made kindly: the help, and the status of bad arguments.
    process.exit(command === undefined ? 2 : 0)
  }
} else if (command === "--version" || command === "-V" || command === "version") {
  console.log(`cohort ${VERSION} (bun ${Bun.version})`)
  process.exit(0)
} else {
  const meant = nearest(command, Object.keys(tools))
  process.stderr.write(
    `cohort: ${command.startsWith("-") ? "unknown option" : "no command"} ${command}${meant === undefined ? "" : ` (did you mean ${meant}?)`}\n\n${help}\n`
  )
  process.exit(2)
}
