/**
 * Where the relay's and the rank's programs are. In the source tree they sit
 * next to this file as `.ts`; in cohort's bundle (see `bundle.ts`) they are
 * `relay.js` and `rank.js` in the bundle's folder, which its build defines as
 * `COHORT_BUNDLE_DIR` (`import.meta.dir` would not do: in the launcher's
 * CommonJS file it is this source file's folder).
 */
import { resolve } from "node:path"
import type { EntryPoints } from "../kernel/EntryPoints.ts"

declare const COHORT_BUNDLE_DIR: string | undefined
/** Undeclared outside the bundle: `typeof` is then "undefined", not an error. */
const bundle = typeof COHORT_BUNDLE_DIR === "string" ? COHORT_BUNDLE_DIR : undefined

export const relayEntry = bundle === undefined ? `${import.meta.dir}/relay.ts` : `${bundle}/relay.js`
export const rankEntry = bundle === undefined ? `${import.meta.dir}/rank.ts` : `${bundle}/rank.js`

/**
 * The Python client's folder (`python/`, holding the `cohort` package), put on `PYTHONPATH` for `command:`
 * ranks. Two levels up from `import.meta.dir` wherever this module runs: `src/cli` (the sources, and the
 * launcher's CommonJS file, which writes the source's folder) and `.cohort/bundle-<key>` (the ES module chunks).
 */
export const pythonClientRoot = resolve(import.meta.dir, "..", "..", "python")

/** All three, as the entry points hand them down (the plan, every agent). */
export const entryPoints: EntryPoints = { relay: relayEntry, rank: rankEntry, pythonClient: pythonClientRoot }
