"""torchrun for bench/launch-latency.ts: `python3 bench/launch-torchrun.py <torchrun args>`.

Debian 12's python3-torch (1.13) under Python 3.11 cannot start torchrun with
its defaults: `Std.from_str("0")` returns None (3.11 no longer iterates the
IntFlag's zero member), and `to_map` then fails with "'NoneType' object has no
attribute 'get'". This maps that None back to Std.NONE (a no-op where torch
works) and runs torch.distributed.run's main, unchanged otherwise."""
import sys

from torch.distributed.elastic.multiprocessing.api import Std

_from_str = Std.from_str.__func__


def _fixed_from_str(cls, vm):
    value = _from_str(cls, vm)
    if value is None:
        return Std.NONE
    if isinstance(value, dict):
        return {k: Std.NONE if v is None else v for k, v in value.items()}
    return value


Std.from_str = classmethod(_fixed_from_str)

from torch.distributed.run import main  # noqa: E402

sys.argv[0] = "torchrun"
main()
