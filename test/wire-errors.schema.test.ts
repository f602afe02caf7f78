/**
 * The errors that leave their process are Schemas: each one, written down as
 * the plain object another process would receive, decodes to its class with
 * the same fields and the same message, and encodes back to that very object.
 * The whole set also goes through a channel codec (CBOR, as on a link), so
 * nothing in them is out of the wire's reach.
 *
 * Every encoded form and every message below is written out by hand: a
 * change to a field, a tag or a message's words shows here as a failure.
 */
import { describe, expect, test } from "bun:test"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { AgentError } from "../src/agent/Agent.ts"
import { SpawnError } from "../src/kernel/ProcessChild.ts"
import { RelayError } from "../src/relay/Relay.ts"
import { CudaUnavailable, NativeAbiMismatch, NativeLibraryMissing, NcclError, NcclUnavailable, NvmlError } from "../src/native/Native.ts"
import * as Codec from "../src/wire/Codec.ts"
import { DecodeError } from "../src/wire/Codec.ts"
import { FrameError } from "../src/wire/Frame.ts"
import { LinkError } from "../src/wire/Link.ts"

interface Row {
  readonly schema: Schema.Schema<Error & { readonly _tag: string }, { readonly _tag: string }>
  readonly encoded: { readonly _tag: string } & Record<string, unknown>
  readonly message: string
}

const row = <A extends Error & { readonly _tag: string }, I extends { readonly _tag: string }>(
  schema: Schema.Schema<A, I>,
  encoded: NoInfer<I>,
  message: string
): Row => ({ schema: schema as unknown as Row["schema"], encoded, message })

/** An error's own fields, `_tag` among them: what a peer receives, without the Error around it. */
const fieldsOf = (error: Error): Record<string, unknown> => ({ ...error })

const rows: ReadonlyArray<Row> = [
  row(FrameError, { _tag: "FrameError", reason: "bad-mac", detail: "frame 7 failed authentication" }, "bad-mac: frame 7 failed authentication"),
  row(FrameError, { _tag: "FrameError", reason: "too-large", detail: "a frame of 20 MiB" }, "too-large: a frame of 20 MiB"),
  row(
    LinkError,
    { _tag: "LinkError", channel: "join", peer: "node-2", reason: "closed", detail: "the peer closed the connection" },
    "join link with node-2: closed: the peer closed the connection"
  ),
  row(
    LinkError,
    { _tag: "LinkError", channel: "rendezvous", peer: "rank 3", reason: "bad-sequence", detail: "frame 4 where 5 was next" },
    "rendezvous link with rank 3: bad-sequence: frame 4 where 5 was next"
  ),
  row(DecodeError, { _tag: "DecodeError", channel: "control", reason: "unknown kind 9" }, "undecodable control message: unknown kind 9"),
  row(
    AgentError,
    { _tag: "AgentError", host: "node-2", reason: "lost the launcher (the peer closed the connection)" },
    "agent of node-2: lost the launcher (the peer closed the connection)"
  ),
  row(
    AgentError,
    { _tag: "AgentError", host: "node-2", reason: "the launcher refused the host", permanent: true },
    "agent of node-2: the launcher refused the host"
  ),
  row(
    NativeLibraryMissing,
    { _tag: "NativeLibraryMissing", path: "/opt/cohort/libcohort.so", reason: "no such file" },
    "cohort's native library cannot be loaded from /opt/cohort/libcohort.so (no such file); build it with `bun run build:native` (needs cargo), or point COHORT_NATIVE_LIB at it"
  ),
  row(
    NativeAbiMismatch,
    { _tag: "NativeAbiMismatch", path: "/opt/cohort/libcohort.so", found: 999, expected: 7 },
    "cohort's native library at /opt/cohort/libcohort.so speaks ABI 999, this cohort needs 7: it is left from another version; rebuild it with `bun run build:native`"
  ),
  row(CudaUnavailable, { _tag: "CudaUnavailable", reason: "no CUDA-capable device is detected" }, "CUDA is not usable here: no CUDA-capable device is detected"),
  row(
    NcclUnavailable,
    { _tag: "NcclUnavailable", searched: "libnccl.so.2 not found in COHORT_NCCL_LIB (unset), /usr/lib" },
    "libnccl.so.2 not found in COHORT_NCCL_LIB (unset), /usr/lib"
  ),
  row(NcclError, { _tag: "NcclError", code: 3, detail: "internal error" }, "NCCL error 3: internal error"),
  row(NvmlError, { _tag: "NvmlError", device: 2, detail: "GPU is lost" }, "NVML cannot sample GPU 2: GPU is lost"),
  row(SpawnError, { _tag: "SpawnError", command: "python3 train.py", reason: "No such file or directory" }, "could not start `python3 train.py`: No such file or directory"),
  row(RelayError, { _tag: "RelayError", reason: "the ranks' socket is taken" }, "the ranks' socket is taken")
]

describe("errors that cross a process boundary", () => {
  for (const { encoded, message, schema } of rows) {
    test(`${encoded._tag} ${JSON.stringify(encoded)}: decodes with its message, encodes back the same`, () => {
      const decoded = Schema.decodeUnknownSync(schema)(encoded)
      expect(decoded._tag).toBe(encoded._tag)
      expect(decoded.name).toBe(encoded._tag)
      expect(decoded.message).toBe(message)
      expect(fieldsOf(decoded)).toEqual(encoded)
      expect(Schema.encodeSync(schema)(decoded)).toEqual(encoded)
    })

    test(`${encoded._tag}: JSON text of the encoded form decodes to the same error`, () => {
      const text = JSON.stringify(Schema.encodeSync(schema)(Schema.decodeUnknownSync(schema)(encoded)))
      const back = Schema.decodeUnknownSync(schema)(JSON.parse(text))
      expect(back.message).toBe(message)
      expect(fieldsOf(back)).toEqual(encoded)
    })
  }

  test("every one of them through a channel codec, as a link's frame payload carries it", () => {
    const codec = Codec.make(
      "errors",
      Schema.Union(FrameError, LinkError, DecodeError, AgentError, NativeLibraryMissing, NativeAbiMismatch, CudaUnavailable, NcclUnavailable, NcclError, NvmlError, SpawnError, RelayError)
    )
    for (const { encoded, message, schema } of rows) {
      const error = Schema.decodeUnknownSync(schema)(encoded)
      const { kind, payload } = codec.encode(error as Parameters<typeof codec.encode>[0])
      const received = codec.decode(kind, payload)
      if (Either.isLeft(received)) throw new Error(`${encoded._tag} did not come back: ${received.left.message}`)
      expect<string>(received.right._tag).toBe(encoded._tag)
      expect(received.right.message).toBe(message)
      expect(fieldsOf(received.right)).toEqual(encoded)
    }
  })

  test("a field of another shape is refused, naming the field", () => {
    const refusal = <A, I>(schema: Schema.Schema<A, I>, encoded: unknown): string => {
      const result = Schema.decodeUnknownEither(schema)(encoded)
      if (Either.isRight(result)) throw new Error(`decoded ${JSON.stringify(encoded)}`)
      return result.left.message
    }
    expect(refusal(LinkError, { _tag: "LinkError", channel: "join", peer: "p", reason: "exploded", detail: "d" })).toContain(`["reason"]`)
    expect(refusal(LinkError, { _tag: "LinkError", channel: "carrier-pigeon", peer: "p", reason: "closed", detail: "d" })).toContain(`["channel"]`)
    expect(refusal(NcclError, { _tag: "NcclError", code: "3", detail: "x" })).toContain(`["code"]`)
    expect(refusal(AgentError, { _tag: "AgentError", host: "h", reason: "r", permanent: "yes" })).toContain(`["permanent"]`)
    expect(refusal(FrameError, { _tag: "LinkError", reason: "bad-mac", detail: "d" })).toContain(`["_tag"]`)
  })
})
