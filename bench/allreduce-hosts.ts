/**
 * Small all-reduces across hosts: 2 namespace hosts × 2 CPU ranks (test/support/netns.ts: a bridge, an sshd
 * per host, the launcher in the root namespace) running bench/allreduce-entry.ts (`ctx.allreduce` sum of 4 B
 * and of 1 MiB, each call timed alone on rank 0), next to TCP round trips of 4 bytes in the same run
 * (bench/tcp-pingpong.ts): over loopback, host to host across the bridge, and from the root namespace to a host
 * (the launcher's side of every cross-host round).
 *
 * A cross-host round goes rank → its relay (Unix socket) → the controller in the launcher (TCP, one
 * authenticated frame per host) → back: two network legs and two local ones. Issue 25's target: 4 B ≤ 3 × the
 * loopback round trip. Needs root and netns support (otherwise it says why and measures nothing).
 *
 * BENCH_RUNS (3) launches; the round trips are measured before each launch; per-call times are pooled.
 */
import { writeFileSync, mkdtempSync, rmSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { makeHosts, netnsUnavailable } from "../test/support/netns.ts"
import { median, percentile } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const ROOT = resolve(import.meta.dir, "..")
const PINGPONG = join(ROOT, "bench/tcp-pingpong.ts")
const ROUNDS = 2_000
const PLAN = "4:50:400,1048576:5:40"

const roundTrips = (prefix: ReadonlyArray<string>, host: string, port: number): Array<number> => {
  const client = Bun.spawnSync([...prefix, process.execPath, PINGPONG, "client", host, String(port), String(ROUNDS)], { stdout: "pipe", stderr: "pipe" })
  if (client.exitCode !== 0) throw new Error(`ping-pong to ${host}:${port} failed: ${client.stderr.toString()}`)
  return (JSON.parse(client.stdout.toString()) as Array<number>).slice(100)
}

const serve = async (prefix: ReadonlyArray<string>, port: number) => {
  const server = Bun.spawn([...prefix, process.execPath, PINGPONG, "server", String(port)], { stdout: "pipe", stderr: "inherit" })
  const reader = server.stdout.getReader()
  await reader.read()
  return server
}

export const allreduceHosts = async (): Promise<string> => {
  const unavailable = netnsUnavailable()
  if (unavailable !== undefined) return `## all-reduce across hosts\n\nskipped: ${unavailable}`
  const started = performance.now()
  const load = loadavg()[0]!.toFixed(1)
  const hosts = await makeHosts(2)
  const scratch = mkdtempSync(join(tmpdir(), "cohort-allreduce-hosts-"))
  const times = new Map<string, Array<number>>()
  const add = (name: string, values: ReadonlyArray<number>) => times.set(name, [...(times.get(name) ?? []), ...values])
  try {
    const [first, second] = hosts.hosts as [typeof hosts.hosts[0], typeof hosts.hosts[0]]
    const inside = (host: typeof first) => ["ip", "netns", "exec", host.namespace]
    const file = join(scratch, "cluster.yml")
    writeFileSync(file, [
      "name: allreduce-hosts",
      `controller: { host: ${hosts.controller}, port: 0 }`,
      "workers:",
      `  - ${hosts.worker(0, { devices: 2 })}`,
      `  - ${hosts.worker(1, { devices: 2 })}`,
      `job: { entry: bench/allreduce-entry.ts, args: [${JSON.stringify(`plan=${PLAN}`)}, "ops=sum"] }`,
      "failure_policy: { grace: 2s }",
      ""
    ].join("\n"))
    for (let run = 0; run < RUNS; run++) {
      const local = await serve([], 45_101)
      add("TCP round trip, loopback", roundTrips([], "127.0.0.1", 45_101))
      local.kill()
      const remote = await serve(inside(first), 45_102)
      add("TCP round trip, host → host", roundTrips(inside(second), first.address, 45_102))
      add("TCP round trip, launcher → host", roundTrips([], first.address, 45_102))
      remote.kill()
      const launch = Bun.spawnSync([process.execPath, "src/cli/launch.ts", file], { cwd: ROOT, stdout: "pipe", stderr: "pipe" })
      const output = launch.stdout.toString() + launch.stderr.toString()
      if (launch.exitCode !== 0) throw new Error(`the launch failed (${launch.exitCode}):\n${output.slice(-2000)}`)
      for (const line of output.split("\n")) {
        const at = line.indexOf('{"allreduce"')
        if (at < 0) continue
        const { bytes, ms, ok } = JSON.parse(line.slice(at)).allreduce as { bytes: number; ms: Array<number>; ok: boolean }
        if (!ok) throw new Error(`wrong sum at ${bytes} bytes`)
        add(`cohort all-reduce sum, ${bytes === 4 ? "4 B" : "1 MiB"}, 2 hosts × 2 ranks`, ms)
      }
    }
  } finally {
    hosts.teardown()
    rmSync(scratch, { recursive: true, force: true })
  }
  const rows = [...times].map(([name, values]) =>
    `| ${name} | ${values.length} | ${median(values).toFixed(4)} | ${percentile(values, 0.1).toFixed(4)} | ${percentile(values, 0.9).toFixed(4)} |`
  )
  const loopback = median(times.get("TCP round trip, loopback") ?? [NaN])
  const small = median(times.get("cohort all-reduce sum, 4 B, 2 hosts × 2 ranks") ?? [NaN])
  return [
    "## all-reduce across hosts (bench/allreduce-hosts.ts)",
    "",
    `${RUNS} run(s), load average ${load} before, ${((performance.now() - started) / 1000).toFixed(0)} s. ms:`,
    "",
    "| measure | samples | median | p10 | p90 |",
    "|---|---|---|---|---|",
    ...rows,
    "",
    `Target: 4 B across 2 hosts ≤ 3 × the loopback round trip: ${small.toFixed(3)} / ${loopback.toFixed(3)} ms = ${(small / loopback).toFixed(1)}×: ${small <= 3 * loopback ? "met" : "missed"}`
  ].join("\n")
}

if (import.meta.main) console.log(await allreduceHosts())
