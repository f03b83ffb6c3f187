"""Integer and logic instructions: moves, 32- and 64-bit integer arithmetic, shifts, compares, predicates.

What an SM's integer (ALU) pipe and the integer side of its FMA pipe do (IMAD and IMUL
issue to the FMA pipe, as on NVIDIA GPUs since Volta): moves from registers, immediates,
constant bank 0 and special registers; add, multiply and multiply-add, 64-bit forms working
on register pairs (IMAD.WIDE: a 32x32 signed product added to a 64-bit value, how array
addresses are formed); shifts, bitwise logic, min and max, integer width conversion and
absolute value; compares into predicates (ISETP, and the compare shared with FSETP and
DSETP) and predicate logic (PLOP). Integer arithmetic wraps modulo 2^32 or 2^64.
"""

import numpy as np

from lapis.hardware.simt.binders import Executor, Mask, binds
from lapis.hardware.simt.blocks import ResidentBlocks
from lapis.hardware.simt.registers import I32, I64, U32, U64, write
from lapis.isa import PT, Instruction
from lapis.isa import SpecialRegister as SR

_BOOL_OPS = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}
_COMPARES = {"LT": np.less, "EQ": np.equal, "LE": np.less_equal, "GT": np.greater, "NE": np.not_equal,
             "GE": np.greater_equal}


# -- moves -------------------------------------------------------------------------------------
@binds("MOV")
def mov(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    d, b = regs.R[regs.dest(inst.rd)], regs.b32(inst, regs.R, U32)
    return lambda mask: write(d, b, mask)


@binds("S2R")
def s2r(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs, core = blocks.registers, blocks.core
    d, src = regs.R[regs.dest(inst.rd)], blocks.special[inst.b.bits]
    if inst.b.bits == SR.CLOCKLO:       # the clock: scheduler steps of the launch's earlier batches
        return lambda mask: write(d, U32(core.counters.steps & 0xFFFFFFFF), mask)
    return lambda mask: write(d, src, mask)


@binds("LDC")
def ldc(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    lo = regs.constant(inst.b.offset)
    if inst.mod("w") == "64":
        value = U64(lo | regs.constant(inst.b.offset + 4) << 32)
        return lambda mask: regs.write_pair(inst.rd, np.full(blocks.lanes, value), mask)
    d = regs.R[regs.dest(inst.rd)]
    return lambda mask: write(d, U32(lo), mask)


@binds("SEL")
def sel(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    d, a, b = regs.R[regs.dest(inst.rd)], regs.R[regs.row(inst.ra)], regs.b32(inst, regs.R, U32)
    p, neg = regs.P[inst.ps], inst.ps_neg
    return lambda mask: write(d, np.where(~p if neg else p, a, b), mask)


# -- arithmetic --------------------------------------------------------------------------------
@binds("IADD")
def iadd(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    if inst.mod("w") == "64":
        a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
        na, nb = "a" in inst.neg, "b" in inst.neg
        return lambda mask: regs.write_pair(
            inst.rd, (U64(0) - a() if na else a()) + (U64(0) - b() if nb else b()), mask)
    return regs.elementwise(inst, regs.R, np.add)


@binds("IMUL")
def imul(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    if inst.mod("w") == "64":
        a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
        return lambda mask: regs.write_pair(inst.rd, a() * b(), mask)
    return regs.elementwise(inst, regs.R, np.multiply)


@binds("IMAD")
def imad(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    w = inst.mod("w")
    negc = "c" in inst.neg
    if w == "":
        d, a, c = regs.R[regs.dest(inst.rd)], regs.R[regs.row(inst.ra)], regs.R[regs.row(inst.rc)]
        b = regs.b32(inst, regs.R, U32)
        return lambda mask: write(d, a * b + (U32(0) - c if negc else c), mask)
    c = lambda: regs.pair(inst.rc)   # noqa: E731
    if w == "WIDE":
        a, b = regs.S[regs.row(inst.ra)], regs.b32(inst, regs.S, I32)
        return lambda mask: regs.write_pair(
            inst.rd, (a.astype(I64) * np.asarray(b).astype(I64)).astype(U64) + (U64(0) - c() if negc else c()),
            mask)
    a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
    return lambda mask: regs.write_pair(inst.rd, a() * b() + (U64(0) - c() if negc else c()), mask)


@binds("IABS")
def iabs(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    if inst.mod("w") == "64":
        b = regs.b64(inst)
        return lambda mask: regs.write_pair(
            inst.rd, np.broadcast_to(np.abs(np.asarray(b()).view(I64)), blocks.lanes).view(U64), mask)
    d, b = regs.S[regs.dest(inst.rd)], regs.b32(inst, regs.S, I32)
    return lambda mask: write(d, np.abs(b), mask)


@binds("IMNMX")
def imnmx(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    fn = np.minimum if inst.mod("op") == "MIN" else np.maximum
    t = inst.mod("t")
    if t in ("S64", "U64"):
        a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
        dt = I64 if t == "S64" else U64
        return lambda mask: regs.write_pair(inst.rd, fn(a().view(dt), np.asarray(b()).view(dt)).view(U64), mask)
    return regs.elementwise(inst, regs.S if t == "S32" else regs.R, fn)


@binds("I2I")
def i2i(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    to, fr = inst.mod("to"), inst.mod("fr")
    if fr == "S64":      # truncate to the low word
        b = regs.b64(inst)
        d = regs.R[regs.dest(inst.rd)]
        return lambda mask: write(d, (np.asarray(b()) & U64(0xFFFFFFFF)).astype(U32), mask)
    x = regs.b32(inst, regs.S, I32) if fr == "S32" else regs.b32(inst, regs.R, U32)
    if to == "S64":      # sign- or zero-extend into a pair
        return lambda mask: regs.write_pair(
            inst.rd, np.broadcast_to(np.asarray(x).astype(I64), (blocks.lanes,)).view(U64), mask)
    d = regs.R[regs.dest(inst.rd)]
    return lambda mask: write(d, np.asarray(x).view(U32), mask)


# -- shifts and logic --------------------------------------------------------------------------
def _shift(blocks: ResidentBlocks, inst: Instruction, fn64, fn32) -> Executor:
    """A shift, 64-bit (fn64 of the pair and the count) or 32-bit (fn32 of the count); counts saturate."""
    regs = blocks.registers
    if inst.mod("w") == "64":
        a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
        return lambda mask: regs.write_pair(inst.rd, fn64(a(), np.minimum(b() & U64(0xFFFFFFFF), U64(64))), mask)
    d, b = regs.R[regs.dest(inst.rd)], regs.b32(inst, regs.R, U32)
    return lambda mask: write(d, fn32(np.minimum(b, U32(32))), mask)


@binds("SHL")
def shl(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    a = regs.R[regs.row(inst.ra)]
    return _shift(blocks, inst, lambda x, s: np.where(s >= 64, U64(0), x << np.minimum(s, U64(63))),
                  lambda s: np.where(s >= 32, U32(0), a << np.minimum(s, U32(31))))


@binds("SHR")
def shr(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    signed = inst.mod("t") == "S32"
    a = regs.S[regs.row(inst.ra)] if signed else regs.R[regs.row(inst.ra)]
    if signed:
        return _shift(blocks, inst, lambda x, s: (x.view(I64) >> np.minimum(s, U64(63)).astype(I64)).view(U64),
                      lambda s: (a >> np.minimum(s, U32(31)).astype(I32)).view(U32))
    return _shift(blocks, inst, lambda x, s: np.where(s >= 64, U64(0), x >> np.minimum(s, U64(63))),
                  lambda s: np.where(s >= 32, U32(0), a >> np.minimum(s, U32(31))))


@binds("LOP")
def lop(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    fn = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}[inst.mod("op")]
    if inst.mod("w") == "64":
        a, b = (lambda: regs.pair(inst.ra)), regs.b64(inst)
        return lambda mask: regs.write_pair(inst.rd, fn(a(), b()), mask)
    return regs.elementwise(inst, regs.R, fn)


# -- predicates --------------------------------------------------------------------------------
def compare(blocks: ResidentBlocks, inst: Instruction, a, b) -> Executor:
    """The executor of pd = (a() cmp b()) bop ps, for the integer and float compares (ISETP, FSETP, DSETP).

    NE is numpy's not_equal, true when either side is NaN; the other comparisons are false then.
    """
    regs = blocks.registers
    cmp = inst.mod("cmp")
    bop = _BOOL_OPS[inst.mod("bop")]
    d = regs.P[inst.pd] if inst.pd != PT else np.zeros(blocks.lanes, bool)
    p, pneg = regs.P[inst.ps], inst.ps_neg
    fn = _COMPARES.get(cmp)
    plain = inst.ps == PT and not pneg and inst.mod("bop") == "AND"     # pd = a cmp b

    def execute(mask: Mask) -> None:
        if cmp in ("F", "T"):
            r = np.full(blocks.lanes, cmp == "T")
        elif plain and mask is None:
            fn(a(), b(), out=d)
            return
        else:
            r = fn(a(), b())
        if not plain:
            r = bop(r, ~p if pneg else p)
        write(d, r, mask)
    return execute


@binds("ISETP")
def isetp(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    t = inst.mod("t")
    if t in ("S64", "U64"):
        dt = I64 if t == "S64" else U64
        b = regs.b64(inst)
        return compare(blocks, inst, lambda: regs.pair(inst.ra).view(dt), lambda: np.asarray(b()).view(dt))
    view = regs.S if t == "S32" else regs.R
    a, b = view[regs.row(inst.ra)], regs.b32(inst, view, view.dtype)
    return compare(blocks, inst, lambda: a, lambda: b)


@binds("PLOP")
def plop(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    fn = _BOOL_OPS[inst.mod("op")]
    d = regs.P[inst.pd] if inst.pd != PT else np.zeros(blocks.lanes, bool)
    a, an, b, bn = regs.P[inst.ps], inst.ps_neg, regs.P[inst.pq], inst.pq_neg
    return lambda mask: write(d, fn(~a if an else a, ~b if bn else b), mask)
