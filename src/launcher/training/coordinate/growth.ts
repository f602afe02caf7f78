/**
 * Growth: ranks that join the formed cohort (`Joined`) wait, attached, for the next epoch boundary. There they
 * enter (`Enter`, before any order of the new epoch leaves), the epoch is split over the grown cohort, and each
 * newcomer is welcomed (welcome.ts). No rank is given work before the epoch it entered at. Owns `growth`'s
 * `joining` and `stranded`, and adds the ranks that enter to the members. A joiner's own reports are joiners.ts's.
 */
import * as HashSet from "effect/HashSet"
import * as Ledger from "../EpochLedger.ts"
import { Instruction } from "./events.ts"
import { ascending, type Step, without } from "./step.ts"
import { welcomeNewcomers } from "./welcome.ts"

export const joined = (step: Step, ranks: ReadonlyArray<number>): void => {
  const joining = new Map(step.growth.joining)
  for (const rank of ranks) {
    // Rank numbers are never reused: one the run has had is not joining.
    if (HashSet.has(step.members.everyone, rank)) continue
    step.members.everyone = HashSet.add(step.members.everyone, rank)
    joining.set(rank, { since: step.at, attached: false })
  }
  step.growth.joining = joining
}

/**
 * The boundary of `epoch`: every joined rank that has attached becomes a member (its work is planned with
 * the others'). Returns the ranks that entered, in the order they joined.
 */
export const enter = (step: Step, epoch: number): ReadonlySet<number> => {
  const entering = new Set([...step.growth.joining].flatMap(([rank, { attached }]) => (attached ? [rank] : [])))
  if (entering.size === 0) return entering
  const joining = new Map(step.growth.joining)
  const unwelcomed = new Map(step.growth.unwelcomed)
  for (const rank of entering) {
    joining.delete(rank)
    step.members.alive = HashSet.add(step.members.alive, rank)
    step.members.attached = HashSet.add(step.members.attached, rank)
    step.heard(rank)
    unwelcomed.set(rank, { epoch, at: step.at })
  }
  step.growth.joining = joining
  step.growth.unwelcomed = unwelcomed
  const ranks = ascending(entering)
  step.log("info", `rank(s) ${ranks.join(", ")} enter the cohort at epoch ${epoch}: ${HashSet.size(step.members.alive)} rank(s) train it`)
  step.instructions.push(Instruction.Enter({ ranks, epoch }))
  return entering
}

/**
 * The last member died mid-epoch while joined ranks wait for the boundary: rather than lose the run, they
 * enter now and take over what is left of the epoch. Once every joiner has attached, or (`force`) a few
 * beats after the work was stranded with whichever have: a whole group restarting (`scope: all`) comes
 * back together, and one rank should not carry the epoch alone.
 */
export const rescue = (step: Step, cause: string, force: boolean): void => {
  const { ledger } = step.epochs
  if (ledger === undefined || step.growth.stranded.length === 0 || step.deaths.stopping || step.epochs.finished) return
  if (!force && [...step.growth.joining.values()].some((joiner) => !joiner.attached)) return
  const entering = enter(step, ledger.epoch)
  if (entering.size === 0) return
  const orphaned = step.growth.stranded
  step.growth.stranded = []
  step.growth.strandedSince = undefined
  step.epochs.ledger = Ledger.adopt(ledger, [...entering], orphaned).ledger
  step.epochs.lateStarters = HashSet.union(step.epochs.lateStarters, entering)
  step.log(
    "warning",
    `every member was lost (${cause}): rank(s) ${[...entering].join(", ")} enter at once and take epoch ${ledger.epoch}'s remaining ${Ledger.lengthOf(orphaned)} sample(s)`
  )
  // No member is left to offer a newer consensus: they start from the latest there is.
  welcomeNewcomers(step, () => true)
}

/**
 * A joined rank too late for any epoch: it is told there is none, and holds the final consensus like the
 * members (the welcome waits for the last epoch's, as any newcomer's does for the epoch before its first).
 */
export const dismiss = (step: Step, rank: number): void => {
  step.growth.joining = without(step.growth.joining, rank)
  step.members.alive = HashSet.add(step.members.alive, rank)
  step.members.attached = HashSet.add(step.members.attached, rank)
  step.growth.unwelcomed = new Map(step.growth.unwelcomed).set(rank, { epoch: step.settings.job.epochs + 1, at: step.at })
  welcomeNewcomers(step, () => step.deaths.stopping)
}
