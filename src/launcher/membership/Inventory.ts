/**
 * The cohort's inventory: every device of every host admitted to the run,
 * named as its agent named it in its join (`cpu`, or the GPU's name, "NVIDIA
 * H200"), with the rank numbers that ran on it. It is what a bench harness
 * writes in its hardware header and what the end of a run prints: remote GPUs
 * this machine could never probe are in it too.
 *
 * Membership (for the run's result) and RunView (for /state.json and the
 * end-of-run table) each build it from their own facts with `withHost` and
 * `withRank`, so the two cannot tell it differently.
 *
 * Plain and pure, no Effect: `bun run status` prints it without loading the
 * launcher.
 */
import { printable } from "../../wire/Printable.ts"

export interface InventoryDevice {
  /** The device as the ranks' prefixes and the rank table show it: the GPU's index, or `cpu`. */
  readonly device: string
  /** What the host's agent calls it: the GPU's name, or `cpu`. */
  readonly label: string
  /** Every rank number that ran on it, in order: the one it joined with, then those a restart ran under. */
  readonly ranks: ReadonlyArray<number>
}

export interface HostInventory {
  readonly host: string
  /** One per device slot the host joined with (CPU slots are one each, though all say `cpu`). */
  readonly devices: ReadonlyArray<InventoryDevice>
}

export type Inventory = ReadonlyArray<HostInventory>

const sorted = (ranks: ReadonlyArray<number>): ReadonlyArray<number> => [...ranks].sort((a, b) => a - b)

/**
 * The inventory with `host` joined: `ranks[slot]` runs on `devices[slot]`, labelled `labels[slot]`. A host
 * that comes back (given up on, then joined again) brings the same devices: its new ranks are added to them
 * slot by slot, and the label it gives now is kept.
 */
export const withHost = (
  inventory: Inventory,
  host: string,
  ranks: ReadonlyArray<number>,
  devices: ReadonlyArray<string>,
  labels: ReadonlyArray<string>
): Inventory => {
  const at = inventory.findIndex((entry) => entry.host === host)
  const entry = joinedEntry(at === -1 ? undefined : inventory[at], { host, ranks, devices, labels })
  return at === -1 ? [...inventory, entry] : inventory.map((each, index) => (index === at ? entry : each))
}

/** What `withHost` joins: a host, its ranks and their devices and labels, slot by slot. */
export interface HostJoin {
  readonly host: string
  readonly ranks: ReadonlyArray<number>
  readonly devices: ReadonlyArray<string>
  readonly labels: ReadonlyArray<string>
}

/** A host's entry once `join` is in, from the entry it had (if any). */
const joinedEntry = (had: HostInventory | undefined, join: HostJoin): HostInventory => {
  const { devices, labels, ranks } = join
  const before = had?.devices ?? []
  const slots = Math.max(before.length, ranks.length)
  const merged = Array.from({ length: slots }, (_, slot): InventoryDevice => {
    const old = before[slot]
    if (slot >= ranks.length) return old!
    return {
      device: devices[slot] ?? old?.device ?? "?",
      label: labels[slot] ?? old?.label ?? "?",
      ranks: sorted([...(old?.ranks ?? []), ranks[slot]!])
    }
  })
  return { host: join.host, devices: merged }
}

/**
 * `withHost` for each of `joins` in turn, in one pass: the same inventory, with hosts found by name instead of a
 * scan and a copy of the whole inventory per host (a world of 1,000 hosts formed in 0.15 s of the event loop).
 */
export const withHosts = (inventory: Inventory, joins: ReadonlyArray<HostJoin>): Inventory => {
  const out = [...inventory]
  const at = new Map<string, number>()
  out.forEach((entry, index) => {
    if (!at.has(entry.host)) at.set(entry.host, index)
  })
  for (const join of joins) {
    const index = at.get(join.host)
    if (index === undefined) {
      at.set(join.host, out.length)
      out.push(joinedEntry(undefined, join))
    } else {
      out[index] = joinedEntry(out[index], join)
    }
  }
  return out
}

/** The inventory with `rank` on the device `sibling` ran on (a restarted rank's new number); unchanged if `sibling` is nowhere on `host`. */
export const withRank = (inventory: Inventory, host: string, sibling: number, rank: number): Inventory =>
  inventory.map((entry) => {
    if (entry.host !== host) return entry
    const slot = entry.devices.findIndex((device) => device.ranks.includes(sibling))
    if (slot === -1 || entry.devices[slot]!.ranks.includes(rank)) return entry
    return { ...entry, devices: entry.devices.map((device, index) => (index === slot ? { ...device, ranks: sorted([...device.ranks, rank]) } : device)) }
  })

/**
 * One line for people: `gpu-a: 2 × NVIDIA H200; gpu-b: 8 × cpu` (a host with several kinds lists each, in
 * the order of its devices). Names come from the network: they are printed escaped.
 */
export const describe = (inventory: Inventory): string =>
  inventory.map((entry) => {
    const counts = new Map<string, number>()
    for (const { label } of entry.devices) counts.set(label, (counts.get(label) ?? 0) + 1)
    const kinds = [...counts].map(([label, count]) => `${count} × ${printable(label, 64)}`).join(", ")
    return `${printable(entry.host, 253)}: ${kinds === "" ? "no devices" : kinds}`
  }).join("; ")
