/**
 * What a run is asked for and what it answers: the launcher's public types.
 */
import type * as Agent from "../../agent/Agent.ts"
import type { StopRequest, StopSignal } from "../../kernel/StopRequests.ts"
import type { Loss } from "../../kernel/policy/Verdict.ts"
import type * as Coordinator from "../training/Coordinator.ts"
import type { Inventory } from "../membership/Inventory.ts"
import type { RunEvent, RunState } from "../view/RunView.ts"
import type * as StatusBoard from "../view/StatusBoard.ts"
import type { DeathFigures } from "../view/RecoveryFigures.ts"

export type Outcome = "completed" | "degraded" | "failed" | "interrupted"

export interface RankReport {
  readonly rank: number
  readonly host: string
  /** The device index, or `cpu`. */
  readonly device: string
  /** The last incarnation's pid. */
  readonly pid: number | null
  /** How each incarnation ended, oldest first: "status 0", "signal SIGKILL", … */
  readonly exits: ReadonlyArray<string>
}

export interface RunResult {
  readonly run: string
  readonly outcome: Outcome
  /** 0 completed (degraded included), 1 failed; interrupted: 128 + the signal (129 SIGHUP, 130 SIGINT, 143 SIGTERM), 130 from code. */
  readonly exitCode: number
  /** The final line, after `cohort: `. */
  readonly summary: string
  readonly rootCause: string | undefined
  readonly world: number
  readonly lost: ReadonlyArray<Loss>
  readonly ranks: ReadonlyArray<RankReport>
  /**
   * Every admitted host's devices as its agent named them when it joined (the GPU's name, "NVIDIA H200", or
   * `cpu`), with the ranks that ran on each: remote GPUs this machine never probed included (a bench
   * harness's hardware header, a run's summary). Empty when the world never formed.
   */
  readonly inventory: Inventory
  readonly port: number
  /** The consensus checkpoint on disk for this run, when it has one: where `--resume` continues from. */
  /** `resumes`: where a mid-epoch checkpoint resumes (`epoch 2 at 14,336 of 24,000 samples done`). */
  readonly checkpoint?: { readonly path: string; readonly epoch: number; readonly resumes?: string | undefined } | undefined
  /**
   * The recovery figures (RecoveryFigures): each death the policy carried with its moments (times to detect
   * and recover are `knownAt` and `recoveredAt` less `diedAt`), and the run's effective training ratio.
   */
  readonly recovery?: { readonly deaths: ReadonlyArray<DeathFigures>; readonly effectiveTraining: number | undefined } | undefined
}

export interface LaunchOptions {
  /** Where rank and relay lines go (default: this process's stdout and stderr). */
  readonly output?: Agent.OutputSink
  /**
   * Turn SIGINT, SIGTERM and SIGHUP into an orderly stop (copies of one stop count once; see StopRequests);
   * a deliberate second signal calls `onInsist`, by default exiting the process at once.
   */
  readonly handleSignals?: boolean
  /** A deliberate second stop signal while stopping (with `handleSignals`). */
  readonly onInsist?: (signal: StopSignal) => void
  /** Said when the run starts stopping on request, after how long it waits (the CLI: "press Ctrl-C again to exit at once"). */
  readonly stopHint?: string
  /** Told the port once the mux listens. */
  readonly onListening?: (port: number) => void
  /** Told each phase as the run enters it (the status page's `phase`). */
  readonly onPhase?: (phase: StatusBoard.Phase) => void
  /** Stop the run from outside: resolving it is like a signal (a reason alone: like SIGINT). */
  readonly interrupt?: Promise<string | StopRequest>
  /** Start from the consensus checkpoint at `job.checkpoint` (the CLI's `--resume`). */
  readonly resume?: boolean
  /** Copy this checkout to every ssh host's path first (the CLI's `--sync`). */
  readonly sync?: boolean
  /** Told when survivors hold a dead rank's redistributed work (benchmarks, tests). */
  readonly onRedistributed?: Coordinator.CoordinatorOptions["onRedistributed"]
  /** Where cohort's own lines go (default: stderr). */
  readonly logLine?: (text: string) => void
  /** `--events FILE`: the run's events as JSON lines. */
  readonly eventsFile?: string | undefined
  /** Told every event the run records, with the state after it (the terminal's progress lines). */
  readonly onEvent?: (event: RunEvent, state: RunState) => void
}
