/**
 * Changes to a cluster file from the command line, applied to its parsed
 * YAML document before it is decoded, so that they are decoded and checked
 * exactly like the file (`--set job.epochs=20`, the arguments after `--`,
 * the quick form's flags, `--from-slurm`).
 *
 * An override is plain data (it crosses from the CLI into the bundled
 * library): where (keys and list indices), what (a YAML value), how (set,
 * set where the file has nothing, or append to a list) and who said it (the
 * flag as written). The nodes an override puts in the document have no place
 * in the file, so a mistake the decoder finds there carries no line; `whoSaid`
 * gives it back to the flag that put it there: `--set failure_policy.grace=10x:
 * expected a duration …`. A path the schema does not know is an unknown key
 * of the mapping it lands in, reported by the decoder with its known keys and
 * a did-you-mean, and so given back to the flag too.
 */
import { type Document, isMap, isScalar, isSeq, parse as parseYaml, type ParsedNode, Scalar } from "yaml"

export type PathStep = string | number

export interface Override {
  /** What the user wrote, as errors name it: `--set job.epochs=20`, `--nproc-per-node 4`, `the arguments after --`. */
  readonly said: string
  readonly path: ReadonlyArray<PathStep>
  /** Plain data, as YAML reads it (`20`, `"10s"`, `[a, b]`, `{ … }`, null for "nothing"). */
  readonly value: unknown
  /** `set` replaces; `default` sets only where the document has nothing; `append` adds the items to the list there. */
  readonly mode: "set" | "default" | "append"
}

/** A path as the decoder's errors write it: `workers[0].devices`. */
export const formatPath = (path: ReadonlyArray<PathStep>): string =>
  path.reduce<string>((text, step) => (typeof step === "number" ? `${text}[${step}]` : text === "" ? step : `${text}.${step}`), "")

/** `job.epochs`, `workers[0].ssh.target`, `env.OMP_NUM_THREADS`; or why not. */
export const parsePath = (text: string): Array<PathStep> | string => {
  const steps: Array<PathStep> = []
  for (const part of text.split(".")) {
    const match = /^([^[\]\s=]+)((?:\[\d+\])*)$/.exec(part)
    if (match === null) return `"${text}" is not a path like job.epochs or workers[0].devices`
    steps.push(match[1]!)
    for (const index of match[2]!.matchAll(/\[(\d+)\]/g)) steps.push(Number(index[1]))
  }
  return steps
}

/** `--set PATH=VALUE`, the value read as YAML (`20` a number, `10s` a string, `[a, b]` a list); or why not. */
export const parseSet = (text: string): Override | string => {
  const said = `--set ${text}`
  const equals = text.indexOf("=")
  if (equals <= 0) return `${said}: expected PATH=VALUE, like --set job.epochs=20 or --set failure_policy.grace=10s`
  const path = parsePath(text.slice(0, equals).trim())
  if (typeof path === "string") return `${said}: ${path}`
  let value: unknown
  try {
    value = parseYaml(text.slice(equals + 1))
  } catch (error) {
    return `${said}: the value is not valid YAML (${(error as Error).message.split("\n")[0]}); quote it, like --set 'job.args=["a b"]'`
  }
  return { said, path, value: value ?? null, mode: "set" }
}

/** The arguments after `--`, appended to `job.args`. */
export const argsOverride = (args: ReadonlyArray<string>): Override => ({ said: "the arguments after --", path: ["job", "args"], value: [...args], mode: "append" })

/** Why an override could not be applied. */
export interface Refusal {
  readonly said: string
  readonly problem: string
}

/** A mapping or a list, as both are walked and written here. */
type Collection = { get(key: unknown, keepScalar: true): unknown; set(key: unknown, value: unknown): void }

/** Nothing there: no key, or a key written with nothing after it (`grace:`). */
const isNothing = (node: unknown): boolean => node === undefined || node === null || (isScalar(node) && node.value === null)

const describe = (node: unknown): string => (isMap(node) ? "a mapping" : isSeq(node) ? "a list" : isScalar(node) ? JSON.stringify(node.value) ?? "a value" : "something else")

/** Apply the overrides in order; what could not be applied (a path through a value, an index past a list's end) is refused. */
export const applyOverrides = (doc: Document.Parsed | Document, overrides: ReadonlyArray<Override>): Array<Refusal> => {
  const refusals: Array<Refusal> = []
  for (const override of overrides) {
    const problem = applyOne(doc, override)
    if (problem !== undefined) refusals.push({ said: override.said, problem })
  }
  return refusals
}

const applyOne = (doc: Document.Parsed | Document, { mode, path, value }: Override): string | undefined => {
  if (isNothing(doc.contents)) doc.contents = doc.createNode({}) as ParsedNode
  let node: unknown = doc.contents
  for (const [at, step] of path.entries()) {
    const here = formatPath(path.slice(0, at)) || "the cluster file"
    const last = at === path.length - 1
    if (typeof step === "number") {
      if (!isSeq(node)) return `${here} is ${describe(node)}, not a list: give a key, not [${step}]`
      const length = node.items.length
      // The index just past the end adds an item: `--set 'workers[2]={ host: c, devices: 2 }'`.
      if (step > length || (step === length && !last)) return `${here} has ${length} item(s) (${length === 0 ? "none" : `[0] to [${length - 1}]`}): there is no [${step}]`
    } else if (!isMap(node)) {
      return `${here} is ${describe(node)}, not a mapping: there is no key ${step} in it`
    }
    const collection = node as Collection
    if (last) return place(doc, collection, step, value, mode, formatPath(path))
    let next = collection.get(step, true)
    if (isNothing(next)) {
      // Made on the way: `--set failure_policy.grace=10s` on a file without a failure_policy section.
      next = doc.createNode(typeof path[at + 1] === "number" ? [] : {})
      collection.set(keyOf(step), next)
    }
    node = next
  }
  return undefined
}

const place = (
  doc: Document.Parsed | Document,
  collection: Collection,
  step: PathStep,
  value: unknown,
  mode: Override["mode"],
  where: string
): string | undefined => {
  const existing = collection.get(step, true)
  const absent = isNothing(existing)
  if (mode === "default" && !absent) return undefined
  if (mode === "append" && !absent) {
    if (!isSeq(existing)) return `${where} in the file is ${describe(existing)}, not a list to add to`
    for (const item of value as ReadonlyArray<unknown>) existing.items.push(doc.createNode(item))
    return undefined
  }
  if (typeof step === "number" && isSeq(collection) && step === collection.items.length) collection.items.push(doc.createNode(value))
  else collection.set(keyOf(step), doc.createNode(value))
  return undefined
}

/** A mapping's key as a node, as the parser makes them (the decoder reads only scalar keys); an index as it is. */
const keyOf = (step: PathStep): unknown => (typeof step === "number" ? step : new Scalar(step))

const isBelow = (path: string, above: string): boolean => above === "" || path.startsWith(`${above}.`) || path.startsWith(`${above}[`)

/**
 * The override a decoder's error belongs to, for an error at `path` that has
 * no place in the file: the one whose value holds that path (the deepest, and
 * of those the latest); else, for an unknown key, the override that added
 * that key to the mapping at `path`. `below` is where in the override's value
 * the error is ("" at its root, or for its unknown key).
 */
export const whoSaid = (path: string, problem: string, overrides: ReadonlyArray<Override>): { readonly said: string; readonly below: string } | undefined => {
  const paths = overrides.map((override) => formatPath(override.path))
  let best: number | undefined
  for (let index = overrides.length - 1; index >= 0; index--) {
    const at = paths[index]!
    if ((at === path || isBelow(path, at)) && (best === undefined || at.length > paths[best]!.length)) best = index
  }
  if (best !== undefined) return { said: overrides[best]!.said, below: paths[best] === path ? "" : path }
  // The mapping around an added key reports it, at its own path.
  const unknown = /^unknown key "([^"]*)"/.exec(problem)?.[1]
  if (unknown === undefined) return undefined
  for (let index = overrides.length - 1; index >= 0; index--) {
    const { path: steps } = overrides[index]!
    const depth = steps.findIndex((_, at) => formatPath(steps.slice(0, at)) === path)
    if (depth !== -1 && steps[depth] === unknown) return { said: overrides[index]!.said, below: "" }
  }
  return undefined
}
