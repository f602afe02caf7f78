/**
 * NCCL's rules for shrinking a communicator (ncclCommShrink, NCCL 2.27 and
 * later), as pure functions of the version and what the parent saw, so that
 * they are table-tested apart from any NCCL: which flag the survivors pass,
 * and how they then release the parent.
 *
 * Versions are NCCL's codes (`ncclGetVersion`): 22700 is 2.27.0, 23102 is 2.31.2.
 */

/** ncclCommShrink's flags, as nccl.h defines them (NCCL_SHRINK_DEFAULT 0x00, NCCL_SHRINK_ABORT 0x01). */
export type ShrinkFlag = "default" | "abort"
export const shrinkFlagCode: Readonly<Record<ShrinkFlag, 0 | 1>> = { default: 0, abort: 1 }

/**
 * From 2.31.2, ncclCommDestroy of a parent that an NCCL_SHRINK_ABORT shrink left behind never returns:
 * the survivors must ncclCommAbort it instead.
 */
export const ABORT_PARENT_SINCE = 23102

/** ncclInProgress: a non-blocking communicator still initialising, not a failure. */
const IN_PROGRESS = 7

/**
 * The flag for a shrink: NCCL_SHRINK_ABORT when the parent saw an error (its asynchronous error is one,
 * or could not be asked: `undefined`), so that NCCL first ends whatever the parent still had pending;
 * NCCL_SHRINK_DEFAULT for a healthy parent.
 */
export const shrinkFlag = (parentAsyncError: number | undefined): ShrinkFlag =>
  parentAsyncError === 0 || parentAsyncError === IN_PROGRESS ? "default" : "abort"

/** How survivors let go of the parent once the shrink has given them its child. */
export type ParentRelease = "abort" | "destroy"

/**
 * Destroy the parent (its clean end), except after an NCCL_SHRINK_ABORT shrink from 2.31.2 on, where
 * destroying blocks forever: abort it.
 */
export const parentRelease = (version: number, flag: ShrinkFlag): ParentRelease =>
  flag === "abort" && version >= ABORT_PARENT_SINCE ? "abort" : "destroy"
