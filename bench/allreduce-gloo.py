"""All-reduce bandwidth rank program for torch.distributed's gloo backend (bench/allreduce.ts).

Started N times by the benchmark with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (env:// initialisation, as torchrun would). argv[1] is the
plan, `<bytes>:<warm-up>:<iterations>,...`, the same the cohort entry gets.
For each size: a float32 tensor of bytes / 4 zeros, `warm-up` untimed
`dist.all_reduce(t)` calls (SUM, in place), a barrier, then `iterations`
calls each timed alone with time.perf_counter; then one untimed check
(rank + 1 everywhere, summed: N (N + 1) / 2). gloo in torch 1.13 has no AVG,
so only SUM is timed. Rank 0 prints one JSON line per size, the same shape
as the cohort entry's.
"""
import json
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    n = dist.get_world_size()
    ok_all = True
    for step in sys.argv[1].split(","):
        nbytes, warm, iterations = (int(part) for part in step.split(":"))
        t = torch.zeros(nbytes // 4, dtype=torch.float32)
        for _ in range(warm):
            dist.all_reduce(t)
        dist.barrier()
        times = []
        for _ in range(iterations):
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append((time.perf_counter() - start) * 1000)
        t.fill_(rank + 1)
        dist.all_reduce(t)
        ok = bool((t == n * (n + 1) / 2).all())
        ok_all = ok_all and ok
        if rank == 0:
            print(json.dumps({"allreduce": {"n": n, "bytes": nbytes, "op": "sum", "ms": times, "ok": ok}}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
