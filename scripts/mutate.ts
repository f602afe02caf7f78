/**
 * `bun run mutate [NAME…]`: mutation testing of the policy code with StrykerJS.
 *
 * Each policy module is mutated on its own, against the tests that pin it
 * (Stryker's `command` runner cannot pick tests per mutant, so the smaller
 * the command, the faster the run). `bun test --bail` stops at the first
 * failing test: one is enough to kill a mutant.
 *
 * Stryker runs on Node (9.x: the machine's Node 20), each mutant's tests on
 * Bun. Reports: reports/mutation/<name>.json and .html; the table at the end
 * is what bench/README.md records. Too slow for CI: rerun it when the policy
 * code or its tests change.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"

const ROOT = resolve(import.meta.dir, "..")

interface Target {
  readonly name: string
  readonly mutate: string
  readonly tests: ReadonlyArray<string>
}

/** Each module, and the test files that pin it. */
export const targets: ReadonlyArray<Target> = [
  { name: "joinVerdict", mutate: "src/launcher/front/joinVerdict.ts", tests: ["test/join-verdict.test.ts"] },
  { name: "Strategy", mutate: "src/kernel/policy/Strategy.ts", tests: ["test/strategy.test.ts", "test/failure-policy.test.ts", "test/decide.property.test.ts"] },
  { name: "FailurePolicy", mutate: "src/config/FailurePolicy.ts", tests: ["test/failure-policy.table.test.ts", "test/failure-policy.test.ts", "test/cluster-config.test.ts", "test/failure-rules.test.ts", "test/config-bounds.table.test.ts"] },
  { name: "JoinWindow", mutate: "src/config/JoinWindow.ts", tests: ["test/config-bounds.table.test.ts", "test/cluster-config.test.ts"] },
  { name: "ClusterConfig", mutate: "src/config/ClusterConfig.ts", tests: ["test/config-bounds.table.test.ts", "test/cluster-config.test.ts", "test/flodl-parity.test.ts", "test/ssh-fanout.test.ts", "test/overrides.test.ts", "test/dry-run-nccl.test.ts", "test/quick-form.test.ts", "test/checkpoint-pickle-opt-in.test.ts", "test/flodl-files.table.test.ts", "test/fixed-world-restarts.table.test.ts", "test/config-fields.table.test.ts"] },
  { name: "EpochLedger", mutate: "src/launcher/training/EpochLedger.ts", tests: ["test/epoch-ledger.table.test.ts", "test/epoch-ledger.property.test.ts", "test/growth.table.test.ts", "test/growth.property.test.ts"] },
  { name: "decide", mutate: "src/kernel/policy/decide.ts", tests: ["test/decide.table.test.ts", "test/decide.property.test.ts", "test/failure-rules.test.ts", "test/secondary-deaths.table.test.ts"] },
  { name: "FailureRules", mutate: "src/kernel/policy/FailureRules.ts", tests: ["test/failure-rules.test.ts"] },
  { name: "FailureSignature", mutate: "src/kernel/policy/FailureSignature.ts", tests: ["test/failure-signature.table.test.ts"] },
  { name: "SecondaryDeaths", mutate: "src/kernel/policy/SecondaryDeaths.ts", tests: ["test/secondary-deaths.table.test.ts"] },
  { name: "PolicyTable", mutate: "src/kernel/policy/PolicyTable.ts", tests: ["test/failure-rules.test.ts"] },
  { name: "RecoveryFigures", mutate: "src/launcher/view/RecoveryFigures.ts", tests: ["test/recovery-figures.test.ts", "test/recovery-figures.property.test.ts", "test/metrics.test.ts"] },
  // The façade and its sub-reducers (coordinate/): the logic lives in the folder.
  { name: "coordinate", mutate: "src/launcher/training/coordinate{.ts,/*.ts}", tests: ["test/coordinate.table.test.ts", "test/coordinate.property.test.ts"] },
  { name: "Membership", mutate: "src/launcher/membership/Membership.ts", tests: ["test/membership.table.test.ts", "test/membership.property.test.ts"] },
  { name: "MembershipFollowers", mutate: "src/launcher/membership/MembershipFollowers.ts", tests: ["test/membership-followers.table.test.ts"] },
  { name: "joinWindow", mutate: "src/launcher/front/joinWindow.ts", tests: ["test/join-window.table.test.ts"] },
  { name: "rendezvousGenerations", mutate: "src/launcher/front/rendezvousGenerations.ts", tests: ["test/rendezvous-generations.table.test.ts", "test/nccl-shrink.table.test.ts"] },
  { name: "RelayState", mutate: "src/relay/RelayState.ts", tests: ["test/relay-state.table.test.ts"] },
  { name: "FixedWorldRestarts", mutate: "src/config/FixedWorldRestarts.ts", tests: ["test/fixed-world-restarts.table.test.ts"] },
  { name: "ProcessGroups", mutate: "src/launcher/training/ProcessGroups.ts", tests: ["test/process-groups.test.ts", "test/coordinate.table.test.ts"] },
  { name: "groupStore", mutate: "src/launcher/training/groupStore.ts", tests: ["test/group-store.table.test.ts"] },
  { name: "CheckpointBallot", mutate: "src/launcher/training/CheckpointBallot.ts", tests: ["test/coordinate.table.test.ts", "test/coordinate.property.test.ts"] },
  { name: "ShrinkRules", mutate: "src/native/ShrinkRules.ts", tests: ["test/nccl-shrink.table.test.ts"] },
  { name: "ShrinkPlan", mutate: "src/rank/ShrinkPlan.ts", tests: ["test/nccl-shrink.table.test.ts"] }
]

const bun = process.execPath
const stryker = join(ROOT, "node_modules", "@stryker-mutator", "core", "bin", "stryker.js")
const wanted = process.argv.slice(2)
const unknown = wanted.filter((name) => !targets.some((target) => target.name === name))
if (unknown.length > 0) {
  console.error(`cohort mutate: no target ${unknown.join(", ")}; the targets are ${targets.map((target) => target.name).join(", ")}`)
  process.exit(2)
}
if (Bun.which("node") === null) {
  console.error("cohort mutate: StrykerJS runs on Node.js (20 or later), and there is no `node` on PATH")
  process.exit(2)
}

const configDir = join(ROOT, ".stryker-tmp")
mkdirSync(configDir, { recursive: true })
const rows: Array<{ name: string; file: string; killed: number; survived: number; timeout: number; noCoverage: number; errors: number; score: number; survivors: Array<string> }> = []

for (const target of targets.filter((each) => wanted.length === 0 || wanted.includes(each.name))) {
  const report = join("reports", "mutation", `${target.name}.json`)
  const config = {
    $schema: "./node_modules/@stryker-mutator/core/schema/stryker-schema.json",
    testRunner: "command",
    commandRunner: { command: `${bun} test --bail ${target.tests.join(" ")}` },
    mutate: [target.mutate],
    coverageAnalysis: "off",
    checkers: [],
    plugins: [],
    concurrency: Number(process.env.MUTATE_CONCURRENCY ?? 2),
    timeoutMS: 20_000,
    reporters: ["clear-text", "progress", "json", "html"],
    jsonReporter: { fileName: report },
    htmlReporter: { fileName: join("reports", "mutation", `${target.name}.html`) },
    tempDirName: ".stryker-tmp",
    cleanTempDir: true,
    // The sandbox is a copy of the checkout: leave out what is large and unused by these tests.
    ignorePatterns: ["/.cohort", "/src/native/target", "/reports", "/bench", "/chaos", "/.stryker-tmp", "/examples/data"]
  }
  const file = join(configDir, `stryker-${target.name}.json`)
  writeFileSync(file, JSON.stringify(config, null, 2))
  console.log(`\n== ${target.name}: ${target.mutate}, against ${target.tests.join(", ")}`)
  const run = Bun.spawnSync(["node", stryker, "run", file], { cwd: ROOT, stdout: "inherit", stderr: "inherit" })
  if (run.exitCode !== 0) {
    console.error(`cohort mutate: Stryker failed on ${target.name} (exit ${run.exitCode})`)
    process.exit(1)
  }
  const result = JSON.parse(readFileSync(join(ROOT, report), "utf8")) as {
    files: Record<string, { source: string; mutants: Array<{ id: string; mutatorName: string; status: string; replacement?: string; location: { start: { line: number; column: number } } }> }>
  }
  for (const [path, { mutants }] of Object.entries(result.files)) {
    const count = (status: string) => mutants.filter((mutant) => mutant.status === status).length
    const killed = count("Killed")
    const timeout = count("Timeout")
    const survived = count("Survived")
    const noCoverage = count("NoCoverage")
    const errors = count("RuntimeError") + count("CompileError")
    const valid = killed + timeout + survived + noCoverage
    rows.push({
      name: target.name,
      file: path,
      killed,
      survived,
      timeout,
      noCoverage,
      errors,
      score: valid === 0 ? 100 : (100 * (killed + timeout)) / valid,
      survivors: mutants
        .filter((mutant) => mutant.status === "Survived" || mutant.status === "NoCoverage")
        .map((mutant) => `${path}:${mutant.location.start.line}:${mutant.location.start.column} ${mutant.mutatorName} → ${JSON.stringify(mutant.replacement ?? "")}`)
    })
  }
}

console.log("\n| file | killed | timed out | survived | score |")
console.log("|---|---:|---:|---:|---:|")
for (const row of rows) console.log(`| \`${row.file}\` | ${row.killed} | ${row.timeout} | ${row.survived + row.noCoverage} | ${row.score.toFixed(1)}% |`)
const all = rows.reduce((sum, row) => ({ killed: sum.killed + row.killed + row.timeout, valid: sum.valid + row.killed + row.timeout + row.survived + row.noCoverage }), { killed: 0, valid: 0 })
console.log(`| all | | | | ${all.valid === 0 ? "100.0" : ((100 * all.killed) / all.valid).toFixed(1)}% |`)
for (const row of rows) for (const survivor of row.survivors) console.log(`survived: ${survivor}`)
