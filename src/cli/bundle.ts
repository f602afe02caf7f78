/**
 * cohort's bundle: `bun run launch` and `bun run agent` load cohort from one
 * bundle instead of a few hundred modules. Loading is most of a launch on a
 * small machine (effect and its Schema alone take ~0.25 s as separate
 * modules; the bundle loads in about half the time; an agent started over
 * ssh pays it after the handshake, before it can dial), and the agent starts
 * the relay and the ranks from the same bundle.
 *
 * The launcher's and the relay's programs are each one CommonJS file with
 * Bun's bytecode beside it (`launchMain.js` and `launchMain.js.jsc`, …): Bun
 * loads precompiled bytecode instead of parsing and compiling JavaScript
 * (about a megabyte for the launcher), and their functions need no compiling
 * when first called, which takes about a third off a launch and a tenth off
 * an `entry:` run's end (its ranks wait for the relay that starts as they
 * do). Bun makes bytecode for ES modules only in a compiled executable, and
 * CommonJS has no top-level await, so those programs have none. The agent's
 * and the rank's programs stay ES modules sharing chunks: a rank as
 * bytecode was no faster (each of a host's ranks reads its own 2 MB).
 *
 * The bundle is built on first use into `.cohort/bundle-<key>/`, where the
 * key is the newest modification time of the sources, `package.json` and
 * `bun.lock`, Bun's version (bytecode is only valid for the Bun that made
 * it) and the checkout's path (the CommonJS file holds the sources' paths):
 * an edit makes a new one, never a stale run.
 * One launch builds (a lock file says which), into a private folder renamed
 * into place, so no launch sees half a bundle; launches that meanwhile find
 * the lock taken load the sources. Where it cannot be built (a read-only
 * checkout) or `COHORT_NO_BUNDLE=1` is set, the sources are loaded as they are.
 */
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync } from "node:fs"
import { join, resolve } from "node:path"

const root = resolve(import.meta.dir, "../..")
const sources = join(root, "src")
const home = join(root, ".cohort")

const newestSource = (dir: string): number =>
  readdirSync(dir, { withFileTypes: true }).reduce((newest, entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return Math.max(newest, newestSource(path))
    return entry.name.endsWith(".ts") ? Math.max(newest, statSync(path).mtimeMs) : newest
  }, 0)

const bundleKey = (): string => {
  const inputs = [newestSource(sources), ...["package.json", "bun.lock"].map((file) => {
    const path = join(root, file)
    return existsSync(path) ? statSync(path).mtimeMs : 0
  })]
  return `${Math.floor(Math.max(...inputs))}-${Bun.version}-${Bun.hash(root).toString(36)}`
}

/** A build that has held the lock this long died without removing it. */
const STALE_LOCK_MS = 60_000

/** Build unless another launch is building; true when the bundle is there. */
const buildOnce = async (target: string): Promise<boolean> => {
  const lock = `${target}.lock`
  try {
    closeSync(openSync(lock, "wx"))
  } catch {
    if (Date.now() - statSync(lock).mtimeMs < STALE_LOCK_MS) return false
    rmSync(lock, { force: true })
    return buildOnce(target)
  }
  try {
    return await build(target)
  } finally {
    rmSync(lock, { force: true })
  }
}

/** The programs built as CommonJS with bytecode (see above), and those built as ES modules that share chunks. */
const bytecodePrograms = ["launchMain", "relay"]
const modulePrograms = ["agentMain", "rank"]
/** What a whole bundle holds. */
const outputs = [...bytecodePrograms.flatMap((name) => [`${name}.js`, `${name}.js.jsc`]), ...modulePrograms.map((name) => `${name}.js`)]
/** A bundle folder with every program in it. */
const isComplete = (folder: string): boolean => outputs.every((output) => existsSync(join(folder, output)))

const build = async (target: string): Promise<boolean> => {
  const scratch = `${target}.building-${process.pid}`
  // Where the relay's and the rank's programs will be (see entryPoints.ts): CommonJS output writes the
  // sources' path for `import.meta.dir`, so the folder is given at build time.
  const define = { COHORT_BUNDLE_DIR: JSON.stringify(target) }
  const naming = { entry: "[name].[ext]", chunk: "chunk-[hash].[ext]" }
  // A failed build throws or reports failure; either way its partial output goes.
  const results = await Promise.all([
    ...bytecodePrograms.map((name) =>
      Bun.build({ entrypoints: [join(sources, "cli", `${name}.ts`)], root: sources, outdir: scratch, target: "bun", format: "cjs", bytecode: true, define, naming })),
    Bun.build({
      entrypoints: modulePrograms.map((name) => join(sources, "cli", `${name}.ts`)),
      root: sources,
      outdir: scratch,
      target: "bun",
      splitting: true,
      define,
      naming
    })
  ]).catch(() => [])
  if (results.length === 0 || !results.every((result) => result.success)) {
    rmSync(scratch, { recursive: true, force: true })
    return false
  }
  try {
    renameSync(scratch, target)
  } catch {
    // Another launch built the same bundle first: use theirs.
    rmSync(scratch, { recursive: true, force: true })
  }
  // Older bundles are of no further use.
  for (const entry of readdirSync(home)) {
    if (entry.startsWith("bundle-") && !entry.startsWith(target.slice(home.length + 1)) && !/\.(building-\d+|lock)$/.test(entry)) {
      rmSync(join(home, entry), { recursive: true, force: true })
    }
  }
  return isComplete(target)
}

/** The bundle's folder, built if need be; undefined where it cannot be had. */
const bundleFolder = async (): Promise<string | undefined> => {
  if (process.env.COHORT_NO_BUNDLE === "1") return undefined
  try {
    const target = join(home, `bundle-${bundleKey()}`)
    if (isComplete(target)) return target
    // 0700: the launcher checks that `.cohort` is this user's alone (see PrivateFiles).
    mkdirSync(home, { recursive: true, mode: 0o700 })
    return await buildOnce(target) ? target : undefined
  } catch {
    // Unbuildable here (read-only, no space): the sources work the same, only slower to load.
    return undefined
  }
}

/** Run the launcher's program (it exits the process), from the bundle when it can be had. */
export const runLaunchProgram = async (): Promise<void> => {
  const folder = await bundleFolder()
  await (folder === undefined ? import("./launchMain.ts") : import(join(folder, "launchMain.js")))
}

/** Run the agent's program (it exits the process), from the bundle when it can be had. */
export const runAgentProgram = async (): Promise<void> => {
  const folder = await bundleFolder()
  await (folder === undefined ? import("./agentMain.ts") : import(join(folder, "agentMain.js")))
}
