/**
 * What a run wrote, read back through its Schemas: an `--events` file line by
 * line (`decodeEventLine`) and a `/state.json` or stream state (`decodeRunState`).
 * A test or bench that reads them learns of a line the launcher wrote in a
 * shape the Schemas do not accept, with where it is, instead of going on with
 * a cast that only hides it.
 */
import { readFileSync } from "node:fs"
import * as Either from "effect/Either"
import { decodeEventLine, type RunEvent } from "../../src/launcher/view/RunEvents.ts"
import { decodeRunState, problemOf, type RunState } from "../../src/launcher/view/RunStateSchema.ts"

/** Every event in the events file at `path`; throws naming the file and line of the first that does not decode. */
export const readEvents = (path: string): Array<RunEvent> =>
  readFileSync(path, "utf8").trim().split("\n").map((line, index) =>
    Either.getOrThrowWith(decodeEventLine(line), (error) => new Error(`${path}:${index + 1}: ${error.message}`))
  )

/** `json` as a run state; throws naming `where` (a URL, a stream's event number) and the field that does not decode. */
export const decodeState = (json: unknown, where: string): RunState =>
  Either.getOrThrowWith(decodeRunState(json), (error) => new Error(`${where}: not a run state of this cohort version (${problemOf(error)})`))
