/**
 * The Python client's protected helpers (ctx.all_reduce, ctx.all_gather, ctx.barrier in python/cohort/_context.py)
 * on real torch, without a launch: one member's Context over a fake group keeper whose collectives add the other
 * members' literal tensors, and which can lose a member during a call (the call fails, a newer generation leaves
 * the member out, the keeper re-forms without it). The helpers must reduce over whoever is there when the call
 * completes, copy the group's state first after a re-form, and refuse an op they do not know. Expected values
 * are worked by hand.
 */
import { describe, expect, test } from "bun:test"
import { casesInOnePython, debianTorchProblem } from "./support/debian-torch.ts"

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`python protected-helper tests skipped: python3-torch not available: ${torchProblem}`)

const SET_UP = `
import json, torch
from cohort import CohortError, Stopped
from cohort._context import Context
from cohort._relay import Orders

#: What each member holds, by rank: this process is rank 0.
HELD = {0: [1.0, 2.0], 1: [10.0, -20.0], 2: [100.0, 5.0]}

class Keeper:
    """Members 0, 1 and 2 in generation 1; with lose=True the first collective fails as rank 2 dies during it."""
    def __init__(self, lose=False):
        self.torch, self.bulk, self.rank = torch, None, 0
        self.members, self.generation, self.failure, self.needs_sync = [0, 1, 2], 1, None, False
        self.lose, self.gone, self.said = lose, False, []
    def is_broken(self):
        return self.failure is not None
    def lost_since(self, generation, members):
        return [2] if self.gone and generation == 1 and 2 in members else []
    def catch_up(self, patience):
        self.said.append(f"re-form without {self.lost_since(self.generation, self.members)}")
        self.members, self.generation, self.failure, self.needs_sync = [0, 1], 2, None, True
    def sync_state(self, tensors, optimizers):
        self.said.append(f"state copied in generation {self.generation}")
        self.needs_sync = False
        return True
    def _lost_now(self):
        if self.lose and not self.gone:
            self.gone, self.failure = True, "rank 2 lost"
            self.said.append("a collective failed")
            return True
        return False
    def allreduce(self, tensor, op="sum"):
        # The client's group knows sum, max and min (GroupKeeper.allreduce): mean is the helper's own division.
        assert op in ("sum", "max", "min"), op
        self.said.append(f"allreduce {op} over {self.members}")
        if self._lost_now():
            return False
        for member in self.members:
            if member != self.rank:
                other = torch.tensor(HELD[member])[: tensor.numel()].reshape(tensor.shape) if tensor.numel() > 1 else torch.zeros(tensor.shape)
                tensor.copy_({"sum": tensor + other, "max": torch.maximum(tensor, other), "min": torch.minimum(tensor, other)}[op])
        return True
    def allgather(self, outputs, tensor):
        self.said.append(f"allgather over {self.members}")
        if self._lost_now():
            return False
        assert len(outputs) == len(self.members)
        for slot, member in enumerate(self.members):
            outputs[slot].copy_(tensor if member == self.rank else torch.tensor(HELD[member]))
        return True

class Envelope:
    run, host, rank, local_rank, local_world_size, restart_count = "r", "localhost", 0, 0, 3, 0
    backend, dataset_size, epochs, heartbeat_timeout_s, checkpoint_pickle = "cpu_sync", 10, 1, 0.5, False

def context(lose=False, stop=None):
    orders = Orders()
    orders.welcome = {"firstEpoch": 1}
    if stop is not None:
        orders.stop_reason = stop
    keeper = Keeper(lose)
    return Context(Envelope(), orders, None, keeper), keeper

def reduced(op, lose=False):
    ctx, keeper = context(lose)
    tensor = torch.tensor(HELD[0])
    returned = ctx.all_reduce(tensor, op=op)
    return {"value": tensor.tolist(), "same": returned is tensor, "said": keeper.said}

def gathered(lose=False):
    ctx, keeper = context(lose)
    return {"value": [t.tolist() for t in ctx.all_gather(torch.tensor(HELD[0]))], "said": keeper.said}

def barrier():
    ctx, keeper = context()
    ctx.barrier()
    return {"said": keeper.said}

def refused(call):
    try:
        call()
        return "no error"
    except (CohortError, Stopped) as error:
        return f"{type(error).__name__}: {error}"
`

const CASES: Record<string, string> = {
  sum: "reduced('sum')",
  mean: "reduced('mean')",
  max: "reduced('max')",
  min: "reduced('min')",
  sumLost: "reduced('sum', lose=True)",
  meanLost: "reduced('mean', lose=True)",
  gather: "gathered()",
  gatherLost: "gathered(lose=True)",
  barrier: "barrier()",
  badOp: "refused(lambda: context()[0].all_reduce(torch.tensor([1.0]), op='avg'))",
  stopped: "refused(lambda: context(stop='the run was interrupted')[0].all_reduce(torch.tensor([1.0])))"
}

const run = casesInOnePython<any>(SET_UP, CASES)

const skip = torchProblem !== undefined

describe("ctx.all_reduce: over the members there when it completes", () => {
  test.skipIf(skip)("sum, mean, max and min over three members, in place, the tensor returned", async () => {
    // Held: [1, 2], [10, −20], [100, 5].
    expect(await run("sum")).toEqual({ value: [111, -13], same: true, said: ["allreduce sum over [0, 1, 2]"] })
    // The mean is the sum over the group, divided by its 3 members.
    // (float32: the tensors are torch's default dtype)
    expect((await run("mean")).value).toEqual([37, Math.fround(-13 / 3)])
    expect((await run("max")).value).toEqual([100, 5])
    expect((await run("min")).value).toEqual([1, -20])
  }, 60_000)

  test.skipIf(skip)("a member lost during the call: the group re-forms without it, the state is copied, the call is taken again", async () => {
    const said = ["allreduce sum over [0, 1, 2]", "a collective failed", "re-form without [2]", "state copied in generation 2", "allreduce sum over [0, 1]"]
    expect(await run("sumLost")).toEqual({ value: [11, -18], same: true, said })
    // The mean is over the two left: ([1, 2] + [10, −20]) / 2.
    expect((await run("meanLost")).value).toEqual([5.5, -9])
  }, 60_000)

  test.skipIf(skip)("an op it does not know is refused in one line; a stop raises Stopped", async () => {
    expect(await run("badOp")).toBe("CohortError: op must be one of sum, mean, max, min, got 'avg'")
    expect(await run("stopped")).toBe("Stopped: cohort is stopping this rank: the run was interrupted")
  }, 60_000)
})

describe("ctx.all_gather and ctx.barrier", () => {
  test.skipIf(skip)("every member's tensor in member order; after a loss, only those left", async () => {
    expect(await run("gather")).toEqual({ value: [[1, 2], [10, -20], [100, 5]], said: ["allgather over [0, 1, 2]"] })
    expect(await run("gatherLost")).toEqual({
      value: [[1, 2], [10, -20]],
      said: ["allgather over [0, 1, 2]", "a collective failed", "re-form without [2]", "state copied in generation 2", "allgather over [0, 1]"]
    })
  }, 60_000)

  test.skipIf(skip)("a barrier is one sum of a zero over the members", async () => {
    expect(await run("barrier")).toEqual({ said: ["allreduce sum over [0, 1, 2]"] })
  }, 60_000)
})
