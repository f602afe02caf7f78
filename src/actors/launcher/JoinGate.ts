/**
 * JoinGate: the launcher's join window.
 *
 * It owns the mux's join channel. Each connection gets a handshake budget to
 * send a `Hello`. A valid one is checked: the host is declared (under open
 * admission too), not already in, and it brings the devices it was declared
 * with. It is then admitted with the next contiguous ranks, or told why not
 * (`Reject{reason}`). A connection whose frames fail authentication gets no
 * reply at all and is reset; only refusals of authenticated joins count
 * towards the flood guard. Under pre-shared admission an agent that dials
 * without a salt (it names the open key, `Trust.OPEN_KEY_ID`) is told that
 * the run needs one (`Reject{needs: "salt"}`), as noise: never counted.
 *
 * The window's verdict (`joinVerdict`) is taken on every admission and at
 * each deadline, with time from `Clock`. Once it forms, the members and their
 * open links (the hosts' control links) are handed over. A member whose link
 * ends before that fails the window at once: an agent that died while
 * joining must not leave the launcher waiting out the hard cap.
 *
 * With `afterFormation: "accept"` the gate stays open once the cohort has
 * formed: a host that dials in later goes through the same checks (and the
 * same flood guard), up to `maxRanks` ranks in all, and is handed to
 * `onLateJoin` with its link. Rank numbers only ever grow: one admission at a
 * time takes the next numbers, and one whose `Accept` could not be sent gives
 * them back before anyone else is admitted, so no two hosts share a rank and
 * no number is reused.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as CallbackFibers from "../CallbackFibers.ts"
import { makeNoiseLog } from "./NoiseLog.ts"
import type { Accepted, Owner } from "./PortMux.ts"
import { Accept, Hello, type HostRunSpec, joinCodec, type JoinMessage, Reject } from "../../wire/JoinMessages.ts"
import { saltToHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { hostNameRule, isHostName, printable } from "../../wire/Printable.ts"
import { type Admission, joinKeyFor, OPEN_KEY_ID } from "../../wire/Trust.ts"
import { FLOOD_LIMIT, type JoinRules, joinVerdict } from "./joinVerdict.ts"


/** A device label as the join gate takes one: a GPU's name ("NVIDIA H200") or `cpu`. */
const DEVICE_LABEL = /^[A-Za-z0-9][A-Za-z0-9 :._()/+-]{0,63}$/
const DEVICE_LABEL_RULE = "1 to 64 letters, digits, spaces or ':', '.', '_', '(', ')', '/', '+', '-', starting with a letter or digit"

export type JoinLink = Link.Link<JoinMessage, JoinMessage>

export interface Member {
  readonly host: string
  readonly ranks: ReadonlyArray<number>
  readonly devices: ReadonlyArray<number>
  readonly deviceLabels: ReadonlyArray<string>
  readonly pid: number
  /** Stays open after formation: the host's control link. */
  readonly link: JoinLink
}

export type Formation =
  | { readonly _tag: "Formed"; readonly members: ReadonlyArray<Member>; readonly worldSize: number }
  | { readonly _tag: "Failed"; readonly reason: string }

export interface JoinGateOptions {
  readonly rules: JoinRules
  /** Declared hosts and how many devices each brings (undefined: probed, any count). */
  readonly declared: ReadonlyMap<string, number | undefined>
  readonly admission: Admission
  /** What an admitted host runs (its env included). */
  readonly specFor: (host: string) => HostRunSpec
  readonly salt: Uint8Array
  /** Encrypt every frame's payload on this channel's links, not only authenticate it (`controller.encrypt`; default false). */
  readonly encrypt?: boolean | undefined
  readonly version: string
  /** Time a connection has to send its Hello (already scaled). */
  readonly handshakeMs: number
  readonly floodLimit?: number
  /** Told each admission and each refusal (the run's journal). */
  readonly onJoined?: (host: string, ranks: ReadonlyArray<number>) => Effect.Effect<void>
  readonly onRefused?: (peer: string, reason: string) => Effect.Effect<void>
  /** Agents dialing in after formation: refused (the default) or admitted to grow the run. */
  readonly afterFormation?: "reject" | "accept"
  /** With `accept`: the most ranks the run may have had in all. */
  readonly maxRanks?: number | undefined
  /** A host that may join again after formation (it was in the run and is gone). */
  readonly canRejoin?: (host: string) => boolean
  /** A host admitted after formation; its link is the launcher's from now on. */
  readonly onLateJoin?: (member: Member) => Effect.Effect<void>
}

export interface JoinGate {
  /** Give this to the PortMux as its `join` owner: it starts each connection's handshake from the socket callback. */
  readonly owner: Owner
  /** Waits for the window's outcome. */
  readonly formation: Effect.Effect<Formation>
  readonly members: Effect.Effect<ReadonlyArray<Omit<Member, "link">>>
  /**
   * Take `count` rank numbers no one has had (for a restarted rank's new number): the gate numbers every
   * rank, so late hosts and restarts never share one. They do not count towards `maxRanks`.
   */
  readonly take: (count: number) => Effect.Effect<number>
  /** Arm an operator start (`POST /start`). */
  readonly arm: Effect.Effect<{ readonly armed: true } | { readonly armed: false; readonly reason: string }>
  /** Time left in the window and to its hard cap, by the gate's own clock (the one its deadlines use). */
  readonly remaining: Effect.Effect<{ readonly windowMs: number; readonly capMs: number }>
}

interface Window {
  readonly members: ReadonlyArray<Member>
  /** The members' ranks, counted as they join: a thousand joins must not each sum them all. */
  readonly joinedRanks: number
  /** The next rank number: past every rank admitted and every number `take`n (a restarted rank's new one). */
  readonly nextRank: number
  readonly rejected: number
  readonly armed: boolean
  readonly outcome: Formation | undefined
}

export const make = (options: JoinGateOptions): Effect.Effect<JoinGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { rules } = options
    const floodLimit = options.floodLimit ?? FLOOD_LIMIT
    const openedAt = yield* Clock.currentTimeMillis
    const window = yield* Ref.make<Window>({ members: [], joinedRanks: 0, nextRank: 0, rejected: 0, armed: false, outcome: undefined })
    const outcome = yield* Deferred.make<Formation>()
    /**
     * The hosts of `members`, kept beside them (admissions are one at a time: `admitting`): the duplicate check
     * and the quorum's count of declared hosts in are a lookup each, not a scan of every member per join.
     */
    const joinedHosts = new Set<string>()
    let declaredIn = 0
    const hostJoined = (host: string) => {
      if (joinedHosts.has(host)) return
      joinedHosts.add(host)
      if (options.declared.has(host)) declaredIn += 1
    }
    const hostLeft = (host: string, members: ReadonlyArray<Member>) => {
      if (!joinedHosts.has(host) || members.some((member) => member.host === host)) return
      joinedHosts.delete(host)
      if (options.declared.has(host)) declaredIn -= 1
    }
    /** Ends the watch on each member's link at the outcome (see `admit`). */
    const unwatch: Array<() => void> = []
    const callbacks = yield* CallbackFibers.make("join gate")
    /** The declared hosts not in yet, in the cluster file's order: only a failed quorum names them. */
    const missingHosts = () => [...options.declared.keys()].filter((host) => !joinedHosts.has(host))
    /** Stands for a non-empty `missing` where only its emptiness can matter (a verdict that is not a failure). */
    const SOME_MISSING: ReadonlyArray<string> = ["…"]

    /** Take the verdict now; a final one is recorded once and announced. */
    const settle = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const state = yield* Ref.get(window)
      if (state.outcome !== undefined) return
      const { joinedRanks } = state
      const progress = { joinedRanks, rejected: state.rejected, startArmed: state.armed, elapsedMs: now - openedAt }
      // The verdict reads `missing` for its emptiness, and a failed quorum names the hosts in it: the list is
      // built only for a failure (a thousand joins must not each list the declared hosts).
      const someMissing = declaredIn < options.declared.size
      const first = joinVerdict({ ...rules, floodLimit }, { ...progress, missing: someMissing ? SOME_MISSING : [] })
      const verdict = first._tag === "Failed" && someMissing ? joinVerdict({ ...rules, floodLimit }, { ...progress, missing: missingHosts() }) : first
      if (verdict._tag === "Open") return
      yield* conclude(verdict._tag === "Formed"
        ? { _tag: "Formed", members: state.members, worldSize: joinedRanks }
        : { _tag: "Failed", reason: verdict.reason })
    })

    /** Record the window's outcome; the first one stands. */
    const conclude = (formation: Formation) =>
      Effect.flatMap(
        Ref.modify(window, (state) =>
          state.outcome === undefined ? [true, { ...state, outcome: formation }] as const : [false, state] as const),
        (first) => {
          if (!first) return Effect.succeed(false)
          // From now on the members' links are whoever runs the cohort's.
          for (const stop of unwatch.splice(0)) stop()
          return Deferred.succeed(outcome, formation)
        }
      )

    /**
     * Refusals of authenticated joins (a Hello that carried the run's key) count towards the flood guard:
     * only someone with the key can fail the run that way. Unauthenticated noise (bad MACs, silence, garbage)
     * never counts; it is logged at most once a minute per source address (`noise`).
     */
    const countRefusal = (peer: string, reason: string, message: string) =>
      Ref.update(window, (state) => ({ ...state, rejected: state.rejected + 1 })).pipe(
        Effect.zipRight(Effect.logWarning(message)),
        Effect.zipRight(options.onRefused?.(peer, reason) ?? Effect.void),
        Effect.zipRight(settle)
      )

    const refuse = (link: JoinLink, reason: string) =>
      Effect.gen(function*() {
        yield* Effect.ignore(link.send(new Reject({ reason })))
        yield* link.close
        yield* countRefusal(link.peer, reason, `refused a join from ${link.peer}: ${reason}`)
      })

    const noise = makeNoiseLog("join")

    const growing = options.afterFormation === "accept"
    /** Why a Hello cannot be admitted, or undefined when it can. */
    const problem = (hello: Hello, state: Window): string | undefined => {
      const late = state.outcome?._tag === "Formed"
      if (state.outcome !== undefined && !(late && growing)) {
        return state.outcome._tag === "Formed"
          ? "the cohort has already formed (this run does not grow: controller.join.after_formation is reject)"
          : "the join window has failed"
      }
      if (late && state.rejected >= floodLimit) return `${state.rejected} joins were rejected: no more hosts are admitted (flood guard)`
      // What the peer wrote is printed escaped and cut: it must not move a terminal's cursor or fake a line.
      if (!isHostName(hello.host)) return `host name "${printable(hello.host, 64)}" is not one: it must be ${hostNameRule}`
      // Labels are GPU names as NVML gives them ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"):
      // spaces and a little punctuation, never a control character.
      if (hello.deviceLabels.some((label) => !DEVICE_LABEL.test(label))) {
        return `host ${hello.host} sent a device label that is not one: ${DEVICE_LABEL_RULE}`
      }
      if (hello.version !== options.version) {
        return `version skew: the launcher runs cohort ${options.version}, this agent ${printable(hello.version, 32)}`
      }
      if (joinedHosts.has(hello.host) && !(late && options.canRejoin?.(hello.host) === true)) {
        return `host ${hello.host} has already joined`
      }
      const declared = options.declared.get(hello.host)
      // Open admission too: it hands out the salt, never a seat the cluster file did not declare.
      if (!options.declared.has(hello.host)) {
        return `host ${hello.host} is not among the workers of this run (${[...options.declared.keys()].join(", ")})`
      }
      if (hello.devices.length === 0 || hello.devices.length > 256) return `expected 1 to 256 devices, got ${hello.devices.length}`
      if (new Set(hello.devices).size !== hello.devices.length) return "a device is listed twice"
      // Each device's label is the cohort's inventory of it: one each, or the inventory would name the wrong device.
      if (hello.deviceLabels.length !== hello.devices.length) {
        return `host ${hello.host} sent ${hello.deviceLabels.length} device label(s) for ${hello.devices.length} device(s): one per device`
      }
      if (declared !== undefined && hello.devices.length !== declared) {
        return `host ${hello.host} was declared with ${declared} devices but brings ${hello.devices.length}`
      }
      if (late && options.maxRanks !== undefined && state.joinedRanks + hello.devices.length > options.maxRanks) {
        return `the run would have ${state.joinedRanks + hello.devices.length} ranks, over controller.join.max_ranks (${options.maxRanks})`
      }
      return undefined
    }

    // One admission at a time, Accept included: a rollback always gives back the last numbers taken.
    const admitting = yield* Effect.makeSemaphore(1)
    const admit = (link: JoinLink, hello: Hello) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const admitted = yield* admitting.withPermits(1)(admitOne(link, hello, now))
        if (admitted === undefined) return
        const { late, member } = admitted
        if (options.admission.mode === "open") yield* link.rekey(options.salt)
        yield* Effect.logInfo(`${hello.host} joined with ranks ${member.ranks.join(", ")}${late ? " (after formation)" : ""}`)
        if (options.onJoined !== undefined) yield* options.onJoined(hello.host, member.ranks)
        if (late) return yield* options.onLateJoin?.(member) ?? Effect.void
        // Until the window closes, the member's link ending fails it at once. The watch is a callback on the
        // link, not a fiber reading it (a fiber per host, and a thousand interruptions at formation); it stops at
        // the outcome: from then on the link belongs to whoever runs the cohort, and what the member sent waits for them.
        const stop = link.whenEnded((ended) =>
          callbacks.fork(conclude({ _tag: "Failed", reason: `${hello.host} left before the cohort formed: ${ended.detail}` })))
        if ((yield* Ref.get(window)).outcome === undefined) unwatch.push(stop)
        else stop()
        yield* settle
      })

    const admitOne = (link: JoinLink, hello: Hello, now: number) =>
      Effect.gen(function*() {
        const admitted = yield* Ref.modify(window, (state): readonly [{ member: Member; late: boolean } | string, Window] => {
          const why = problem(hello, state)
          if (why !== undefined) return [why, state]
          const first = state.nextRank
          const joined: Member = {
            host: hello.host,
            ranks: hello.devices.map((_, index) => first + index),
            devices: hello.devices,
            deviceLabels: hello.deviceLabels,
            pid: hello.pid,
            link
          }
          const late = state.outcome !== undefined
          return [{ member: joined, late }, {
            ...state,
            members: [...state.members, joined],
            joinedRanks: state.joinedRanks + joined.ranks.length,
            nextRank: state.nextRank + joined.ranks.length
          }]
        })
        if (typeof admitted === "string") return yield* Effect.as(refuse(link, admitted), undefined)
        const { late, member } = admitted
        hostJoined(member.host)
        // Built unchecked: the codec checks it as it encodes it.
        const accepted = yield* Effect.either(link.send(
          new Accept({
            ranks: member.ranks,
            saltHex: options.admission.mode === "open" ? saltToHex(options.salt) : undefined,
            // A late host is told the world at once.
            formationWaitMs: late ? 0 : Math.max(0, openedAt + rules.maxTimeoutMs - now),
            spec: options.specFor(member.host)
          }, true)
        ))
        if (accepted._tag === "Left") {
          // The Accept never left: the admission is rolled back, ranks and all (they were the last taken).
          const rolledBack = yield* Ref.updateAndGet(window, (state) => ({
            ...state,
            members: state.members.filter((other) => other !== member),
            joinedRanks: state.joinedRanks - member.ranks.length,
            nextRank: state.nextRank - member.ranks.length
          }))
          hostLeft(member.host, rolledBack.members)
          return undefined
        }
        return admitted
      })

    /**
     * Pre-shared admission, and an agent without the salt (it named the open key): told so under the open key,
     * never admitted, never counted towards the flood guard (anyone can do it), logged as noise. Its link is
     * no stranger's to the mux once its Hello has authenticated under that public key, so it is reset within
     * the handshake budget whatever the peer does.
     */
    const refuseSaltless = (link: JoinLink) =>
      Effect.gen(function*() {
        const hello = yield* link.receiveWithin(options.handshakeMs, "Hello")
        const who = hello._tag === "Hello" ? `an agent for host "${printable(hello.host, 64)}"` : "an agent"
        yield* link.send(new Reject({
          reason: "this run admits only agents that hold its salt",
          needs: "salt"
        }))
        yield* noise.drop(link.peer, `${who} without the run's salt (it asked for open admission); it was told to start with --salt-file`)
        // The agent closes once it has read the refusal; a peer that does not is reset all the same.
        yield* Effect.ignore(Effect.timeout(Effect.flip(Effect.forever(link.receive)), Duration.millis(options.handshakeMs)))
      })

    const serve = (connection: Accepted["connection"]) =>
      Effect.gen(function*() {
        const link = yield* Link.accept(connection, {
          channel: "join",
          keyFor: joinKeyFor(options.admission, options.salt),
          encrypt: options.encrypt,
          inbound: joinCodec,
          outbound: joinCodec
        })
        if (options.admission.mode === "pre-shared" && link.keyId === OPEN_KEY_ID) {
          yield* refuseSaltless(link)
          return yield* Effect.sync(() => connection.reset())
        }
        const first = yield* link.receiveWithin(options.handshakeMs, "Hello")
        if (first._tag !== "Hello") return yield* refuse(link, `expected Hello first, got ${first._tag}`)
        yield* admit(link, first)
      }).pipe(
        // A frame that fails authentication (or never comes) gets no answer: only the count, and a reset, so a
        // half-sent frame is not held (with its buffer) for ever.
        Effect.catchAll((error) => Effect.zipRight(Effect.sync(() => connection.reset()), noise.drop(connection.peer, error.message)))
      )

    // Each connection's handshake runs in a fiber of its own, in the gate's scope, started straight from the mux.
    const owner: Owner = { accept: (connection) => callbacks.fork(serve(connection)) }

    // The deadlines: the window itself, then the hard cap.
    yield* Effect.forkScoped(Effect.gen(function*() {
      for (const at of [rules.timeoutMs, rules.maxTimeoutMs]) {
        const now = yield* Clock.currentTimeMillis
        yield* Effect.sleep(Duration.millis(Math.max(0, openedAt + at - now)))
        yield* settle
      }
    }))

    const remaining = Effect.map(Clock.currentTimeMillis, (now) => ({
      windowMs: Math.max(0, openedAt + rules.timeoutMs - now),
      capMs: Math.max(0, openedAt + rules.maxTimeoutMs - now)
    }))

    return {
      owner,
      remaining,
      formation: Deferred.await(outcome),
      members: Effect.map(Ref.get(window), (state) => state.members.map(({ link: _link, ...member }) => member)),
      take: (count) => admitting.withPermits(1)(Ref.modify(window, (state) => [state.nextRank, { ...state, nextRank: state.nextRank + count }] as const)),
      arm: Effect.gen(function*() {
        const state = yield* Ref.get(window)
        if (rules.start === "auto") return { armed: false as const, reason: "this window starts by itself (start: auto)" }
        if (state.outcome !== undefined) return { armed: false as const, reason: "the join window is closed" }
        if (state.armed) return { armed: false as const, reason: "already armed" }
        yield* Ref.set(window, { ...state, armed: true })
        yield* settle
        return { armed: true as const }
      })
    }
  })
