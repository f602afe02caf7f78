"""cohort's Python client: PyTorch ranks in an elastic cohort.

    import cohort
    ctx = cohort.init()                      # from the environment cohort set; a clear error outside cohort
    ctx.watch(model, optimizer)              # what to keep in step, and re-synchronise after a re-form
    for plan in ctx.epochs():                # one plan per epoch, from the coordinator
        for batch in plan.batches(64):       # lists of sample indices; grows when a rank dies
            loss = train_step(batch)         # forward, backward, optimizer.step()
            ctx.progress(len(batch), loss=float(loss))
        ctx.checkpoint.save({"model": model.state_dict(), "epoch": plan.epoch})

When a member dies, the survivors' next step re-forms torch.distributed's groups without it, in-process: the
coordinator names the new members (they meet at the launcher's store, over the rank's authenticated path), the survivors copy the lowest survivor's model and optimizer
state, and the step whose all-reduce failed is taken again. No survivor restarts, and every sample is reported
once. The standard library and torch are all it needs; `docs/python.md` says more.
"""
import atexit
import os
import signal
import socket
import sys
import threading
from typing import Optional

from ._context import TERM_REASON, Checkpoint, Context, Plan
from ._envelope import PROTOCOL_VERSION, Envelope, death_patience_s, read_envelope
from ._errors import MEMBER_LOST_STATUS, CohortError, MemberLost, Stopped, exit_status
from ._groups import GroupKeeper, trace
from ._protected import guard_default_group
from ._relay import Orders, RelayLink

__all__ = ["init", "Context", "Plan", "Checkpoint", "CohortError", "MemberLost", "Stopped", "PROTOCOL_VERSION"]
__version__ = "0.1.0"

_context: Optional[Context] = None


def _one_line_errors() -> None:
    """An uncaught CohortError is a mistake to fix, said in one line (no traceback); anything else as Python says it."""
    previous = sys.excepthook

    def hook(kind, value, traceback):
        if issubclass(kind, CohortError):
            print(f"cohort: {value}", file=sys.stderr, flush=True)
        else:
            previous(kind, value, traceback)

    sys.excepthook = hook


_one_line_errors()


def _address_toward(host: str, port: int) -> str:
    """This host's address on the way to the controller: the one its peers reach it at (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((host, port))
        return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


def _check_nccl(local_rank: int) -> None:
    """`backend: nccl` needs a torch with NCCL that sees this rank's GPU: said at once, not after a failed rendezvous."""
    from ._groups import _torch

    torch, dist = _torch()
    if not dist.is_nccl_available():
        raise CohortError(
            f"job.backend is nccl, but this torch ({torch.__version__}) was built without NCCL: install a CUDA build of torch on "
            "this host, or set job.backend: cpu_sync"
        )
    # cohort gives each rank its own GPU (CUDA_VISIBLE_DEVICES): it must see that one.
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise CohortError(
            f"job.backend is nccl, but torch sees no CUDA device for local rank {local_rank} (CUDA_VISIBLE_DEVICES={visible}): "
            "check the host's driver and its devices in the cluster file, or set job.backend: cpu_sync"
        )
    # The rank's one GPU (cohort scopes CUDA_VISIBLE_DEVICES to it): NCCL's groups bind to the current device.
    torch.cuda.set_device(0)


def init() -> Context:
    """Join the cohort this process was started in: read the environment, reach the host's relay, and form
    torch.distributed's default group with the current members. Called once; again returns the same context."""
    global _context
    if _context is not None:
        return _context
    envelope = read_envelope()
    if envelope.backend not in ("cpu_sync", "nccl"):
        raise CohortError(
            f"job.backend is {envelope.backend}: the Python client averages the gradients at every step, which is "
            "cpu_sync (gloo) or nccl; local steps between averages (cpu_cadence, cpu_async) are for entry: jobs only"
        )
    if envelope.backend == "nccl":
        _check_nccl(envelope.local_rank)
    if envelope.dataset_size == 0:
        # Without a dataset the launcher runs no coordinator: nobody would welcome the rank or form its group.
        raise CohortError(
            "cohort.init() needs job.dataset_size in the cluster file, or --set job.dataset_size=N on the command line (the samples an epoch covers): without it cohort "
            "runs the command as torchrun would, with no coordinator to join; use torch.distributed's own env:// init there"
        )
    orders = Orders()

    def lost(reason: str) -> None:
        # Nobody keeps a device after the launcher is gone: the same end as the TypeScript rank's.
        if threading.current_thread() is not threading.main_thread():
            print(f"cohort rank {envelope.rank}: {reason}; exiting", file=sys.stderr, flush=True)
            import os

            os._exit(1)

    link = RelayLink(envelope, orders, lost)
    groups = GroupKeeper(envelope.rank, envelope.backend, orders, link, _address_toward(envelope.controller_host, envelope.controller_port))
    link.report({"_tag": "Attach", "groups": True})
    trace(f"rank {envelope.rank} attached; waiting for its welcome")
    orders.wait(lambda: orders.welcome is not None or orders.refused is not None)
    trace(f"rank {envelope.rank} welcomed (first epoch {(orders.welcome or {}).get('firstEpoch')})")
    if orders.refused is not None:
        raise CohortError(f"the relay refused rank {envelope.rank}: {orders.refused}")
    ctx = Context(envelope, orders, link, groups)
    _install_stops(ctx, orders)
    if not orders.finished:
        orders.wait(lambda: orders.group is not None and envelope.rank in orders.group["members"] or orders.finished)
        ctx._check_alive()
        if orders.group is not None:
            groups.catch_up(death_patience_s(envelope))
    # The user's own collectives on the default group give up on a lost member when cohort announces it (_protected).
    trace(f"guarded: {', '.join(guard_default_group(groups.dist, groups, death_patience_s(envelope)))}")
    _context = ctx
    return ctx


def _install_stops(ctx: Context, orders: Orders) -> None:
    """How the rank ends. Its exit status is kept as it is decided (sys.exit's code, 1 for an uncaught exception,
    143 for cohort's stop left uncaught), and the process ends with it straight after the interpreter's own exit
    handlers (os._exit): torch's groups are not torn down at finalisation, where gloo's threads abort the
    process (SIGABRT) when the peers have already gone, as they have when a run stops or a member dies."""
    status = exit_status
    previous_hook = sys.excepthook
    previous_exit = sys.exit

    def hook(kind, value, traceback):
        # An uncaught MemberLost is no crash of this rank's: its own status, which the launcher restarts (rule member-lost).
        status["failed"], status["code"] = True, MEMBER_LOST_STATUS if issubclass(kind, MemberLost) else 1
        previous_hook(kind, value, traceback)

    def exit_with(code=None):
        status["code"] = code
        previous_exit(code)

    sys.excepthook = hook
    sys.exit = exit_with

    def leave() -> None:
        # Said only on a normal end: a rank that raised, or chose a failing status (sys.exit(3)), is a death, and its
        # silence from now on says so; its exit status, and what it printed, reach the policy from its agent.
        if not status["failed"] and status["code"] in (None, 0) and orders.stop_reason is None:
            ctx._link.report({"_tag": "Exiting"})
        ctx._settle_owed_cut()
        ctx._link.close()
        code = status["code"]
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)  # sys.exit("message"), as Python prints it
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    atexit.register(leave)

    def on_term(signum, frame):
        if ctx.stopping.is_set():
            # Stopped was raised already (a cut's boundary, cohort's Stop order): the rank is winding down, and its
            # save in `except cohort.Stopped` must not be cut short. The grace's SIGKILL ends one that dawdles.
            return
        if ctx._defer_term():
            return  # in an epoch's steps: the rank stops at its next step boundary (Context._steps)
        ctx._stop(TERM_REASON)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)
