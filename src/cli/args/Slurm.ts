/**
 * `--from-slurm`: the worker list of a Slurm allocation, read from the
 * variables Slurm sets inside it (sbatch, salloc, srun):
 *
 * - `SLURM_JOB_NODELIST` (or the older `SLURM_NODELIST`): the nodes, in
 *   Slurm's compressed form, `gpu[01-04,07]`, `a,b[1-2]`, `rack[1-2]-n[01-02]`.
 *   Expanded here (`expandNodelist`), as `scontrol show hostnames` does: no
 *   `scontrol` needs to be on the launcher's PATH, and a test can check it
 *   against literal tables.
 * - ranks per node: `SLURM_NTASKS_PER_NODE` (`--ntasks-per-node`), else
 *   `SLURM_TASKS_PER_NODE` (always set; `4(x2),2` is four on each of the
 *   first two nodes, then two), else one per GPU.
 * - `SLURM_GPUS_ON_NODE`: GPUs on the node (Slurm sets it for this node; an
 *   allocation's nodes are taken to be alike, as `--gpus-per-node` makes them).
 *   With GPUs, a node's ranks are GPU indices 0, 1, …; without, CPU ranks.
 *
 * The launcher's own node (`SLURMD_NODENAME`, set where sbatch runs the
 * script) is this machine: its agent runs inside the launcher, and the other
 * nodes dial it by its node name. The others are reached over ssh, in the same
 * checkout (a shared filesystem, as Slurm clusters have).
 */

export interface SlurmNode {
  readonly host: string
  /** CPU ranks (a count) or GPU indices. */
  readonly devices: number | ReadonlyArray<number>
  /** Whether this node is the launcher's own machine. */
  readonly launcher: boolean
}

export interface SlurmAllocation {
  readonly nodes: ReadonlyArray<SlurmNode>
  /** The address the other nodes dial: the launcher's node name, or loopback when every node is this one. */
  readonly controllerHost: string
}

/** The bracket group's items: `01-04,07` → 01 02 03 04 07, each as wide as the range's first bound. */
const expandRanges = (inside: string, whole: string): Array<string> | string => {
  const out: Array<string> = []
  for (const part of inside.split(",")) {
    const match = /^(\d+)(?:-(\d+))?$/.exec(part.trim())
    if (match === null) return `"${part}" in ${whole} is not a number or a range like 01-04`
    const [, from, to] = match
    const first = Number(from)
    const last = to === undefined ? first : Number(to)
    if (last < first) return `the range ${part} in ${whole} goes down: write it low-high`
    if (last - first > 65_536) return `the range ${part} in ${whole} names more than 65536 nodes`
    // Slurm pads to the lower bound's width: gpu[08-10] is gpu08 gpu09 gpu10.
    for (let n = first; n <= last; n++) out.push(String(n).padStart(from!.length, "0"))
  }
  return out
}

/** One name with bracket groups (`rack[1-2]-n[01-02]`): every combination, the first group outermost. */
const expandName = (pattern: string, whole: string): Array<string> | string => {
  let names = [""]
  let at = 0
  while (at < pattern.length) {
    const open = pattern.indexOf("[", at)
    const literal = pattern.slice(at, open === -1 ? undefined : open)
    if (literal.includes("]")) return `${whole} has a "]" without its "["`
    names = names.map((name) => name + literal)
    if (open === -1) break
    const close = pattern.indexOf("]", open)
    if (close === -1) return `${whole} has a "[" without its "]"`
    const items = expandRanges(pattern.slice(open + 1, close), whole)
    if (typeof items === "string") return items
    names = names.flatMap((name) => items.map((item) => name + item))
    at = close + 1
  }
  return names
}

/** Split on the commas that separate names, not those inside brackets. */
const topLevelParts = (nodelist: string): Array<string> | string => {
  const parts: Array<string> = []
  let depth = 0
  let start = 0
  for (let i = 0; i < nodelist.length; i++) {
    const c = nodelist[i]
    if (c === "[") depth += 1
    else if (c === "]") depth -= 1
    if (depth < 0 || depth > 1) return `${nodelist} has unbalanced or nested brackets`
    if (c === "," && depth === 0) {
      parts.push(nodelist.slice(start, i))
      start = i + 1
    }
  }
  if (depth !== 0) return `${nodelist} has a "[" without its "]"`
  parts.push(nodelist.slice(start))
  return parts
}

/** Slurm's compressed node list as host names, in Slurm's order; or why it cannot be read. */
export const expandNodelist = (nodelist: string): Array<string> | string => {
  const trimmed = nodelist.trim()
  if (trimmed === "") return "the node list is empty"
  const parts = topLevelParts(trimmed)
  if (typeof parts === "string") return parts
  const names: Array<string> = []
  for (const part of parts) {
    if (part.trim() === "") return `${trimmed} has an empty name (two commas in a row?)`
    const expanded = expandName(part.trim(), trimmed)
    if (typeof expanded === "string") return expanded
    names.push(...expanded)
  }
  const twice = names.find((name, index) => names.indexOf(name) !== index)
  if (twice !== undefined) return `${trimmed} names ${twice} twice`
  return names
}

/** `SLURM_TASKS_PER_NODE`'s form, `4(x2),2`, for `nodes` nodes: a count per node; or why not. */
export const expandTasksPerNode = (text: string, nodes: number): Array<number> | string => {
  const counts: Array<number> = []
  for (const part of text.trim().split(",")) {
    const match = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim())
    if (match === null) return `"${part}" is not a count or a repeated count like 4(x2)`
    const count = Number(match[1])
    for (let i = 0; i < Number(match[2] ?? 1); i++) counts.push(count)
  }
  if (counts.length === 1 && nodes > 1) return Array.from({ length: nodes }, () => counts[0]!)
  if (counts.length !== nodes) return `it gives counts for ${counts.length} node(s), and the allocation has ${nodes}`
  return counts
}

export interface SlurmOptions {
  /** Whether a name is this machine's (its host name, short or long). */
  readonly isThisMachine: (name: string) => boolean
  /** This machine's host name: what the nodes dial when the launcher runs outside them (salloc's shell on a login node). */
  readonly hostName: string
  /** Ranks per node from `--nproc-per-node`, over Slurm's own count. */
  readonly ranksPerNode?: number | undefined
}

const wholeNumber = (text: string | undefined): number | undefined => (text !== undefined && /^\d+$/.test(text.trim()) ? Number(text.trim()) : undefined)

/** The allocation's workers; or what is missing or wrong, naming the variable. */
export const slurmAllocation = (env: Readonly<Record<string, string | undefined>>, options: SlurmOptions): SlurmAllocation | string => {
  const listName = env.SLURM_JOB_NODELIST !== undefined ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST"
  const nodelist = env[listName]
  if (nodelist === undefined || nodelist.trim() === "") {
    return "--from-slurm: SLURM_JOB_NODELIST is not set: run inside a Slurm allocation (sbatch, salloc or srun)"
  }
  const hosts = expandNodelist(nodelist)
  if (typeof hosts === "string") return `--from-slurm: ${listName}=${nodelist}: ${hosts}`

  const gpusText = env.SLURM_GPUS_ON_NODE
  const gpus = gpusText === undefined || gpusText.trim() === "" ? 0 : wholeNumber(gpusText)
  if (gpus === undefined) return `--from-slurm: SLURM_GPUS_ON_NODE=${gpusText}: expected a number of GPUs`

  let counts: Array<number>
  if (options.ranksPerNode !== undefined) counts = hosts.map(() => options.ranksPerNode!)
  else if (env.SLURM_NTASKS_PER_NODE !== undefined && env.SLURM_NTASKS_PER_NODE.trim() !== "") {
    const count = wholeNumber(env.SLURM_NTASKS_PER_NODE)
    if (count === undefined || count < 1) return `--from-slurm: SLURM_NTASKS_PER_NODE=${env.SLURM_NTASKS_PER_NODE}: expected a number of tasks ≥ 1`
    counts = hosts.map(() => count)
  } else if (env.SLURM_TASKS_PER_NODE !== undefined && env.SLURM_TASKS_PER_NODE.trim() !== "") {
    const expanded = expandTasksPerNode(env.SLURM_TASKS_PER_NODE, hosts.length)
    if (typeof expanded === "string") return `--from-slurm: SLURM_TASKS_PER_NODE=${env.SLURM_TASKS_PER_NODE}: ${expanded}`
    counts = expanded
  } else if (gpus > 0) counts = hosts.map(() => gpus)
  else {
    return "--from-slurm: the allocation says neither how many tasks per node (SLURM_NTASKS_PER_NODE) nor how many GPUs (SLURM_GPUS_ON_NODE): " +
      "allocate with --ntasks-per-node or --gpus-per-node, or give --nproc-per-node"
  }

  const nodes: Array<SlurmNode> = []
  for (const [index, host] of hosts.entries()) {
    const count = counts[index]!
    if (count < 1) return `--from-slurm: node ${host} gets ${count} tasks: every node needs at least one`
    if (gpus > 0 && count > gpus) {
      return `--from-slurm: ${count} ranks per node but SLURM_GPUS_ON_NODE=${gpus}: one rank per GPU at most (give --nproc-per-node ${gpus}, or allocate more GPUs)`
    }
    nodes.push({
      host,
      devices: gpus > 0 ? Array.from({ length: count }, (_, gpu) => gpu) : count,
      launcher: false
    })
  }
  // The node the batch script runs on: Slurm names it; outside a step (salloc's shell on a login node) none is.
  const own = env.SLURMD_NODENAME !== undefined && hosts.includes(env.SLURMD_NODENAME)
    ? env.SLURMD_NODENAME
    : hosts.find((host) => options.isThisMachine(host))
  // A node name that is not this machine's host name would be reached over ssh: the agent must run in the launcher.
  const ownHost = own === undefined || options.isThisMachine(own) ? own : options.hostName
  const marked = nodes.map((node) => (node.host === own ? { ...node, host: ownHost!, launcher: true } : node))
  const everyNodeIsThis = marked.every((node) => node.launcher)
  return { nodes: marked, controllerHost: everyNodeIsThis ? "127.0.0.1" : own ?? options.hostName }
}
