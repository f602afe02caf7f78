"""bench/torch-recovery.ts's cohort rank: examples/torch_elastic.py unchanged, with a step clock and one death.

Every counted step appends "<pid> <step> <epoch> <time.time()>" to $BENCH_STAMPS/r<rank>-<pid>.txt (line-buffered,
so a SIGKILL loses nothing already written). When BENCH_DIE_STEP is set, rank BENCH_DIE_RANK SIGKILLs itself
right after stamping that step, in its first incarnation only: the same death, at the same step, as the torchrun
script's (bench/torch_recovery_torchrun.py)."""
import importlib.util
import os
import signal
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("torch_elastic", os.path.join(here, "..", "examples", "torch_elastic.py"))
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

stamps = os.environ["BENCH_STAMPS"]
die_rank = int(os.environ.get("BENCH_DIE_RANK", "-1"))
die_step = int(os.environ.get("BENCH_DIE_STEP", "0"))
clock = None


def after_step(ctx, epoch, steps):
    global clock
    if clock is None:
        # Opened at the first step, when the rank number is known (cohort.init() has run inside main).
        clock = open(os.path.join(stamps, f"r{ctx.rank}-{os.getpid()}.txt"), "a", buffering=1)
    clock.write(f"{os.getpid()} {steps} {epoch} {time.time():.6f}\n")
    if ctx.rank == die_rank and ctx.restart_count == 0 and steps == die_step:
        os.kill(os.getpid(), signal.SIGKILL)


sys.exit(example.main(after_step=after_step))
