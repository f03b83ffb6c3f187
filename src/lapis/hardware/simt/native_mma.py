"""HMMA in the native engine: an m16n8k16 product per 32-lane group, as `warp.hmma` computes it.

D = C + A B, A 16x16 and B 16x8 halves, C and D 16x8 float32, each fragment in PTX's mma layout (lane
4 g + t of a group holds A's rows g and g + 8 at k 2t, 2t + 1, 2t + 8, 2t + 9; see `warp._mma_layout`). Every
product is exact in float64, and each sum is taken in k order from C, then rounded once to float32.

A group's registers are first widened to float64 a row of 32 lanes at a time, in loops LLVM vectorizes, into
a work area laid out as the registers are (`A_AT` .. `D_AT`). The 128 sums are then one stretch of straight-line
LLVM IR (`sum_products`): each row of D's eight sums is two 4-wide vectors, four rows in flight, and for k = 0 ..
15 in order each takes A[i, k] (broadcast) times B's row k with one fused multiply-add. A product of two halves
is exact in float64, so the fused multiply-add rounds as the reference's add of the product does. Every
position in the work area is a constant there, so no index is computed per element; a group costs about
0.5 us where gathering each element into A, B and C matrices first cost 0.9 (bfloat16) to 2.7 (float16).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.native_values import DONE, FAULT, as_u32, canonical32, half_value

MMA_GROUP = 32            # HMMA's lanes per m16n8k16 product (`warp.MMA_GROUP`)
# The work area (float64s): A's four registers and B's two, each as its 32 lanes' low halves then their high
# halves; C's four registers and D's (the sums), a float64 per lane.
A_AT, B_AT, C_AT, D_AT = 0, 256, 384, 512
MMA_WORK = 640
ROWS_IN_FLIGHT = 4        # rows of D whose sums `sum_products` interleaves: eight independent chains of adds


def a_slot(i: int, k: int) -> int:
    """Where A[i, k] lies in the work area: register (i >> 3) + 2 (k >> 3), lane 4 (i & 7) + (k & 7) / 2."""
    return A_AT + ((i >> 3) + 2 * (k >> 3)) * 64 + (k & 1) * 32 + 4 * (i & 7) + ((k & 7) >> 1)


def b_slot(k: int, j: int) -> int:
    """Where B[k, j] lies: register k >> 3, lane 4 j + (k & 7) / 2."""
    return B_AT + (k >> 3) * 64 + (k & 1) * 32 + 4 * j + ((k & 7) >> 1)


def cd_slot(i: int, j: int) -> int:
    """Where C[i, j] and D[i, j] lie, from `C_AT` and `D_AT`: register 2 (i >> 3) + (j & 1), lane 4 (i & 7) + j / 2."""
    return (2 * (i >> 3) + (j & 1)) * 32 + 4 * (i & 7) + (j >> 1)


@intrinsic
def sum_products(typingctx, work):
    """D = C + A B over the widened fragments in `work` (float64), in k order, as straight-line vector IR."""
    def codegen(context, builder, sig, args):
        base = context.make_array(sig.args[0])(context, builder, args[0]).data
        f64, i32, i64 = ir.DoubleType(), ir.IntType(32), ir.IntType(64)
        quad = ir.VectorType(f64, 4)
        module = builder.module
        fma = module.globals.get("llvm.fma.v4f64") or ir.Function(module, ir.FunctionType(quad, [quad] * 3),
                                                                   "llvm.fma.v4f64")

        def at(slot):
            return builder.gep(base, [ir.Constant(i64, slot)])

        def quad_of(slots):
            value = ir.Constant(quad, ir.Undefined)
            for e, slot in enumerate(slots):
                value = builder.insert_element(value, builder.load(at(slot)), ir.Constant(i32, e))
            return value

        def broadcast(slot):
            one = builder.insert_element(ir.Constant(quad, ir.Undefined), builder.load(at(slot)), ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(quad, ir.Undefined), ir.Constant(ir.VectorType(i32, 4),
                                                                                            [0] * 4))

        b_rows = [[quad_of([b_slot(k, j) for j in range(h, h + 4)]) for h in (0, 4)] for k in range(16)]
        for first in range(0, 16, ROWS_IN_FLIGHT):
            rows = range(first, first + ROWS_IN_FLIGHT)
            sums = {i: [quad_of([C_AT + cd_slot(i, j) for j in range(h, h + 4)]) for h in (0, 4)] for i in rows}
            for k in range(16):
                for i in rows:
                    a = broadcast(a_slot(i, k))
                    sums[i] = [builder.call(fma, [a, b_rows[k][h], sums[i][h]]) for h in range(2)]
            for i in rows:
                for j in range(8):
                    builder.store(builder.extract_element(sums[i][j >> 2], ir.Constant(i32, j & 3)),
                                  at(D_AT + cd_slot(i, j)))
        return context.get_dummy_value()
    return types.void(work), codegen


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def widen(row, work, at, bf16):
    """A register row's 32 lanes of packed halves as float64s: the low halves at work[at:], the high ones 32 on."""
    for l in range(MMA_GROUP):
        word = np.int64(row[l])
        work[at + l] = half_value(word, bf16)
        work[at + MMA_GROUP + l] = half_value(word >> 16, bf16)


@njit(cache=True, error_model="numpy", _nrt=False)
def matrix_multiply(t, active, R, F, threads_per_block, work):
    """HMMA.16816 for each 32-lane group of the active lanes (t: its table row; F: R as float32; work: `MMA_WORK`
    float64s). FAULT (nothing written) when a block is not whole groups or a group is partly active: the binder
    raises."""
    L = active.size
    if threads_per_block % MMA_GROUP:
        return FAULT
    for first in range(0, L, MMA_GROUP):
        n = 0
        for l in range(first, first + MMA_GROUP):
            n += active[l]
        if n != 0 and n != MMA_GROUP:
            return FAULT
    a_row, b_row, c_row, d_row = t[tr.A], t[tr.B], t[tr.C], t[tr.D]
    a_step, b_step, c_step, d_step = t[tr.A2], t[tr.B2], t[tr.C2], t[tr.D2]
    bf16 = t[tr.M1] != 0
    for first in range(0, L, MMA_GROUP):
        if not active[first]:
            continue
        last = first + MMA_GROUP
        for reg in range(4):
            widen(R[a_row + reg * a_step, first:last], work, A_AT + 64 * reg, bf16)
            c = F[c_row + reg * c_step, first:last]
            for l in range(MMA_GROUP):
                work[C_AT + 32 * reg + l] = np.float64(c[l])
        for reg in range(2):
            widen(R[b_row + reg * b_step, first:last], work, B_AT + 64 * reg, bf16)
        sum_products(work)
        for reg in range(4):                           # every source read: D may be one of them
            d = R[d_row + reg * d_step, first:last]
            for l in range(MMA_GROUP):
                d[l] = as_u32(canonical32(np.float32(work[D_AT + 32 * reg + l])))
    return DONE
