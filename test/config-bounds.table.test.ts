/**
 * Every bound of src/config from both sides, and every default, in one table typed by hand.
 *
 * A bound tested only where it refuses lets an off-by-one on the other side through: the largest
 * allowed value refused, or an equal pair the message calls fine (target_ranks = min_ranks,
 * max_timeout = timeout, backoff max = initial) rejected. So each bound has a row for the last
 * value accepted and one for the first refused, and each default a row for a file that leaves the
 * key out. The values are literals: none is read from the code's own constants. A refused row
 * names the field the one error must be at, and words of that error.
 *
 * Pure parsing, no processes: this file is in the fast tier.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { DropRanks, FailRun, type FailureRule } from "../src/kernel/policy/FailureRules.ts"
import { Backoff, Count, type Elastic, KillAll, Percent, Restart } from "../src/kernel/policy/Strategy.ts"
import { type ClusterConfig, parseCluster } from "../src/config/ClusterConfig.ts"
import { formatDuration, parseDuration } from "../src/config/reading/Duration.ts"
import { reservedReason } from "../src/config/Env.ts"
import { beatEveryMs } from "../src/config/Heartbeat.ts"
import { relayLogLevel, requestedLogLevel, requestedLogLevelOr } from "../src/config/LogVerbosity.ts"
import { deadlines, NetTimeoutScaleError, netTimeoutScale, scaled } from "../src/config/NetTimeouts.ts"

// ---------------------------------------------------------------------------------------------------------
// The cluster file: [field, the sections that differ from a minimal file, what is expected there].
// ---------------------------------------------------------------------------------------------------------

type Expected = { readonly accepts: unknown } | { readonly refuses: string }
const accepts = (value: unknown): Expected => ({ accepts: value })
const refuses = (words: string): Expected => ({ refuses: words })

type Row = readonly [field: string, yaml: string, expected: Expected]

/** `yaml`, with a worker of 4 CPU ranks and an entry job wherever it gives none. */
const fileOf = (yaml: string): string =>
  [yaml, /^workers:/m.test(yaml) ? "" : "workers: [{ host: a, devices: 4 }]", /^job:/m.test(yaml) ? "" : "job: { entry: t.ts }"]
    .filter((line) => line !== "")
    .join("\n") + "\n"

const quiet = Logger.minimumLogLevel(LogLevel.None)
const decode = (yaml: string) => Effect.runPromise(parseCluster(fileOf(yaml), "cluster.yml").pipe(Effect.either, Effect.provide(quiet)))

const elastic = (config: ClusterConfig) => config.failurePolicy.strategy.afterFormation as Elastic
const restart = (config: ClusterConfig) => config.failurePolicy.strategy.afterFormation as Restart
const killAll = (config: ClusterConfig) => config.failurePolicy.strategy.beforeFormation as KillAll
const firstRule = (config: ClusterConfig) => config.failurePolicy.strategy.rules?.[0] as FailureRule
const firstWorker = (config: ClusterConfig) => config.workers[0]!

/** What each field decodes to, read from the config; the key is also the place a refusal is said. */
const readers: Readonly<Record<string, (config: ClusterConfig) => unknown>> = {
  name: (c) => c.name,
  "controller.host": (c) => c.controller.host,
  "controller.port": (c) => c.controller.port,
  "controller.encrypt": (c) => c.controller.encrypt,
  "controller.join.min_ranks": (c) => c.controller.join.minRanks,
  "controller.join.target_ranks": (c) => c.controller.join.targetRanks,
  "controller.join.max_ranks": (c) => c.controller.join.maxRanks,
  "controller.join.timeout": (c) => c.controller.join.timeoutMs,
  "controller.join.max_timeout": (c) => c.controller.join.maxTimeoutMs,
  "controller.join.start": (c) => c.controller.join.start,
  "controller.join.after_formation": (c) => c.controller.join.afterFormation,
  "controller.join.open_admission": (c) => c.controller.join.openAdmission,
  "controller.join.min_rank_start": (c) => c.controller.join.minRanks,
  "controller.join.join_timeout_secs": (c) => c.controller.join.timeoutMs,
  "controller.join.max_join_timeout_secs": (c) => c.controller.join.maxTimeoutMs,
  "controller.join.join_timeout": (c) => c.controller.join.timeoutMs,
  "controller.join.max_join_timeout": (c) => c.controller.join.maxTimeoutMs,
  "workers[0].devices": (c) => firstWorker(c).devices,
  "workers[0].devices[0]": (c) => {
    const devices = firstWorker(c).devices
    return devices._tag === "Indices" ? devices.indices[0] : devices
  },
  "workers[0].path": (c) => firstWorker(c).path,
  "workers[0].tunnel": (c) => firstWorker(c).tunnel,
  "workers[0].agent": (c) => firstWorker(c).agent,
  "workers[0].env": (c) => firstWorker(c).env,
  "workers[0].ssh": (c) => firstWorker(c).ssh,
  "workers[0].ssh.port": (c) => firstWorker(c).ssh?.port,
  env: (c) => c.env,
  "job.backend": (c) => c.job.backend,
  "job.args": (c) => c.job.args,
  "job.checkpoint": (c) => c.job.checkpoint,
  "job.checkpoint_pickle": (c) => c.job.checkpointPickle,
  "job.dataset_size": (c) => c.job.datasetSize,
  "job.epochs": (c) => c.job.epochs,
  "job.cadence": (c) => c.job.cadence,
  "job.async_alpha": (c) => c.job.asyncAlpha,
  "job.outer_optimizer": (c) => c.job.outerOptimizer,
  "job.outer_optimizer.lr": (c) => c.job.outerOptimizer?.lr,
  "job.outer_optimizer.momentum": (c) => c.job.outerOptimizer?.momentum,
  "failure_policy.grace": (c) => c.failurePolicy.grace,
  "failure_policy.heartbeat_timeout": (c) => c.failurePolicy.heartbeatTimeout,
  "failure_policy.degraded_exit": (c) => c.failurePolicy.degradedExit,
  "failure_policy.before_formation": (c) => c.failurePolicy.strategy.beforeFormation,
  "failure_policy.before_formation.kill_all.grace": (c) => killAll(c).grace,
  "failure_policy.after_formation": (c) => c.failurePolicy.strategy.afterFormation,
  "failure_policy.after_formation.elastic.max_failure": (c) => elastic(c).maxFailure,
  "failure_policy.after_formation.elastic.max_failure_base": (c) => elastic(c).base,
  "failure_policy.after_formation.restart.max_restarts": (c) => restart(c).maxRestarts,
  "failure_policy.after_formation.restart.within": (c) => restart(c).within,
  "failure_policy.after_formation.restart.scope": (c) => restart(c).scope,
  "failure_policy.after_formation.restart.backoff": (c) => restart(c).backoff,
  "failure_policy.after_formation.restart.backoff.initial": (c) => restart(c).backoff.initial,
  "failure_policy.after_formation.restart.backoff.max": (c) => restart(c).backoff.max,
  "failure_policy.after_formation.restart.backoff.factor": (c) => restart(c).backoff.factor,
  "failure_policy.after_formation.restart.backoff.jitter": (c) => restart(c).backoff.jitter,
  "failure_policy.rules": (c) => c.failurePolicy.strategy.rules?.map((rule) => rule.name),
  "failure_policy.rules[0].when.same_error_on": (c) => firstRule(c).when.sameErrorOn,
  "failure_policy.rules[0].when.exit_code": (c) => {
    const codes = firstRule(c).when.exitCodes
    return codes === undefined ? undefined : { [codes.op]: codes.values }
  },
  "failure_policy.rules[0].when.signal": (c) => firstRule(c).when.signals,
  "failure_policy.rules[0].when.cause": (c) => firstRule(c).when.causes,
  "failure_policy.rules[0].when.ranks": (c) => firstRule(c).when.ranks,
  "failure_policy.rules[0].when.hosts": (c) => firstRule(c).when.hosts,
  "failure_policy.rules[0].then": (c) => firstRule(c).then
}

const week = 604_800_000

/** A restart with every default: 3 restarts within 10m, backoff 1s to 30s, ×2, jitter 0.2, scope one. */
const defaultRestart = new Restart({ maxRestarts: 3, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "one" })

const join = (knobs: string) => `controller: { join: { ${knobs} } }`
const probed = "workers: [{ host: a, devices: all }]"
const policy = (keys: string) => `failure_policy: { ${keys} }`
const restartWith = (options: string) => policy(`after_formation: { restart: { ${options} } }`)
const backoffWith = (options: string) => restartWith(`backoff: { ${options} }`)
const maxFailure = (written: string) => policy(`after_formation: { elastic: { max_failure: ${written} } }`)
const rule = (when: string) => policy(`rules: [{ when: { ${when} }, then: fail }]`)
const durationWords = `a duration like "250ms", "5s", "10m" or "1h"`

const clusterRows: ReadonlyArray<Row> = [
  // name: 1 to 128 characters; the file's name without one.
  ["name", "", accepts("cluster")],
  ["name", `name: ${"n".repeat(128)}`, accepts("n".repeat(128))],
  ["name", `name: ${"n".repeat(129)}`, refuses("1 to 128 letters")],

  // controller
  ["controller.host", "", accepts("127.0.0.1")],
  ["controller.encrypt", "", accepts(false)],
  ["controller.port", "", accepts(0)],
  ["controller.port", "controller: { port: 0 }", accepts(0)],
  ["controller.port", "controller: { port: -1 }", refuses("expected a port from 0 to 65535 (0 picks a free one), got -1")],
  ["controller.port", "controller: { port: 65535 }", accepts(65_535)],
  ["controller.port", "controller: { port: 65536 }", refuses("expected a port from 0 to 65535 (0 picks a free one), got 65536")],

  // controller.join: the rank knobs default from the 4 declared ranks.
  ["controller.join.min_ranks", "", accepts(4)],
  ["controller.join.target_ranks", "", accepts(4)],
  ["controller.join.min_ranks", probed, accepts(undefined)],
  ["controller.join.target_ranks", probed, accepts(undefined)],
  ["controller.join.target_ranks", join("start: manual"), accepts(undefined)],
  ["controller.join.target_ranks", join("start: hybrid"), accepts(4)],
  ["controller.join.start", "", accepts("auto")],
  ["controller.join.after_formation", "", accepts("reject")],
  ["controller.join.max_ranks", "", accepts(undefined)],
  ["controller.join.open_admission", "", accepts(false)],
  ["controller.join.min_ranks", join("min_ranks: 1"), accepts(1)],
  ["controller.join.min_ranks", join("min_ranks: 0"), refuses("expected a number of ranks from 1 to 1000000, got 0")],
  ["controller.join.min_ranks", join("min_ranks: 4"), accepts(4)],
  ["controller.join.min_ranks", join("min_ranks: 5"), refuses("expected at most the 4 ranks the workers declare, got 5")],
  ["controller.join.min_ranks", `${probed}\n${join("min_ranks: 1000000")}`, accepts(1_000_000)],
  ["controller.join.min_ranks", `${probed}\n${join("min_ranks: 1000001")}`, refuses("expected a number of ranks from 1 to 1000000, got 1000001")],
  ["controller.join.target_ranks", `${probed}\n${join("target_ranks: 1000000")}`, accepts(1_000_000)],
  ["controller.join.target_ranks", `${probed}\n${join("target_ranks: 1000001")}`, refuses("expected a number of ranks from 1 to 1000000, got 1000001")],
  ["controller.join.target_ranks", join("target_ranks: 0"), refuses("expected a number of ranks from 1 to 1000000, got 0")],
  // target_ranks = min_ranks is fine ("at least min_ranks"); one below is not.
  ["controller.join.target_ranks", join("min_ranks: 2, target_ranks: 2"), accepts(2)],
  ["controller.join.target_ranks", join("min_ranks: 2, target_ranks: 1"), refuses("expected at least min_ranks (2), got 1")],
  ["controller.join.target_ranks", join("target_ranks: 4"), accepts(4)],
  ["controller.join.target_ranks", join("target_ranks: 3"), refuses("expected at least min_ranks (4), got 3")],
  // max_ranks = min_ranks is fine; one below is not.
  ["controller.join.max_ranks", join("min_ranks: 2, after_formation: accept, max_ranks: 2"), accepts(2)],
  ["controller.join.max_ranks", join("min_ranks: 2, after_formation: accept, max_ranks: 1"), refuses("expected at least min_ranks (2), got 1")],
  ["controller.join.max_ranks", join("after_formation: accept, max_ranks: 1000000"), accepts(1_000_000)],
  ["controller.join.max_ranks", join("after_formation: accept, max_ranks: 1000001"), refuses("expected a number of ranks from 1 to 1000000, got 1000001")],
  ["controller.join.max_ranks", join("max_ranks: 4"), refuses("max_ranks caps growth after formation")],
  // timeout: above 0, at most a week; a minute by default.
  ["controller.join.timeout", "", accepts(60_000)],
  ["controller.join.timeout", join("timeout: 1ms"), accepts(1)],
  ["controller.join.timeout", join("timeout: 0ms"), refuses(`expected ${durationWords} above 0ms, got "0ms"`)],
  ["controller.join.timeout", join("timeout: 168h, max_timeout: 168h"), accepts(week)],
  ["controller.join.timeout", join("timeout: 604800001ms"), refuses(`${durationWords} above 0ms up to 168h, got "604800001ms"`)],
  // max_timeout: by default at least two minutes and twice the timeout; never below the timeout, equal is fine.
  ["controller.join.max_timeout", "", accepts(120_000)],
  ["controller.join.max_timeout", join("timeout: 59s"), accepts(120_000)],
  ["controller.join.max_timeout", join("timeout: 60s"), accepts(120_000)],
  ["controller.join.max_timeout", join("timeout: 61s"), accepts(122_000)],
  ["controller.join.max_timeout", join("timeout: 2m"), accepts(240_000)],
  ["controller.join.max_timeout", join("timeout: 1ms"), accepts(120_000)],
  // Twice the timeout stops at the week any duration may be.
  ["controller.join.max_timeout", join("timeout: 84h"), accepts(week)],
  ["controller.join.max_timeout", join("timeout: 100h"), accepts(week)],
  ["controller.join.max_timeout", join("timeout: 168h"), accepts(week)],
  ["controller.join.max_timeout", join("timeout: 83h"), accepts(166 * 3_600_000)],
  ["controller.join.max_timeout", join("timeout: 2m, max_timeout: 2m"), accepts(120_000)],
  ["controller.join.max_timeout", join("timeout: 2m, max_timeout: 119999ms"), refuses(`expected a duration ≥ timeout, got "119999ms"`)],
  // Against the default timeout (60s).
  ["controller.join.max_timeout", join("max_timeout: 60s"), accepts(60_000)],
  ["controller.join.max_timeout", join("max_timeout: 59999ms"), refuses(`expected a duration ≥ timeout, got "59999ms"`)],
  ["controller.join.max_timeout", join("max_timeout: 1ms, timeout: 1ms"), accepts(1)],
  ["controller.join.max_timeout", join("max_timeout: 0ms"), refuses(`above 0ms, got "0ms"`)],
  ["controller.join.max_timeout", join("max_timeout: 168h"), accepts(week)],
  ["controller.join.max_timeout", join("max_timeout: 604800001ms"), refuses(`up to 168h, got "604800001ms"`)],
  // flodl's names: whole seconds from 1 to 604800.
  ["controller.join.min_rank_start", join("min_rank_start: 3"), accepts(3)],
  ["controller.join.join_timeout_secs", join("join_timeout_secs: 1"), accepts(1_000)],
  ["controller.join.join_timeout_secs", join("join_timeout_secs: 0"), refuses("expected a whole number of seconds from 1 to 604800, got 0")],
  ["controller.join.join_timeout_secs", join("join_timeout_secs: 604800, max_timeout: 168h"), accepts(week)],
  ["controller.join.join_timeout_secs", join("join_timeout_secs: 604801"), refuses("expected a whole number of seconds from 1 to 604800, got 604801")],
  ["controller.join.max_join_timeout_secs", join("max_join_timeout_secs: 604800"), accepts(week)],
  ["controller.join.max_join_timeout_secs", join("max_join_timeout_secs: 604801"), refuses("expected a whole number of seconds from 1 to 604800, got 604801")],
  ["controller.join.max_join_timeout_secs", join("max_join_timeout_secs: 60"), accepts(60_000)],
  // Compared with the timeout once read as the key it stands for, and said at the key the file writes, as written.
  ["controller.join.max_join_timeout_secs", join("max_join_timeout_secs: 59"), refuses("expected a duration ≥ timeout, got 59")],
  // fdl-cli's names for the same two (issue 38): the same bounds.
  ["controller.join.join_timeout", join("join_timeout: 1"), accepts(1_000)],
  ["controller.join.join_timeout", join("join_timeout: 0"), refuses("expected a whole number of seconds from 1 to 604800, got 0")],
  ["controller.join.join_timeout", join("join_timeout: 604800, max_timeout: 168h"), accepts(week)],
  ["controller.join.join_timeout", join("join_timeout: 604801"), refuses("expected a whole number of seconds from 1 to 604800, got 604801")],
  ["controller.join.max_join_timeout", join("max_join_timeout: 604800"), accepts(week)],
  ["controller.join.max_join_timeout", join("max_join_timeout: 604801"), refuses("expected a whole number of seconds from 1 to 604800, got 604801")],
  ["controller.join.max_join_timeout", join("max_join_timeout: 60"), accepts(60_000)],
  ["controller.join.max_join_timeout", join("max_join_timeout: 59"), refuses("expected a duration ≥ timeout, got 59")],
  ["controller.join.max_join_timeout", join("join_timeout: 90, max_join_timeout: 89"), refuses("expected a duration ≥ timeout, got 89")],

  // workers: devices 0 to 256 CPU ranks, GPU indices 0 to 255.
  ["workers[0].devices", "workers: [{ host: a, devices: 0 }]", accepts({ _tag: "Count", count: 0 })],
  ["workers[0].devices", "workers: [{ host: a, devices: -1 }]", refuses("expected a number of CPU ranks (0 to 256)")],
  ["workers[0].devices", "workers: [{ host: a, devices: 1 }]", accepts({ _tag: "Count", count: 1 })],
  ["workers[0].devices", "workers: [{ host: a, devices: 256 }]", accepts({ _tag: "Count", count: 256 })],
  ["workers[0].devices", "workers: [{ host: a, devices: 257 }]", refuses("expected a number of CPU ranks (0 to 256)")],
  ["workers[0].devices", "workers: [{ host: a, devices: 2.5 }]", refuses("got 2.5")],
  ["workers[0].devices", "workers: [{ host: a, devices: [] }]", accepts({ _tag: "Indices", indices: [] })],
  ["workers[0].devices", "workers: [{ host: a, devices: all }]", accepts({ _tag: "All" })],
  ["workers[0].devices[0]", "workers: [{ host: a, devices: [0] }]", accepts(0)],
  ["workers[0].devices[0]", "workers: [{ host: a, devices: [-1] }]", refuses("expected a GPU index from 0 to 255, got -1")],
  ["workers[0].devices[0]", "workers: [{ host: a, devices: [255] }]", accepts(255)],
  ["workers[0].devices[0]", "workers: [{ host: a, devices: [256] }]", refuses("expected a GPU index from 0 to 255, got 256")],
  ["workers[0].path", "", accepts(".")],
  ["workers[0].tunnel", "", accepts(false)],
  ["workers[0].agent", "", accepts(undefined)],
  ["workers[0].env", "", accepts({})],
  ["workers[0].ssh", "", accepts(undefined)],
  ["workers[0].ssh", "workers: [{ host: a, devices: 1, ssh: {} }]", accepts({ target: undefined, user: undefined, port: undefined, identityFile: undefined, options: [] })],
  ["workers[0].ssh.port", "workers: [{ host: a, devices: 1, ssh: { port: 1 } }]", accepts(1)],
  ["workers[0].ssh.port", "workers: [{ host: a, devices: 1, ssh: { port: 0 } }]", refuses("expected an ssh port from 1 to 65535, got 0")],
  ["workers[0].ssh.port", "workers: [{ host: a, devices: 1, ssh: { port: 65535 } }]", accepts(65_535)],
  ["workers[0].ssh.port", "workers: [{ host: a, devices: 1, ssh: { port: 65536 } }]", refuses("expected an ssh port from 1 to 65535, got 65536")],

  // env: shell-style names; COHORT_ is cohort's own, a name that only starts with COHORT is not.
  ["env", "", accepts({})],
  ["env", "env: { _: x, A1: 2, COHORT: y, COHORTX: z }", accepts({ _: "x", A1: "2", COHORT: "y", COHORTX: "z" })],
  ["env.1A", "env: { 1A: x }", refuses(`"1A" is not a valid variable name`)],
  ["env.COHORT_X", "env: { COHORT_X: x }", refuses("COHORT_X is reserved for cohort's own processes")],

  // job
  ["job.backend", "", accepts("cpu_sync")],
  ["job.args", "", accepts([])],
  ["job.checkpoint", "", accepts(undefined)],
  ["job.checkpoint_pickle", "", accepts(undefined)],
  ["job.outer_optimizer", "", accepts(undefined)],
  ["job.dataset_size", "", accepts(0)],
  ["job.dataset_size", "job: { entry: t.ts, dataset_size: 0 }", accepts(0)],
  ["job.dataset_size", "job: { entry: t.ts, dataset_size: -1 }", refuses("expected a number of samples from 0 to 2147483647, got -1")],
  ["job.dataset_size", "job: { entry: t.ts, dataset_size: 2147483647 }", accepts(2_147_483_647)],
  ["job.dataset_size", "job: { entry: t.ts, dataset_size: 2147483648 }", refuses("expected a number of samples from 0 to 2147483647, got 2147483648")],
  ["job.epochs", "", accepts(1)],
  ["job.epochs", "job: { entry: t.ts, epochs: 1 }", accepts(1)],
  ["job.epochs", "job: { entry: t.ts, epochs: 0 }", refuses("expected a number of epochs from 1 to 1000000, got 0")],
  ["job.epochs", "job: { entry: t.ts, epochs: 1000000 }", accepts(1_000_000)],
  ["job.epochs", "job: { entry: t.ts, epochs: 1000001 }", refuses("expected a number of epochs from 1 to 1000000, got 1000001")],
  ["job.epochs", "job: { entry: t.ts, epochs: 1.5 }", refuses("got 1.5")],
  ["job.cadence", "", accepts(8)],
  ["job.cadence", "job: { entry: t.ts, cadence: 1 }", accepts(1)],
  ["job.cadence", "job: { entry: t.ts, cadence: 0 }", refuses("expected a number of steps between averages from 1 to 1000000, got 0")],
  ["job.cadence", "job: { entry: t.ts, cadence: 1000000 }", accepts(1_000_000)],
  ["job.cadence", "job: { entry: t.ts, cadence: 1000001 }", refuses("expected a number of steps between averages from 1 to 1000000, got 1000001")],
  ["job.async_alpha", "", accepts(0.5)],
  ["job.async_alpha", "job: { entry: t.ts, async_alpha: 0 }", accepts(0)],
  ["job.async_alpha", "job: { entry: t.ts, async_alpha: -0.01 }", refuses("expected a fraction from 0 to 1, like 0.5, got -0.01")],
  ["job.async_alpha", "job: { entry: t.ts, async_alpha: 1 }", accepts(1)],
  ["job.async_alpha", "job: { entry: t.ts, async_alpha: 1.01 }", refuses("expected a fraction from 0 to 1, like 0.5, got 1.01")],
  ["job.outer_optimizer.lr", "job: { entry: t.ts, backend: cpu_cadence, outer_optimizer: { kind: diloco } }", accepts(0.7)],
  ["job.outer_optimizer.momentum", "job: { entry: t.ts, backend: cpu_cadence, outer_optimizer: { kind: slowmo } }", accepts(0.9)],
  ["job.outer_optimizer.lr", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, lr: 0 } }", accepts(0)],
  ["job.outer_optimizer.lr", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, lr: -0.01 } }", refuses("expected an outer learning rate from 0 to 10, like 0.7, got -0.01")],
  ["job.outer_optimizer.lr", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, lr: 10 } }", accepts(10)],
  ["job.outer_optimizer.lr", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, lr: 10.01 } }", refuses("expected an outer learning rate from 0 to 10, like 0.7, got 10.01")],
  ["job.outer_optimizer.momentum", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, momentum: 0 } }", accepts(0)],
  ["job.outer_optimizer.momentum", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, momentum: -0.01 } }", refuses("expected a momentum from 0 to 1, like 0.9, got -0.01")],
  ["job.outer_optimizer.momentum", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, momentum: 1 } }", accepts(1)],
  ["job.outer_optimizer.momentum", "job: { entry: t.ts, backend: cpu_async, outer_optimizer: { kind: diloco, momentum: 1.01 } }", refuses("expected a momentum from 0 to 1, like 0.9, got 1.01")],

  // failure_policy: the README's defaults table.
  ["failure_policy.before_formation", "", accepts(new KillAll())],
  ["failure_policy.after_formation.elastic.max_failure", "", accepts(new Percent({ p: 50 }))],
  ["failure_policy.after_formation.elastic.max_failure", policy("after_formation: elastic"), accepts(new Percent({ p: 50 }))],
  ["failure_policy.after_formation.elastic.max_failure", policy("after_formation: { elastic: {} }"), accepts(new Percent({ p: 50 }))],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("none"), accepts(undefined)],
  ["failure_policy.after_formation.elastic.max_failure_base", "", accepts(undefined)],
  ["failure_policy.rules", "", accepts(["member-lost", "repeated-error"])],
  ["failure_policy.rules", policy("after_formation: kill_all"), accepts(undefined)],
  ["failure_policy.grace", "", accepts(5_000)],
  ["failure_policy.heartbeat_timeout", "", accepts(30_000)],
  ["failure_policy.degraded_exit", "", accepts(0)],
  // grace: 0 to a week.
  ["failure_policy.grace", policy("grace: 0ms"), accepts(0)],
  ["failure_policy.grace", policy("grace: 168h"), accepts(week)],
  ["failure_policy.grace", policy("grace: 604800001ms"), refuses(`expected ${durationWords} up to 168h, got "604800001ms"`)],
  ["failure_policy.grace", policy("grace: 0.5ms"), refuses(`expected ${durationWords}, got "0.5ms"`)],
  // heartbeat_timeout: 2 s to a week.
  ["failure_policy.heartbeat_timeout", policy("heartbeat_timeout: 2s"), accepts(2_000)],
  ["failure_policy.heartbeat_timeout", policy("heartbeat_timeout: 1999ms"), refuses(`expected ${durationWords} of at least 2s, got "1999ms"`)],
  ["failure_policy.heartbeat_timeout", policy("heartbeat_timeout: 168h"), accepts(week)],
  ["failure_policy.heartbeat_timeout", policy("heartbeat_timeout: 604800001ms"), refuses(`of at least 2s up to 168h, got "604800001ms"`)],
  // degraded_exit: an exit status.
  ["failure_policy.degraded_exit", policy("degraded_exit: 255"), accepts(255)],
  ["failure_policy.degraded_exit", policy("degraded_exit: 256"), refuses("expected an exit code from 0 to 255, got 256")],
  ["failure_policy.degraded_exit", policy("degraded_exit: -1"), refuses("expected an exit code from 0 to 255, got -1")],
  // kill_all's own grace: absent (the policy's), or 0 to a week.
  ["failure_policy.before_formation.kill_all.grace", policy("before_formation: kill_all"), accepts(undefined)],
  ["failure_policy.before_formation.kill_all.grace", policy("before_formation: { kill_all: {} }"), accepts(undefined)],
  ["failure_policy.before_formation.kill_all.grace", policy("before_formation: { kill_all: { grace: 0s } }"), accepts(0)],
  ["failure_policy.before_formation.kill_all.grace", policy("before_formation: { kill_all: { grace: 168h } }"), accepts(week)],
  ["failure_policy.before_formation.kill_all.grace", policy("before_formation: { kill_all: { grace: 604800001ms } }"), refuses(`up to 168h, got "604800001ms"`)],
  // max_failure: a count 0 to 1000000, or a percentage 0% to 100%.
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("0"), accepts(new Count({ n: 0 }))],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("-1"), refuses(`expected a count ≥ 0, a percentage like "25%", or none, got -1`)],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("1000000"), accepts(new Count({ n: 1_000_000 }))],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("1000001"), refuses("got 1000001")],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("0%"), accepts(new Percent({ p: 0 }))],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("100%"), accepts(new Percent({ p: 100 }))],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("100.5%"), refuses(`got "100.5%"`)],
  ["failure_policy.after_formation.elastic.max_failure", maxFailure("1e-7%"), accepts(new Percent({ p: 1e-7 }))],
  // restart: its defaults, whether named by the word or by an empty mapping.
  ["failure_policy.after_formation", policy("after_formation: restart"), accepts(defaultRestart)],
  ["failure_policy.after_formation", policy("after_formation: { restart: {} }"), accepts(defaultRestart)],
  ["failure_policy.after_formation", policy("after_formation: { restart: }"), accepts(defaultRestart)],
  ["failure_policy.after_formation.restart.backoff", restartWith("backoff: {}"), accepts(new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }))],
  // max_restarts: 0 to 1000.
  ["failure_policy.after_formation.restart.max_restarts", restartWith("max_restarts: 0"), accepts(0)],
  ["failure_policy.after_formation.restart.max_restarts", restartWith("max_restarts: -1"), refuses("expected a whole number of restarts from 0 to 1000, got -1")],
  ["failure_policy.after_formation.restart.max_restarts", restartWith("max_restarts: 1000"), accepts(1_000)],
  ["failure_policy.after_formation.restart.max_restarts", restartWith("max_restarts: 1001"), refuses("expected a whole number of restarts from 0 to 1000, got 1001")],
  // within: above 0, at most a week.
  ["failure_policy.after_formation.restart.within", restartWith("within: 1ms"), accepts(1)],
  ["failure_policy.after_formation.restart.within", restartWith("within: 0ms"), refuses(`expected ${durationWords} above 0ms, got "0ms"`)],
  ["failure_policy.after_formation.restart.within", restartWith("within: 168h"), accepts(week)],
  ["failure_policy.after_formation.restart.within", restartWith("within: 604800001ms"), refuses(`up to 168h, got "604800001ms"`)],
  ["failure_policy.after_formation.restart.scope", restartWith("scope: all"), accepts("all")],
  // backoff.initial: 0 to a week; max never below it (equal is fine), by default 30 s or initial where larger.
  ["failure_policy.after_formation.restart.backoff.initial", backoffWith("initial: 0ms"), accepts(0)],
  ["failure_policy.after_formation.restart.backoff.initial", backoffWith("initial: 168h"), accepts(week)],
  ["failure_policy.after_formation.restart.backoff.initial", backoffWith("initial: 604800001ms"), refuses(`up to 168h, got "604800001ms"`)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 29s"), accepts(30_000)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 30s"), accepts(30_000)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 31s"), accepts(31_000)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 5s, max: 5s"), accepts(5_000)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 5s, max: 4999ms"), refuses(`expected a duration ≥ backoff.initial (5s), got "4999ms"`)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("max: 1s"), accepts(1_000)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("max: 999ms"), refuses(`expected a duration ≥ backoff.initial (1s), got "999ms"`)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("initial: 0ms, max: 0ms"), accepts(0)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("max: 168h"), accepts(week)],
  ["failure_policy.after_formation.restart.backoff.max", backoffWith("max: 604800001ms"), refuses(`up to 168h, got "604800001ms"`)],
  // factor: 1 to 100; jitter: 0 to 1.
  ["failure_policy.after_formation.restart.backoff.factor", backoffWith("factor: 1"), accepts(1)],
  ["failure_policy.after_formation.restart.backoff.factor", backoffWith("factor: 0.99"), refuses("expected a growth factor from 1 to 100, got 0.99")],
  ["failure_policy.after_formation.restart.backoff.factor", backoffWith("factor: 100"), accepts(100)],
  ["failure_policy.after_formation.restart.backoff.factor", backoffWith("factor: 100.01"), refuses("expected a growth factor from 1 to 100, got 100.01")],
  ["failure_policy.after_formation.restart.backoff.jitter", backoffWith("jitter: 0"), accepts(0)],
  ["failure_policy.after_formation.restart.backoff.jitter", backoffWith("jitter: -0.01"), refuses("expected a jitter fraction from 0 to 1, got -0.01")],
  ["failure_policy.after_formation.restart.backoff.jitter", backoffWith("jitter: 1"), accepts(1)],
  ["failure_policy.after_formation.restart.backoff.jitter", backoffWith("jitter: 1.01"), refuses("expected a jitter fraction from 0 to 1, got 1.01")],
  // rules: same_error_on 2 to 1000000; exit codes 0 to 255, a range's ends in order (equal is fine).
  ["failure_policy.rules[0].when.same_error_on", rule("same_error_on: 2"), accepts(2)],
  ["failure_policy.rules[0].when.same_error_on", rule("same_error_on: 1"), refuses("expected a number of ranks from 2 to 1000000, got 1")],
  ["failure_policy.rules[0].when.same_error_on", rule("same_error_on: 1000000"), accepts(1_000_000)],
  ["failure_policy.rules[0].when.same_error_on", rule("same_error_on: 1000001"), refuses("expected a number of ranks from 2 to 1000000, got 1000001")],
  ["failure_policy.rules[0].when.exit_code", rule("exit_code: [0, 255]"), accepts({ in: [0, 255] })],
  ["failure_policy.rules[0].when.exit_code[0]", rule("exit_code: [256]"), refuses("got 256")],
  ["failure_policy.rules[0].when.exit_code[0]", rule("exit_code: [-1]"), refuses("got -1")],
  ["failure_policy.rules[0].when.exit_code", rule(`exit_code: ["5-5"]`), accepts({ in: [5] })],
  ["failure_policy.rules[0].when.exit_code", rule(`exit_code: ["253-255"]`), accepts({ in: [253, 254, 255] })],
  ["failure_policy.rules[0].when.exit_code[0]", rule(`exit_code: ["6-5"]`), refuses(`got "6-5"`)],
  ["failure_policy.rules[0].when.exit_code[0]", rule(`exit_code: ["250-256"]`), refuses(`expected an exit code from 0 to 255, or a range like "1-127", got "250-256"`)],
  ["failure_policy.rules[0].when.exit_code", rule(`exit_code: { not_in: [0, 255] }`), accepts({ not_in: [0, 255] })],
  ["failure_policy.rules[0].when.exit_code.not_in[0]", rule(`exit_code: { not_in: [256] }`), refuses("expected an exit code from 0 to 255, or a range like \"1-127\", got 256")],
  ["failure_policy.rules[0].when.exit_code.in[0]", rule(`exit_code: { in: ["0-256"] }`), refuses(`got "0-256"`)],
  ["failure_policy.rules[0].when.exit_code", rule(`exit_code: { in: [1], not_in: [2] }`), refuses("give one of in or not_in")],
  // Lists in a when hold at least one item.
  ["failure_policy.rules[0].when.exit_code", rule("exit_code: [1]"), accepts({ in: [1] })],
  ["failure_policy.rules[0].when.exit_code", rule("exit_code: []"), refuses("expected at least one exit code, got an empty list")],
  ["failure_policy.rules[0].when.exit_code.not_in", rule("exit_code: { not_in: [] }"), refuses("expected at least one exit code, got an empty list")],
  ["failure_policy.rules[0].when.signal", rule("signal: [SIGTERM]"), accepts(["SIGTERM"])],
  ["failure_policy.rules[0].when.signal", rule("signal: []"), refuses("expected at least one signal name, got an empty list")],
  ["failure_policy.rules[0].when.cause", rule("cause: [oom]"), accepts(["oom"])],
  ["failure_policy.rules[0].when.cause", rule("cause: []"), refuses("expected at least one cause, got an empty list")],
  ["failure_policy.rules[0].when.ranks", rule("ranks: [0]"), accepts(["0"])],
  ["failure_policy.rules[0].when.ranks", rule("ranks: []"), refuses("expected at least one rank, got an empty list")],
  ["failure_policy.rules[0].when.hosts", rule(`hosts: ["spot-*"]`), accepts(["spot-*"])],
  ["failure_policy.rules[0].when.hosts", rule("hosts: []"), refuses("expected at least one host, got an empty list")],
  ["failure_policy.rules[0].then", policy("rules: [{ then: { restart: {} } }]"), accepts(defaultRestart)],
  ["failure_policy.rules[0].then", policy("rules: [{ then: { restart: } }]"), accepts(defaultRestart)],
  ["failure_policy.rules[0].then", policy("rules: [{ then: elastic }]"), accepts(new DropRanks())],
  ["failure_policy.rules[0].then", policy("rules: [{ then: fail }]"), accepts(new FailRun())]
]

const shown = (expected: Expected) => ("accepts" in expected ? `accepts ${JSON.stringify(expected.accepts) ?? "undefined"}` : `refuses: ${expected.refuses}`)

describe("cluster file bounds and defaults", () => {
  test.each(clusterRows.map(([field, yaml, expected]) => [field, yaml === "" ? "(left out)" : yaml, shown(expected), yaml, expected] as const))(
    "%s: %s %s",
    async (field, _label, _shown, yaml, expected) => {
      const decoded = await decode(yaml)
      if ("accepts" in expected) {
        if (decoded._tag === "Left") throw new Error(`refused: ${decoded.left.message}`)
        const read = readers[field]
        if (read === undefined) throw new Error(`no reader for ${field}`)
        expect(read(decoded.right)).toEqual(expected.accepts)
      } else {
        if (decoded._tag === "Right") throw new Error(`accepted: ${JSON.stringify(readers[field]?.(decoded.right))}`)
        // One mistake, at the field, in words that say the bound.
        const lines = decoded.left.message.split("\n")
        expect(lines).toHaveLength(1)
        expect(lines[0]).toStartWith(`cluster.yml: ${field} (line `)
        expect(lines[0]).toContain(expected.refuses)
      }
    }
  )

  test("every field the table can read has a row", () => {
    // A reader no row uses is a field the table forgot.
    const used = new Set(clusterRows.map(([field]) => field))
    expect(Object.keys(readers).filter((field) => !used.has(field))).toEqual([])
  })
})

// ---------------------------------------------------------------------------------------------------------
// The pure helpers: durations, the heartbeat cadence, the network deadlines' scale, the log level.
// ---------------------------------------------------------------------------------------------------------

describe("durations", () => {
  test.each([
    ["0ms", 0],
    ["1ms", 1],
    ["1.5s", 1_500],
    ["0.001s", 1],
    [" 5s ", 5_000],
    ["10m", 600_000],
    ["1h", 3_600_000],
    ["168h", 604_800_000],
    // The largest whole number of milliseconds a double holds exactly; one more is refused.
    ["9007199254740991ms", 9_007_199_254_740_991],
    ["9007199254740992ms", undefined],
    // A fraction of a millisecond is refused, not rounded.
    ["0.5ms", undefined],
    ["1.0005s", undefined],
    ["0.0001s", undefined],
    ["-1s", undefined],
    ["5", undefined],
    ["5 s", undefined],
    ["5d", undefined],
    ["", undefined]
  ] as const)("parseDuration(%p) is %p", (text, ms) => {
    expect(parseDuration(text)).toBe(ms)
  })

  test.each([
    [0, "0ms"],
    [1, "1ms"],
    [999, "999ms"],
    [1_000, "1s"],
    [1_001, "1001ms"],
    [59_000, "59s"],
    [60_000, "1m"],
    [90_000, "90s"],
    [3_599_999, "3599999ms"],
    [3_600_000, "1h"],
    [5_400_000, "90m"],
    [604_800_000, "168h"]
  ] as const)("formatDuration(%p) is %p", (ms, text) => {
    expect(formatDuration(ms)).toBe(text)
  })
})

describe("heartbeat cadence: a sixth of the timeout, from 1 s to 5 s", () => {
  test.each([
    [2_000, 1_000],
    [6_000, 1_000],
    [6_003, 1_001],
    [6_006, 1_001],
    [12_000, 2_000],
    [29_994, 4_999],
    [30_000, 5_000],
    [30_006, 5_000],
    [604_800_000, 5_000]
  ] as const)("beatEveryMs(%p) is %p", (timeout, beat) => {
    expect(beatEveryMs(timeout)).toBe(beat)
  })
})

describe("COHORT_NET_TIMEOUT_SCALE: a finite number ≥ 0.1, 1 when unset", () => {
  test.each([
    [undefined, 1],
    ["", 1],
    ["  ", 1],
    ["0.1", 0.1],
    ["1", 1],
    ["2.5", 2.5],
    ["1e3", 1_000]
  ] as const)("%p is %p", (value, scale) => {
    expect(netTimeoutScale(value === undefined ? {} : { COHORT_NET_TIMEOUT_SCALE: value })).toBe(scale)
  })

  test.each(["0.0999", "0.09", "0", "-1", "Infinity", "NaN", "fast"])("%p is refused, naming the variable", (value) => {
    expect(() => netTimeoutScale({ COHORT_NET_TIMEOUT_SCALE: value })).toThrow(new NetTimeoutScaleError({ value }))
    expect(new NetTimeoutScaleError({ value }).message).toStartWith("COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1")
  })

  test.each([
    [5_000, 0.1, 500],
    [1, 0.1, 1],
    [3, 0.5, 2],
    [5_000, 1, 5_000],
    [10_000, 1.5, 15_000]
  ] as const)("scaled(%p, %p) is %p: rounded up to whole milliseconds", (ms, scale, result) => {
    expect(scaled(ms, scale)).toBe(result)
  })

  test("the deadlines before scaling", () => {
    expect(deadlines).toEqual({ magicMs: 5_000, httpRequestMs: 5_000, handshakeMs: 10_000, rendezvousIdMs: 30_000, groupFormMs: 30_000 })
  })
})

describe("COHORT_LOG_LEVEL: unset asks for nothing; a relay says warnings unless turned to debug or errors", () => {
  test("unset or blank: no level, and the caller's fallback", () => {
    expect(requestedLogLevel({})).toBeUndefined()
    expect(requestedLogLevel({ COHORT_LOG_LEVEL: "" })).toBeUndefined()
    expect(requestedLogLevelOr(LogLevel.Info, {})._tag).toBe("Info")
  })

  test.each([
    [undefined, "Warning"],
    [LogLevel.Trace, "Trace"],
    [LogLevel.Debug, "Debug"],
    [LogLevel.Info, "Warning"],
    [LogLevel.Warning, "Warning"],
    [LogLevel.Error, "Error"],
    [LogLevel.Fatal, "Fatal"]
  ] as const)("relayLogLevel(%p) is %p", (requested, label) => {
    expect(relayLogLevel(requested)._tag).toBe(label)
  })
})

describe("env keys cohort keeps for itself", () => {
  test.each([
    ["COHORT_SALT", "COHORT_SALT is reserved for cohort's own processes"],
    ["COHORT_", "COHORT_ is reserved for cohort's own processes"],
    ["COHORT", undefined],
    ["CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:` of the worker; cohort sets it for each rank"],
    ["CUDA_VISIBLE_DEVICES_X", undefined],
    ["OMP_NUM_THREADS", undefined]
  ] as const)("%p: %p", (key, reason) => {
    expect(reservedReason(key)).toBe(reason)
  })
})
