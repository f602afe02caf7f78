/** A host run spec for tests that admit agents by hand (JoinGate, Accept frames, the agent). */
import type { HostRunSpec } from "../../src/wire/messages/JoinMessages.ts"

export const runSpec = (overrides: Partial<HostRunSpec> = {}): HostRunSpec => ({
  run: "test",
  program: { _tag: "Entry", entry: "test/fixtures/rank-fixture.ts" },
  args: [],
  backend: "cpu_sync",
  datasetSize: 0,
  epochs: 1,
  cadence: 1,
  env: {},
  graceMs: 2_000,
  heartbeatTimeoutMs: 30_000,
  ...overrides
})
