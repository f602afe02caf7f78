/**
 * Actors: a bounded mailbox, one fiber and a Scope of their own.
 *
 * Messages are tagged values and each tag has its own handler. A message that
 * is an Effect `Request<A, E>` (for instance a `Request.TaggedClass` or a
 * `Schema.TaggedRequest`) types its reply: `ask` returns `A` and fails with `E`.
 * A plain tagged value replies `void`.
 *
 * - A typed failure goes back to the asker and the actor carries on; after a
 *   `tell`, nobody is waiting, so it is logged.
 * - A defect (or a handler's interruption) ends the actor. Every pending and
 *   later `ask` fails with `ActorStopped`; whoever supervises the actor sees the
 *   Cause through `await`.
 * - Handlers run with the actor's Scope: what they acquire lives as long as
 *   the actor, and is released when it stops, in reverse order.
 * - Where the context holds `ActorFailures` (the launcher's run does), an
 *   actor that dies of a defect is reported there once, so a dead gate or
 *   coordinator becomes the run's root cause instead of a silent hang.
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import type * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Mailbox from "effect/Mailbox"
import type * as Request from "effect/Request"
import * as Scope from "effect/Scope"

/** The actor is gone (stopped or crashed) and can no longer answer. */
export class ActorStopped extends Data.TaggedError("ActorStopped")<{ readonly actor: string }> {
  override get message(): string {
    return `actor "${this.actor}" has stopped`
  }
}

export type Message = { readonly _tag: string }

/** Told when an actor spawned under it dies of a defect (not when it is stopped or interrupted). */
export class ActorFailures extends Context.Tag("cohort/ActorFailures")<ActorFailures, {
  readonly report: (actor: string, cause: Cause.Cause<unknown>) => Effect.Effect<void>
}>() {}

/** A defect's first line, for a verdict or a log line: the message, not the stack. */
export const describeDefect = (cause: Cause.Cause<unknown>): string => {
  const defect = Cause.squash(cause)
  return defect instanceof Error ? defect.message : String(defect)
}

/** What `ask` returns for a message: a Request's success type, else void. */
export type Reply<M> = M extends Request.Request<infer A, infer _E> ? A : void
/** What `ask` fails with for a message: a Request's error type, else never. */
export type Failure<M> = M extends Request.Request<infer _A, infer E> ? E : never

/** One handler per message tag, each typed by its own message. */
export type Handlers<M extends Message, R> = {
  readonly [K in M["_tag"]]: (
    message: Extract<M, { readonly _tag: K }>
  ) => Effect.Effect<Reply<Extract<M, { readonly _tag: K }>>, Failure<Extract<M, { readonly _tag: K }>>, R>
}

export interface ActorRef<M extends Message> {
  readonly name: string
  /** Enqueue without waiting for the handler; waits for room when the mailbox is full. */
  readonly tell: (message: M) => Effect.Effect<void, ActorStopped>
  /** Enqueue and wait for the handler's reply or typed failure. */
  readonly ask: <Q extends M>(message: Q) => Effect.Effect<Reply<Q>, Failure<Q> | ActorStopped>
  /** Let the actor finish what is queued, then end cleanly. */
  readonly stop: Effect.Effect<void>
  /** Interrupt the actor now. */
  readonly interrupt: Effect.Effect<void>
  /** How the actor ended: success after `stop`, a defect's Cause, or interruption. */
  readonly await: Effect.Effect<Exit.Exit<void>>
}

export interface ActorOptions<M extends Message, R> {
  readonly name: string
  /**
   * Mailbox bound (default 1024). A full mailbox makes senders wait: dropping
   * would leave an asker hanging, so back-pressure is the only overflow rule.
   */
  readonly capacity?: number
  readonly handlers: Handlers<M, R>
}

interface Envelope<M> {
  readonly message: M
  readonly reply: Deferred.Deferred<unknown, unknown> | undefined
}

/**
 * Start an actor in the current Scope. Closing that Scope interrupts the
 * actor and then closes the actor's own Scope.
 */
export const spawn = <M extends Message, R>(
  options: ActorOptions<M, R>
): Effect.Effect<ActorRef<M>, never, Scope.Scope | Exclude<R, Scope.Scope>> =>
  Effect.gen(function*() {
    const { name } = options
    const parent = yield* Effect.scope
    const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
    const mailbox = yield* Mailbox.make<Envelope<M>>({ capacity: options.capacity ?? 1024, strategy: "suspend" })
    const stopped = new ActorStopped({ actor: name })
    const handlers = options.handlers as unknown as Record<string, (message: M) => Effect.Effect<unknown, unknown, R>>
    const failures = yield* Effect.serviceOption(ActorFailures)

    const handle = ({ message, reply }: Envelope<M>) => {
      const handler = handlers[message._tag]
      const run = handler === undefined
        ? Effect.dieMessage(`actor "${name}" has no handler for message "${message._tag}"`)
        : handler(message)
      return run.pipe(
        Effect.provideService(Scope.Scope, scope),
        Effect.exit,
        Effect.flatMap((exit) => {
          if (exit._tag === "Success") {
            return reply === undefined ? Effect.void : Deferred.succeed(reply, exit.value)
          }
          const typed = Cause.failureOption(exit.cause)
          if (typed._tag === "Some" && !Cause.isDie(exit.cause) && !Cause.isInterrupted(exit.cause)) {
            return reply === undefined
              ? Effect.logWarning(`"${message._tag}" failed with nobody asking`, typed.value)
              : Deferred.fail(reply, typed.value)
          }
          // A defect or an interruption ends the actor; the supervisor reads the Cause.
          return Effect.failCause(Cause.stripFailures(exit.cause))
        }),
        // If the actor ends while this message is in hand, its asker must not hang.
        Effect.onExit(() => (reply === undefined ? Effect.void : Deferred.fail(reply, stopped)))
      )
    }

    // Answer every queued asker, then refuse new messages. `end` first, so a
    // sender parked on a full mailbox is refused rather than slipped into a
    // buffer that `shutdown` would then throw away unanswered.
    const failPending = Effect.gen(function*() {
      yield* mailbox.end
      let pending = yield* Effect.orDie(mailbox.clear)
      while (pending.length > 0) {
        for (const { reply } of pending) if (reply !== undefined) yield* Deferred.fail(reply, stopped)
        pending = yield* Effect.orDie(mailbox.clear)
      }
      yield* mailbox.shutdown
    })

    const serve = Effect.gen(function*() {
      while (true) {
        const next = yield* Effect.option(mailbox.take)
        if (next._tag === "None") return
        yield* handle(next.value)
      }
    }).pipe(
      // When the actor ends, however it ends, what its handlers acquired is released.
      Effect.onExit((exit) =>
        Effect.zipRight(
          Effect.zipRight(failPending, Scope.close(scope, exit)),
          exit._tag === "Failure" && !Cause.isInterruptedOnly(exit.cause) && failures._tag === "Some"
            ? failures.value.report(name, exit.cause)
            : Effect.void
        )),
      Effect.annotateLogs({ module: "actors", actor: name })
    )

    // The fiber is not part of the actor's own Scope (it closes that Scope
    // itself when it ends); the enclosing Scope interrupts it first, so a
    // handler never runs on a released resource.
    const fiber = yield* Effect.forkIn(serve, parent)

    const offer = (envelope: Envelope<M>) =>
      Effect.flatMap(mailbox.offer(envelope), (accepted) => (accepted ? Effect.void : Effect.fail(stopped)))

    const ref: ActorRef<M> = {
      name,
      tell: (message) => offer({ message, reply: undefined }),
      ask: <Q extends M>(message: Q) =>
        Effect.gen(function*() {
          const reply = yield* Deferred.make<unknown, unknown>()
          yield* offer({ message, reply })
          return (yield* Deferred.await(reply)) as Reply<Q>
        }) as Effect.Effect<Reply<Q>, Failure<Q> | ActorStopped>,
      stop: Effect.asVoid(mailbox.end),
      interrupt: Fiber.interrupt(fiber).pipe(Effect.asVoid),
      await: Fiber.await(fiber)
    }
    return ref
  })
