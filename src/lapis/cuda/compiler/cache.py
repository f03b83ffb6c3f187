"""Layer 3: the on-disk compile cache, so a second run of a program does not recompile.

A compiled kernel is stored under a key hashed from everything its code depends on:
  - the source of the kernel and of every device function it reaches, where it is (file and
    first line: the code object's line table names them), and which device function each
    name means (factories make several from one source);
  - the values of the module constants and closure variables those sources name (tile
    sizes, for instance, or which math function a factory's kernel applies);
  - the argument types;
  - the compiler itself (the source of `lapis.cuda.compiler`, of the ISA it emits and of
    every library written in the kernel language whose functions it compiles into kernels,
    `lapis/cuda/libdevice*.py` and `cooperative_groups.py`), so a changed compiler never
    reuses old code.

CUDA C++ kernels are kept twice, under `text_key`s: NVRTC's PTX under the source, options and name
expressions (and NVRTC's version and lapis's C headers), and each kernel assembled from the PTX under its
text and name.

The directory is $LAPIS_CACHE_DIR, else ~/.cache/lapis/kernels; LAPIS_CACHE_DIR=off turns
the cache off. Entries are pickles written atomically (to a temporary file, then renamed),
as numba's cache does; a corrupt or unreadable entry is treated as a miss.
"""

import ast
import hashlib
import inspect
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np

from lapis.cuda import libdevice
from lapis.cuda.compiler import calls
from lapis.cuda.compiler.device_function import DeviceFunction, as_device_function, parse_source

_COMPILER_HASH: str | None = None


def directory() -> Path | None:
    configured = os.environ.get("LAPIS_CACHE_DIR")
    if configured is not None and configured.strip().lower() in ("", "off", "0", "none"):
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "lapis" / "kernels"


def compiler_sources() -> list[Path]:
    """The files whose text decides the code the compiler makes."""
    here = Path(__file__).resolve().parent
    cuda = Path(libdevice.__file__).resolve().parent
    # the kernel-language libraries the compiler inlines: libdevice*.py and cooperative_groups.py's grid barrier
    library = [*cuda.glob("libdevice*.py"), cuda / "cooperative_groups.py"]
    return sorted([*here.glob("*.py"), *(here.parent.parent / "isa").glob("*.py"), *library])


def compiler_hash() -> str:
    global _COMPILER_HASH
    if _COMPILER_HASH is None:
        h = hashlib.sha256()
        for path in compiler_sources():
            h.update(path.name.encode() + path.read_bytes())
        _COMPILER_HASH = h.hexdigest()
    return _COMPILER_HASH


def _names(func) -> dict:
    """The globals and closure variables a function can see."""
    names = dict(func.__globals__)
    if func.__closure__:
        names.update(zip(func.__code__.co_freevars, (c.cell_contents for c in func.__closure__), strict=True))
    return names


def _constant(value) -> str | None:
    if isinstance(value, bool | int | float | complex | str | np.generic | np.dtype) or value is None:
        return repr(value)
    if (builtin := calls.lookup(value)) is not None:     # a function kernels call, as a factory's closure
        return builtin.name
    if isinstance(value, np.ndarray):       # cuda.const.array_like data is baked into the code
        return f"{value.dtype}{value.shape}:" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    if type(value).__name__ == "DeviceNDArray":    # a captured global device array: its type and shape are compiled in
        return f"device {value.dtype}{tuple(value.shape)}"
    if isinstance(value, type) and issubclass(value, np.generic):
        return value.__name__
    if isinstance(value, tuple) and all(_constant(v) is not None for v in value):
        return repr(value)
    return None


def _digest(func, open_calls: frozenset = frozenset()) -> str:
    """A hash of a function's source and of what each name in it means: a constant's value, or a
    device function's own digest (so two kernels that call different variants of one factory's device
    function, under the same names, never share an entry)."""
    source = inspect.getsource(func)
    h = hashlib.sha256(source.encode())
    # where the source is, too: the code names its file and lines (assertions, the line table faults report)
    h.update(f"{func.__code__.co_filename}:{func.__code__.co_firstlineno};".encode())
    visible = _names(func)
    for name in sorted({n.id for n in ast.walk(parse_source(func, source)) if isinstance(n, ast.Name)}):
        value = visible.get(name)
        value = as_device_function(value) or value
        if isinstance(value, DeviceFunction) and value.py_func not in open_calls:
            h.update(f"{name}=device:{_digest(value.py_func, open_calls | {func})};".encode())
        elif (text := _constant(value)) is not None:
            h.update(f"{name}={text};".encode())
    return h.hexdigest()


def key(pyfunc, argtypes) -> str:
    h = hashlib.sha256(compiler_hash().encode())
    h.update(repr([str(t) for t in argtypes]).encode())
    h.update(_digest(pyfunc).encode())
    return h.hexdigest()


def text_key(*parts) -> str:
    """The key of something compiled from text alone (CUDA C++ through NVRTC, PTX through the assembler): the
    compiler's hash and the parts (source, options, names) that decide it."""
    h = hashlib.sha256(compiler_hash().encode())
    h.update(repr(parts).encode())
    return h.hexdigest()


def load(cache_key: str):
    root = directory()
    if root is None:
        return None
    try:
        with open(root / f"{cache_key}.pkl", "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


def store(cache_key: str, compiled) -> None:
    root = directory()
    if root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, delete=False, suffix=".tmp") as f:
            pickle.dump(compiled, f)
        os.replace(f.name, root / f"{cache_key}.pkl")
    except OSError:
        pass             # a read-only home or a full disk costs a recompile next time, nothing more
