/**
 * Where the programs cohort starts are: the relay's, the rank's, and the
 * Python client's package. Only an entry point knows (the source tree, or a
 * bundle: see cli/entryPoints.ts), so it is handed down, to the plan and to
 * every agent, instead of being imported from cli/ by the parts that start
 * processes.
 */
export interface EntryPoints {
  /** The relay's program, run with this Bun. */
  readonly relay: string
  /** An `entry:` job's rank program, run with this Bun. */
  readonly rank: string
  /** The folder holding the Python client (`cohort`), put on `PYTHONPATH` for `command:` ranks. */
  readonly pythonClient: string
}
