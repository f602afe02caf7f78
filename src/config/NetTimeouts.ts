/**
 * Network deadlines and their one knob: `COHORT_NET_TIMEOUT_SCALE` multiplies
 * every one of them (slow links, loaded CI machines, debuggers). It must be a
 * finite number ≥ 0.1; anything else is an error that says so, not a silent
 * default.
 */
import * as Data from "effect/Data"

export class NetTimeoutScaleError extends Data.TaggedError("NetTimeoutScaleError")<{ readonly value: string }> {
  override get message(): string {
    return `COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1 (e.g. 2 for twice as long), got "${this.value}"`
  }
}

export const netTimeoutScale = (env: Readonly<Record<string, string | undefined>> = process.env): number => {
  const raw = env.COHORT_NET_TIMEOUT_SCALE
  if (raw === undefined || raw.trim() === "") return 1
  const scale = Number(raw)
  if (!Number.isFinite(scale) || scale < 0.1) throw new NetTimeoutScaleError({ value: raw })
  return scale
}

/** `ms` under the scale, rounded up to whole milliseconds. */
export const scaled = (ms: number, scale: number): number => Math.ceil(ms * scale)

/** Default deadlines, before scaling. */
export const deadlines = {
  /** A new connection must name its channel within this. */
  magicMs: 5_000,
  /** An HTTP client must send its request line within this. */
  httpRequestMs: 5_000,
  /** A link's nonce exchange and first message (Hello, RelayHello) must complete within this. */
  handshakeMs: 10_000,
  /** The NCCL generator rank must provide a unique id within this. */
  rendezvousIdMs: 30_000,
  /** Every member of a process group's generation (the Python client's) must have formed it within this of its announcement. */
  groupFormMs: 30_000
} as const
