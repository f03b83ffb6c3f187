"""One loop per instruction kind: the value of `native_values.v_<kind>` for every lane, into `out`.

The engine (`native.py`) runs an instruction as one of these loops into a scratch row, then copies
the active lanes into the destination. Each kind has a function of its own because LLVM
vectorizes a loop only while it stays simple: with several kinds' loops in one function it
merged them into one loop that chose the kind per lane (ten times slower), and numba compiles
small functions in a fraction of a second each. 32-bit integer results are truncated here.
"""

from numba import njit

import lapis.hardware.simt.native_values as v
from lapis.hardware.simt.native_values import MASK32


def loop(fn):
    return njit(cache=True, error_model="numpy", _nrt=False)(fn)


# -- u32 results -------------------------------------------------------------------------------------
@loop
def iadd(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_iadd(R, F, P, l, o, bf) & MASK32


@loop
def imad(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imad(R, F, P, l, o, bf) & MASK32


@loop
def shl(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_shl(R, F, P, l, o, bf) & MASK32


@loop
def shr(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_shr(R, F, P, l, o, bf) & MASK32


@loop
def lop(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_lop(R, F, P, l, o, bf) & MASK32


@loop
def imul(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imul(R, F, P, l, o, bf) & MASK32


@loop
def sel(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_sel(R, F, P, l, o, bf) & MASK32


@loop
def imnmx(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imnmx(R, F, P, l, o, bf) & MASK32


@loop
def iabs(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_iabs(R, F, P, l, o, bf) & MASK32


@loop
def i2i(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_i2i(R, F, P, l, o, bf) & MASK32


@loop
def f2i(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_f2i(R, F, P, l, o, bf) & MASK32


@loop
def f2f(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_f2f(R, F, P, l, o, bf)


@loop
def mov(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_mov(R, F, P, l, o, bf) & MASK32


# -- f32 results -------------------------------------------------------------------------------------
@loop
def ffma(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_ffma(R, F, P, l, o, bf)


@loop
def ffma_accumulate(R, F, P, o, bf, row):
    """FFMA whose addend is its destination (a GEMM's accumulator): `row` is F[C] and F[D]. Reading and
    writing one row through one array lets LLVM vectorize it; through F[C] and F[D] it would not."""
    for l in range(row.size):
        row[l] = v.ffma_with(F, l, o, bf, row[l])


@loop
def fadd(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_fadd(R, F, P, l, o, bf)


@loop
def fmul(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_fmul(R, F, P, l, o, bf)


@loop
def fmnmx(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_fmnmx(R, F, P, l, o, bf)


@loop
def i2f(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_i2f(R, F, P, l, o, bf)


@loop
def frnd(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_frnd(R, F, P, l, o, bf)


@loop
def mufu(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_mufu(R, F, P, l, o, bf)


# -- pair results ------------------------------------------------------------------------------------
@loop
def imadwide(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imadwide(R, F, P, l, o, bf)


@loop
def iadd64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_iadd64(R, F, P, l, o, bf)


@loop
def shl64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_shl64(R, F, P, l, o, bf)


@loop
def shr64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_shr64(R, F, P, l, o, bf)


@loop
def imad64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imad64(R, F, P, l, o, bf)


@loop
def imul64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imul64(R, F, P, l, o, bf)


@loop
def lop64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_lop64(R, F, P, l, o, bf)


@loop
def imnmx64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_imnmx64(R, F, P, l, o, bf)


@loop
def iabs64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_iabs64(R, F, P, l, o, bf)


@loop
def i2i64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_i2i64(R, F, P, l, o, bf)


@loop
def dfma(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_dfma(R, F, P, l, o, bf)


@loop
def dadd(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_dadd(R, F, P, l, o, bf)


@loop
def dmul(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_dmul(R, F, P, l, o, bf)


@loop
def dmnmx(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_dmnmx(R, F, P, l, o, bf)


@loop
def i2f64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_i2f64(R, F, P, l, o, bf)


@loop
def f2i64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_f2i64(R, F, P, l, o, bf)


@loop
def f2f64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_f2f64(R, F, P, l, o, bf)


@loop
def frnd64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_frnd64(R, F, P, l, o, bf)


@loop
def ldc64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_ldc64(R, F, P, l, o, bf)


# -- predicate results -------------------------------------------------------------------------------
@loop
def isetp(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_isetp(R, F, P, l, o, bf)


@loop
def isetp64(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_isetp64(R, F, P, l, o, bf)


@loop
def fsetp(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_fsetp(R, F, P, l, o, bf)


@loop
def dsetp(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_dsetp(R, F, P, l, o, bf)


@loop
def plop(R, F, P, o, bf, out):
    for l in range(out.size):
        out[l] = v.v_plop(R, F, P, l, o, bf)
