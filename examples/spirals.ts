/**
 * A deterministic synthetic dataset for the training example: points on
 * `classes` interleaved spiral arms in the plane, with Gaussian noise.
 *
 * Sample `i` depends only on `(i, seed)` (each sample seeds its own PRNG), so
 * every rank builds the same dataset without exchanging it, and a range of
 * indices means the same samples everywhere. Its class is `i % classes`, so
 * any contiguous range of indices holds every class in equal measure.
 *
 * The arms wind 1.5 turns around the origin: no straight line separates them
 * (softmax regression stays below 50%, chance being 33%), while a 2-32-32-3
 * MLP reaches about 99% on held-out points (the misses are noisy points near
 * the centre, where the arms meet).
 */

/** mulberry32: a tiny, fast, seedable 32-bit PRNG; returns floats in [0, 1). */
export const mulberry32 = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** A 32-bit integer hash (lowbias32) to decorrelate per-sample seeds. */
const hash32 = (value: number): number => {
  let x = value >>> 0
  x ^= x >>> 16
  x = Math.imul(x, 0x7feb352d)
  x ^= x >>> 15
  x = Math.imul(x, 0x846ca68b)
  x ^= x >>> 16
  return x >>> 0
}

export interface Dataset {
  /** Row-major features: sample i is `(x[2i], x[2i + 1])`. */
  readonly x: Float32Array
  /** Labels in `[0, classes)`. */
  readonly y: Uint8Array
  readonly classes: number
  readonly count: number
}

export interface SpiralOptions {
  /** Number of arms, one class each (default 3). */
  readonly classes?: number
  /** Turns each arm makes from the centre to the rim (default 1.5). */
  readonly turns?: number
  /** Standard deviation of the Gaussian noise added to each coordinate (default 0.04; the arm's radius is 1). */
  readonly noise?: number
}

/** The seed of the training set when none is given. */
export const TRAIN_SEED = 1
/** The held-out evaluation set's seed: different samples from the same distribution. */
export const EVAL_SEED = 0x5eed_e7a1

/** `count` spiral samples; sample `i` is a function of `(i, seed)` and the options only. */
export const spirals = (count: number, seed: number = TRAIN_SEED, options: SpiralOptions = {}): Dataset => {
  const classes = options.classes ?? 3
  const turns = options.turns ?? 1.5
  const noise = options.noise ?? 0.04
  const x = new Float32Array(count * 2)
  const y = new Uint8Array(count)
  const base = hash32(seed ^ 0x9e3779b9)
  for (let i = 0; i < count; i++) {
    const random = mulberry32(hash32(base ^ hash32(i)))
    const label = i % classes
    // Position along the arm: radius from 0.05 to 1, denser towards the rim
    // (sqrt), so the tangled centre is not over-represented.
    const r = 0.05 + 0.95 * Math.sqrt(random())
    const angle = (2 * Math.PI * label) / classes + 2 * Math.PI * turns * r
    // Box–Muller for two independent standard normals.
    const u1 = 1 - random()
    const u2 = random()
    const m = Math.sqrt(-2 * Math.log(u1))
    x[2 * i] = r * Math.cos(angle) + noise * m * Math.cos(2 * Math.PI * u2)
    x[2 * i + 1] = r * Math.sin(angle) + noise * m * Math.sin(2 * Math.PI * u2)
    y[i] = label
  }
  return { x, y, classes, count }
}

/** The held-out evaluation set: `count` samples drawn with `EVAL_SEED`. */
export const evaluationSet = (count: number = 3000, options: SpiralOptions = {}): Dataset =>
  spirals(count, EVAL_SEED, options)
