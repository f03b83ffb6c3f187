"""Warp-level operations and the matrix unit: shuffles, votes and HMMA.

These instructions see lanes grouped into warps of the profile's width (32 on H200, 64 on
MI300X); the last warp of a block may be partial. SHFL reads another lane's register through
the warp's crossbar (`shfl.sync`; AMD's DPP and `ds_bpermute`), VOTE forms a ballot of a
predicate over the warp's active lanes (`vote.sync`, AMD's ballot), and HMMA is the matrix
unit (tensor cores; AMD's MFMA): per group of 32 lanes, a 16x8x16 multiply-accumulate whose
register fragments follow PTX's `mma.m16n8k16` layout (a 64-wide wavefront runs two groups). Each
product of two halves is exact (in float64; a tensor core's products are exact too), the sixteen
are added to C in k order in float64 and the sum rounded once to float32, a NaN to the canonical
one: an order a program can rely on, which the native engine follows bit for bit (real tensor
cores add with at least float32 precision, in an order NVIDIA does not document). An HMMA group
must be all active or all inactive: a partly active group faults, as a diverged `mma.sync` is
undefined.
"""

import numpy as np

from lapis.hardware.numerics import canonical, split_halves
from lapis.hardware.simt.binders import Executor, Mask, binds
from lapis.hardware.simt.blocks import ResidentBlocks
from lapis.hardware.simt.registers import F32, F64, I64, U32, U64, write
from lapis.isa import PT, RZ, Instruction

MMA_GROUP = 32            # HMMA works on groups of 32 lanes (two per 64-wide wavefront)


def _mma_layout():
    """Flat matrix positions of each (lane, register, half) of the m16n8k16 fragments, as in PTX's mma."""
    lane = np.arange(MMA_GROUP)[:, None, None]
    g, t = lane >> 2, lane & 3
    reg4, reg2, half = np.arange(4)[None, :, None], np.arange(2)[None, :, None], np.arange(2)[None, None, :]
    a = (g + 8 * (reg4 & 1)) * 16 + 2 * t + 8 * (reg4 >> 1) + half            # A: 16x16, row-major
    b = (2 * t + 8 * reg2 + half) * 8 + g                                     # B: 16(k) x 8(n)
    cd = ((g + 8 * (reg4 >> 1)) * 8 + 2 * t + (reg4 & 1))[:, :, 0]            # C, D: 16x8 float32
    return a.reshape(-1), b.reshape(-1), cd.reshape(-1)


_MMA_A, _MMA_B, _MMA_CD = _mma_layout()


@binds("SHFL")
def shfl(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    mode, ws = inst.mod("mode"), blocks.core.warp_size
    d, a = regs.R[regs.dest(inst.rd)], regs.R[regs.row(inst.ra)]
    b = regs.b32(inst, regs.R, U32)
    lane = blocks.lane_in_warp

    def sources():
        """The lane each lane reads; a source outside the warp gives the lane its own value."""
        x = np.asarray(b).astype(I64)
        src = {"IDX": x & (ws - 1), "UP": lane - x, "DOWN": lane + x, "BFLY": lane ^ x}[mode]
        inside = (src >= 0) & (src < blocks.warp_len)
        return np.where(inside, blocks.warp_base + src, blocks.lane_ids)
    fixed = sources() if isinstance(b, np.generic) else None          # an immediate: the same every time

    def execute(mask: Mask) -> None:
        write(d, a[fixed if fixed is not None else sources()], mask)
    return execute


def _per_warp(blocks: ResidentBlocks, values: np.ndarray) -> np.ndarray:
    """Sum uint64 lane values over each warp, the result given back to every lane of the warp."""
    ws = blocks.core.warp_size
    if blocks.warp_aligned:
        return np.repeat(values.reshape(-1, ws).sum(axis=1, dtype=U64), ws)
    return np.add.reduceat(values, blocks.warp_starts)[blocks.lane_warp]


@binds("VOTE")
def vote(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    mode, ws = inst.mod("mode"), blocks.core.warp_size
    p, neg = regs.P[inst.ps], inst.ps_neg
    bit = U64(1) << blocks.lane_in_warp.astype(U64)
    pd = regs.P[inst.pd] if inst.pd != PT else None
    lo = regs.R[regs.dest(inst.rd)]
    hi = regs.R[regs.dest(inst.rd + 1)] if ws > 32 and inst.rd != RZ else None    # 64-wide: a pair

    def execute(mask: Mask) -> None:
        active = np.ones(blocks.lanes, bool) if mask is None else mask
        ballot = _per_warp(blocks, np.where((~p if neg else p) & active, bit, U64(0)))
        if pd is not None:
            result = ballot != 0 if mode == "ANY" else ballot == _per_warp(blocks, np.where(active, bit, U64(0)))
            write(pd, result, mask)
        write(lo, (ballot & U64(0xFFFFFFFF)).astype(U32), mask)
        if hi is not None:
            write(hi, (ballot >> U64(32)).astype(U32), mask)
    return execute


@binds("HMMA")
def hmma(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs, derived = blocks.registers, blocks.derived
    t, g = inst.mod("t"), MMA_GROUP
    if blocks.threads_per_block % g:
        raise ValueError(f"HMMA needs thread blocks of whole {g}-lane groups, not {blocks.threads_per_block} threads")
    lanes = blocks.lanes
    groups = lanes // g

    def rows_of(first, n):
        return None if first == RZ else [regs.row(first + i) for i in range(n)]
    a_rows, b_rows, c_rows = rows_of(inst.ra, 4), rows_of(inst.b.index, 2), rows_of(inst.rc, 4)
    dsts = [regs.R[regs.dest(inst.rd + i if inst.rd != RZ else RZ)] for i in range(4)]

    def read(rows, n):
        return np.zeros((n, lanes), U32) if rows is None else regs.R[rows]

    # Matrices are held group last, (rows, columns, groups): each step of the sum below is then one pass over
    # long rows of groups, not over many short rows of 8.
    def fragment(rows, count, layout, size, shape):
        """`count` registers of packed halves -> float64 matrices of their exact values, (*shape, groups)."""
        halves = np.stack(split_halves(read(rows, count), t), axis=-1)     # (count, lanes, 2)
        flat = np.empty((size, groups), F64)
        flat[layout] = halves.transpose(1, 0, 2).reshape(groups, g * count * 2).T
        return flat.reshape(*shape, groups)

    def unpacked(rows, count, layout, size, shape):
        """The fragment in `rows`, unpacked once while those registers stay unwritten."""
        if rows is None:
            return fragment(rows, count, layout, size, shape)
        versions = tuple(derived.version[r] for r in rows)
        value = derived.get(("fragment", rows[0], count, t), versions)
        if value is None:
            value = fragment(rows, count, layout, size, shape)
            derived.put(("fragment", rows[0], count, t), versions, value)
        return value

    def execute(mask: Mask) -> None:
        if mask is not None:
            per_group = mask.reshape(groups, g)
            if (per_group.any(axis=1) != per_group.all(axis=1)).any():
                raise blocks.fault(pc, f"HMMA with some lanes of a {g}-lane group inactive (diverged)")
        a = unpacked(a_rows, 4, _MMA_A, 256, (16, 16))          # (i, k, group)
        b = unpacked(b_rows, 2, _MMA_B, 128, (16, 8))           # (k, j, group)
        total = np.empty((128, groups), F64)
        total[_MMA_CD] = read(c_rows, 4).view(F32).T.reshape(groups, g * 4).T
        total = total.reshape(16, 8, groups)                    # (i, j, group)
        for k in range(16):                     # exact products, added to C in k order
            total += a[:, k, None, :] * b[None, k, :, :]
        out = canonical(total.reshape(128, groups).astype(F32))
        values = out[_MMA_CD].T.reshape(lanes, 4).T.view(U32)
        for dst, v in zip(dsts, values, strict=True):
            write(dst, v, mask)
    return execute
