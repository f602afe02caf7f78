/**
 * What a host's children are told about the run, in their environment
 * (`COHORT_RANK_ENVELOPE`, `COHORT_RELAY_SPEC`): JSON, checked on the way
 * in. Neither carries the salt: a rank's envelope carries its own rank's key
 * (`Keys.rankKey`), and the relay gets its host's key over its IPC channel
 * (`HostKeyMessage`), out of its environment, which every process of the
 * same user can read in /proc.
 *
 * One envelope per rank: the host's, with that rank's key; each rank adds its
 * local slot (`COHORT_LOCAL_SLOT`) to find its own rank and device in it.
 *
 * This module imports nothing from effect on purpose: it is on every rank's
 * start-up path, and loading `effect/Schema` costs a rank ~0.2 s.
 */
import { scopedKeyFromHex } from "../Keys.ts"
import type { RankDevice } from "../../rank/RankContext.ts"

export interface Endpoint {
  readonly host: string
  readonly port: number
}

export interface HostEnvelope {
  /** The rank ↔ relay protocol's version (LocalFrames.LOCAL_PROTOCOL_VERSION): a client checks it before it dials. */
  readonly protocol: number
  readonly run: string
  readonly host: string
  /** The host's position among the hosts: torchrun's GROUP_RANK. */
  readonly groupRank: number
  readonly worldSize: number
  /** The host's global ranks, by local slot. */
  readonly ranks: ReadonlyArray<number>
  /** The device of each local slot. */
  readonly devices: ReadonlyArray<RankDevice>
  readonly controller: Endpoint
  /** This rank's own key (64 hex digits), for its rendezvous link: never the salt. */
  readonly rankKeyHex: string
  /** An `entry:` job's module (resolved against the rank's working directory); absent for `command:` jobs. */
  readonly entry?: string | undefined
  readonly args: ReadonlyArray<string>
  readonly backend: string
  /** The host's private run directory (shared-memory segments) and its relay's socket in it. */
  readonly dir: string
  readonly socket: string
  readonly datasetSize: number
  readonly epochs: number
  readonly cadence: number
  /** `job.checkpoint_pickle`: the Python client may load torch.save's pickle (any rank's code runs on every host). */
  readonly checkpointPickle?: boolean | undefined
  /** A rank silent this long is dead, and so is a coordinator, in milliseconds (scaled). */
  readonly heartbeatTimeoutMs: number
}

export interface RelaySpec {
  readonly host: string
  readonly ranks: ReadonlyArray<number>
  readonly worldSize: number
  readonly controller: Endpoint
  readonly dir: string
  readonly socket: string
  /** The launcher beats every second; silent this long, it is gone. */
  readonly heartbeatTimeoutMs: number
}

class Invalid extends Error {}

type Json = Record<string, unknown>

const object = (value: unknown, at: string): Json => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Invalid(`${at} must be an object`)
  return value as Json
}
const string = (value: unknown, at: string): string => {
  if (typeof value !== "string") throw new Invalid(`${at} must be a string`)
  return value
}
const boolean = (value: unknown, at: string): boolean => {
  if (typeof value !== "boolean") throw new Invalid(`${at} must be true or false`)
  return value
}
const count = (value: unknown, at: string, min = 0, max = Number.MAX_SAFE_INTEGER): number => {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new Invalid(`${at} must be a whole number from ${min} to ${max}`)
  }
  return value
}
const list = <A>(value: unknown, at: string, item: (value: unknown, at: string) => A): ReadonlyArray<A> => {
  if (!Array.isArray(value)) throw new Invalid(`${at} must be a list`)
  return value.map((element, index) => item(element, `${at}[${index}]`))
}
const endpoint = (value: unknown, at: string): Endpoint => {
  const fields = object(value, at)
  return { host: string(fields.host, `${at}.host`), port: count(fields.port, `${at}.port`, 1, 65_535) }
}
const key = (value: unknown, at: string): string => {
  const hex = string(value, at)
  if (scopedKeyFromHex(hex) === undefined) throw new Invalid(`${at} must be 64 hex digits`)
  return hex
}
const device = (value: unknown, at: string): RankDevice => {
  const fields = object(value, at)
  if (fields.kind === "cpu") return { kind: "cpu", slot: count(fields.slot, `${at}.slot`) }
  if (fields.kind === "gpu") return { kind: "gpu", index: count(fields.index, `${at}.index`) }
  throw new Invalid(`${at}.kind must be "cpu" or "gpu"`)
}

const hostEnvelope = (value: unknown): HostEnvelope => {
  const fields = object(value, "the envelope")
  const ranks = list(fields.ranks, "ranks", (rank, at) => count(rank, at))
  const devices = list(fields.devices, "devices", device)
  if (devices.length !== ranks.length) throw new Invalid(`devices must have one entry per rank (${ranks.length}), got ${devices.length}`)
  return {
    protocol: count(fields.protocol, "protocol", 1),
    run: string(fields.run, "run"),
    host: string(fields.host, "host"),
    groupRank: count(fields.groupRank, "groupRank"),
    worldSize: count(fields.worldSize, "worldSize", 1),
    ranks,
    devices,
    controller: endpoint(fields.controller, "controller"),
    rankKeyHex: key(fields.rankKeyHex, "rankKeyHex"),
    entry: fields.entry === undefined ? undefined : string(fields.entry, "entry"),
    args: list(fields.args, "args", string),
    backend: string(fields.backend, "backend"),
    dir: string(fields.dir, "dir"),
    socket: string(fields.socket, "socket"),
    datasetSize: count(fields.datasetSize, "datasetSize"),
    epochs: count(fields.epochs, "epochs", 1),
    cadence: count(fields.cadence, "cadence", 1),
    ...(fields.checkpointPickle === undefined ? {} : { checkpointPickle: boolean(fields.checkpointPickle, "checkpointPickle") }),
    heartbeatTimeoutMs: count(fields.heartbeatTimeoutMs, "heartbeatTimeoutMs", 1)
  }
}

const relaySpec = (value: unknown): RelaySpec => {
  const fields = object(value, "the spec")
  return {
    host: string(fields.host, "host"),
    ranks: list(fields.ranks, "ranks", (rank, at) => count(rank, at)),
    worldSize: count(fields.worldSize, "worldSize", 1),
    controller: endpoint(fields.controller, "controller"),
    dir: string(fields.dir, "dir"),
    socket: string(fields.socket, "socket"),
    heartbeatTimeoutMs: count(fields.heartbeatTimeoutMs, "heartbeatTimeoutMs", 1)
  }
}

/** Read a spec from an environment variable: the value, or a message naming the variable. */
const read = <A>(check: (value: unknown) => A) => (variable: string, text: string): A | string => {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch {
    return `${variable} is not JSON: it is set by cohort for its own processes; do not set it by hand`
  }
  try {
    return check(raw)
  } catch (error) {
    if (error instanceof Invalid) return `${variable} is not a valid cohort spec: ${error.message}`
    throw error
  }
}

export const readHostEnvelope = read(hostEnvelope)
export const readRelaySpec = read(relaySpec)

export const toEnvironment = (spec: HostEnvelope | RelaySpec): string => JSON.stringify(spec)

/** The one message an agent sends its relay over IPC, right after starting it: the host's key. */
export interface HostKeyMessage {
  readonly _tag: "HostKey"
  readonly keyHex: string
}

/** The host key out of the relay's first IPC message; or why it is not one. */
export const readHostKeyMessage = (message: unknown): Uint8Array | { readonly problem: string } => {
  try {
    const fields = object(message, "the agent's first message")
    if (fields._tag !== "HostKey") throw new Invalid(`the agent's first message must be a HostKey, got ${String(fields._tag)}`)
    return scopedKeyFromHex(key(fields.keyHex, "keyHex"))!
  } catch (error) {
    if (error instanceof Invalid) return { problem: error.message }
    throw error
  }
}
