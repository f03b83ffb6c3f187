"""Layer 3: the handle classes of lapis's driver API (cuda-python's CUdevice, CUcontext, CUdeviceptr, ...) and
what the driver keeps behind each.

A handle is a number, as in cuda-python: `int(h)` gives it, `getPtr()` the address of the memory holding it
(what a kernel-parameter tuple with type None reads), and `CUstream(int(s))` names the same stream as `s`. The
object behind a context, module, function, stream or event handle is found by that number in the driver's table,
so a handle built from an int works wherever the original does, and one destroyed or never made is refused.
"""

import ctypes
import itertools
from dataclasses import dataclass, field

_MASK = (1 << 64) - 1


class _Handle:
    """A cuda-python handle: one 64-bit value in memory of its own."""
    __slots__ = ("_value",)
    _ctype = ctypes.c_uint64

    def __init__(self, init_value=0, _ptr=0):
        if _ptr:
            value = self._ctype.from_address(int(_ptr)).value
        else:
            value = 0 if init_value is None else int(init_value)
        self._value = self._ctype(value if self._ctype is ctypes.c_int else value & _MASK)

    def __int__(self) -> int:
        return self._value.value

    __index__ = __int__

    def getPtr(self) -> int:  # noqa: N802 - cuda-python's name
        """The address of the memory that holds the handle's value."""
        return ctypes.addressof(self._value)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and int(other) == int(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, int(self)))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {int(self):#x}>"


class CUdevice(_Handle):
    """A device ordinal."""
    __slots__ = ()
    _ctype = ctypes.c_int

    def __repr__(self) -> str:
        return f"<CUdevice {int(self)}>"


class CUdeviceptr(_Handle):
    """A device address (`int(dptr)`; `CUdeviceptr(int(dptr) + 16)` is 16 bytes on)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return f"<CUdeviceptr {int(self)}>"


class CUcontext(_Handle):
    __slots__ = ()


class CUmodule(_Handle):
    __slots__ = ()


class CUfunction(_Handle):
    __slots__ = ()


class CUkernel(_Handle):
    __slots__ = ()


class CUstream(_Handle):
    __slots__ = ()


class CUevent(_Handle):
    __slots__ = ()


CUdevice_v1, CUdeviceptr_v2 = CUdevice, CUdeviceptr

# Handle values: distinct numbers that look like the driver's addresses (never 0, 1 or 2, which name the default,
# legacy and per-thread streams).
_NEXT = itertools.count(0x7A5100001000, 0x40)


def new_value() -> int:
    return next(_NEXT)


@dataclass(eq=False)
class ContextRecord:
    """A CUcontext: a device's lapis context (every CUcontext of a device shares it, as lapis keeps one context a
    device) and what was made in this one, which cuCtxDestroy frees."""
    handle: CUcontext
    ordinal: int
    context: object                        # lapis.cuda.context.Context
    primary: bool = False
    refcount: int = 0                      # a primary context's retains
    destroyed: bool = False
    allocations: dict = field(default_factory=dict)    # address -> Allocation, from cuMemAlloc
    streams: list = field(default_factory=list)        # StreamRecords
    modules: list = field(default_factory=list)        # ModuleRecords


@dataclass(eq=False)
class ModuleRecord:
    handle: CUmodule
    raw: object                            # lapis.cuda.raw_kernel.RawModule
    ctx: ContextRecord
    functions: dict = field(default_factory=dict)      # name -> FunctionRecord
    unloaded: bool = False


@dataclass(eq=False)
class FunctionRecord:
    handle: CUfunction
    kernel: object                         # lapis.cuda.raw_kernel.RawKernel
    module: ModuleRecord
    max_dynamic_shared: int | None = None  # set by cuFuncSetAttribute; None: CUDA's default (48 KiB less static)


@dataclass(eq=False)
class StreamRecord:
    handle: CUstream
    stream: object                         # lapis.cuda.context.Stream
    ctx: ContextRecord
    destroyed: bool = False


@dataclass(eq=False)
class EventRecord:
    handle: CUevent
    event: object                          # lapis.cuda.context.Event
    ctx: ContextRecord
