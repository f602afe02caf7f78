/**
 * `--log-dir DIR` and `--events FILE`, checked before anything starts, so a
 * path that cannot be written is one line and exit 2 (not a stack trace
 * half-way into a run), and `--dry-run` finds it too.
 *
 * A dry run changes nothing: it only probes. Whether a directory takes new
 * entries is found by making one there and removing it at once: permission
 * bits do not say (root may write anywhere by them, yet /proc takes no new
 * directory, and a read-only mount takes nothing). A run then makes the log
 * directory for real (0700, as the files in it are 0600), and the events
 * file is made by the journal.
 *
 * Both are refused where another user could steer them (`steerable`): a
 * folder on the way that someone else owns or may write, or a link that
 * someone else could have planted (root once appended to another user's
 * file through a link planted in /tmp). A run checks its log directory again
 * once it is made: a name made meanwhile by someone else is caught then.
 */
import { closeSync, constants, lstatSync, mkdirSync, mkdtempSync, openSync, rmdirSync, type Stats, statSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { steerable } from "../launcher/run/PrivateFiles.ts"

const reason = (error: unknown): string => {
  const code = (error as NodeJS.ErrnoException).code
  const words: Record<string, string> = {
    EACCES: "permission denied",
    EPERM: "not permitted",
    EROFS: "a read-only file system",
    ENOENT: "it takes no new entries",
    ENOTDIR: "a part of the path is a file",
    ENOSPC: "no space left",
    EEXIST: "something is already there",
    ELOOP: "too many symbolic links"
  }
  return code !== undefined && words[code] !== undefined ? `${words[code]}, ${code}` : (error as Error).message
}

const statOf = (path: string, follow = true): Stats | undefined => {
  try {
    return follow ? statSync(path) : lstatSync(path)
  } catch {
    return undefined
  }
}

/** The nearest folder of `path` (itself included) that exists, and whether it is a folder at all. */
const nearestExisting = (path: string): { readonly at: string; readonly stat: Stats } => {
  let at = resolve(path)
  let stat = statOf(at)
  while (stat === undefined && dirname(at) !== at) {
    at = dirname(at)
    stat = statOf(at)
  }
  return { at, stat: stat ?? statSync("/") }
}

/** Whether new entries can be made in the existing folder `dir`: one is made and removed. */
const takesEntries = (dir: string): string | undefined => {
  try {
    rmdirSync(mkdtempSync(join(dir, ".cohort-probe-")))
    return undefined
  } catch (error) {
    return reason(error)
  }
}

/** Why `path` cannot be (or be made into) a folder that takes new files, or undefined when it can. */
const folderProblem = (path: string): string | undefined => {
  const { at, stat } = nearestExisting(path)
  if (!stat.isDirectory()) {
    return at === resolve(path) ? "is a file, not a directory" : `cannot be made: ${at} is a file, not a directory`
  }
  const refused = takesEntries(at)
  if (refused === undefined) return undefined
  return at === resolve(path) ? `cannot be written (${refused})` : `cannot be made in ${at} (${refused})`
}

const steeredFix = "give a path whose folders only you (or root) can change, such as one under your home directory"

/** The line for a path another user could steer, or undefined. */
const steeredLine = (flag: string, path: string, problem: string | undefined, what: string): string | undefined =>
  problem === undefined ? undefined : `${flag} ${path}: ${problem}, so another user could steer where ${what} go; ${steeredFix}`

/** `--log-dir DIR`: a directory that is, or can be made, and takes new files; or the line that says why not. */
export const checkLogDir = (path: string): string | undefined => {
  const steered = steeredLine("--log-dir", path, steerable(path, true), "the logs")
  if (steered !== undefined) return steered
  const problem = folderProblem(path)
  return problem === undefined ? undefined : `--log-dir ${path}: ${problem}; give a directory you can write (it is made if missing)`
}

/** Make the log directory for a run (0700); or the line that says why it cannot be. */
export const makeLogDir = (path: string): string | undefined => {
  const problem = checkLogDir(path)
  if (problem !== undefined) return problem
  try {
    mkdirSync(path, { recursive: true, mode: 0o700 })
  } catch (error) {
    return `--log-dir ${path}: cannot be made (${reason(error)}); give a directory you can write (it is made if missing)`
  }
  // Again, now that it is there: a folder of its path that another user made first, or a link in its place, is theirs.
  return steeredLine("--log-dir", path, steerable(path, true), "the logs")
}

/** `--events FILE`: a file that can be written (made if missing, replaced if there), never a directory or a link. */
export const checkEventsFile = (path: string): string | undefined => {
  const fix = "give the path of a file you can write (it is made if missing, and emptied if there)"
  if (path.endsWith("/")) return `--events ${path}: is a directory's path; ${fix}`
  const stat = statOf(path, false)
  if (stat !== undefined) {
    if (stat.isSymbolicLink()) return `--events ${path}: is a symbolic link, which cohort does not write through; ${fix}`
    if (stat.isDirectory()) return `--events ${path}: is a directory; ${fix}`
    if (!stat.isFile()) return `--events ${path}: is not a regular file; ${fix}`
  }
  const steered = steeredLine("--events", path, steerable(dirname(path), true), "the events")
  if (steered !== undefined) return steered
  if (stat !== undefined) {
    // Emptying another name of someone's file empties theirs.
    if (stat.nlink > 1) return `--events ${path}: has ${stat.nlink - 1} other name(s) (hard links), so emptying it empties another file too; ${fix}`
    try {
      // Opened to append and closed: nothing in it changes.
      closeSync(openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW))
      return undefined
    } catch (error) {
      return `--events ${path}: cannot be written (${reason(error)}); ${fix}`
    }
  }
  const problem = folderProblem(dirname(resolve(path)))
  return problem === undefined ? undefined : `--events ${path}: its directory ${dirname(resolve(path))} ${problem}; ${fix}`
}
