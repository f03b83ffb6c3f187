"""What one lane computes, for each instruction the native engine runs: numba functions inlined into its loops.

Each `v_*` function is the value instruction `kind` gives lane `l`, written to mean exactly
what the reference's numpy code means (`integer.py`, `floating.py`): integers are held in
int64 and wrap as the hardware's; float32 and float64 round at every operation but FFMA and DFMA,
which round once (`numerics.fused_multiply_add`, the host's fused multiply-add: numba contracts
nothing itself); min and max are `numerics.float_min`'s; conversions round and saturate as the
reference's. They all take the same arguments so the engine (`native.py`) can loop
any of them over the lanes:

  R, F, P   the register file as uint32 and float32 rows, and the predicates
  l         the lane
  o         the instruction's decoded operands, a tuple of int64 (the `O_*` positions below)
  bf        operand B as a float32 when it is an immediate or a constant

Registers hold raw bits; `as_f64` and friends reinterpret them (LLVM bitcasts), and a 64-bit
value is a pair of rows, low word first.
"""

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from lapis.hardware.numerics import fused_multiply_add

# Positions in the operand tuple `o` the engine builds for each instruction.
(O_A, O_B, O_C, O_B32, O_BREG, O_NEGA, O_NEGB, O_NEGC, O_ABSA, O_ABSB, O_M1, O_M2, O_M3, O_PS, O_PSNEG, O_A2, O_B2,
 O_C2, O_B64) = range(19)

MASK32 = 0xFFFFFFFF
SIGN64 = -0x8000000000000000
DONE, FAULT = 0, 1        # how an instruction of the engine ended: done, or it would fault (nothing written)


def inline(fn):
    return njit(inline="always", cache=True, error_model="numpy", _nrt=False)(fn)


# -- reinterpreting bits ---------------------------------------------------------------------------
@intrinsic
def as_f64(typingctx, x):
    """The float64 whose bits are the int64 x."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def as_i64(typingctx, x):
    """The bits of the float64 x, as an int64."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def as_f32(typingctx, x):
    """The float32 whose bits are the low 32 bits of the int64 x."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
    return types.float32(types.int64), codegen


@intrinsic
def as_u32(typingctx, x):
    """The bits of the float32 x, as a non-negative int64."""
    def codegen(context, builder, sig, args):
        return builder.zext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))
    return types.int64(types.float32), codegen


# -- numbers ------------------------------------------------------------------------------------------
@inline
def s32(x):
    """The low 32 bits of x read as a signed integer: shifted to the top and back, arithmetically (no
    branch, so loops over lanes vectorize)."""
    return (x << 32) >> 32


@inline
def ult64(x, y):
    """x < y for 64-bit values held in int64, compared as unsigned."""
    return (x ^ SIGN64) < (y ^ SIGN64)


@inline
def pair(R, lo, hi, l):
    return np.int64(R[lo, l]) | (np.int64(R[hi, l]) << 32)


@inline
def put_pair(R, lo, hi, l, x):
    R[lo, l] = x & MASK32
    R[hi, l] = (x >> 32) & MASK32


@inline
def canonical32(x):
    """x, or the canonical NaN (`numerics.canonical`) when x is NaN."""
    return x if x == x else as_f32(np.int64(0x7FFFFFFF))


@inline
def canonical64(x):
    return x if x == x else as_f64(np.int64(0x7FFFFFFFFFFFFFFF))


@inline
def fmin_(a, b):
    """IEEE 754-2019 minimumNumber, as `numerics.float_min`: a NaN operand loses, -0.0 < +0.0."""
    return a if (a < b or b != b or (a == b and math.copysign(1.0, a) < 0)) else b


@inline
def fmax_(a, b):
    """IEEE 754-2019 maximumNumber, as `numerics.float_max`."""
    return a if (a > b or b != b or (a == b and math.copysign(1.0, a) > 0)) else b


@inline
def compare(cmp, a, b):
    """CMP's order F LT EQ LE GT NE GE T is a mask of LT (1), EQ (2) and GT (4); NaN, unordered, is
    true only for NE and T. Written without branches, so that loops over lanes vectorize."""
    unordered = (a != a) | (b != b)
    ordered = ((cmp & 1 != 0) & (a < b)) | ((cmp & 2 != 0) & (a == b)) | ((cmp & 4 != 0) & (a > b))
    return ordered | (unordered & ((cmp == 5) | (cmp == 7)))


@inline
def combine(bop, r, p):
    """AND, OR or XOR of two predicates."""
    return ((bop == 0) & r & p) | ((bop == 1) & (r | p)) | ((bop == 2) & (r != p))


@inline
def half_value(h, bf16):
    """The float16 (bfloat16 when `bf16`) in the low 16 bits of h as the float64 of the same value, as
    `numerics.half_to_f64` (a NaN's payload aside), without branches: a float16's exponent and fraction
    moved into a float32's and scaled by 2^112 (a subnormal becomes normal, exactly), or for the top
    exponent set to infinity's; the sign set as a bit (a branch on it mispredicts on every other value)."""
    if bf16:
        return np.float64(as_f32((h & 0xFFFF) << 16))
    magnitude = (h & 0x7FFF) << 13
    f = as_f32(magnitude) * np.float32(2.0 ** 112)
    f = as_f32(magnitude | 0x7F800000) if h & 0x7C00 == 0x7C00 else f
    return np.float64(as_f32(as_u32(f) | (h & 0x8000) << 16))


@inline
def modifiers(x, negate, absolute):
    """A float source's |x| and -x, the absolute value first."""
    if absolute:
        x = abs(x)
    return -x if negate else x


@inline
def round_mode(x, mode):
    """RN, FLOOR, CEIL, TRUNC (FRND's order)."""
    if mode == 0:
        return np.rint(x)
    if mode == 1:
        return np.floor(x)
    if mode == 2:
        return np.ceil(x)
    return np.trunc(x)


@inline
def to_integer(v, to, rnd):
    """F2I: float64 v rounded (rnd in F2I's order TRUNC FLOOR CEIL RN), NaN to 0, saturated to S32,
    S64 or U32 (`to` 0, 1, 2), as the reference's round, nan_to_num, clip and cast."""
    v = round_mode(v, (3, 1, 2, 0)[rnd])
    if v != v:
        v = 0.0
    if to == 0:
        v = min(max(v, -2147483648.0), 2147483647.0)
    elif to == 1:
        if v >= 9223372036854775808.0:       # 2^63 - 1 is no float64: the clamp must not make 2^63 and wrap
            return np.int64(9223372036854775807)
        v = max(v, -9223372036854775808.0)
    else:
        v = min(max(v, 0.0), 4294967295.0)
    return np.int64(v)


# -- operands -------------------------------------------------------------------------------------------
@inline
def _b(R, l, o):
    return np.int64(R[o[O_B], l]) if o[O_BREG] else o[O_B32]


@inline
def _b64(R, l, o):
    return pair(R, o[O_B], o[O_B2], l) if o[O_BREG] else o[O_B64]


@inline
def _a64(R, l, o):
    return pair(R, o[O_A], o[O_A2], l)


@inline
def _c64(R, l, o):
    z = pair(R, o[O_C], o[O_C2], l)
    return -z if o[O_NEGC] else z


@inline
def _fa(F, l, o):
    return modifiers(F[o[O_A], l], o[O_NEGA], o[O_ABSA])


@inline
def _fb(F, l, o, bf):
    return modifiers(F[o[O_B], l] if o[O_BREG] else bf, o[O_NEGB], o[O_ABSB])


@inline
def _da(R, l, o):
    return modifiers(as_f64(_a64(R, l, o)), o[O_NEGA], o[O_ABSA])


@inline
def _db(R, l, o):
    return modifiers(as_f64(_b64(R, l, o)), o[O_NEGB], o[O_ABSB])


@inline
def _float_source(R, F, l, o, bf, double):
    """Operand B as float64, from a register pair (`double`) or one float32 register."""
    if double:
        return as_f64(_b64(R, l, o))
    if o[O_BREG]:
        return np.float64(F[o[O_B], l])
    return np.float64(bf)


# -- 32-bit integer results -------------------------------------------------------------------------
@inline
def v_mov(R, F, P, l, o, bf):
    return _b(R, l, o)


@inline
def v_sel(R, F, P, l, o, bf):
    x, y = np.int64(R[o[O_A], l]), _b(R, l, o)        # both read first: a select LLVM vectorizes
    return x if P[o[O_PS], l] != o[O_PSNEG] else y


@inline
def v_iadd(R, F, P, l, o, bf):
    x, y = np.int64(R[o[O_A], l]), _b(R, l, o)
    return (-x if o[O_NEGA] else x) + (-y if o[O_NEGB] else y)


@inline
def v_imul(R, F, P, l, o, bf):
    return np.int64(R[o[O_A], l]) * _b(R, l, o)


@inline
def v_imad(R, F, P, l, o, bf):
    z = np.int64(R[o[O_C], l])
    return np.int64(R[o[O_A], l]) * _b(R, l, o) + (-z if o[O_NEGC] else z)


@inline
def v_shl(R, F, P, l, o, bf):
    s = min(_b(R, l, o), 32)
    return 0 if s >= 32 else np.int64(R[o[O_A], l]) << s


@inline
def v_shr(R, F, P, l, o, bf):
    s = min(_b(R, l, o), 32)
    if o[O_M1]:
        return s32(np.int64(R[o[O_A], l])) >> min(s, 31)
    return 0 if s >= 32 else np.int64(R[o[O_A], l]) >> s


@inline
def v_lop(R, F, P, l, o, bf):
    x, y = np.int64(R[o[O_A], l]), _b(R, l, o)
    return (x & y) if o[O_M1] == 0 else ((x | y) if o[O_M1] == 1 else (x ^ y))


@inline
def v_imnmx(R, F, P, l, o, bf):
    x, y = np.int64(R[o[O_A], l]), _b(R, l, o)
    if o[O_M2]:
        x, y = s32(x), s32(y)
    return max(x, y) if o[O_M1] else min(x, y)


@inline
def v_iabs(R, F, P, l, o, bf):
    x = s32(_b(R, l, o))
    return -x if x < 0 else x


@inline
def v_i2i(R, F, P, l, o, bf):
    """I2I to 32 bits: from S64 the low word, from S32 or U32 the bits."""
    return _b64(R, l, o) if o[O_M1] == 0 else _b(R, l, o)


@inline
def v_f2i(R, F, P, l, o, bf):
    return to_integer(_float_source(R, F, l, o, bf, o[O_M2]), o[O_M1], o[O_M3])


@inline
def v_f2f(R, F, P, l, o, bf):
    """F2F to F32, F16 or BF16 (M3: 0, 1, 2), as bits: from F32 or F64 (M1), or a half in B's low 16 bits (M2: 1
    F16, 2 BF16; only to F32, and a half only from F32: `translate.py` leaves the other forms to the binder)."""
    if o[O_M2]:
        return half_to_f32_bits(_b(R, l, o), o[O_M2] == 2)
    x = _float_source(R, F, l, o, bf, o[O_M1])
    if o[O_M3] == 1:
        return f64_to_f16_bits(x)
    if o[O_M3] == 2:
        return f32_to_bf16_bits(x)
    return as_u32(np.float32(x))


@inline
def half_to_f32_bits(h, bf16):
    """The float16 (bfloat16 when `bf16`) in the low 16 bits of h as a float32's bits; a NaN made quiet, as the
    reference's conversion through float64 makes it (LLVM folds the engine's float32-float64-float32 away)."""
    x = half_value(h, bf16)
    bits = as_u32(np.float32(x))
    return bits | 0x400000 if x != x else bits


@inline
def f64_to_f16_bits(x):
    """x rounded to the nearest float16, ties to even, as `numerics.f64_to_half` (numpy's double-to-half
    conversion): its bits. Past the largest half, infinity; a NaN keeps the top ten bits of its fraction (made
    nonzero); below the smallest subnormal half, zero; the sign kept in every case."""
    d = as_i64(x)
    sign = (d >> 48) & 0x8000
    exp = d & 0x7FF0000000000000
    sig = d & 0x000FFFFFFFFFFFFF
    if exp >= 0x40F0000000000000:                       # 2^16 and up (the exponent half's 31 would need)
        if exp == 0x7FF0000000000000 and sig != 0:
            h = 0x7C00 + (sig >> 42)
            return sign | (h + 1 if h == 0x7C00 else h)
        return sign | 0x7C00
    if exp <= 0x3F00000000000000:                       # below 2^-14: a subnormal half, or zero
        if exp < 0x3E60000000000000:
            return sign
        sig = (0x0010000000000000 + sig) << ((exp >> 52) - 998)      # the leading one in bit 53 at 2^-25
        if sig & 0x003FFFFFFFFFFFFF != 0x0010000000000000:          # not a tie on an even half: round up
            sig += 0x0010000000000000
        return sign | (sig >> 53)
    if sig & 0x000007FFFFFFFFFF != 0x0000020000000000:
        sig += 0x0000020000000000
    return sign | (((exp - 0x3F00000000000000) >> 42) + (sig >> 42))   # a carry moves on to the exponent


@inline
def f32_to_bf16_bits(x):
    """A float32's value x rounded to the nearest bfloat16, ties to even, as `numerics.f64_to_half`: its bits; a
    NaN the quiet one with its sign."""
    bits = as_u32(np.float32(x))
    if x != x:
        return 0x7FC0 | ((bits >> 16) & 0x8000)
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


# -- float32 results --------------------------------------------------------------------------------
@inline
def v_fadd(R, F, P, l, o, bf):
    return canonical32(_fa(F, l, o) + _fb(F, l, o, bf))


@inline
def v_fmul(R, F, P, l, o, bf):
    return canonical32(_fa(F, l, o) * _fb(F, l, o, bf))


@inline
def v_ffma(R, F, P, l, o, bf):
    return ffma_with(F, l, o, bf, F[o[O_C], l])


@inline
def ffma_with(F, l, o, bf, z):
    """FFMA's value with addend z (C's value, negated here when the instruction says so), rounded once."""
    return canonical32(fused_multiply_add(_fa(F, l, o), _fb(F, l, o, bf), -z if o[O_NEGC] else z))


@inline
def v_fmnmx(R, F, P, l, o, bf):
    x, y = _fa(F, l, o), _fb(F, l, o, bf)
    return fmax_(x, y) if o[O_M1] else fmin_(x, y)


@inline
def v_i2f(R, F, P, l, o, bf):
    """I2F to F32 from S32, U32 or S64 (m1 0, 1, 2): one rounding."""
    if o[O_M1] == 2:
        return np.float32(_b64(R, l, o))
    x = _b(R, l, o)
    return np.float32(s32(x) if o[O_M1] == 0 else x)


@inline
def v_frnd(R, F, P, l, o, bf):
    return round_mode(F[o[O_B], l] if o[O_BREG] else bf, o[O_M1])


@inline
def v_mufu(R, F, P, l, o, bf):
    """RCP, RSQ, SQRT (exact), EX2 and LG2 (in float64, rounded once, as `floating.mufu`); SIN and COS are
    left to the reference."""
    x = F[o[O_B], l] if o[O_BREG] else bf
    if o[O_M1] == 0:
        return canonical32(np.float32(1) / x)
    if o[O_M1] == 1:
        return canonical32(np.float32(1) / np.sqrt(x))
    if o[O_M1] == 2:
        return canonical32(np.sqrt(x))
    if o[O_M1] == 3:
        return canonical32(np.float32(math.exp2(np.float64(x))))
    return canonical32(np.float32(math.log2(np.float64(x))))


# -- 64-bit results (register pairs) ----------------------------------------------------------------
@inline
def v_ldc64(R, F, P, l, o, bf):
    return o[O_B64]


@inline
def v_iadd64(R, F, P, l, o, bf):
    x, y = _a64(R, l, o), _b64(R, l, o)
    return (-x if o[O_NEGA] else x) + (-y if o[O_NEGB] else y)


@inline
def v_imul64(R, F, P, l, o, bf):
    return _a64(R, l, o) * _b64(R, l, o)


@inline
def v_imadwide(R, F, P, l, o, bf):
    return s32(np.int64(R[o[O_A], l])) * s32(_b(R, l, o)) + _c64(R, l, o)


@inline
def v_imad64(R, F, P, l, o, bf):
    return _a64(R, l, o) * _b64(R, l, o) + _c64(R, l, o)


@inline
def v_shl64(R, F, P, l, o, bf):
    s = min(_b64(R, l, o) & MASK32, 64)
    return 0 if s >= 64 else _a64(R, l, o) << s


@inline
def v_shr64(R, F, P, l, o, bf):
    s = min(_b64(R, l, o) & MASK32, 64)
    x = _a64(R, l, o)
    if o[O_M1]:
        return x >> min(s, 63)
    return 0 if s >= 64 else np.int64(np.uint64(x) >> np.uint64(s))


@inline
def v_lop64(R, F, P, l, o, bf):
    x, y = _a64(R, l, o), _b64(R, l, o)
    return (x & y) if o[O_M1] == 0 else ((x | y) if o[O_M1] == 1 else (x ^ y))


@inline
def v_imnmx64(R, F, P, l, o, bf):
    x, y = _a64(R, l, o), _b64(R, l, o)
    less = x < y if o[O_M2] else ult64(x, y)
    return (y if less else x) if o[O_M1] else (x if less else y)


@inline
def v_iabs64(R, F, P, l, o, bf):
    y = _b64(R, l, o)
    return -y if y < 0 else y


@inline
def v_i2i64(R, F, P, l, o, bf):
    """I2I to S64: sign-extend from S32 (m1 1) or zero-extend from U32."""
    x = _b(R, l, o)
    return s32(x) if o[O_M1] == 1 else x


@inline
def v_dadd(R, F, P, l, o, bf):
    return as_i64(canonical64(_da(R, l, o) + _db(R, l, o)))


@inline
def v_dmul(R, F, P, l, o, bf):
    return as_i64(canonical64(_da(R, l, o) * _db(R, l, o)))


@inline
def v_dfma(R, F, P, l, o, bf):
    z = as_f64(pair(R, o[O_C], o[O_C2], l))
    return as_i64(canonical64(fused_multiply_add(_da(R, l, o), _db(R, l, o), -z if o[O_NEGC] else z)))


@inline
def v_dmnmx(R, F, P, l, o, bf):
    x, y = _da(R, l, o), _db(R, l, o)
    return as_i64(fmax_(x, y) if o[O_M1] else fmin_(x, y))


@inline
def v_i2f64(R, F, P, l, o, bf):
    """I2F to F64 from S32, U32 or S64 (m1 0, 1, 2)."""
    if o[O_M1] == 2:
        return as_i64(np.float64(_b64(R, l, o)))
    x = _b(R, l, o)
    return as_i64(np.float64(s32(x) if o[O_M1] == 0 else x))


@inline
def v_f2i64(R, F, P, l, o, bf):
    return to_integer(_float_source(R, F, l, o, bf, o[O_M2]), 1, o[O_M3])


@inline
def v_f2f64(R, F, P, l, o, bf):
    """F2F to F64."""
    return as_i64(_float_source(R, F, l, o, bf, o[O_M1]))


@inline
def v_frnd64(R, F, P, l, o, bf):
    return as_i64(round_mode(as_f64(_b64(R, l, o)), o[O_M1]))


# -- predicate results --------------------------------------------------------------------------------
@inline
def _with_ps(R, P, l, o, r):
    return combine(o[O_M3], r, P[o[O_PS], l] != o[O_PSNEG])


@inline
def v_isetp(R, F, P, l, o, bf):
    x, y = np.int64(R[o[O_A], l]), _b(R, l, o)
    if o[O_M2]:
        x, y = s32(x), s32(y)
    return _with_ps(R, P, l, o, compare(o[O_M1], x, y))


@inline
def v_isetp64(R, F, P, l, o, bf):
    x, y = _a64(R, l, o), _b64(R, l, o)
    r = compare(o[O_M1], x, y) if o[O_M2] else compare(o[O_M1], x ^ SIGN64, y ^ SIGN64)
    return _with_ps(R, P, l, o, r)


@inline
def v_fsetp(R, F, P, l, o, bf):
    return _with_ps(R, P, l, o, compare(o[O_M1], _fa(F, l, o), _fb(F, l, o, bf)))


@inline
def v_dsetp(R, F, P, l, o, bf):
    return _with_ps(R, P, l, o, compare(o[O_M1], _da(R, l, o), _db(R, l, o)))


@inline
def v_plop(R, F, P, l, o, bf):
    """Pd = Ps op Pq; the engine passes Pq and its negation in the C and NEGC positions."""
    return combine(o[O_M1], P[o[O_PS], l] != o[O_PSNEG], P[o[O_C], l] != o[O_NEGC])
