"""Layer 0: number formats the SIMT core computes in: float16 and bfloat16 halves, order keys.

Registers are 32-bit; a half-precision value lives in 16 bits of one (packed instructions
such as HADD2 hold two, low half first). numpy has float16 but no bfloat16, and bfloat16 is
just the top 16 bits of a float32, so both are converted here with bit operations. Results
are computed in float64 and rounded once to the target format: numpy's float64 -> float16
cast rounds correctly, and for bfloat16 the float64 is first rounded to float32 *to odd*,
which makes the second rounding (to nearest even) exact as if done directly.
"""

import numpy as np
from numba import types, vectorize
from numba.extending import intrinsic

U16, U32, I32, F32, F64, I64, U64 = np.uint16, np.uint32, np.int32, np.float32, np.float64, np.int64, np.uint64


def half_to_f64(bits: np.ndarray, kind: str) -> np.ndarray:
    """16-bit patterns (in the low half of uint32 values) as float64."""
    bits = np.asarray(bits, U32) & U32(0xFFFF)
    if kind == "F16":
        return bits.astype(U16).view(np.float16).astype(F64)
    return (bits << U32(16)).view(F32).astype(F64)


def f64_to_half(x: np.ndarray, kind: str) -> np.ndarray:
    """float64 values rounded to nearest even float16 or bfloat16; the bits in a uint32's low half."""
    x = np.asarray(x, F64)
    if kind == "F16":
        return x.astype(np.float16).view(U16).astype(U32)
    bits = f64_to_f32_odd(x).view(U32)
    nan = np.isnan(x)
    rounded = (bits + U32(0x7FFF) + ((bits >> U32(16)) & U32(1))) >> U32(16)
    return np.where(nan, U32(0x7FC0) | (bits >> U32(16) & U32(0x8000)), rounded).astype(U32)


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: truncate toward zero, then set the last bit if inexact."""
    x = np.asarray(x, F64)
    near = x.astype(F32)
    back = near.astype(F64)
    finite = np.isfinite(x) & np.isfinite(back)
    overshoot = finite & (np.abs(back) > np.abs(x))
    toward_zero = np.where(overshoot, np.nextafter(near, F32(0)), near)
    inexact = finite & (toward_zero.astype(F64) != x)
    bits = toward_zero.view(U32) | inexact.astype(U32)
    return bits.view(F32)


@intrinsic
def fused_multiply_add(typingctx, a, b, c):
    """a * b + c of three float32s or three float64s rounded once: LLVM's llvm.fma, the host's fused multiply-add
    (IEEE 754's fusedMultiplyAdd; libm's fma where the host has no instruction for it)."""
    if not (a == b == c and a in (types.float32, types.float64)):
        return None
    def codegen(context, builder, sig, args):
        return builder.fma(*args)
    return a(a, b, c), codegen


@vectorize(["float32(float32, float32, float32)", "float64(float64, float64, float64)"], cache=True)
def fma(a, b, c):
    """a * b + c of float arrays (or numbers), elementwise, rounded once (FFMA's and DFMA's arithmetic). numpy has
    no fused multiply-add, so this one numpy ufunc is numba's, over the host's instruction; tests/test_instructions.py
    checks its float32 results against a construction in numpy alone (the product exact in float64, the sum rounded
    to odd)."""
    return fused_multiply_add(a, b, c)


def split_halves(word: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A packed register's (low, high) halves as float64."""
    word = np.asarray(word, U32)
    return half_to_f64(word, kind), half_to_f64(word >> U32(16), kind)


def pack_halves(lo: np.ndarray, hi: np.ndarray, kind: str) -> np.ndarray:
    return f64_to_half(lo, kind) | (f64_to_half(hi, kind) << U32(16))


def float_to_format(x: np.ndarray, to: str) -> np.ndarray:
    """float64 values in the register form of `to`: uint32 bits for F32/F16/BF16, uint64 for F64."""
    x = np.asarray(x, F64)
    if to == "F64":
        return x.view(U64)
    if to == "F32":
        return x.astype(F32).view(U32)
    return f64_to_half(x, to)


def format_to_float(bits, fr: str) -> np.ndarray:
    """The inverse of float_to_format: register bits of format `fr` as float64."""
    if fr == "F64":
        return np.asarray(bits, U64).view(F64)
    if fr == "F32":
        return np.asarray(bits, U32).view(F32).astype(F64)
    return half_to_f64(bits, fr)


def order_key(bits: np.ndarray, t: str) -> np.ndarray:
    """int64 keys that sort like the integers of type t (U32 or S32) whose bits are given."""
    bits = np.asarray(bits, U32)
    return bits.astype(I64) if t == "U32" else bits.view(I32).astype(I64)


def float_min(a, b, out=None):
    """IEEE 754-2019 minimumNumber, as PTX's min.f32 and AMD's v_min_f32: a NaN operand loses (two
    NaNs give NaN) and -0.0 counts as less than +0.0. (numpy's fmin leaves the sign of a zero tie
    to its SIMD loops, so it is not used.)"""
    a, b = np.asarray(a), np.asarray(b)
    pick_a = (a < b) | np.isnan(b) | ((a == b) & np.signbit(a))
    return np.where(pick_a, a, b) if out is None else np.copyto(out, np.where(pick_a, a, b))


def float_max(a, b, out=None):
    """IEEE 754-2019 maximumNumber: a NaN operand loses and +0.0 counts as greater than -0.0."""
    a, b = np.asarray(a), np.asarray(b)
    pick_a = (a > b) | np.isnan(b) | ((a == b) & ~np.signbit(a))
    return np.where(pick_a, a, b) if out is None else np.copyto(out, np.where(pick_a, a, b))


# The NaN every float32 and float64 operation returns when its result is NaN, whatever NaN it was
# given, as NVIDIA GPUs do (PTX: a "canonical NaN"). IEEE 754 leaves the choice of NaN open and x86
# propagates one of the operands' by their order in the machine instruction, which the compiler picks.
CANONICAL_NAN32 = np.uint32(0x7FFFFFFF).view(np.float32)
CANONICAL_NAN64 = np.uint64(0x7FFFFFFFFFFFFFFF).view(np.float64)


def canonical(x: np.ndarray) -> np.ndarray:
    """x with every NaN replaced by the canonical NaN of its type."""
    nan = CANONICAL_NAN64 if np.asarray(x).dtype == np.float64 else CANONICAL_NAN32
    return np.where(np.isnan(x), nan, x)

