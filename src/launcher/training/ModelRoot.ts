/**
 * The root of model synchronisation for `ctx.sync`, held by the controller:
 * - `cpu_cadence`: every K steps the ranks' parameters are averaged; with an
 *   outer optimizer the average is not taken as is but as an outer gradient
 *   (anchor − average) applied to the anchor with momentum: DiLoCo
 *   (Nesterov momentum) or SlowMo (heavy-ball momentum).
 * - `cpu_async`: elastic averaging (EASGD) against a centre variable, one
 *   rank at a time and without a barrier: the rank moves α of the way to the
 *   centre and the centre α of the way to the rank (or, with an outer
 *   optimizer, that move is its outer gradient).
 * Its anchor or centre and the outer momentum are part of the consensus
 * checkpoint (`snapshot`, `restore`).
 */
export interface OuterOptimizer {
  readonly kind: "diloco" | "slowmo"
  readonly lr: number
  readonly momentum: number
}

export interface RootState {
  readonly anchor: Float32Array
  readonly momentum: Float32Array
}

export class ModelRoot {
  private anchor: Float32Array | undefined
  private velocity: Float32Array | undefined

  constructor(private readonly outer: OuterOptimizer | undefined, private readonly alpha: number) {}

  /** The average of a `cpu_cadence` sync round: what every rank continues from. */
  sync(average: Float32Array): Float32Array {
    if (this.outer === undefined || !this.fits(average)) return this.reset(average)
    const anchor = this.anchor!
    for (let i = 0; i < anchor.length; i++) this.step(i, anchor[i]! - average[i]!)
    return anchor.slice()
  }

  /** One rank's `cpu_async` exchange: its parameters in, its new parameters out. */
  elastic(params: Float32Array): Float32Array {
    if (!this.fits(params)) return this.reset(params).slice()
    const centre = this.anchor!
    const moved = new Float32Array(params.length)
    for (let i = 0; i < params.length; i++) {
      const pull = this.alpha * (params[i]! - centre[i]!)
      moved[i] = params[i]! - pull
      if (this.outer === undefined) centre[i]! += pull
      else this.step(i, -pull)
    }
    return moved
  }

  snapshot(): RootState | undefined {
    return this.anchor === undefined ? undefined : { anchor: this.anchor.slice(), momentum: this.velocity!.slice() }
  }

  restore(state: RootState): void {
    this.anchor = state.anchor.slice()
    this.velocity = state.momentum.length === state.anchor.length ? state.momentum.slice() : new Float32Array(state.anchor.length)
  }

  /** Apply outer gradient `gradient` to element `i` of the anchor. */
  private step(i: number, gradient: number): void {
    const { kind, lr, momentum } = this.outer!
    const velocity = this.velocity!
    velocity[i] = momentum * velocity[i]! + gradient
    const update = kind === "diloco" ? momentum * velocity[i]! + gradient : velocity[i]!
    this.anchor![i]! -= lr * update
  }

  private fits(params: Float32Array): boolean {
    return this.anchor !== undefined && this.anchor.length === params.length
  }

  /** The first exchange (or a model of another size) starts the anchor where the ranks are. */
  private reset(params: Float32Array): Float32Array {
    this.anchor = params.slice()
    this.velocity = new Float32Array(params.length)
    return params
  }
}
