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
 *   redirection.
 * - A file read back for trust (`--resume`'s checkpoint) must be a regular
 *   file of this user that nobody else can write.
 *
 * Plain node:fs and synchronous: it runs at start-up and at checkpoints, off
 * any hot path.
 */
import { chmodSync, closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, renameSync, rmSync, type Stats, writeSync } from "node:fs"
import { randomBytes } from "node:crypto"
import { basename, dirname, join, resolve } from "node:path"

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
 * Make a file to append to (`fresh`: emptied): 0600, never through a link, and this user's alone. Later
 * appends (`appendPrivate`) open it the same way, so a link put in its place is an error, not a redirection.
 */
export const preparePrivateAppend = (path: string, fresh = false): void => {
  try {
    const descriptor = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | (fresh ? constants.O_TRUNC : 0), 0o600)
    const problem = notPrivate(path, fstatSync(descriptor), "file")
    closeSync(descriptor)
    if (problem !== undefined) throw new PrivateFileError(path, problem)
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
