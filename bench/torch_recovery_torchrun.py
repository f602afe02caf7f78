"""bench/torch-recovery.ts's torchrun contender: examples/torch_elastic.py's training as plain torch.distributed.

    python3 bench/launch-torchrun.py --standalone --nproc_per_node 4 --max_restarts 3 bench/torch_recovery_torchrun.py CHECKPOINT [RECORD]

The same data, model and held-out set (taken from the example itself, so they cannot drift apart), Adam at 3e-3,
64 samples per rank per step, 4 epochs, each epoch's 30,000 samples split into equal contiguous shares, one per
rank, gradients averaged by DistributedDataParallel over gloo. What torchrun offers for failures is a restart of
the whole group, so the script does what a torchrun user must: rank 0 saves the model, the optimizer and the
epoch to CHECKPOINT after every epoch, and on start every rank loads it when it exists and resumes at the next
epoch. Work done since that checkpoint is done again.

Stamps and the death are the cohort wrapper's (bench/torch_recovery_cohort.py): every step appends
"<pid> <step> <epoch> <time.time()>" to $BENCH_STAMPS/r<rank>-<pid>.txt, the step counted over the run; rank
BENCH_DIE_RANK SIGKILLs itself after stamping step BENCH_DIE_STEP, only while TORCHELASTIC_RESTART_COUNT is 0.
With RECORD, each step's samples are appended to RECORD/r<rank>.txt as the example's --record writes them
("<epoch> <pid> <sample>..."), so the two contenders' work is counted the same way. At the end rank 0 prints
the held-out accuracy and whether it reached 0.95 (the exit status says so too)."""
import importlib.util
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

here = os.path.dirname(os.path.abspath(__file__))
# The example imports the cohort client at its top; nothing of it runs here, but the import must resolve.
sys.path.insert(0, os.path.join(here, "..", "python"))
spec = importlib.util.spec_from_file_location("torch_elastic", os.path.join(here, "..", "examples", "torch_elastic.py"))
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

BATCH, LR, EPOCHS, TARGET = 64, 3e-3, 4, 0.95


def main() -> int:
    checkpoint_path = sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    die_rank = int(os.environ.get("BENCH_DIE_RANK", "-1"))
    die_step = int(os.environ.get("BENCH_DIE_STEP", "0"))
    clock = open(os.path.join(os.environ["BENCH_STAMPS"], f"r{rank}-{os.getpid()}.txt"), "a", buffering=1)
    record = None if len(sys.argv) < 3 else open(os.path.join(sys.argv[2], f"r{rank}.txt"), "a", buffering=1)

    points, labels = example.spirals(example.TRAIN, seed=1)
    test_points, test_labels = example.spirals(example.HELD_OUT, seed=2)
    model = DistributedDataParallel(example.model_of())
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    first_epoch = 1
    if os.path.exists(checkpoint_path):
        state = torch.load(checkpoint_path)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch = state["epoch"] + 1

    share = range(example.TRAIN * rank // world, example.TRAIN * (rank + 1) // world)
    per_epoch = (len(share) + BATCH - 1) // BATCH
    # Counted over the run, as the cohort wrapper's steps are: a resumed group starts at the checkpoint's epoch.
    steps = (first_epoch - 1) * per_epoch
    for epoch in range(first_epoch, EPOCHS + 1):
        for start in range(share.start, share.stop, BATCH):
            index = torch.arange(start, min(start + BATCH, share.stop))
            loss = torch.nn.functional.cross_entropy(model(points[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            steps += 1
            if record is not None:
                record.write(f"{epoch} {os.getpid()} {' '.join(map(str, index.tolist()))}\n")
            clock.write(f"{os.getpid()} {steps} {epoch} {time.time():.6f}\n")
            if rank == die_rank and restart_count == 0 and steps == die_step:
                os.kill(os.getpid(), signal.SIGKILL)
        if rank == 0:
            # Written aside and renamed: a group torn down mid-write still finds the previous epoch's whole file.
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, checkpoint_path + ".tmp")
            os.replace(checkpoint_path + ".tmp", checkpoint_path)

    reached = example.accuracy(model.module, test_points, test_labels)
    if rank == 0:
        print(f"held-out accuracy {reached:.4f} {'reached' if reached >= TARGET else 'DID NOT reach'} the target {TARGET}", flush=True)
    dist.destroy_process_group()
    return 0 if reached >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
