/**
 * The package's postinstall: cohort's native library, built softly
 * (`src/native/build.ts --soft`: a missing cargo or a failed build is one
 * paragraph, never a failed install), by the package's own Bun.
 *
 * Not `bun src/native/build.ts` as the script itself: under
 * `npm install -g`, npm may run this before the `bun` dependency's own
 * postinstall, when the `bun` on the script's PATH is still bun's
 * placeholder, which fails the whole install. `bun-path.js` finds the binary
 * either way. npm and Bun both run it in the package's folder.
 */
import { spawnSync } from "node:child_process"
import { join } from "node:path"
import { findBun, packageRoot } from "./bun-path.js"

const found = findBun()
if (found.problem !== undefined) {
  // Soft, as the build is: cohort installs, and `cohort launch` says the same when it is run.
  process.stderr.write(`cohort: cannot build the native library: ${found.problem}\n`)
  process.exit(0)
}
const build = spawnSync(found.path, [join(packageRoot, "src", "native", "build.ts"), "--soft"], { stdio: "inherit", cwd: packageRoot })
process.exit(build.status ?? 0)
