/**
 * The program as the user called it: `cohort launch` installed, `bun run launch` from the checkout. The
 * usage and the commands a refusal suggests say it that way, and the dispatcher (`src/cli/cohort.ts`,
 * what the installed `cohort` runs) hands each command its arguments as its script gets them: its help,
 * its refusals and exit statuses, its dry run.
 */
import { describe, expect, test } from "bun:test"
import { resolve } from "node:path"
import { parseLaunchArgs, usage, usageOf } from "../src/cli/args/LaunchArgs.ts"

const root = resolve(import.meta.dir, "..")

describe("the launch's usage and refusals, by program", () => {
  test("usageOf: the program in every line that runs it, the flags' column under the first form", () => {
    const text = usageOf("cohort launch").split("\n")
    expect(text.slice(0, 4)).toEqual([
      "usage: cohort launch <cluster.yml> [--dry-run] [--resume] [--sync]",
      "                 [--quiet] [-v] [--ranks 0,3] [--log-dir DIR] [--events FILE] [--raw-output]",
      "                 [--set PATH=VALUE]... [--policy POLICY] [--from-slurm] [-- ARGS...]",
      "       cohort launch --nproc-per-node N [--hosts A:N,B:N] [options] -- PROGRAM [ARGS...]"
    ])
    expect(text).toContain("`cohort status` in this directory.")
    expect(text).toContain("Examples: cohort launch examples/local.yml")
    expect(text.join("\n")).not.toContain("bun run")
  })

  test("the script's usage is as it was", () => {
    expect(usage.split("\n").slice(0, 4)).toEqual([
      "usage: bun run launch <cluster.yml> [--dry-run] [--resume] [--sync]",
      "                  [--quiet] [-v] [--ranks 0,3] [--log-dir DIR] [--events FILE] [--raw-output]",
      "                  [--set PATH=VALUE]... [--policy POLICY] [--from-slurm] [-- ARGS...]",
      "       bun run launch --nproc-per-node N [--hosts A:N,B:N] [options] -- PROGRAM [ARGS...]"
    ])
    expect(usage).toContain("`bun run status` in this directory.")
    expect(usage).not.toContain("cohort launch")
  })

  const refusal = (argv: ReadonlyArray<string>, program?: string) => {
    const parsed = program === undefined ? parseLaunchArgs(argv) : parseLaunchArgs(argv, program)
    return parsed._tag === "Refused" ? parsed.problem : parsed._tag
  }
  const rows: ReadonlyArray<readonly [ReadonlyArray<string>, string, string]> = [
    [["-n", "4", "train.py"], "--nproc-per-node runs a program without a cluster file: put the program after --, like  cohort launch -n 4 -- train.py", "--nproc-per-node runs a program without a cluster file: put the program after --, like  bun run launch -n 4 -- train.py"],
    [["-n", "4"], "without a cluster file, give the program every rank runs after --, like  cohort launch --nproc-per-node 4 -- python3 train.py", "without a cluster file, give the program every rank runs after --, like  bun run launch --nproc-per-node 4 -- python3 train.py"],
    [[], "no cluster file given", "no cluster file given"]
  ]
  for (const [argv, asCohort, asScript] of rows) {
    test(`${argv.join(" ") || "(nothing)"}: the hint, and the usage after it, name the program`, () => {
      const cohort = refusal(argv, "cohort launch").split("\n")
      const script = refusal(argv).split("\n")
      expect(cohort[0]).toBe(asCohort)
      expect(script[0]).toBe(asScript)
      // A refusal with the usage has it whole, the program's.
      if (cohort.length > 1) {
        expect(cohort.slice(2).join("\n")).toBe(usageOf("cohort launch"))
        expect(script.slice(2).join("\n")).toBe(usage)
      }
    })
  }
})

describe("the dispatcher, src/cli/cohort.ts", () => {
  const run = (...args: ReadonlyArray<string>) => {
    const proc = Bun.spawnSync([process.execPath, "src/cli/cohort.ts", ...args], { cwd: root, env: { ...process.env, COHORT_NO_BUNDLE: "1" } })
    return { code: proc.exitCode, stdout: proc.stdout.toString(), stderr: proc.stderr.toString() }
  }

  test("--help and help: its commands, exit 0; nothing: the same, exit 2", () => {
    for (const word of ["--help", "-h", "help"]) {
      const { code, stdout } = run(word)
      expect(code).toBe(0)
      expect(stdout).toStartWith("usage: cohort <command> [options]\n")
      for (const command of ["launch", "agent", "status"]) expect(stdout).toMatch(new RegExp(`^  ${command} +\\S`, "m"))
    }
    const bare = run()
    expect(bare.code).toBe(2)
    expect(bare.stdout).toStartWith("usage: cohort <command> [options]\n")
  })

  test("--version: cohort's and its Bun's", () => {
    const { code, stdout } = run("--version")
    expect(code).toBe(0)
    expect(stdout).toBe(`cohort 0.1.0 (bun ${Bun.version})\n`)
  })

  test("a mistyped command: did you mean, exit 2; an unknown one: the commands", () => {
    const typo = run("lauch", "x.yml")
    expect(typo.code).toBe(2)
    expect(typo.stderr).toStartWith("cohort: no command lauch (did you mean launch?)\n")
    const other = run("train")
    expect(other.code).toBe(2)
    expect(other.stderr).toStartWith("cohort: no command train\n")
    const helpOther = run("help", "train")
    expect(helpOther.code).toBe(2)
    expect(helpOther.stderr).toBe("cohort: no command train; the commands are launch, agent, status\n")
  })

  test("each command's help says it as cohort COMMAND; the scripts' say bun run", () => {
    for (const command of ["launch", "agent", "status"]) {
      for (const args of [[command, "--help"], ["help", command]]) {
        const { code, stdout } = run(...args)
        expect(code).toBe(0)
        expect(stdout).toStartWith(`usage: cohort ${command} `)
        expect(stdout).not.toContain(`bun run ${command}`)
      }
      const script = Bun.spawnSync([process.execPath, `src/cli/${command}.ts`, "--help"], { cwd: root, env: { ...process.env, COHORT_NO_BUNDLE: "1" } })
      expect(script.stdout.toString()).toStartWith(`usage: bun run ${command} `)
    }
  })

  test("cohort launch takes the words after it as the launch's own: a refusal is exit 2 with cohort's usage", () => {
    const { code, stderr } = run("launch", "--resum", "x.yml")
    expect(code).toBe(2)
    expect(stderr).toStartWith("cohort: unknown option --resum (did you mean --resume?)\n")
    expect(stderr).toContain("cohort: usage: cohort launch <cluster.yml>")
  })

  test("cohort launch --dry-run of the quick form: the file it prints says how to run it as cohort", () => {
    const { code, stdout } = run("launch", "-n", "2", "--dry-run", "--", "/bin/true")
    expect(code).toBe(0)
    expect(stdout).toStartWith("# The cluster file of: cohort launch -n 2 -- /bin/true\n# Save it (this output, > cluster.yml) and run it with: cohort launch cluster.yml\n")
  }, 20_000)
})
