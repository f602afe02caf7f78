/**
 * JSON for checkpoint states: plain JSON, except that Float32Array and
 * Float64Array survive the trip (as base64 of their bytes), since a model's
 * parameters are what a checkpoint is for.
 *
 * Effect-free on purpose: ranks use it.
 */
const toBase64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")

export const stringifyState = (state: unknown): string =>
  JSON.stringify(state, (_key, value: unknown) => {
    if (value instanceof Float32Array) return { $f32: toBase64(new Uint8Array(value.buffer, value.byteOffset, value.byteLength)) }
    if (value instanceof Float64Array) return { $f64: toBase64(new Uint8Array(value.buffer, value.byteOffset, value.byteLength)) }
    return value
  })

export const parseState = (text: string): unknown =>
  JSON.parse(text, (_key, value: unknown) => {
    if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      const fields = value as Record<string, unknown>
      const keys = Object.keys(fields)
      if (keys.length === 1 && typeof fields.$f32 === "string") return new Float32Array(new Uint8Array(Buffer.from(fields.$f32, "base64")).buffer)
      if (keys.length === 1 && typeof fields.$f64 === "string") return new Float64Array(new Uint8Array(Buffer.from(fields.$f64, "base64")).buffer)
    }
    return value
  })
