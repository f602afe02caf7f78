/**
 * A duration as a cluster file writes it (`250ms`, `5s`, `10m`, `1h`),
 * decoded by Schema into whole milliseconds and encoded back into the
 * shortest exact spelling.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { formatDuration, parseDuration } from "./Duration.ts"
import { expectedAt, expecting, rangeOf } from "./Expected.ts"

/**
 * The text of a duration, read into `milliseconds`: the schema that holds the
 * bounds (`Strategy.Millis`, or a refinement of it). Its lower bound is named
 * in every refusal; its upper bound only when a value exceeds it, so the usual
 * message stays short.
 */
export const durationText = (milliseconds: Schema.Schema<number>) => {
  const { max, min, minIsExclusive } = rangeOf(milliseconds)
  const floor = minIsExclusive ? ` above ${formatDuration(min)}` : min > 0 ? ` of at least ${formatDuration(min)}` : ""
  const what = `a duration like "250ms", "5s", "10m" or "1h"${floor}`
  return Schema.transformOrFail(Schema.String, milliseconds, {
    strict: true,
    decode: (text, _, ast) => {
      const ms = parseDuration(text)
      if (ms === undefined) return ParseResult.fail(new ParseResult.Type(ast, text))
      // `milliseconds` refuses it too, but cannot say that the size is the trouble.
      if (ms > max) return ParseResult.fail(expectedAt(`${what} up to ${formatDuration(max)}`))
      return ParseResult.succeed(ms)
    },
    encode: (ms) => ParseResult.succeed(formatDuration(ms))
  }).pipe(expecting(what))
}
