/**
 * Where the relay's and the rank's programs are. In the source tree they sit
 * next to this file as `.ts`; in the launcher's bundle (see `bundle.ts`)
 * this module is part of a chunk in the bundle's folder, next to `relay.js`
 * and `rank.js`.
 */
import { resolve } from "node:path"

const bundled = import.meta.path.endsWith(".js")

export const relayEntry = `${import.meta.dir}/relay.${bundled ? "js" : "ts"}`
export const rankEntry = `${import.meta.dir}/rank.${bundled ? "js" : "ts"}`

/**
 * The Python client's folder (`python/`, holding the `cohort` package), put on `PYTHONPATH` for `command:`
 * ranks. Two levels up from both homes of this module: `src/cli` and `.cohort/bundle-<key>`.
 */
export const pythonClientRoot = resolve(import.meta.dir, "..", "..", "python")
