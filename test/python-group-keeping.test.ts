/**
 * The Python client's group keeping (python/cohort/_groups.py GroupKeeper) without torch: which generation is
 * current, who a newer one leaves out, and how catch_up moves from a broken or outdated group to the newest one
 * this rank belongs to. The keeper is built without its torch (its generation logic needs none), its groups'
 * formation (`_form`) is a stand-in that says what it was asked, and the coordinator's `Group` orders come
 * through a real `Orders`, as the relay reader hands them. Expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

const SET_UP = `
import threading
from cohort import CohortError, Stopped
from cohort._groups import Abandoned, GroupKeeper
from cohort._relay import Orders

def keeper(rank=1, generation=1, members=(0, 1, 2), failure=None):
    k = object.__new__(GroupKeeper)
    k.rank, k.orders, k.generation, k.members, k.failure = rank, Orders(), generation, list(members), failure
    k.pg, k.bulk, k.needs_sync, k.trained = ("group" if generation else None), None, False, 0
    k.orders.take({"_tag": "Group", "generation": generation, "members": list(members)})
    k.formed = []
    return k

def announce(k, generation, members, after=0.0):
    order = {"_tag": "Group", "generation": generation, "members": list(members)}
    if after:
        threading.Timer(after, lambda: k.orders.take(order)).start()
    else:
        k.orders.take(order)

def forms(k, outcomes=()):
    """_form records the generation it is asked to form; each outcome in turn: None (formed), or an exception."""
    outcomes = list(outcomes)
    def form(group):
        k.formed.append(group["generation"])
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        k.pg, k.generation, k.members, k.failure = "group", int(group["generation"]), list(group["members"]), None
    k._form = form
`

const lines = (body: string) => {
  const ran = runPython(`${SET_UP}\n${body}`)
  expect(ran.stderr).toBe("")
  return ran.stdout.trim().split("\n")
}

describe("generations: current, and who a newer one leaves out", () => {
  test("a newer generation that only adds members leaves the group whole; one without a member does not", () => {
    expect(lines(`
k = keeper()
print(k.is_current(), k._someone_left(1, [0, 1, 2]), k.lost_since(1, [0, 1, 2]))
announce(k, 2, [0, 1, 2, 3])
print(k.is_current(), k._someone_left(1, [0, 1, 2]), k.lost_since(1, [0, 1, 2]))
announce(k, 3, [1, 3])
print(k.known_generation(), k._someone_left(1, [0, 1, 2]), k.lost_since(1, [2, 0, 1]), k.lost_since(3, [0]))
# An older announcement, heard late, changes nothing.
announce(k, 2, [0, 1, 2, 3])
print(k.known_generation())
`)).toEqual(["True False []", "False False []", "3 True [0, 2] []", "3"])
  })

  test("broken: no group yet, or a failed collective; the position is -1 outside the members", () => {
    expect(lines(`
print(keeper(generation=0).is_broken(), keeper(failure="gloo: Connection closed by peer").is_broken(), keeper().is_broken())
print(keeper(rank=2).position, keeper(rank=7).position)
`)).toEqual(["True True False", "2 -1"])
  })
})

describe("catch_up: to the newest generation this rank belongs to", () => {
  test("current already: nothing is formed", () => {
    expect(lines(`
k = keeper(); forms(k); k.catch_up(5.0); print(k.formed, k.generation)
`)).toEqual(["[] 1"])
  })

  test("a death announced: the next generation is formed with the survivors", () => {
    expect(lines(`
k = keeper(); forms(k)
announce(k, 2, [1, 2])
k.catch_up(5.0)
print(k.formed, k.generation, k.members, k.position)
`)).toEqual(["[2] 2 [1, 2] 0"])
  })

  test("a failed collective waits for the death's announcement, within its patience", () => {
    expect(lines(`
k = keeper(failure="gloo: Connection closed by peer"); forms(k)
announce(k, 2, [0, 1], after=0.2)
k.catch_up(5.0)
print(k.formed, k.members)
`)).toEqual(["[2] [0, 1]"])
  })

  test("a failed collective that no death explains is the job's own error, said with the failure", () => {
    expect(lines(`
k = keeper(failure="gloo: a tensor of the wrong size"); forms(k)
try:
    k.catch_up(0.3)
except CohortError as error:
    print(error, k.formed)
`)).toEqual(["a collective failed and no member of the group was lost: gloo: a tensor of the wrong size []"])
  })

  test("a member dying at the rendezvous costs one generation: the failure is kept, and the next is formed", () => {
    expect(lines(`
k = keeper(); forms(k, [RuntimeError("cohort store: generation 2 is over (a newer one was announced)\\nmore"), None])
announce(k, 2, [0, 1])
announce(k, 3, [1], after=0.2)
k.catch_up(5.0)
print(k.formed, k.generation, k.members, k.failure)
`)).toEqual(["[2, 3] 3 [1] None"])
  })

  test("a formation given up (Abandoned) is tried again at the newest generation", () => {
    expect(lines(`
k = keeper(); forms(k, [Abandoned(), None])
announce(k, 2, [0, 1])
def newer():
    announce(k, 3, [1, 2])
k._form_original = k._form
def form(group):
    if group["generation"] == 2:
        newer()
    k._form_original(group)
k._form = form
k.catch_up(5.0)
print(k.formed, k.generation)
`)).toEqual(["[2, 3] 3"])
  })

  test("counted out (not in the newest generation): it waits for one with it, and forms that", () => {
    expect(lines(`
k = keeper(); forms(k)
announce(k, 2, [0, 2])
announce(k, 3, [0, 1, 2], after=0.2)
k.catch_up(5.0)
print(k.formed, k.generation)
`)).toEqual(["[3] 3"])
  })

  test("a stop while it waits is Stopped; a lost link is a CohortError naming it", () => {
    expect(lines(`
k = keeper(failure="gloo: Connection closed by peer"); forms(k)
threading.Timer(0.2, lambda: k.orders.take({"_tag": "Stop", "reason": "the run is stopping"})).start()
try:
    k.catch_up(5.0)
except Stopped as error:
    print("Stopped:", error)
k = keeper(failure="gloo: Connection closed by peer"); forms(k)
def lose():
    with k.orders.changed:
        k.orders.lost = "lost the host's relay"
        k.orders.changed.notify_all()
threading.Timer(0.2, lose).start()
try:
    k.catch_up(5.0)
except CohortError as error:
    print("CohortError:", error)
`)).toEqual(["Stopped: cohort is stopping this rank: the run is stopping", "CohortError: lost the host's relay"])
  })
})

describe("the NCCL group: dropped with an abort, and the gradients' reduction on it", () => {
  const stand_ins = `
import types
said = []
class Work:
    def get_future(self):
        class Done:
            def add_done_callback(self, callback): callback(self)
            def done(self): return True
            def wait(self): return None
        return Done()
class Group:
    def __init__(self, name): self.name = name
    def allreduce(self, tensors, options):
        said.append(f"{self.name} allreduce {[t.name for t in tensors]} op {options.reduceOp}")
        return Work()
class Tensor:
    def __init__(self, name, is_cuda): self.name, self.is_cuda = name, is_cuda
class Options: pass
dist = types.SimpleNamespace(
    AllreduceOptions=Options, ReduceOp=types.SimpleNamespace(SUM="SUM", MAX="MAX", MIN="MIN"),
    is_initialized=lambda: True, destroy_process_group=lambda: said.append("destroy the default group"),
    distributed_c10d=types.SimpleNamespace(_abort_process_group=lambda group: said.append(f"abort {group.name}")))
k = keeper(); k.dist, k.pg, k.bulk = dist, Group("gloo"), Group("nccl")
`
  test("a GPU tensor is summed on NCCL's group, a CPU one on gloo's, and everything on gloo's without NCCL", () => {
    expect(lines(`${stand_ins}
print(k.allreduce_bulk(Tensor("gradients", True)), k.allreduce_bulk(Tensor("cpu", False)))
k.bulk = None
print(k.allreduce_bulk(Tensor("gradients", True)))
print(said)
`)).toEqual(["True True", "True", `["nccl allreduce ['gradients'] op SUM", "gloo allreduce ['cpu'] op SUM", "gloo allreduce ['gradients'] op SUM"]`])
  })

  test("dropping a generation aborts its NCCL group before the default group is destroyed, once; without NCCL, no abort", () => {
    expect(lines(`${stand_ins}
k._drop()
print(k.pg, k.bulk, said)
k._drop()
print(said)
`)).toEqual(["None None ['abort nccl', 'destroy the default group']", "['abort nccl', 'destroy the default group', 'destroy the default group']"])
  })
})

