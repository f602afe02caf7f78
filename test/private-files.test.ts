/**
 * Files only the run's user can read, that nobody else can steer: folders
 * made 0700 and refused when someone else could write them, whole files
 * written through a fresh O_EXCL name (a planted link is replaced, never
 * followed), appended files never opened through a link, and `--resume`
 * trusting only a checkpoint of this user's. Modes and owners are read back
 * with lstat; the other-user cases chown to 65534 and run as root (CI does).
 */
import { afterAll, describe, expect, test } from "bun:test"
import { chmodSync, chownSync, existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as CheckpointFile from "../src/launcher/training/CheckpointFile.ts"
import { appendPrivate, checkPrivateFile, preparePrivateAppend, privateDirectory, steerable, writePrivateFile } from "../src/launcher/run/PrivateFiles.ts"
import { clusterFile, spawnLaunch } from "./support/launch-scenario.ts"
import { plantedLink } from "./support/planted-link.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const scratch = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-private-"))
  dirs.push(dir)
  return dir
}
const mode = (path: string) => (lstatSync(path).mode & 0o777).toString(8)
const isRoot = process.getuid?.() === 0
if (!isRoot) console.log("private-files: the four other-user cases skipped: not root, so no file can be given to another uid (chown)")

describe("folders", () => {
  test("made 0700, .cohort and the folder under it", () => {
    const root = scratch()
    privateDirectory(join(root, ".cohort", "salts"))
    expect([mode(join(root, ".cohort")), mode(join(root, ".cohort", "salts"))]).toEqual(["700", "700"])
  })

  test("one that others may only read (an older cohort made it 0755) is closed to 0700", () => {
    const root = scratch()
    mkdirSync(join(root, ".cohort", "runs"), { recursive: true })
    chmodSync(join(root, ".cohort"), 0o755)
    chmodSync(join(root, ".cohort", "runs"), 0o750)
    privateDirectory(join(root, ".cohort", "runs"))
    expect([mode(join(root, ".cohort")), mode(join(root, ".cohort", "runs"))]).toEqual(["700", "700"])
  })

  test("a group- or world-writable .cohort, or a link in its place, is refused, naming it and the fix", () => {
    const root = scratch()
    mkdirSync(join(root, ".cohort"), { mode: 0o700 })
    chmodSync(join(root, ".cohort"), 0o777)
    expect(() => privateDirectory(join(root, ".cohort", "runs"))).toThrow(
      `${join(root, ".cohort")}: is writable by every user (mode 777): \`chmod go-w ${join(root, ".cohort")}\`, or remove it`
    )
    const other = scratch()
    mkdirSync(join(other, "elsewhere"))
    mkdirSync(join(other, ".cohort"))
    symlinkSync(join(other, "elsewhere"), join(other, ".cohort", "salts"))
    expect(() => privateDirectory(join(other, ".cohort", "salts"))).toThrow("is a symbolic link, not a directory")
  })

  test.skipIf(!isRoot)("one owned by another user is refused (as root: chown to 65534)", () => {
    const root = scratch()
    mkdirSync(join(root, ".cohort"), { mode: 0o700 })
    chownSync(join(root, ".cohort"), 65534, 65534)
    expect(() => privateDirectory(join(root, ".cohort", "runs"))).toThrow("belongs to uid 65534, not to you (uid 0)")
  })
})

describe("whole files", () => {
  test("0600, and a link planted at the name is replaced, its target untouched; no temporary file is left", () => {
    const dir = scratch()
    const victim = join(dir, "victim")
    writeFileSync(victim, "root's file\n")
    symlinkSync(victim, join(dir, "1234-gpu-c.salt"))
    writePrivateFile(join(dir, "1234-gpu-c.salt"), "00112233445566778899aabbccddeeff\n")
    expect(readFileSync(victim, "utf8")).toBe("root's file\n")
    expect(lstatSync(join(dir, "1234-gpu-c.salt")).isSymbolicLink()).toBe(false)
    expect(readFileSync(join(dir, "1234-gpu-c.salt"), "utf8")).toBe("00112233445566778899aabbccddeeff\n")
    expect(mode(join(dir, "1234-gpu-c.salt"))).toBe("600")
    expect(readdirSync(dir).sort()).toEqual(["1234-gpu-c.salt", "victim"])
  })

  test("a checkpoint is 0600 in a 0700 folder; --resume refuses one that others can write", async () => {
    const dir = scratch()
    const path = join(dir, "ckpt", "run.json")
    const record: CheckpointFile.CheckpointRecord = { version: 1, run: "r", epoch: 3, reason: "checkpoint", savedAt: "now", world: 2, dead: [], state: "{}" }
    await Effect.runPromise(CheckpointFile.write(path, record))
    expect([mode(join(dir, "ckpt")), mode(path)]).toEqual(["700", "600"])
    expect((await Effect.runPromise(CheckpointFile.read(path))).epoch).toBe(3)
    chmodSync(path, 0o666)
    const refused = await Effect.runPromise(Effect.flip(CheckpointFile.read(path)))
    expect(refused.message).toBe(`checkpoint ${path}: is writable by every user (mode 666): \`chmod go-w ${path}\`, or remove it; a checkpoint to resume from must be yours alone`)
  })
})

describe("appended files", () => {
  test("made 0600; a link in their place is refused, and appends never go through one", () => {
    const dir = scratch()
    const log = join(dir, "rank-0.log")
    preparePrivateAppend(log)
    appendPrivate(log, "one\n")
    appendPrivate(log, "two\n")
    expect([mode(log), readFileSync(log, "utf8")]).toEqual(["600", "one\ntwo\n"])
    const target = join(dir, "target")
    writeFileSync(target, "")
    symlinkSync(target, join(dir, "events.jsonl"))
    expect(() => preparePrivateAppend(join(dir, "events.jsonl"), true)).toThrow("is a symbolic link: remove it, or choose another path")
    expect(() => appendPrivate(join(dir, "events.jsonl"), "x\n")).toThrow()
    expect(readFileSync(target, "utf8")).toBe("")
    expect(() => checkPrivateFile(join(dir, "events.jsonl"))).toThrow("is a symbolic link")
  })
})

/**
 * Another user's 0600 file, in their folder, and a folder every user may write (sticky, like /tmp, or not)
 * holding a link to that folder: the attack of issue 33 (root appended to another user's launcher.log).
 */
const planted = (options: { sticky: boolean; linkOwner?: number }) => {
  const root = scratch()
  return { root, ...plantedLink(root, options) }
}

describe("the folders on the way to an appended file", () => {
  test.skipIf(!isRoot)("a link another user planted in a sticky folder (/tmp's kind) is not followed: refused, the victim's files unchanged", () => {
    const { before, link, open, untouched } = planted({ sticky: true, linkOwner: 65534 })
    const expected = `${link} is a symbolic link of uid 65534 in ${open}, which every user can write, so another user could steer where it is written: ` +
      "choose a path whose folders only you (or root) can change"
    expect(() => preparePrivateAppend(join(link, "launcher.log"))).toThrow(`${join(link, "launcher.log")}: ${expected}`)
    expect(() => preparePrivateAppend(join(link, "events.jsonl"), true)).toThrow(`${join(link, "events.jsonl")}: ${expected}`)
    // Deeper too, and through `..` (the kernel walks into the link, then up: so does the check).
    expect(() => preparePrivateAppend(join(link, "logs", "rank-0.log"))).toThrow("is a symbolic link of uid 65534 in")
    expect(() => preparePrivateAppend(`${link}/../launcher.log`)).toThrow("is a symbolic link of uid 65534 in")
    expect(untouched()).toEqual(before)
  })

  test("a link in a folder every user may write, and no sticky bit, is refused whoever made it", () => {
    const { before, link, open, untouched } = planted({ sticky: false })
    expect(() => preparePrivateAppend(join(link, "launcher.log"))).toThrow(
      `${join(link, "launcher.log")}: ${open} is writable by every user (mode 777), so another user could steer where it is written: ` +
        "choose a path whose folders only you (or root) can change"
    )
    expect(untouched()).toEqual(before)
  })

  test("a link of your own in a sticky folder, or one in a folder only you can write, is followed", () => {
    const { link, open, victim } = planted({ sticky: true })
    if (isRoot) chownSync(victim, 0, 0)
    expect(steerable(join(link, "mine.log"))).toBeUndefined()
    const own = scratch()
    mkdirSync(join(own, "real"))
    symlinkSync(join(own, "real"), join(own, "alias"))
    preparePrivateAppend(join(own, "alias", "launcher.log"))
    appendPrivate(join(own, "alias", "launcher.log"), "line\n")
    expect(readFileSync(join(own, "real", "launcher.log"), "utf8")).toBe("line\n")
    expect(steerable(open, true)).toBeUndefined()
  })

  test.skipIf(!isRoot)("a folder on the way that another user owns is refused: they could swap what is in it", () => {
    const root = scratch()
    mkdirSync(join(root, "theirs"), { mode: 0o755 })
    chownSync(join(root, "theirs"), 65534, 65534)
    expect(() => preparePrivateAppend(join(root, "theirs", "launcher.log"))).toThrow(
      `${join(root, "theirs", "launcher.log")}: ${join(root, "theirs")} belongs to uid 65534, not to you (uid 0) or root, so another user could steer where it is written`
    )
    expect(existsSync(join(root, "theirs", "launcher.log"))).toBe(false)
  })

  test("a file with another name (a hard link) is refused before anything is written or emptied", () => {
    const dir = scratch()
    writeFileSync(join(dir, "precious"), "keep me\n", { mode: 0o600 })
    linkSync(join(dir, "precious"), join(dir, "events.jsonl"))
    expect(() => preparePrivateAppend(join(dir, "events.jsonl"), true)).toThrow(
      `${join(dir, "events.jsonl")}: has 1 other name(s) (hard links), so writing it writes another file too: remove it and run again`
    )
    expect(readFileSync(join(dir, "precious"), "utf8")).toBe("keep me\n")
  })

  test.skipIf(!isRoot)("another user's file at the name is refused before it is emptied", () => {
    const dir = scratch()
    writeFileSync(join(dir, "events.jsonl"), "theirs\n", { mode: 0o600 })
    chownSync(join(dir, "events.jsonl"), 65534, 65534)
    expect(() => preparePrivateAppend(join(dir, "events.jsonl"), true)).toThrow("belongs to uid 65534, not to you (uid 0)")
    expect(readFileSync(join(dir, "events.jsonl"), "utf8")).toBe("theirs\n")
  })

  test("a FIFO planted at the name fails the open at once instead of hanging the launcher on it", () => {
    const dir = scratch()
    expect(Bun.spawnSync(["mkfifo", join(dir, "events.jsonl")]).exitCode).toBe(0)
    expect(() => preparePrivateAppend(join(dir, "events.jsonl"), true)).toThrow("ENXIO")
  })

  test("a fresh append file is emptied once it passes: this user's own, one name", () => {
    const dir = scratch()
    writeFileSync(join(dir, "events.jsonl"), "last run\n", { mode: 0o600 })
    preparePrivateAppend(join(dir, "events.jsonl"), true)
    expect(readFileSync(join(dir, "events.jsonl"), "utf8")).toBe("")
  })
})

test("a real run's --events file and --log-dir files are 0600, the log folder 0700", async () => {
  const dir = scratch()
  const file = join(dir, "cluster.yml")
  writeFileSync(file, clusterFile({ devices: 2, args: ["work=100"] }, dir))
  const run = spawnLaunch(file, {}, ["--events", join(dir, "events.jsonl"), "--log-dir", join(dir, "logs")])
  expect(await run.proc.exited).toBe(0)
  expect(mode(join(dir, "events.jsonl"))).toBe("600")
  expect(mode(join(dir, "logs"))).toBe("700")
  const logs = readdirSync(join(dir, "logs")).sort()
  expect(logs).toEqual(expect.arrayContaining(["launcher.log", "rank-0.log", "rank-1.log"]))
  for (const name of logs) expect({ name, mode: mode(join(dir, "logs", name)) }).toEqual({ name, mode: "600" })
}, 30_000)
