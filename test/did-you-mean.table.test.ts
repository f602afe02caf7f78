/**
 * "did you mean": the edit distance on its own (a table of known distances), which known word a slip
 * is taken for (and which words get no guess), and the launch's, the agent's and status's refusal of
 * an unknown option naming the flag that was meant.
 */
import { describe, expect, test } from "bun:test"
import { editDistance, nearest } from "../src/config/reading/DidYouMean.ts"
import { parseLaunchArgs } from "../src/cli/args/LaunchArgs.ts"

describe("editDistance", () => {
  const rows: ReadonlyArray<readonly [string, string, number]> = [
    ["", "", 0],
    ["", "abc", 3],
    ["abc", "", 3],
    ["--resume", "--resume", 0],
    ["--resum", "--resume", 1],
    ["--resumee", "--resume", 1],
    ["--rezume", "--resume", 1],
    // Two neighbours swapped: one edit, not two.
    ["--rnaks", "--ranks", 1],
    ["--dryrun", "--dry-run", 1],
    ["kitten", "sitting", 3],
    ["--quiet", "--policy", 5]
  ]
  for (const [a, b, distance] of rows) {
    test(`${JSON.stringify(a)} → ${JSON.stringify(b)}: ${distance}`, () => {
      expect(editDistance(a, b)).toBe(distance)
      expect(editDistance(b, a)).toBe(distance)
    })
  }
})

describe("nearest", () => {
  const flags = ["--dry-run", "--resume", "--ranks", "--raw-output", "--policy", "--from-slurm", "--log-dir", "-n", "-v", "-h"]
  const rows: ReadonlyArray<readonly [string, string | undefined]> = [
    ["--resum", "--resume"],
    ["--resme", "--resume"],
    ["--polcy", "--policy"],
    ["--rnaks", "--ranks"],
    ["--dryrun", "--dry-run"],
    ["--dry_run", "--dry-run"],
    ["--log-dri", "--log-dir"],
    // The start of one flag only: that flag, abbreviated.
    ["--dry", "--dry-run"],
    ["--from", "--from-slurm"],
    // The start of two (--ranks, --raw-output): no guess from the start, and too far from both.
    ["--ra", undefined],
    // Too short to tell one short flag from another.
    ["-x", undefined],
    ["-m", undefined],
    // Another word altogether.
    ["--verbose-ish", undefined],
    ["--banana", undefined]
  ]
  for (const [word, meant] of rows) {
    test(`${word} → ${meant ?? "no guess"}`, () => expect(nearest(word, flags)).toBe(meant))
  }
  test("of equally near words, the first listed", () => {
    expect(nearest("--abd", ["--abc", "--abe"])).toBe("--abc")
    expect(nearest("--abd", ["--abe", "--abc"])).toBe("--abe")
  })
})

describe("the launch's unknown option", () => {
  const firstLine = (argv: ReadonlyArray<string>) => {
    const parsed = parseLaunchArgs(argv)
    return parsed._tag === "Refused" ? parsed.problem.split("\n")[0] : parsed._tag
  }
  const rows: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
    [["cluster.yml", "--resum"], "unknown option --resum (did you mean --resume?)"],
    [["cluster.yml", "--dryrun"], "unknown option --dryrun (did you mean --dry-run?)"],
    [["cluster.yml", "--polcy=restart"], "unknown option --polcy=restart (did you mean --policy?)"],
    [["--nproc-per-nodes", "4", "--", "x"], "unknown option --nproc-per-nodes (did you mean --nproc-per-node?)"],
    [["cluster.yml", "--max-restart", "3"], "unknown option --max-restart (did you mean --max-restarts?)"],
    [["cluster.yml", "--bogus"], "unknown option --bogus"],
    [["cluster.yml", "-x"], "unknown option -x"]
  ]
  for (const [argv, line] of rows) test(argv.join(" "), () => expect(firstLine(argv)).toBe(line))
})

describe("the agent's and status's unknown option", () => {
  const cli = (script: string, args: ReadonlyArray<string>) => {
    const proc = Bun.spawnSync([process.execPath, `src/cli/${script}`, ...args], { cwd: `${import.meta.dir}/..`, env: { ...process.env, COHORT_NO_BUNDLE: "1" } })
    return { code: proc.exitCode, stderr: proc.stderr.toString() }
  }
  test("bun run agent --persit: did you mean --persist", () => {
    const { code, stderr } = cli("agent.ts", ["--controller", "127.0.0.1:1", "--persit"])
    expect(code).toBe(2)
    expect(stderr).toContain("cohort agent: unknown argument --persit (did you mean --persist?)")
  })
  test("bun run status --jsn: did you mean --json", () => {
    const { code, stderr } = cli("status.ts", ["--jsn"])
    expect(code).toBe(2)
    expect(stderr).toContain("cohort status: unknown option --jsn (did you mean --json?)")
  })
})
