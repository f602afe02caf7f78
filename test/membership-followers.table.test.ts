/**
 * Membership's fan-out, as a table: each effect membership can say, and what
 * each follower does with it (literal calls, lines and journal events); then
 * the owner itself, with real followers' order, the wait `apply` makes, and a
 * gone host's link closed only after the followers have said why.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import type { JoinLink, Member } from "../src/launcher/front/JoinGate.ts"
import { MembershipEffect, MembershipEvent } from "../src/launcher/membership/Membership.ts"
import * as Followers from "../src/launcher/membership/MembershipFollowers.ts"
import * as MembershipOwner from "../src/launcher/membership/MembershipOwner.ts"
import { effect } from "./support/effect.ts"

const admitted = MembershipEffect.HostAdmitted({ entry: { host: "c", ranks: [4, 5], devices: ["0", "cpu"], labels: ["NVIDIA H200", "cpu"] }, world: 6 })
const renumbered = MembershipEffect.SeatRenumbered({ seat: 1, old: 3, rank: 7, host: "a", device: "1", label: "NVIDIA A100", world: 8 })
const left = MembershipEffect.RanksLeft({ ranks: [2, 0], cause: "rank 2 exited with status 3" })
const gone = MembershipEffect.HostGone({ host: "b", why: "the ssh session ended" })
const formed = MembershipEffect.CohortFormed()

/** Run a follower over one effect; every call it made, every line it logged, in order. */
const follow = (make: (calls: Array<string>) => MembershipOwner.Subscriber, said: MembershipEffect): Array<string> => {
  const calls: Array<string> = []
  const capture = Logger.make(({ logLevel, message }) => calls.push(`${logLevel.label}: ${Array.isArray(message) ? message.join(" ") : String(message)}`))
  Effect.runSync(make(calls)(said).pipe(Logger.withMinimumLogLevel(LogLevel.Info), Effect.provide(Logger.replace(Logger.defaultLogger, capture))))
  return calls
}

const journal = (calls: Array<string>) => Followers.journal({ record: (event) => Effect.sync(() => void calls.push(`record ${JSON.stringify(event)}`)), now: () => 1_000 })
const controlGate = (calls: Array<string>) => Followers.controlGate({ adopt: (host, ranks) => Effect.sync(() => void calls.push(`adopt ${host} [${ranks}]`)) })
const training = (calls: Array<string>) =>
  Followers.training({
    coordinator: {
      ranksDead: (ranks, cause) => Effect.sync(() => void calls.push(`coordinator dead [${ranks}]: ${cause}`)),
      join: (ranks) => Effect.sync(() => void calls.push(`coordinator join [${ranks}]`))
    },
    controller: { leave: (host) => Effect.sync(() => void calls.push(`controller leave ${host}`)) }
  })
const rendezvous = (calls: Array<string>) =>
  Followers.rendezvous({
    lose: (ranks, reason) => Effect.sync(() => void calls.push(`rendezvous lose [${ranks}]: ${reason}`)),
    admit: (ranks) => Effect.sync(() => void calls.push(`rendezvous admit [${ranks}]`))
  })
const supervision = (calls: Array<string>) =>
  Followers.supervision({ hostGone: (host, why) => Effect.sync(() => void calls.push(`give up ${host}'s ranks: ${why}`)) })

describe("each follower, each effect", () => {
  test.each([
    ["journal follows HostAdmitted", journal, admitted, [
      "INFO: c joins the running cohort with rank(s) 4, 5: 6 rank(s) in the run",
      `record {"event":"world_grew","at":1000,"world":6,"host":"c","ranks":[4,5],"devices":["0","cpu"],"labels":["NVIDIA H200","cpu"]}`
    ]],
    ["journal follows SeatRenumbered", journal, renumbered, [
      "INFO: rank 3 of a restarts as rank 7: it rejoins at the next epoch boundary from the consensus weights",
      `record {"event":"world_grew","at":1000,"world":8,"host":"a","ranks":[7],"devices":["1"],"labels":["NVIDIA A100"],"replaces":3}`
    ]],
    ["journal follows HostGone", journal, gone, [
      "WARN: b is gone (the ssh session ended): its ranks are lost",
      `record {"event":"host_gone","at":1000,"host":"b","reason":"the ssh session ended"}`
    ]],
    ["journal follows RanksLeft", journal, left, []],
    ["journal follows CohortFormed", journal, formed, []],
    ["control gate follows SeatRenumbered", controlGate, renumbered, ["adopt a [7]"]],
    ["control gate follows HostAdmitted", controlGate, admitted, []],
    ["control gate follows RanksLeft", controlGate, left, []],
    ["control gate follows HostGone", controlGate, gone, []],
    ["training follows RanksLeft", training, left, ["coordinator dead [2,0]: rank 2 exited with status 3"]],
    ["training follows HostAdmitted", training, admitted, ["coordinator join [4,5]"]],
    ["training follows SeatRenumbered", training, renumbered, ["coordinator join [7]", "coordinator dead [3]: restarted as rank 7"]],
    ["training follows HostGone", training, gone, ["controller leave b"]],
    ["training follows CohortFormed", training, formed, []],
    ["rendezvous follows RanksLeft", rendezvous, left, ["rendezvous lose [2,0]: rank 2 exited with status 3"]],
    ["rendezvous follows HostAdmitted", rendezvous, admitted, ["rendezvous admit [4,5]"]],
    ["rendezvous follows SeatRenumbered", rendezvous, renumbered, ["rendezvous lose [3]: rank 3 restarts as rank 7", "rendezvous admit [7]"]],
    ["rendezvous follows HostGone", rendezvous, gone, []],
    ["rendezvous follows CohortFormed", rendezvous, formed, []],
    ["supervision follows HostGone", supervision, gone, ["give up b's ranks: the ssh session ended"]],
    ["supervision follows RanksLeft", supervision, left, []],
    ["supervision follows HostAdmitted", supervision, admitted, []],
    ["supervision follows SeatRenumbered", supervision, renumbered, []],
    ["supervision follows CohortFormed", supervision, formed, []]
  ] as const)("%s", (_, make, said, expected) => {
    expect(follow(make, said)).toEqual([...expected])
  })
})

describe("the owner", () => {
  const member = (host: string, ranks: ReadonlyArray<number>, calls: Array<string>): Member => ({
    host,
    ranks,
    devices: ranks.map((_, slot) => slot),
    deviceLabels: ranks.map(() => "cpu"),
    pid: 1,
    link: { abort: (why: string) => Effect.sync(() => void calls.push(`abort ${host}: ${why}`)) } as unknown as JoinLink
  })

  effect.live("publishes every effect to every follower in the order they subscribed, and apply returns after them all", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const owner = yield* MembershipOwner.make([member("a", [0, 1], calls), member("b", [2], calls)], {
        cohortFormed: Effect.sync(() => void calls.push("supervision: cohort formed"))
      })
      yield* owner.subscribe((said) => Effect.sync(() => void calls.push(`first ${said._tag}`)))
      yield* owner.subscribe((said) => Effect.sync(() => void calls.push(`second ${said._tag}`)))
      for (const rank of [0, 1, 2]) yield* owner.apply(MembershipEvent.RankRunning({ rank }))
      expect(calls).toEqual(["first CohortFormed", "second CohortFormed", "supervision: cohort formed"])
      calls.length = 0
      yield* owner.apply(MembershipEvent.RanksLost({ ranks: [2], cause: "rank 2 exited with status 3" }))
      yield* owner.apply(MembershipEvent.RanksLost({ ranks: [2], cause: "again" }))
      yield* owner.apply(MembershipEvent.HostEnded({ host: "b", why: "the ssh session ended" }))
      // The link is closed after the followers: their lines say why before its ranks end.
      expect(calls).toEqual(["first RanksLeft", "second RanksLeft", "first HostGone", "second HostGone", "abort b: the ssh session ended"])
      calls.length = 0
      yield* owner.joined(member("b", [3], calls))
      yield* owner.apply(MembershipEvent.HostEnded({ host: "b", why: "cut off again" }))
      // A host that came back is closed by its new link.
      expect(calls).toEqual(["first HostAdmitted", "second HostAdmitted", "first HostGone", "second HostGone", "abort b: cut off again"])
      expect(owner.snapshot().world).toBe(4)
    }))
})
