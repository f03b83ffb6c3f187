"""Layer 3: numba's kernel signatures: `@cuda.jit("void(float32[:], float32[:, ::1], int32)")`, or the same with
numba's type objects (`void(float32[:], float32[:, ::1], int32)`, or the argument types alone as a tuple,
`(float32[:], int32)`; `lapis.numba` has them where numba users import them).

A kernel given signatures (one string or a list of them) is compiled for each when it is decorated, so a
compile error shows at the decorator, as numba's does; each launch then takes the first signature its
arguments fit: device arrays of the signature's dtype and dimensions (`[:, ::1]` only a C-contiguous one,
`[::1, :]` only an F-contiguous one), and numbers converted to its scalar types (a Python float passed for a
float32 arrives as a float32, as numba converts it; a float for an integer does not fit).
"""

import re

import numpy as np

from lapis.cuda.compiler import types as T
from lapis.cuda.devicearray import DeviceNDArray

_SIGNATURE = re.compile(r"\s*([A-Za-z_][A-Za-z_0-9]*)?\s*\((.*)\)\s*")      # numba's "(types)" is a void one
_ARGUMENT = re.compile(r"\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[(.*)\])?\s*")
_NAMES = {"b1": "bool", "boolean": "bool", "f4": "float32", "f8": "float64", "i4": "int32", "i8": "int64",
          "u4": "uint32", "u8": "uint64", "f2": "float16", "c8": "complex64", "c16": "complex128",
          "i1": "int8", "i2": "int16", "u1": "uint8", "u2": "uint16", "double": "float64", "float_": "float32",
          "intp": "int64", "uintp": "uint64", "intc": "int32", "uintc": "uint32"}     # numba's other names


def is_signature(x) -> bool:
    """Whether x is one kernel signature: a string, a signature object or a tuple of argument types."""
    return isinstance(x, str | T.Signature) or isinstance(x, tuple) and all(
        isinstance(a, T.Scalar | T.ArrayType) for a in x)


def parse(signature) -> tuple:
    """The argument types of a kernel signature, "void(type, ...)", void(type, ...) or (type, ...); TypeError for
    anything else."""
    if isinstance(signature, tuple) and is_signature(signature):
        return signature
    returns, args = function_signature(signature)
    if returns is not T.void:
        raise TypeError(f"kernel signature {signature}: a kernel returns nothing (void(...)); a signature with "
                        "a return type is a device function's (cuda.jit(..., device=True))")
    return args


def function_signature(signature) -> tuple:
    """(return type, argument types) of a function's signature: "float32(float32, int32)" or numba's object for it
    (`T.void` as the return type of "void(...)")."""
    if isinstance(signature, T.Signature):
        return signature.return_type, signature.args
    if not isinstance(signature, str):
        raise TypeError(f"kernel signature {signature!r}: expected 'void(float32[:], int32)', "
                        "void(float32[:], int32) or (float32[:], int32)")
    whole = _SIGNATURE.fullmatch(signature)
    if whole is None:
        raise TypeError(f"kernel signature {signature!r}: expected 'void(argument types, ...)' (a kernel returns "
                        "nothing)")
    pieces, depth, start, text = [], 0, 0, whole.group(2)
    for at, ch in enumerate(text):                   # the arguments: commas outside brackets
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            pieces.append(text[start:at])
            start = at + 1
    pieces.append(text[start:])
    returns = T.void if whole.group(1) in ("void", None) else _argument(whole.group(1), signature)
    return returns, tuple(_argument(piece, signature) for piece in pieces if piece.strip() or len(pieces) > 1)


def _argument(text: str, signature: str):
    match = _ARGUMENT.fullmatch(text)
    if match is None:
        raise TypeError(f"kernel signature {signature!r}: cannot read the argument type {text.strip()!r}")
    name, dims = match.group(1), match.group(2)
    try:
        scalar = T.scalar_of(_NAMES.get(name, name))
    except TypeError as e:
        raise TypeError(f"kernel signature {signature!r}: {e}") from None
    if dims is None:
        return scalar
    specs = [d.replace(" ", "") for d in dims.split(",")]
    if any(s not in (":", "::1") for s in specs) or specs.count("::1") > 1:
        raise TypeError(f"kernel signature {signature!r}: array dimensions are ':' or one '::1', not [{dims}]")
    layout = "C" if specs[-1] == "::1" else "F" if specs[0] == "::1" else "A"
    return T.ArrayType(scalar, len(specs), layout)


def fit(signature: tuple, args: tuple) -> tuple | None:
    """`args` as the signature takes them (numbers converted to its scalar types), or None when they do not fit.
    An array fits by dtype, dimensions and, for a "C" or "F" signature, contiguity in that order."""
    if len(signature) != len(args):
        return None
    fitted = []
    for t, value in zip(signature, args, strict=True):
        if isinstance(t, T.ArrayType):
            if not isinstance(value, DeviceNDArray) or value.ndim != t.ndim or T.element_of(value.dtype) != t.dtype:
                return None
            if t.layout == "C" and not value.is_c_contiguous() or t.layout == "F" and not value.is_f_contiguous():
                return None
            fitted.append(value)
        else:
            number = _number(value, t)
            if number is None:
                return None
            fitted.append(number)
    return tuple(fitted)


def _number(value, t: T.Scalar):
    """value as a numpy scalar of t, where numba would convert it: bools and integers to any number type,
    floats to floats and complex numbers, complex numbers to complex numbers."""
    if isinstance(value, DeviceNDArray | np.ndarray) or \
            not isinstance(value, bool | int | float | complex | np.generic):
        return None
    target = t.dtype
    if isinstance(value, float | np.floating) and target.kind not in "fc":
        return None
    if isinstance(value, complex | np.complexfloating) and target.kind != "c":
        return None
    return target.type(value)
