/**
 * What a rank's environment holds, layer by layer.
 */
import { expect, test } from "bun:test"
import { rankEnvironment } from "../src/agent/RankEnvironment.ts"

const placement = { rank: 5, localRank: 1, worldSize: 8, localWorldSize: 4, groupRank: 1 }

test("a command: job on a GPU gets torchrun's variables and exactly its device", () => {
  const env = rankEnvironment({
    inherited: { PATH: "/usr/bin", CUDA_VISIBLE_DEVICES: "0,1,2,3", COHORT_SALT: "secret", ROCR_VISIBLE_DEVICES: "0" },
    clusterEnv: { OMP_NUM_THREADS: "4", NCCL_DEBUG: "WARN" },
    hostEnv: { OMP_NUM_THREADS: "2" },
    placement: { ...placement, device: { kind: "gpu", index: 3 } },
    torchrun: { addr: "127.0.0.1", port: 29500 }
  })
  expect(env).toEqual({
    PATH: "/usr/bin",
    OMP_NUM_THREADS: "2", // the host wins over the cluster
    NCCL_DEBUG: "WARN",
    CUDA_VISIBLE_DEVICES: "3",
    CUDA_DEVICE_ORDER: "PCI_BUS_ID",
    HIP_VISIBLE_DEVICES: "3",
    RANK: "5",
    LOCAL_RANK: "1",
    WORLD_SIZE: "8",
    LOCAL_WORLD_SIZE: "4",
    GROUP_RANK: "1",
    ROLE_RANK: "5",
    ROLE_WORLD_SIZE: "8",
    MASTER_ADDR: "127.0.0.1",
    MASTER_PORT: "29500"
  })
})

test("an entry: job on a CPU slot gets no torchrun variables, no inherited device scoping, and cohort's own last", () => {
  const env = rankEnvironment({
    inherited: { HOME: "/root", CUDA_VISIBLE_DEVICES: "0", COHORT_ROLE: "agent" },
    clusterEnv: {},
    hostEnv: {},
    placement: { ...placement, device: { kind: "cpu", slot: 1 } },
    internal: { COHORT_ROLE: "rank", COHORT_LOCAL_SLOT: "1" }
  })
  expect(env).toEqual({ HOME: "/root", COHORT_ROLE: "rank", COHORT_LOCAL_SLOT: "1" })
})

test("a command: rank finds the Python client first on PYTHONPATH, ahead of the user's own entries", () => {
  const base = { clusterEnv: {}, hostEnv: {}, placement: { ...placement, device: { kind: "cpu" as const, slot: 1 } } }
  expect(rankEnvironment({ ...base, inherited: {}, pythonClient: "/opt/cohort/python" }).PYTHONPATH).toBe("/opt/cohort/python")
  expect(rankEnvironment({ ...base, inherited: { PYTHONPATH: "/home/me/lib" }, pythonClient: "/opt/cohort/python" }).PYTHONPATH).toBe("/opt/cohort/python:/home/me/lib")
  expect(rankEnvironment({ ...base, inherited: { PYTHONPATH: "/home/me/lib" } }).PYTHONPATH).toBe("/home/me/lib")
})
