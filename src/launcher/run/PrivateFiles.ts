/**
 * Files only the run's user can read, written so that nobody else can steer
 * where they go.
 *
 * A launcher often runs where other users can write (a shared checkout, a
 * scratch directory), and as root. So:
 * - `.cohort` and the folders under it are made 0700 and checked before use:
 *   one that is a link, owned by someone else, or group- or world-writable is
 *   refused (one that is only readable by others is closed to 0700), since whoever can write there can plant links named like the
 *   next salt file or registry entry.
 * - Whole files (salts, the registry, checkpoints) are written to a fresh
 *   name that must not exist (O_EXCL, mode 0600) and renamed into place: a
 *   link planted at the final name is replaced, never followed, and no
 *   predictable temporary name can be pre-created.
 * - Appended files (--log-dir, --events) are made and opened with
 *   O_NOFOLLOW, mode 0600: a link in their place is an error, not a
 *   redirection. O_NOFOLLOW guards only the last name, so the folders on the
 *   way are checked first (`steerable`): each must be one that only this
 *   user or root can change, and a link on the way is followed only where
 *   nobody else could have planted it. A link planted in a sticky /tmp once
 *   made root append to another user's 0600 file. An existing file is
 *   checked before it is emptied, and one with other names (a hard link)
 *   is refused.
 * - A file read back for trust (`--resume`'s checkpoint) must be a regular
 *   file of this user that nobody else can write.
 *
 * Plain node:fs and synchronous: it runs at start-up and at checkpoints, off
 * any hot path.
 */
import { chmodSync, closeSync, constants, fstatSync, ftruncateSync, lstatSync, mkdirSync, openSync, readlinkSync, renameSync, rmSync, type Stats, writeSync } from "node:fs"
import { randomBytes } from "node:crypto"
import { basename, dirname, isAbsolute, join, resolve } from "node:path"

export class PrivateFileError extends Error {
  constructor(readonly path: string, readonly problem: string) {
    super(`${path}: ${problem}`)
  }
}

const uid = () => process.getuid?.() ?? -1

/** Why a directory or file is not this user's alone, or undefined when it is. */
const notPrivate = (path: string, stat: Stats, what: "directory" | "file"): string | undefined => {
  if (stat.isSymbolicLink()) return `is a symbolic link, not a ${what}: remove it and run again`
  if (what === "directory" ? !stat.isDirectory() : !stat.isFile()) return `is not a ${what}: remove it and run again`
  if (uid() >= 0 && stat.uid !== uid()) return `belongs to uid ${stat.uid}, not to you (uid ${uid()}): remove it, or run from another directory`
  if ((stat.mode & 0o022) !== 0) {
    return `is writable by ${(stat.mode & 0o002) !== 0 ? "every user" : "its group"} (mode ${(stat.mode & 0o777).toString(8)}): \`chmod go-w ${path}\`, or remove it`
  }
  return undefined
}

/** Whose a folder's entries are: only this user and root count, whoever else owns one could change it. */
const trustedOwner = (owner: number): boolean => uid() < 0 || owner === uid() || owner === 0

const whoWrites = (mode: number): string => ((mode & 0o002) !== 0 ? "every user" : "its group")

/** What an entry is, in words. */
const kindOf = (stat: Stats): string => (stat.isSymbolicLink() ? "a symbolic link" : stat.isDirectory() ? "a folder" : "a file")

/**
 * Why an entry of `folder`, made or kept there, could be changed by another user: the folder is not this user's
 * or root's, or others may write it (sticky /tmp: only where the entry is not this user's or root's). undefined
 * when nobody else can.
 */
const entryProblem = (folder: string, folderStat: Stats, entry: string, entryStat: Stats | undefined): string | undefined => {
  if (!trustedOwner(folderStat.uid)) return `${folder} belongs to uid ${folderStat.uid}, not to you (uid ${uid()}) or root`
  if ((folderStat.mode & 0o022) === 0) return undefined
  const mode = (folderStat.mode & 0o7777).toString(8)
  if ((folderStat.mode & 0o1000) === 0) return `${folder} is writable by ${whoWrites(folderStat.mode)} (mode ${mode})`
  // Sticky: only an entry's owner (or the folder's) may remove or rename it, so one of this user's or root's stays put.
  if (entryStat === undefined || trustedOwner(entryStat.uid)) return undefined
  return `${entry} is ${kindOf(entryStat)} of uid ${entryStat.uid} in ${folder}, which ${whoWrites(folderStat.mode)} can write`
}

/** `path` from the root, as the kernel will walk it (`..` and links left in). */
const absolute = (path: string): string => (isAbsolute(path) ? path : `${process.cwd()}/${path}`)

/** Links followed on one path before giving up, as the kernel does (ELOOP). */
const MAX_LINKS = 40

/**
 * Why another user could change where `path` leads, or undefined when only this user and root can. The path is
 * walked name by name, links followed by hand: each folder on the way must be this user's or root's, and each
 * entry one nobody else can replace (see `entryProblem`); a link is followed under the same rule, since whoever
 * could plant or change it could point it anywhere. Names not there yet pass: the caller makes them and then
 * asks again. `folder`: `path` is a folder that files will be made in, held to the same rule as the others.
 */
export const steerable = (path: string, folder = false): string | undefined => {
  // Not `resolve`d: it drops `x/..` by the text, where the kernel goes to x (a link, maybe) and then up.
  const pending = absolute(path).split("/").filter((name) => name !== "")
  let at = "/"
  let atStat = lstatSync(at)
  let links = 0
  while (pending.length > 0) {
    const name = pending.shift()!
    if (name === ".") continue
    if (name === "..") {
      // `at` holds no link (they are followed on the way), so its parent is the real one.
      at = dirname(at)
      atStat = lstatSync(at)
      continue
    }
    const next = join(at, name)
    let stat: Stats | undefined
    try {
      stat = lstatSync(next)
    } catch {
      stat = undefined
    }
    const problem = entryProblem(at, atStat, next, stat)
    if (problem !== undefined) return problem
    if (stat === undefined) return undefined
    if (stat.isSymbolicLink()) {
      if (++links > MAX_LINKS) return `${path} goes through more than ${MAX_LINKS} symbolic links`
      const target = readlinkSync(next)
      pending.unshift(...target.split("/").filter((part) => part !== ""))
      if (target.startsWith("/")) {
        at = "/"
        atStat = lstatSync(at)
      }
      continue
    }
    // A file on the way is the caller's to name (`is a file, not a directory`): nothing beyond it can be steered.
    if (!stat.isDirectory()) return undefined
    at = next
    atStat = stat
  }
  return folder ? entryProblem(at, atStat, at, undefined) : undefined
}

/** Throw PrivateFileError where another user could steer where the file `path` goes (its folders, see `steerable`). */
export const refuseSteerable = (path: string): void => {
  const steered = steerable(dirname(absolute(path)), true)
  if (steered !== undefined) throw new PrivateFileError(path, `${steered}, so another user could steer where it is written: choose a path whose folders only you (or root) can change`)
}

/**
 * Make `path` (and its missing parents) 0700, then check that it, and the `.cohort` folder it is in if it
 * is in one, are this user's alone; throws PrivateFileError.
 */
export const privateDirectory = (path: string): void => {
  mkdirSync(path, { recursive: true, mode: 0o700 })
  const absolute = resolve(path)
  const at = absolute.split("/").lastIndexOf(".cohort")
  const checked = at === -1 ? [absolute] : [absolute.split("/").slice(0, at + 1).join("/"), absolute]
  for (const directory of new Set(checked)) {
    const stat = lstatSync(directory)
    const problem = notPrivate(directory, stat, "directory")
    if (problem !== undefined) throw new PrivateFileError(directory, problem)
    // Ours and nobody else's to write, but readable by others (made before cohort made them 0700, or by
    // hand): closed now, since the names in it (runs, hosts, checkpoints) are nobody else's business either.
    if ((stat.mode & 0o077) !== 0) chmodSync(directory, 0o700)
  }
}

/** Write a whole file, 0600, atomically: a fresh O_EXCL name beside it, renamed over `path` (a link there is replaced). */
export const writePrivateFile = (path: string, data: string | Uint8Array): void => {
  const temporary = join(dirname(path), `.${basename(path)}.${randomBytes(8).toString("hex")}.tmp`)
  const descriptor = openSync(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  try {
    const bytes = typeof data === "string" ? Buffer.from(data) : data
    for (let at = 0; at < bytes.length;) at += writeSync(descriptor, bytes, at)
    closeSync(descriptor)
    renameSync(temporary, path)
  } catch (error) {
    rmSync(temporary, { force: true })
    throw error
  }
}

/**
 * Make a file to append to (`fresh`: emptied): 0600, never through a link, in folders only this user or root
 * can change (`steerable`), and this user's alone, checked before it is emptied. Later appends
 * (`appendPrivate`) open it the same way, so a link put in its place is an error, not a redirection; the
 * folders on the way were checked here, and nobody else can change them since.
 */
export const preparePrivateAppend = (path: string, fresh = false): void => {
  refuseSteerable(path)
  try {
    // O_NONBLOCK: a FIFO planted at the name fails the open at once (ENXIO) instead of hanging it; a file ignores it.
    const descriptor = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o600)
    try {
      const stat = fstatSync(descriptor)
      const problem = notPrivate(path, stat, "file")
      if (problem !== undefined) throw new PrivateFileError(path, problem)
      // Another name for the same file (a hard link made in /tmp to someone's file) would have it written through this one.
      if (stat.nlink > 1) throw new PrivateFileError(path, `has ${stat.nlink - 1} other name(s) (hard links), so writing it writes another file too: remove it and run again`)
      if (fresh) ftruncateSync(descriptor, 0)
    } finally {
      closeSync(descriptor)
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ELOOP") throw new PrivateFileError(path, "is a symbolic link: remove it, or choose another path")
    throw error
  }
}

/** Append to a file made by `preparePrivateAppend`; throws where it is gone or a link now. */
export const appendPrivate = (path: string, text: string): void => {
  const descriptor = openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW)
  try {
    writeSync(descriptor, text)
  } finally {
    closeSync(descriptor)
  }
}

/** Check that a file about to be trusted (a checkpoint to resume from) is this user's alone; throws PrivateFileError. */
export const checkPrivateFile = (path: string): void => {
  const problem = notPrivate(path, lstatSync(path), "file")
  if (problem !== undefined) throw new PrivateFileError(path, problem)
}
