"""torch's DistributedDataParallel, elastic: `model = ctx.ddp(module)` goes where `DDP(module)` was.

It is torch's own DDP (its buckets, its overlap of the all-reduce with backward), made over a process group
of one rank, so that making it is no collective (a rank entering a running group would otherwise wait in
DDP's set-up for members that are not making one), with a communication hook that reduces each bucket over
the current generation's group instead:

- each bucket is reduced as it becomes ready, over the client's own gloo group of the moment (under
  `backend: nccl`, a GPU's bucket over the generation's NCCL group, never leaving the GPU), weighted by
  each member's batch: the mean is per sample,
  as ctx.watch's is, with the weight carried in one more element of the bucket;
- when a member is lost during a step, every bucket still under way ends the moment cohort announces the
  group without it (a watcher thread, beside the coordinator's orders), with zeros; the step is then not
  counted, the optimizer skips it, and the same batch comes again once the group has re-formed;
- a member with no batch left while the others have some takes a step on a batch it already learnt from,
  at weight 0 (it adds nothing, and is not reported), so that every member reduces the same buckets.

`broadcast_buffers` is off by default (the group of one has no one to broadcast to): buffers such as
BatchNorm's running statistics are copied from a survivor at each re-form, as ctx.watch does."""
import threading
from typing import Any, List, Optional

from ._errors import CohortError


class _Bucket:
    __slots__ = ("result", "buffer", "generation", "members", "done")

    def __init__(self, result: Any, buffer: Any, generation: int, members: List[int]) -> None:
        self.result, self.buffer, self.generation, self.members, self.done = result, buffer, generation, members, False


class BucketReducer:
    """The communication hook, and the buckets it has under way."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.lock = threading.Lock()
        self.pending: List[_Bucket] = []
        self.watcher: Optional[threading.Thread] = None

    def hook(self, state, bucket):  # noqa: ANN001: torch checks the annotations of the hook it is given (make_ddp's)
        ctx, keeper = self.ctx, self.ctx._groups
        torch = keeper.torch
        buffer = bucket.buffer()
        result = torch.futures.Future()
        if ctx._step_failed or keeper.is_broken() or keeper.lost_since(keeper.generation, keeper.members):
            # The group broke earlier in this step: nothing to reduce over; the step is taken again.
            ctx._step_failed = True
            result.set_result(torch.zeros_like(buffer))
            return result
        weight = float(ctx._step_samples or 0)
        # A GPU's bucket stays on it under backend: nccl (NCCL's group); otherwise it is reduced on the CPU (gloo's).
        group = keeper.bulk if keeper.bulk is not None and buffer.is_cuda else keeper.pg
        device = buffer.device if group is keeper.bulk else torch.device("cpu")
        flat = torch.cat([buffer.detach().reshape(-1).to(device, torch.float32) * weight, torch.tensor([weight], dtype=torch.float32, device=device)])
        entry = _Bucket(result, buffer, keeper.generation, list(keeper.members))
        options = keeper.dist.AllreduceOptions()
        options.reduceOp = keeper.dist.ReduceOp.SUM
        try:
            work = group.allreduce([flat], options)
        except RuntimeError:
            self._settle(entry, None)
            return result
        with self.lock:
            self.pending.append(entry)
        self._watch()

        def finished(future: Any) -> None:
            try:
                future.wait()
                self._settle(entry, flat)
            except Exception:  # a peer's socket closed: the announcement of the death follows
                self._settle(entry, None)

        work.get_future().add_done_callback(finished)
        return result

    def _settle(self, entry: _Bucket, flat: Optional[Any]) -> None:
        with self.lock:
            if entry.done:
                return
            entry.done = True
            if entry in self.pending:
                self.pending.remove(entry)
        torch = self.ctx._groups.torch
        buffer = entry.buffer
        if flat is None:
            self.ctx._step_failed = True
            keeper = self.ctx._groups
            keeper.failure = keeper.failure or "a member was lost during a DDP bucket's all-reduce"
            entry.result.set_result(torch.zeros_like(buffer))
            return
        total = float(flat[-1].item())
        mean = flat[:-1] / total if total > 0 else torch.zeros(flat.numel() - 1, device=flat.device)
        entry.result.set_result(mean.view(buffer.shape).to(buffer.device, buffer.dtype))

    def _watch(self) -> None:
        """One daemon thread for the rank's life: it ends the buckets of a generation that lost a member."""
        if self.watcher is not None:
            return
        self.watcher = threading.Thread(target=self._abandon_on_loss, name="cohort-ddp-watcher", daemon=True)
        self.watcher.start()

    def _abandon_on_loss(self) -> None:
        keeper = self.ctx._groups
        orders = keeper.orders

        def lost() -> List[_Bucket]:
            with self.lock:
                return [entry for entry in self.pending if keeper._someone_left(entry.generation, entry.members)]

        while True:
            orders.wait(lambda: len(lost()) > 0)  # also ends when the link is lost or cohort stops the rank
            ending = orders.lost is not None or orders.stop_reason is not None
            with self.lock:
                gone = list(self.pending) if ending else [entry for entry in self.pending if keeper._someone_left(entry.generation, entry.members)]
            for entry in gone:
                self._settle(entry, None)
            if ending:
                return

def solo_group(torch: Any, dist: Any, timeout: Any) -> Any:
    """A process group of this rank alone, made without a collective, that DDP accepts. Since torch 2.0 a
    ProcessGroupGloo is a backend, which DDP refuses: it is wrapped in a ProcessGroup, as torch's own groups are,
    for CPU and GPU tensors alike (gloo stages a GPU's through host memory; in a group of one it moves nothing)."""
    store = dist.HashStore()
    backend = dist.ProcessGroupGloo(store, 0, 1, timeout)
    if isinstance(backend, dist.ProcessGroup):  # torch 1.x: the backend is the group
        return backend
    group = dist.ProcessGroup(store, 0, 1)
    kind = dist.ProcessGroup.BackendType.GLOO
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), kind, backend)
    group._set_default_backend(kind)
    return group


def make_ddp(ctx: Any, module: Any, options: dict) -> Any:
    """torch's DDP over a group of one, reducing through cohort's current group (see the header)."""
    keeper = ctx._groups
    torch, dist = keeper.torch, keeper.dist
    if "process_group" in options:
        raise CohortError("ctx.ddp(module) reduces over cohort's current group, which changes as members come and go: leave process_group out")
    options = {"broadcast_buffers": False, **options}
    solo = solo_group(torch, dist, keeper.timeout)
    ddp = torch.nn.parallel.DistributedDataParallel(module, process_group=solo, **options)
    reducer = BucketReducer(ctx)

    # torch checks a hook's annotations: these, or none.
    def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return reducer.hook(state, bucket)

    ddp.register_comm_hook(state=None, hook=hook)
    # Kept with the wrapper: torch holds the group from C++ only; ctx.watch recognises the wrapper by its reducer.
    ddp._cohort_group, ddp._cohort_reducer = solo, reducer
    return ddp
