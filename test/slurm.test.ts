/**
 * `--from-slurm`: Slurm's node list syntax expanded by hand (the expected
 * names are written out, as `scontrol show hostnames` prints them), the
 * tasks-per-node forms, and the workers an allocation's variables make.
 */
import { describe, expect, test } from "bun:test"
import { expandNodelist, expandTasksPerNode, slurmAllocation } from "../src/cli/args/Slurm.ts"

describe("expandNodelist", () => {
  const table: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
    ["node1", ["node1"]],
    ["a,b", ["a", "b"]],
    ["gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]],
    ["a,b[1-2]", ["a", "b1", "b2"]],
    ["gpu[08-10]", ["gpu08", "gpu09", "gpu10"]],
    ["n[8-10]", ["n8", "n9", "n10"]],
    ["n[007]", ["n007"]],
    ["rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]],
    ["x[1,3]y[5-6]z", ["x1y5z", "x1y6z", "x3y5z", "x3y6z"]],
    ["c[1-2],d[09-11],e", ["c1", "c2", "d09", "d10", "d11", "e"]],
    ["node-a.cluster.local,node-b.cluster.local", ["node-a.cluster.local", "node-b.cluster.local"]],
    [" gpu[1-2] ", ["gpu1", "gpu2"]]
  ]
  for (const [nodelist, names] of table) {
    test(`${JSON.stringify(nodelist)} → ${names.join(" ")}`, () => {
      expect(expandNodelist(nodelist)).toEqual([...names])
    })
  }

  const refused: ReadonlyArray<readonly [string, string]> = [
    ["", "the node list is empty"],
    ["gpu[01-04", `gpu[01-04 has a "[" without its "]"`],
    ["gpu01-04]", `gpu01-04] has unbalanced or nested brackets`],
    ["gpu[04-01]", "the range 04-01 in gpu[04-01] goes down: write it low-high"],
    ["gpu[a-b]", `"a-b" in gpu[a-b] is not a number or a range like 01-04`],
    ["a,,b", "a,,b has an empty name (two commas in a row?)"],
    ["gpu[1-2],gpu2", "gpu[1-2],gpu2 names gpu2 twice"],
    ["g[[1]]", "g[[1]] has unbalanced or nested brackets"]
  ]
  for (const [nodelist, problem] of refused) {
    test(`${JSON.stringify(nodelist)} is refused: ${problem}`, () => {
      expect(expandNodelist(nodelist)).toBe(problem)
    })
  }
})

describe("expandTasksPerNode", () => {
  test.each([
    ["4", 3, [4, 4, 4]],
    ["4(x2),2", 3, [4, 4, 2]],
    ["2,1", 2, [2, 1]],
    ["1(x3)", 3, [1, 1, 1]]
  ] as const)("%p over %p nodes → %p", (text, nodes, counts) => {
    expect(expandTasksPerNode(text, nodes)).toEqual([...counts])
  })

  test("a count per node that does not match the nodes, or a bad form, is refused", () => {
    expect(expandTasksPerNode("4(x2)", 3)).toBe("it gives counts for 2 node(s), and the allocation has 3")
    expect(expandTasksPerNode("four", 1)).toBe(`"four" is not a count or a repeated count like 4(x2)`)
  })
})

describe("slurmAllocation", () => {
  const here = (name: string) => name === "gpu01"
  const options = { isThisMachine: here, hostName: "gpu01" }

  test("a GPU allocation, launched from its first node: that node in-process, the others over ssh, one rank per GPU", () => {
    const env = { SLURM_JOB_NODELIST: "gpu[01-03]", SLURM_NTASKS_PER_NODE: "4", SLURM_GPUS_ON_NODE: "4", SLURMD_NODENAME: "gpu01" }
    expect(slurmAllocation(env, options)).toEqual({
      controllerHost: "gpu01",
      nodes: [
        { host: "gpu01", devices: [0, 1, 2, 3], launcher: true },
        { host: "gpu02", devices: [0, 1, 2, 3], launcher: false },
        { host: "gpu03", devices: [0, 1, 2, 3], launcher: false }
      ]
    })
  })

  test("no GPUs: CPU ranks, counted by SLURM_TASKS_PER_NODE when --ntasks-per-node was not given", () => {
    const env = { SLURM_JOB_NODELIST: "cpu[1-2],big", SLURM_TASKS_PER_NODE: "2(x2),8", SLURMD_NODENAME: "cpu1" }
    expect(slurmAllocation(env, { isThisMachine: (name) => name === "cpu1", hostName: "cpu1" })).toEqual({
      controllerHost: "cpu1",
      nodes: [
        { host: "cpu1", devices: 2, launcher: true },
        { host: "cpu2", devices: 2, launcher: false },
        { host: "big", devices: 8, launcher: false }
      ]
    })
  })

  test("GPUs without a task count: one rank per GPU; --nproc-per-node wins over Slurm's count", () => {
    const env = { SLURM_JOB_NODELIST: "gpu[01-02]", SLURM_GPUS_ON_NODE: "2", SLURMD_NODENAME: "gpu01" }
    expect(slurmAllocation(env, options)).toMatchObject({ nodes: [{ devices: [0, 1] }, { devices: [0, 1] }] })
    expect(slurmAllocation({ ...env, SLURM_NTASKS_PER_NODE: "2" }, { ...options, ranksPerNode: 1 })).toMatchObject({ nodes: [{ devices: [0] }, { devices: [0] }] })
  })

  test("a one-node allocation on this machine dials loopback", () => {
    const env = { SLURM_JOB_NODELIST: "gpu01", SLURM_NTASKS_PER_NODE: "2", SLURMD_NODENAME: "gpu01" }
    expect(slurmAllocation(env, options)).toEqual({ controllerHost: "127.0.0.1", nodes: [{ host: "gpu01", devices: 2, launcher: true }] })
  })

  test("launched outside its nodes (salloc's shell on a login node): every node over ssh, dialling this machine's name", () => {
    const env = { SLURM_JOB_NODELIST: "gpu[01-02]", SLURM_NTASKS_PER_NODE: "1" }
    expect(slurmAllocation(env, { isThisMachine: () => false, hostName: "login1" })).toEqual({
      controllerHost: "login1",
      nodes: [{ host: "gpu01", devices: 1, launcher: false }, { host: "gpu02", devices: 1, launcher: false }]
    })
  })

  test("a node name that is not this machine's host name: the launcher's node goes by the host name, so its agent runs in-process", () => {
    const env = { SLURM_JOB_NODELIST: "n[1-2]", SLURM_NTASKS_PER_NODE: "1", SLURMD_NODENAME: "n1" }
    expect(slurmAllocation(env, { isThisMachine: (name) => name === "box7", hostName: "box7" })).toEqual({
      controllerHost: "n1",
      nodes: [{ host: "box7", devices: 1, launcher: true }, { host: "n2", devices: 1, launcher: false }]
    })
  })

  test.each([
    [{}, "--from-slurm: SLURM_JOB_NODELIST is not set: run inside a Slurm allocation (sbatch, salloc or srun)"],
    [{ SLURM_JOB_NODELIST: "gpu[1-2" , SLURM_NTASKS_PER_NODE: "1" }, `--from-slurm: SLURM_JOB_NODELIST=gpu[1-2: gpu[1-2 has a "[" without its "]"`],
    [{ SLURM_JOB_NODELIST: "gpu1" }, "--from-slurm: the allocation says neither how many tasks per node (SLURM_NTASKS_PER_NODE) nor how many GPUs (SLURM_GPUS_ON_NODE)"],
    [{ SLURM_JOB_NODELIST: "gpu1", SLURM_NTASKS_PER_NODE: "x" }, "--from-slurm: SLURM_NTASKS_PER_NODE=x: expected a number of tasks ≥ 1"],
    [{ SLURM_JOB_NODELIST: "gpu1", SLURM_GPUS_ON_NODE: "two" }, "--from-slurm: SLURM_GPUS_ON_NODE=two: expected a number of GPUs"],
    [{ SLURM_JOB_NODELIST: "gpu1", SLURM_NTASKS_PER_NODE: "8", SLURM_GPUS_ON_NODE: "4" }, "--from-slurm: 8 ranks per node but SLURM_GPUS_ON_NODE=4: one rank per GPU at most"],
    [{ SLURM_JOB_NODELIST: "a,b", SLURM_TASKS_PER_NODE: "1(x3)" }, "--from-slurm: SLURM_TASKS_PER_NODE=1(x3): it gives counts for 3 node(s), and the allocation has 2"]
  ] as const)("%p is refused, naming the variable", (env, problem) => {
    const result = slurmAllocation(env, options)
    expect(typeof result).toBe("string")
    expect(result as string).toStartWith(problem)
  })

  test("the older SLURM_NODELIST is read when SLURM_JOB_NODELIST is not set", () => {
    expect(slurmAllocation({ SLURM_NODELIST: "a,b", SLURM_NTASKS_PER_NODE: "1" }, { isThisMachine: () => false, hostName: "h" })).toMatchObject({
      nodes: [{ host: "a" }, { host: "b" }]
    })
  })
})
