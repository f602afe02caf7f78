/**
 * An agent without the run's salt, against a launcher under pre-shared
 * admission (JoinGate behind a real PortMux, over loopback): it is told the
 * run needs the salt, and gives up for good (a permanent AgentError), while
 * the window does not count it (a flood guard of one would otherwise fail
 * the run) and a salted agent joins after it. And the other side of the
 * trade: a peer without the salt that answers a salted agent with the same
 * refusal, under the open key, cannot make it give up (its frame fails the
 * agent's MAC: a transient failure, worth dialling again).
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import * as Actor from "../src/kernel/Actor.ts"
import * as Agent from "../src/agent/Agent.ts"
import * as JoinGate from "../src/launcher/front/JoinGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { VERSION } from "../src/version.ts"
import { joinCodec, Reject } from "../src/wire/messages/JoinMessages.ts"
import { newSalt, OPEN_SALT } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { effect } from "./support/effect.ts"
import { repoRoot } from "./support/launch-scenario.ts"
import { runSpec } from "./support/run-spec.ts"
import { entryPoints } from "../src/cli/entryPoints.ts"

const agentOptions = (port: number, salt: Uint8Array | undefined): Agent.AgentOptions => ({
  host: "a",
  entries: entryPoints,
  devices: { devices: [{ kind: "cpu", slot: 0 }, { kind: "cpu", slot: 1 }], labels: ["cpu", "cpu"] },
  controller: { host: "127.0.0.1", port },
  salt,
  version: VERSION,
  path: repoRoot,
  inheritedEnv: process.env,
  handshakeMs: 5_000,
  output: () => {}
})

describe("an agent without the salt", () => {
  effect.live("is refused for good by a pre-shared launcher, which counts it nowhere: a salted agent joins after it", () =>
    Effect.gen(function*() {
      const salt = newSalt()
      const gate = yield* JoinGate.make({
        rules: { minRanks: 2, targetRanks: 2, timeoutMs: 10_000, maxTimeoutMs: 20_000, start: "auto" },
        declared: new Map([["a", 2]]),
        admission: { mode: "pre-shared" },
        specFor: () => runSpec({ run: "salt-refusal" }),
        salt,
        version: VERSION,
        handshakeMs: 5_000,
        // One counted refusal would fail the window.
        floodLimit: 1
      })
      const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { join: gate.owner } })

      const refused = yield* Effect.flip(Effect.scoped(Agent.run(agentOptions(mux.port, undefined))))
      expect(refused.permanent).toBe(true)
      expect(refused.reason).toBe(
        `the launcher at 127.0.0.1:${mux.port} admits only agents that hold the run's salt, and this one has none: ` +
          `copy the salt file named in the launcher's line "waiting for a to join" (under .cohort/salts/ where the launcher runs) ` +
          "to this machine and start the agent again with --salt-file FILE (or --salt-stdin, or COHORT_SALT)"
      )

      const joined = yield* Effect.forkScoped(Effect.scoped(Agent.run(agentOptions(mux.port, salt))))
      const formation = yield* gate.formation
      expect(formation._tag).toBe("Formed")
      expect(formation._tag === "Formed" ? formation.members.map((member) => [member.host, member.ranks]) : []).toEqual([["a", [0, 1]]])
      yield* Fiber.interrupt(joined)
    }), 20_000)
})

describe("an agent with the salt", () => {
  effect.live("is not made to give up by a refusal forged under the open key: its MAC fails, a transient failure", () =>
    Effect.gen(function*() {
      // A listener that knows no salt: whatever key the dialer names, it answers under the open key, at once.
      const owner = yield* Actor.spawn<PortMux.Accepted, Scope.Scope>({
        name: "forger",
        handlers: {
          Accepted: ({ connection }) =>
            Effect.gen(function*() {
              const link = yield* Link.accept(connection, { channel: "join", keyFor: () => OPEN_SALT, inbound: joinCodec, outbound: joinCodec })
              yield* link.send(new Reject({ reason: "this run admits only agents that hold its salt", needs: "salt" }))
            }).pipe(Effect.ignore, Effect.forkScoped, Effect.asVoid)
        }
      })
      const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { join: owner } })
      const failed = yield* Effect.flip(Effect.scoped(Agent.run(agentOptions(mux.port, newSalt()))))
      expect(failed.permanent).toBeUndefined()
      expect(failed.reason).not.toContain("salt")
    }), 20_000)
})
