"""The rank's context: who it is, the coordinator's epochs, and the training steps that keep the group in step.

Every member of the group takes the same steps. Before each step the members agree, in one small collective,
whether anyone has a batch, whether everyone has seen the epoch end, and which generation is the newest anyone
knows of. A member with no batch left (its share is done while the others still have some) takes the step
without one: it joins the gradients' all-reduce with nothing to add, and steps its optimizer with the others'
mean, so that every member keeps the same weights. A step whose all-reduce failed (a member died) is not
counted: the optimizer skips it, its samples are not reported, and after the group re-forms the same batch
comes again. Every sample is then reported once: by the rank that finished its step."""
import io
import json
import signal
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _state
from ._envelope import Envelope, death_patience_s
from ._errors import CohortError, Stopped
from ._groups import GroupKeeper, StepLines, trace
from ._protected import check_op
from ._relay import Orders, RelayLink

_WAIT_FOR_WORK_S = 0.05
#: How long a rank stopped by SIGTERM mid-epoch waits at its step boundary for the cut its stop may ask for.
_CUT_ORDER_WAIT_S = 1.0
#: How long a save made on stop waits for the coordinator's answer (it answers every save at once).
_SAVE_ANSWER_WAIT_S = 5.0
#: Why the rank stops when SIGTERM came first, before any word from cohort (shown as "cohort is stopping this rank: …").
TERM_REASON = "it received SIGTERM"


#: What a report's metrics may hold to be shown (the page, /state.json, /metrics), as src/wire/ReportedMetrics.ts
#: says for TypeScript ranks: at most METRICS_MAX names of 1 to METRIC_NAME_MAX characters, finite numbers. The
#: rest is dropped here, with a warning: JSON has no NaN (Python's json writes a bare NaN, which the relay cannot
#: read, and it would close the rank's link), and a report refused as a whole would lose its samples.
METRICS_MAX = 16
METRIC_NAME_MAX = 64


def bounded_metrics(metrics: Dict[str, Any]) -> Tuple[Dict[str, float], List[Tuple[str, str]]]:
    """The metrics within the bounds (the first METRICS_MAX valid ones, in the order given), and (name, why) for the rest."""
    import math

    kept: Dict[str, float] = {}
    dropped: List[Tuple[str, str]] = []
    for name, value in metrics.items():
        if not isinstance(name, str) or not 1 <= len(name) <= METRIC_NAME_MAX:
            shown = str(name)
            dropped.append((shown[:METRIC_NAME_MAX] + ("…" if len(shown) > METRIC_NAME_MAX else ""),
                            f"its name has {len(shown)} characters (1 to {METRIC_NAME_MAX})"))
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            dropped.append((name, f"its value {value!r} is not a number"))
            continue
        if not math.isfinite(number):
            dropped.append((name, f"its value {number} is not a finite number"))
        elif len(kept) >= METRICS_MAX:
            dropped.append((name, f"a report shows at most {METRICS_MAX} metrics"))
        else:
            kept[name] = number
    return kept, dropped


def take(ranges: Sequence[Tuple[int, int]], skip: int, count: int) -> List[int]:
    """Up to `count` sample indices of `ranges` (in order), after the first `skip` of them."""
    out: List[int] = []
    for start, end in ranges:
        length = end - start
        if skip >= length:
            skip -= length
            continue
        first = start + skip
        skip = 0
        last = min(end, first + count - len(out))
        out.extend(range(first, last))
        if len(out) == count:
            break
    return out


#: How a state travels as text (the coordinator keeps strings): the client's own format, base64 (see _state).
_STATE_KEY = "$cohort-state"
#: torch.save's pickle, base64: only under job.checkpoint_pickle.
_PICKLE_KEY = "$torch"
_PICKLE_REFUSED = (
    "this checkpoint holds torch.save's pickle, which runs whatever its writer put in it as it loads: it is not "
    "loaded unless job.checkpoint_pickle: true is set in the cluster file (it lets any rank's code run on every host)"
)


def _encode_state(state: Any, pickle: bool = False) -> str:
    """A state as the coordinator keeps it (a string): the client's format (_state), which loads without running
    code; what that format cannot hold only as torch.save's pickle, and only when the job opts in."""
    import base64

    try:
        data = _state.encode(state)
    except CohortError:
        if not pickle:
            raise
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        return json.dumps({_PICKLE_KEY: base64.b64encode(buffer.getvalue()).decode("ascii")})
    return json.dumps({_STATE_KEY: base64.b64encode(data).decode("ascii")})


def _decode_state(text: str, pickle: bool = False) -> Any:
    """A state the coordinator handed over. The client's format is data only; a pickle loads only when the job
    opts in (job.checkpoint_pickle), and is refused in one line otherwise. A checkpoint of TypeScript ranks
    (StateJson) comes back as the JSON it is."""
    import base64
    import binascii

    try:
        value = json.loads(text)
    except ValueError:
        raise CohortError("cannot load this checkpoint: it is not JSON (not a state cohort's ranks saved)") from None
    if isinstance(value, dict) and list(value) == [_STATE_KEY] and isinstance(value[_STATE_KEY], str):
        try:
            data = base64.b64decode(value[_STATE_KEY], validate=True)
        except (binascii.Error, ValueError):
            raise CohortError("cannot load this checkpoint: its state is not base64") from None
        return _state.decode(data)
    if isinstance(value, dict) and list(value) == [_PICKLE_KEY]:
        if not pickle:
            raise CohortError(_PICKLE_REFUSED)
        import torch

        data = io.BytesIO(base64.b64decode(value[_PICKLE_KEY]))
        # Opted in: the job trusts every rank's code on every host (job.checkpoint_pickle).
        try:
            return torch.load(data, weights_only=False)
        except TypeError:  # a torch before 1.13 has no weights_only
            return torch.load(data)
    return value


class Checkpoint:
    def __init__(self, ctx: "Context") -> None:
        self._ctx = ctx

    def save(self, state: Any) -> None:
        """Offer `state` (state_dicts, tensors, numbers, strings, lists, tuples and dicts) as the consensus
        checkpoint of the epoch just trained: call it on every rank after the epoch's batches. The coordinator
        writes to job.checkpoint the state that a majority of the epoch's members offered (the members hold equal
        weights, so their states are equal bytes). Anything else is refused here, in one line, unless the job sets
        job.checkpoint_pickle (torch.save's pickle, which lets any rank's code run on every host)."""
        ctx = self._ctx
        if ctx._orders.stop_reason is not None and ctx._orders.lost is None:
            return ctx._save_on_stop(state)
        ctx._check_alive()
        epoch = ctx._save_epoch()
        text = _encode_state(state, ctx._envelope.checkpoint_pickle)
        ctx._link.report({"_tag": "CheckpointSave", "epoch": epoch, "state": text})
        ctx._orders.wait(lambda: epoch in ctx._orders.saved)
        ctx._check_alive()

    def provide(self, read: Any) -> None:
        """How to read the run's state between two steps (what save() takes). When the run stops mid-epoch
        (max_failure crossed), the members agree on their next step boundary, call it there, and cohort writes
        it with the samples done so far: --resume then trains only the rest of that epoch. Without it such a stop
        keeps the last epoch's checkpoint, and --resume redoes the epoch."""
        if not callable(read):
            raise CohortError(f"ctx.checkpoint.provide(read) takes a function returning the state, got {type(read).__name__}")
        self._ctx._provide = read

    def load(self) -> Any:
        """The state to start from, or None: the checkpoint a --resume run resumed from, or, for a rank restarted or
        entering mid-run, the latest consensus. It loads as data: no code in it runs."""
        text = (self._ctx._orders.welcome or {}).get("checkpoint")
        return None if text is None else _decode_state(text, self._ctx._envelope.checkpoint_pickle)


class Plan:
    """One epoch of this rank's work: the sample ranges the coordinator assigned, growing when a rank dies."""

    def __init__(self, ctx: "Context", epoch: int) -> None:
        self._ctx = ctx
        self.epoch = epoch

    @property
    def ranges(self) -> List[Tuple[int, int]]:
        return list(self._ctx._orders.epochs[self.epoch]["ranges"])

    def batches(self, size: int) -> Iterator[List[int]]:
        """This rank's sample indices in batches of up to `size`, in plan order, in step with the other members (see
        the module's header). Take one optimizer step per batch (`ctx.watch`'s optimizer), then `ctx.progress`."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise CohortError(f"batches(size) needs a whole number of at least 1, got {size!r}")
        return self._ctx._steps(self.epoch, size)


class Context:
    def __init__(self, envelope: Envelope, orders: Orders, link: RelayLink, groups: GroupKeeper) -> None:
        self._envelope = envelope
        self._orders = orders
        self._link = link
        self._groups = groups
        self.run = envelope.run
        self.host = envelope.host
        #: cohort's global rank: stable for the run, shown in every log and view.
        self.rank = envelope.rank
        self.local_rank = envelope.local_rank
        self.local_world_size = envelope.local_world_size
        self.restart_count = envelope.restart_count
        self.backend = envelope.backend
        self.dataset_size = envelope.dataset_size
        self.epoch_count = envelope.epochs
        #: Set when cohort stops this rank (the run ends or fails, or SIGTERM): wind down and return.
        self.stopping = threading.Event()
        self.checkpoint = Checkpoint(self)
        self._first_epoch = int((orders.welcome or {}).get("firstEpoch", 1))
        self._epoch: Optional[int] = None
        self._done = 0
        #: The per-step trace lines, rate-limited under -v (StepLines); metric names already warned of (progress).
        self._step_lines = StepLines()
        self._warned_metrics: set = set()
        #: What ctx.watch keeps in step: each model, its optimizer, and the optimizer's own step (unsynced).
        self._watched: List[Tuple[Any, Any, Any]] = []
        #: The batch of the step under way (its size weighs this rank's gradients), and whether its all-reduce failed.
        self._step_samples: Optional[int] = None
        self._step_failed = False
        #: The model made by ctx.ddp and watched, if one was: its buckets are reduced during backward.
        self._ddp: Any = None
        #: This rank's last batch: what it steps on, at weight 0, when it has none left and DDP's buckets must be reduced.
        self._last_batch: Optional[List[int]] = None
        #: The step under way is such a replay: its samples are not reported.
        self._replaying = False
        #: ctx.checkpoint.provide's reader: the state between two steps, for a mid-epoch cut.
        self._provide: Any = None
        #: Steps this rank took part in during the current epoch (every member takes the same): a cut's rounds.
        self._rounds = 0
        #: Inside an epoch's steps (between their boundaries, the user's step included).
        self._in_steps = False
        #: When SIGTERM came while in the steps: the rank stops at its next boundary instead.
        self._term_at: Optional[float] = None
        #: The cut this rank owes (its done work at the members' agreed boundary) when it stopped there without
        #: ctx.checkpoint.provide: a save in `except cohort.Stopped` sends it with its state, and the exit without.
        self._cut_owed: Optional[Dict[str, Any]] = None
        #: Whether this rank has used the one save a stop allows.
        self._saved_on_stop = False

    # ------------------------------------------------------------------ who

    @property
    def world_size(self) -> int:
        """The members of the current group (the survivors, after a death)."""
        return len(self._groups.members)

    @property
    def members(self) -> List[int]:
        """The current group's members: global ranks, ascending; torch's rank of each is its position."""
        return list(self._groups.members)

    @property
    def group_rank(self) -> int:
        """This rank's rank in the current group (torch.distributed's `get_rank()`); -1 while it is in none."""
        return self._groups.position

    @property
    def generation(self) -> int:
        """How many times the group has formed: 1 for the cohort's first, one more for each death or return."""
        return self._groups.generation

    # ------------------------------------------------------------------ what to keep in step

    def watch(self, model: Any, optimizer: Any) -> None:
        """Keep `model` and `optimizer` in step across the group: the optimizer's `step()` first averages the
        gradients over the members (weighted by each one's batch), and a re-formed group starts from a survivor's
        model and optimizer state. This is DistributedDataParallel's job done so that groups can change: pass the
        module itself, not a DDP wrapper."""
        torch = self._groups.torch
        ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        if ddp and getattr(model, "_cohort_reducer", None) is None:
            # torch's DDP pins the group it was made with, and making one is a collective: a rank that joins a running
            # group would wait in it for members that are not making one. ctx.ddp makes one that follows the group.
            raise CohortError(
                "ctx.watch(model, optimizer) got torch's DistributedDataParallel, which pins the first group (and a rank "
                "joining later would wait in its set-up for the others): make it with model = ctx.ddp(module) instead, "
                "which reduces DDP's buckets over the current members, or pass the module itself"
            )
        if not hasattr(optimizer, "step") or not hasattr(optimizer, "state_dict"):
            raise CohortError(f"watch(model, optimizer) needs a torch optimizer, got {type(optimizer).__name__}")
        if self._watched and (self._ddp is not None) != ddp:
            raise CohortError("ctx.watch keeps every model one way: all made with ctx.ddp, or none")
        step = optimizer.step
        self._watched.append((model, optimizer, step))
        if ddp:
            self._ddp = model

            def ddp_step(*args: Any, **kwargs: Any) -> Any:
                # The buckets were reduced during backward (_ddp); a member lost meanwhile: no update, the batch again.
                if self._step_failed:
                    return None
                return step(*args, **kwargs)

            optimizer.step = ddp_step
            return

        def synced_step(*args: Any, **kwargs: Any) -> Any:
            if not self._sync_gradients(model, self._step_samples or 0):
                # A member died during the all-reduce: no update; the batch comes again once the group re-forms.
                self._step_failed = True
                return None
            return step(*args, **kwargs)

        optimizer.step = synced_step

    def ddp(self, module: Any, **options: Any) -> Any:
        """torch's DistributedDataParallel for `module`, reducing its buckets over the current members (the group
        follows deaths, restarts and newcomers): use it where `DDP(module)` was, then `ctx.watch(model, optimizer)`.
        `options` are DDP's own (bucket_cap_mb, find_unused_parameters, gradient_as_bucket_view, …); not
        process_group. See cohort/_ddp.py for how it stays elastic."""
        from ._ddp import make_ddp

        return make_ddp(self, module, options)

    def _sync_gradients(self, model: Any, weight: int) -> bool:
        torch = self._groups.torch
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1) for p in params]
        # Under backend: nccl a GPU's gradients are reduced where they are, on NCCL's group; otherwise on the CPU,
        # over the client's gloo group.
        on_gpu = self._groups.bulk is not None and grads[0].is_cuda
        device = grads[0].device if on_gpu else torch.device("cpu")
        flat = torch.cat([g.to(device) for g in grads] + [torch.ones(1, dtype=grads[0].dtype, device=device)]) * float(weight)
        if not (self._groups.allreduce_bulk(flat) if on_gpu else self._groups.allreduce(flat)):
            return False
        total = float(flat[-1].item())
        offset = 0
        for p in params:
            n = p.numel()
            mean = (flat[offset:offset + n].view(p.shape) / total if total > 0 else torch.zeros(p.shape, dtype=flat.dtype, device=device)).to(p.device)
            if p.grad is None:
                p.grad = mean.clone()
            else:
                p.grad.copy_(mean)
            offset += n
        return True

    def _watched_tensors(self) -> List[Any]:
        return [t for model, _, _ in self._watched for t in list(model.parameters()) + list(model.buffers())]

    # ------------------------------------------------------------------ collectives of the user's own (_protected)

    def _synced(self) -> bool:
        """A group just formed has every member's state copied from the one that held it; False when it broke meanwhile."""
        groups = self._groups
        return not groups.needs_sync or groups.sync_state(self._watched_tensors(), [optimizer for _, optimizer, _ in self._watched])

    def _over_members(self, attempt: Callable[[], bool]) -> None:
        """Run `attempt` (a collective on the client's group) until it completes over the current members: when a
        member is lost during it, the group re-forms without it (its state copied, as at a step) and the call is
        taken again. Every member must make the same calls, in the same order, as with any collective."""
        groups = self._groups
        patience = death_patience_s(self._envelope)
        while True:
            self._check_alive()
            if groups.is_broken() or groups.lost_since(groups.generation, groups.members):
                groups.failure = groups.failure or "a member left before a protected call"
                groups.catch_up(patience)
            if not self._synced():
                continue
            if attempt():
                return

    def all_reduce(self, tensor: Any, op: str = "sum") -> Any:
        """Reduce `tensor` over the current members, in place (and returned): `sum`, `mean`, `max` or `min`. A
        member lost during the call does not fail it: the group re-forms and the call is taken again over the
        members left, so the result is theirs (for an evaluation's metric: divide by what they report, not by the
        world you started with). Never raises MemberLost; cohort's stop raises Stopped."""
        check_op(op)
        source = tensor.detach().cpu().clone()
        done: Dict[str, Any] = {}

        def attempt() -> bool:
            staged = source.clone()
            if not self._groups.allreduce(staged, "sum" if op == "mean" else op):
                return False
            done["value"] = staged / len(self._groups.members) if op == "mean" else staged
            return True

        self._over_members(attempt)
        tensor.copy_(done["value"])
        return tensor

    def all_gather(self, tensor: Any) -> List[Any]:
        """Every current member's `tensor` (same shape and dtype on each), in member order (`ctx.members`); a member
        lost during the call is left out and the call taken again, as in all_reduce."""
        torch = self._groups.torch
        source = tensor.detach().cpu().clone()
        done: Dict[str, List[Any]] = {}

        def attempt() -> bool:
            outputs = [torch.empty_like(source) for _ in self._groups.members]
            if not self._groups.allgather(outputs, source.clone()):
                return False
            done["value"] = outputs
            return True

        self._over_members(attempt)
        return [gathered.to(tensor.device) for gathered in done["value"]]

    def barrier(self) -> None:
        """Wait until every current member is here; a member lost meanwhile is not waited for."""
        torch = self._groups.torch
        self._over_members(lambda: self._groups.allreduce(torch.zeros(1, dtype=torch.float32)))

    # ------------------------------------------------------------------ epochs and steps

    def epochs(self) -> Iterator[Plan]:
        """The run's epochs, from the coordinator: after the resumed checkpoint's epoch, until the last."""
        if self.dataset_size == 0:
            raise CohortError("ctx.epochs() needs job.dataset_size in the cluster file, or --set job.dataset_size=N on the command line: the number of samples an epoch covers")
        epoch = self._first_epoch
        while True:
            self._orders.wait(lambda: self._orders.finished or epoch in self._orders.epochs)
            self._check_alive()
            if epoch not in self._orders.epochs:
                return
            self._epoch = epoch
            self._done = 0
            self._link.report({"_tag": "Progress", "epoch": epoch, "done": 0})
            yield Plan(self, epoch)
            epoch += 1

    def _steps(self, epoch: int, size: int) -> Iterator[List[int]]:
        groups = self._groups
        torch = groups.torch
        state = self._orders.epochs[epoch]
        self._rounds = 0
        self._in_steps = True
        try:
            yield from self._steps_of(epoch, size, state, groups, torch)
        finally:
            self._in_steps = False

    def _steps_of(self, epoch: int, size: int, state: Dict[str, Any], groups: Any, torch: Any) -> Iterator[List[int]]:
        handed = 0
        again: Optional[List[int]] = None
        patience = death_patience_s(self._envelope)
        while True:
            if self._term_at is not None:
                self._stop_at_boundary(epoch)
            self._check_alive()
            # Only a broken group is re-formed here: a newer generation that leaves no one out is formed by all
            # members together, once the step's agreement shows someone knows of it (below).
            if groups.is_broken():
                groups.catch_up(patience)
            if not self._synced():
                continue
            with self._orders.changed:
                batch = again if again is not None else take(state["ranges"], handed, size)
                ended = state["ended"]
            cut = 1.0 if epoch in self._orders.cut_asked else 0.0
            flags = torch.tensor([1.0 if batch else 0.0, 0.0 if ended else 1.0, float(groups.known_generation()), cut], dtype=torch.float64)
            if not groups.allreduce(flags, "max"):
                continue
            anyone_has_work, anyone_before_end, newest, anyone_asked_cut = (float(v) for v in flags.tolist())
            if anyone_asked_cut > 0:
                # A mid-epoch cut: every member offers at this same boundary (the same weights, its own samples done),
                # then takes no more steps until cohort's stop. Without provide, its state is what it saves on Stopped.
                if self._provide is None:
                    self._stop_owing_cut(epoch)
                self._offer_cut(epoch)
                self._orders.wait(lambda: self._orders.stop_reason is not None or self._orders.finished)
                self._check_alive()
                return
            if not anyone_has_work and not anyone_before_end:
                # Every member saw the epoch end. A newer group waits for the next epoch: a rank entering at the
                # boundary is welcomed once this epoch's checkpoint is offered, after this loop.
                self._step_lines.epoch_end(self.rank, epoch)
                return
            self._step_lines.step(epoch, f"rank {self.rank} epoch {epoch} gen {groups.generation}: batch {len(batch)} flags {flags.tolist()}")
            if newest > groups.generation:
                # A member knows of a newer group: everyone forms it at the top of the next step.
                self._orders.wait(lambda: groups.known_generation() >= newest, patience)
                groups.failure = groups.failure or f"generation {int(newest)} was announced"
                continue
            if anyone_has_work:
                if batch:
                    if again is None:
                        handed += len(batch)
                    self._step_samples, self._step_failed = len(batch), False
                    self._last_batch = batch
                    self._rounds += 1
                    yield batch
                    again = batch if self._step_failed else None
                    self._step_samples = None
                elif self._ddp is not None:
                    # DDP reduces its buckets during backward: this rank must make the same calls, so it steps on a
                    # batch it has learnt from already, at weight 0 (adding nothing; progress() says it did not count).
                    replay = self._last_batch or list(range(min(size, self.dataset_size)))
                    self._step_samples, self._step_failed, self._replaying = 0, False, True
                    self._rounds += 1
                    try:
                        yield replay
                    finally:
                        self._replaying = False
                        self._step_samples = None
                else:
                    self._rounds += 1
                    self._step_without_batch()
                continue
            self._orders.wait(lambda: False, _WAIT_FOR_WORK_S)

    def _defer_term(self) -> bool:
        """Whether a SIGTERM now waits for the next step boundary: in an epoch's steps, on cpu_sync. A stop mid-epoch
        (max_failure, Ctrl-C) asks the members for their state there (OfferCut), and the SIGTERM that comes with it
        must not end the rank first, nor leave its weights half-stepped for a save in `except cohort.Stopped`.
        Anywhere else, and a second time, it stops at once."""
        if not self._in_steps or self.backend != "cpu_sync" or self._term_at is not None:
            return False
        import time

        self._term_at = time.monotonic()
        self._orders.notify()
        return True

    def _stop_at_boundary(self, epoch: int) -> bool:
        """After a deferred SIGTERM, at a step boundary: wait a moment for the cut the stop may ask for (its order and
        the SIGTERM leave the launcher together); True when one is asked, to be offered after this step's agreement.
        Without one the rank stops here (Stopped)."""
        asked = self._orders.wait(lambda: epoch in self._orders.cut_asked, _CUT_ORDER_WAIT_S)
        if asked:
            return True
        self._stop(TERM_REASON)

    def _stop(self, reason: str) -> None:
        """Stop here: `reason` unless cohort gave one first."""
        with self._orders.changed:
            self._orders.stop_reason = self._orders.stop_reason or reason
            self._orders.changed.notify_all()
        self.stopping.set()
        raise Stopped(self._orders.stop_reason)

    def _stop_owing_cut(self, epoch: int) -> None:
        """At the members' agreed boundary, without ctx.checkpoint.provide: the rank stops here, its weights whole,
        and its save in `except cohort.Stopped` is its cut (or its exit says it has none)."""
        self._orders.cut_asked.discard(epoch)
        self._cut_owed = {"_tag": "CutOffer", "epoch": epoch, "done": self._done, "rounds": self._rounds, "steady": True}
        self._stop("the run is stopping mid-epoch (a save in `except cohort.Stopped` keeps the epoch's progress)")

    def _save_epoch(self) -> int:
        if self._epoch is None:
            raise CohortError("ctx.checkpoint.save(state) offers the state after an epoch: call it once the epoch's "
                              "batches are done, inside `for plan in ctx.epochs()` (a save before any epoch is not counted)")
        return self._epoch

    def _save_on_stop(self, state: Any) -> None:
        """The one save a stopped rank may make, in `except cohort.Stopped`: its cut when it stopped at the members'
        agreed boundary mid-epoch, else its offer for the epoch just trained (counted if the vote is still open)."""
        if self._saved_on_stop:
            raise Stopped(self._orders.stop_reason or TERM_REASON)
        self._saved_on_stop = True
        text = _encode_state(state, self._envelope.checkpoint_pickle)
        owed, self._cut_owed = self._cut_owed, None
        if owed is not None:
            # The coordinator writes it once every member asked has answered; nothing comes back to wait for.
            trace(f"rank {self.rank} saves its cut of epoch {owed['epoch']} on stop: {owed['done']} sample(s) done")
            self._link.report({**owed, "state": text})
            return
        epoch = self._save_epoch()
        self._link.report({"_tag": "CheckpointSave", "epoch": epoch, "state": text})
        self._orders.wait_through_stop(lambda: epoch in self._orders.saved, _SAVE_ANSWER_WAIT_S)

    def _settle_owed_cut(self) -> None:
        """At exit: a cut still owed is answered without a state, so the coordinator need not wait for the exit."""
        owed, self._cut_owed = self._cut_owed, None
        if owed is not None:
            self._link.report(owed)

    def _step_without_batch(self) -> None:
        """The others step: join their all-reduce with nothing to add, and take the same optimizer step."""
        for model, _, step in self._watched:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            if self._sync_gradients(model, 0):
                step()

    def _offer_cut(self, epoch: int) -> None:
        """This rank's state at the members' agreed boundary, with the samples it has done: every member's is the same
        weights (the step's all-reduce), so the coordinator may write any one with the epoch's coverage. Without
        ctx.checkpoint.provide there is no state to offer, and the stop keeps the last epoch's consensus at once."""
        self._orders.cut_asked.discard(epoch)
        offer: Dict[str, Any] = {"_tag": "CutOffer", "epoch": epoch, "done": self._done, "rounds": self._rounds, "steady": self._provide is not None}
        if self._provide is not None:
            offer["state"] = _encode_state(self._provide(), self._envelope.checkpoint_pickle)
        trace(f"rank {self.rank} offers a cut of epoch {epoch}: {self._done} sample(s) done, {self._rounds} round(s)")
        self._link.report(offer)

    def progress(self, samples: int, **metrics: float) -> bool:
        """`samples` more samples of the current plan are done (after the step that learnt from them); `metrics` are
        shown with the run's progress. False when the step did not count (a member died during its all-reduce:
        the optimizer skipped it, and the same batch comes again once the group re-forms); True otherwise."""
        if self._epoch is None:
            raise CohortError("ctx.progress() is for samples of an epoch plan: call it inside `for plan in ctx.epochs()`")
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
            raise CohortError(f"progress(samples) needs a whole number of at least 0, got {samples!r}")
        if self._replaying:
            return False  # a step at weight 0 (DDP, no batch left): it did not count; its samples were another step's
        if self._step_failed:
            # The group is broken: form the new one now, so that ctx.generation and ctx.members say it from here on
            # (the next step would form it anyway; every survivor's step failed alike, so they form it together).
            groups = self._groups
            if groups.is_broken() and groups.known_generation() > groups.generation:
                groups.catch_up(death_patience_s(self._envelope))
            return False
        self._done += samples
        report: Dict[str, Any] = {"_tag": "Progress", "epoch": self._epoch, "done": self._done}
        if metrics:
            kept, dropped = bounded_metrics(metrics)
            for name, why in dropped:
                self._warn_metric(name, why)
            if kept:
                report["metrics"] = kept
        self._link.report(report)
        return True

    def _warn_metric(self, name: str, why: str) -> None:
        """A metric left out of a report, said once per name (a few dozen names at most: the warnings stay few)."""
        if name in self._warned_metrics or len(self._warned_metrics) >= 64:
            return
        self._warned_metrics.add(name)
        import sys

        print(f"cohort: ctx.progress() of rank {self.rank} reported metric {json.dumps(name, ensure_ascii=False)}: not shown, {why} (said once per name)",
              file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ stopping

    def _check_alive(self) -> None:
        if self._orders.stop_reason is not None:
            self.stopping.set()
            raise Stopped(self._orders.stop_reason)
        if self._orders.lost is not None:
            raise CohortError(self._orders.lost)
