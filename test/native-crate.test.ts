/**
 * The native crate's own tests (`cargo test`): the NCCL search order, the
 * libcudart fallback, bf16 rounding, argument checks. They run here so that
 * the README's one test command covers the Rust side too.
 */
import { expect, test } from "bun:test"
import { join } from "node:path"
import { repoRoot } from "./support/launch-scenario.ts"

const cargo = Bun.which("cargo")
if (cargo === null) console.log("native crate test skipped: cargo is not on PATH (install Rust to build and test the native library)")

test.skipIf(cargo === null)("cargo test passes for src/native", () => {
  const run = Bun.spawnSync([cargo!, "test", "--quiet", "--manifest-path", join(repoRoot, "src/native/Cargo.toml")], {
    env: { ...process.env, CARGO_NET_OFFLINE: "true" },
    stdout: "pipe",
    stderr: "pipe"
  })
  const report = `${run.stdout.toString()}\n${run.stderr.toString()}`
  expect(run.exitCode, report).toBe(0)
  expect(report).toMatch(/test result: ok\. \d+ passed; 0 failed/)
}, 180_000)
