/**
 * `bun run launch <cluster.yml> [options] [-- args]`, or without a file,
 * `bun run launch -n 4 -- program args`: run a cluster. The program is
 * `launchMain.ts` (its arguments, exit statuses and stops are described
 * there); this file only runs it from cohort's bundle (`bundle.ts`), which
 * loads in a fraction of the time its few hundred modules take.
 */
import { runLaunchProgram } from "./bundle.ts"

await runLaunchProgram()
