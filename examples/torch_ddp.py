"""Data-parallel training with torch.distributed, as torchrun would run it.

Nothing here knows about cohort: init_process_group reads MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE from the environment (env://), which cohort
sets for every rank of a command: job. Each rank fits the same linear model
y = 2 x0 - 3 x1 + 0.5 x2 + 1 on its own stream of samples; DistributedDataParallel
averages the gradients over gloo every step, so every rank takes the same step
and ends with the same weights. The last lines say so, and print the weights.

  --steps 60   optimiser steps
  --lr 0.1     learning rate
  --batch 32   samples per rank per step
"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

TRUE_WEIGHTS = [2.0, -3.0, 0.5]
TRUE_BIAS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(torch.nn.Linear(3, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=args.lr)
    samples = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    truth = torch.tensor([TRUE_WEIGHTS]).T

    loss = torch.tensor(float("nan"))
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, generator=samples)
        y = x @ truth + TRUE_BIAS
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimiser.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimiser.step()
        if rank == 0 and (step + 1) % 20 == 0:
            print(f"step {step + 1}/{args.steps}: loss {loss.item():.6f} (rank 0's batch)", flush=True)

    # Every rank must hold the same weights: the smallest and largest of each across ranks agree.
    weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    low, high = weights.clone(), weights.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    same = torch.equal(low, high)
    shown = " ".join(f"{value:.2f}" for value in weights.tolist())
    print(f"rank {rank}/{world}: weights and bias {shown}; {'the same on every rank' if same else 'NOT the same on every rank'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
