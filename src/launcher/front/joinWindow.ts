/**
 * The join window as a machine: `joinWindow(state, event) → [effects, state]`.
 *
 * Everything the JoinGate decides lives here, with no socket and no clock:
 * whether a Hello is admitted (and under which rank numbers), why one is
 * refused, when the window forms or fails (through `joinVerdict`, on every
 * admission, refusal, deadline and start), numbers handed out for restarts,
 * and a rollback when an Accept could not be sent. The JoinGate (JoinGate.ts)
 * is its interpreter on the kernel: it reads Hellos off connections, stamps
 * each event with its Clock, and carries the effects out (an Accept or a
 * Reject down a link, a member's link watched until the outcome, the outcome
 * announced, a late host handed on).
 *
 * Admissions are one at a time by construction: the gate steps one event at a
 * time and sends an Accept before it takes the next, so a rollback always
 * gives back the last numbers taken and no two hosts share one.
 */
import * as Data from "effect/Data"
import type { Hello } from "../../wire/messages/JoinMessages.ts"
import { hostNameRule, isHostName, printable } from "../../wire/Printable.ts"
import { type JoinRules, joinVerdict } from "./joinVerdict.ts"

/** A device label as the join gate takes one: a GPU's name ("NVIDIA H200") or `cpu`. */
const DEVICE_LABEL = /^[A-Za-z0-9][A-Za-z0-9 :._()/+-]{0,63}$/
const DEVICE_LABEL_RULE = "1 to 64 letters, digits, spaces or ':', '.', '_', '(', ')', '/', '+', '-', starting with a letter or digit"

/** A host admitted to the run; `L` is its link, which the window only carries. */
export interface Admitted<L> {
  readonly host: string
  readonly ranks: ReadonlyArray<number>
  readonly devices: ReadonlyArray<number>
  readonly deviceLabels: ReadonlyArray<string>
  readonly pid: number
  readonly link: L
}

export type Outcome<L> =
  | { readonly _tag: "Formed"; readonly members: ReadonlyArray<Admitted<L>>; readonly worldSize: number }
  | { readonly _tag: "Failed"; readonly reason: string }

/** What the window is judged by: fixed for its life. */
export interface WindowSettings {
  readonly rules: JoinRules
  readonly floodLimit: number
  /** Declared hosts and how many devices each brings (undefined: probed, any count), in the cluster file's order. */
  readonly declared: ReadonlyMap<string, number | undefined>
  readonly version: string
  /** The window opened at (ms, the gate's Clock). */
  readonly openedAt: number
  /** `afterFormation: accept`: hosts may join the formed cohort. */
  readonly growing: boolean
  /** With growing: the most ranks the run may have had in all. */
  readonly maxRanks: number | undefined
}

export interface WindowState<L> {
  readonly settings: WindowSettings
  readonly members: ReadonlyArray<Admitted<L>>
  /** The members' ranks, counted as they join: a thousand joins must not each sum them all. */
  readonly joinedRanks: number
  /** The next rank number: past every rank admitted and every number taken for a restart. */
  readonly nextRank: number
  readonly rejected: number
  readonly armed: boolean
  readonly outcome: Outcome<L> | undefined
  /**
   * The members' hosts, and how many of them were declared: the duplicate check and the quorum's count of
   * declared hosts in are a lookup each, not a scan of every member per join.
   */
  readonly joinedHosts: ReadonlySet<string>
  readonly declaredIn: number
}

export type WindowEvent<L> = Data.TaggedEnum<{
  /** A Hello that authenticated; `rejoinable`: the host was in the run and is gone (asked of membership by the gate). */
  Hello: { readonly link: L; readonly hello: Hello; readonly rejoinable: boolean; readonly at: number }
  /** A connection refused before its Hello could be judged (it sent something else first). */
  NotHello: { readonly link: L; readonly reason: string; readonly at: number }
  /** The Accept went out: the member is in. */
  AcceptSent: { readonly member: Admitted<L>; readonly late: boolean; readonly at: number }
  /** The Accept never left: the admission is undone, numbers and all. */
  AcceptFailed: { readonly member: Admitted<L> }
  /** A member's link ended before the outcome. */
  LinkEnded: { readonly host: string; readonly detail: string }
  /** A deadline of the window passed. */
  Tick: { readonly at: number }
  /** An operator start (`POST /start`), already found armable. */
  Armed: { readonly at: number }
  /** Numbers taken for restarted ranks. */
  Reserved: { readonly count: number }
}>
// A generic tagged enum: its constructors are built for a link type at the use site.
interface WindowEventDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: WindowEvent<this["A"]>
}
export const WindowEvent = Data.taggedEnum<WindowEventDefinition>()

export type WindowEffect<L> = Data.TaggedEnum<{
  /** Send the Accept (with `formationWaitMs`, the time left to the hard cap; 0 for a late host). */
  SendAccept: { readonly member: Admitted<L>; readonly late: boolean; readonly formationWaitMs: number }
  /** Tell the peer why, close its link, and say so. */
  Refuse: { readonly link: L; readonly reason: string }
  /** Say a host joined (the log, the journal). */
  Joined: { readonly member: Admitted<L>; readonly late: boolean }
  /** Until the outcome, this member's link ending fails the window. */
  Watch: { readonly member: Admitted<L> }
  /** A host admitted to the formed cohort, handed on with its link. */
  LateJoin: { readonly member: Admitted<L> }
  /** The window's outcome, said once: its watches end and whoever waits for it hears. */
  Concluded: { readonly outcome: Outcome<L> }
}>
interface WindowEffectDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: WindowEffect<this["A"]>
}
export const WindowEffect = Data.taggedEnum<WindowEffectDefinition>()

type Step<L> = readonly [ReadonlyArray<WindowEffect<L>>, WindowState<L>]

export const opened = <L>(settings: WindowSettings): WindowState<L> => ({
  settings,
  members: [],
  joinedRanks: 0,
  nextRank: 0,
  rejected: 0,
  armed: false,
  outcome: undefined,
  joinedHosts: new Set(),
  declaredIn: 0
})

/** Stands for a non-empty `missing` where only its emptiness can matter (a verdict that is not a failure). */
const SOME_MISSING: ReadonlyArray<string> = ["…"]

/** Take the verdict at `at`; a final one is recorded once and announced. */
const settle = <L>(state: WindowState<L>, at: number, effects: ReadonlyArray<WindowEffect<L>> = []): Step<L> => {
  if (state.outcome !== undefined) return [effects, state]
  const { declared, floodLimit, openedAt, rules } = state.settings
  const progress = { joinedRanks: state.joinedRanks, rejected: state.rejected, startArmed: state.armed, elapsedMs: at - openedAt }
  // The verdict reads `missing` for its emptiness, and a failed quorum names the hosts in it: the list is
  // built only for a failure (a thousand joins must not each list the declared hosts).
  const someMissing = state.declaredIn < declared.size
  const judged = { ...rules, floodLimit }
  const first = joinVerdict(judged, { ...progress, missing: someMissing ? SOME_MISSING : [] })
  const verdict = first._tag === "Failed" && someMissing
    ? joinVerdict(judged, { ...progress, missing: [...declared.keys()].filter((host) => !state.joinedHosts.has(host)) })
    : first
  if (verdict._tag === "Open") return [effects, state]
  const outcome: Outcome<L> = verdict._tag === "Formed"
    ? { _tag: "Formed", members: state.members, worldSize: state.joinedRanks }
    : { _tag: "Failed", reason: verdict.reason }
  return conclude(state, outcome, effects)
}

/** Record the outcome; the first one stands. */
const conclude = <L>(state: WindowState<L>, outcome: Outcome<L>, effects: ReadonlyArray<WindowEffect<L>> = []): Step<L> =>
  state.outcome !== undefined ? [effects, state] : [[...effects, WindowEffect.Concluded({ outcome })], { ...state, outcome }]

/** Why a Hello cannot be admitted, or undefined when it can. */
export const problem = <L>(state: WindowState<L>, hello: Hello, rejoinable: boolean): string | undefined => {
  const { declared, floodLimit, growing, maxRanks, version } = state.settings
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
  if (hello.version !== version) {
    return `version skew: the launcher runs cohort ${version}, this agent ${printable(hello.version, 32)}`
  }
  if (state.joinedHosts.has(hello.host) && !(late && rejoinable)) return `host ${hello.host} has already joined`
  const count = declared.get(hello.host)
  // Open admission too: it hands out the salt, never a seat the cluster file did not declare.
  if (!declared.has(hello.host)) {
    return `host ${hello.host} is not among the workers of this run (${[...declared.keys()].join(", ")})`
  }
  if (hello.devices.length === 0 || hello.devices.length > 256) return `expected 1 to 256 devices, got ${hello.devices.length}`
  if (new Set(hello.devices).size !== hello.devices.length) return "a device is listed twice"
  // Each device's label is the cohort's inventory of it: one each, or the inventory would name the wrong device.
  if (hello.deviceLabels.length !== hello.devices.length) {
    return `host ${hello.host} sent ${hello.deviceLabels.length} device label(s) for ${hello.devices.length} device(s): one per device`
  }
  if (count !== undefined && hello.devices.length !== count) {
    return `host ${hello.host} was declared with ${count} devices but brings ${hello.devices.length}`
  }
  if (late && maxRanks !== undefined && state.joinedRanks + hello.devices.length > maxRanks) {
    return `the run would have ${state.joinedRanks + hello.devices.length} ranks, over controller.join.max_ranks (${maxRanks})`
  }
  return undefined
}

/**
 * Refusals of authenticated joins (a Hello that carried the run's key) count towards the flood guard: only
 * someone with the key can fail the run that way. Unauthenticated noise never reaches the window.
 */
const refuse = <L>(state: WindowState<L>, link: L, reason: string, at: number): Step<L> =>
  settle({ ...state, rejected: state.rejected + 1 }, at, [WindowEffect.Refuse({ link, reason })])

export const joinWindow = <L>(state: WindowState<L>, event: WindowEvent<L>): Step<L> => {
  switch (event._tag) {
    case "Hello": {
      const { at, hello, link } = event
      const why = problem(state, hello, event.rejoinable)
      if (why !== undefined) return refuse(state, link, why, at)
      const member: Admitted<L> = {
        host: hello.host,
        ranks: hello.devices.map((_, index) => state.nextRank + index),
        devices: hello.devices,
        deviceLabels: hello.deviceLabels,
        pid: hello.pid,
        link
      }
      const late = state.outcome !== undefined
      const fresh = !state.joinedHosts.has(member.host)
      const { rules } = state.settings
      return [[WindowEffect.SendAccept({ member, late, formationWaitMs: late ? 0 : Math.max(0, state.settings.openedAt + rules.maxTimeoutMs - at) })], {
        ...state,
        members: [...state.members, member],
        joinedRanks: state.joinedRanks + member.ranks.length,
        nextRank: state.nextRank + member.ranks.length,
        joinedHosts: fresh ? new Set([...state.joinedHosts, member.host]) : state.joinedHosts,
        declaredIn: state.declaredIn + (fresh && state.settings.declared.has(member.host) ? 1 : 0)
      }]
    }
    case "NotHello":
      return refuse(state, event.link, event.reason, event.at)
    case "AcceptSent": {
      const { late, member } = event
      if (late) return [[WindowEffect.Joined({ member, late }), WindowEffect.LateJoin({ member })], state]
      return settle(state, event.at, [WindowEffect.Joined({ member, late }), WindowEffect.Watch({ member })])
    }
    case "AcceptFailed": {
      // The Accept never left: the admission is rolled back, ranks and all (they were the last taken).
      const { member } = event
      const members = state.members.filter((other) => other !== member)
      const stillIn = members.some((other) => other.host === member.host)
      const leaves = state.joinedHosts.has(member.host) && !stillIn
      return [[], {
        ...state,
        members,
        joinedRanks: state.joinedRanks - member.ranks.length,
        nextRank: state.nextRank - member.ranks.length,
        joinedHosts: leaves ? new Set([...state.joinedHosts].filter((host) => host !== member.host)) : state.joinedHosts,
        declaredIn: state.declaredIn - (leaves && state.settings.declared.has(member.host) ? 1 : 0)
      }]
    }
    case "LinkEnded":
      // An agent that died while joining must not leave the launcher waiting out the hard cap.
      return conclude(state, { _tag: "Failed", reason: `${event.host} left before the cohort formed: ${event.detail}` })
    case "Tick":
      return settle(state, event.at)
    case "Armed":
      return settle({ ...state, armed: true }, event.at)
    case "Reserved":
      return [[], { ...state, nextRank: state.nextRank + event.count }]
  }
}

/** Why an operator start cannot be armed now, or undefined when it can. */
export const unarmable = <L>(state: WindowState<L>): string | undefined =>
  state.settings.rules.start === "auto"
    ? "this window starts by itself (start: auto)"
    : state.outcome !== undefined
    ? "the join window is closed"
    : state.armed
    ? "already armed"
    : undefined
