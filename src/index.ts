/** cohort's library surface: `import { launch } from "cohort"`. */
export { launch, launchEffect, loadCluster, planCluster, RunInProgress } from "./launch.ts"
export type { ClusterInput, LaunchError } from "./launch.ts"
export type { LaunchOptions, Outcome, RankReport, RunResult } from "./launcher/run/Launcher.ts"
export type { RankContext, RankDevice } from "./rank/RankContext.ts"
export type { ClusterConfig } from "./config/ClusterConfig.ts"
export { VERSION } from "./version.ts"
