"""Layer 5: `lapis.save` and `lapis.load`: the safetensors format (documented, safe to load), and PyTorch's own files.

A lapis file is an 8-byte little-endian header length N, N bytes of JSON, then the raw bytes of every tensor back
to back: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {"format":
"lapis", "kind": ...}}. A single tensor saves under the key "tensor" (kind "tensor"); a dict of tensors (a state
dict) under its keys (kind "dict"), so other safetensors readers find them by name. Anything else made of dicts,
lists, tuples, strings, numbers, None and tensors (a checkpoint: model and optimizer state dicts, the step, a
config) is kind "tree": its tensors under their dotted paths ("model.fc.weight", "optimizer.state.0.exp_avg") and
the structure as JSON in the metadata's "tree", each tensor there {"$tensor": path}, each dict {"$dict": [[key,
value], ...]} (keys may be ints), each tuple {"$tuple": [...]}. The device of each tensor not on the cpu is kept in
the metadata's "devices" (JSON: {"name": "cuda:0"}), so `load` puts it back there, as torch.load does, unless
`map_location` says otherwise.

`load` also reads files PyTorch's `torch.save` wrote (a zip of a pickle and raw storages) the way
`torch.load(weights_only=True)` does: the pickle is read by an unpickler that knows only what a checkpoint holds
(tensors, parameters, OrderedDict, numbers, strings, containers) and refuses any other global, so no code in the
file runs. Loading never runs code.
"""

import io
import json
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

from lapis.framework import dtype as _dtype
from lapis.framework.device import device
from lapis.framework.nn.modules import Parameter
from lapis.framework.tensor import Tensor
from lapis.framework.tensor_base import device_of

_CODES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int32": "I32", "int64": "I64",
          "bool": "BOOL"}
_BY_CODE = {code: getattr(_dtype, "bool_" if name == "bool" else name) for name, code in _CODES.items()}


# -- save ------------------------------------------------------------------------------------------------------
def save(obj, f) -> None:
    """Save a tensor, a dict of tensors (a state dict), or a nested checkpoint (see the module's docstring) to a path
    or a binary file."""
    if isinstance(obj, Tensor):
        kind, tensors, meta = "tensor", {"tensor": obj}, {}
    elif isinstance(obj, dict) and obj and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        kind, tensors, meta = "dict", dict(obj), {}
    else:
        kind, tensors = "tree", {}
        meta = {"tree": json.dumps(_encode(obj, "", tensors))}
    header, chunks, at = {}, [], 0
    for name, t in tensors.items():
        raw = np.ascontiguousarray(t.detach()._host()).tobytes()
        header[name] = {"dtype": _CODES[t.dtype.name], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    devices = {name: str(t.device) for name, t in tensors.items() if t.device.type != "cpu"}
    if devices:
        meta["devices"] = json.dumps(devices)
    header["__metadata__"] = {"format": "lapis", "kind": kind, **meta}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                       # the data starts 8-byte aligned, as safetensors pads
    payload = struct.pack("<Q", len(text)) + text + b"".join(chunks)
    if hasattr(f, "write"):
        f.write(payload)
    else:
        with open(f, "wb") as out:
            out.write(payload)


def _encode(obj, path: str, tensors: dict):
    """The JSON form of one value of a tree; its tensors go into `tensors` under their paths."""
    if isinstance(obj, Tensor):
        name = path or "tensor"
        while name in tensors:                           # two keys that join to one path ("a.b" and a: {b: ...})
            name += "'"
        tensors[name] = obj
        return {"$tensor": name}
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError("lapis.save stores dicts whose keys are strings or ints")
        return {"$dict": [[k, _encode(v, f"{path}.{k}" if path else str(k), tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, f"{path}.{i}" if path else str(i), tensors) for i, v in enumerate(obj)]
        return {"$tuple": items} if isinstance(obj, tuple) else items
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"lapis.save stores tensors, dicts, lists, tuples, strings, numbers and None; not a "
                    f"{type(obj).__name__}")


# -- load ------------------------------------------------------------------------------------------------------
def load(f, map_location=None, weights_only: bool = True):
    """Load what `save` wrote, or what `torch.save` wrote. Each tensor goes back to the device it was saved from
    (its location: 'cpu', 'cuda:0', ...), as torch.load does, unless `map_location` says otherwise, in torch's
    spellings: a device or its name (every tensor there), a dict from saved locations to new ones (others stay),
    or a function f(cpu_tensor, location) returning the tensor to use (None: its saved location). Nothing in the
    file is run, whatever `weights_only` says."""
    if hasattr(f, "read"):
        data = f.read()
    else:
        with open(f, "rb") as file:
            data = file.read()
    try:
        if data[:4] == b"PK\x03\x04":
            return _load_torch_zip(data, map_location)
        return _load_safetensors(data, map_location)
    except pickle.UnpicklingError:
        raise                                   # a PyTorch file naming code to run: torch's own error type
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, StopIteration, OverflowError, EOFError,
            NotImplementedError, RecursionError, struct.error, zipfile.BadZipFile, zlib.error, pickle.PickleError) as e:
        raise LoadError(f"lapis.load: not a file lapis.save or torch.save wrote, or a damaged one: "
                        f"{type(e).__name__}: {e}") from None


class LoadError(RuntimeError):
    """A file `load` cannot read: damaged, truncated, or inconsistent (torch.load raises RuntimeError too)."""


MAX_HEADER_BYTES = 100_000_000      # the safetensors format's limit on its JSON header


def _load_safetensors(data: bytes, map_location):
    """A safetensors file, checked as the format requires before any byte of it is used: a JSON object header of
    at most MAX_HEADER_BYTES, known dtypes, non-negative shapes, each tensor's byte range inside the buffer and of
    its shape's size, and the ranges covering the buffer exactly, with no hole or overlap."""
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: shorter than a safetensors header's length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > min(MAX_HEADER_BYTES, len(data) - 8):
        raise ValueError(f"a header of {n} bytes in a file of {len(data)}")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("__metadata__ must map names to strings")
    locations = json.loads(meta.get("devices", "{}"))
    if not isinstance(locations, dict):
        raise ValueError("the saved devices are not a JSON object")
    base, size = 8 + n, len(data) - 8 - n
    ranges, out = [], OrderedDict()
    for name, entry in header.items():
        dt = _BY_CODE[entry["dtype"]]
        shape, (begin, end) = entry["shape"], entry["data_offsets"]
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape)):
            raise ValueError(f"tensor {name!r} has shape {shape}")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (begin, end)) or \
                not 0 <= begin <= end <= size:
            raise ValueError(f"tensor {name!r} has bytes [{begin}, {end}) in a buffer of {size}")
        if end - begin != int(np.prod(shape, dtype=np.int64)) * dt.np.itemsize:
            raise ValueError(f"tensor {name!r} of shape {shape} and dtype {entry['dtype']} has {end - begin} bytes")
        ranges.append((begin, end))
        array = np.frombuffer(data[base + begin:base + end], dtype=dt.np).reshape(shape).copy()
        out[name] = _restore(array, locations.get(name, "cpu"), map_location)
    covered = 0
    for begin, end in sorted(ranges):
        if begin != covered:
            raise ValueError(f"the tensors' bytes {'overlap' if begin < covered else 'leave a hole'} at {begin}")
        covered = end
    if covered != size:
        raise ValueError(f"the tensors cover {covered} of the buffer's {size} bytes")
    if meta.get("kind") == "tree":
        return _decode(json.loads(meta["tree"]), out)
    return out["tensor"] if meta.get("kind") == "tensor" else out


def _restore(array: np.ndarray, location: str, map_location) -> Tensor:
    """The tensor of a loaded array saved from `location`, placed as torch's _get_restore_location places it."""
    if map_location is None:
        return Tensor._from_numpy(array, device_of(location))
    if isinstance(map_location, dict):
        return Tensor._from_numpy(array, device_of(map_location.get(location, location)))
    if callable(map_location) and not isinstance(map_location, (str, device)):
        placed = map_location(Tensor._from_numpy(array, device_of("cpu")), location)
        return placed if placed is not None else Tensor._from_numpy(array, device_of(location))
    return Tensor._from_numpy(array, device_of(map_location))


def _decode(value, tensors: dict):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if "$tensor" in value:
            return tensors[value["$tensor"]]
        if "$tuple" in value:
            return tuple(_decode(v, tensors) for v in value["$tuple"])
        pairs = value["$dict"]
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str | int | float | bool | None)
                   for p in pairs):
            raise ValueError("a saved dict is not a list of [key, value] pairs")
        return {k: _decode(v, tensors) for k, v in pairs}
    return value


# PyTorch's storage classes -> numpy dtypes (what its pickles name)
_TORCH_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                   "BFloat16Storage": _dtype.bfloat16.np, "LongStorage": np.int64, "IntStorage": np.int32,
                   "BoolStorage": np.bool_}


def _load_torch_zip(data: bytes, map_location):
    """A `torch.save` file: archive/data.pkl, whose persistent ids name raw storages archive/data/<key>."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    pickled = next(name for name in archive.namelist() if name.endswith("data.pkl"))
    root = pickled[:-len("data.pkl")]
    byteorder = archive.read(root + "byteorder").decode() if root + "byteorder" in archive.namelist() else "little"
    storages: dict[str, tuple[np.ndarray, str]] = {}

    def storage(pid):
        kind, storage_type, key, location, _ = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        if key not in storages:
            dtype = np.dtype(storage_type).newbyteorder("<" if byteorder == "little" else ">")
            storages[key] = np.frombuffer(archive.read(f"{root}data/{key}"), dtype=dtype), str(location)
        return storages[key]

    def rebuild_tensor(stored, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
        values, location = stored
        itemsize = values.dtype.itemsize
        size, stride = tuple(size), tuple(stride)
        if len(size) != len(stride) or min((offset, *size, *stride), default=0) < 0 or (
                all(size) and offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) >= len(values)):
            raise ValueError(f"a tensor of size {size}, stride {stride} at offset {offset} lies outside its "
                             f"storage of {len(values)} elements")       # as_strided would read other memory
        array = np.lib.stride_tricks.as_strided(values[offset:], tuple(size), tuple(s * itemsize for s in stride))
        t = _restore(np.array(array, dtype=values.dtype.newbyteorder("="), order="C"), location,    # 0-d stays
                     map_location)
        t.requires_grad = requires_grad
        return t

    def rebuild_parameter(t, requires_grad, hooks=None):
        return Parameter(t, requires_grad)

    allowed = {("collections", "OrderedDict"): OrderedDict,
               ("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
               ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
               ("torch", "Size"): tuple,
               ("_codecs", "encode"): lambda text, encoding="latin1": text.encode(encoding)}
    allowed.update({("torch", name): dtype for name, dtype in _TORCH_STORAGES.items()})

    class CheckpointUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(
                    f"lapis.load reads only tensors, parameters and plain containers from a PyTorch file (as "
                    f"torch.load(weights_only=True)); it will not run {module}.{name}")
            return allowed[module, name]

        def persistent_load(self, pid):
            return storage(pid)

    return CheckpointUnpickler(io.BytesIO(archive.read(pickled))).load()
