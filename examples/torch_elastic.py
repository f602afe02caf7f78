"""An MLP classifier trained data-parallel by PyTorch ranks in an elastic cohort.

    bun run launch examples/torch.yml

The data: points in the plane on three interleaved spiral arms (with noise), the class being the arm, generated
from a fixed seed on every rank: 30,000 to train on, 5,000 held out. The model: 2 -> 128 -> 128 -> 3 with ReLU,
Adam at 3e-3, cross-entropy, 64 samples per rank per step. The coordinator splits each epoch's samples over the
ranks; `ctx.watch` averages the gradients over them at every optimizer step, so every rank holds the same
weights. When a rank dies the survivors re-form the group in-process and take over its samples; a rank cohort
restarts comes back with the survivors' weights.

At the end each rank prints its held-out accuracy (the same on every rank; about 97% after 4 epochs) and a
digest of its weights, and rank 0 says whether the accuracy reached --target (the exit status says so too).

  --batch 64        samples per rank per step
  --lr 3e-3         Adam's learning rate
  --target 0.95     the held-out accuracy to reach
  --record DIR      append each finished step's sample indices to DIR/r<rank>.txt (an audit of who did what)
  --ddp             wrap the model in torch's DistributedDataParallel, made by ctx.ddp (its buckets reduced over
                    the current members during backward), instead of averaging at optimizer.step()
  --save-on-stop    save in `except cohort.Stopped`, as a torchrun script saves on SIGTERM, instead of telling
                    cohort how to read the state (ctx.checkpoint.provide): a stop mid-epoch keeps that save
"""
import argparse
import hashlib
import math
import os
import sys

import torch

import cohort

TRAIN, HELD_OUT, CLASSES = 30_000, 5_000, 3


def spirals(count: int, seed: int):
    """`count` points on CLASSES spiral arms, the arm as the label: the same for a seed on every rank."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    radius = torch.rand(count, generator=generator)
    angle = radius * 3 * math.pi + labels.float() * (2 * math.pi / CLASSES)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return points + 0.02 * torch.randn(count, 2, generator=generator), labels


def model_of():
    torch.manual_seed(0)  # rank-independent start; a re-formed group copies a survivor's anyway
    return torch.nn.Sequential(
        torch.nn.Linear(2, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, CLASSES),
    )


def accuracy(model, points, labels) -> float:
    with torch.no_grad():
        return float((model(points).argmax(dim=1) == labels).float().mean())


def digest(model) -> str:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]


def main(argv=None, after_step=None, after_epoch=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--record", default=None)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--save-on-stop", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    ctx = cohort.init()
    points, labels = spirals(TRAIN, seed=1)
    test_points, test_labels = spirals(HELD_OUT, seed=2)
    model = model_of()
    if args.ddp:
        model = ctx.ddp(model)  # where DistributedDataParallel(model) was
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    ctx.watch(model, optimizer)
    module = model.module if args.ddp else model
    if not args.save_on_stop:
        # The state between two steps, for a stop mid-epoch (max_failure, Ctrl-C): --resume then trains only the rest.
        ctx.checkpoint.provide(lambda: {"model": module.state_dict(), "optimizer": optimizer.state_dict()})
    state = ctx.checkpoint.load()  # after --resume (mid-epoch too), or the consensus for a rank restarted mid-run
    if state is not None:
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    record = None if args.record is None else open(os.path.join(args.record, f"r{ctx.rank}.txt"), "a", buffering=1)

    try:
        train(ctx, args, model, module, optimizer, record, after_step, after_epoch, points, labels)
    except cohort.Stopped:
        if args.save_on_stop:
            # Stopped mid-epoch, the rank is at the step boundary the members agreed on: this save is the run's cut.
            ctx.checkpoint.save({"model": module.state_dict(), "optimizer": optimizer.state_dict()})
        raise

    reached = accuracy(model, test_points, test_labels)
    print(f"rank {ctx.rank} (pid {os.getpid()}, {ctx.world_size} member(s), generation {ctx.generation}): "
          f"held-out accuracy {reached:.4f}, weights {digest(model)}", flush=True)
    if ctx.group_rank == 0:
        print(f"held-out accuracy {reached:.4f} {'reached' if reached >= args.target else 'DID NOT reach'} the target {args.target}", flush=True)
    return 0 if reached >= args.target else 1


def train(ctx, args, model, module, optimizer, record, after_step, after_epoch, points, labels) -> None:
    steps = 0
    for plan in ctx.epochs():
        for batch in plan.batches(args.batch):
            index = torch.tensor(batch)
            loss = torch.nn.functional.cross_entropy(model(points[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # averaged over the members first (ctx.watch)
            if not ctx.progress(len(batch), loss=float(loss)):
                continue  # a member died during this step's all-reduce: the step did not count, the batch comes again
            steps += 1
            if record is not None:
                record.write(f"{plan.epoch} {os.getpid()} {' '.join(map(str, batch))}\n")
            if after_step is not None:
                after_step(ctx, plan.epoch, steps)
        if after_epoch is not None:
            after_epoch(ctx, module, plan.epoch)
        # Every rank offers it: the coordinator writes the state a majority of the epoch's members offered (they hold
        # equal weights), and a rank entering at the next epoch is welcomed with it.
        ctx.checkpoint.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": plan.epoch})


if __name__ == "__main__":
    sys.exit(main())
