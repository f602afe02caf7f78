/**
 * How a host tells an OOM kill from any other SIGKILL: the kernel counts the kills of its OOM killer
 * per memory cgroup (`oom_kill` in cgroup v2's `memory.events`, or v1's `memory.oom_control`). A rank
 * ended by SIGKILL while that count rose since it started was killed for memory. The ranks share their
 * agent's cgroup, so the count is read there. Where neither file can be read (no memory controller,
 * another OS), there is no count, and such a death is reported as the signal it was.
 */
import { readFileSync } from "node:fs"

const read = (path: string): string | undefined => {
  try {
    return readFileSync(path, "utf8")
  } catch {
    return undefined
  }
}

/** The `oom_kill N` line of a memory.events or memory.oom_control text. */
export const oomKillField = (text: string): number | undefined => {
  const match = /^oom_kill (\d+)$/m.exec(text)
  return match === null ? undefined : Number(match[1])
}

/** The files that may hold this process's count, most likely first, from /proc/self/cgroup's lines. */
export const counterPaths = (procCgroup: string, root = "/sys/fs/cgroup"): ReadonlyArray<string> =>
  procCgroup.split("\n").flatMap((line) => {
    const [id, controllers, path] = [line.slice(0, line.indexOf(":")), line.split(":")[1] ?? "", line.split(":").slice(2).join(":")]
    if (path === "") return []
    const dir = path === "/" ? "" : path
    if (id === "0" && controllers === "") return [`${root}${dir}/memory.events`, `${root}/unified${dir}/memory.events`]
    if (controllers.split(",").includes("memory")) return [`${root}/memory${dir}/memory.oom_control`]
    return []
  })

/** The OOM killer's count for this process's memory cgroup now, or undefined where it cannot be read. */
export const oomKillCount = (procCgroup = "/proc/self/cgroup", root = "/sys/fs/cgroup"): number | undefined => {
  const cgroups = read(procCgroup)
  if (cgroups === undefined) return undefined
  for (const path of counterPaths(cgroups, root)) {
    const text = read(path)
    const count = text === undefined ? undefined : oomKillField(text)
    if (count !== undefined) return count
  }
  return undefined
}
