/**
 * A cluster file parsed as a launch parses it, with the warnings its load said (in the order said): the
 * notes `parseCluster` logs at Warning level, captured instead of printed.
 */
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import { type ClusterConfig, parseCluster } from "../../src/config/ClusterConfig.ts"

export const loadWithWarnings = async (text: string, file = "cluster.yml"): Promise<{ readonly config: ClusterConfig; readonly warnings: ReadonlyArray<string> }> => {
  const warnings: Array<string> = []
  const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => {
    if (logLevel._tag === "Warning") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
  }))
  const config = await Effect.runPromise(parseCluster(text, file).pipe(Effect.provide(capture)))
  return { config, warnings }
}
