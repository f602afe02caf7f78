/**
 * One demo rank: it "trains" for COHORT_DEMO_WORK_MS, printing a step now and
 * then, and exits 0 — or, if COHORT_DEMO_FAIL_AT_MS is set, exits with
 * COHORT_DEMO_FAIL_CODE at that moment, as a crashing rank would.
 */
const rank = Number(process.env.COHORT_RANK ?? 0)
const work = Number(process.env.COHORT_DEMO_WORK_MS ?? 2_000)
const failAt = process.env.COHORT_DEMO_FAIL_AT_MS
const steps = 4

for (let step = 1; step <= steps; step++) {
  setTimeout(() => console.log(`step ${step}/${steps}`), (work * step) / steps)
}
setTimeout(() => process.exit(0), work + 10)
if (failAt !== undefined) {
  setTimeout(() => {
    console.error(`rank ${rank}: simulated failure`)
    process.exit(Number(process.env.COHORT_DEMO_FAIL_CODE ?? 1))
  }, Number(failAt))
}
// A rank ends when its launcher does: SIGTERM is the orderly stop.
process.on("SIGTERM", () => process.exit(143))
