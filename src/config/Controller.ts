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
 * flodl's controller keys for fdl-cli's pre-flight build (`path`, `docker`,
 * `arch`, `data_path`) and its join keys for walk-ins (`discovery`, `token`,
 * `tunnel_only`) are noted and left out.
 */
import * as Schema from "effect/Schema"
import type { ConfigError } from "./reading/ConfigError.ts"
import { expecting, rangeOf } from "./reading/Expected.ts"
import { type FlodlAlias, type FlodlOnly, withFlodlKeys, withoutFlodlOnly } from "./FlodlKeys.ts"
import { decodeJoin, type JoinWindow } from "./JoinWindow.ts"
import { keyOr, optionalKey } from "./reading/Mapping.ts"
import { decodeField } from "./reading/SchemaField.ts"
import type { Field } from "./reading/Yaml.ts"

export interface Controller {
  readonly host: string
  /**
   * Whether the file (or `--set controller.host=`) gave `host`, not its default. A loopback address given is the
   * user's choice of where the port listens (Plan binds loopback); the default one is only where this machine's
   * own agents dial, and a remote `agent: self` host may dial another address of this machine. Absent: false.
   */
  readonly hostWritten?: boolean | undefined
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

// flodl's join window is cohort's: `join_timeout` passed with a quorum forms the world, `max_join_timeout`
// passed without one fails the run, both in whole seconds. (`*_secs` are the names flodl's launcher gives
// them inside; an earlier cohort read only those, so they stay.)
const joinAliases: ReadonlyArray<FlodlAlias> = [
  { flodl: "min_rank_start", key: "min_ranks" },
  { flodl: "join_timeout", key: "timeout", seconds: true },
  { flodl: "max_join_timeout", key: "max_timeout", seconds: true },
  { flodl: "join_timeout_secs", key: "timeout", seconds: true },
  { flodl: "max_join_timeout_secs", key: "max_timeout", seconds: true }
]

/** fdl-cli's controller keys: the context of its pre-flight build and probe, which cohort has none of. */
const controllerOnly: ReadonlyArray<FlodlOnly> = [
  { flodl: "path", does: "the controller's project checkout, where fdl-cli builds before a run", instead: "the launcher works in the directory it is started in, and finds job.entry from there" },
  { flodl: "docker", does: "the Docker Compose service fdl-cli's pre-flight build runs in", instead: "nothing is built before a cohort run" },
  { flodl: "arch", does: "the libtorch variant fdl-cli's pre-flight build links", instead: "nothing is built before a cohort run" },
  { flodl: "data_path", does: "the dataset root fdl probe checks on the controller" }
]

/** flodl's join keys for walk-ins: hosts that are not under `workers` and dial in with `fdl join`. */
const joinOnly: ReadonlyArray<FlodlOnly> = [
  {
    flodl: "discovery",
    does: "a window that hosts not under workers join with fdl join",
    instead: "cohort admits only the hosts under workers: declare each one, with agent: self for a host whose agent you start (cohort agent, or bun run agent in a checkout)"
  },
  {
    flodl: "token",
    does: "a pre-shared salt that hosts joining with fdl join present",
    instead: "cohort makes a salt for each run and writes it under .cohort/salts/ for the agents you start yourself"
  },
  {
    flodl: "tunnel_only",
    does: "the port bound to loopback only",
    // Left out, the port would be bound wider than the file says.
    refuse: (value) =>
      value === false || value === null
        ? undefined
        : "tunnel_only is flodl's (the port bound to loopback only, for walk-ins that come through ssh forwards): cohort takes no walk-ins, and binds loopback only when every remote worker has tunnel: true; give them that and remove tunnel_only"
  }
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
  const keys = field.attempt(() => decodeField(withoutFlodlOnly(field, controllerOnly, notes), ControllerKeys, { whenAbsent: {} }))
  // Read whatever the other keys hold (a section that is no mapping has no join: every knob takes its default).
  const written = field.get("join")
  const join = written.attempt(() => decodeJoin(withoutFlodlOnly(withFlodlKeys(written, joinAliases, notes), joinOnly, notes), capacity))
  return {
    host: keys?.host ?? "127.0.0.1",
    hostWritten: field.get("host").present,
    port: keys?.port ?? 0,
    encrypt: keys?.encrypt ?? false,
    join: join ?? unreadableJoin
  }
}
