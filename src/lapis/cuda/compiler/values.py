"""Layer 3 compiler: what a kernel's expressions evaluate to while the frontend compiles them.

An expression is either a run-time value (an `ir.Value`, which the frontend emitted) or
something known at compile time: a `Const` number, an `ArrayRef`, a tuple of either, or a
plain Python object the kernel names (a module, an intrinsic, a dtype, a string); or a `Complex`,
a complex number as a pair of real ones (`complex_values.py`).
"""

from dataclasses import dataclass

import numpy as np

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T


@dataclass(frozen=True)
class Const:
    """A value known at compile time, with its (possibly weak) type."""
    value: object
    type: object


@dataclass(frozen=True)
class Complex:
    """A complex number: its real and imaginary parts, each a Const or an ir.Value of the component type
    (`types.component(type)`), and its type (complex64, complex128, or a complex literal's weak type)."""
    re: object
    im: object
    type: object


@dataclass
class ArrayRef:
    """An array the kernel can index: a kernel argument, a shared array or a local array; or (`parent`) the
    sub-array of one at the integer indices `prefix` for its leading dimensions (numba's A[i] of a 2-D A)."""
    name: str
    type: T.ArrayType
    param_offset: int = 0          # global: kernarg offset of the data pointer
    base: int = 0                  # shared: byte offset in the block's shared memory
    prefix: tuple = ()             # a sub-array's indices into its parent's leading dimensions
    parent: "ArrayRef | None" = None


def cast_constant(value, t: T.Scalar):
    """A Python value converted as storing it in type t would (wrapping integers)."""
    if t.kind == "bool":
        return bool(value)
    if t.kind == "float":
        return float(t.dtype.type(value))
    return int(np.array(int(value) & ((1 << 64) - 1), np.uint64).astype(t.dtype))


def fold(fn, *values):
    """fn of constants, computed while compiling; None where Python refuses (math.log(0.0) is a
    domain error, math.exp(1000.0) an overflow, (-8.0) ** 0.5 complex): the kernel then computes
    it on the device, which gives IEEE's answer (-inf, inf, nan) as it would for a run-time value."""
    try:
        value = fn(*values)
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    return None if isinstance(value, complex) else value


def describe(x) -> str:
    """x as an error message names it."""
    if isinstance(x, ArrayRef):
        return f"array {x.name!r}"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    if isinstance(x, Const):
        return f"constant {x.value!r}"
    if isinstance(x, Complex):
        return f"a {T.concrete(x.type)} value"
    if isinstance(x, ir.Value):
        return f"a {x.type} value"
    return getattr(x, "name", None) or getattr(x, "__name__", None) or repr(x)


def dtype_of(x) -> T.Scalar | None:
    """The kernel-language scalar type x names (cuda.float32, np.int32, an array's .dtype), if it names one."""
    if isinstance(x, T.Scalar):
        return x
    try:
        if isinstance(x, type) and issubclass(x, np.generic) or isinstance(x, np.dtype):
            return T.scalar_of(x)
    except TypeError:
        return None
    return None
