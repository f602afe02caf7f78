/**
 * The native library's failures, each as the typed error the services
 * promise, with a message that says what to do: a missing library file, a
 * file that is no library, a library of another ABI (a tiny cdylib built
 * here), a libcudart that cannot be loaded, NCCL nowhere to be found; then
 * the process helpers, and parent death through the library with real
 * processes (a SIGKILLed parent takes its armed child along).
 *
 * The library caches a failed load of libcudart or NCCL for the life of the
 * process, so every scenario runs in its own process
 * (fixtures/native-fixture.ts), which prints one JSON line.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ABI_VERSION, libraryPath } from "../src/native/library.ts"
import { collectLines, isRunning, jsonLines, parentOf, processState, waitFor } from "./support/processes.ts"
import { signalPending } from "./support/signals.ts"

const fixture = join(import.meta.dir, "fixtures/native-fixture.ts")
const scratch = mkdtempSync(join(tmpdir(), "cohort-native-errors-"))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

type Report = Record<string, unknown> & { readonly ok: boolean; readonly _tag?: string; readonly message?: string }

/** Run one scenario in a fresh process with `env` over this one's (undefined: unset). */
const scenario = async (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}): Promise<Report> => {
  const merged: Record<string, string> = {}
  for (const [key, value] of Object.entries({ ...process.env, ...env })) if (value !== undefined) merged[key] = value
  const child = Bun.spawn([process.execPath, fixture, ...args], { env: merged, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  // Never a throw nor a crash: a clean exit with one JSON line.
  if (exitCode !== 0 || child.signalCode !== null) {
    throw new Error(`fixture ${args.join(" ")} exited ${exitCode} (signal ${child.signalCode}):\n${stdout}\n${stderr}`)
  }
  const [report] = jsonLines(stdout.split("\n"))
  if (report === undefined) throw new Error(`fixture ${args.join(" ")} printed no JSON line:\n${stdout}\n${stderr}`)
  return report as Report
}

/**
 * Build a shared library exporting only `symbol` (returning `value`), with
 * rustc, else cc; the reason when neither is there or the build fails.
 */
const fakeLibrary = (name: string, symbol: string, value: number): { path: string } | { skip: string } => {
  const output = join(scratch, `lib${name}.so`)
  const rustc = Bun.which("rustc")
  const cc = Bun.which("cc") ?? Bun.which("gcc")
  const failures: Array<string> = []
  if (rustc !== null) {
    const source = join(scratch, `${name}.rs`)
    writeFileSync(source, `#[no_mangle]\npub extern "C" fn ${symbol}() -> u32 {\n    ${value}\n}\n`)
    const built = Bun.spawnSync([rustc, "--crate-type", "cdylib", "-O", "-o", output, source], { stderr: "pipe" })
    if (built.exitCode === 0) return { path: output }
    failures.push(`rustc failed: ${built.stderr.toString().trim()}`)
  }
  if (cc !== null) {
    const source = join(scratch, `${name}.c`)
    writeFileSync(source, `unsigned int ${symbol}(void) { return ${value}u; }\n`)
    const built = Bun.spawnSync([cc, "-shared", "-fPIC", "-O2", "-o", output, source], { stderr: "pipe" })
    if (built.exitCode === 0) return { path: output }
    failures.push(`cc failed: ${built.stderr.toString().trim()}`)
  }
  return { skip: failures.length > 0 ? failures.join("; ") : "neither rustc nor cc is on PATH" }
}

const wrongAbi = fakeLibrary("fake", "cohort_abi_version", 999)
const noAbi = fakeLibrary("noabi", "cohort_something_else", 1)
const cannotBuild = [...new Set([wrongAbi, noAbi].flatMap((built) => ("skip" in built ? [built.skip] : [])))]
if (cannotBuild.length > 0) console.log(`native ABI tests skipped: cannot build a fake library (${cannotBuild.join("; ")})`)

describe("the native library's typed failures", () => {
  test("a missing library file: NativeLibraryMissing naming the path and how to build it", async () => {
    const path = "/nonexistent/libcohort_native.so"
    const report = await scenario(["load"], { COHORT_NATIVE_LIB: path })
    expect(report).toMatchObject({ ok: false, _tag: "NativeLibraryMissing", path, reason: "no such file", bare: "unavailable" })
    expect(report.message).toContain(path)
    expect(report.message).toContain("`bun run build:native`")
    expect(report.message).toContain("COHORT_NATIVE_LIB")
  })

  test("a file that is no library: NativeLibraryMissing with dlopen's reason", async () => {
    const path = join(scratch, "libnot-a-library.so")
    writeFileSync(path, "this is a text file, not a shared library\n".repeat(40))
    const report = await scenario(["load"], { COHORT_NATIVE_LIB: path })
    expect(report).toMatchObject({ ok: false, _tag: "NativeLibraryMissing", path, bare: "unavailable" })
    expect(report.reason).not.toBe("no such file")
    // dlopen's own words, e.g. "invalid ELF header".
    expect(String(report.reason)).toMatch(/invalid ELF header|file too short|not a dynamic|cannot open/i)
    expect(report.message).toContain(path)
    expect(report.message).toContain(String(report.reason))
    expect(report.message).toContain("`bun run build:native`")
  })

  test.skipIf("skip" in wrongAbi)("a library of another ABI: NativeAbiMismatch{found 999, expected this build's} saying to rebuild", async () => {
    const path = (wrongAbi as { path: string }).path
    const report = await scenario(["load"], { COHORT_NATIVE_LIB: path })
    expect(report).toMatchObject({ ok: false, _tag: "NativeAbiMismatch", path, found: 999, expected: ABI_VERSION, bare: "unavailable" })
    expect(report.message).toContain(path)
    expect(report.message).toContain("ABI 999")
    expect(report.message).toMatch(/rebuild it with `bun run build:native`/)
  })

  test.skipIf("skip" in noAbi)("a library without cohort_abi_version: NativeLibraryMissing naming the symbol", async () => {
    const path = (noAbi as { path: string }).path
    const report = await scenario(["load"], { COHORT_NATIVE_LIB: path })
    expect(report).toMatchObject({ ok: false, _tag: "NativeLibraryMissing", path, bare: "unavailable" })
    expect(report.message).toContain("cohort_abi_version")
  })

  test("the built library loads (the baseline of the cases above)", async () => {
    const report = await scenario(["load"])
    if (!report.ok) throw new Error(`run \`bun run build:native\` first: ${report.message}`)
    expect(report).toMatchObject({ ok: true, path: libraryPath(), bare: "armed" })
  })

  test("CUDA unusable: a libcudart that is not there is CudaUnavailable naming the path and COHORT_CUDART_LIB, twice", async () => {
    const path = "/nonexistent/libcudart.so"
    const report = await scenario(["cuda-count"], { COHORT_CUDART_LIB: path })
    expect(report).toMatchObject({ ok: false, _tag: "CudaUnavailable" })
    expect(report.message).toStartWith("CUDA is not usable here: cannot load the CUDA runtime (libcudart); tried: ")
    expect(report.message).toContain(path)
    expect(report.message).toContain("COHORT_CUDART_LIB")
    // The failed load is cached: the second call says the same (the text is re-recorded for this thread).
    expect(report.again).toEqual({ ok: false, _tag: "CudaUnavailable", reason: report.reason, message: report.message })
  })

  test("CUDA in the default environment: a device count, or CudaUnavailable with a reason; never a throw", async () => {
    const report = await scenario(["cuda-count"])
    if (report.ok) {
      expect(report.count).toBeGreaterThanOrEqual(0)
      expect(report.again).toEqual({ ok: true, count: report.count })
    } else {
      expect(report._tag).toBe("CudaUnavailable")
      expect(String(report.reason).trim()).not.toBe("")
      expect(report.message).toBe(`CUDA is not usable here: ${report.reason}`)
      expect(report.again).toEqual({ ok: false, _tag: "CudaUnavailable", reason: report.reason, message: report.message })
    }
  })

  test("NCCL missing: NcclUnavailable listing every place searched, COHORT_NCCL_LIB first", async () => {
    const empty = mkdtempSync(join(scratch, "ld-"))
    const home = mkdtempSync(join(scratch, "home-"))
    const path = "/nonexistent/libnccl.so.2"
    const report = await scenario(["nccl-version"], {
      COHORT_NCCL_LIB: path,
      LD_LIBRARY_PATH: empty,
      HOME: home,
      VIRTUAL_ENV: undefined
    })
    if (report.ok) {
      // NCCL is installed where the loader or a system Python finds it: the search went on past the override.
      expect(report.version).toBeGreaterThan(2000)
      expect(String(report.libraryPath)).not.toContain("/nonexistent/")
      expect(String(report.libraryPath)).toContain("libnccl")
      return
    }
    expect(report._tag).toBe("NcclUnavailable")
    const message = String(report.message)
    expect(message).toStartWith(`NCCL not found; searched: ${path}, ${empty}/libnccl.so.2, libnccl.so.2 (`)
    expect(message).toEndWith("; set COHORT_NCCL_LIB to libnccl.so.2's path")
    // A path that is not there is listed without dlopen's noise.
    expect(message).not.toContain(`${path} (`)
  })
})

describe("process helpers through the library", () => {
  test("dieWithParent arms with the right parent and says parent-gone with a wrong one; parentPid; monotonicNs", async () => {
    const report = await scenario(["process"])
    expect(report).toMatchObject({ ok: true, armed: "armed", parentGone: "parent-gone", bare: "armed", noop: 0 })
    expect(report.wrongParent).not.toBe(report.ppid)
    expect(report.parentPid).toBe(report.ppid)
    // This test's process is the fixture's parent.
    expect(report.ppid).toBe(process.pid)
    expect(report.badSignal).toBe("signal 0 is not a signal number")
    expect(typeof report.before).toBe("number")
    expect(report.after as number).toBeGreaterThan(report.before as number)
    // At least the 2 ms the fixture spun for, and no more than a minute.
    expect((report.after as number) - (report.before as number)).toBeGreaterThanOrEqual(2e6)
    expect((report.after as number) - (report.before as number)).toBeLessThan(60e9)
  })

  /** Start `parent MODE`: a fixture that starts `child MODE` with plain Bun.spawn (no setpriv) and reports it. */
  const family = async (mode: string) => {
    const parent = Bun.spawn([process.execPath, fixture, "parent", mode], { stdin: "ignore", stdout: "pipe", stderr: "inherit" })
    const output = collectLines(parent.stdout)
    await waitFor(() => jsonLines(output.lines).length > 0 || parent.exitCode !== null, "the parent fixture to report its child", 10_000)
    const report = jsonLines(output.lines)[0]
    if (report === undefined) throw new Error(`the parent fixture exited ${parent.exitCode} without reporting: ${output.lines.join("\n")}`)
    return { parent, child: Number(report.child), report }
  }

  for (const mode of ["armed", "armed-service"] as const) {
    test(`a child armed through the library (${mode === "armed" ? "library.ts dieWithParent" : "the Native service"}) dies when its parent is SIGKILLed`, async () => {
      const { child, parent, report } = await family(mode)
      try {
        expect(report).toMatchObject({ armed: "armed", pid: child, ppid: parent.pid })
        expect(isRunning(child)).toBe(true)
        expect(parentOf(child)).toBe(parent.pid)
        parent.kill("SIGKILL")
        await parent.exited
        expect(parent.signalCode).toBe("SIGKILL")
        await waitFor(() => !isRunning(child), `child ${child} to die with its parent`, 5_000)
      } finally {
        if (isRunning(child)) process.kill(child, "SIGKILL")
      }
    }, 20_000)
  }

  test("without the call the child outlives its SIGKILLed parent (then it is cleaned up)", async () => {
    const { child, parent, report } = await family("unarmed")
    try {
      expect(report).toMatchObject({ armed: "not-called", pid: child })
      parent.kill("SIGKILL")
      await parent.exited
      // Orphaned and re-parented, and never sent its parent's death. The kernel hands an orphan to its new parent
      // and sends its parent-death signal in one step, so once it is re-parented an armed child (the tests
      // above) has SIGKILL pending until it is reaped, or is gone: no pause is needed to see that it was not.
      await waitFor(() => parentOf(child) !== parent.pid, `child ${child} to be re-parented`, 5_000)
      expect(signalPending(child, 9)).toBe(false)
      expect(isRunning(child)).toBe(true)
    } finally {
      if (isRunning(child)) process.kill(child, "SIGKILL")
    }
    await waitFor(() => processState(child) === undefined || processState(child) === "Z", `orphan ${child} to be killed`, 5_000)
  }, 20_000)
})
