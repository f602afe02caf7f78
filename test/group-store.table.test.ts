/**
 * The rendezvous store of the ranks' process groups (groupStore.ts), event by event, against answers written out
 * by hand: torch's Store semantics (blocking get and wait, counters, compare_set), who may call (members of the
 * generation announced last), what a new generation does to the old one's waits, the bounds, and the deadline
 * that gives up on a generation that does not form. Values are base64 as on the wire: "QQ==" is "A", "Qg==" is
 * "B", "MQ==" "1", "Mw==" "3", "NQ==" "5".
 */
import { describe, expect, test } from "bun:test"
import { StoreCall, type StoreOp } from "../src/wire/messages/CoordinatorMessages.ts"
import { type GroupStoreState, initialState, step, type StoreEvent, type StoreInstruction } from "../src/launcher/training/groupStore.ts"

const show = (instruction: StoreInstruction): string => {
  switch (instruction._tag) {
    case "Answer": {
      const { error, flag, id, number, value } = instruction.answer
      const parts = [
        value === undefined ? "" : ` value=${value}`,
        number === undefined ? "" : ` number=${number}`,
        flag === undefined ? "" : ` flag=${flag}`,
        error === undefined ? "" : ` error: ${error}`
      ]
      return `${instruction.rank} ← #${id}${parts.join("")}`
    }
    case "Lose":
      return `lose ${instruction.ranks.join(",")}: ${instruction.reason}`
    case "Warn":
      return `warning: ${instruction.message}`
  }
}

/** A store driven event by event; each step gives its instructions as lines. */
const store = (formWithinMs = 30_000) => {
  let state: GroupStoreState = initialState({ formWithinMs })
  let id = 0
  const run = (event: StoreEvent) => {
    const [instructions, next] = step(state, event)
    state = next
    return instructions.map(show)
  }
  return {
    announce: (generation: number, members: ReadonlyArray<number>, at = 0) => run({ _tag: "Announced", generation, members, at }),
    call: (rank: number, generation: number, op: StoreOp, keys: ReadonlyArray<string>, fields: { value?: string; expected?: string; amount?: number } = {}, at = 0) =>
      run({ _tag: "Called", rank, call: new StoreCall({ generation, id: ++id, op, keys, ...fields }), at }),
    formed: (rank: number, generation: number, at = 0) => run({ _tag: "Formed", rank, generation, at }),
    tick: (at: number) => run({ _tag: "Tick", at }),
    get state() {
      return state
    }
  }
}

describe("torch's Store operations, for a generation's members", () => {
  test("set then get; get of a missing key waits for its set, and so does wait", () => {
    const s = store()
    s.announce(1, [0, 1, 2])
    expect(s.call(0, 1, "set", ["a"], { value: "QQ==" })).toEqual(["0 ← #1"])
    expect(s.call(1, 1, "get", ["a"])).toEqual(["1 ← #2 value=QQ=="])
    expect(s.call(1, 1, "get", ["b"])).toEqual([])
    expect(s.call(2, 1, "wait", ["a", "b"])).toEqual([])
    expect(s.call(0, 1, "set", ["b"], { value: "Qg==" })).toEqual(["0 ← #5", "1 ← #3 value=Qg==", "2 ← #4"])
  })

  test("add keeps a decimal counter from 0, and get of it gives its digits", () => {
    const s = store()
    s.announce(1, [0, 1])
    expect(s.call(0, 1, "add", ["n"], { amount: 1 })).toEqual(["0 ← #1 number=1"])
    expect(s.call(1, 1, "add", ["n"], { amount: 2 })).toEqual(["1 ← #2 number=3"])
    expect(s.call(1, 1, "add", ["n"], { amount: 0 })).toEqual(["1 ← #3 number=3"])
    expect(s.call(0, 1, "get", ["n"])).toEqual(["0 ← #4 value=Mw=="])
    // A counter's add releases a waiting get, as a set does.
    expect(s.call(0, 1, "get", ["m"])).toEqual([])
    expect(s.call(1, 1, "add", ["m"], { amount: 5 })).toEqual(["1 ← #6 number=5", "0 ← #5 value=NQ=="])
    s.call(0, 1, "set", ["text"], { value: "QQ==" })
    expect(s.call(0, 1, "add", ["text"], { amount: 1 })).toEqual(["0 ← #8 error: store key text holds no counter: add needs one it made"])
  })

  test("compare_set: sets when the key holds the expected value, or is missing and the expected one is empty", () => {
    const s = store()
    s.announce(1, [0, 1])
    expect(s.call(0, 1, "compare_set", ["k"], { expected: "QQ==", value: "Qg==" })).toEqual(["0 ← #1 value=QQ=="])
    expect(s.call(0, 1, "check", ["k"])).toEqual(["0 ← #2 flag=false"])
    expect(s.call(0, 1, "compare_set", ["k"], { expected: "", value: "QQ==" })).toEqual(["0 ← #3 value=QQ=="])
    expect(s.call(1, 1, "compare_set", ["k"], { expected: "Qg==", value: "MQ==" })).toEqual(["1 ← #4 value=QQ=="])
    expect(s.call(1, 1, "compare_set", ["k"], { expected: "QQ==", value: "MQ==" })).toEqual(["1 ← #5 value=MQ=="])
    expect(s.call(1, 1, "get", ["k"])).toEqual(["1 ← #6 value=MQ=="])
  })

  test("check, delete_key and num_keys", () => {
    const s = store()
    s.announce(1, [0])
    s.call(0, 1, "set", ["a"], { value: "QQ==" })
    s.call(0, 1, "set", ["b"], { value: "Qg==" })
    expect(s.call(0, 1, "check", ["a", "b"])).toEqual(["0 ← #3 flag=true"])
    expect(s.call(0, 1, "num_keys", [])).toEqual(["0 ← #4 number=2"])
    expect(s.call(0, 1, "delete_key", ["a"])).toEqual(["0 ← #5 flag=true"])
    expect(s.call(0, 1, "delete_key", ["a"])).toEqual(["0 ← #6 flag=false"])
    expect(s.call(0, 1, "check", ["a", "b"])).toEqual(["0 ← #7 flag=false"])
    expect(s.call(0, 1, "num_keys", [])).toEqual(["0 ← #8 number=1"])
  })

  test("a call missing what its operation needs is answered with why", () => {
    const s = store()
    s.announce(1, [0])
    expect(s.call(0, 1, "set", ["a"])).toEqual(["0 ← #1 error: a store set needs a value"])
    expect(s.call(0, 1, "add", ["a"])).toEqual(["0 ← #2 error: a store add needs an amount"])
    expect(s.call(0, 1, "get", ["a", "b"])).toEqual(["0 ← #3 error: a store get names exactly one key, got 2"])
    expect(s.call(0, 1, "wait", [])).toEqual(["0 ← #4 error: a store wait names at least one key"])
    expect(s.call(0, 1, "compare_set", ["a"], { value: "QQ==" })).toEqual(["0 ← #5 error: a store compare_set needs an expected and a desired value"])
  })
})

describe("who may call", () => {
  test("a rank outside the members is refused, and logged once; it learns nothing of the keys", () => {
    const s = store()
    s.announce(2, [0, 1])
    s.call(0, 2, "set", ["addr/0"], { value: "QQ==" })
    expect(s.call(5, 2, "get", ["addr/0"])).toEqual([
      "5 ← #2 error: rank 5 is not a member of generation 2",
      "warning: refused rank 5's process-group store call: rank 5 is not a member of generation 2 (further refusals of this rank are not logged)"
    ])
    expect(s.call(5, 2, "set", ["addr/0"], { value: "Qg==" })).toEqual(["5 ← #3 error: rank 5 is not a member of generation 2"])
    // Its set changed nothing.
    expect(s.call(1, 2, "get", ["addr/0"])).toEqual(["1 ← #4 value=QQ=="])
  })

  test("a generation not announced is refused (and logged); an older one quietly (its member is about to hear of the new one)", () => {
    const s = store()
    expect(s.call(0, 1, "set", ["a"], { value: "QQ==" })).toEqual([
      "0 ← #1 error: generation 1 has not been announced",
      "warning: refused rank 0's process-group store call: generation 1 has not been announced (further refusals of this rank are not logged)"
    ])
    s.announce(1, [0, 1])
    s.announce(2, [0, 1])
    expect(s.call(1, 1, "get", ["a"])).toEqual(["1 ← #2 error: generation 1 is over: generation 2 was announced"])
    expect(s.call(1, 3, "get", ["a"])).toEqual([
      "1 ← #3 error: generation 3 has not been announced",
      "warning: refused rank 1's process-group store call: generation 3 has not been announced (further refusals of this rank are not logged)"
    ])
  })

  test("a new generation ends the old one's waits at once, and starts with no keys", () => {
    const s = store()
    s.announce(1, [0, 1, 2])
    s.call(0, 1, "set", ["x"], { value: "QQ==" })
    s.call(0, 1, "get", ["addr/2"])
    s.call(1, 1, "wait", ["addr/2"])
    expect(s.announce(2, [0, 1])).toEqual([
      "0 ← #2 error: generation 1 is over: generation 2 was announced",
      "1 ← #3 error: generation 1 is over: generation 2 was announced"
    ])
    expect(s.call(0, 2, "check", ["x"])).toEqual(["0 ← #4 flag=false"])
    // An announcement no newer than the current one changes nothing.
    expect(s.announce(2, [0])).toEqual([])
    expect(s.announce(1, [0])).toEqual([])
    expect(s.call(1, 2, "num_keys", [])).toEqual(["1 ← #5 number=0"])
  })
})

describe("bounds", () => {
  test("a generation holds at most 64 keys per member and 64 more; past that a set is refused, a key already held may change", () => {
    const s = store()
    s.announce(1, [0])
    for (let i = 0; i < 128; i++) s.call(0, 1, "set", [`k${i}`], { value: "QQ==" })
    expect(s.call(0, 1, "set", ["k128"], { value: "QQ==" })).toEqual(["0 ← #129 error: generation 1's store holds its limit of 128 keys"])
    expect(s.call(0, 1, "set", ["k0"], { value: "Qg==" })).toEqual(["0 ← #130"])
    expect(s.call(0, 1, "num_keys", [])).toEqual(["0 ← #131 number=128"])
  })

  test("16 waits at most per member", () => {
    const s = store()
    s.announce(1, [0, 1])
    for (let i = 0; i < 16; i++) expect(s.call(1, 1, "get", [`missing${i}`])).toEqual([])
    expect(s.call(1, 1, "get", ["one-more"])).toEqual(["1 ← #17 error: rank 1 already waits for 16 store keys (at most 16)"])
    // Another member's waits are its own.
    expect(s.call(0, 1, "get", ["missing0"])).toEqual([])
  })

  test("values: 16 MiB of them per generation", () => {
    const s = store()
    s.announce(1, [0, 1])
    const mib = "A".repeat(1 << 20)
    for (let i = 0; i < 16; i++) expect(s.call(0, 1, "set", [`v${i}`], { value: mib })).toEqual([`0 ← #${i + 1}`])
    expect(s.call(1, 1, "set", ["v16"], { value: "QQ==" })).toEqual(["1 ← #17 error: generation 1's store holds its limit of 16777216 bytes"])
    // Replacing a value counts what it frees.
    expect(s.call(1, 1, "set", ["v0"], { value: "QQ==" })).toEqual(["1 ← #18"])
    expect(s.call(1, 1, "set", ["v16"], { value: "QQ==" })).toEqual(["1 ← #19"])
  })
})

describe("a generation that does not form in time", () => {
  test("formed by every member before the deadline: nothing is lost", () => {
    const s = store(30_000)
    s.announce(1, [0, 1], 1_000)
    s.call(0, 1, "set", ["a"], { value: "QQ==" }, 1_100)
    s.call(1, 1, "get", ["a"], {}, 1_200)
    s.formed(0, 1, 2_000)
    s.formed(1, 1, 2_100)
    expect(s.tick(60_000)).toEqual([])
  })

  test("the deadline counts from the announcement: 29.999 s after it nothing, at 30 s the members that never came are lost, once", () => {
    const s = store(30_000)
    s.announce(3, [0, 1, 2, 3], 10_000)
    s.call(0, 3, "set", ["a"], { value: "QQ==" }, 10_100)
    s.call(2, 3, "get", ["b"], {}, 10_200)
    expect(s.tick(39_999)).toEqual([])
    expect(s.tick(40_000)).toEqual(["lose 1,3: never came to generation 3's rendezvous within 30 s (rank(s) 0, 2 waited for it)"])
    expect(s.tick(41_000)).toEqual([])
  })

  test("every member came but some never formed: those are lost", () => {
    const s = store(5_000)
    s.announce(1, [0, 1, 2], 0)
    for (const rank of [0, 1, 2]) s.call(rank, 1, "set", [`r${rank}`], { value: "QQ==" }, 10)
    s.formed(1, 1, 100)
    expect(s.tick(5_000)).toEqual(["lose 0,2: did not complete generation 1's rendezvous within 5 s"])
  })

  test("no member came: all are lost", () => {
    const s = store(5_000)
    s.announce(1, [4, 2], 0)
    expect(s.tick(5_000)).toEqual(["lose 2,4: never came to generation 1's rendezvous within 5 s (no member did)"])
  })

  test("a newer generation brings a deadline of its own; a formed report of another generation or a non-member counts for nothing", () => {
    const s = store(5_000)
    s.announce(1, [0, 1], 0)
    s.announce(2, [0], 4_000)
    expect(s.tick(6_000)).toEqual([])
    s.formed(0, 1, 6_100)
    s.formed(7, 2, 6_200)
    expect(s.tick(9_000)).toEqual(["lose 0: never came to generation 2's rendezvous within 5 s (no member did)"])
  })

  test("before any announcement, a tick does nothing", () => {
    expect(store(1).tick(1_000_000)).toEqual([])
  })
})
