/**
 * The Python client's half of the rendezvous store (python/cohort/_store.py StoreCalls), without torch: what each
 * torch Store operation sends up (literal reports), how answers come back, and when a call gives up. A fake
 * launcher answers through `Orders.take`, as the relay reader does. Run with the python3 on PATH.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"


/** A StoreCalls of generation 2 whose reports are printed as JSON and answered by `answer(report)` (a Python expression). */
const harness = (answer: string, body: string) =>
  [
    "import json, threading",
    "from cohort._relay import Orders",
    "from cohort._store import StoreCalls",
    "orders = Orders()",
    "orders.take({'_tag': 'Group', 'generation': 2, 'members': [0, 1]})",
    "def send(report):",
    "    print(json.dumps({k: v for k, v in report.items() if k != 'id'}, sort_keys=True))",
    `    reply = (lambda report: ${answer})(report)`,
    "    if reply is not None:",
    "        threading.Timer(0.01, lambda: orders.take(dict(reply, _tag='StoreAnswer', id=report['id']))).start()",
    "calls = StoreCalls(send, orders, 2, 5.0)",
    "def attempt(f):",
    "    try:",
    "        print(repr(f()))",
    "    except RuntimeError as error:",
    "        print('RuntimeError:', error)",
    body
  ].join("\n")

describe("StoreCalls: torch's Store operations as StoreCall reports", () => {
  test("each operation's report, and its answer as torch wants it (bytes, int, bool)", () => {
    const answers = "{'set': {}, 'get': {'value': 'QQ=='}, 'add': {'number': 3}, 'compare_set': {'value': 'Qg=='}, " +
      "'wait': {}, 'check': {'flag': True}, 'delete_key': {'flag': False}, 'num_keys': {'number': 7}}[report['op']]"
    const ran = runPython(harness(
      answers,
      [
        "attempt(lambda: calls.set('cohort/2/client/0', b'A'))",
        "attempt(lambda: calls.get('cohort/2/client/0'))",
        "attempt(lambda: calls.add('barrier', 1))",
        "attempt(lambda: calls.compare_set('k', b'', 'B'))",
        "attempt(lambda: calls.wait(['a', 'b']))",
        "attempt(lambda: calls.check(['a']))",
        "attempt(lambda: calls.delete_key('a'))",
        "attempt(lambda: calls.num_keys())",
        "print(orders.store_pending, orders.store_answers)"
      ].join("\n")
    ))
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual([
      `{"_tag": "StoreCall", "generation": 2, "keys": ["cohort/2/client/0"], "op": "set", "value": "QQ=="}`,
      "None",
      `{"_tag": "StoreCall", "generation": 2, "keys": ["cohort/2/client/0"], "op": "get"}`,
      "b'A'",
      `{"_tag": "StoreCall", "amount": 1, "generation": 2, "keys": ["barrier"], "op": "add"}`,
      "3",
      `{"_tag": "StoreCall", "expected": "", "generation": 2, "keys": ["k"], "op": "compare_set", "value": "Qg=="}`,
      "b'B'",
      `{"_tag": "StoreCall", "generation": 2, "keys": ["a", "b"], "op": "wait"}`,
      "None",
      `{"_tag": "StoreCall", "generation": 2, "keys": ["a"], "op": "check"}`,
      "True",
      `{"_tag": "StoreCall", "generation": 2, "keys": ["a"], "op": "delete_key"}`,
      "False",
      `{"_tag": "StoreCall", "generation": 2, "keys": [], "op": "num_keys"}`,
      "7",
      "set() {}"
    ])
  })

  test("a refusal is raised as RuntimeError with the launcher's reason", () => {
    const ran = runPython(harness("{'error': 'rank 5 is not a member of generation 2'}", "attempt(lambda: calls.get('k'))"))
    expect(ran.stdout.trim().split("\n").slice(1)).toEqual(["RuntimeError: cohort store: rank 5 is not a member of generation 2"])
  })

  test("a newer generation announced while a call waits ends it at once; an unanswered call ends at its timeout", () => {
    const ran = runPython(harness(
      "None",
      [
        "import time",
        "threading.Timer(0.2, lambda: orders.take({'_tag': 'Group', 'generation': 3, 'members': [0]})).start()",
        "start = time.monotonic()",
        "attempt(lambda: calls.get('addr/1'))",
        "print(time.monotonic() - start < 2)",
        "late = StoreCalls(send, orders, 3, 0.3)",
        "start = time.monotonic()",
        "attempt(lambda: late.wait(['addr/1']))",
        "print(0.25 < time.monotonic() - start < 2)",
        "# An answer to a call nobody waits for any more is dropped, not kept.",
        "orders.take({'_tag': 'StoreAnswer', 'id': 1, 'value': 'QQ=='})",
        "print(len(orders.store_answers))"
      ].join("\n")
    ))
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n").filter((line) => !line.startsWith("{"))).toEqual([
      "RuntimeError: cohort store: generation 2 is over (a newer one was announced)",
      "True",
      "RuntimeError: cohort store: wait addr/1 was not answered within 0.3 s",
      "True",
      "0"
    ])
  })

  test("a lost link ends a waiting call, naming why", () => {
    const ran = runPython(harness(
      "None",
      [
        "def lose():",
        "    with orders.changed:",
        "        orders.lost = 'lost the host\\'s relay'",
        "        orders.changed.notify_all()",
        "threading.Timer(0.1, lose).start()",
        "attempt(lambda: calls.get('k'))"
      ].join("\n")
    ))
    expect(ran.stdout.trim().split("\n").slice(1)).toEqual(["RuntimeError: cohort store: lost the host's relay"])
  })

  test("a stop ends a waiting call, naming the stop, not the timeout", () => {
    const ran = runPython(harness(
      "None",
      [
        "threading.Timer(0.1, lambda: orders.take({'_tag': 'Stop', 'reason': 'the run was interrupted'})).start()",
        "attempt(lambda: calls.get('k'))"
      ].join("\n")
    ))
    expect(ran.stdout.trim().split("\n").slice(1)).toEqual(["RuntimeError: cohort store: the rank is stopping (the run was interrupted)"])
  })

  test("calls in flight at once each get their own answer, whichever comes first", () => {
    // Two threads' gets, answered in the reverse order of their sending: each call is told apart by its id.
    const ran = runPython(harness(
      "None",
      [
        "sent = []",
        "real_send = calls._send",
        "calls._send = lambda report: (sent.append(report), real_send(report))",
        "results = {}",
        "threads = [threading.Thread(target=lambda key=key: results.__setitem__(key, calls.get(key))) for key in ('first', 'second')]",
        "import time",
        "threads[0].start()",
        "while len(sent) < 1: time.sleep(0.01)",
        "threads[1].start()",
        "while len(sent) < 2: time.sleep(0.01)",
        "for report, value in ((sent[1], 'U0VDT05E'), (sent[0], 'RklSU1Q=')):",
        "    orders.take({'_tag': 'StoreAnswer', 'id': report['id'], 'value': value})",
        "for thread in threads: thread.join(5)",
        "print(sorted(results.items()))"
      ].join("\n")
    ))
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n").slice(2)).toEqual(["[('first', b'FIRST'), ('second', b'SECOND')]"])
  })
})

describe("make_store: torch's Store as a subclass over StoreCalls (a stand-in dist module: no torch needed)", () => {
  test("every operation goes to the calls as torch gave it; wait's timedelta is seconds, and torch's zero is no timeout", () => {
    const ran = runPython(
      [
        "import types",
        "from datetime import timedelta",
        "from cohort._store import make_store",
        "class Calls:",
        "    timeout_s = 300.0",
        "    def __getattr__(self, name):",
        "        def record(*args):",
        "            print(name, repr(args))",
        "            return {'get': b'v', 'add': 5, 'compare_set': b'd', 'check': True, 'delete_key': False, 'num_keys': 9}.get(name)",
        "        return record",
        "calls = Calls()",
        "store = make_store(types.SimpleNamespace(Store=object), calls)",
        "print(repr(store.set('k', b'v')))",
        "print(repr(store.get('k')))",
        "print(repr(store.add('n', 2)))",
        "print(repr(store.compare_set('k', b'', b'd')))",
        "store.wait(['a', 'b'])",
        "store.wait(['a'], timedelta(seconds=0))",
        "store.wait(['a'], timedelta(milliseconds=2500))",
        "store.wait(['a'], timedelta(milliseconds=500))",
        "print(repr(store.check(['a'])))",
        "print(repr(store.delete_key('k')))",
        "print(repr(store.num_keys()))",
        "store.set_timeout(timedelta(minutes=2))",
        "print(calls.timeout_s)"
      ].join("\n")
    )
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual([
      "set ('k', b'v')",
      "None",
      "get ('k',)",
      "b'v'",
      "add ('n', 2)",
      "5",
      "compare_set ('k', b'', b'd')",
      "b'd'",
      "wait (['a', 'b'], None)",
      "wait (['a'], None)",
      "wait (['a'], 2.5)",
      "wait (['a'], 0.5)",
      "check (['a'],)",
      "True",
      "delete_key ('k',)",
      "False",
      "num_keys ()",
      "9",
      "120.0"
    ])
  })
})

describe("gloo binds to the announced address's interface (python/cohort/_groups.py)", () => {
  test("127.0.0.1 is lo's; an address no interface holds is refused in one line; a job's own GLOO_SOCKET_IFNAME is kept", () => {
    const ran = runPython(
      [
        "from cohort._groups import bind_gloo, interface_of",
        "from cohort._errors import CohortError",
        "print(interface_of('127.0.0.1'), interface_of('203.0.113.9'))",
        "env = {}",
        "bind_gloo('127.0.0.1', env)",
        "print(env)",
        "env = {'GLOO_SOCKET_IFNAME': 'eth9'}",
        "bind_gloo('127.0.0.1', env)",
        "print(env)",
        "try:",
        "    bind_gloo('203.0.113.9', {})",
        "except CohortError as error:",
        "    print(error)"
      ].join("\n")
    )
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual([
      "lo None",
      "{'GLOO_SOCKET_IFNAME': 'lo'}",
      "{'GLOO_SOCKET_IFNAME': 'eth9'}",
      "no network interface of this host holds 203.0.113.9, the address it reaches the controller from: set GLOO_SOCKET_IFNAME " +
        "in the worker's env to the interface gloo should use"
    ])
  })
})
