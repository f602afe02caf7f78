/**
 * The Python client's guard over torch's default-group collectives (python/cohort/_protected.py, and
 * GroupKeeper.wait_user in _groups.py), without torch: a fake `torch.distributed` whose collectives record how
 * they were called, a fake keeper, and fake futures completed from another thread. Expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

/** A fake torch.distributed: two guarded-shaped collectives, one without async_op, and the default group. */
const FAKE_DIST = `
import types
calls = []
WORLD = object()
OTHER = object()
class Work:
    pass
# The collectives live in their module's namespace, as torch's do: a helper there calls the others through it.
c10d = types.ModuleType("distributed_c10d")
c10d.calls, c10d.WORLD, c10d.OTHER, c10d.Work = calls, WORLD, OTHER, Work
exec("""
def all_reduce(tensor, op=None, group=None, async_op=False):
    calls.append(("all_reduce", tensor, group is WORLD and "WORLD" or group is OTHER and "OTHER" or group, async_op))
    return Work() if async_op else None
def broadcast(tensor, src, group=None, async_op=False):
    calls.append(("broadcast", tensor, src, async_op))
    return None  # a rank in no group: torch gives no work
def all_gather_object(object_list, obj, group=None):
    calls.append(("all_gather_object", obj))
    return all_reduce(obj, group=group)
def _private(tensor, group=None, async_op=False):
    return None
""", c10d.__dict__)
all_reduce, all_gather_object, _private = c10d.all_reduce, c10d.all_gather_object, c10d._private
dist = types.SimpleNamespace(distributed_c10d=c10d, GroupMember=types.SimpleNamespace(WORLD=WORLD),
                             all_reduce=c10d.all_reduce, broadcast=c10d.broadcast, all_gather_object=c10d.all_gather_object)
class Keeper:
    def __init__(self, lost=None):
        self.seen = []
        self.lost = lost
    def before_user_collective(self, during):
        self.seen.append(("before", during))
        if self.lost:
            from cohort import MemberLost
            raise MemberLost(self.lost, during, 4)
    def wait_user(self, work, during, patience):
        self.seen.append(("wait", during, type(work).__name__, patience))
from cohort._protected import guard_default_group
`

const run = (body: string) => {
  const ran = runPython(`${FAKE_DIST}\n${body}`)
  return { ...ran, lines: ran.stdout.trim().split("\n") }
}

describe("guarding torch's default-group collectives", () => {
  test("only public functions with both group and async_op are wrapped, in both namespaces, once", () => {
    const ran = run(`
keeper = Keeper()
print(guard_default_group(dist, keeper, 5.0))
print(guard_default_group(dist, keeper, 5.0))
print(dist.all_reduce is c10d.all_reduce, dist.all_gather_object is all_gather_object, c10d._private is _private)
`)
    expect(ran.stderr).toBe("")
    expect(ran.lines).toEqual(["['all_reduce', 'broadcast']", "[]", "True True True"])
  })

  test("a blocking call on the default group starts asynchronously and is waited for by the keeper; it returns None", () => {
    const ran = run(`
keeper = Keeper()
guard_default_group(dist, keeper, 5.0)
print(dist.all_reduce("t"))
print(c10d.all_reduce("u", None, WORLD))
print(calls)
print(keeper.seen)
`)
    expect(ran.stderr).toBe("")
    expect(ran.lines).toEqual([
      "None",
      "None",
      "[('all_reduce', 't', None, True), ('all_reduce', 'u', 'WORLD', True)]",
      "[('before', 'dist.all_reduce'), ('wait', 'dist.all_reduce', 'Work', 5.0), ('before', 'dist.all_reduce'), ('wait', 'dist.all_reduce', 'Work', 5.0)]"
    ])
  })

  test("a call the user made asynchronous, or one on another group, is torch's as it was: the keeper never sees it", () => {
    const ran = run(`
keeper = Keeper()
guard_default_group(dist, keeper, 5.0)
print(type(dist.all_reduce("t", async_op=True)).__name__)
print(dist.all_reduce("t", group=OTHER))
print(calls)
print(keeper.seen)
`)
    expect(ran.lines).toEqual(["Work", "None", "[('all_reduce', 't', None, True), ('all_reduce', 't', 'OTHER', False)]", "[]"])
  })

  test("no work (a rank in no group): nothing to wait for", () => {
    const ran = run(`
keeper = Keeper()
guard_default_group(dist, keeper, 5.0)
print(dist.broadcast("t", 0))
print(keeper.seen)
`)
    expect(ran.lines).toEqual(["None", "[('before', 'dist.broadcast')]"])
  })

  test("a torch helper without async_op goes through the guarded collective it calls", () => {
    const ran = run(`
keeper = Keeper()
guard_default_group(dist, keeper, 5.0)
c10d.all_gather_object([], "o")
print(calls)
print(keeper.seen)
`)
    expect(ran.stderr).toBe("")
    expect(ran.lines).toEqual([
      "[('all_gather_object', 'o'), ('all_reduce', 'o', None, True)]",
      "[('before', 'dist.all_reduce'), ('wait', 'dist.all_reduce', 'Work', 5.0)]"
    ])
  })

  test("a member already known lost: the call fails at once with cohort.MemberLost, and never starts", () => {
    const ran = run(`
keeper = Keeper(lost=[2])
guard_default_group(dist, keeper, 5.0)
try:
    dist.all_reduce("t")
except RuntimeError as error:
    print(type(error).__module__, type(error).__name__, error.lost, error.during, error.generation)
    print(error)
print(calls)
`)
    expect(ran.lines).toEqual([
      "cohort MemberLost [2] dist.all_reduce 4",
      "rank(s) 2 left the group during dist.all_reduce (generation 4): catch cohort.MemberLost to carry on; the next step forms the group without them",
      "[]"
    ])
  })

  test("a call torch would refuse (wrong arguments) is left to torch to refuse", () => {
    const ran = run(`
keeper = Keeper()
guard_default_group(dist, keeper, 5.0)
try:
    dist.all_reduce()
except TypeError as error:
    print("TypeError", "tensor" in str(error))
print(keeper.seen)
`)
    expect(ran.lines).toEqual(["TypeError True", "[]"])
  })
})

/** GroupKeeper.wait_user over real Orders and fake futures: built without torch (its __init__ imports it). */
const KEEPER = `
import threading, time
from cohort._groups import GroupKeeper
from cohort._relay import Orders
from cohort import MemberLost
class Future:
    def __init__(self):
        self.callbacks, self.error, self._done = [], None, False
    def add_done_callback(self, callback):
        self.callbacks.append(callback)
    def done(self):
        return self._done
    def finish(self, error=None):
        self.error, self._done = error, True
        for callback in self.callbacks:
            callback(self)
    def wait(self):
        if self.error is not None:
            raise self.error
class Work:
    def __init__(self):
        self.future = Future()
    def get_future(self):
        return self.future
keeper = GroupKeeper.__new__(GroupKeeper)
keeper.rank, keeper.orders, keeper.generation, keeper.members, keeper.failure = 0, Orders(), 3, [0, 1, 2], None
keeper.orders.take({"_tag": "Group", "generation": 3, "members": [0, 1, 2]})
def later(seconds, action):
    threading.Timer(seconds, action).start()
def attempt(work, patience=5.0):
    started = time.monotonic()
    try:
        keeper.wait_user(work, "dist.all_reduce", patience)
        outcome = "done"
    except MemberLost as lost:
        outcome = f"MemberLost {lost.lost}"
    except RuntimeError as error:
        outcome = f"RuntimeError {error}"
    print(outcome, round(time.monotonic() - started, 1), keeper.failure)
`

describe("waiting for the user's collective beside the coordinator's orders", () => {
  test("it completes: done, the group whole", () => {
    const ran = runPython(`${KEEPER}
work = Work()
later(0.2, work.future.finish)
attempt(work)
`)
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim()).toBe("done 0.2 None")
  })

  test("a generation without rank 2 is announced while it waits: MemberLost at once, the group broken", () => {
    const ran = runPython(`${KEEPER}
work = Work()
later(0.3, lambda: keeper.orders.take({"_tag": "Group", "generation": 4, "members": [0, 1]}))
attempt(work)
`)
    expect(ran.stdout.trim()).toBe("MemberLost [2] 0.3 rank(s) 2 left during dist.all_reduce")
  })

  test("a generation that only adds a member leaves the call alone", () => {
    const ran = runPython(`${KEEPER}
work = Work()
later(0.1, lambda: keeper.orders.take({"_tag": "Group", "generation": 4, "members": [0, 1, 2, 3]}))
later(0.4, work.future.finish)
attempt(work)
`)
    expect(ran.stdout.trim()).toBe("done 0.4 None")
  })

  test("gloo fails first (its peer closed); the announcement follows within the patience: MemberLost", () => {
    const ran = runPython(`${KEEPER}
work = Work()
later(0.1, lambda: work.future.finish(RuntimeError("Connection closed by peer [127.0.0.1]:1234")))
later(0.5, lambda: keeper.orders.take({"_tag": "Group", "generation": 4, "members": [0, 2]}))
attempt(work)
`)
    expect(ran.stdout.trim()).toBe("MemberLost [1] 0.5 rank(s) 1 left during dist.all_reduce")
  })

  test("a failure no death explains within the patience is raised as it came", () => {
    const ran = runPython(`${KEEPER}
work = Work()
later(0.1, lambda: work.future.finish(RuntimeError("tensors of different sizes")))
attempt(work, patience=0.6)
`)
    expect(ran.stdout.trim()).toBe("RuntimeError tensors of different sizes 0.7 None")
  })

  test("an uncaught MemberLost ends the rank with status 75, its traceback naming cohort.MemberLost; another uncaught exception with 1", () => {
    // The client's exit hook (cohort._install_stops) decides the status, over a context whose link only listens.
    const hooked = (raise: string) => runPython(`
import threading, types, cohort
from cohort._relay import Orders
said = []
ctx = types.SimpleNamespace(_link=types.SimpleNamespace(report=said.append, close=lambda: print("said", said, flush=True)), stopping=threading.Event(), _settle_owed_cut=lambda: None)
cohort._install_stops(ctx, Orders())
${raise}
`)
    const lost = hooked("raise cohort.MemberLost([2], 'dist.all_reduce', 3)")
    expect(lost.code).toBe(75)
    expect(lost.stdout.trim()).toBe("said []")
    expect(lost.stderr.trim().split("\n").at(-1)).toBe(
      "cohort.MemberLost: rank(s) 2 left the group during dist.all_reduce (generation 3): catch cohort.MemberLost to carry on; the next step forms the group without them"
    )
    const bug = hooked("raise KeyError('column loss_scale')")
    expect(bug.code).toBe(1)
    expect(bug.stdout.trim()).toBe("said []")
    expect(bug.stderr.trim().split("\n").at(-1)).toBe("KeyError: 'column loss_scale'")
    // A clean end says it is leaving; sys.exit(3) does not (issue 34: it is a death, judged by its status).
    expect(hooked("pass").stdout.trim()).toBe("said [{'_tag': 'Exiting'}]")
    const three = hooked("import sys; sys.exit(3)")
    expect([three.code, three.stdout.trim()]).toEqual([3, "said []"])
  })
})

describe("ctx.progress after a failed step (issue 35, part 9)", () => {
  test("it forms the new group before saying False: ctx.generation and ctx.members are the new ones from then on", () => {
    const ran = runPython(`
import types
from cohort._context import Context
class Keeper:
    generation, members, failure = 4, [0, 1, 2], "a member died"
    def is_broken(self):
        return self.failure is not None
    def known_generation(self):
        return 5
    def catch_up(self, patience):
        print("catch_up", patience)
        self.generation, self.members, self.failure = 5, [0, 2], None
ctx = Context.__new__(Context)
ctx._groups, ctx._epoch, ctx._replaying, ctx._step_failed = Keeper(), 1, False, True
ctx._envelope = types.SimpleNamespace(heartbeat_timeout_s=30.0)
print(ctx.generation, ctx.members)
print(ctx.progress(64))
print(ctx.generation, ctx.members, ctx.world_size)
`)
    expect(ran.stderr).toBe("")
    expect(ran.stdout.trim().split("\n")).toEqual(["4 [0, 1, 2]", "catch_up 65.0", "False", "5 [0, 2] 2"])
  })
})
