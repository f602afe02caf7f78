"""A PyTorch rank for scripts/gpu-check.sh's torch step: `backend: nccl` on a GPU machine, through cohort's client.

It trains an MLP on the spirals on its GPU (ctx.watch, or ctx.ddp with --ddp) and says, in one JSON line that
gpu-check.sh reads, what the client did:
- where the watched gradients were reduced (the devices of the tensors the client's reduction was given: a GPU's
  must stay on it, over NCCL, not make the trip through host memory);
- an evaluation's metric through the user's own `dist.all_reduce` (the default group, NCCL's, guarded by cohort)
  and through `ctx.all_reduce`;
- the time of one gradient reduction of a 25M-parameter model, on NCCL's group and, for comparison, through the
  client's gloo group (the path every GPU job took before), medians of 20 after 3 warm-ups;
- which of torch's ways to abort an NCCL group this torch has (cohort aborts a generation's group before it drops
  it, so a collective waiting for a dead peer does not hold it), and whether it has a shrink.
One GPU allows a world of one only (NCCL refuses two ranks on one device): the collectives across GPUs, a death
during one, and the abort of a group that waits for a dead peer need two GPUs or more.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import cohort
from cohort._groups import abort_nccl


def spirals(count: int, seed: int, device):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (count,), generator=generator)
    radius = torch.rand(count, generator=generator)
    angle = radius * 3 * math.pi + labels.float() * (2 * math.pi / 3)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return (points + 0.02 * torch.randn(count, 2, generator=generator)).to(device), labels.to(device)


def reduction_ms(ctx, model, repeats: int = 20) -> float:
    """The median time of the client's reduction of `model`'s gradients (as at an optimizer step), synchronized."""
    times = []
    for attempt in range(repeats + 3):
        torch.cuda.synchronize()
        started = time.perf_counter()
        assert ctx._sync_gradients(model, 1)
        torch.cuda.synchronize()
        if attempt >= 3:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddp", action="store_true")
    args = parser.parse_args()
    ctx = cohort.init()
    # The GPU under backend: nccl; the CPU otherwise (a smoke run of this script on a machine without one).
    device = torch.device("cuda" if ctx._envelope.backend == "nccl" else "cpu")
    keeper = ctx._groups
    # What each group was given to reduce: NCCL's (the generation's default group) and the client's gloo one.
    seen = {"nccl": {"devices": set(), "largest": 0}, "gloo": {"devices": set(), "largest": 0}}

    def note(kind, tensor):
        seen[kind]["devices"].add(str(tensor.device))
        seen[kind]["largest"] = max(seen[kind]["largest"], tensor.numel())

    class Recording:
        """The NCCL group, noting what it is given (the client's bucket hook and its reduction call allreduce)."""

        def __init__(self, inner):
            self.inner = inner

        def allreduce(self, tensors, options):
            for tensor in tensors:
                note("nccl", tensor)
            return self.inner.allreduce(tensors, options)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    form, reduce_gloo = keeper._form, keeper.allreduce

    def formed(group):
        form(group)
        if keeper.bulk is not None:
            keeper.bulk = Recording(keeper.bulk)

    def reduced_on_gloo(tensor, op="sum"):
        note("gloo", tensor)
        return reduce_gloo(tensor, op)

    keeper._form, keeper.allreduce = formed, reduced_on_gloo
    if keeper.bulk is not None:
        keeper.bulk = Recording(keeper.bulk)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 3)).to(device)
    if args.ddp:
        model = ctx.ddp(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=6e-3)
    ctx.watch(model, optimizer)
    points, labels = spirals(24_000, 1, device)
    test_points, test_labels = spirals(4_000, 2, device)
    started = time.perf_counter()
    steps = 0
    for plan in ctx.epochs():
        for batch in plan.batches(256):
            index = torch.tensor(batch, device=device)
            loss = torch.nn.functional.cross_entropy(model(points[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if ctx.progress(len(batch), loss=float(loss)):
                steps += 1
    train_s = time.perf_counter() - started
    with torch.no_grad():
        correct = (model(test_points).argmax(dim=1) == test_labels).float().sum()
    # The evaluation pattern: the user's own all_reduce on the default group, and cohort's protected one.
    summed = correct.clone()
    dist.all_reduce(summed)
    protected = ctx.all_reduce(correct.clone(), op="sum")
    accuracy = float(summed.item()) / (len(test_labels) * ctx.world_size)

    # What training and the evaluation reduced where, before the timing below sends a model through gloo on purpose.
    reductions = {kind: {"devices": sorted(facts["devices"]), "largest": facts["largest"]} for kind, facts in seen.items()}
    timings = {}
    if not args.ddp and device.type == "cuda":
        big = torch.nn.Sequential(*[torch.nn.Linear(2_500, 2_500) for _ in range(4)]).to(device)  # 25.0M parameters
        for p in big.parameters():
            p.grad = torch.ones_like(p)
        timings["nccl_ms"] = reduction_ms(ctx, big)
        bulk, keeper.bulk = keeper.bulk, None  # the client's gloo group, as before: through host memory
        try:
            timings["gloo_ms"] = reduction_ms(ctx, big)
        finally:
            keeper.bulk = bulk
        timings["parameters"] = sum(p.numel() for p in big.parameters())
        # Every parameter's gradient was 1 on the one member: the mean is 1.
        timings["mean_is_one"] = all(bool(torch.all(p.grad == 1)) for p in big.parameters())

    c10d = dist.distributed_c10d
    ways = [name for name, present in (
        ("distributed_c10d._abort_process_group", hasattr(c10d, "_abort_process_group")),
        ("ProcessGroup.abort", hasattr(dist.ProcessGroup, "abort")),
    ) if present]
    shrinks = [name for name in ("shrink_group", "split_group", "_shrink_group") if hasattr(c10d, name)]
    # The real group, and none left for the client to abort again at its exit.
    keeper.bulk = None
    aborted = abort_nccl(dist, c10d._get_default_group()) if device.type == "cuda" else None
    print("GPU-TORCH " + json.dumps({
        "mode": "ddp" if args.ddp else "watch",
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "world": ctx.world_size,
        "steps": steps,
        "train_s": round(train_s, 2),
        "reductions": reductions,
        "accuracy": round(accuracy, 4),
        "dist_all_reduce": float(summed.item()),
        "ctx_all_reduce": float(protected.item()),
        "correct": float(correct.item()),
        "async_error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        "abort_ways": ways,
        "aborted_by": aborted,
        "shrink_apis": shrinks,
        **timings,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
