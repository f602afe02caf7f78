/**
 * JSON for checkpoint states: plain JSON, except that Float32Array and
 * Float64Array survive the trip (as base64 of their bytes), since a model's
 * parameters are what a checkpoint is for.
 *
 * A typed array is written `{"$f32": "<base64>"}`. A user's own object of
 * that shape (one key, `$f32`, `$f64` or `$esc`) is written
 * `{"$esc": {"k": key, "v": value}}`, so nothing of the user's is mistaken
 * for an array on the way back.
 *
 * Effect-free on purpose: ranks use it.
 */
const MARKERS = new Set(["$f32", "$f64", "$esc"])

const toBase64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")

const bytesOf = (view: Float32Array | Float64Array) => new Uint8Array(view.buffer, view.byteOffset, view.byteLength)

/** The single key of an object that looks like one of ours, if it does. */
const markerKey = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null || Array.isArray(value) || ArrayBuffer.isView(value)) return undefined
  const keys = Object.keys(value)
  return keys.length === 1 && MARKERS.has(keys[0]!) ? keys[0] : undefined
}

export const stringifyState = (state: unknown): string =>
  JSON.stringify(state, (_key, value: unknown) => {
    if (value instanceof Float32Array) return { $f32: toBase64(bytesOf(value)) }
    if (value instanceof Float64Array) return { $f64: toBase64(bytesOf(value)) }
    const key = markerKey(value)
    return key === undefined ? value : { $esc: { k: key, v: (value as Record<string, unknown>)[key] } }
  })

export const parseState = (text: string): unknown =>
  JSON.parse(text, (_key, value: unknown) => {
    const key = markerKey(value)
    if (key === undefined) return value
    const inner = (value as Record<string, unknown>)[key]
    if (key === "$esc") {
      const { k, v } = inner as { k: string; v: unknown }
      return { [k]: v }
    }
    if (typeof inner !== "string") return value
    const bytes = new Uint8Array(Buffer.from(inner, "base64"))
    return key === "$f32" ? new Float32Array(bytes.buffer) : new Float64Array(bytes.buffer)
  })
