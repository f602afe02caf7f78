/**
 * "did you mean --resume?" for a mistyped word: the known word nearest by
 * edit distance, when it is near enough to be a slip of the keyboard rather
 * than another word altogether.
 */

/**
 * The edits that turn `a` into `b`: an insertion, a deletion, a substitution, or two neighbours swapped
 * (`--rnaks`) count one each (Levenshtein's distance with transpositions, optimal string alignment).
 */
export const editDistance = (a: string, b: string): number => {
  const rows: Array<Array<number>> = [Array.from({ length: b.length + 1 }, (_, j) => j)]
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(rows[i - 1]![j]! + 1, row[j - 1]! + 1, rows[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, rows[i - 2]![j - 2]! + 1)
      row[j] = best
    }
    rows.push(row)
  }
  return rows[a.length]![b.length]!
}

/**
 * The known word `word` was meant to be, or undefined. Words of fewer than three letters (dashes aside:
 * `-x`) get no guess: every short flag is one edit from every other. Otherwise:
 * - the start of exactly one known word is that word, abbreviated (`--dry` → `--dry-run`);
 * - else the nearest known word, within one edit for a word of up to five letters and two for a longer
 *   one (`--resum` → `--resume`, `--dryrun` → `--dry-run`); of equally near ones, the first listed.
 */
export const nearest = (word: string, known: ReadonlyArray<string>): string | undefined => {
  const letters = word.replace(/^-+/, "").length
  if (letters < 3) return undefined
  const started = known.filter((candidate) => candidate.startsWith(word))
  if (started.length === 1) return started[0]
  return nearestWithin(word, known, letters <= 5 ? 1 : 2)
}

/** The known word nearest to `word`, at most `limit` edits away (of equally near ones, the first listed), or undefined. */
export const nearestWithin = (word: string, known: ReadonlyArray<string>, limit: number): string | undefined => {
  let best: string | undefined
  let bestDistance = limit + 1
  for (const candidate of known) {
    const distance = editDistance(word, candidate)
    if (distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  return best
}

/** ` (did you mean --resume?)` for `word`, or nothing. */
export const didYouMean = (word: string, known: ReadonlyArray<string>): string => {
  const found = nearest(word, known)
  return found === undefined ? "" : ` (did you mean ${found}?)`
}
