/**
 * A second local Unix user for tests that play a stranger on this machine: created with useradd (CI runs as
 * root), or why this machine cannot have one (the test is then skipped, and says so).
 */
export const SECOND_USER = "cohort-intruder"

/** The second user's uid and gid, creating the user if need be; or why not. */
export const secondUser = (): { readonly uid: number; readonly gid: number } | string => {
  if (process.getuid?.() !== 0) return "not root: useradd needs root"
  const id = (flag: string) => Bun.spawnSync(["id", flag, SECOND_USER], { stdout: "pipe", stderr: "ignore" })
  if (id("-u").exitCode !== 0) {
    const made = Bun.spawnSync(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SECOND_USER], { stderr: "pipe" })
    if (made.exitCode !== 0) return `useradd failed: ${made.stderr.toString().trim()}`
  }
  return { uid: Number(id("-u").stdout.toString()), gid: Number(id("-g").stdout.toString()) }
}
