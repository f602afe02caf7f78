/**
 * The vote on each epoch's consensus checkpoint (`CheckpointBallot`). When an epoch ends, its members vote: each
 * offers its state once, and the state that a majority of them offered, digest for digest, is the consensus
 * (the ranks hold one model between them, so honest ones agree). An offer of any other epoch (one under way, one
 * to come, one long past), from a rank that is not a member, or a member's second, is refused and said once per
 * rank: no single rank can plant a state in a world of two or more. Owns the consensus's `latest`, `ballot` and
 * `refused`; a consensus reached is written (saving.ts) and lets waiting newcomers in (welcome.ts).
 */
import { createHash } from "node:crypto"
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Ballots from "../CheckpointBallot.ts"
import type * as Ledger from "../EpochLedger.ts"
import { writeCheckpoint } from "./saving.ts"
import { ascending, type Step } from "./step.ts"
import { welcomeNewcomers } from "./welcome.ts"

/** The vote on the epoch that just ended: its members are the ranks alive at its end that trained it (see CheckpointBallot). */
export const openBallot = (step: Step, ended: Ledger.EpochLedger): void => {
  const before = step.consensus.ballot
  // An epoch ends only once its members have all begun it, so a vote still open here waits for no one alive.
  if (before !== undefined && !Ballots.isOver(before)) ballotClosed(step, { ...before, closed: true })
  const alive = ascending([...ended.assigned.keys()].filter((rank) => step.isAlive(rank)))
  const whole = alive.filter((rank) => !ended.dead.has(rank) && !HashSet.has(step.epochs.lateStarters, rank))
  // Every member began part-way (a rescue): they are all there is.
  const voters = whole.length > 0 ? whole : alive
  step.consensus.ballot = Ballots.open(ended.epoch, voters, alive)
}

/** A rank's `CheckpointSave`: counted when it is a member's first for the epoch just ended, refused (and said once) otherwise. */
export const checkpointOffered = (step: Step, rank: number, epoch: number, state: string): void => {
  const offered = Ballots.offer(step.consensus.ballot, rank, epoch, digestOf(state), state)
  if (offered._tag === "Refused") return refuse(step, rank, epoch, offered.why)
  if (offered._tag === "Repeated") return
  step.consensus.ballot = offered.ballot
  judgeBallot(step)
}

/** A member began the next epoch, or is leaving, without offering: the vote waits for it no longer. */
export const abstained = (step: Step, rank: number): void => {
  const { ballot } = step.consensus
  if (ballot === undefined || Ballots.isOver(ballot) || !HashSet.has(ballot.waiting, rank)) return
  step.consensus.ballot = Ballots.abstain(ballot, rank)
  judgeBallot(step)
}

/** A member died: if it had not offered, the majority is of those left. */
export const leftTheVote = (step: Step, rank: number): void => {
  const { ballot } = step.consensus
  if (ballot === undefined || Ballots.isOver(ballot)) return
  step.consensus.ballot = Ballots.died(ballot, rank)
  judgeBallot(step)
}

const judgeBallot = (step: Step): void => {
  const verdict = Ballots.verdict(step.consensus.ballot!)
  if (verdict._tag === "Open") return
  if (verdict._tag === "Closed") return ballotClosed(step, verdict.ballot)
  const { ballot } = verdict
  step.consensus.ballot = ballot
  step.consensus.latest = { epoch: ballot.epoch, state: verdict.state }
  for (const rank of verdict.dissenters) refuse(step, rank, ballot.epoch, Ballots.disagreement(ballot))
  writeCheckpoint(step, "checkpoint")
  welcomeNewcomers(step, () => false)
}

/** The vote is over without a majority: the consensus stays the epoch before's, and the operator is told why when anyone offered. */
const ballotClosed = (step: Step, ballot: Ballots.Ballot): void => {
  step.consensus.ballot = ballot
  if (HashMap.size(ballot.offers) > 0) {
    const { latest } = step.consensus
    const { backend } = step.settings.job
    const fix = Ballots.abstainers(ballot) > 0
      ? "save on every rank: the consensus needs a majority of the epoch's members"
      : backend === "cpu_cadence" || backend === "cpu_async"
      ? `${backend} ranks train apart between syncs: average the state over the ranks before saving it (as examples/train.ts does)`
      : "the members' states should be equal: a rank that offers another is not in step, or not honest"
    step.log(
      "warning",
      `epoch ${ballot.epoch} has no consensus checkpoint: no state was offered by a majority (${Ballots.majorityOf(ballot)}) of its ` +
        `${HashSet.size(ballot.voters)} member(s) (${Ballots.describeOffers(ballot)}); ${fix}; ` +
        (latest === undefined ? "--resume would start from the beginning" : `the checkpoint stays at epoch ${latest.epoch}`)
    )
  }
  welcomeNewcomers(step, () => false)
}

/** A refused offer, said once per rank (a rank that keeps offering is not said again). */
const refuse = (step: Step, rank: number, epoch: number, why: string): void => {
  if (HashSet.has(step.consensus.refused, rank)) return
  step.consensus.refused = HashSet.add(step.consensus.refused, rank)
  step.log("warning", `rank ${rank}'s checkpoint of epoch ${epoch} is refused: ${why}`)
}

/** A state's digest: what the vote compares (equal states, equal digests). */
const digestOf = (state: string): string => createHash("sha256").update(state).digest("hex")
