/**
 * Frames and bytes through this process's links, per channel and direction:
 * what /metrics exports. Plain counters in module scope (one launcher per
 * process), bumped on every frame: no allocation on that path.
 */
import type { ChannelName } from "./Channel.ts"

export interface ChannelCounts {
  framesIn: number
  framesOut: number
  bytesIn: number
  bytesOut: number
}

const counts = new Map<ChannelName, ChannelCounts>()

const of = (channel: ChannelName): ChannelCounts => {
  let entry = counts.get(channel)
  if (entry === undefined) counts.set(channel, entry = { framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 })
  return entry
}

export const received = (channel: ChannelName, frames: number, bytes: number): void => {
  const entry = of(channel)
  entry.framesIn += frames
  entry.bytesIn += bytes
}

export const sent = (channel: ChannelName, bytes: number): void => {
  const entry = of(channel)
  entry.framesOut += 1
  entry.bytesOut += bytes
}

export const snapshot = (): ReadonlyMap<ChannelName, Readonly<ChannelCounts>> => new Map([...counts].map(([channel, entry]) => [channel, { ...entry }]))
