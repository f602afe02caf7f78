/**
 * A rank envelope (COHORT_RANK_ENVELOPE) as the agent writes one for a host of two CPU ranks, with `changes`
 * applied: what the Python client's tests hand it, without a launch.
 */
export const pythonEnvelope = (changes: Record<string, unknown> = {}): string =>
  JSON.stringify({
    protocol: 2,
    run: "r",
    host: "localhost",
    groupRank: 0,
    worldSize: 2,
    ranks: [0, 1],
    devices: [{ kind: "cpu", slot: 0 }, { kind: "cpu", slot: 1 }],
    controller: { host: "127.0.0.1", port: 29400 },
    rankKeyHex: "00".repeat(32),
    args: [],
    backend: "cpu_sync",
    dir: "/nonexistent",
    socket: "/nonexistent/relay.sock",
    datasetSize: 10,
    epochs: 1,
    cadence: 1,
    heartbeatTimeoutMs: 300,
    ...changes
  })
