/**
 * The death chain, once per rank: mark it dead in the ledger, hand its unprocessed samples to the survivors
 * (`EpochExtend`), then, if no rank is left, write the consensus checkpoint and tell every survivor to stop. The
 * failure policy's limit is not judged here: the kernel's `decide` judges it and the launcher says so
 * (`StopRun`, cut.ts), which ends the same way. Ranks that leave (`Exiting`, a clean exit) with work left, unasked,
 * are lost like dead ones. Owns `deaths`' `dead` and `ordered`; a death takes the rank out of every slice that
 * counts on it (the members, the joiners, a cut's and a vote's waits, the ledger).
 */
import * as HashSet from "effect/HashSet"
import { EpochExtend } from "../../../wire/messages/CoordinatorMessages.ts"
import * as Ledger from "../EpochLedger.ts"
import { abstained, leftTheVote } from "./consensus.ts"
import { answered } from "./cut.ts"
import { endEpoch } from "./epochs.ts"
import { Instruction } from "./events.ts"
import { rescue } from "./growth.ts"
import { saveAndStop } from "./saving.ts"
import { scriptMustAttach } from "./state.ts"
import { ascending, type Step, without } from "./step.ts"

/** A rank given up for silence and then restarted (restart policy) attached again: the next epochs count on it again. */
export const revived = (step: Step, rank: number): void => {
  if (!HashSet.has(step.deaths.dead, rank) || step.deaths.stopping || step.epochs.finished) return
  step.deaths.dead = HashSet.remove(step.deaths.dead, rank)
  step.members.alive = HashSet.add(step.members.alive, rank)
  step.liveness.exiting = HashSet.remove(step.liveness.exiting, rank)
}

export const stopOrdered = (step: Step, ranks: ReadonlyArray<number>): void => {
  for (const rank of ranks) step.deaths.ordered = HashSet.add(step.deaths.ordered, rank)
}

/** A member said it is leaving (`Exiting`): it is no longer beaten nor watched, and is lost if it leaves work behind. */
export const exiting = (step: Step, rank: number): void => {
  step.liveness.exiting = HashSet.add(step.liveness.exiting, rank)
  // Gone without a word more: a cut waiting for it has all it will get from it.
  answered(step, rank)
  // A member leaving has offered whatever checkpoint it would: the vote waits for it no longer.
  abstained(step, rank)
  leftWithWork(step, rank, "returned")
}

export const exitedCleanly = (step: Step, rank: number): void => {
  answered(step, rank)
  abstained(step, rank)
  // Its last reports had their chance to arrive: one that said it was leaving (`Exiting`) was judged then.
  if (HashSet.has(step.liveness.exiting, rank) || !step.isAlive(rank)) return
  if (
    scriptMustAttach(step.settings) && !HashSet.has(step.members.attached, rank) && !step.epochs.finished && !step.deaths.stopping &&
    !HashSet.has(step.deaths.ordered, rank)
  ) {
    // A script that never joined its coordinator (no cohort.init()) and ended: nothing of the plan was trained by it.
    neverAttached(step, [rank], "exited with status 0 without attaching")
    return
  }
  leftWithWork(step, rank, "exited with status 0")
}

/**
 * Ranks of a coordinated job (job.dataset_size) that never attached: the job's script does not speak to cohort.
 * The run fails, saying what to add: nothing would train, and a run that trained nothing must not say completed.
 */
export const neverAttached = (step: Step, ranks: ReadonlyArray<number>, how: string): void => {
  const reason = `${how}: a command: job with job.dataset_size is coordinated, and its script must join it ` +
    "(call cohort.init() before training), or drop job.dataset_size to run the command as torchrun would"
  step.instructions.push(Instruction.LoseRanks({ ranks, reason, cause: "exit", diedAt: ranks.map(() => step.at), fatal: true }))
  markDead(step, ranks, reason)
}

/**
 * Ranks that died together (a host's, silent ones) leave together: every one of them is out of the members
 * before any of their work is handed on, so none of it goes to another of them, and one line says it.
 */
export const markDead = (step: Step, ranks: ReadonlyArray<number>, cause: string): void => {
  const dying = [...new Set(ranks)].filter((rank) => !HashSet.has(step.deaths.dead, rank) && HashSet.has(step.members.everyone, rank))
  for (const rank of dying) {
    step.deaths.dead = HashSet.add(step.deaths.dead, rank)
    step.members.alive = HashSet.remove(step.members.alive, rank)
    step.growth.joining = without(step.growth.joining, rank)
    step.growth.unwelcomed = without(step.growth.unwelcomed, rank)
    answered(step, rank)
    leftTheVote(step, rank)
  }
  if (step.epochs.ledger !== undefined && !step.epochs.finished && !step.deaths.stopping) handOn(step, dying, cause)
  if (step.deaths.stopping || step.epochs.finished) return
  if (HashSet.size(step.members.alive) === 0 && step.growth.joining.size === 0) return saveAndStop(step, `every rank was lost`, "all_ranks_lost")
  if (HashSet.size(step.members.alive) === 0) {
    step.log("warning", `every member was lost (${cause}); rank(s) ${[...step.growth.joining.keys()].join(", ")} that joined carry on once they attach`)
    return rescue(step, cause, false)
  }
  const { ledger } = step.epochs
  if (ledger !== undefined && Ledger.isComplete(ledger)) endEpoch(step)
}

/**
 * The dying ranks' unprocessed samples to the survivors. The ledger hands one rank's on at a time, to every
 * rank it still counts, so a piece handed to another of the dying comes back with that one's rest: only what
 * reaches a rank outside them is sent, and said.
 */
const handOn = (step: Step, dying: ReadonlyArray<number>, cause: string): void => {
  const received = new Map<number, number>()
  let epoch = 0
  for (const rank of dying) {
    const { extensions, ledger: next, orphaned } = Ledger.markDead(step.epochs.ledger!, rank)
    step.epochs.ledger = next
    epoch = next.epoch
    if (orphaned.length > 0) {
      step.growth.stranded = [...step.growth.stranded, ...orphaned]
      step.growth.strandedSince ??= step.at
    }
    const outside = new Map([...extensions].filter(([survivor]) => !dying.includes(survivor)))
    for (const [survivor, ranges] of outside) {
      step.send([survivor], new EpochExtend({ epoch: next.epoch, ranges }))
      received.set(survivor, (received.get(survivor) ?? 0) + Ledger.lengthOf(ranges))
    }
    step.instructions.push(Instruction.Redistributed({ dead: rank, extensions: outside }))
  }
  const moved = [...received.values()].reduce((sum, count) => sum + count, 0)
  if (moved === 0) return
  const who = dying.length === 1 ? `rank ${dying[0]}` : `ranks ${dying.join(", ")}`
  step.log("warning", `${who} lost (${cause}): ${moved} unprocessed sample(s) of epoch ${epoch} handed to rank(s) ${ascending([...received.keys()]).join(", ")}`)
}

/** A rank that returns (or exits) with work left, unasked, is lost like a dead one: its samples go to the survivors. */
const leftWithWork = (step: Step, rank: number, how: string): void => {
  const { ledger } = step.epochs
  if (ledger === undefined) return
  const left = Ledger.lengthOf(Ledger.remainder(ledger, rank))
  if (left === 0 || step.epochs.finished || step.deaths.stopping || HashSet.has(step.deaths.ordered, rank) || HashSet.has(step.deaths.dead, rank)) return
  const reason = `${how} with ${left} sample(s) of epoch ${ledger.epoch} left`
  step.instructions.push(Instruction.LoseRanks({ ranks: [rank], reason, cause: "exit", diedAt: [step.at] }))
  markDead(step, [rank], reason)
}
