"""Layer 5: `lapis.save` and `lapis.load` in the safetensors format (documented, safe to load).

A file is an 8-byte little-endian header length N, N bytes of JSON, then the raw bytes of every
tensor back to back: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
"__metadata__": {"format": "lapis", "kind": "tensor" | "dict"}}. A state dict saves under its keys;
a single tensor under the key "tensor". Loading never runs code (unlike a pickle).
"""

import json
import struct
from collections import OrderedDict

import numpy as np

from lapis.framework import dtype as _dtype
from lapis.framework.tensor import Tensor
from lapis.framework.tensor_base import device_of

_CODES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int32": "I32", "int64": "I64",
          "bool": "BOOL"}
_BY_CODE = {code: getattr(_dtype, "bool_" if name == "bool" else name) for name, code in _CODES.items()}


def save(obj, f) -> None:
    """Save a tensor or a dict of tensors (a state dict) to a path or a binary file."""
    kind = "tensor" if isinstance(obj, Tensor) else "dict"
    items = {"tensor": obj} if kind == "tensor" else dict(obj)
    header, chunks, at = {}, [], 0
    for name, t in items.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"lapis.save stores tensors and dicts of tensors; {name!r} is a {type(t).__name__}")
        raw = np.ascontiguousarray(t.detach()._host()).tobytes()
        header[name] = {"dtype": _CODES[t.dtype.name], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    header["__metadata__"] = {"format": "lapis", "kind": kind}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                       # the data starts 8-byte aligned, as safetensors pads
    payload = struct.pack("<Q", len(text)) + text + b"".join(chunks)
    if hasattr(f, "write"):
        f.write(payload)
    else:
        with open(f, "wb") as out:
            out.write(payload)


def load(f, map_location=None, weights_only: bool = True):
    """Load what `save` wrote, onto `map_location` (a device or its name; the cpu by default)."""
    data = f.read() if hasattr(f, "read") else open(f, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    dev = device_of(map_location)
    out = OrderedDict()
    for name, entry in header.items():
        dt = _BY_CODE[entry["dtype"]]
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[base + begin:base + end], dtype=dt.np).reshape(entry["shape"]).copy()
        out[name] = Tensor._from_numpy(array, dev)
    return out["tensor"] if meta.get("kind") == "tensor" else out
