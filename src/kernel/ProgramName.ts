/**
 * How the user called a cohort program: `cohort launch` (the installed
 * command, through `cohort.ts`) or `bun run launch` (the checkout's
 * scripts). The usage and the commands cohort suggests (`continue with: …`)
 * say it as the user would type it again.
 *
 * Kept on the process (a registered symbol on `globalThis`), not in a module
 * variable: the launcher runs from cohort's bundle (`bundle.ts`), which holds
 * its own copy of this module, while the dispatcher ran from the sources. Not
 * an environment variable either: the ranks and agents would inherit it.
 */

/** The programs `cohort` dispatches to, by the word that names them (the scripts of package.json too). */
export type Tool = "launch" | "agent" | "status"

const KEY = Symbol.for("cohort.invokedAsCohort")

/** Said by `cohort.ts` before it runs a program: the user typed `cohort <tool>`. */
export const markInvokedAsCohort = (): void => {
  ;(globalThis as Record<symbol, unknown>)[KEY] = true
}

/** The words that run `tool` the way this process was run: `cohort launch` or `bun run launch`. */
export const invokedAs = (tool: Tool): string => ((globalThis as Record<symbol, unknown>)[KEY] === true ? `cohort ${tool}` : `bun run ${tool}`)
