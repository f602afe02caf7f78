"""The rank's link to its host's relay (docs/protocol.md): length-prefixed JSON frames over a Unix socket.

A reader thread takes every frame off the socket and files the coordinator's orders in `Orders`; a beat thread
says the rank is alive every second and ends the process when the coordinator has been silent for the heartbeat
timeout, as the TypeScript client does: no rank outlives its launcher. Everything that waits on the link waits on
`Orders.changed`, which every order (and every finished collective, see _groups) notifies."""
import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ._envelope import PROTOCOL_VERSION, Envelope
from ._errors import CohortError

_FRAME_MAX = 256 << 20
_BEAT_S = 1.0


def encode_frame(message: Dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return struct.pack("<I", len(body)) + body


class FrameReader:
    """Frames out of a byte stream cut anywhere."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def push(self, chunk: bytes) -> List[Dict[str, Any]]:
        self._buffer += chunk
        out = []
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from("<I", self._buffer, 0)
            if length > _FRAME_MAX:
                raise CohortError(f"the relay announced a frame of {length} bytes, more than {_FRAME_MAX}")
            if len(self._buffer) < 4 + length:
                break
            body = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            out.append(json.loads(body.decode("utf-8")))
        return out


class Orders:
    """What the coordinator has said so far, under one condition variable."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.welcome: Optional[Dict[str, Any]] = None
        #: epoch -> {"ranges": [[start, end], ...], "ended": bool}
        self.epochs: Dict[int, Dict[str, Any]] = {}
        self.finished = False
        self.saved: set = set()
        self.group: Optional[Dict[str, Any]] = None
        self.stop_reason: Optional[str] = None
        self.lost: Optional[str] = None
        self.refused: Optional[str] = None
        self.cut_asked: set = set()
        #: The rendezvous store's calls awaiting an answer (_store.StoreCalls), and the answers come for them.
        self.store_pending: set = set()
        self.store_answers: Dict[int, Dict[str, Any]] = {}

    def take(self, order: Dict[str, Any]) -> None:
        tag = order.get("_tag")
        with self.changed:
            if tag == "Welcome":
                self.welcome = order
            elif tag == "EpochStart":
                self.epochs[int(order["epoch"])] = {"ranges": [(r["start"], r["end"]) for r in order["ranges"]], "ended": False}
            elif tag == "EpochExtend":
                state = self.epochs.get(int(order["epoch"]))
                if state is not None:
                    state["ranges"].extend((r["start"], r["end"]) for r in order["ranges"])
            elif tag == "EpochEnd":
                state = self.epochs.get(int(order["epoch"]))
                if state is not None:
                    state["ended"] = True
            elif tag == "TrainingDone":
                self.finished = True
            elif tag == "CheckpointSaved":
                self.saved.add(int(order["epoch"]))
            elif tag == "Group":
                if self.group is None or order["generation"] > self.group["generation"]:
                    self.group = order
            elif tag == "StoreAnswer":
                # Kept only while its call waits: the answer to a call given up on is dropped.
                call_id = order.get("id")
                if call_id in self.store_pending:
                    self.store_answers[call_id] = order
            elif tag == "OfferCut":
                self.cut_asked.add(int(order["epoch"]))
            elif tag == "Stop":
                self.stop_reason = str(order.get("reason", "the run is stopping"))
            self.changed.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        """Wait until `ready()` (checked under the lock) or `timeout` seconds; a lost link or a stop ends the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while not ready():
                if self.lost is not None or self.stop_reason is not None:
                    return ready()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                # Short slices: a signal handler (SIGTERM) runs between them.
                self.changed.wait(0.2 if left is None else min(left, 0.2))
            return True

    def wait_through_stop(self, ready: Callable[[], bool], timeout: float) -> bool:
        """As `wait`, but a stop does not end it (a stopped rank's last save waits for its answer); a lost link does."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not ready() and self.lost is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.2))
            return ready()

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()


class RelayLink:
    def __init__(self, envelope: Envelope, orders: Orders, on_lost: Callable[[str], None]) -> None:
        self._envelope = envelope
        self._orders = orders
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._closing = False
        self._last_order = time.monotonic()
        self._socket = self._dial()
        self.send({"t": "hello", "rank": envelope.rank, "version": PROTOCOL_VERSION})
        threading.Thread(target=self._read, name="cohort-relay-reader", daemon=True).start()
        threading.Thread(target=self._beat, name="cohort-heartbeat", daemon=True).start()

    def _dial(self) -> socket.socket:
        # The relay starts once every rank of the host runs: dial again every 20 ms meanwhile.
        deadline = time.monotonic() + self._envelope.heartbeat_timeout_s
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self._envelope.socket)
                return sock
            except OSError as error:
                sock.close()
                last = error
                time.sleep(0.02)
        raise CohortError(f"cannot reach the host's relay at {self._envelope.socket}: {last}")

    def send(self, message: Dict[str, Any]) -> None:
        frame = encode_frame(message)
        with self._lock:
            if self._closing:
                return
            try:
                self._socket.sendall(frame)
            except OSError as error:
                self._lose(f"lost the host's relay ({error})")

    def report(self, report: Dict[str, Any]) -> None:
        self.send({"t": "report", "report": report})

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._socket.close()

    def _lose(self, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        with self._orders.changed:
            self._orders.lost = reason
            self._orders.changed.notify_all()
        self._on_lost(reason)

    def _read(self) -> None:
        reader = FrameReader()
        while True:
            try:
                chunk = self._socket.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                return self._lose("lost the host's relay")
            try:
                messages = reader.push(chunk)
            except (CohortError, ValueError) as error:
                return self._lose(f"the relay sent something unreadable ({error})")
            for message in messages:
                kind = message.get("t")
                if kind == "order":
                    # Only the coordinator's word shows it is alive: the relay alone does not keep a rank going.
                    self._last_order = time.monotonic()
                    self._orders.take(message.get("order") or {})
                elif kind == "refused":
                    with self._orders.changed:
                        self._orders.refused = str(message.get("reason"))
                        self._orders.changed.notify_all()
                    return self._lose(f"the relay refused this rank: {message.get('reason')}")

    def _beat(self) -> None:
        timeout = self._envelope.heartbeat_timeout_s
        while not self._closing:
            time.sleep(_BEAT_S)
            self.report({"_tag": "Heartbeat"})
            # Counted from the welcome: a rank that joined waits, unanswered, for the epoch boundary it enters at.
            if self._orders.welcome is not None and time.monotonic() - self._last_order > timeout:
                return self._lose(f"heard nothing from the coordinator for {timeout:.1f} s")
