"""The rank's torch.distributed groups, one generation at a time, as the coordinator's `Group` orders say.

Each generation has two groups over the same members, meeting at the launcher's rendezvous store for that
generation (_store.py: calls over the rank's authenticated path, no port of the rank's own):
- the client's own (`ProcessGroupGloo`, on CPU tensors whatever the job's backend), which carries every collective the client
  makes: the per-step agreement, the gradients (under `backend: nccl`, a GPU's go through the default group
  instead, so they never leave the GPU), the state a re-form copies. No one else holds it, and the client
  never blocks inside it: each collective is started asynchronously and waited for alongside the coordinator's
  orders, so when a member dies the survivors drop the collective the moment the new generation is announced,
  instead of waiting out gloo's timeout (a survivor that is not the dead rank's neighbour in the ring hears of
  the death from nobody else);
- torch's default group (`init_process_group`, gloo or, for `backend: nccl`, NCCL), for the user's own calls (`dist.get_rank()`, an evaluation's
  all_reduce). Those are guarded the same way (_protected.py): when a member is lost during one, it raises
  `cohort.MemberLost` as soon as the new generation is announced, instead of waiting out the group's timeout.
  An NCCL group is aborted before it is dropped (a collective waiting for the dead would hold it), and NCCL's
  watchdog is told not to end the process on a failed collective (TORCH_NCCL_ASYNC_ERROR_HANDLING=0, unless the
  job sets it): cohort's announcement is what ends the generation.

Forming a generation runs in a thread, and every store call of a generation ends the moment a newer one is
announced, so a member that dies while the others wait for it at the rendezvous costs one more generation, not
the store's timeout. Once both groups are formed the rank says so (`GroupFormed`): the launcher gives up on the
members of a generation that has not formed within its bound (cause `rendezvous`).

Gloo's pairs speak plain TCP between the members: they are bound to the address this host announces toward the
controller (GLOO_SOCKET_IFNAME, unless the job sets it), not to every interface."""
import os
import threading
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence

from ._errors import CohortError, MemberLost, Stopped
from ._relay import Orders, RelayLink
from ._state import decode as decode_state, encode as encode_state
from ._store import StoreCalls, make_store


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        raise CohortError(f"cohort's Python client needs torch for its process groups ({error}): install torch for this python") from None
    if not dist.is_available():
        raise CohortError("this torch was built without torch.distributed: cohort's Python client needs it")
    return torch, dist


def group_timeout_s() -> float:
    """How long a collective or a rendezvous may take (COHORT_GROUP_TIMEOUT_S, default 600 s): deaths are not
    found this way (the coordinator says), only a member that hangs."""
    text = os.environ.get("COHORT_GROUP_TIMEOUT_S", "600")
    try:
        value = float(text)
    except ValueError:
        raise CohortError(f"COHORT_GROUP_TIMEOUT_S is {text!r}: give seconds, like 600") from None
    if value <= 0:
        raise CohortError(f"COHORT_GROUP_TIMEOUT_S is {text}: give a number of seconds above 0")
    return value


_LEVEL = os.environ.get("COHORT_LOG_LEVEL", "").strip().lower()
_TRACE = _LEVEL in ("debug", "trace")
#: Every step's line, not one every STEP_LINE_EVERY_S: COHORT_LOG_LEVEL=trace (the launcher's -v is debug).
_EVERY_STEP = _LEVEL == "trace"
#: Under debug, a rank's step lines come at most this often (plus each epoch's first and last step).
STEP_LINE_EVERY_S = 5.0


def trace(message: str) -> None:
    """A line for someone finding out what the client did (COHORT_LOG_LEVEL=debug, or `bun run launch -v`)."""
    if _TRACE:
        import sys

        print(f"cohort client: {message}", file=sys.stderr, flush=True)


class StepLines:
    """The per-step trace lines, kept useful under -v: a line per step and rank is a hundred lines for a tiny epoch
    and swamps what -v is for (groups formed, deaths, cuts). Under debug, an epoch's first step, then at most one
    line every `every_s` seconds saying how many steps it stands for, then the epoch's end with its step count.
    Under COHORT_LOG_LEVEL=trace, every step. The clock is passed in so that a test can drive it."""

    def __init__(self, every_step: bool = _EVERY_STEP, every_s: float = STEP_LINE_EVERY_S, clock: Optional[Callable[[], float]] = None) -> None:
        import time

        self._every_step = every_step
        self._every_s = every_s
        self._clock = clock or time.monotonic
        self._epoch: Optional[int] = None
        self._last = 0.0
        self._quiet = 0
        self._steps = 0

    def step(self, epoch: int, message: str) -> None:
        """One step's line, said or counted."""
        if not _TRACE:
            return
        now = self._clock()
        if epoch != self._epoch:
            self._epoch, self._steps, self._quiet = epoch, 0, 0
            first = True
        else:
            first = False
        self._steps += 1
        if self._every_step or first or now - self._last >= self._every_s:
            quiet = f" ({self._quiet} step(s) since the last line)" if self._quiet else ""
            trace(f"{message}{quiet}")
            self._last, self._quiet = now, 0
        else:
            self._quiet += 1

    def epoch_end(self, rank: int, epoch: int) -> None:
        """The epoch's end for this rank: how many steps it took part in (the step lines left out are in that count)."""
        steps = self._steps if epoch == self._epoch else 0
        trace(f"rank {rank} epoch {epoch}: every member saw its end after {steps} step(s)")
        self._epoch, self._steps, self._quiet = None, 0, 0


class Abandoned(Exception):
    """A collective or a rendezvous given up on: a newer generation was announced meanwhile."""


def interface_of(address: str) -> Optional[str]:
    """The name of the network interface that holds IPv4 `address` (Linux), or None when none does."""
    import fcntl
    import socket
    import struct

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode("utf-8")[:15])
                answer = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address on this one
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
        return None
    finally:
        probe.close()


def bind_gloo(address: str, environ: Dict[str, str] = os.environ) -> None:
    """Bind gloo's pairs to `address`'s interface: gloo reads GLOO_SOCKET_IFNAME each time it makes a group. A
    job's own GLOO_SOCKET_IFNAME is kept."""
    if environ.get("GLOO_SOCKET_IFNAME"):
        return
    name = interface_of(address)
    if name is None:
        raise CohortError(
            f"no network interface of this host holds {address}, the address it reaches the controller from: "
            "set GLOO_SOCKET_IFNAME in the worker's env to the interface gloo should use"
        )
    environ["GLOO_SOCKET_IFNAME"] = name
    trace(f"gloo binds to {name} ({address})")


def abort_nccl(dist: Any, group: Any) -> Optional[str]:
    """Abort an NCCL group's communicators, by the first way this torch has (newest first); the way taken, or None
    when it has none (the group is then only destroyed)."""
    ways = (
        ("distributed_c10d._abort_process_group", lambda: getattr(dist.distributed_c10d, "_abort_process_group")(group)),
        ("ProcessGroup.abort", lambda: group.abort()),
        ("ProcessGroupNCCL.abort", lambda: group._get_backend(_cuda_device()).abort()),
        ("ProcessGroupNCCL._abort", lambda: group._get_backend(_cuda_device())._abort()),
    )
    for name, way in ways:
        try:
            way()
        except (AttributeError, NotImplementedError, TypeError):
            continue
        except RuntimeError as error:  # aborted already, or broken past aborting: it holds nothing now
            trace(f"NCCL group abort by {name}: {error}".splitlines()[0])
        trace(f"NCCL group aborted ({name})")
        return name
    return None


def _cuda_device() -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device())


class GroupKeeper:
    def __init__(self, rank: int, backend: str, orders: Orders, link: RelayLink, address: str) -> None:
        self.torch, self.dist = _torch()
        self.rank = rank
        self.backend = "nccl" if backend == "nccl" else "gloo"
        self.orders = orders
        self.link = link
        self.timeout = timedelta(seconds=group_timeout_s())
        bind_gloo(address)
        #: The store of the generation formed last: torch holds it from C++, so Python keeps it alive too.
        self._store: Any = None
        self.generation = 0
        self.members: List[int] = []
        self.pg = None
        #: The generation whose state this rank holds (0: none yet: a newcomer's weights are not the group's).
        self.trained = 0
        #: The state of the group just formed has yet to be copied to every member.
        self.needs_sync = False
        #: Why the last collective failed, when it did (the group is then broken until the next generation).
        self.failure: Optional[str] = None
        #: `backend: nccl`: the generation's default group (NCCL's), which also reduces the gradients, so that a GPU's
        #: stay on it. None on the CPU: everything goes through the client's gloo group.
        self.bulk: Any = None
        if self.backend == "nccl":
            # A peer's death must not end this process from NCCL's watchdog (its default tears the process down on a
            # failed collective): cohort announces the death, and the group is aborted and formed again (_drop).
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")

    # ------------------------------------------------------------------ generations

    def known_generation(self) -> int:
        group = self.orders.group
        return 0 if group is None else int(group["generation"])

    def is_current(self) -> bool:
        return self.pg is not None and self.failure is None and self.generation == self.known_generation()

    def is_broken(self) -> bool:
        """No group to use: none formed yet, or the last collective failed or was given up."""
        return self.pg is None or self.failure is not None

    def _someone_left(self, generation: int, members: Sequence[int]) -> bool:
        """A generation newer than `generation` leaves out one of `members`: one of them died (or was counted out),
        and a collective or a rendezvous that waits for it would wait for the group's timeout. A newer generation
        that only adds members (a restart, an entry) leaves the current group whole: it is formed together, at the
        next step (see _context), not by giving up on the one at work."""
        group = self.orders.group
        return group is not None and int(group["generation"]) > generation and not set(members) <= set(group["members"])

    def lost_since(self, generation: int, members: Sequence[int]) -> List[int]:
        """The `members` a generation newer than `generation` leaves out, ascending (none: nobody left)."""
        group = self.orders.group
        if group is None or int(group["generation"]) <= generation:
            return []
        return sorted(set(members) - set(int(m) for m in group["members"]))

    def catch_up(self, patience_s: float) -> None:
        """Form the newest generation this rank belongs to, when it has not: after a death, a restart, an entry, or
        a failed collective (which waits up to `patience_s` for the generation a death brings, and otherwise is an
        error of the job's own)."""
        while not self.is_current():
            self._check_alive()
            group = self.orders.group
            if group is None or int(group["generation"]) == self.generation:
                # Broken, and no newer generation yet: a death is announced within a moment; anything else is the job's.
                failure = self.failure
                if not self.orders.wait(lambda: self.known_generation() > self.generation, patience_s):
                    self._check_alive()
                    raise CohortError(f"a collective failed and no member of the group was lost: {failure}")
                continue
            if self.rank not in group["members"]:
                # Counted out (silent too long): cohort ends this process; wait for that, or for a group with it.
                self.orders.wait(lambda: self.known_generation() > int(group["generation"]))
                continue
            try:
                self._form(group)
            except Abandoned:
                continue
            except RuntimeError as error:
                # A member died while the others waited for it at the store: the next generation follows.
                self.failure = f"{error}".splitlines()[0]
                self.generation = int(group["generation"])

    def _form(self, group: Dict[str, Any]) -> None:
        generation = int(group["generation"])
        members = [int(m) for m in group["members"]]
        position = members.index(self.rank)
        trace(f"rank {self.rank} forms generation {generation} with {members}")
        self._drop()
        store = make_store(self.dist, StoreCalls(self.link.report, self.orders, generation, self.timeout.total_seconds()))

        def make():
            prefix = self.dist.PrefixStore(f"cohort/{generation}/client", store)
            # Gloo whatever the job's backend: its collectives are CPU tensors (a GPU's gradients are copied).
            return self.dist.ProcessGroupGloo(prefix, position, len(members), self.timeout)

        pg = self._in_thread(make, generation, members)
        # The user's default group, over the same members: formed now that every member is known to be there.
        self.dist.init_process_group(
            self.backend, store=self.dist.PrefixStore(f"cohort/{generation}/default", store),
            rank=position, world_size=len(members), timeout=self.timeout,
        )
        self.pg, self.generation, self.members, self._store = pg, generation, members, store
        if self.backend == "nccl":
            self.bulk = self.dist.distributed_c10d._get_default_group()
        self.failure = None
        self.needs_sync = True
        self.link.report({"_tag": "GroupFormed", "generation": generation})
        trace(f"rank {self.rank} formed generation {generation}")

    def _drop(self) -> None:
        self.pg = None
        bulk, self.bulk = self.bulk, None
        if bulk is not None:
            # A collective that waits for a dead peer holds NCCL's communicator (and its stream) for ever: abort it
            # before the group is destroyed, which would otherwise wait for that collective.
            abort_nccl(self.dist, bulk)
        if self.dist.is_initialized():
            try:
                self.dist.destroy_process_group()
            except Exception:  # noqa: BLE001: an aborted NCCL group may refuse its destruction; it is gone either way
                pass

    def _in_thread(self, make: Callable[[], Any], generation: int, members: Sequence[int]) -> Any:
        """`make()` in a thread of its own, waited for alongside the orders: given up on when a newer generation
        leaves out one of `members` (it would wait for the dead one)."""
        box: Dict[str, Any] = {}

        def run():
            try:
                box["value"] = make()
            except BaseException as error:  # noqa: BLE001: told to the waiting thread
                box["error"] = error
            self.orders.notify()

        threading.Thread(target=run, name=f"cohort-form-{generation}", daemon=True).start()
        self.orders.wait(lambda: bool(box) or self._someone_left(generation, members))
        self._check_alive()
        if "value" in box:
            return box["value"]
        if "error" in box:
            raise box["error"]
        raise Abandoned()

    def _check_alive(self) -> None:
        if self.orders.stop_reason is not None:
            raise Stopped(self.orders.stop_reason)
        if self.orders.lost is not None:
            raise CohortError(self.orders.lost)

    # ------------------------------------------------------------------ collectives

    @property
    def position(self) -> int:
        """This rank's place among the members; -1 while it is in no group (as torch's get_rank() for a non-member):
        a rank that joined too late to enter before training ended never is."""
        return self.members.index(self.rank) if self.rank in self.members else -1

    def _wait(self, work) -> bool:
        """True once `work` is done; False when it failed or was given up for a newer generation (the group is then broken)."""
        generation, members = self.generation, self.members
        # The future, not the work: the future completes (and calls back) before the work says it has.
        future = work.get_future()
        future.add_done_callback(lambda _: self.orders.notify())
        self.orders.wait(lambda: future.done() or self._someone_left(generation, members))
        self._check_alive()
        if not future.done():
            self.failure = f"given up for generation {self.known_generation()}"
            trace(f"rank {self.rank}: {self.failure}")
            return False
        try:
            future.wait()
        except RuntimeError as error:
            self.failure = f"{error}".splitlines()[0]
            trace(f"rank {self.rank}: a collective of generation {generation} failed: {self.failure}")
            return False
        return True

    # ------------------------------------------------------------------ the user's collectives (_protected)

    def _member_lost(self, during: str, generation: int, members: Sequence[int]) -> MemberLost:
        """The default group is broken from now on: the next step (or protected call) forms the new generation."""
        lost = self.lost_since(generation, members)
        self.failure = self.failure or f"rank(s) {', '.join(map(str, lost))} left during {during}"
        trace(f"rank {self.rank}: {self.failure} (generation {generation})")
        return MemberLost(lost, during, generation)

    def before_user_collective(self, during: str) -> None:
        """A collective of the user's on the default group is about to start: one whose members are known to be
        gone already (a newer generation leaves one out) would wait for the dead; it fails at once instead."""
        self._check_alive()
        if self.pg is None:
            raise CohortError(f"{during} before the rank's group formed: call it after cohort.init()")
        if self._someone_left(self.generation, self.members):
            raise self._member_lost(during, self.generation, self.members)

    def wait_user(self, work: Any, during: str, patience_s: float) -> None:
        """Wait for a collective of the user's on the default group, alongside the coordinator's orders: it raises
        MemberLost the moment a generation without one of its members is announced, and also when it failed first
        (gloo's "Connection closed by peer" comes before the launcher's word) and that announcement follows within
        `patience_s`. A failure no death explains is raised as it came."""
        generation, members = self.generation, list(self.members)
        future = work.get_future()
        future.add_done_callback(lambda _: self.orders.notify())
        self.orders.wait(lambda: future.done() or self._someone_left(generation, members))
        self._check_alive()
        if not future.done():
            raise self._member_lost(during, generation, members)
        try:
            future.wait()
        except RuntimeError as error:
            if self.orders.wait(lambda: self._someone_left(generation, members), patience_s):
                raise self._member_lost(during, generation, members) from error
            raise

    def _collective(self, start: Callable[[], Any]) -> bool:
        """Run the collective `start()` begins on the current group; False when the group is or became broken."""
        if self.is_broken():
            return False
        try:
            return self._wait(start())
        except RuntimeError as error:
            self.failure = f"{error}".splitlines()[0]
            return False

    def allreduce(self, tensor, op: str = "sum") -> bool:
        """Reduce `tensor` in place over the group (sum, max or min); False when the group broke meanwhile."""
        options = self.dist.AllreduceOptions()
        options.reduceOp = {"max": self.dist.ReduceOp.MAX, "min": self.dist.ReduceOp.MIN}.get(op, self.dist.ReduceOp.SUM)
        return self._collective(lambda: self.pg.allreduce([tensor], options))

    def allreduce_bulk(self, tensor) -> bool:
        """Sum `tensor` in place over the group: on NCCL's group where there is one and the tensor is on the GPU
        (the gradients), else as `allreduce`; False when the group broke meanwhile."""
        if self.bulk is None or not tensor.is_cuda:
            return self.allreduce(tensor)
        options = self.dist.AllreduceOptions()
        options.reduceOp = self.dist.ReduceOp.SUM
        bulk = self.bulk
        return self._collective(lambda: bulk.allreduce([tensor], options))

    def allgather(self, outputs: List[Any], tensor) -> bool:
        """Gather `tensor` from every member into `outputs` (one per member, in member order); False when the group
        broke meanwhile."""
        return self._collective(lambda: self.pg.allgather([outputs], [tensor]))

    def broadcast(self, tensor, root: int) -> bool:
        options = self.dist.BroadcastOptions()
        options.rootRank = root
        return self._collective(lambda: self.pg.broadcast([tensor], options))

    # ------------------------------------------------------------------ the state a re-form copies

    def sync_state(self, tensors: Sequence[Any], optimizers: Sequence[Any]) -> bool:
        """Copy the group's state to every member: from the lowest member that held the previous generation's (a
        survivor; at the first formation, the lowest rank), its tensors (parameters, buffers) and its optimizers'
        state. False when the group broke meanwhile."""
        torch = self.torch
        held = torch.zeros(len(self.members), dtype=torch.float64)
        held[self.position] = float(self.trained)
        if not self.allreduce(held):
            return False
        source = int(torch.argmax(held).item())  # the first of the most recent holders
        trace(f"rank {self.rank}: generation {self.generation} takes its state from rank {self.members[source]} (held {held.tolist()})")
        for tensor in tensors:
            data = tensor.data if hasattr(tensor, "data") else tensor
            staged = data.detach().cpu().clone()
            if not self.broadcast(staged, source):
                return False
            if self.position != source:
                data.copy_(staged)
        for optimizer in optimizers:
            blob = None
            if self.position == source:
                # Pickle-free (_state): a member's bytes are data to every other member, never code.
                blob = torch.frombuffer(bytearray(encode_state(optimizer.state_dict())), dtype=torch.uint8)
            length = torch.tensor([0 if blob is None else blob.numel()], dtype=torch.int64)
            if not self.broadcast(length, source):
                return False
            received = blob.clone() if blob is not None else torch.zeros(int(length.item()), dtype=torch.uint8)
            if not self.broadcast(received, source):
                return False
            if self.position != source:
                optimizer.load_state_dict(decode_state(received.numpy().tobytes()))
        self.trained = self.generation
        self.needs_sync = False
        return True
