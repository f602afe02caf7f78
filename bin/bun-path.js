/**
 * The Bun this package runs on: its `bun` dependency (1.4.4), found from the
 * package's own folder, never on PATH. Shared by `cohort.js` (the command)
 * and `postinstall.js` (the native library's build at install).
 *
 * The `bun` package's own postinstall puts the binary at its bin/bun.exe.
 * npm runs a package's postinstall without waiting for its dependencies'
 * (cohort's may run first), and `--ignore-scripts` runs none: then the
 * binary is taken from the platform package bun's postinstall copies it
 * from (`@oven/bun-linux-x64`, …), which needs no script.
 */
import { existsSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

/** The installed package's folder (this file is in its bin/). */
export const packageRoot = join(dirname(fileURLToPath(import.meta.url)), "..")

/** Bun's binary is tens of megabytes; the placeholder its postinstall replaces, a few hundred bytes. */
const REAL_BINARY_BYTES = 1_000_000

/** The platform package the `bun` package takes its binary from (its optional dependency), as bun's postinstall names it. */
const platformPackages = () => {
  const arch = process.arch === "arm64" ? "aarch64" : process.arch
  const base = `@oven/bun-${process.platform}-${arch}`
  // musl first where the C library is musl (Alpine): glibc's binary does not start there.
  const musl = process.platform === "linux" && existsSync("/etc/alpine-release")
  return musl ? [`${base}-musl`, base] : [base, `${base}-musl`]
}

/**
 * This package's Bun, as `{ path }`: the `bun` dependency's binary, or its platform package's where bun's
 * postinstall has not run; else `{ problem }`, the sentence that says why there is none.
 */
export const findBun = () => {
  const require = createRequire(join(packageRoot, "package.json"))
  let bunPackage
  try {
    bunPackage = dirname(require.resolve("bun/package.json"))
  } catch {
    return {
      problem: `cannot find the bun package (1.4.4) that cohort depends on, from ${packageRoot}: a linked checkout (npm link, ` +
        "npm install -g <folder>) needs its packages installed first (npx --yes bun@1.4.4 install --frozen-lockfile, in it); " +
        "an installed cohort, reinstalling (npm install -g <cohort>)"
    }
  }
  const binary = join(bunPackage, "bin", "bun.exe")
  if (existsSync(binary) && statSync(binary).size >= REAL_BINARY_BYTES) return { path: binary }
  const fromBun = createRequire(join(bunPackage, "package.json"))
  for (const name of platformPackages()) {
    try {
      const candidate = join(dirname(fromBun.resolve(`${name}/package.json`)), "bin", "bun")
      if (existsSync(candidate)) return { path: candidate }
    } catch {
      // Not installed for this platform: the next one.
    }
  }
  return {
    problem: `the bun package in ${bunPackage} has no Bun binary, and no @oven/bun-${process.platform}-* package is installed beside it: ` +
      "reinstall cohort without --ignore-scripts and without --omit=optional"
  }
}

