/**
 * `env:` sections of a cluster file (cluster-wide and per host): variables
 * for every rank. Keys are shell-style names; values are written as strings
 * (numbers and booleans are taken as their text). Some keys are cohort's to
 * set and are refused: its own `COHORT_*` variables, and the device-scoping
 * variables that cohort sets per rank from `devices:`.
 */
import type { Field } from "./Yaml.ts"

const deviceScoping = [
  "CUDA_VISIBLE_DEVICES",
  "CUDA_DEVICE_ORDER",
  "HIP_VISIBLE_DEVICES",
  "ROCR_VISIBLE_DEVICES",
  "GPU_DEVICE_ORDINAL"
]

/** Why a key may not be set in `env:`, or undefined when it may. */
export const reservedReason = (key: string): string | undefined => {
  if (key.startsWith("COHORT_")) return `${key} is reserved for cohort's own processes`
  if (deviceScoping.includes(key)) {
    return `${key} is reserved: device scoping belongs in \`devices:\` of the worker; cohort sets it for each rank`
  }
  return undefined
}

export const decodeEnv = (field: Field): Readonly<Record<string, string>> => {
  const env: Record<string, string> = {}
  for (const [key, value] of field.entries("a mapping of variable names to values")) {
    value.attempt(() => {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
        value.fail(`"${key}" is not a valid variable name (letters, digits and _, not starting with a digit)`, value.anchor)
      }
      const reason = reservedReason(key)
      if (reason !== undefined) value.fail(reason, value.anchor)
      const scalar = value.scalar
      if (typeof scalar !== "string" && typeof scalar !== "number" && typeof scalar !== "boolean") {
        value.expected("a string value")
      }
      env[key] = String(scalar)
    })
  }
  return env
}
