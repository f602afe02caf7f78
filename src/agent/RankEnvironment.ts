/**
 * The environment each rank process starts with.
 *
 * Layers, later ones winning: the agent's own environment (scrubbed of
 * cohort's internal variables and of device scoping inherited from outside),
 * the cluster's `env:`, the host's `env:`, then what cohort itself sets: the
 * device scoping for GPU ranks and, for `command:` jobs, the variables a
 * torchrun-launched program expects, so an unmodified `torch.distributed`
 * script runs under cohort.
 */

import type { RankDevice } from "../rank/RankContext.ts"
import { roleVariables } from "../kernel/Role.ts"

export type { RankDevice }

export interface RankPlacement {
  readonly rank: number
  readonly localRank: number
  readonly worldSize: number
  readonly localWorldSize: number
  /** The host's position among the hosts (torchrun's GROUP_RANK, the node rank). */
  readonly groupRank: number
  readonly device: RankDevice
}

/** Inherited variables that must not reach a rank: cohort's internals and device scoping set elsewhere. */
const scrubbedKeys = ["ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"]

/** cohort's variables that are the user's knobs, not its internals: they reach every process. */
const userKnobs = ["COHORT_NET_TIMEOUT_SCALE", "COHORT_LOG_LEVEL", "COHORT_NATIVE_LIB", "COHORT_CUDART_LIB", "COHORT_NCCL_LIB"]

export const scrub = (env: Readonly<Record<string, string | undefined>>): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(env)) {
    const internal = key.startsWith("COHORT_") && !userKnobs.includes(key)
    if (value === undefined || internal || scrubbedKeys.includes(key)) continue
    out[key] = value
  }
  return out
}

/** GPU ranks see exactly their device, in PCI bus order (the order nvidia-smi shows). */
export const deviceEnvironment = (device: RankDevice): Record<string, string> =>
  device.kind === "gpu"
    ? {
      CUDA_VISIBLE_DEVICES: String(device.index),
      CUDA_DEVICE_ORDER: "PCI_BUS_ID",
      HIP_VISIBLE_DEVICES: String(device.index)
    }
    : {}

/** What torchrun gives each worker; MASTER_ADDR/PORT name rank 0's store. */
export const torchrunEnvironment = (
  placement: RankPlacement,
  master: { readonly addr: string; readonly port: number }
): Record<string, string> => ({
  RANK: String(placement.rank),
  LOCAL_RANK: String(placement.localRank),
  WORLD_SIZE: String(placement.worldSize),
  LOCAL_WORLD_SIZE: String(placement.localWorldSize),
  GROUP_RANK: String(placement.groupRank),
  ROLE_RANK: String(placement.rank),
  ROLE_WORLD_SIZE: String(placement.worldSize),
  MASTER_ADDR: master.addr,
  MASTER_PORT: String(master.port)
})

export interface RankEnvironmentInput {
  readonly inherited: Readonly<Record<string, string | undefined>>
  readonly clusterEnv: Readonly<Record<string, string>>
  readonly hostEnv: Readonly<Record<string, string>>
  readonly placement: RankPlacement
  /** Set for `command:` jobs: where rank 0's store listens. */
  readonly torchrun?: { readonly addr: string; readonly port: number } | undefined
  /** cohort's own variables for the rank runtime (identity, envelope). */
  readonly internal?: Readonly<Record<string, string>> | undefined
  /** Set for `command:` jobs: the Python client's folder, put first on PYTHONPATH (`import cohort`). */
  readonly pythonClient?: string | undefined
}

export const rankEnvironment = (input: RankEnvironmentInput): Record<string, string> => {
  const env: Record<string, string> = {
    ...scrub(input.inherited),
    ...input.clusterEnv,
    ...input.hostEnv,
    ...deviceEnvironment(input.placement.device),
    ...(input.torchrun === undefined ? {} : torchrunEnvironment(input.placement, input.torchrun)),
    ...input.internal
  }
  // Ahead of the user's own entries: the client must be the launcher's, whose protocol version it speaks.
  if (input.pythonClient !== undefined) env.PYTHONPATH = env.PYTHONPATH ? `${input.pythonClient}:${env.PYTHONPATH}` : input.pythonClient
  return env
}

/** cohort's own variables for a rank: its host envelope, its slot and its restart count (torchrun's name too, for commands). */
export const internalEnvironment = (input: {
  readonly envelope: string
  readonly slot: number
  readonly incarnation: number
  readonly command: boolean
}): Record<string, string> => ({
  [roleVariables.rankEnvelope]: input.envelope,
  [roleVariables.rankSlot]: String(input.slot),
  COHORT_RESTART_COUNT: String(input.incarnation),
  ...(input.command ? { TORCHELASTIC_RESTART_COUNT: String(input.incarnation) } : {})
})
