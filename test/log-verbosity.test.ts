/**
 * COHORT_LOG_LEVEL (and -v): which values are levels, what a relay shows at each, and that the knob
 * travels: through the scrubbed environment a relay and a rank start from, and in the remote shell's
 * command line an ssh session runs (which carries none of the launcher's environment).
 */
import { describe, expect, test } from "bun:test"
import * as Duration from "effect/Duration"
import * as LogLevel from "effect/LogLevel"
import { scrub } from "../src/agent/RankEnvironment.ts"
import { remoteAgentScript } from "../src/launcher/hosts/SshFanOut.ts"
import { LogLevelError, relayLogLevel, requestedLogLevel, requestedLogLevelOr } from "../src/config/LogVerbosity.ts"
import type { Worker } from "../src/config/ClusterConfig.ts"

const refusal = (value: string) => `COHORT_LOG_LEVEL must be one of trace, debug, info, warning or error, got "${value}"`

describe("COHORT_LOG_LEVEL", () => {
  test.each([
    ["trace", "Trace"],
    ["debug", "Debug"],
    ["DEBUG", "Debug"],
    [" info ", "Info"],
    ["warning", "Warning"],
    ["warn", "Warning"],
    ["Error", "Error"]
  ] as const)("%p is %s", (value, label) => {
    expect(requestedLogLevel({ COHORT_LOG_LEVEL: value })?._tag).toBe(label)
  })

  test("unset or blank asks for nothing: each process keeps its default", () => {
    expect(requestedLogLevel({})).toBeUndefined()
    expect(requestedLogLevel({ COHORT_LOG_LEVEL: "  " })).toBeUndefined()
    expect(requestedLogLevelOr(LogLevel.Info, {})._tag).toBe("Info")
  })

  test.each(["loud", "2", "verbose", "trace!"])("%p is refused, naming the variable and the levels", (value) => {
    expect(() => requestedLogLevel({ COHORT_LOG_LEVEL: value })).toThrow(new LogLevelError({ value }))
    expect(new LogLevelError({ value }).message).toBe(refusal(value))
    // Where it cannot be refused (a logger's default), the fallback stands; the entry points refuse it first.
    expect(requestedLogLevelOr(LogLevel.Warning, { COHORT_LOG_LEVEL: value })._tag).toBe("Warning")
  })

  test("a relay says warnings unless the run is turned up to debug or down to errors", () => {
    expect([undefined, LogLevel.Debug, LogLevel.Info, LogLevel.Warning, LogLevel.Error].map((level) => relayLogLevel(level)._tag))
      .toEqual(["Warning", "Debug", "Warning", "Warning", "Error"])
  })
})

describe("the level travels", () => {
  test("through the environment a relay and a rank start from, where cohort's internals are scrubbed", () => {
    expect(scrub({ COHORT_LOG_LEVEL: "debug", COHORT_AGENT_SPEC: "fd:3", PATH: "/bin" })).toEqual({ COHORT_LOG_LEVEL: "debug", PATH: "/bin" })
  })

  test("in the remote agent's command line, quoted; absent when the launcher has none", () => {
    const worker = { host: "node-b", devices: { _tag: "Count", count: 1 }, path: "/srv/x", env: {}, ssh: undefined, tunnel: false, agent: undefined } as unknown as Worker
    const agentLine = (level?: string) => remoteAgentScript(worker, "run/node-b", Duration.seconds(1), 1, level).split("\n").find((line) => line.includes("src/cli/agent.ts --tag"))!
    expect(agentLine("debug")).toStartWith("COHORT_AGENT_SPEC=fd:3 COHORT_NET_TIMEOUT_SCALE='1' COHORT_LOG_LEVEL='debug' \"$BUN\" src/cli/agent.ts")
    expect(agentLine("de bug")).toContain(" COHORT_LOG_LEVEL='de bug' ")
    expect(agentLine()).not.toContain("COHORT_LOG_LEVEL")
    expect(agentLine(" ")).not.toContain("COHORT_LOG_LEVEL")
  })
})
