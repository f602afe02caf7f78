"""The user's own collectives: torch's default-group calls guarded, and protected helpers over the current members.

**Guarded.** `cohort.init()` wraps torch.distributed's collectives (every one with an `async_op` argument:
all_reduce, broadcast, all_gather, reduce, gather, scatter, barrier, …), in `torch.distributed` and in
`distributed_c10d`, whose own helpers (`all_gather_object`, …) call them. A call on the default group is then
started asynchronously and waited for alongside the coordinator's orders: when a member is lost meanwhile, it
raises `cohort.MemberLost` as soon as cohort announces the group without it (a SIGKILLed peer: within
milliseconds; a frozen one: at the heartbeat timeout), never after gloo's or NCCL's 600 s. Calls the user makes
asynchronously (`async_op=True`), and calls on groups of the user's own, are left as torch makes them.

**Protected helpers** (`ctx.all_reduce`, `ctx.all_gather`, `ctx.barrier`) never raise MemberLost: over the
client's own group, they re-form the group when a member is lost and take the call again over the members left.
That is the evaluation pattern: a metric summed over whoever is there when it completes."""
import functools
import inspect
import types
from typing import Any, Callable, List

from ._errors import CohortError
from ._groups import GroupKeeper

#: A marker on what this module wrapped, so that a second init (or a reload) never wraps a wrapper.
_GUARDED = "__cohort_guarded__"


def _guard(dist: Any, original: Callable[..., Any], keeper: GroupKeeper, patience_s: float) -> Callable[..., Any]:
    signature = inspect.signature(original)
    name = original.__name__

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # torch says what is wrong with the call, as it would have
        group = bound.arguments.get("group")
        if bound.arguments.get("async_op") or not (group is None or group is dist.GroupMember.WORLD):
            return original(*args, **kwargs)
        keeper.before_user_collective(f"dist.{name}")
        bound.arguments["async_op"] = True
        work = original(*bound.args, **bound.kwargs)
        if work is not None:  # None: this rank is in no group (torch's own answer for a non-member)
            keeper.wait_user(work, f"dist.{name}", patience_s)
        return None

    setattr(guarded, _GUARDED, True)
    return guarded


def guard_default_group(dist: Any, keeper: GroupKeeper, patience_s: float) -> List[str]:
    """Wrap the default group's blocking collectives (see the header); the names wrapped, for the trace."""
    c10d = dist.distributed_c10d
    wrapped: List[str] = []
    # The module's own dict, by the value's exact type: touching its other members (torch's deprecated
    # `reduce_op`) would print their warnings.
    for name, original in sorted(vars(c10d).items()):
        if name.startswith("_") or type(original) is not types.FunctionType or getattr(original, _GUARDED, False):
            continue
        try:
            parameters = inspect.signature(original).parameters
        except (TypeError, ValueError):
            continue
        if "async_op" not in parameters or "group" not in parameters:
            continue
        guarded = _guard(dist, original, keeper, patience_s)
        setattr(c10d, name, guarded)
        if getattr(dist, name, None) is original:
            setattr(dist, name, guarded)
        wrapped.append(name)
    return sorted(wrapped)


_OPS = ("sum", "mean", "max", "min")


def check_op(op: str) -> None:
    if op not in _OPS:
        raise CohortError(f"op must be one of {', '.join(_OPS)}, got {op!r}")
