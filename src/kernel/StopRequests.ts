/**
 * What a stop signal means, as a pure function of the deliveries so far.
 *
 * One keypress is rarely one delivery. A terminal's Ctrl-C goes to every
 * process of its foreground group, so `bun run launch` gets it and forwards
 * it while the launcher gets it directly: two SIGINTs a millisecond apart.
 * A scheduler that signals the whole group (`scancel`, systemd, `kill --
 * -PGID`) does the same with SIGTERM, and a closing terminal with SIGHUP.
 * Counting each delivery would turn the first Ctrl-C into "interrupted
 * again" and kill the ranks before they saved anything. So every delivery
 * within `SAME_STOP_MS` of the first is that same stop, whatever its signal;
 * only a later one, sent after the launcher has said it is stopping, is the
 * operator insisting.
 */

/** The signals that ask the launcher to stop. */
export type StopSignal = "SIGINT" | "SIGTERM" | "SIGHUP"
export const stopSignals: ReadonlyArray<StopSignal> = ["SIGINT", "SIGTERM", "SIGHUP"]

/** Deliveries this close to the first are the same stop (a group signal and its forwarded copy). */
export const SAME_STOP_MS = 1_000

export interface Delivery {
  readonly signal: StopSignal
  /** Milliseconds, on any monotonic clock. */
  readonly at: number
}

export type Reaction =
  /** The first delivery: stop in order. */
  | { readonly _tag: "Stop"; readonly signal: StopSignal }
  /** Another copy of a stop already under way: nothing to do. */
  | { readonly _tag: "Same" }
  /** A deliberate second stop: exit now, without waiting for the ranks. */
  | { readonly _tag: "Insist"; readonly signal: StopSignal }

/** How to react to `delivery`, given the first delivery of this run (if any). */
export const react = (first: Delivery | undefined, delivery: Delivery): Reaction => {
  if (first === undefined) return { _tag: "Stop", signal: delivery.signal }
  if (delivery.at - first.at < SAME_STOP_MS) return { _tag: "Same" }
  return { _tag: "Insist", signal: delivery.signal }
}

const signalNumbers: Readonly<Record<StopSignal, number>> = { SIGHUP: 1, SIGINT: 2, SIGTERM: 15 }

/** The exit status shells and schedulers expect of a process stopped by `signal`: 128 + its number. */
export const exitStatusFor = (signal: StopSignal): number => 128 + signalNumbers[signal]

/** A stop asked of a run: why, and by which signal (none: by code, or by the parent's death). */
export interface StopRequest {
  readonly reason: string
  readonly signal?: StopSignal | undefined
}
