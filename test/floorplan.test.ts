/**
 * The floor plan's rules (docs/architecture.md): no module of src/ imports
 * another in a circle, `import type` included. `cyclesOf` is checked first on
 * small graphs written out here, so a finder that saw no cycle at all would
 * fail before it could bless the tree.
 */
import { describe, expect, test } from "bun:test"
import { dirname, join } from "node:path"
import { cyclesOf, importsOf, sourceFiles } from "../scripts/floorplan.ts"

describe("cyclesOf, on graphs written out", () => {
  test.each([
    ["no edges", { a: [], b: [] }, []],
    ["a line", { a: ["b"], b: ["c"], c: [] }, []],
    ["a pair", { a: ["b"], b: ["a"] }, [["a", "b"]]],
    ["a circle of four with a tail", { t: ["a"], a: ["b"], b: ["c"], c: ["d"], d: ["a"] }, [["a", "b", "c", "d"]]],
    ["two apart, larger first", { a: ["b"], b: ["a"], x: ["y"], y: ["z"], z: ["x"] }, [["x", "y", "z"], ["a", "b"]]],
    ["a diamond is no cycle", { a: ["b", "c"], b: ["d"], c: ["d"], d: [] }, []]
  ] as const)("%s", (_, graph, expected) => {
    expect(cyclesOf(new Map(Object.entries(graph)))).toEqual(expected.map((cycle) => [...cycle]))
  })
})

test("no module of src/ imports another in a circle", () => {
  const root = join(import.meta.dir, "..")
  const files = sourceFiles(root)
  // The walk found the tree: a wrong root would find nothing and no cycle.
  expect(files.length).toBeGreaterThan(100)
  expect(files).toContain("src/launcher/run/Launcher.ts")
  expect(cyclesOf(importsOf(root, files))).toEqual([])
})

test("no folder of src/ holds more than 20 modules", () => {
  const root = join(import.meta.dir, "..")
  const perFolder = new Map<string, number>()
  for (const file of sourceFiles(root)) perFolder.set(dirname(file), (perFolder.get(dirname(file)) ?? 0) + 1)
  expect([...perFolder].filter(([, count]) => count > 20)).toEqual([])
})

test("only the entry points import from src/cli/: the rest is handed what it needs (EntryPoints)", () => {
  const root = join(import.meta.dir, "..")
  const files = sourceFiles(root)
  const entries = new Set(["src/launch.ts", "src/index.ts"])
  const offenders = [...importsOf(root, files)]
    .filter(([file]) => !file.startsWith("src/cli/") && !entries.has(file))
    .flatMap(([file, targets]) => targets.filter((target) => target.startsWith("src/cli/")).map((target) => `${file} → ${target}`))
  expect(offenders).toEqual([])
})
