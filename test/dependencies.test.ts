/**
 * The dependency pins that the rest of the project relies on: one `effect`
 * (two copies break Context tags), the 3.22 line, and the lockfile pin of
 * cbor-extract.
 */
import { expect, test } from "bun:test"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"

const root = join(import.meta.dir, "..")

/** Every package.json under node_modules whose name is `name`. */
const copiesOf = (name: string): Array<string> => {
  const found: Array<string> = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      if (entry === ".bin" || entry === ".cache") continue
      const path = join(dir, entry)
      if (!statSync(path).isDirectory()) continue
      if (entry.startsWith("@")) {
        walk(path)
        continue
      }
      try {
        const manifest = JSON.parse(readFileSync(join(path, "package.json"), "utf8")) as { name?: string; version?: string }
        if (manifest.name === name) found.push(`${path}@${manifest.version}`)
      } catch {
        // not a package
      }
      const nested = join(path, "node_modules")
      if (statSync(nested, { throwIfNoEntry: false })?.isDirectory()) walk(nested)
    }
  }
  walk(join(root, "node_modules"))
  return found
}

test("exactly one copy of effect, on the 3.22 line", () => {
  const copies = copiesOf("effect")
  expect(copies).toHaveLength(1)
  expect(copies[0]).toMatch(/@3\.22\.\d+$/)
})

test("versions are pinned exactly and cbor-extract is overridden", () => {
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
  for (const [name, version] of Object.entries({ ...manifest.dependencies, ...manifest.devDependencies })) {
    expect({ name, version }).toEqual({ name, version: expect.stringMatching(/^\d+\.\d+\.\d+$/) })
  }
  expect(manifest.overrides["cbor-extract"]).toBe("2.2.2")
  expect(copiesOf("cbor-extract").map((path) => path.split("@").pop())).toEqual(["2.2.2"])
})
