/**
 * Every message the loader gives for a mistake in `workers` (each worker's
 * host, devices, path, tunnel, agent, ssh and flodl's worker keys) or in
 * `controller`, typed out whole: the words, the YAML path, the line and the
 * column. They were collected from the loader before these sections were
 * decoded by Schemas, read over by hand, and are kept byte for byte; the last
 * table holds files with several mistakes in one worker, each of which is
 * now said at once.
 *
 * Pure parsing, no processes: this file is in the fast tier.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { type ClusterConfig, parseCluster } from "../src/config/ClusterConfig.ts"

const J = "job: { entry: t.ts }"
/** A file with one worker, written as given. */
const W = (worker: string) => `workers:\n  - ${worker}\n${J}\n`
/** A file with the controller section given, and a worker of 2 CPU ranks. */
const C = (controller: string) => `controller: ${controller}\nworkers: [{ host: a, devices: 2 }]\n${J}\n`

const quiet = Logger.minimumLogLevel(LogLevel.None)
const load = (yaml: string) => Effect.runPromise(parseCluster(yaml, "cluster.yml").pipe(Effect.either, Effect.provide(quiet)))

/** Every message, one per mistake, in document order; a file that loads is a failure of the row. */
const messages = async (yaml: string): Promise<ReadonlyArray<string>> => {
  const loaded = await load(yaml)
  if (loaded._tag === "Right") throw new Error(`accepted: ${JSON.stringify(loaded.right.workers)}`)
  return loaded.left.message.split("\n")
}

type Row = readonly [name: string, yaml: string, says: ReadonlyArray<string>]

const oneMistake: ReadonlyArray<Row> = [
  ["workers null", `workers:\n${J}\n`, [
    "cluster.yml: workers (line 1, col 9): expected a list of workers, each with host and devices"
  ]],
  ["workers ~", `workers: ~\n${J}\n`, [
    "cluster.yml: workers (line 1, col 10): expected a list of workers, each with host and devices"
  ]],
  ["workers number", `workers: 5\n${J}\n`, [
    "cluster.yml: workers (line 1, col 10): expected a list of workers, each with host and devices, got 5"
  ]],
  ["workers string", `workers: many\n${J}\n`, [
    `cluster.yml: workers (line 1, col 10): expected a list of workers, each with host and devices, got "many"`
  ]],
  ["workers alias", `x: &a [1]\nworkers: *a\n${J}\n`, [
    `cluster.yml: (top level) (line 1, col 1): unknown key "x"; known keys: name, controller, workers, env, job, failure_policy`,
    "cluster.yml: workers (line 2, col 10): expected a list of workers, each with host and devices, got something else"
  ]],
  ["item number", `workers: [5]\n${J}\n`, [
    "cluster.yml: workers[0] (line 1, col 11): expected a mapping with keys host, devices, path, env, ssh, tunnel, agent, got 5"
  ]],
  ["item list", `workers: [[1]]\n${J}\n`, [
    "cluster.yml: workers[0] (line 1, col 11): expected a mapping with keys host, devices, path, env, ssh, tunnel, agent, got a list"
  ]],
  ["item string", `workers: [a]\n${J}\n`, [
    `cluster.yml: workers[0] (line 1, col 11): expected a mapping with keys host, devices, path, env, ssh, tunnel, agent, got "a"`
  ]],
  ["host number", W("{ host: 5, devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got 5"
  ]],
  ["host empty", W(`{ host: "", devices: 2 }`), [
    `cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got ""`
  ]],
  ["host null", W("{ host: , devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got nothing"
  ]],
  ["host list", W("{ host: [a], devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got a list"
  ]],
  ["host map", W("{ host: { a: 1 }, devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got a mapping"
  ]],
  ["host bool", W("{ host: true, devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got true"
  ]],
  ["devices null", W("{ host: a, devices: }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all", got nothing`
  ]],
  ["devices ~", W("{ host: a, devices: ~ }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all", got nothing`
  ]],
  ["devices .inf", W("{ host: a, devices: .inf }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got null`
  ]],
  ["devices .nan", W("{ host: a, devices: .nan }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got null`
  ]],
  ["devices 1e3", W("{ host: a, devices: 1e3 }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 1000`
  ]],
  ["devices ALL", W("{ host: a, devices: ALL }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got "ALL"`
  ]],
  ["devices '4'", W(`{ host: a, devices: "4" }`), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got "4"`
  ]],
  ["devices empty string", W(`{ host: a, devices: "" }`), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got ""`
  ]],
  ["devices true", W("{ host: a, devices: true }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got true`
  ]],
  ["devices map", W("{ host: a, devices: { a: 1 } }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got a mapping`
  ]],
  ["devices [0,1,0,1]", W("{ host: a, devices: [0, 1, 1, 0] }"), [
    "cluster.yml: workers[0].devices (line 2, col 25): device 1 is listed twice"
  ]],
  ["devices [0.5]", W("{ host: a, devices: [0.5] }"), [
    "cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got 0.5"
  ]],
  ["devices [a]", W("{ host: a, devices: [a] }"), [
    `cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got "a"`
  ]],
  ["devices [[0]]", W("{ host: a, devices: [[0]] }"), [
    "cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got a list"
  ]],
  ["devices [~]", W("{ host: a, devices: [~] }"), [
    "cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got nothing"
  ]],
  ["devices ['0']", W(`{ host: a, devices: ["0"] }`), [
    `cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got "0"`
  ]],
  ["devices [0, x, 0]", W("{ host: a, devices: [0, x, 0] }"), [
    `cluster.yml: workers[0].devices[1] (line 2, col 29): expected a GPU index from 0 to 255, got "x"`
  ]],
  ["devices alias", `x: &d 3\nworkers:\n  - { host: a, devices: *d }\n${J}\n`, [
    `cluster.yml: (top level) (line 1, col 1): unknown key "x"; known keys: name, controller, workers, env, job, failure_policy`,
    `cluster.yml: workers[0].devices (line 3, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got something else`
  ]],
  ["devices item alias", `x: &d 3\nworkers:\n  - { host: a, devices: [*d] }\n${J}\n`, [
    `cluster.yml: (top level) (line 1, col 1): unknown key "x"; known keys: name, controller, workers, env, job, failure_policy`,
    "cluster.yml: workers[0].devices[0] (line 3, col 26): expected a GPU index from 0 to 255, got something else"
  ]],
  ["devices block list bad", `workers:\n  - host: a\n    devices:\n      - 1\n      - 999\n${J}\n`, [
    "cluster.yml: workers[0].devices[1] (line 5, col 9): expected a GPU index from 0 to 255, got 999"
  ]],
  ["path number", W("{ host: a, devices: 2, path: 5 }"), [
    "cluster.yml: workers[0].path (line 2, col 34): expected the project checkout's path on that host, got 5"
  ]],
  ["path empty", W(`{ host: a, devices: 2, path: "" }`), [
    `cluster.yml: workers[0].path (line 2, col 34): expected the project checkout's path on that host, got ""`
  ]],
  ["path list", W("{ host: a, devices: 2, path: [x] }"), [
    "cluster.yml: workers[0].path (line 2, col 34): expected the project checkout's path on that host, got a list"
  ]],
  ["tunnel 1", W("{ host: a, devices: 2, tunnel: 1 }"), [
    "cluster.yml: workers[0].tunnel (line 2, col 36): expected true or false, got 1"
  ]],
  ["tunnel 'true'", W(`{ host: a, devices: 2, tunnel: "true" }`), [
    `cluster.yml: workers[0].tunnel (line 2, col 36): expected true or false, got "true"`
  ]],
  ["agent bogus", W("{ host: a, devices: 2, agent: bogus }"), [
    `cluster.yml: workers[0].agent (line 2, col 35): expected one of "ssh", "self", got "bogus"`
  ]],
  ["agent 5", W("{ host: a, devices: 2, agent: 5 }"), [
    `cluster.yml: workers[0].agent (line 2, col 35): expected one of "ssh", "self", got 5`
  ]],
  ["agent list", W("{ host: a, devices: 2, agent: [ssh] }"), [
    `cluster.yml: workers[0].agent (line 2, col 35): expected one of "ssh", "self", got a list`
  ]],
  ["env number", W("{ host: a, devices: 2, env: 5 }"), [
    "cluster.yml: workers[0].env (line 2, col 33): expected a mapping of variable names to values, got 5"
  ]],
  ["env list", W("{ host: a, devices: 2, env: [a] }"), [
    "cluster.yml: workers[0].env (line 2, col 33): expected a mapping of variable names to values, got a list"
  ]],
  ["typo devcies", W("{ host: a, devcies: 2 }"), [
    `cluster.yml: workers[0].devices (line 2, col 5): expected a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all", got nothing`,
    `cluster.yml: workers[0] (line 2, col 16): unknown key "devcies" (did you mean "devices"?); known keys: host, devices, path, env, ssh, tunnel, agent`
  ]],
  ["typo hots", W("{ hots: a, devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 5): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got nothing",
    `cluster.yml: workers[0] (line 2, col 7): unknown key "hots" (did you mean "host"?); known keys: host, devices, path, env, ssh, tunnel, agent`
  ]],
  ["non-plain key", W("{ host: a, devices: 2, [x]: 1 }"), [
    "cluster.yml: workers[0] (line 2, col 28): keys must be plain words"
  ]],
  ["three hosts", `workers:\n  - { host: a, devices: 2 }\n  - { host: b, devices: 1 }\n  - { host: a, devices: 1 }\n  - { host: b, devices: 1 }\n${J}\n`, [
    `cluster.yml: workers[2].host (line 4, col 13): host "a" is already workers[0]: give each host one entry`,
    `cluster.yml: workers[3].host (line 5, col 13): host "b" is already workers[1]: give each host one entry`
  ]],
  ["ssh number", W("{ host: a, devices: 2, ssh: 5 }"), [
    "cluster.yml: workers[0].ssh (line 2, col 33): expected a mapping with keys target, user, port, identity_file, options, got 5"
  ]],
  ["ssh list", W("{ host: a, devices: 2, ssh: [a] }"), [
    "cluster.yml: workers[0].ssh (line 2, col 33): expected a mapping with keys target, user, port, identity_file, options, got a list"
  ]],
  ["ssh string", W("{ host: a, devices: 2, ssh: yes }"), [
    `cluster.yml: workers[0].ssh (line 2, col 33): expected a mapping with keys target, user, port, identity_file, options, got "yes"`
  ]],
  ["ssh target number", W("{ host: a, devices: 2, ssh: { target: 5 } }"), [
    "cluster.yml: workers[0].ssh.target (line 2, col 43): expected a host name or address, got 5"
  ]],
  ["ssh target empty", W(`{ host: a, devices: 2, ssh: { target: "" } }`), [
    `cluster.yml: workers[0].ssh.target (line 2, col 43): expected a host name or address, got ""`
  ]],
  ["ssh user list", W("{ host: a, devices: 2, ssh: { user: [u] } }"), [
    "cluster.yml: workers[0].ssh.user (line 2, col 41): expected a user name, got a list"
  ]],
  ["ssh port '22'", W(`{ host: a, devices: 2, ssh: { port: "22" } }`), [
    `cluster.yml: workers[0].ssh.port (line 2, col 41): expected an ssh port from 1 to 65535, got "22"`
  ]],
  ["ssh port 2.5", W("{ host: a, devices: 2, ssh: { port: 2.5 } }"), [
    "cluster.yml: workers[0].ssh.port (line 2, col 41): expected an ssh port from 1 to 65535, got 2.5"
  ]],
  ["ssh identity_file number", W("{ host: a, devices: 2, ssh: { identity_file: 5 } }"), [
    "cluster.yml: workers[0].ssh.identity_file (line 2, col 50): expected a path to a private key, got 5"
  ]],
  ["ssh unknown key", W("{ host: a, devices: 2, ssh: { prot: 22 } }"), [
    `cluster.yml: workers[0].ssh (line 2, col 35): unknown key "prot" (did you mean "port"?); known keys: target, user, port, identity_file, options`
  ]],
  ["ssh unknown key far", W("{ host: a, devices: 2, ssh: { colour: red } }"), [
    `cluster.yml: workers[0].ssh (line 2, col 35): unknown key "colour"; known keys: target, user, port, identity_file, options`
  ]],
  ["ssh options number", W("{ host: a, devices: 2, ssh: { options: 5 } }"), [
    `cluster.yml: workers[0].ssh.options (line 2, col 44): expected a list of ssh options, like ["StrictHostKeyChecking=no"], got 5`
  ]],
  ["ssh options string", W("{ host: a, devices: 2, ssh: { options: x } }"), [
    `cluster.yml: workers[0].ssh.options (line 2, col 44): expected a list of ssh options, like ["StrictHostKeyChecking=no"], got "x"`
  ]],
  ["ssh options map", W("{ host: a, devices: 2, ssh: { options: { a: 1 } } }"), [
    `cluster.yml: workers[0].ssh.options (line 2, col 44): expected a list of ssh options, like ["StrictHostKeyChecking=no"], got a mapping`
  ]],
  ["ssh options [5]", W("{ host: a, devices: 2, ssh: { options: [5] } }"), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got 5`
  ]],
  ["ssh options ['']", W(`{ host: a, devices: 2, ssh: { options: [""] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got ""`
  ]],
  ["ssh options [~]", W(`{ host: a, devices: 2, ssh: { options: [~] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got nothing`
  ]],
  // `say "hi"` would be a `Key Value` setting (ssh_config's other form, ssh's to judge): a word opening with a quote is none.
  ["ssh options quote in word", W(`{ host: a, devices: 2, ssh: { options: ['"say" hi'] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got ""say" hi"`
  ]],
  ["ssh options trailing -p", W(`{ host: a, devices: 2, ssh: { options: ["-p"] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): ssh's -p takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`
  ]],
  ["ssh options two bad", W(`{ host: a, devices: 2, ssh: { options: ["bad", "worse", "-o"] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "bad"`,
    `cluster.yml: workers[0].ssh.options[1] (line 2, col 52): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "worse"`,
    `cluster.yml: workers[0].ssh.options[2] (line 2, col 61): ssh's -o takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`
  ]],
  ["ssh many bad", W(`{ host: a, devices: 2, ssh: { target: 5, user: 6, port: 0, identity_file: [], options: 7, x: 1 } }`), [
    "cluster.yml: workers[0].ssh.target (line 2, col 43): expected a host name or address, got 5",
    "cluster.yml: workers[0].ssh.user (line 2, col 52): expected a user name, got 6",
    "cluster.yml: workers[0].ssh.port (line 2, col 61): expected an ssh port from 1 to 65535, got 0",
    "cluster.yml: workers[0].ssh.identity_file (line 2, col 79): expected a path to a private key, got a list",
    `cluster.yml: workers[0].ssh.options (line 2, col 92): expected a list of ssh options, like ["StrictHostKeyChecking=no"], got 7`,
    `cluster.yml: workers[0].ssh (line 2, col 95): unknown key "x"; known keys: target, user, port, identity_file, options`
  ]],
  ["local_devices bad", W("{ host: a, local_devices: 300 }"), [
    `cluster.yml: workers[0].local_devices (line 2, col 31): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 300`
  ]],
  ["flodl-only worker keys beside a mistake", W("{ host: a, devices: 2, arch: cu128, data_path: /d, docker: cuda, gpu_ram_share: 0.5, gpus: 2 }"), [
    `cluster.yml: workers[0] (line 2, col 90): unknown key "gpus"; known keys: host, devices, path, env, ssh, tunnel, agent`
  ]],
  ["local_devices and devices", W("{ host: a, devices: 2, local_devices: 3 }"), [
    "cluster.yml: workers[0].local_devices (line 2, col 28): local_devices is flodl's name for devices, which is given too: keep one of them"
  ]],
  ["nccl number", W("{ host: a, devices: 2, nccl_socket_ifname: 5 }"), [
    "cluster.yml: workers[0].nccl_socket_ifname (line 2, col 48): expected a network interface name, like eth0, got 5"
  ]],
  ["nccl empty", W(`{ host: a, devices: 2, nccl_socket_ifname: "" }`), [
    `cluster.yml: workers[0].nccl_socket_ifname (line 2, col 48): expected a network interface name, like eth0, got ""`
  ]],
  ["nccl conflict", W("{ host: a, devices: 2, nccl_socket_ifname: eth0, env: { NCCL_SOCKET_IFNAME: ib0 } }"), [
    "cluster.yml: workers[0].nccl_socket_ifname (line 2, col 28): env sets NCCL_SOCKET_IFNAME to ib0 and nccl_socket_ifname says eth0: keep one of them"
  ]],
  ["worker path and tunnel bad", W("{ host: a, devices: 2, path: 6, tunnel: 7, agent: x }"), [
    "cluster.yml: workers[0].path (line 2, col 34): expected the project checkout's path on that host, got 6",
    "cluster.yml: workers[0].tunnel (line 2, col 45): expected true or false, got 7",
    `cluster.yml: workers[0].agent (line 2, col 55): expected one of "ssh", "self", got "x"`
  ]],
  ["worker bad path + join min_ranks", `controller: { join: { min_ranks: 2 } }\nworkers:\n  - { host: a, devices: 2, path: 5 }\n${J}\n`, [
    "cluster.yml: workers[0].path (line 3, col 34): expected the project checkout's path on that host, got 5"
  ]],
  ["controller number", C("5"), [
    "cluster.yml: controller (line 1, col 13): expected a mapping with keys host, port, join, encrypt, got 5"
  ]],
  ["controller list", C("[a]"), [
    "cluster.yml: controller (line 1, col 13): expected a mapping with keys host, port, join, encrypt, got a list"
  ]],
  ["controller string", C("here"), [
    `cluster.yml: controller (line 1, col 13): expected a mapping with keys host, port, join, encrypt, got "here"`
  ]],
  ["controller host number", C("{ host: 5 }"), [
    "cluster.yml: controller.host (line 1, col 21): expected the address workers dial, like 127.0.0.1, got 5"
  ]],
  ["controller host empty", C(`{ host: "" }`), [
    `cluster.yml: controller.host (line 1, col 21): expected the address workers dial, like 127.0.0.1, got ""`
  ]],
  ["controller host list", C("{ host: [a] }"), [
    "cluster.yml: controller.host (line 1, col 21): expected the address workers dial, like 127.0.0.1, got a list"
  ]],
  ["controller port '80'", C(`{ port: "80" }`), [
    `cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got "80"`
  ]],
  ["controller port 1.5", C("{ port: 1.5 }"), [
    "cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got 1.5"
  ]],
  ["controller port .inf", C("{ port: .inf }"), [
    "cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got null"
  ]],
  ["controller port list", C("{ port: [1] }"), [
    "cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got a list"
  ]],
  ["controller encrypt 1", C("{ encrypt: 1 }"), [
    "cluster.yml: controller.encrypt (line 1, col 24): expected true or false, got 1"
  ]],
  ["controller encrypt 'true'", C(`{ encrypt: "true" }`), [
    `cluster.yml: controller.encrypt (line 1, col 24): expected true or false, got "true"`
  ]],
  ["controller unknown key far", C("{ colour: red }"), [
    `cluster.yml: controller (line 1, col 15): unknown key "colour"; known keys: host, port, join, encrypt`
  ]],
  ["controller non-plain key", C("{ [x]: 1 }"), [
    "cluster.yml: controller (line 1, col 15): keys must be plain words"
  ]],
  ["controller host bad + join bad", C("{ host: 5, port: x, encrypt: 2, join: { min_ranks: 0 }, bogus: 1 }"), [
    "cluster.yml: controller.host (line 1, col 21): expected the address workers dial, like 127.0.0.1, got 5",
    `cluster.yml: controller.port (line 1, col 30): expected a port from 0 to 65535 (0 picks a free one), got "x"`,
    "cluster.yml: controller.encrypt (line 1, col 42): expected true or false, got 2",
    "cluster.yml: controller.join.min_ranks (line 1, col 64): expected a number of ranks from 1 to 1000000, got 0",
    `cluster.yml: controller (line 1, col 69): unknown key "bogus"; known keys: host, port, join, encrypt`
  ]],
  ["controller join not a mapping", C("{ join: 5 }"), [
    "cluster.yml: controller.join (line 1, col 21): expected a mapping with keys min_ranks, target_ranks, timeout, max_timeout, open_admission, start, after_formation, max_ranks, got 5"
  ]],
  ["controller join flodl secs bad", C("{ join: { join_timeout_secs: 0 } }"), [
    "cluster.yml: controller.join.join_timeout_secs (line 1, col 42): expected a whole number of seconds from 1 to 604800, got 0"
  ]],
  ["controller join flodl secs string", C("{ join: { join_timeout_secs: soon } }"), [
    `cluster.yml: controller.join.join_timeout_secs (line 1, col 42): expected a whole number of seconds from 1 to 604800, got "soon"`
  ]],
  ["controller join fdl-cli seconds string", C("{ join: { join_timeout: soon } }"), [
    `cluster.yml: controller.join.join_timeout (line 1, col 37): expected a whole number of seconds from 1 to 604800, got "soon"`
  ]],
  ["controller join fdl-cli and flodl's launcher names both", C("{ join: { max_join_timeout_secs: 90, max_join_timeout: 90 } }"), [
    "cluster.yml: controller.join.max_join_timeout (line 1, col 50): max_join_timeout and max_join_timeout_secs both name max_timeout: keep one of them"
  ]],
  ["controller flodl-only keys beside a mistake", C("{ path: /opt/flodl, docker: cuda, arch: cu128, data_path: /d, bogus: 1 }"), [
    `cluster.yml: controller (line 1, col 75): unknown key "bogus"; known keys: host, port, join, encrypt`
  ]],
  ["controller join tunnel_only not false", C("{ join: { tunnel_only: 1 } }"), [
    "cluster.yml: controller.join.tunnel_only (line 1, col 23): tunnel_only is flodl's (the port bound to loopback only, for walk-ins that come through ssh forwards): cohort takes no walk-ins, and binds loopback only when every remote worker has tunnel: true; give them that and remove tunnel_only"
  ]],
  ["controller join flodl both", C("{ join: { min_rank_start: 2, min_ranks: 2 } }"), [
    "cluster.yml: controller.join.min_rank_start (line 1, col 23): min_rank_start is flodl's name for min_ranks, which is given too: keep one of them"
  ]],
  ["controller number + growth command", `controller: 5\nworkers: [{ host: a, devices: 2 }]\njob: { command: [python3, x.py] }\n`, [
    "cluster.yml: controller (line 1, col 13): expected a mapping with keys host, port, join, encrypt, got 5"
  ]],
  ["controller bad host + growth command", `controller: { host: 5, join: { after_formation: accept } }\nworkers: [{ host: a, devices: 2 }]\njob: { command: [python3, x.py] }\n`, [
    "cluster.yml: controller.host (line 1, col 21): expected the address workers dial, like 127.0.0.1, got 5",
    "cluster.yml: controller.join.after_formation (line 1, col 49): a plain command job (torchrun-style) has a fixed world: growth needs an entry job, or a command that uses the Python client (with job.dataset_size: N, or --set job.dataset_size=N on the command line: the samples an epoch covers), or after_formation: reject"
  ]],
  // A key that is no plain word is said where a mapping was meant; elsewhere the mapping is what is wrong.
  // A mistake in how a worker is reached leaves its ranks counted: no message about the join window.
  ["ssh non-plain key", W("{ host: a, devices: 2, ssh: { [x]: 1 } }"), [
    "cluster.yml: workers[0].ssh (line 2, col 35): keys must be plain words"
  ]],
  ["env non-plain key", W("{ host: a, devices: 2, env: { [x]: 1 } }"), [
    `cluster.yml: workers[0].env. (line 2, col 35): "" is not a valid variable name (letters, digits and _, not starting with a digit)`
  ]],
  ["join non-plain key", C("{ join: { [x]: 1 } }"), [
    "cluster.yml: controller.join (line 1, col 23): keys must be plain words"
  ]],
  ["join non-plain key + bad port", C("{ port: x, join: { [x]: 1 } }"), [
    `cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got "x"`,
    "cluster.yml: controller.join (line 1, col 32): keys must be plain words"
  ]],
  ["ssh non-plain key + bad path", W("{ host: a, devices: 2, path: 5, ssh: { [x]: 1 } }"), [
    "cluster.yml: workers[0].path (line 2, col 34): expected the project checkout's path on that host, got 5",
    "cluster.yml: workers[0].ssh (line 2, col 44): keys must be plain words"
  ]],
  ["devices non-plain map", W("{ host: a, devices: { [x]: 1 } }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got a mapping`
  ]],
  ["host non-plain map", W("{ host: { [x]: 1 }, devices: 2 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got a mapping"
  ]],
  ["ssh option non-plain map", W("{ host: a, devices: 2, ssh: { options: [{ [x]: 1 }] } }"), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got a mapping`
  ]],
  ["controller port non-plain map", C("{ port: { [x]: 1 } }"), [
    "cluster.yml: controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got a mapping"
  ]],
  ["worker non-plain key + bad host", W("{ host: 5, devices: 2, [x]: 1 }"), [
    "cluster.yml: workers[0] (line 2, col 28): keys must be plain words"
  ]],
  ["env bad + min_ranks", `controller: { join: { min_ranks: 2 } }\nworkers:\n  - { host: a, devices: 2, env: 5 }\n${J}\n`, [
    "cluster.yml: workers[0].env (line 3, col 33): expected a mapping of variable names to values, got 5"
  ]],
  ["path bad + min_ranks", `controller: { join: { min_ranks: 2 } }\nworkers:\n  - { host: a, devices: 2, path: 5 }\n  - { host: b, devices: 1, ssh: { port: 0 } }\n${J}\n`, [
    "cluster.yml: workers[0].path (line 3, col 34): expected the project checkout's path on that host, got 5",
    "cluster.yml: workers[1].ssh.port (line 4, col 41): expected an ssh port from 1 to 65535, got 0"
  ]]
]

/** Several mistakes in one section: every one is said, each as it is said alone. */
const severalMistakes: ReadonlyArray<Row> = [
  ["item null flow", `workers: [null]\n${J}\n`, [
    "cluster.yml: workers[0].host (line 1, col 10): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got nothing",
    `cluster.yml: workers[0].devices (line 1, col 10): expected a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all", got nothing`
  ]],
  ["item null block", `workers:\n  -\n  - { host: b, devices: 1 }\n${J}\n`, [
    "cluster.yml: workers[0].host (line 2, col 3): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got nothing",
    `cluster.yml: workers[0].devices (line 2, col 3): expected a devices entry: a number of CPU ranks, GPU indices like [0, 1], or "all", got nothing`
  ]],
  ["devices [-1, 300]", W("{ host: a, devices: [-1, 300] }"), [
    "cluster.yml: workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got -1",
    "cluster.yml: workers[0].devices[1] (line 2, col 30): expected a GPU index from 0 to 255, got 300"
  ]],
  ["ssh options bad then 5", W(`{ host: a, devices: 2, ssh: { options: ["bad", 5, "worse"] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "bad"`,
    `cluster.yml: workers[0].ssh.options[1] (line 2, col 52): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got 5`,
    `cluster.yml: workers[0].ssh.options[2] (line 2, col 55): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "worse"`
  ]],
  ["ssh options 5 then -o", W(`{ host: a, devices: 2, ssh: { options: [5, "-o"] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got 5`,
    `cluster.yml: workers[0].ssh.options[1] (line 2, col 48): ssh's -o takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`
  ]],
  ["ssh options [5, 6]", W(`{ host: a, devices: 2, ssh: { options: [5, 6] } }`), [
    `cluster.yml: workers[0].ssh.options[0] (line 2, col 45): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got 5`,
    `cluster.yml: workers[0].ssh.options[1] (line 2, col 48): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got 6`
  ]],
  ["worker many bad", W("{ host: 5, devices: -1, path: 6, tunnel: 7, agent: 8, ssh: { port: 0 }, env: 9, bogus: 1 }"), [
    "cluster.yml: workers[0].host (line 2, col 13): expected a host name (the worker's name, and its ssh target unless ssh.target says otherwise), got 5",
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got -1`,
    "cluster.yml: workers[0].path (line 2, col 35): expected the project checkout's path on that host, got 6",
    "cluster.yml: workers[0].tunnel (line 2, col 46): expected true or false, got 7",
    `cluster.yml: workers[0].agent (line 2, col 56): expected one of "ssh", "self", got 8`,
    "cluster.yml: workers[0].ssh.port (line 2, col 72): expected an ssh port from 1 to 65535, got 0",
    "cluster.yml: workers[0].env (line 2, col 82): expected a mapping of variable names to values, got 9",
    `cluster.yml: workers[0] (line 2, col 85): unknown key "bogus"; known keys: host, devices, path, env, ssh, tunnel, agent`
  ]],
  ["worker host ok devices bad rest bad", W("{ host: a, devices: -1, path: 6, tunnel: 7 }"), [
    `cluster.yml: workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got -1`,
    "cluster.yml: workers[0].path (line 2, col 35): expected the project checkout's path on that host, got 6",
    "cluster.yml: workers[0].tunnel (line 2, col 46): expected true or false, got 7"
  ]],
  ["block controller", `controller:\n  host: 5\n  port: 70000\n  encrypt: maybe\nworkers:\n  - host: a\n    devices: 300\n    ssh:\n      port: 0\n      options:\n        - "-o"\n${J}\n`, [
    "cluster.yml: controller.host (line 2, col 9): expected the address workers dial, like 127.0.0.1, got 5",
    "cluster.yml: controller.port (line 3, col 9): expected a port from 0 to 65535 (0 picks a free one), got 70000",
    `cluster.yml: controller.encrypt (line 4, col 12): expected true or false, got "maybe"`,
    `cluster.yml: workers[0].devices (line 7, col 14): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 300`,
    "cluster.yml: workers[0].ssh.port (line 9, col 13): expected an ssh port from 1 to 65535, got 0",
    `cluster.yml: workers[0].ssh.options[0] (line 11, col 11): ssh's -o takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`
  ]]
]

describe("workers and controller: each mistake's whole message", () => {
  test.each(oneMistake)("%s", async (_name, yaml, says) => {
    expect(await messages(yaml)).toEqual(says)
  })
})

describe("workers and controller: several mistakes in one worker are said at once", () => {
  test.each(severalMistakes)("%s", async (_name, yaml, says) => {
    expect(await messages(yaml)).toEqual(says)
  })
})

const accepted = async (yaml: string): Promise<ClusterConfig> => {
  const loaded = await load(yaml)
  if (loaded._tag === "Left") throw new Error(`refused: ${loaded.left.message}`)
  return loaded.right
}

describe("workers and controller: what a key written with nothing, and ssh's options, read as", () => {
  test("a key written with nothing takes its default", async () => {
    expect((await accepted(W("{ host: a, devices: 2, path: , ssh: , tunnel: , agent: }"))).workers).toEqual([
      { host: "a", devices: { _tag: "Count", count: 2 }, path: ".", env: {}, ssh: undefined, agent: undefined, tunnel: false }
    ])
    expect((await accepted(C("{ host: , port: , encrypt: }"))).controller).toMatchObject({ host: "127.0.0.1", port: 0, encrypt: false })
    expect((await accepted(C(""))).controller).toMatchObject({ host: "127.0.0.1", port: 0, encrypt: false, join: { minRanks: 2, targetRanks: 2 } })
  })

  test("ssh: settings become -o options; flags, and the word after a flag that takes one, pass as written", async () => {
    const options = `["StrictHostKeyChecking=no", " A = b ", "-4", "-o", "X=y", "-p", "22", "-oK=v", "-J", "jump", "-o", "-o", "Y=z"]`
    const { workers } = await accepted(W(`{ host: a, devices: [3, 1], ssh: { target: h.example, user: u, port: 2222, identity_file: ~/.ssh/k, options: ${options} } }`))
    expect(workers[0]!.devices).toEqual({ _tag: "Indices", indices: [3, 1] })
    expect(workers[0]!.ssh).toEqual({
      target: "h.example",
      user: "u",
      port: 2222,
      identityFile: "~/.ssh/k",
      options: ["-o", "StrictHostKeyChecking=no", "-o", "A = b", "-4", "-o", "X=y", "-p", "22", "-oK=v", "-J", "jump", "-o", "-o", "Y=z"]
    })
  })
})
