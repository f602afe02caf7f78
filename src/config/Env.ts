/**
 * `env:` sections of a cluster file (cluster-wide and per host): variables
 * for every rank. Keys are shell-style names; values are written as strings
 * (numbers and booleans are taken as their text). Some keys are cohort's to
 * set and are refused: its own `COHORT_*` variables, and the device-scoping
 * variables that cohort sets per rank from `devices:`.
 *
 * A value may instead be taken from the launcher's own environment when the
 * file is read: `HF_TOKEN: { from_env: HF_TOKEN }`. That is how a rank is
 * handed a secret: it is in no file and in no argv (a `command:` job's args
 * and the words after `--` are its ranks' argv, in /proc/<pid>/cmdline, which
 * every local user can read), it crosses to other hosts sealed in their
 * `Accept`, and it lands in the rank's environment, whose /proc/<pid>/environ
 * only the run's user and root can read.
 */
import { isMap } from "yaml"
import type { Field } from "./reading/Yaml.ts"

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

const variableName = /^[A-Za-z_][A-Za-z0-9_]*$/

/** `{ from_env: NAME }`: the launcher's own variable NAME, which must be set. */
const fromLauncher = (key: string, value: Field, environment: Readonly<Record<string, string | undefined>>): string => {
  const name = value.map(["from_env"]).from_env
  if (!name.present) return name.expected("from_env: the name of a variable of the launcher's environment")
  const wanted = name.string("the name of a variable of the launcher's environment")
  if (!variableName.test(wanted)) name.fail(`"${wanted}" is not a valid variable name (letters, digits and _, not starting with a digit)`)
  return environment[wanted] ??
    name.fail(`${key} is to come from ${wanted} in the launcher's environment, where it is not set: export ${wanted} before the launch, or write the value`)
}

/** `environment`: where `{ from_env: NAME }` values are read, the launcher's own by default. */
export const decodeEnv = (field: Field, environment: Readonly<Record<string, string | undefined>> = process.env): Readonly<Record<string, string>> => {
  const env: Record<string, string> = {}
  for (const [key, value] of field.entries("a mapping of variable names to values")) {
    value.attempt(() => {
      if (!variableName.test(key)) {
        value.fail(`"${key}" is not a valid variable name (letters, digits and _, not starting with a digit)`, value.anchor)
      }
      const reason = reservedReason(key)
      if (reason !== undefined) value.fail(reason, value.anchor)
      if (isMap(value.node)) {
        env[key] = fromLauncher(key, value, environment)
        return
      }
      const scalar = value.scalar
      if (typeof scalar !== "string" && typeof scalar !== "number" && typeof scalar !== "boolean") {
        value.expected("a string value, or { from_env: NAME } to take it from the launcher's environment")
      }
      env[key] = String(scalar)
    })
  }
  return env
}
