/**
 * A small multi-layer perceptron in plain TypeScript, for the training example.
 *
 * Every parameter lives in ONE flat Float32Array (layer by layer: weights
 * row-major `[out][in]`, then biases), and the gradient has the same layout,
 * so a single `ctx.allreduce(grads)` averages every gradient of the model.
 * Hidden layers use tanh (or ReLU); the output is a softmax with the
 * cross-entropy loss. The loops work one sample at a time over typed arrays:
 * no allocation per step, and cheap enough for tens of thousands of samples
 * per second in one process.
 */
import { mulberry32 } from "./spirals.ts"

export type Activation = "tanh" | "relu"

interface Layer {
  readonly inputs: number
  readonly outputs: number
  /** Offset of the `[outputs][inputs]` weights in the flat parameters. */
  readonly weights: number
  /** Offset of the `outputs` biases. */
  readonly biases: number
}

export interface BatchResult {
  /** Mean cross-entropy over the batch. */
  readonly loss: number
  /** How many samples of the batch were classified correctly. */
  readonly correct: number
}

export interface Evaluation {
  readonly loss: number
  /** Fraction in [0, 1]. */
  readonly accuracy: number
}

export class Mlp {
  /** Total number of parameters (the length of `params` and `grads`). */
  readonly size: number
  readonly classes: number
  private readonly layers: ReadonlyArray<Layer>
  /** Per-layer activations of the current sample; `activations[0]` is the input. */
  private readonly activations: Array<Float64Array>
  /** Per-layer gradients of the loss with respect to each layer's output. */
  private readonly deltas: Array<Float64Array>
  /** Float64 accumulator for the batch's gradient. */
  private readonly accumulator: Float64Array

  /** `sizes`: the width of every layer, input first, classes last, e.g. `[2, 32, 32, 3]`. */
  constructor(readonly sizes: ReadonlyArray<number>, readonly activation: Activation = "tanh") {
    if (sizes.length < 2) throw new Error("an MLP needs at least an input and an output layer")
    const layers: Array<Layer> = []
    let offset = 0
    for (let l = 1; l < sizes.length; l++) {
      const inputs = sizes[l - 1]!
      const outputs = sizes[l]!
      layers.push({ inputs, outputs, weights: offset, biases: offset + inputs * outputs })
      offset += inputs * outputs + outputs
    }
    this.layers = layers
    this.size = offset
    this.classes = sizes[sizes.length - 1]!
    this.activations = sizes.map((n) => new Float64Array(n))
    this.deltas = sizes.map((n) => new Float64Array(n))
    this.accumulator = new Float64Array(offset)
  }

  /** Fresh parameters from `seed`: the same on every rank for the same seed (Glorot-uniform weights, zero biases). */
  init(seed: number): Float32Array {
    const params = new Float32Array(this.size)
    const random = mulberry32(seed)
    for (const layer of this.layers) {
      const gain = this.activation === "relu" ? Math.sqrt(2) : 1
      const limit = gain * Math.sqrt(6 / (layer.inputs + layer.outputs))
      for (let i = 0; i < layer.inputs * layer.outputs; i++) params[layer.weights + i] = (2 * random() - 1) * limit
    }
    return params
  }

  /** A zeroed buffer the size of the parameters (for gradients or momentum). */
  zeros(): Float32Array {
    return new Float32Array(this.size)
  }

  /** Forward pass of sample `i`; leaves the class probabilities in the last activation row. Returns the loss. */
  private forward(params: Float32Array, x: Float32Array, label: number, i: number): number {
    const acts = this.activations
    const input = acts[0]!
    const features = input.length
    for (let k = 0; k < features; k++) input[k] = x[i * features + k]!
    const last = this.layers.length - 1
    for (let l = 0; l <= last; l++) {
      const { inputs, outputs, weights, biases } = this.layers[l]!
      const a = acts[l]!
      const out = acts[l + 1]!
      for (let j = 0; j < outputs; j++) {
        let s = params[biases + j]!
        const row = weights + j * inputs
        for (let k = 0; k < inputs; k++) s += params[row + k]! * a[k]!
        out[j] = l === last ? s : this.activation === "tanh" ? Math.tanh(s) : s > 0 ? s : 0
      }
    }
    // Softmax in place, numerically stable.
    const logits = acts[last + 1]!
    let max = -Infinity
    for (let j = 0; j < logits.length; j++) if (logits[j]! > max) max = logits[j]!
    let total = 0
    for (let j = 0; j < logits.length; j++) {
      const e = Math.exp(logits[j]! - max)
      logits[j] = e
      total += e
    }
    for (let j = 0; j < logits.length; j++) logits[j] = logits[j]! / total
    return -Math.log(Math.max(logits[label]!, 1e-12))
  }

  /** The predicted class: the argmax of the probabilities after `forward`. */
  private predicted(): number {
    const probs = this.activations[this.activations.length - 1]!
    let best = 0
    for (let j = 1; j < probs.length; j++) if (probs[j]! > probs[best]!) best = j
    return best
  }

  /**
   * Forward and backward over the samples `indices` of `(x, y)`: overwrites
   * `grads` with the gradient of the batch's MEAN loss (so ranks' gradients
   * average by `allreduce({ op: "avg", weight: indices.length })`).
   */
  forwardBackward(params: Float32Array, grads: Float32Array, x: Float32Array, y: Uint8Array, indices: ReadonlyArray<number>): BatchResult {
    const acc = this.accumulator
    acc.fill(0)
    const acts = this.activations
    const deltas = this.deltas
    const last = this.layers.length - 1
    let loss = 0
    let correct = 0
    for (let n = 0; n < indices.length; n++) {
      const i = indices[n]!
      const label = y[i]!
      loss += this.forward(params, x, label, i)
      if (this.predicted() === label) correct++
      // d loss / d logits = p - onehot(label)
      const top = deltas[last + 1]!
      const probs = acts[last + 1]!
      for (let j = 0; j < top.length; j++) top[j] = probs[j]! - (j === label ? 1 : 0)
      for (let l = last; l >= 0; l--) {
        const { inputs, outputs, weights, biases } = this.layers[l]!
        const a = acts[l]!
        const dOut = deltas[l + 1]!
        const dIn = deltas[l]!
        if (l > 0) dIn.fill(0)
        for (let j = 0; j < outputs; j++) {
          const d = dOut[j]!
          if (d === 0) continue
          acc[biases + j] = acc[biases + j]! + d
          const row = weights + j * inputs
          for (let k = 0; k < inputs; k++) acc[row + k] = acc[row + k]! + d * a[k]!
          if (l > 0) for (let k = 0; k < inputs; k++) dIn[k] = dIn[k]! + params[row + k]! * d
        }
        if (l > 0) {
          // Through the activation of layer l (whose output is a = acts[l]).
          if (this.activation === "tanh") for (let k = 0; k < inputs; k++) dIn[k] = dIn[k]! * (1 - a[k]! * a[k]!)
          else for (let k = 0; k < inputs; k++) if (a[k]! <= 0) dIn[k] = 0
        }
      }
    }
    const scale = indices.length > 0 ? 1 / indices.length : 0
    for (let p = 0; p < acc.length; p++) grads[p] = acc[p]! * scale
    return { loss: indices.length > 0 ? loss / indices.length : 0, correct }
  }

  /** Mean loss and accuracy of `params` on every sample of `(x, y)`. */
  evaluate(params: Float32Array, x: Float32Array, y: Uint8Array): Evaluation {
    let loss = 0
    let correct = 0
    for (let i = 0; i < y.length; i++) {
      loss += this.forward(params, x, y[i]!, i)
      if (this.predicted() === y[i]) correct++
    }
    return { loss: y.length > 0 ? loss / y.length : 0, accuracy: y.length > 0 ? correct / y.length : 0 }
  }
}

/**
 * One SGD step in place. With a `velocity` buffer (zeros at the start, kept
 * between steps) it is heavy-ball momentum: `v = momentum·v + g; p -= lr·v`.
 */
export const sgdStep = (params: Float32Array, grads: Float32Array, lr: number, velocity?: Float32Array, momentum: number = 0.9): void => {
  if (velocity === undefined) {
    for (let p = 0; p < params.length; p++) params[p] = params[p]! - lr * grads[p]!
    return
  }
  for (let p = 0; p < params.length; p++) {
    const v = momentum * velocity[p]! + grads[p]!
    velocity[p] = v
    params[p] = params[p]! - lr * v
  }
}

/** FNV-1a (32-bit) over the bytes of `values`, as 8 hex digits: equal weights, equal checksum. */
export const checksum = (values: Float32Array): string => {
  const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
  let h = 0x811c9dc5
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i]!
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, "0")
}
