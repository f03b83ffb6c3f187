"""Layer 3, `lapis.numba`: numba's import surface for CUDA programs, so only the imports change.

    from numba import cuda, float32, int32, void        # becomes
    from lapis.numba import cuda, float32, int32, void

    @cuda.jit(void(float32[:], float32[:], int32))
    def scale(x, out, n): ...

What is here: `cuda` (`lapis.cuda`; numba.cuda.random is `lapis.cuda.random`), numba's scalar type objects
(`float32`, `int32`, ... and the short names `f4`, `i4`, ...), `void`, `types` (the same, with
`types.Array(float32, 2, "C")`), and `jit`/`njit`, whose functions run as Python on the host and are inlined where a
kernel calls them (numba compiles them for the GPU there). There is no CPU compiler behind `njit` (it does not make
host code faster), and numba's other targets (`prange`, `vectorize` for the CPU) are not provided yet:
`docs/layer3-programming-interface.md` lists what is missing.
"""

import types as _namespaces

import numpy as _np

from lapis import cuda
from lapis.cuda.compiler import types as _T
from lapis.cuda.compiler.device_function import HostDeviceFunction

# The numba release whose CUDA API this follows, for programs that print or compare it.
__version__ = "0.61.0"

boolean = b1 = _T.boolean
int8, int16, int32, int64 = _T.int8, _T.int16, _T.int32, _T.int64
uint8, uint16, uint32, uint64 = _T.uint8, _T.uint16, _T.uint32, _T.uint64
float16, float32, float64 = _T.float16, _T.float32, _T.float64
i1, i2, i4, i8, u1, u2, u4, u8 = int8, int16, int32, int64, uint8, uint16, uint32, uint64
f2, f4, f8 = float16, float32, float64
complex64, complex128 = c8, c16 = _T.complex64, _T.complex128
double, float_, intp, uintp, intc, uintc = float64, float32, int64, uint64, int32, uint32     # numba's aliases
void = none = _T.void
_SCALARS = {"boolean": boolean, "b1": b1, "int8": int8, "int16": int16, "int32": int32, "int64": int64,
            "uint8": uint8, "uint16": uint16, "uint32": uint32, "uint64": uint64, "float16": float16,
            "float32": float32, "float64": float64, "i1": i1, "i2": i2, "i4": i4, "i8": i8, "u1": u1, "u2": u2,
            "u4": u4, "u8": u8, "f2": f2, "f4": f4, "f8": f8, "complex64": complex64, "complex128": complex128,
            "c8": c8, "c16": c16, "double": double, "float_": float_, "intp": intp, "uintp": uintp, "intc": intc,
            "uintc": uintc}


def Array(dtype, ndim: int, layout: str = "A") -> _T.ArrayType:
    """numba.types.Array(dtype, ndim, layout): an array argument type, as float32[:, ::1] spells it."""
    if layout not in ("C", "F", "A"):
        raise ValueError(f"an array type's layout is 'C', 'F' or 'A', not {layout!r}")
    return _T.ArrayType(_T.element_of(dtype), ndim, layout)


def from_dtype(dtype) -> "_T.Scalar | _T.Record":
    """numba.from_dtype: the kernel type of a numpy dtype; a structured dtype's is a `Record`, whose `rec_t[:]`
    is an array type for a signature."""
    return _T.element_of(_np.dtype(dtype))


types = _namespaces.SimpleNamespace(**_SCALARS, void=void, none=none, Array=Array, Record=_T.Record)


def jit(function=None, *args, **options):
    """numba's @jit / @njit (with or without a signature and options): the function runs as Python on the host
    and is inlined where a kernel calls it, as numba compiles it for the GPU there."""
    if callable(function) and not isinstance(function, _T.Scalar):
        return HostDeviceFunction(function)
    return HostDeviceFunction


njit = jit

vectorize = cuda.vectorize          # numba's @vectorize(signatures, target='cuda')

__all__ = ["Array", "cuda", "from_dtype", "jit", "njit", "none", "types", "vectorize", "void", *_SCALARS]
