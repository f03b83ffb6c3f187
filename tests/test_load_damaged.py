"""`lapis.load` trusts nothing in a file: damaged, truncated or inconsistent files raise one clear error type
(`LoadError`, a RuntimeError as torch.load's; a PyTorch file naming code to run keeps pickle's UnpicklingError),
never a raw Python error, never garbage read from outside the file, and never run code."""

import io
import json
import pickle
import struct

import numpy as np
import pytest
import torch

import lapis
from lapis.framework.serialization import LoadError


def lapis_file(obj) -> bytes:
    buffer = io.BytesIO()
    lapis.save(obj, buffer)
    return buffer.getvalue()


def torch_file(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def with_header(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def load(data: bytes):
    return lapis.load(io.BytesIO(data))


@pytest.mark.parametrize("header, body, words", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, bytes(8), "buffer of 8"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, bytes(8), "bytes"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}}, bytes(8), "shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "overlap"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "hole"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), "has 8 bytes"),
    ({"a": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "X9"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "__metadata__": {"kind": "tree",
                                                                                     "tree": "{\"$tensor\": \"b\"}"}},
     bytes(8), "KeyError"),
])
def test_an_inconsistent_safetensors_header_is_refused(header, body, words):
    with pytest.raises(LoadError, match=words):
        load(with_header(header, body))


def test_a_header_longer_than_the_file_or_not_json_is_refused():
    for data in (b"", b"\x01\x02", struct.pack("<Q", 10**12) + b"{}", struct.pack("<Q", 3) + b"\xff\xfe\x00",
                 struct.pack("<Q", 2) + b"[]"):
        with pytest.raises(LoadError):
            load(data)


def test_a_pytorch_tensor_outside_its_storage_is_refused():
    """A crafted stride reads past the storage: numpy's as_strided would have read other memory."""
    import zipfile
    source = zipfile.ZipFile(io.BytesIO(torch_file({"w": torch.arange(4.0)})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            raw = source.read(name)
            if name.endswith("data.pkl"):
                at = raw.find(b"K\x01\x85")             # the pickled stride (1,): make it (1000,)
                assert at > 0
                raw = raw[:at] + b"M\xe8\x03" + raw[at + 2:]
            target.writestr(name, raw)
    with pytest.raises(LoadError, match="outside its storage"):
        load(out.getvalue())


def test_a_pytorch_file_that_names_code_to_run_keeps_pickle_s_error():
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))
    with pytest.raises(pickle.UnpicklingError, match="will not run"):
        load(torch_file({"x": Evil()}))


@pytest.mark.parametrize("maker", [lambda: lapis_file({"model": {"w": lapis.ones(3, 2)}, "step": 7, "names": ["a"]}),
                                   lambda: lapis_file(lapis.arange(6.0).reshape(2, 3)),
                                   lambda: torch_file({"w": torch.ones(3, 2), "b": torch.zeros(2)})],
                         ids=["lapis tree", "lapis tensor", "torch"])
def test_truncated_and_mutated_files_raise_only_load_errors(maker):
    """Every truncation and a few hundred byte flips of real files: each loads (a flip in tensor data only changes
    numbers) or raises LoadError; nothing else escapes."""
    data = maker()
    rng = np.random.default_rng(17)
    variants = [data[:k] for k in sorted(set(rng.integers(0, len(data), 60).tolist()))]
    for _ in range(240):
        damaged = bytearray(data)
        for at in rng.integers(0, len(data), rng.integers(1, 4)):
            damaged[at] = int(rng.integers(0, 256))
        variants.append(bytes(damaged))
    for variant in variants:
        try:
            load(variant)
        except (LoadError, pickle.UnpicklingError):
            pass
