/**
 * What a rank's reported metrics (`ctx.progress(samples, { loss, val_acc })`) may hold to be shown on the
 * page, in /state.json and in /metrics: at most METRICS_MAX names, each 1 to METRIC_NAME_MAX characters,
 * each value a finite number. A metric is a label value in /metrics and a cell on the page: a run that
 * reported a thousand names, or a name of a kilobyte, would swamp both.
 *
 * The wire's Progress takes any record, so that one bad name never costs a report its `done` (the epoch would
 * never end). The clients drop what is beyond these bounds before sending, with a warning once per name (this
 * module for TypeScript ranks, python/cohort/_context.py's copy of the same rules for Python ranks), and the
 * launcher bounds what a client of its own sends anyway (training/Coordinator.ts).
 *
 * Effect-free: it is on every rank's start-up path. In wire/, beside the Progress it bounds: the ranks and the
 * launcher both read it.
 */

export const METRICS_MAX = 16
export const METRIC_NAME_MAX = 64

/** A metric left out, and why (said in the warning). */
export interface DroppedMetric {
  readonly name: string
  readonly why: string
}

/** `metrics` within the bounds: the first METRICS_MAX valid names, in the order they came; the others, with their reasons. */
export const boundedMetrics = (
  metrics: Readonly<Record<string, unknown>>
): { readonly kept: Record<string, number>; readonly dropped: ReadonlyArray<DroppedMetric> } => {
  const kept: Record<string, number> = {}
  const dropped: Array<DroppedMetric> = []
  let count = 0
  for (const [name, value] of Object.entries(metrics)) {
    if (name.length === 0 || name.length > METRIC_NAME_MAX) {
      dropped.push({ name: shortName(name), why: `its name has ${name.length} characters (1 to ${METRIC_NAME_MAX})` })
    } else if (typeof value !== "number" || !Number.isFinite(value)) {
      dropped.push({ name, why: `its value ${String(value)} is not a finite number` })
    } else if (count >= METRICS_MAX) {
      dropped.push({ name, why: `a report shows at most ${METRICS_MAX} metrics` })
    } else {
      kept[name] = value
      count += 1
    }
  }
  return { kept, dropped }
}

/** A name as a warning quotes it: a long one cut, so that the warning stays a line. */
const shortName = (name: string): string => (name.length > METRIC_NAME_MAX ? `${name.slice(0, METRIC_NAME_MAX)}…` : name)

/** The warning for a dropped metric, as both clients and the launcher say it. */
export const droppedLine = (who: string, dropped: DroppedMetric): string =>
  `${who} reported metric ${JSON.stringify(dropped.name)}: not shown, ${dropped.why}`
