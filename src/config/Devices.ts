/**
 * `devices:` of a worker: what it runs ranks on. `4` is four CPU ranks,
 * `[0, 1]` the GPUs with those indices, `all` every GPU the host has (known
 * once it is probed); `0` and `[]` declare a host that runs nothing.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { expecting, rangeOf } from "./reading/Expected.ts"

const DevicesValue = Schema.Union(
  Schema.TaggedStruct("Count", { count: Schema.Number }),
  Schema.TaggedStruct("Indices", { indices: Schema.Array(Schema.Number) }),
  Schema.TaggedStruct("All", {})
)

/** `devices: 4` (CPU slots), `[0, 1]` (GPU indices) or `"all"` (probed on the host); `0` or `[]`: runs nothing. */
export type Devices = typeof DevicesValue.Type

const CpuRanks = Schema.Int.pipe(Schema.between(0, 256))
const GpuIndex = Schema.Int.pipe(Schema.between(0, 255))

const cpuRanks = rangeOf(CpuRanks)
const gpuIndices = rangeOf(GpuIndex)

const Count = Schema.transform(CpuRanks, Schema.typeSchema(DevicesValue.members[0]), {
  strict: true,
  decode: (count) => ({ _tag: "Count" as const, count }),
  encode: ({ count }) => count
})

/** The first index written a second time: each GPU is one rank's. */
const listedTwice = (indices: ReadonlyArray<number>): number | undefined => indices.find((index, at) => indices.indexOf(index) !== at)

// An empty list, like 0, declares a host that runs nothing (see `runsNothing`).
const Indices = Schema.transform(
  Schema.Array(GpuIndex.pipe(expecting(`a GPU index from ${gpuIndices.min} to ${gpuIndices.max}`))).pipe(
    Schema.filter((indices) => {
      const twice = listedTwice(indices)
      return twice === undefined || `device ${twice} is listed twice`
    })
  ),
  Schema.typeSchema(DevicesValue.members[1]),
  { strict: true, decode: (indices) => ({ _tag: "Indices" as const, indices }), encode: ({ indices }) => indices }
)

const All = Schema.transform(Schema.Literal("all"), Schema.typeSchema(DevicesValue.members[2]), {
  strict: true,
  decode: () => ({ _tag: "All" as const }),
  encode: () => "all" as const
})

const DevicesForm = Schema.Union(All, Count, Indices).pipe(
  expecting(`a number of CPU ranks (${cpuRanks.min} to ${cpuRanks.max}), a list of GPU indices like [0, 1], or "all"`)
)

/**
 * The `devices` key of a worker, which every worker must give: left out, or
 * written with nothing after it, it is asked for in words that list its forms
 * (a wrong value is refused by the forms themselves, bounds and all).
 */
export const DevicesKey = Schema.transformOrFail(Schema.NullOr(DevicesForm), Schema.typeSchema(DevicesValue), {
  strict: true,
  decode: (devices, _, ast) => (devices === null ? ParseResult.fail(new ParseResult.Type(ast, devices)) : ParseResult.succeed(devices)),
  encode: ParseResult.succeed
}).pipe(expecting(`a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all"`))

/** Ranks the workers declare, when every count is known. */
export const declaredRanks = (workers: ReadonlyArray<{ readonly devices: Devices }>): number | undefined => {
  let total = 0
  for (const { devices } of workers) {
    if (devices._tag === "All") return undefined
    total += devices._tag === "Count" ? devices.count : devices.indices.length
  }
  return total
}

/**
 * A worker declared with `devices: 0` or `devices: []`: it is in the file (flodl's orchestrator-only entry,
 * kept so a preflight or a tool can read it) but runs no rank, so no agent starts there and it counts in
 * neither the world nor the join window.
 */
export const runsNothing = (worker: { readonly devices: Devices }): boolean =>
  worker.devices._tag === "Count" ? worker.devices.count === 0 : worker.devices._tag === "Indices" && worker.devices.indices.length === 0
