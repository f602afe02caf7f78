/**
 * `controller:` of a cluster file: where the launcher listens, and its join
 * window (see `JoinWindow`).
 *
 * ```yaml
 * controller:
 *   host: 127.0.0.1          # the address workers dial
 *   port: 0                  # the mux port; 0 picks a free one
 *   join: { min_ranks: 4, target_ranks: 4, timeout: 30s, max_timeout: 120s, open_admission: false, start: auto }
 *   encrypt: false           # true: every frame's payload encrypted too, not only authenticated (networks you do not trust)
 * ```
 *
 * The section is decoded by a Schema (see `SchemaField`); `join` by its own,
 * which needs the workers' capacity and reads flodl's key names (see
 * `FlodlKeys`), so a mistake in either part does not hide the other's.
 */
import * as Schema from "effect/Schema"
import type { ConfigError } from "./ConfigError.ts"
import { expecting, rangeOf } from "./Expected.ts"
import { type FlodlAlias, withFlodlKeys } from "./FlodlKeys.ts"
import { decodeJoin, type JoinWindow } from "./JoinWindow.ts"
import { keyOr, optionalKey } from "./Mapping.ts"
import { decodeField } from "./SchemaField.ts"
import type { Field } from "./Yaml.ts"

export interface Controller {
  readonly host: string
  readonly port: number
  readonly join: JoinWindow
  /**
   * Encrypt every frame's payload, not only authenticate it (AES-128-GCM, the frame keys): for networks you
   * do not trust. Each link's listener (the launcher) tells its dialer in the handshake (`Link`). Absent: false.
   */
  readonly encrypt?: boolean | undefined
}

const ListenPort = Schema.Int.pipe(Schema.between(0, 65_535))

const ControllerKeys = Schema.Struct({
  host: keyOr(Schema.NonEmptyString.pipe(expecting("the address workers dial, like 127.0.0.1")), "127.0.0.1"),
  port: keyOr(ListenPort.pipe(expecting(`a port from ${rangeOf(ListenPort).min} to ${rangeOf(ListenPort).max} (0 picks a free one)`)), 0),
  // Known here so that a refusal lists it; its value is `decodeJoin`'s.
  join: optionalKey(Schema.Unknown),
  encrypt: keyOr(Schema.Boolean, false)
})

const joinAliases: ReadonlyArray<FlodlAlias> = [
  { flodl: "min_rank_start", key: "min_ranks" },
  { flodl: "join_timeout_secs", key: "timeout", seconds: true },
  { flodl: "max_join_timeout_secs", key: "max_timeout", seconds: true }
]

/** Stands in for a join section that could not be read; the run is refused anyway. */
const unreadableJoin: JoinWindow = {
  minRanks: undefined,
  targetRanks: undefined,
  timeoutMs: 60_000,
  maxTimeoutMs: 120_000,
  openAdmission: false,
  start: "auto",
  afterFormation: "reject",
  maxRanks: undefined
}

/**
 * Read `controller` (absent: every key takes its default) for workers that declare `capacity` ranks
 * (undefined: known only once probed). What could not be read takes its default: the mistake is reported,
 * and the run refused.
 */
export const decodeController = (field: Field, capacity: number | undefined, notes: Array<ConfigError>): Controller => {
  const keys = field.attempt(() => decodeField(field, ControllerKeys, { whenAbsent: {} }))
  // Read whatever the other keys hold (a section that is no mapping has no join: every knob takes its default).
  const join = field.get("join").attempt(() => decodeJoin(withFlodlKeys(field.get("join"), joinAliases, notes), capacity))
  return {
    host: keys?.host ?? "127.0.0.1",
    port: keys?.port ?? 0,
    encrypt: keys?.encrypt ?? false,
    join: join ?? unreadableJoin
  }
}
