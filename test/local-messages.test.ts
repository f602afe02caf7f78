/**
 * The rank ↔ relay messages' schemas (what the relay checks a rank's frames
 * against), against literal tables: each message as a rank writes it, and
 * what is refused.
 */
import { describe, expect, test } from "bun:test"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { RankToRelay, RelayToRank } from "../src/wire/messages/LocalMessages.ts"

const fromRank = Schema.decodeUnknownEither(RankToRelay)
const toRank = Schema.decodeUnknownEither(RelayToRank)
const reduce = { t: "reduce", op: "avg", bytes: 4_096, weight: 0.25, epoch: 3, seg: "/dev/shm/cohort-x/r0-1.seg", offset: 64, tensor: false }

describe("a rank's messages", () => {
  test("each as a rank writes it", () => {
    for (const message of [
      { t: "hello", rank: 0 },
      { t: "hello", rank: 4_095 },
      reduce,
      { ...reduce, op: "sum", bytes: 0, offset: 0 },
      { ...reduce, op: "sync" },
      { ...reduce, op: "elastic", tensor: undefined },
      { t: "idle", epoch: 2 },
      { t: "report", report: { _tag: "Heartbeat" } }
    ]) {
      expect({ message, decoded: Either.isRight(fromRank(message)) }).toEqual({ message, decoded: true })
    }
  })

  test("refused: an unknown message, a bad rank, and every malformed reduce", () => {
    for (const message of [
      { t: "shout" },
      { rank: 0 },
      { t: "hello", rank: -1 },
      { t: "hello", rank: 1.5 },
      { t: "hello", rank: "0" },
      { ...reduce, op: "max" },
      { ...reduce, offset: 6 },
      { ...reduce, offset: -4 },
      { ...reduce, bytes: -4 },
      { ...reduce, bytes: 2.5 },
      { ...reduce, bytes: 6 },
      { ...reduce, seg: 7 },
      { ...reduce, weight: "1" },
      { ...reduce, epoch: -1 },
      { ...reduce, tensor: "yes" },
      { t: "idle" },
      { t: "report" },
      "hello",
      null
    ]) {
      expect({ message, decoded: Either.isRight(fromRank(message)) }).toEqual({ message, decoded: false })
    }
  })
})

describe("the relay's messages", () => {
  test("a result (in place, or in the result segment), an error, an order, a refusal", () => {
    for (const message of [
      { t: "reduced", bytes: 4_096 },
      { t: "reduced", bytes: 4_096, seg: "/dev/shm/cohort-x/result.seg" },
      { t: "reduced", error: "rank 2 left the round" },
      { t: "order", order: { _tag: "EpochStart", epoch: 1 } },
      { t: "refused", reason: "rank 9 is not a rank of gpu-a awaiting its relay" }
    ]) {
      expect({ message, decoded: Either.isRight(toRank(message)) }).toEqual({ message, decoded: true })
    }
    for (const message of [{ t: "reduced", bytes: -1 }, { t: "refused" }, { t: "order" }, { t: "hello", rank: 0 }]) {
      expect({ message, decoded: Either.isRight(toRank(message)) }).toEqual({ message, decoded: false })
    }
  })
})
