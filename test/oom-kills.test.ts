/**
 * Where a host reads its OOM killer's count: the files /proc/self/cgroup points at, for cgroup v2 and
 * v1, and the `oom_kill` line in them (literal inputs, as the kernel writes them).
 */
import { expect, test } from "bun:test"
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { counterPaths, oomKillCount, oomKillField } from "../src/agent/OomKills.ts"

test("the oom_kill line of memory.events (v2) and memory.oom_control (v1)", () => {
  expect(oomKillField("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")).toBe(2)
  expect(oomKillField("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")).toBe(7)
  expect(oomKillField("oom_kill_disable 0\nunder_oom 0\n")).toBeUndefined()
})

test("the files for a v2, a v1 and a hybrid /proc/self/cgroup", () => {
  expect(counterPaths("0::/user.slice/run-1.scope\n", "/cg")).toEqual(["/cg/user.slice/run-1.scope/memory.events", "/cg/unified/user.slice/run-1.scope/memory.events"])
  expect(counterPaths("0::/\n", "/cg")).toEqual(["/cg/memory.events", "/cg/unified/memory.events"])
  expect(counterPaths("5:cpu,cpuacct:/a\n4:memory:/docker/abc\n1:name=systemd:/\n", "/cg")).toEqual(["/cg/memory/docker/abc/memory.oom_control"])
  expect(counterPaths("4:memory:/x\n0::/y\n", "/cg")).toEqual(["/cg/memory/x/memory.oom_control", "/cg/y/memory.events", "/cg/unified/y/memory.events"])
})

test("the count read through a cgroup tree; none where nothing can be read", () => {
  const root = mkdtempSync(join(tmpdir(), "cohort-cgroup-"))
  try {
    mkdirSync(join(root, "memory", "job"), { recursive: true })
    writeFileSync(join(root, "memory", "job", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    writeFileSync(join(root, "self-cgroup"), "4:memory:/job\n0::/\n")
    expect(oomKillCount(join(root, "self-cgroup"), root)).toBe(4)
    writeFileSync(join(root, "other-cgroup"), "4:memory:/elsewhere\n")
    expect(oomKillCount(join(root, "other-cgroup"), root)).toBeUndefined()
    expect(oomKillCount(join(root, "no-such-file"), root)).toBeUndefined()
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
