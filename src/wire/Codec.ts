/**
 * Messages ⇄ frame payloads: a `Schema` union per channel, CBOR on the wire.
 *
 * cbor-x always gets explicit options: without them it turns on a
 * non-standard records extension and decodes maps to `Map`, and its
 * sequential modes keep per-stream state that desyncs when a peer restarts.
 * A message's kind byte is its position in the channel's union, and must agree
 * with the tag inside the payload.
 */
import { Decoder, Encoder } from "cbor-x"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"

const encoder = new Encoder({ useRecords: false })
const decoder = new Decoder({ useRecords: false, mapsAsObjects: true, copyBuffers: true })

/** A payload that is not a message of the channel. A Schema: it ends the link, as its `LinkError`. */
export class DecodeError extends Schema.TaggedError<DecodeError>()("DecodeError", {
  channel: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `undecodable ${this.channel} message: ${this.reason}`
  }
}

export interface Codec<A> {
  readonly channel: string
  readonly encode: (message: A) => { readonly kind: number; readonly payload: Uint8Array }
  readonly decode: (kind: number, payload: Uint8Array) => Either.Either<A, DecodeError>
}

/** The tags of a union of tagged classes, in declaration order. */
const tagsOf = (union: Schema.Schema.Any): ReadonlyArray<string> => {
  const ast = Schema.encodedSchema(union).ast
  const members = SchemaAST.isUnion(ast) ? ast.types : [ast]
  return members.map((member) => {
    const tag = SchemaAST.isTypeLiteral(member)
      ? member.propertySignatures.find((signature) => signature.name === "_tag")?.type
      : undefined
    if (tag === undefined || !SchemaAST.isLiteral(tag) || typeof tag.literal !== "string") {
      throw new Error("a channel's messages must all be tagged structs")
    }
    return tag.literal
  })
}

export const make = <A extends { readonly _tag: string }, I>(channel: string, union: Schema.Schema<A, I>): Codec<A> => {
  const tags = tagsOf(union)
  const encodeSync = Schema.encodeSync(union)
  const decodeEither = Schema.decodeUnknownEither(union)
  const fail = (reason: string) => Either.left(new DecodeError({ channel, reason }))
  // Messages are immutable: one sent to many peers is encoded once (WorldFormed to every host: ~7 ms each in a 1,000-host world).
  const encoded = new WeakMap<A, { readonly kind: number; readonly payload: Uint8Array }>()
  return {
    channel,
    encode: (message) => {
      const known = encoded.get(message)
      if (known !== undefined) return known
      const kind = tags.indexOf(message._tag)
      // encode() returns a view into a shared slab: slice before keeping it.
      const result = { kind, payload: encoder.encode(encodeSync(message)).slice() }
      encoded.set(message, result)
      return result
    },
    decode: (kind, payload) => {
      const expected = tags[kind]
      if (expected === undefined) return fail(`unknown kind ${kind}`)
      let raw: unknown
      try {
        raw = decoder.decode(payload)
      } catch (error) {
        return fail(`not CBOR: ${error instanceof Error ? error.message : String(error)}`)
      }
      if (typeof raw !== "object" || raw === null || (raw as { _tag?: unknown })._tag !== expected) {
        return fail(`kind ${kind} (${expected}) does not match the payload`)
      }
      return Either.mapLeft(decodeEither(raw), (error) => new DecodeError({
        channel,
        reason: ParseResult.TreeFormatter.formatErrorSync(error)
      }))
    }
  }
}
