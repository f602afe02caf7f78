/**
 * The scratch of one `coordinate` call, which the sub-reducers in this folder share: shallow copies of the
 * state's slices, whose fields are replaced (never written through: the collections are persistent or copied),
 * so the state given is never changed, and the instructions in the order they were decided. Each sub-reducer
 * replaces the fields of its own slice; the others' it only reads (the death chain, which takes a rank out of
 * every slice, is the exception its file names).
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import type { Mutable } from "effect/Types"
import type { CoordinatorOrder } from "../../../wire/messages/CoordinatorMessages.ts"
import type * as Groups from "../ProcessGroups.ts"
import { Instruction } from "./events.ts"
import type { Consensus, CoordinatorSettings, CoordinatorState, Deaths, Epochs, Growth, Liveness, Members, ProgressTold } from "./state.ts"

export class Step {
  readonly instructions: Array<Instruction> = []
  readonly settings: CoordinatorSettings
  readonly members: Mutable<Members>
  readonly liveness: Mutable<Liveness>
  readonly deaths: Mutable<Deaths>
  readonly consensus: Mutable<Consensus>
  readonly growth: Mutable<Growth>
  readonly epochs: Mutable<Epochs>
  readonly progress: Mutable<ProgressTold>
  groups: Groups.ProcessGroups

  /** `before` stays as it came: the groups compare against it to tell whether the step changed who is in. */
  constructor(readonly before: CoordinatorState, readonly at: number) {
    this.settings = before.settings
    this.members = { ...before.members }
    this.liveness = { ...before.liveness }
    this.deaths = { ...before.deaths }
    this.consensus = { ...before.consensus }
    this.growth = { ...before.growth }
    this.epochs = { ...before.epochs }
    this.progress = { ...before.progress }
    this.groups = before.groups
  }

  result(): CoordinatorState {
    return {
      settings: this.settings,
      members: this.members,
      liveness: this.liveness,
      deaths: this.deaths,
      consensus: this.consensus,
      growth: this.growth,
      epochs: this.epochs,
      progress: this.progress,
      groups: this.groups
    }
  }

  isAlive(rank: number): boolean {
    return HashSet.has(this.members.alive, rank)
  }

  heard(rank: number): void {
    this.liveness.lastSeen = HashMap.set(this.liveness.lastSeen, rank, this.at)
  }

  live(): Array<number> {
    return ascending(this.members.alive)
  }

  // Asked at every Attach: with fewer attached than alive, one is surely missing (no scan).
  everyLiveAttached(): boolean {
    const { alive, attached } = this.members
    return HashSet.size(attached) >= HashSet.size(alive) && HashSet.every(alive, (rank) => HashSet.has(attached, rank))
  }

  send(ranks: ReadonlyArray<number>, order: CoordinatorOrder): void {
    this.instructions.push(Instruction.Send({ ranks, order }))
  }

  log(level: "info" | "warning" | "error", message: string): void {
    this.instructions.push(Instruction.Log({ level, message }))
  }
}

export const ascending = (ranks: Iterable<number>): Array<number> => [...ranks].sort((a, b) => a - b)

export const valueOf = <V>(map: HashMap.HashMap<number, V>, rank: number): V | undefined => Option.getOrUndefined(HashMap.get(map, rank))

/** `map` without `rank`: the same map when it has no such key. */
export const without = <V>(map: ReadonlyMap<number, V>, rank: number): ReadonlyMap<number, V> => {
  if (!map.has(rank)) return map
  const copy = new Map(map)
  copy.delete(rank)
  return copy
}
