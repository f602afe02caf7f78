"""Launch-latency rank program (bench/launch-latency.ts): the same one under
cohort `command:`, mpirun and torchrun. It writes the wall clock at its first
instruction into $LAUNCH_STAMP_DIR/<pid> and exits at once."""
import os, time

t = time.time()
with open(os.path.join(os.environ["LAUNCH_STAMP_DIR"], str(os.getpid())), "w") as f:
    f.write(repr(t))
