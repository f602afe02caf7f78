/**
 * The attack of issue 33 on --log-dir and --events, set up under `root`: another user's folder (as root, uid
 * 65534's) with its 0600 launcher.log and events.jsonl, and a folder every user may write (sticky like /tmp, or
 * not) holding a link `shared` to it, the link another user's when `linkOwner` says so. `untouched()` reads the
 * victim's files back, to compare with `before`.
 */
import { chmodSync, chownSync, lchownSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"

export const plantedLink = (root: string, options: { readonly sticky: boolean; readonly linkOwner?: number | undefined }) => {
  const victim = join(root, "victim")
  mkdirSync(victim, { mode: 0o700 })
  writeFileSync(join(victim, "launcher.log"), "the victim's own lines\n", { mode: 0o600 })
  writeFileSync(join(victim, "events.jsonl"), "{\"the victim's\":1}\n", { mode: 0o600 })
  const open = join(root, "open")
  mkdirSync(open)
  chmodSync(open, options.sticky ? 0o1777 : 0o777)
  const link = join(open, "shared")
  symlinkSync(victim, link)
  if (options.linkOwner !== undefined) lchownSync(link, options.linkOwner, options.linkOwner)
  if (process.getuid?.() === 0) chownSync(victim, 65534, 65534)
  const untouched = () => ({
    names: readdirSync(victim).sort(),
    log: readFileSync(join(victim, "launcher.log"), "utf8"),
    events: readFileSync(join(victim, "events.jsonl"), "utf8")
  })
  return { victim, open, link, untouched, before: untouched() }
}
