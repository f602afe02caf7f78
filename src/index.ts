/** cohort's library surface: `import { launch } from "cohort"`. */
export { launch, launchEffect, loadCluster, planCluster, RunInProgress } from "./launch.ts"
export type { ClusterInput, LaunchError } from "./launch.ts"
export type { LaunchOptions, Outcome, RankReport, RunResult } from "./actors/launcher/Launcher.ts"
export type { RankContext, RankDevice } from "./actors/rank/RankContext.ts"
export type { ClusterConfig } from "./config/ClusterConfig.ts"
export { VERSION } from "./version.ts"
