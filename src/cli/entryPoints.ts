/**
 * Where the relay's and the rank's programs are. In the source tree they sit
 * next to this file as `.ts`; in the launcher's bundle (see `bundle.ts`)
 * this module is part of a chunk in the bundle's folder, next to `relay.js`
 * and `rank.js`.
 */
const bundled = import.meta.path.endsWith(".js")

export const relayEntry = `${import.meta.dir}/relay.${bundled ? "js" : "ts"}`
export const rankEntry = `${import.meta.dir}/rank.${bundled ? "js" : "ts"}`
