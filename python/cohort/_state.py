"""Training state as bytes that decode without running code: the checkpoints the coordinator keeps and the optimizer
state a re-formed group copies between members.

torch.save writes a pickle, and unpickling another rank's bytes runs whatever that rank put in them; torch 1.13's
`weights_only=True` is safe but refuses an optimizer's state_dict (its unpickler has no Python floats). So this
codec knows the few things a state holds (dicts, lists, tuples, None, bool, int, float, str and tensors) and
nothing else: what it cannot say it refuses to write, naming the value's type and where it sits, and what it reads
is data, checked against the bytes it came in.

The bytes: a magic line, the length of a JSON header (8 bytes, little-endian), the header, then each tensor's
elements (C order, little-endian), one after the other. The header is the structure, with every value tagged where
JSON alone would lose it: a dict is `{"dict": [[key, value], ...]}` (its keys' types and order kept; an
OrderedDict's `_metadata`, which nn.Module.load_state_dict reads, as `"metadata"`), a tuple `{"tuple": [...]}`, a
non-finite float `{"float": "inf" | "-inf" | "nan"}`, a tensor `{"tensor": [dtype, shape]}`; every other JSON
object is refused. The same state always makes the same bytes, so ranks holding equal states can compare digests.
"""
import json
import math
import struct
import sys
from collections import OrderedDict, defaultdict
from typing import Any, Dict, List, Tuple

from ._errors import CohortError

#: The format's name and version, first in every encoding.
MAGIC = b"cohort-state 1\n"
_LENGTH = struct.Struct("<Q")
#: Deeper than any state_dict nests; a bound keeps a crafted header from exhausting the stack.
_MAX_DEPTH = 64
#: The dimensions a tensor may have (torch's own limit), and the largest size of one (torch counts in int64).
_MAX_DIMS = 64
_MAX_DIM_SIZE = 2 ** 62
#: The containers read as dicts (a state_dict is an OrderedDict; optimizers and schedulers keep defaultdicts).
_DICTS = (dict, OrderedDict, defaultdict)
_OPT_IN = ("or set job.checkpoint_pickle: true in the cluster file to use torch.save's pickle "
           "(it lets any rank's code run on every host)")

#: dtype name -> (torch attribute, bytes per element). Only these are written or read.
_DTYPES: Dict[str, Tuple[str, int]] = {
    "float16": ("float16", 2), "bfloat16": ("bfloat16", 2), "float32": ("float32", 4), "float64": ("float64", 8),
    "complex64": ("complex64", 8), "complex128": ("complex128", 16),
    "int8": ("int8", 1), "int16": ("int16", 2), "int32": ("int32", 4), "int64": ("int64", 8),
    "uint8": ("uint8", 1), "bool": ("bool", 1),
}


def _torch_or_none() -> Any:
    # A state can hold a tensor only where torch is imported: a state without one needs no torch at all.
    return sys.modules.get("torch")


# ---------------------------------------------------------------------------------------------------- encode


def encode(obj: Any) -> bytes:
    """`obj` as bytes that `decode` turns back into an equal value (tensors onto the CPU), or a CohortError naming
    the first value it cannot hold and where it is."""
    torch = _torch_or_none()
    blobs: List[bytes] = []
    tree = _encode_value(obj, "state", 0, torch, blobs)
    header = json.dumps(tree, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    return b"".join([MAGIC, _LENGTH.pack(len(header)), header] + blobs)


def _refuse(path: str, what: str) -> CohortError:
    return CohortError(f"cannot save {path}: {what}; keep to dicts, lists, tuples, None, bool, int, float, str and "
                       f"tensors (state_dict() gives those), {_OPT_IN}")


def _encode_value(value: Any, path: str, depth: int, torch: Any, blobs: List[bytes]) -> Any:
    if depth > _MAX_DEPTH:
        raise _refuse(path, f"it nests deeper than {_MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        if value.bit_length() > 4096:  # past what JSON's reader takes back (Python caps an int's digits)
            raise _refuse(path, f"it is an int of {value.bit_length()} bits")
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if kind in _DICTS:
        pairs = []
        for key, item in value.items():
            if type(key) is not str and type(key) is not int:
                raise _refuse(f"{path}[{key!r}]", f"a dict key must be a str or an int, not {_type_name(key)}")
            pairs.append([key, _encode_value(item, f"{path}[{key!r}]", depth + 1, torch, blobs)])
        out: Dict[str, Any] = {"dict": pairs}
        metadata = getattr(value, "_metadata", None)
        if isinstance(metadata, dict):
            out["metadata"] = _encode_value(metadata, f"{path}._metadata", depth + 1, torch, blobs)
        return out
    if kind is list:
        return [_encode_value(item, f"{path}[{i}]", depth + 1, torch, blobs) for i, item in enumerate(value)]
    if kind is tuple or (torch is not None and kind is torch.Size):
        return {"tuple": [_encode_value(item, f"{path}[{i}]", depth + 1, torch, blobs) for i, item in enumerate(value)]}
    if torch is not None and isinstance(value, torch.Tensor):
        return _encode_tensor(value, path, torch, blobs)
    raise _refuse(path, f"it is a {_type_name(value)}")


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _encode_tensor(tensor: Any, path: str, torch: Any, blobs: List[bytes]) -> Any:
    name = str(tensor.dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise _refuse(path, f"it is a tensor of {tensor.dtype}, which this format does not hold")
    if tensor.layout != torch.strided or getattr(tensor, "is_quantized", False):
        raise _refuse(path, f"it is a {tensor.layout} tensor; only dense tensors are held")
    # Onto the CPU, in C order, with any lazy conjugate or negation applied: the bytes are the values themselves.
    try:
        dense = tensor.detach().to("cpu")
        if dense.is_complex():
            dense = dense.resolve_conj()
        dense = dense.resolve_neg().contiguous()
    except (RuntimeError, NotImplementedError) as error:
        raise _refuse(path, f"it is a tensor on {tensor.device} that cannot be copied to the CPU ({error})") from None
    if dense.numel() > 0:
        flat = dense.reshape(-1).view(torch.uint8)
        data = flat.numpy().tobytes() if _has_numpy() else bytes(flat.tolist())
        if sys.byteorder != "little" and _DTYPES[name][1] > 1:
            raise _refuse(path, "this host is big-endian, and the format's tensors are little-endian")
        blobs.append(data)
    return {"tensor": [name, list(dense.shape)]}


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401  (torch's .numpy() needs it)
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------- decode


def decode(data: bytes) -> Any:
    """The value `encode` wrote, tensors on the CPU; a CohortError when `data` is not such an encoding. Reads data
    only (no code runs), and allocates in proportion to `data`'s size: every length is checked against the bytes
    at hand before anything is made."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _malformed(f"expected bytes, got {_type_name(data)}")
    view = memoryview(data.tobytes() if isinstance(data, memoryview) else data)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise _malformed("it does not start with the cohort-state header (not a state this client wrote)")
    start = len(MAGIC) + _LENGTH.size
    if len(view) < start:
        raise _malformed("it ends inside its header")
    (length,) = _LENGTH.unpack(view[len(MAGIC):start])
    if length > len(view) - start:
        raise _malformed(f"its header claims {length} bytes but only {len(view) - start} follow")
    try:
        tree = json.loads(bytes(view[start:start + length]).decode("ascii"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise _malformed(f"its header is not valid JSON ({type(error).__name__})") from None
    reader = _Reader(view, start + length)
    value = reader.value(tree, "state", 0)
    if reader.offset != len(view):
        raise _malformed(f"{len(view) - reader.offset} bytes follow its last tensor")
    return value


def _malformed(why: str) -> CohortError:
    return CohortError(f"cannot load this state: {why}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Reader:
    """Walks the header, taking each tensor's bytes from the data that follows it, in order."""

    def __init__(self, view: memoryview, offset: int) -> None:
        self.view = view
        self.offset = offset
        self.torch: Any = None

    def value(self, node: Any, path: str, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise _malformed(f"{path} nests deeper than {_MAX_DEPTH} levels")
        kind = type(node)
        if node is None or kind in (bool, int, float, str):
            return node
        if kind is list:
            return [self.value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node)]
        if kind is not dict or len(node) == 0:
            raise _malformed(f"{path} is not a value this format writes")
        if "dict" in node and set(node) <= {"dict", "metadata"}:
            return self._dict(node, path, depth)
        if len(node) != 1:
            raise _malformed(f"{path} is an object with fields {sorted(node)}, which this format does not write")
        (tag, body), = node.items()
        if tag == "tuple" and type(body) is list:
            return tuple(self.value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(body))
        if tag == "float" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag == "tensor":
            return self._tensor(body, path)
        raise _malformed(f"{path} is tagged {tag!r}, which this format does not write")

    def _dict(self, node: Dict[str, Any], path: str, depth: int) -> Any:
        pairs = node["dict"]
        if type(pairs) is not list:
            raise _malformed(f"{path} is a dict without a list of pairs")
        out: Dict[Any, Any] = OrderedDict() if "metadata" in node else {}
        for pair in pairs:
            if type(pair) is not list or len(pair) != 2 or type(pair[0]) not in (str, int):
                raise _malformed(f"{path} has an entry that is not a [str or int key, value] pair")
            key = pair[0]
            if key in out:
                raise _malformed(f"{path} has the key {key!r} twice")
            out[key] = self.value(pair[1], f"{path}[{key!r}]", depth + 1)
        if "metadata" in node:
            metadata = self.value(node["metadata"], f"{path}._metadata", depth + 1)
            if type(metadata) is not dict:
                raise _malformed(f"{path}._metadata is not a dict")
            out._metadata = metadata  # type: ignore[attr-defined]
        return out

    def _tensor(self, body: Any, path: str) -> Any:
        if type(body) is not list or len(body) != 2 or type(body[0]) is not str or type(body[1]) is not list:
            raise _malformed(f"{path} is a tensor without [dtype, shape]")
        name, shape = body
        if name not in _DTYPES:
            raise _malformed(f"{path} is a tensor of {name!r}, which this format does not hold")
        if len(shape) > _MAX_DIMS or any(type(n) is not int or not 0 <= n <= _MAX_DIM_SIZE for n in shape):
            raise _malformed(f"{path} has a shape that is not up to {_MAX_DIMS} whole numbers from 0 to 2**62")
        count = 1
        for n in shape:
            count *= n
        size = count * _DTYPES[name][1]
        # The size is checked against the bytes at hand before anything is allocated.
        if size > len(self.view) - self.offset:
            raise _malformed(f"{path} needs {size} bytes but only {len(self.view) - self.offset} are left")
        torch = self._torch()
        dtype = getattr(torch, _DTYPES[name][0])
        if sys.byteorder != "little" and _DTYPES[name][1] > 1:
            raise _malformed("this host is big-endian, and the format's tensors are little-endian")
        chunk = bytearray(self.view[self.offset:self.offset + size])
        self.offset += size
        if name == "bool" and chunk.translate(None, b"\x00\x01"):
            raise _malformed(f"{path} is a bool tensor with bytes other than 0 and 1")
        try:
            if count == 0:
                return torch.empty(shape, dtype=dtype)
            return torch.frombuffer(chunk, dtype=torch.uint8).view(dtype).reshape(shape)
        except (RuntimeError, ValueError, OverflowError) as error:
            raise _malformed(f"{path} is not a tensor torch can make ({error})") from None

    def _torch(self) -> Any:
        if self.torch is None:
            try:
                import torch
            except ImportError:
                raise CohortError("cannot load this state: it holds tensors, and torch is not installed here") from None
            self.torch = torch
        return self.torch
