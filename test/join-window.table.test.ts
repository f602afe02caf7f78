/**
 * The join window's machine, as tables: literal events in, literal effects
 * (in words) and state out. No socket and no clock: links are names, time is
 * the `at` each event carries.
 */
import { describe, expect, test } from "bun:test"
import { Hello } from "../src/wire/messages/JoinMessages.ts"
import { joinWindow, opened, unarmable, type WindowEffect, WindowEvent, type WindowSettings, type WindowState } from "../src/launcher/front/joinWindow.ts"

const settings = (overrides: Partial<WindowSettings> = {}): WindowSettings => ({
  rules: { minRanks: 3, targetRanks: 5, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "auto" },
  floodLimit: 3,
  declared: new Map<string, number | undefined>([["a", 2], ["b", 3], ["c", undefined]]),
  version: "1.0",
  openedAt: 100,
  growing: false,
  maxRanks: undefined,
  ...overrides
})

const hello = (host: string, devices: number, version = "1.0") =>
  new Hello({ host, devices: Array.from({ length: devices }, (_, i) => i), deviceLabels: Array.from({ length: devices }, () => "cpu"), pid: 7, version })

const said = (effect: WindowEffect<string>): string => {
  switch (effect._tag) {
    case "SendAccept":
      return `accept ${effect.member.link} as [${effect.member.ranks}]${effect.late ? " late" : ""}, wait ${effect.formationWaitMs}`
    case "Refuse":
      return `refuse ${effect.link}: ${effect.reason}`
    case "Joined":
      return `joined ${effect.member.host}${effect.late ? " late" : ""}`
    case "Watch":
      return `watch ${effect.member.link}`
    case "LateJoin":
      return `hand on ${effect.member.host}`
    case "Concluded":
      if (effect.outcome._tag === "Formed") return `formed: ${effect.outcome.worldSize} rank(s) of ${effect.outcome.members.map((member) => member.host).join(", ")}`
      if (effect.outcome._tag === "Failed") return `failed: ${effect.outcome.reason}`
  }
  throw new Error(`not a window effect: ${JSON.stringify(effect)}`)
}

/** Play events; every step's effects in words, and the last state. */
const play = (events: ReadonlyArray<WindowEvent<string>>, start: WindowState<string> = opened(settings())) => {
  let state = start
  const steps: Array<Array<string>> = []
  for (const event of events) {
    const [effects, next] = joinWindow(state, event)
    steps.push(effects.map(said))
    state = next
  }
  return { steps, state }
}

const E = WindowEvent
const join = (link: string, host: string, devices: number, at = 200, rejoinable = false) => E.Hello({ link, hello: hello(host, devices), rejoinable, at })
/** An admission whose Accept went out. */
const admitted = (state: WindowState<string>, link: string, host: string, devices: number, at = 200): WindowState<string> => {
  const [, asked] = joinWindow(state, join(link, host, devices, at))
  const member = asked.members.at(-1)!
  return joinWindow(asked, E.AcceptSent({ member, late: false, at }))[1]
}

describe("admissions", () => {
  test("numbers are contiguous, the Accept carries the time to the hard cap, and the target forms the window at once", () => {
    const { state, steps } = play([join("L1", "a", 2, 600)])
    expect(steps).toEqual([["accept L1 as [0,1], wait 4500"]])
    const member = state.members[0]!
    const after = play([E.AcceptSent({ member, late: false, at: 600 }), join("L2", "b", 3, 700)], state)
    expect(after.steps).toEqual([["joined a", "watch L1"], ["accept L2 as [2,3,4], wait 4400"]])
    const formed = play([E.AcceptSent({ member: after.state.members[1]!, late: false, at: 700 })], after.state)
    expect(formed.steps).toEqual([["joined b", "watch L2", "formed: 5 rank(s) of a, b"]])
    expect(formed.state.joinedHosts).toEqual(new Set(["a", "b"]))
    expect(formed.state.declaredIn).toBe(2)
  })

  test("an Accept that never left gives its numbers back before anyone else is admitted", () => {
    const [, asked] = joinWindow(opened<string>(settings()), join("L1", "a", 2))
    const [effects, rolledBack] = joinWindow(asked, E.AcceptFailed({ member: asked.members[0]! }))
    expect(effects).toEqual([])
    expect([rolledBack.members, rolledBack.joinedRanks, rolledBack.nextRank, rolledBack.declaredIn, [...rolledBack.joinedHosts]]).toEqual([[], 0, 0, 0, []])
    expect(play([join("L2", "b", 3)], rolledBack).steps).toEqual([["accept L2 as [0,1,2], wait 4900"]])
  })

  test("numbers reserved for restarts are never handed to a host", () => {
    expect(play([E.Reserved({ count: 2 }), join("L1", "a", 2)]).steps).toEqual([[], ["accept L1 as [2,3], wait 4900"]])
  })
})

describe("refusals, each counted towards the flood guard", () => {
  const one = (event: WindowEvent<string>, start?: WindowState<string>) => play([event], start).steps[0]
  test.each([
    ["an undeclared host", join("L", "zz", 1), "refuse L: host zz is not among the workers of this run (a, b, c)"],
    ["the wrong device count", join("L", "b", 2), "refuse L: host b was declared with 3 devices but brings 2"],
    ["another version", E.Hello({ link: "L", hello: hello("a", 2, "0.9"), rejoinable: false, at: 200 }), "refuse L: version skew: the launcher runs cohort 1.0, this agent 0.9"],
    ["no devices", join("L", "c", 0), "refuse L: expected 1 to 256 devices, got 0"],
    ["something else first", E.NotHello({ link: "L", reason: "expected Hello first, got Bye", at: 200 }), "refuse L: expected Hello first, got Bye"]
  ] as const)("%s", (_, event, expected) => {
    expect(one(event)).toEqual([expected])
  })

  test("a host already in is refused; the third refusal fails the window by the flood guard, naming the count", () => {
    const inA = admitted(opened(settings()), "L1", "a", 2)
    const { state, steps } = play([join("L2", "a", 2), join("L3", "zz", 1), join("L4", "zz", 1), join("L5", "b", 3)], inA)
    expect(steps).toEqual([
      ["refuse L2: host a has already joined"],
      ["refuse L3: host zz is not among the workers of this run (a, b, c)"],
      ["refuse L4: host zz is not among the workers of this run (a, b, c)", "failed: 3 joins were rejected: refusing to go on (flood guard)"],
      ["refuse L5: the join window has failed"]
    ])
    expect(state.rejected).toBe(4)
  })
})

describe("the outcome", () => {
  test("a member's link ending before the outcome fails the window once; after it, nothing", () => {
    const inA = admitted(opened(settings()), "L1", "a", 2)
    expect(play([E.LinkEnded({ host: "a", detail: "EOF" }), E.LinkEnded({ host: "a", detail: "again" })], inA).steps).toEqual([
      ["failed: a left before the cohort formed: EOF"],
      []
    ])
  })

  test("deadlines: open inside the window; past it a quorum forms; without one, open until the hard cap names who never joined", () => {
    const inB = admitted(opened(settings()), "L1", "b", 3)
    expect(play([E.Tick({ at: 1_099 }), E.Tick({ at: 1_100 })], inB).steps).toEqual([[], ["formed: 3 rank(s) of b"]])
    const inA = admitted(opened(settings()), "L1", "a", 2)
    expect(play([E.Tick({ at: 1_100 }), E.Tick({ at: 5_100 })], inA).steps).toEqual([
      [],
      ["failed: quorum not met: 2/3 ranks (never joined: b, c)"]
    ])
  })

  test("an operator start: armable once, not under auto, not once closed", () => {
    const manual = opened<string>(settings({ rules: { minRanks: 2, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "manual" } }))
    const inA = admitted(manual, "L1", "a", 2)
    expect(unarmable(inA)).toBeUndefined()
    const { state, steps } = play([E.Armed({ at: 300 })], inA)
    expect(steps).toEqual([["formed: 2 rank(s) of a"]])
    expect(unarmable(state)).toBe("the join window is closed")
    expect(unarmable(opened(settings()))).toBe("this window starts by itself (start: auto)")
    expect(unarmable(joinWindow(opened<string>(settings({ rules: { ...settings().rules, start: "hybrid" } })), E.Armed({ at: 150 }))[1])).toBe("already armed")
  })
})

describe("after formation", () => {
  const formedWithB = (overrides: Partial<WindowSettings>) => {
    const [, state] = joinWindow(admitted(opened(settings(overrides)), "L1", "b", 3), E.Tick({ at: 1_100 }))
    return state
  }

  test("without growth every late host is refused, saying how to grow", () => {
    expect(play([join("L2", "a", 2, 2_000)], formedWithB({})).steps).toEqual([
      ["refuse L2: the cohort has already formed (this run does not grow: controller.join.after_formation is reject)"]
    ])
  })

  test("with growth: admitted late (no wait) and handed on; max_ranks counts every rank; a gone host may come back", () => {
    const start = formedWithB({ growing: true, maxRanks: 7 })
    const asked = play([join("L2", "a", 2, 2_000)], start)
    expect(asked.steps).toEqual([["accept L2 as [3,4] late, wait 0"]])
    const handed = play([E.AcceptSent({ member: asked.state.members[1]!, late: true, at: 2_000 }), join("L3", "c", 4, 2_100)], asked.state)
    expect(handed.steps).toEqual([["joined a late", "hand on a"], ["refuse L3: the run would have 9 ranks, over controller.join.max_ranks (7)"]])
    expect(play([join("L4", "b", 3, 2_200), join("L5", "b", 3, 2_300, true)], handed.state).steps).toEqual([
      ["refuse L4: host b has already joined"],
      ["refuse L5: the run would have 8 ranks, over controller.join.max_ranks (7)"]
    ])
    const roomy = play([join("L6", "b", 3, 2_300, true)], formedWithB({ growing: true, maxRanks: undefined }))
    expect(roomy.steps).toEqual([["accept L6 as [3,4,5] late, wait 0"]])
  })

  test("the flood guard after formation: at the limit of refusals a late host is turned away, one below it is admitted", () => {
    const start = formedWithB({ growing: true })
    const strangers = (count: number) => Array.from({ length: count }, (_, i) => join(`S${i}`, "zz", 1, 2_000))
    expect(play([...strangers(3), join("L2", "a", 2, 2_100)], start).steps.at(-1)).toEqual([
      "refuse L2: 3 joins were rejected: no more hosts are admitted (flood guard)"
    ])
    expect(play([...strangers(2), join("L2", "a", 2, 2_100)], start).steps.at(-1)).toEqual(["accept L2 as [3,4] late, wait 0"])
  })
})

describe("each check, on both sides of its bound", () => {
  const helloOf = (host: string, devices: ReadonlyArray<number>, labels: ReadonlyArray<string>) =>
    E.Hello({ link: "L", hello: new Hello({ host, devices: [...devices], deviceLabels: [...labels], pid: 7, version: "1.0" }), rejoinable: false, at: 200 })
  const cpus = (count: number) => Array.from({ length: count }, (_, i) => i)
  const labels = (count: number, label = "cpu") => Array.from({ length: count }, () => label)
  test.each([
    ["a host name with a space", helloOf("bad host", [0], ["cpu"]), `refuse L: host name "bad host" is not one: it must be 1 to 253 letters, digits, '.', '-', '_' or ':', starting with a letter or digit`],
    [
      "a label that ends in a newline",
      helloOf("c", [0], ["NVIDIA H200\n"]),
      "refuse L: host c sent a device label that is not one: 1 to 64 letters, digits, spaces or ':', '.', '_', '(', ')', '/', '+', '-', starting with a letter or digit"
    ],
    [
      "a label that starts with a space",
      helloOf("c", [0], [" H200"]),
      "refuse L: host c sent a device label that is not one: 1 to 64 letters, digits, spaces or ':', '.', '_', '(', ')', '/', '+', '-', starting with a letter or digit"
    ],
    ["a label of 64 characters is one", helloOf("c", [0], ["A".repeat(64)]), "accept L as [0], wait 4900"],
    ["the same device twice", helloOf("c", [0, 1, 0], labels(3)), "refuse L: a device is listed twice"],
    ["one label for two devices", helloOf("c", [0, 1], ["cpu"]), "refuse L: host c sent 1 device label(s) for 2 device(s): one per device"],
    ["256 devices is the most", helloOf("c", cpus(256), labels(256)), `accept L as [${cpus(256)}], wait 4900`],
    ["257 devices is too many", helloOf("c", cpus(257), labels(257)), "refuse L: expected 1 to 256 devices, got 257"]
  ] as const)("%s", (_, event, expected) => {
    expect(play([event]).steps).toEqual([[expected]])
  })

  test("max_ranks is a bound on late hosts only, and reaching it exactly is allowed", () => {
    // Before formation the window's own rules bound the world: max_ranks is not asked.
    expect(play([join("L1", "c", 9)], opened(settings({ growing: true, maxRanks: 4 }))).steps).toEqual([["accept L1 as [0,1,2,3,4,5,6,7,8], wait 4900"]])
    const [, formed] = joinWindow(admitted(opened(settings({ growing: true, maxRanks: 5 })), "L1", "b", 3), E.Tick({ at: 1_100 }))
    expect(play([join("L2", "a", 2, 2_000)], formed).steps).toEqual([["accept L2 as [3,4] late, wait 0"]])
  })

  test("a deadline under manual start never forms the window by itself, and a formed window is not judged again", () => {
    const manual = opened<string>(settings({ rules: { minRanks: 2, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "manual" } }))
    const inA = admitted(manual, "L1", "a", 2)
    expect(play([E.Tick({ at: 1_100 })], inA).steps).toEqual([[]])
    const [, formed] = joinWindow(admitted(opened(settings()), "L1", "b", 3), E.Tick({ at: 1_100 }))
    expect(play([E.Tick({ at: 5_100 }), E.Armed({ at: 5_200 })], formed).steps).toEqual([[], []])
  })

  test("every declared host in is a target of its own (every_host), whatever the ranks", () => {
    const everyHost = settings({ rules: { minRanks: 1, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "auto", everyHostForTarget: true } })
    const two = admitted(admitted(opened(everyHost), "L1", "a", 2), "L2", "b", 3)
    expect(play([join("L3", "c", 1)], two).steps).toEqual([["accept L3 as [5], wait 4900"]])
    const [, asked] = joinWindow(two, join("L3", "c", 1))
    expect(play([E.AcceptSent({ member: asked.members[2]!, late: false, at: 200 })], asked).steps).toEqual([["joined c", "watch L3", "formed: 6 rank(s) of a, b, c"]])
  })

  test("a late rejoin whose Accept failed leaves its host in, as it was", () => {
    const [, formed] = joinWindow(admitted(opened(settings({ growing: true })), "L1", "b", 3), E.Tick({ at: 1_100 }))
    const [, asked] = joinWindow(formed, join("L2", "b", 3, 2_000, true))
    const [, rolledBack] = joinWindow(asked, E.AcceptFailed({ member: asked.members[1]! }))
    expect([[...rolledBack.joinedHosts], rolledBack.declaredIn, rolledBack.members.map((member) => member.link), rolledBack.nextRank]).toEqual([["b"], 1, ["L1"], 3])
  })

  test("a rolled-back host leaves the hosts in; only it goes", () => {
    const inA = admitted(opened(settings()), "L1", "a", 2)
    const [, asked] = joinWindow(inA, join("L2", "b", 3))
    const [, rolledBack] = joinWindow(asked, E.AcceptFailed({ member: asked.members[1]! }))
    expect([[...rolledBack.joinedHosts], rolledBack.declaredIn]).toEqual([["a"], 1])
  })
})
