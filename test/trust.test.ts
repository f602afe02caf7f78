/**
 * The trust model: which admission a bind gets, the open-admission handshake
 * over a real mux, reserved environment keys, and the timeout scale.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "../src/kernel/Actor.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { decodeEnv } from "../src/config/Env.ts"
import { netTimeoutScale, scaled } from "../src/config/NetTimeouts.ts"
import { parse } from "../src/config/reading/Yaml.ts"
import * as Codec from "../src/wire/Codec.ts"
import { Accept, Hello, JoinMessage, WorldFormed } from "../src/wire/messages/JoinMessages.ts"
import { newSalt, OPEN_SALT, saltFromHex, saltToHex } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { admission, joinSalt } from "../src/wire/Trust.ts"
import { effect } from "./support/effect.ts"
import { runSpec } from "./support/run-spec.ts"

const join = Codec.make("join", JoinMessage)

describe("admission", () => {
  test("pre-shared by default, loopback included (any local user reaches 127.0.0.1); open, with a warning, only when asked for", () => {
    expect(admission({ bindAddress: "0.0.0.0", openAdmission: false })).toEqual({ mode: "pre-shared" })
    expect(admission({ bindAddress: "127.0.0.1", openAdmission: false })).toEqual({ mode: "pre-shared" })
    const local = admission({ bindAddress: "127.0.0.1", openAdmission: true })
    expect(local.mode === "open" && local.warning).toContain("open admission on 127.0.0.1: any user of this machine can join")
    const open = admission({ bindAddress: "0.0.0.0", openAdmission: true })
    expect(open.mode).toBe("open")
    expect(open.mode === "open" && open.warning).toContain("open admission on 0.0.0.0")
    const salt = newSalt()
    expect(joinSalt({ mode: "pre-shared" }, salt)).toBe(salt)
    expect(joinSalt(open, salt)).toBe(OPEN_SALT)
  })

  test("salts travel as 32 hex digits", () => {
    const salt = newSalt()
    expect(saltFromHex(saltToHex(salt))).toEqual(salt)
    expect(saltFromHex("xyz")).toBeUndefined()
  })

  effect.live("open admission: Hello and Accept under the open key, then everything under the salt the Accept delivered", () =>
    Effect.gen(function*() {
      const salt = newSalt()
      const hosts: Array<string> = []
      const owner = yield* Actor.spawn<PortMux.Accepted, Scope.Scope>({
        name: "join-gate",
        handlers: {
          Accepted: ({ connection }) =>
            Effect.gen(function*() {
              const link = yield* Link.accept(connection, { channel: "join", keyFor: Link.unnamedKey(OPEN_SALT), inbound: join, outbound: join })
              const hello = yield* link.receive
              if (hello._tag !== "Hello") return
              hosts.push(hello.host)
              yield* link.send(new Accept({ ranks: [0, 1], saltHex: saltToHex(salt), formationWaitMs: 1_000, spec: runSpec() }))
              yield* link.rekey(salt)
              // Sent straight after the Accept: it may share a TCP segment with it.
              yield* link.send(new WorldFormed({ worldSize: 2, hosts: [{ host: hello.host, ranks: [0, 1] }], master: { addr: "127.0.0.1", port: 29500 } }))
            }).pipe(Effect.ignore, Effect.forkScoped, Effect.asVoid)
        }
      })
      const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 1_000, owners: { join: owner } })
      const link = yield* Link.dial({
        host: "127.0.0.1",
        port: mux.port,
        channel: "join",
        salt: OPEN_SALT,
        inbound: join,
        outbound: join,
        rekeyOn: (message) => (message._tag === "Accept" && message.saltHex !== undefined ? saltFromHex(message.saltHex) : undefined)
      })
      yield* link.send(new Hello({ host: "node-b", devices: [0, 1], deviceLabels: ["cpu", "cpu"], pid: 7, version: "0.1.0" }))
      const accept = yield* link.receive
      expect(accept).toEqual(new Accept({ ranks: [0, 1], saltHex: saltToHex(salt), formationWaitMs: 1_000, spec: runSpec() }))
      expect(yield* link.receive).toEqual(new WorldFormed({ worldSize: 2, hosts: [{ host: "node-b", ranks: [0, 1] }], master: { addr: "127.0.0.1", port: 29500 } }))
      expect(hosts).toEqual(["node-b"])
    }))
})

describe("env sections", () => {
  const env = (text: string) => Effect.runPromise(Effect.either(parse(text, "cluster.yml", (root) => decodeEnv(root.get("env")))))

  test("plain variables pass, numbers and booleans as their text", async () => {
    expect(await env("env: { OMP_NUM_THREADS: 1, NCCL_DEBUG: INFO, LD_LIBRARY_PATH: /opt/lib, FLAG: true }")).toEqual(
      expect.objectContaining({ right: { OMP_NUM_THREADS: "1", NCCL_DEBUG: "INFO", LD_LIBRARY_PATH: "/opt/lib", FLAG: "true" } })
    )
  })

  test.each([
    ["CUDA_VISIBLE_DEVICES", "env.CUDA_VISIBLE_DEVICES (line 1, col 17): CUDA_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:` of the worker"],
    ["HIP_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:`"],
    ["ROCR_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES is reserved"],
    ["GPU_DEVICE_ORDINAL", "GPU_DEVICE_ORDINAL is reserved"],
    ["CUDA_DEVICE_ORDER", "CUDA_DEVICE_ORDER is reserved"],
    ["COHORT_ROLE", "COHORT_ROLE is reserved for cohort's own processes"],
    ["2BAD", `"2BAD" is not a valid variable name`]
  ])("%s is refused", async (key, message) => {
    const out = await env(`env: { OK: "1", ${key}: "0" }`)
    expect(out._tag).toBe("Left")
    if (out._tag === "Left") expect(out.left.message).toContain(message)
  })
})

describe("COHORT_NET_TIMEOUT_SCALE", () => {
  test("scales deadlines; unset means 1; anything not finite ≥ 0.1 is an error naming the variable", () => {
    expect(netTimeoutScale({})).toBe(1)
    expect(netTimeoutScale({ COHORT_NET_TIMEOUT_SCALE: "2.5" })).toBe(2.5)
    expect(scaled(5_000, 2.5)).toBe(12_500)
    for (const bad of ["0.05", "-1", "abc", "Infinity", "NaN"]) {
      expect(() => netTimeoutScale({ COHORT_NET_TIMEOUT_SCALE: bad })).toThrow(
        `COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1 (e.g. 2 for twice as long), got "${bad}"`
      )
    }
  })
})
