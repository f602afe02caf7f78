"""cohort._state, the client's pickle-free codec for training state, and the checkpoint text built on it
(cohort._context's _encode_state/_decode_state). Run by test/python-state.test.ts twice: with a python3 that has
no torch (the containers and numbers, the refusals, hand-made tensor bytes refused for want of torch) and with
Debian's torch (state_dicts of a model and of SGD and Adam, every dtype and shape, CUDA when there is one).

Expected bytes are written out by hand from the format the module's header describes, never produced by the
code under test; round trips are checked against the values put in."""
import json
import math
import os
import random
import struct
import sys
import tempfile
import unittest
from collections import OrderedDict

from cohort._errors import CohortError
from cohort._state import MAGIC, decode, encode

try:
    import torch
except ImportError:  # the run without torch
    torch = None

with_torch = unittest.skipIf(torch is None, "needs torch")
without_torch = unittest.skipIf(torch is not None, "for a python3 without torch")


def framed(header: str, data: bytes = b"") -> bytes:
    """An encoding made by hand: the magic line, the header's length (8 bytes, little-endian), the header, the data."""
    raw = header.encode("ascii")
    return MAGIC + struct.pack("<Q", len(raw)) + raw + data


class Marker:
    """Unpickled, it would create a file: a stand-in for a payload. The codec must refuse it and never run it."""

    path = os.path.join(tempfile.gettempdir(), f"cohort-state-marker-{os.getpid()}")

    def __reduce__(self):
        return (open, (self.path, "w"))


class Containers(unittest.TestCase):
    def test_literal_encoding(self):
        # {"a": (1, 2.5), 0: None, "n": -inf}: keys in order with their types, the tuple tagged, the float tagged.
        expected = framed('{"dict":[["a",{"tuple":[1,2.5]}],[0,null],["n",{"float":"-inf"}]]}')
        self.assertEqual(encode({"a": (1, 2.5), 0: None, "n": float("-inf")}), expected)
        self.assertEqual(MAGIC, b"cohort-state 1\n")

    def test_round_trip_keeps_types_order_and_values(self):
        value = {
            "b": [1, 2.0, True, False, None, "h\u00e9llo \U0001f600", (3, "x", ()), [], {}],
            0: {"inner": {1: "one", "1": "string one"}},
            "big": 2 ** 200,
            "floats": [float("inf"), float("-inf"), -0.0, 1e-308, 5e-324, 0.1],
        }
        back = decode(encode(value))
        self.assertEqual(list(back), ["b", 0, "big", "floats"])
        self.assertEqual(list(back[0]["inner"]), [1, "1"])
        self.assertEqual(back[0]["inner"][1], "one")
        self.assertIs(type(back["b"][6]), tuple)
        self.assertIs(type(back["b"][1]), float)
        self.assertIs(type(back["b"][2]), bool)
        self.assertEqual(back["big"], 2 ** 200)
        self.assertEqual(math.copysign(1, back["floats"][2]), -1.0)
        self.assertEqual(back["floats"][:2], [float("inf"), float("-inf")])
        self.assertEqual(back["floats"][3:], [1e-308, 5e-324, 0.1])
        self.assertTrue(math.isnan(decode(encode(float("nan")))))
        self.assertEqual(back["b"][:6], value["b"][:6])

    def test_ordered_dict_keeps_its_metadata(self):
        state = OrderedDict([("w", 1)])
        state._metadata = {"": {"version": 1}}
        self.assertEqual(encode(state), framed('{"dict":[["w",1]],"metadata":{"dict":[["",{"dict":[["version",1]]}]]}}'))
        back = decode(encode(state))
        self.assertIsInstance(back, OrderedDict)
        self.assertEqual(back._metadata, {"": {"version": 1}})

    def test_equal_states_make_equal_bytes(self):
        self.assertEqual(encode({"x": [1, 2.5], 3: "y"}), encode({"x": [1, 2.5], 3: "y"}))
        self.assertNotEqual(encode({"x": 1}), encode({"x": 1.0}))

    def test_anything_else_is_refused_naming_its_type_place_and_the_opt_in(self):
        with self.assertRaises(CohortError) as caught:
            encode({"optimizer": {"state": {0: Marker()}}})
        self.assertEqual(
            str(caught.exception),
            "cannot save state['optimizer']['state'][0]: it is a test_state.Marker; keep to dicts, lists, tuples, None, "
            "bool, int, float, str and tensors (state_dict() gives those), or set job.checkpoint_pickle: true in the "
            "cluster file to use torch.save's pickle (it lets any rank's code run on every host)",
        )
        for bad, where in [({1.5: "x"}, "state[1.5]"), ([b"bytes"], "state[0]"), ({"s": {1, 2}}, "state['s']")]:
            with self.assertRaises(CohortError) as caught:
                encode(bad)
            self.assertTrue(str(caught.exception).startswith(f"cannot save {where}: "), str(caught.exception))
        self.assertFalse(os.path.exists(Marker.path))

    def test_a_cycle_is_refused(self):
        loop = []
        loop.append(loop)
        with self.assertRaises(CohortError) as caught:
            encode(loop)
        self.assertIn("nests deeper than 64 levels", str(caught.exception))


class Depth(unittest.TestCase):
    """64 levels of nesting are the format's bound: the 64th is accepted through every kind of container, the 65th
    refused, both when written and when read."""

    @staticmethod
    def nested(levels: int, kind: str):
        value = 7
        for _ in range(levels):
            value = {"dict": lambda v: {"k": v}, "list": lambda v: [v], "tuple": lambda v: (v,), "ordered": lambda v: OrderedDict(k=v)}[kind](value)
        return value

    def test_64_levels_of_each_container_round_trip_and_65_are_refused(self):
        for kind in ("dict", "list", "tuple", "ordered"):
            with self.subTest(kind):
                deepest = self.nested(64, kind)
                self.assertEqual(decode(encode(deepest)), deepest)
                with self.assertRaises(CohortError) as caught:
                    encode(self.nested(65, kind))
                self.assertIn("nests deeper than 64 levels", str(caught.exception))

    def test_reading_accepts_64_levels_and_refuses_65(self):
        # Lists by hand: [[...[7]...]] with the 7 at depth n.
        self.assertEqual(decode(framed("[" * 64 + "7" + "]" * 64)), self.nested(64, "list"))
        with self.assertRaises(CohortError) as caught:
            decode(framed("[" * 65 + "7" + "]" * 65))
        self.assertIn("nests deeper than 64 levels", str(caught.exception))
        # Dicts: {"dict": [["k", ...]]} at each level.
        deep_dict = '{"dict":[["k",' * 64 + "7" + "]]}" * 64
        self.assertEqual(decode(framed(deep_dict)), self.nested(64, "dict"))
        with self.assertRaises(CohortError):
            decode(framed('{"dict":[["k",' * 65 + "7" + "]]}" * 65))
        deep_tuple = '{"tuple":[' * 64 + "7" + "]}" * 64
        self.assertEqual(decode(framed(deep_tuple)), self.nested(64, "tuple"))
        with self.assertRaises(CohortError):
            decode(framed('{"tuple":[' * 65 + "7" + "]}" * 65))


class Malformed(unittest.TestCase):
    CASES = [
        ("empty", b"", "it does not start with the cohort-state header"),
        ("a pickle", b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94", "it does not start with the cohort-state header"),
        ("cut in its length", MAGIC + b"\x05\x00", "it ends inside its header"),
        ("a length past its end", MAGIC + struct.pack("<Q", 2 ** 63) + b"{}", "its header claims 9223372036854775808 bytes but only 2 follow"),
        ("not JSON", framed("{nope"), "its header is not valid JSON"),
        ("a NaN literal", framed("NaN"), "its header is not valid JSON"),
        ("an unknown tag", framed('{"pickle":"os.system"}'), "state is tagged 'pickle', which this format does not write"),
        ("an object of two fields", framed('{"tuple":[],"x":1}'), "state is an object with fields ['tuple', 'x']"),
        ("a pair that is not one", framed('{"dict":[["a"]]}'), "state has an entry that is not a [str or int key, value] pair"),
        ("a float key", framed('{"dict":[[1.5,1]]}'), "state has an entry that is not a [str or int key, value] pair"),
        ("a key twice", framed('{"dict":[["a",1],["a",2]]}'), "state has the key 'a' twice"),
        ("an unknown float", framed('{"float":"1e9"}'), "state is tagged 'float'"),
        ("an unknown dtype", framed('{"tensor":["object",[1]]}', b"\x00" * 8), "state is a tensor of 'object'"),
        ("a negative dimension", framed('{"tensor":["float32",[-1]]}'), "state has a shape that is not up to 64 whole numbers"),
        ("a bool dimension", framed('{"tensor":["float32",[true]]}'), "state has a shape that is not up to 64 whole numbers"),
        # 10^9 x 10^9 float32 is 4 EB: refused from the lengths alone, before anything is allocated.
        ("a tensor larger than its bytes", framed('{"tensor":["float32",[1000000000,1000000000]]}', b"\x00" * 16),
         "state needs 4000000000000000000 bytes but only 16 are left"),
        ("bytes after the last tensor", framed("[1]", b"\x00"), "1 bytes follow its last tensor"),
        ("nested past any state", framed("[" * 100 + "]" * 100), "nests deeper than 64 levels"),
        ("nested past the parser", framed("[" * 200_000 + "]" * 200_000), "its header is not valid JSON (RecursionError)"),
    ]

    def test_each_is_one_cohort_error(self):
        for name, data, why in self.CASES:
            with self.subTest(name):
                with self.assertRaises(CohortError) as caught:
                    decode(data)
                self.assertTrue(str(caught.exception).startswith("cannot load this state: "), str(caught.exception))
                self.assertIn(why, str(caught.exception))

    def test_not_bytes(self):
        with self.assertRaises(CohortError) as caught:
            decode("text")
        self.assertEqual(str(caught.exception), "cannot load this state: expected bytes, got str")

    def test_bytes_cut_or_flipped_anywhere_give_a_value_or_a_cohort_error(self):
        state = {"model": {"w": [0.5, -1.25, 3.0], "layers": (1, 2)}, "step": 12, "lr": 0.001}
        if torch is not None:
            state["tensor"] = torch.arange(6, dtype=torch.float32).reshape(2, 3)
            state["mask"] = torch.tensor([True, False, True])
        good = encode(state)
        rng = random.Random(0x5EED)
        for i in range(3000):
            data = bytearray(good)
            if i % 3 == 0:
                data = data[: rng.randrange(len(data))]
            else:
                for _ in range(rng.randint(1, 4)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            try:
                decode(bytes(data))
            except CohortError:
                pass

    @without_torch
    def test_tensors_need_torch(self):
        data = framed('{"tensor":["float32",[2]]}', b"\x00\x00\x80\x3f\x00\x00\x00\xc0")
        with self.assertRaises(CohortError) as caught:
            decode(data)
        self.assertEqual(str(caught.exception), "cannot load this state: it holds tensors, and torch is not installed here")


@with_torch
class Tensors(unittest.TestCase):
    DTYPES = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32", "int64", "uint8", "bool"]

    def test_literal_tensor_bytes(self):
        # float32 1.0 is 0x3f800000 and -2.0 is 0xc0000000, little-endian; int16 [[1, -1]] is 01 00 ff ff.
        self.assertEqual(encode(torch.tensor([1.0, -2.0])), framed('{"tensor":["float32",[2]]}', b"\x00\x00\x80\x3f\x00\x00\x00\xc0"))
        self.assertEqual(encode(torch.tensor([[1, -1]], dtype=torch.int16)), framed('{"tensor":["int16",[1,2]]}', b"\x01\x00\xff\xff"))
        self.assertEqual(encode(torch.tensor(True)), framed('{"tensor":["bool",[]]}', b"\x01"))
        self.assertEqual(encode(torch.zeros(0, 3)), framed('{"tensor":["float32",[0,3]]}'))

    def test_every_dtype_and_shape(self):
        generator = torch.Generator().manual_seed(7)
        for name in self.DTYPES:
            dtype = getattr(torch, name)
            for shape in [(), (0,), (3, 0, 2), (5,), (2, 3, 4)]:
                with self.subTest(dtype=name, shape=shape):
                    values = (torch.randn(shape, generator=generator) * 50).to(dtype)
                    back = decode(encode(values))
                    self.assertEqual(back.dtype, dtype)
                    self.assertEqual(tuple(back.shape), shape)
                    self.assertEqual(back.device.type, "cpu")
                    self.assertTrue(torch.equal(back, values))

    def test_views_that_are_not_contiguous(self):
        base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
        for view in [base.t(), base[:, ::2], base[1:3, 2:5], base.expand(2, 4, 6)[1], torch.arange(10.0)[::3]]:
            with self.subTest(shape=tuple(view.shape), stride=view.stride()):
                back = decode(encode(view))
                self.assertTrue(back.is_contiguous())
                self.assertTrue(torch.equal(back, view))
        conj = torch.tensor([1 + 2j, 3 - 4j]).conj()
        self.assertTrue(torch.equal(decode(encode(conj)), torch.tensor([1 - 2j, 3 + 4j])))

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
    def test_cuda_tensors_come_back_on_the_cpu(self):
        on_gpu = torch.arange(6.0, device="cuda").reshape(2, 3)
        back = decode(encode({"w": on_gpu}))
        self.assertEqual(back["w"].device.type, "cpu")
        self.assertTrue(torch.equal(back["w"], on_gpu.cpu()))

    def test_bool_bytes_other_than_0_and_1_are_refused(self):
        with self.assertRaises(CohortError) as caught:
            decode(framed('{"tensor":["bool",[2]]}', b"\x01\x02"))
        self.assertEqual(str(caught.exception), "cannot load this state: state is a bool tensor with bytes other than 0 and 1")

    def test_a_model_and_its_optimizers_resume_bit_for_bit(self):
        for make in (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True)):
            torch.manual_seed(3)
            model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
            optimizer = make(model.parameters())
            x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))

            def step(m, o):
                o.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                o.step()

            for _ in range(3):
                step(model, optimizer)
            saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 4}
            back = decode(encode(saved))
            with self.subTest(optimizer=type(optimizer).__name__):
                self.assertEqual(back["epoch"], 4)
                self.assertEqual(back["optimizer"]["param_groups"], saved["optimizer"]["param_groups"])
                self.assertEqual(list(back["optimizer"]["state"]), list(saved["optimizer"]["state"]))  # int keys
                torch.manual_seed(99)
                twin = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
                twin_optimizer = make(twin.parameters())
                twin.load_state_dict(back["model"])
                twin_optimizer.load_state_dict(back["optimizer"])
                step(model, optimizer)
                step(twin, twin_optimizer)
                for a, b in zip(model.state_dict().values(), twin.state_dict().values()):
                    self.assertTrue(torch.equal(a, b))
                # Ranks that hold the same weights offer the same bytes: what the coordinator's vote compares.
                self.assertEqual(encode({"model": model.state_dict(), "optimizer": optimizer.state_dict()}),
                                 encode({"model": twin.state_dict(), "optimizer": twin_optimizer.state_dict()}))


class CheckpointText(unittest.TestCase):
    """What a rank sends the coordinator and loads back (cohort._context)."""

    def setUp(self):
        import importlib

        # `from cohort import _context` is the package's current context (None outside a rank), not the module.
        self.context = importlib.import_module("cohort._context")
        if os.path.exists(Marker.path):
            os.remove(Marker.path)

    def test_the_client_format_as_text(self):
        text = self.context._encode_state({"epoch": 2})
        self.assertEqual(list(json.loads(text)), ["$cohort-state"])
        self.assertEqual(self.context._decode_state(text), {"epoch": 2})

    def test_a_pickle_is_refused_without_the_opt_in_and_never_runs(self):
        import base64
        import pickle

        text = json.dumps({"$torch": base64.b64encode(pickle.dumps(Marker())).decode("ascii")})
        with self.assertRaises(CohortError) as caught:
            self.context._decode_state(text)
        self.assertEqual(
            str(caught.exception),
            "this checkpoint holds torch.save's pickle, which runs whatever its writer put in it as it loads: it is not "
            "loaded unless job.checkpoint_pickle: true is set in the cluster file (it lets any rank's code run on every host)",
        )
        self.assertFalse(os.path.exists(Marker.path))

    def test_an_object_the_format_cannot_hold_is_refused_without_the_opt_in(self):
        with self.assertRaises(CohortError) as caught:
            self.context._encode_state({"scaler": Marker()})
        self.assertIn("job.checkpoint_pickle: true", str(caught.exception))

    @with_torch
    def test_with_the_opt_in_what_the_format_cannot_hold_goes_as_a_pickle(self):
        text = self.context._encode_state({"when": complex(1, 2)}, pickle=True)
        self.assertEqual(list(json.loads(text)), ["$torch"])
        self.assertEqual(self.context._decode_state(text, pickle=True), {"when": complex(1, 2)})
        # Under the opt-in, tensors and numbers still take the format that runs nothing.
        self.assertEqual(list(json.loads(self.context._encode_state({"w": torch.ones(2)}, pickle=True))), ["$cohort-state"])

    def test_malformed_text_is_one_cohort_error(self):
        for text, why in [("{", "it is not JSON"), ('{"$cohort-state": "%%%"}', "its state is not base64"),
                          ('{"$cohort-state": "AAAA"}', "it does not start with the cohort-state header")]:
            with self.subTest(text):
                with self.assertRaises(CohortError) as caught:
                    self.context._decode_state(text)
                self.assertIn(why, str(caught.exception))

    def test_a_typescript_state_comes_back_as_its_json(self):
        self.assertEqual(self.context._decode_state('{"epoch": 3, "params": {"$f32": "AACAPw=="}}'), {"epoch": 3, "params": {"$f32": "AACAPw=="}})


if __name__ == "__main__":
    unittest.main()
