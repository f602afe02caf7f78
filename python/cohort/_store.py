"""The process group's rendezvous store: torch.distributed's `Store`, kept by the launcher, reached over the rank's
link to its relay.

No rank listens on a port for its group's rendezvous. A TCPStore has no authentication: anyone who reaches its port
can read the members' gloo addresses, add to torch's barrier counter (stalling a re-form) or overwrite an address
(pointing a survivor's gloo pair at a listener of their own). Here every call (`set`, `get`, `add`, ...) is a
`StoreCall` report up the rank's Unix socket (a 0700 directory of the run's user) and the relay's authenticated link
to the launcher, which answers it (`StoreAnswer`) for the members of the generation it announced last, and nobody
else (src/launcher/training/groupStore.ts).

`StoreCalls` is the client's half, with nothing of torch in it (tested without torch); `make_store` wraps it in a
`torch.distributed.Store` for gloo, NCCL and `init_process_group`.
"""
import base64
import itertools
import threading
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence

from ._relay import Orders

#: Call numbers, unique for the process: an answer to a call given up on (its generation is over) is never
#: taken for another's.
_ids = itertools.count(1)
_ids_lock = threading.Lock()


def _next_id() -> int:
    with _ids_lock:
        return next(_ids)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"a store value is bytes or str, got {type(value).__name__}")


def _b64(value: Any) -> str:
    return base64.b64encode(_as_bytes(value)).decode("ascii")


class StoreCalls:
    """Generation `generation`'s store calls: each one sent with `send` (a report) and answered through `orders`.

    A call raises RuntimeError (what torch expects of a store) when the launcher refuses it, when it is not answered
    within its timeout, or at once when a newer generation is announced: the rendezvous it belongs to is over."""

    def __init__(self, send: Callable[[Dict[str, Any]], None], orders: Orders, generation: int, timeout_s: float) -> None:
        self._send = send
        self._orders = orders
        self.generation = generation
        self.timeout_s = timeout_s

    def _over(self) -> bool:
        group = self._orders.group
        return group is not None and int(group["generation"]) > self.generation

    def call(self, op: str, keys: Sequence[str], timeout_s: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        orders = self._orders
        call_id = _next_id()
        with orders.changed:
            orders.store_pending.add(call_id)
        try:
            message: Dict[str, Any] = {"_tag": "StoreCall", "generation": self.generation, "id": call_id, "op": op, "keys": list(keys)}
            message.update(fields)
            self._send(message)
            limit = self.timeout_s if timeout_s is None else timeout_s
            orders.wait(lambda: call_id in orders.store_answers or self._over(), limit)
            with orders.changed:
                answer = orders.store_answers.pop(call_id, None)
        finally:
            with orders.changed:
                orders.store_pending.discard(call_id)
        if answer is None:
            if self._over():
                raise RuntimeError(f"cohort store: generation {self.generation} is over (a newer one was announced)")
            if orders.lost is not None:
                raise RuntimeError(f"cohort store: {orders.lost}")
            if orders.stop_reason is not None:
                raise RuntimeError(f"cohort store: the rank is stopping ({orders.stop_reason})")
            raise RuntimeError(f"cohort store: {op} {', '.join(keys)} was not answered within {limit:g} s")
        if "error" in answer:
            raise RuntimeError(f"cohort store: {answer['error']}")
        return answer

    # torch's Store operations, on plain Python values.

    def set(self, key: str, value: Any) -> None:
        self.call("set", [key], value=_b64(value))

    def get(self, key: str) -> bytes:
        return base64.b64decode(self.call("get", [key])["value"])

    def add(self, key: str, amount: int) -> int:
        return int(self.call("add", [key], amount=int(amount))["number"])

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return base64.b64decode(self.call("compare_set", [key], expected=_b64(expected), value=_b64(desired))["value"])

    def wait(self, keys: Sequence[str], timeout_s: Optional[float] = None) -> None:
        self.call("wait", list(keys), timeout_s)

    def check(self, keys: Sequence[str]) -> bool:
        return bool(self.call("check", list(keys))["flag"])

    def delete_key(self, key: str) -> bool:
        return bool(self.call("delete_key", [key])["flag"])

    def num_keys(self) -> int:
        return int(self.call("num_keys", [])["number"])


def make_store(dist: Any, calls: StoreCalls) -> Any:
    """`calls` as a `torch.distributed.Store` (a Python subclass: torch calls its methods from C++)."""

    class CohortStore(dist.Store):
        def __init__(self) -> None:
            super().__init__()
            self._calls = calls

        def set(self, key: str, value: Any) -> None:
            calls.set(key, value)

        def get(self, key: str) -> bytes:
            return calls.get(key)

        def add(self, key: str, amount: int) -> int:
            return calls.add(key, amount)

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            return calls.compare_set(key, expected, desired)

        def wait(self, keys: List[str], timeout: Optional[timedelta] = None) -> None:
            # torch's "no timeout" is zero: the store's own then holds.
            seconds = None if timeout is None else timeout.total_seconds()
            calls.wait(keys, seconds if seconds is not None and seconds > 0 else None)

        def check(self, keys: List[str]) -> bool:
            return calls.check(keys)

        def delete_key(self, key: str) -> bool:
            return calls.delete_key(key)

        def num_keys(self) -> int:
            return calls.num_keys()

        def set_timeout(self, timeout: timedelta) -> None:
            calls.timeout_s = timeout.total_seconds()

    return CohortStore()
