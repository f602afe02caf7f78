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
 * What the gate decides is the pure `joinWindow` machine (joinWindow.ts):
 * the gate is its interpreter on the kernel, one event at a time in its own
 * fiber. Each connection's handshake runs in a fiber of its own and, once it
 * has a Hello, asks the gate; a link's end is told to it from the link's
 * callback. The window's verdict (`joinVerdict`) is taken on every admission,
 * refusal and start and at each deadline, with time from `Clock`. Once it forms, the members and their
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
import * as Request from "effect/Request"
import type * as Scope from "effect/Scope"
import * as CallbackFibers from "../../kernel/CallbackFibers.ts"
import * as Machine from "../../kernel/Machine.ts"
import { makeNoiseLog } from "./NoiseLog.ts"
import type { Accepted, Owner } from "./PortMux.ts"
import { Accept, type HostRunSpec, joinCodec, type JoinMessage, Reject } from "../../wire/messages/JoinMessages.ts"
import { saltToHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { printable } from "../../wire/Printable.ts"
import { type Admission, joinKeyFor, OPEN_KEY_ID } from "../../wire/Trust.ts"
import { type Admitted, joinWindow, opened, type Outcome, unarmable, WindowEffect, WindowEvent, type WindowState } from "./joinWindow.ts"
import { FLOOD_LIMIT, type JoinRules } from "./joinVerdict.ts"

export type JoinLink = Link.Link<JoinMessage, JoinMessage>

export type Member = Admitted<JoinLink>

export type Formation = Outcome<JoinLink>

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

/** What the gate answers besides the window's events: reads, and the numbers a restart takes. */
class Take extends Request.TaggedClass("Take")<number, never, { readonly count: number }> {}
class Arm extends Request.TaggedClass("Arm")<{ readonly armed: true } | { readonly armed: false; readonly reason: string }, never, {}> {}

export const make = (options: JoinGateOptions): Effect.Effect<JoinGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { rules } = options
    const openedAt = yield* Clock.currentTimeMillis
    const outcome = yield* Deferred.make<Formation>()
    /** Ends the watch on each member's link at the outcome (see `Watch`). */
    const unwatch: Array<() => void> = []
    const callbacks = yield* CallbackFibers.make("join gate")
    const noise = makeNoiseLog("join")
    // Bound once the actor is spawned: a watched link's end is told to it from the link's callback.
    let tellGate: ((event: WindowEvent<JoinLink>) => Effect.Effect<void>) | undefined

    const carryOut = (effect: WindowEffect<JoinLink>, step: (event: WindowEvent<JoinLink>) => Effect.Effect<void>): Effect.Effect<void> => {
      switch (effect._tag) {
        case "SendAccept": {
          const { member, late } = effect
          // Built unchecked: the codec checks it as it encodes it.
          return Effect.either(member.link.send(
            new Accept({
              ranks: member.ranks,
              saltHex: options.admission.mode === "open" ? saltToHex(options.salt) : undefined,
              // A late host is told the world at once.
              formationWaitMs: effect.formationWaitMs,
              spec: options.specFor(member.host)
            }, true)
          )).pipe(Effect.flatMap((sent) =>
            sent._tag === "Left"
              ? step(WindowEvent.AcceptFailed({ member }))
              : Effect.gen(function*() {
                if (options.admission.mode === "open") yield* member.link.rekey(options.salt)
                yield* step(WindowEvent.AcceptSent({ member, late, at: yield* Clock.currentTimeMillis }))
              })
          ))
        }
        case "Refuse":
          return Effect.gen(function*() {
            const { link, reason } = effect
            yield* Effect.ignore(link.send(new Reject({ reason })))
            yield* link.close
            yield* Effect.logWarning(`refused a join from ${link.peer}: ${reason}`)
            if (options.onRefused !== undefined) yield* options.onRefused(link.peer, reason)
          })
        case "Joined": {
          const { late, member } = effect
          return Effect.zipRight(
            Effect.logInfo(`${member.host} joined with ranks ${member.ranks.join(", ")}${late ? " (after formation)" : ""}`),
            options.onJoined?.(member.host, member.ranks) ?? Effect.void
          )
        }
        case "LateJoin":
          return options.onLateJoin?.(effect.member) ?? Effect.void
        case "Watch":
          // Until the window closes, the member's link ending fails it at once. The watch is a callback on the
          // link, not a fiber reading it (a fiber per host, and a thousand interruptions at formation); it stops
          // at the outcome: from then on the link belongs to whoever runs the cohort, and what the member sent
          // waits for them.
          return Effect.sync(() => {
            const { host, link } = effect.member
            unwatch.push(link.whenEnded((ended) => callbacks.fork(tellGate?.(WindowEvent.LinkEnded({ host, detail: ended.detail })) ?? Effect.void)))
          })
        case "Concluded":
          return Effect.suspend(() => {
            // From now on the members' links are whoever runs the cohort's.
            for (const stop of unwatch.splice(0)) stop()
            return Deferred.succeed(outcome, effect.outcome)
          })
      }
    }

    const gate = yield* Machine.spawn<WindowState<JoinLink>, WindowEvent<JoinLink>, WindowEffect<JoinLink>, WindowEvent<JoinLink>, Take | Arm>({
      name: "join-gate",
      machine: {
        initial: opened<JoinLink>({
          rules,
          floodLimit: options.floodLimit ?? FLOOD_LIMIT,
          declared: options.declared,
          version: options.version,
          openedAt,
          growing: options.afterFormation === "accept",
          maxRanks: options.maxRanks
        }),
        step: joinWindow
      },
      events: { Hello: true, NotHello: true, AcceptSent: true, AcceptFailed: true, LinkEnded: true, Tick: true, Armed: true, Reserved: true },
      carryOut,
      requests: (stepper) => ({
        Take: ({ count }) => Effect.flatMap(Effect.sync(() => stepper.current().nextRank), (first) => Effect.as(stepper.step(WindowEvent.Reserved({ count })), first)),
        Arm: () =>
          Effect.gen(function*() {
            const why = unarmable(stepper.current())
            if (why !== undefined) return { armed: false as const, reason: why }
            yield* stepper.step(WindowEvent.Armed({ at: yield* Clock.currentTimeMillis }))
            return { armed: true as const }
          })
      })
    })
    // A gate that has stopped (the run is over) has nothing left to decide.
    const tell = (event: WindowEvent<JoinLink>) => Effect.ignore(gate.ref.ask(event))
    tellGate = tell

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
        const at = yield* Clock.currentTimeMillis
        if (first._tag !== "Hello") return yield* tell(WindowEvent.NotHello({ link, reason: `expected Hello first, got ${first._tag}`, at }))
        // Asked of membership here, in the handshake's fiber: the window itself decides nothing outside its state.
        const rejoinable = options.canRejoin?.(first.host) === true
        yield* tell(WindowEvent.Hello({ link, hello: first, rejoinable, at }))
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
        yield* tell(WindowEvent.Tick({ at: yield* Clock.currentTimeMillis }))
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
      members: Effect.sync(() => gate.current().members.map(({ link: _link, ...member }) => member)),
      // A gate that has stopped (the run is over) hands out the next number unreserved: nobody joins any more.
      take: (count) => Effect.catchTag(gate.ref.ask(new Take({ count })), "ActorStopped", () => Effect.sync(() => gate.current().nextRank)),
      arm: Effect.catchTag(gate.ref.ask(new Arm()), "ActorStopped", () => Effect.succeed({ armed: false as const, reason: "the join window is closed" }))
    }
  })
