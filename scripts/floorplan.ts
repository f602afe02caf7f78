/**
 * The source tree's floor plan, measured: files per folder, the largest
 * files, and the import cycles between modules of `src/`.
 *
 *   bun scripts/floorplan.ts          the figures, for a closing note or a review
 *   bun scripts/floorplan.ts --json   the same, as JSON (test/floorplan.test.ts reads `cyclesOf`)
 *
 * A cycle is a strongly connected set of modules, found over every relative
 * import (`import type` included: a type cycle still says that two files
 * cannot be read, moved or tested apart).
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+["'](\.{1,2}\/[^"']+)["']/g

/** Every `.ts` file under `dir` (build output excluded), as paths relative to `root`. */
export const sourceFiles = (root: string, dir = "src"): Array<string> => {
  const found: Array<string> = []
  const walk = (at: string) => {
    for (const entry of readdirSync(join(root, at))) {
      const path = join(at, entry)
      if (statSync(join(root, path)).isDirectory()) {
        if (entry !== "target" && entry !== "node_modules") walk(path)
      } else if (entry.endsWith(".ts")) found.push(path)
    }
  }
  walk(dir)
  return found.sort()
}

/** Each file's relative imports, resolved to files of the same tree. */
export const importsOf = (root: string, files: ReadonlyArray<string>): Map<string, Array<string>> => {
  const known = new Set(files)
  return new Map(files.map((file) => {
    const text = readFileSync(join(root, file), "utf8")
    const targets = [...text.matchAll(IMPORT)]
      .map((match) => relative(root, resolve(join(root, dirname(file)), match[1]!)))
      .filter((target) => known.has(target))
    return [file, [...new Set(targets)]]
  }))
}

/** The import graph's cycles: its strongly connected components of more than one file (Tarjan). */
export const cyclesOf = (graph: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const cycles: Array<Array<string>> = []
  const visit = (node: string) => {
    index.set(node, counter)
    low.set(node, counter)
    counter += 1
    stack.push(node)
    onStack.add(node)
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next)
        low.set(node, Math.min(low.get(node)!, low.get(next)!))
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!))
    }
    if (low.get(node) === index.get(node)) {
      const component: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        component.push(member)
      } while (member !== node)
      if (component.length > 1) cycles.push(component.sort())
    }
  }
  for (const node of graph.keys()) if (!index.has(node)) visit(node)
  return cycles.sort((a, b) => b.length - a.length)
}

export const measure = (root: string) => {
  const files = sourceFiles(root)
  const perFolder = new Map<string, number>()
  for (const file of files) perFolder.set(dirname(file), (perFolder.get(dirname(file)) ?? 0) + 1)
  const lines = files.map((file) => [file, readFileSync(join(root, file), "utf8").split("\n").length - 1] as const)
  return {
    files: files.length,
    perFolder: [...perFolder].sort((a, b) => b[1] - a[1]),
    largest: [...lines].sort((a, b) => b[1] - a[1]).slice(0, 12),
    cycles: cyclesOf(importsOf(root, files))
  }
}

if (import.meta.main) {
  const figures = measure(join(import.meta.dir, ".."))
  if (process.argv.includes("--json")) {
    console.log(JSON.stringify(figures, null, 2))
  } else {
    console.log(`${figures.files} files under src/`)
    console.log("\nfiles per folder:")
    for (const [folder, count] of figures.perFolder) console.log(`  ${String(count).padStart(4)}  ${folder}`)
    console.log("\nlargest files (lines):")
    for (const [file, count] of figures.largest) console.log(`  ${String(count).padStart(5)}  ${file}`)
    console.log(`\nimport cycles: ${figures.cycles.length}`)
    for (const cycle of figures.cycles) console.log(`  ${cycle.length} files: ${cycle.join(", ")}`)
  }
}
