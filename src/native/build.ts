/**
 * `bun run build:native`: build cohort's native library with cargo (release).
 *
 * `bun install` runs it too (`postinstall`, with `--soft`): there a missing
 * cargo or a failed build is reported in one clear paragraph but does not
 * fail the install, because everything but the native calls (the CPU
 * kernels, CUDA, NCCL, parent-death from inside a rank) works without it,
 * and each of those says how to build it when it is asked for.
 */
import { join } from "node:path"

const soft = process.argv.includes("--soft")
const manifest = join(import.meta.dir, "Cargo.toml")

const give = (message: string): never => {
  console.error(`cohort: ${message}`)
  process.exit(soft ? 0 : 1)
}

const cargo = Bun.which("cargo")
if (cargo === null) {
  give(
    "cannot build the native library: cargo (Rust's build tool) is not on PATH. Install Rust " +
      "(`apt install cargo`, or https://rustup.rs), then run `bun run build:native`."
  )
}
const started = performance.now()
const build = Bun.spawnSync([cargo!, "build", "--release", "--quiet", "--manifest-path", manifest], {
  stdout: "inherit",
  stderr: "inherit",
  // The crate is std-only: never reach for a registry.
  env: { ...process.env, CARGO_NET_OFFLINE: "true" }
})
if (build.exitCode !== 0) give(`building the native library failed (cargo exited with ${build.exitCode}); the errors are above. Run \`bun run build:native\` again once fixed.`)
console.error(`cohort: native library built in ${((performance.now() - started) / 1000).toFixed(1)} s`)
