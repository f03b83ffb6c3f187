"""Floating point and conversion: float32, float64, packed halves, transcendentals, format conversions.

What an SM's FMA pipe (float32 and packed float16/bfloat16), its FP64 units and its special
function unit (MUFU: reciprocal, square root, exp2, log2, sine, cosine) do, and the
conversions between integers and every float format. The operations each one counts per lane
are in `launch.FLOPS_PER_LANE`.

FFMA and DFMA round once, as the hardware's fused multiply-add (`numerics.fma`, a ufunc over the host's fused
multiply-add, which the native engine uses too; numpy has none). Simplifications, on purpose: packed-half results
are computed in float64 and rounded once to the format; denormals are kept; MUFU computes
exact results (reciprocal, square root), exp2 and log2 in float64 rounded once to float32 (the
float32 result correctly rounded: numpy's float64 routines and libm's, which the native engine
calls, round alike to float32 for every float32 input; their float32 routines differ in the last
bit), and sine and cosine with numpy's float32 functions, not the unit's approximations. Min and max are IEEE 754-2019
minimumNumber and maximumNumber (`numerics.float_min`), as on NVIDIA and AMD GPUs. Arithmetic
that gives NaN gives the canonical NaN (`numerics.canonical`), as NVIDIA GPUs do.
"""

import numpy as np

from lapis.hardware.numerics import (
    canonical,
    float_max,
    float_min,
    float_to_format,
    fma,
    format_to_float,
    pack_halves,
    split_halves,
)
from lapis.hardware.simt.binders import Executor, Mask, binds
from lapis.hardware.simt.blocks import ResidentBlocks
from lapis.hardware.simt.integer import compare
from lapis.hardware.simt.registers import F32, F64, I32, I64, U32, U64, write
from lapis.isa import Instruction


# -- float32 -----------------------------------------------------------------------------------
@binds("FADD")
def fadd(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return blocks.registers.elementwise(inst, blocks.registers.F, lambda a, b, out=None: _into(canonical(a + b), out))


@binds("FMUL")
def fmul(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return blocks.registers.elementwise(inst, blocks.registers.F, lambda a, b, out=None: _into(canonical(a * b), out))


def _into(values: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is not None:
        out[...] = values
    return values


@binds("FFMA")
def ffma(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    d = regs.F[regs.dest(inst.rd)]
    a, b, c = regs.operands(inst, regs.F, "abc")
    product = np.empty(blocks.lanes, F32)

    def execute(mask: Mask) -> None:
        product[...] = fma(a(), b(), c())
        write(d, canonical(product), mask)
    return execute


@binds("FMNMX")
def fmnmx(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return blocks.registers.elementwise(inst, blocks.registers.F, float_min if inst.mod("op") == "MIN" else float_max)


@binds("FSETP")
def fsetp(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    a, b = blocks.registers.operands(inst, blocks.registers.F, "ab")
    return compare(blocks, inst, a, b)


# -- float64: register pairs -------------------------------------------------------------------
def _f64_operands(blocks: ResidentBlocks, inst: Instruction, names: str) -> list:
    """Readers of float64 register-pair (or constant) sources, modifiers applied."""
    regs = blocks.registers
    readers = []
    for name in names:
        raw = regs.b64(inst) if name == "b" else (lambda r=inst.ra if name == "a" else inst.rc: regs.pair(r))
        fn = regs.modifier(inst, name, F64)
        readers.append(lambda raw=raw, fn=fn: fn(np.asarray(raw()).view(F64)) if fn
                       else np.asarray(raw()).view(F64))
    return readers


@binds("DADD", "DMUL", "DMNMX")
def float64_binary(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    if inst.op == "DMNMX":
        fn = float_min if inst.mod("op") == "MIN" else float_max
    else:
        fn = np.add if inst.op == "DADD" else np.multiply
    a, b = _f64_operands(blocks, inst, "ab")
    if inst.op != "DMNMX":
        arithmetic = fn
        fn = lambda x, y: canonical(arithmetic(x, y))       # noqa: E731
    return lambda mask: blocks.registers.write_pair(inst.rd, np.broadcast_to(fn(a(), b()), blocks.lanes).view(U64),
                                                    mask)


@binds("DFMA")
def dfma(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    a, b, c = _f64_operands(blocks, inst, "abc")
    return lambda mask: blocks.registers.write_pair(
        inst.rd, np.broadcast_to(canonical(fma(a(), b(), c())), blocks.lanes).view(U64), mask)


@binds("DSETP")
def dsetp(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return compare(blocks, inst, *_f64_operands(blocks, inst, "ab"))


# -- conversions -------------------------------------------------------------------------------
def _int_source(blocks: ResidentBlocks, inst: Instruction, fr: str):
    """A reader of operand B as an integer array of type fr (S32, U32 or S64)."""
    regs = blocks.registers
    if fr == "S64":
        b = regs.b64(inst)
        return lambda: np.asarray(b()).view(I64)
    x = regs.b32(inst, regs.S if fr == "S32" else regs.R, I32 if fr == "S32" else U32)
    return lambda: x


def _float_source(blocks: ResidentBlocks, inst: Instruction, fr: str):
    """A reader of operand B, stored in float format fr, as float64."""
    regs = blocks.registers
    if fr == "F64":
        b = regs.b64(inst)
        return lambda: format_to_float(b(), "F64")
    x = regs.b32(inst, regs.R, U32)
    return lambda: format_to_float(x, fr)


def _write_format(blocks: ResidentBlocks, inst: Instruction, to: str, value, mask: Mask) -> None:
    """Write float64 values rounded to format `to` (a pair for F64, a register otherwise)."""
    regs = blocks.registers
    bits = np.broadcast_to(float_to_format(value, to), blocks.lanes)
    if to == "F64":
        regs.write_pair(inst.rd, bits, mask)
    else:
        write(regs.R[regs.dest(inst.rd)], bits, mask)


@binds("I2F")
def i2f(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    to, src = inst.mod("to"), _int_source(blocks, inst, inst.mod("fr"))
    if to == "F32":      # straight from the integer: one rounding, also for 64-bit values
        d = regs.F[regs.dest(inst.rd)]
        return lambda mask: write(d, np.asarray(src()).astype(F32), mask)
    return lambda mask: _write_format(blocks, inst, to, np.asarray(src()).astype(F64), mask)


@binds("F2I")
def f2i(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    to, rnd = inst.mod("to"), inst.mod("rnd")
    src = _float_source(blocks, inst, inst.mod("fr"))
    round_fn = {"TRUNC": np.trunc, "FLOOR": np.floor, "CEIL": np.ceil, "RN": np.rint}[rnd]
    dt = {"S32": I32, "S64": I64, "U32": U32}[to]
    info = np.iinfo(dt)

    def convert():
        x = round_fn(src())
        x = np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min)
        # the clip's bounds are floats: S64's top, 2^63 - 1, rounds up to 2^63, which the cast wraps to -2^63
        top = np.asarray(x >= -float(info.min) if to == "S64" else False)
        return np.broadcast_to(np.where(top, info.max, np.clip(x, info.min, info.max).astype(dt)), blocks.lanes)
    if to == "S64":
        return lambda mask: regs.write_pair(inst.rd, convert().view(U64), mask)
    d = regs.R[regs.dest(inst.rd)]
    return lambda mask: write(d, convert().view(U32), mask)


@binds("F2F")
def f2f(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    to, src = inst.mod("to"), _float_source(blocks, inst, inst.mod("fr"))
    return lambda mask: _write_format(blocks, inst, to, src(), mask)


@binds("FRND")
def frnd(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    fn = {"RN": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc}[inst.mod("rnd")]
    if inst.mod("w") == "F64":
        b = _float_source(blocks, inst, "F64")
        return lambda mask: _write_format(blocks, inst, "F64", fn(b()), mask)
    d, b = regs.F[regs.dest(inst.rd)], regs.b32(inst, regs.F, F32)
    return lambda mask: write(d, fn(b), mask)


# -- packed halves -----------------------------------------------------------------------------
@binds("HADD2", "HMUL2", "HFMA2", "HMNMX2")
def packed_half(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    """Two float16 or bfloat16 lanes per register: fn over float64 halves, rounded once to the format."""
    if inst.op == "HMNMX2":
        fn, sources = float_min if inst.mod("op") == "MIN" else float_max, "ab"
    else:
        fn, sources = {"HADD2": (np.add, "ab"), "HMUL2": (np.multiply, "ab"),
                       "HFMA2": (lambda a, b, c: a * b + c, "abc")}[inst.op]
    t = inst.mod("t")
    regs = blocks.registers
    d = regs.R[regs.dest(inst.rd)]
    rows = {"a": regs.R[regs.row(inst.ra)], "b": regs.b32(inst, regs.R, U32), "c": regs.R[regs.row(inst.rc)]}
    srcs = [(rows[x], U32(0x80008000) if x in inst.neg else U32(0)) for x in sources]   # -x flips both signs

    def execute(mask: Mask) -> None:
        halves = [split_halves(x ^ sign, t) for x, sign in srcs]
        lo = fn(*(h[0] for h in halves))
        hi = fn(*(h[1] for h in halves))
        write(d, pack_halves(lo, hi, t), mask)
    return execute


# -- the special function unit -----------------------------------------------------------------
@binds("MUFU")
def mufu(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    regs = blocks.registers
    fn = {"RCP": lambda x: F32(1) / x, "RSQ": lambda x: F32(1) / np.sqrt(x), "SQRT": np.sqrt,
          "EX2": lambda x: np.exp2(np.asarray(x, np.float64)), "LG2": lambda x: np.log2(np.asarray(x, np.float64)),
          "SIN": np.sin, "COS": np.cos}[inst.mod("fn")]
    d, b = regs.F[regs.dest(inst.rd)], regs.b32(inst, regs.F, F32)
    return lambda mask: write(d, canonical(np.asarray(fn(b), F32)), mask)
