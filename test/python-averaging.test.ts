/**
 * The Python client's gradient averaging (Context.watch's optimizer step, python/cohort/_context.py) on real
 * torch, without a launch: three members in three threads, each a Context over a fake group whose all-reduce
 * sums the members' tensors (a barrier over threads), each with its own gradients and batch size. The mean
 * must be per sample, not per member: Adam is scale-invariant, so the accuracy of a real run cannot see the
 * weighting, and this test is what can. Expected values are worked by hand, as literals.
 */
import { describe, expect, test } from "bun:test"
import { casesInOnePython, debianTorchProblem } from "./support/debian-torch.ts"

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`python averaging tests skipped: python3-torch not available: ${torchProblem}`)

const SET_UP = `
import json, threading, torch
from cohort._context import Context
from cohort._relay import Orders

class Reducer:
    """The members' all-reduce: each thread's tensor is summed into every member's, in place (gloo's SUM)."""
    def __init__(self, members, fail=False):
        self.members, self.fail = members, fail
        self.barrier = threading.Barrier(members)
        self.lock = threading.Lock()
        self.total = None
    def allreduce(self, tensor, op="sum"):
        assert op == "sum", op
        with self.lock:
            self.total = tensor.clone() if self.total is None else self.total + tensor
        self.barrier.wait()
        tensor.copy_(self.total)
        self.barrier.wait()
        with self.lock:
            self.total = None
        return not self.fail

class Groups:
    def __init__(self, reducer):
        self.torch, self.reducer = torch, reducer
        self.bulk = None  # no NCCL group: the CPU path
    def allreduce(self, tensor, op="sum"):
        return self.reducer.allreduce(tensor, op)

class Envelope:
    run, host, local_rank, local_world_size, restart_count = "r", "localhost", 0, 3, 0
    backend, dataset_size, epochs, heartbeat_timeout_s, checkpoint_pickle = "cpu_sync", 10, 1, 6.0, False

def member(rank, reducer, grad, samples, out):
    envelope = Envelope()
    envelope.rank = rank
    orders = Orders()
    orders.welcome = {"firstEpoch": 1}
    ctx = Context(envelope, orders, None, Groups(reducer))
    weight = torch.nn.Parameter(torch.tensor([10.0, 20.0]))
    model = torch.nn.Module()
    model.weight = weight
    optimizer = torch.optim.SGD([weight], lr=1.0)
    ctx.watch(model, optimizer)
    weight.grad = torch.tensor(grad)
    ctx._step_samples, ctx._step_failed = samples, False
    optimizer.step()
    out[rank] = {"weight": weight.detach().tolist(), "grad": weight.grad.tolist(), "failed": ctx._step_failed}

def run(batches, fail=False):
    reducer = Reducer(len(batches), fail)
    out = {}
    threads = [threading.Thread(target=member, args=(rank, reducer, grad, samples, out)) for rank, (grad, samples) in enumerate(batches)]
    for thread in threads: thread.start()
    for thread in threads: thread.join(20)
    return [out[rank] for rank in range(len(batches))]
`

type Member = { weight: Array<number>; grad: Array<number>; failed: boolean }

/** Every case in one python3 (torch's import is most of the time), by name. */
const CASES: Record<string, string> = {
  unequal: "run([([1.0, 2.0], 3), ([5.0, -1.0], 1), ([100.0, 100.0], 0)])",
  equal: "run([([2.0, 4.0], 2), ([6.0, 0.0], 2)])",
  none: "run([([1.0, 1.0], 0), ([3.0, 3.0], 0)])",
  failed: "run([([1.0, 2.0], 3), ([5.0, -1.0], 1)], fail=True)"
}
const run = casesInOnePython<Array<Member>>(SET_UP, CASES)

describe("ctx.watch averages the gradients per sample over the members", () => {
  test.skipIf(torchProblem !== undefined)("batches of 3, 1 and 0 samples: (3·g0 + 1·g1) / 4, the empty one adding nothing; every member steps alike", async () => {
    // g0 = [1, 2] over 3 samples, g1 = [5, -1] over 1, g2 = [100, 100] over none: [(3 + 5) / 4, (6 - 1) / 4] = [2, 1.25].
    // Per member it would be [3, 0.5] (of two) or [35.33, 33.67] (of three).
    const members = await run("unequal")
    for (const each of members) {
      expect(each.grad).toEqual([2, 1.25])
      // SGD at lr 1 from [10, 20].
      expect(each.weight).toEqual([8, 18.75])
      expect(each.failed).toBe(false)
    }
  }, 60_000)

  test.skipIf(torchProblem !== undefined)("equal batches: the plain mean", async () => {
    // ([2, 4] + [6, 0]) / 2 over 2 samples each.
    const members = await run("equal")
    expect(members.map((each) => each.grad)).toEqual([[4, 2], [4, 2]])
  }, 60_000)

  test.skipIf(torchProblem !== undefined)("no member has a sample: the gradients are zero and the weights stay", async () => {
    const members = await run("none")
    expect(members.map((each) => [each.grad, each.weight])).toEqual([[[0, 0], [10, 20]], [[0, 0], [10, 20]]])
  }, 60_000)

  test.skipIf(torchProblem !== undefined)("an all-reduce that fails (a member lost): no step, the step marked failed, the weights untouched", async () => {
    const members = await run("failed")
    for (const each of members) {
      expect(each.weight).toEqual([10, 20])
      expect(each.failed).toBe(true)
    }
  }, 60_000)
})
