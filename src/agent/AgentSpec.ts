/**
 * How an agent outside the launcher learns where to go: from the spec the
 * launcher pipes down its ssh session (`COHORT_AGENT_SPEC`, JSON: the salt
 * travels there, never in argv) or from `bun run agent`'s arguments. Both
 * come to one `AgentLaunch`.
 */
import type { Devices } from "../config/ClusterConfig.ts"

export interface AgentLaunch {
  readonly host: string
  readonly controller: { readonly host: string; readonly port: number }
  /** Pre-shared admission; undefined: open admission (the launcher must allow it). */
  readonly saltHex: string | undefined
  readonly devices: Devices
  /** Where ranks run. */
  readonly path: string
  /** Re-dial after a transient failure, with backoff. */
  readonly persist: boolean
}

/** `4` (CPU ranks), `0,1` (GPU indices) or `all`; or why not. */
export const parseDevices = (text: string): Devices | string => {
  const trimmed = text.trim()
  if (trimmed === "all") return { _tag: "All" }
  if (/^\d+$/.test(trimmed)) {
    const count = Number(trimmed)
    return count >= 1 && count <= 256 ? { _tag: "Count", count } : `a number of CPU ranks from 1 to 256, got ${trimmed}`
  }
  if (/^\d+(,\d+)*$/.test(trimmed.replaceAll(" ", ""))) {
    const indices = trimmed.replaceAll(" ", "").split(",").map(Number)
    if (new Set(indices).size !== indices.length) return `GPU indices listed twice in ${trimmed}`
    return { _tag: "Indices", indices }
  }
  return `expected a number of CPU ranks (4), GPU indices (0,1) or all, got "${trimmed}"`
}

/** `HOST:PORT`; or why not. */
export const parseEndpoint = (text: string): { host: string; port: number } | string => {
  const match = /^(.+):(\d+)$/.exec(text.trim())
  const port = Number(match?.[2])
  if (match === null || !(port >= 1 && port <= 65_535)) return `expected HOST:PORT (like 10.0.0.1:29400), got "${text}"`
  return { host: match[1]!.replace(/^\[(.*)\]$/, "$1"), port }
}

export const isSaltHex = (text: string): boolean => /^[0-9a-f]{32}$/i.test(text)

/** The spec the launcher sends down an ssh session; or why it is not one. */
export const readAgentSpec = (text: string): AgentLaunch | string => {
  let raw: Record<string, unknown>
  try {
    raw = JSON.parse(text) as Record<string, unknown>
  } catch {
    return "COHORT_AGENT_SPEC is not JSON: it is set by cohort's launcher for the agents it starts; do not set it by hand"
  }
  const controller = typeof raw.controller === "string" ? parseEndpoint(raw.controller) : "controller is missing"
  const devices = typeof raw.devices === "string" ? parseDevices(raw.devices) : "devices is missing"
  const problems = [
    typeof raw.host === "string" && raw.host !== "" ? undefined : "host is missing",
    typeof controller === "string" ? controller : undefined,
    typeof devices === "string" ? devices : undefined,
    raw.saltHex === undefined || (typeof raw.saltHex === "string" && isSaltHex(raw.saltHex)) ? undefined : "saltHex is not 32 hex digits",
    typeof raw.path === "string" ? undefined : "path is missing"
  ].filter((problem): problem is string => problem !== undefined)
  if (problems.length > 0) return `COHORT_AGENT_SPEC is not a valid agent spec: ${problems.join("; ")}`
  return {
    host: raw.host as string,
    controller: controller as { host: string; port: number },
    saltHex: raw.saltHex as string | undefined,
    devices: devices as Devices,
    path: raw.path as string,
    persist: false
  }
}

/** Devices as `parseDevices` reads them (and `--devices` takes them): `4`, `0,1` or `all`. */
export const formatDevices = (devices: Devices): string =>
  devices._tag === "All" ? "all" : devices._tag === "Count" ? String(devices.count) : devices.indices.join(",")

/** The spec for one host, as the launcher writes it. */
export const writeAgentSpec = (launch: Omit<AgentLaunch, "persist">): string =>
  JSON.stringify({
    host: launch.host,
    controller: `${launch.controller.host}:${launch.controller.port}`,
    saltHex: launch.saltHex,
    devices: formatDevices(launch.devices),
    path: launch.path
  })
