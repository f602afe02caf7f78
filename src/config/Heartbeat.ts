/**
 * The heartbeat cadence, apart from the failure policy that sets its timeout: the relay needs only this,
 * and importing it from `FailurePolicy.ts` would load the policy's schemas and YAML into every relay.
 */

/**
 * How often liveness crosses the network for a heartbeat timeout: each relay's `HostBeats` and the
 * coordinator's beats down to the ranks. A sixth of the timeout, between 1 s and 5 s: every silence is
 * seen within a few beats, and at the default 30 s a 1,000-host world sends 400 beat frames a second
 * instead of 2,000. (Ranks still beat to their relay every second: that stays on the host.)
 */
export const beatEveryMs = (heartbeatTimeoutMs: number): number => Math.min(5_000, Math.max(1_000, Math.round(heartbeatTimeoutMs / 6)))
