"""Fused runs, the IR: what each operation a fused run can hold computes, written in LLVM IR over a vector of lanes.

`fused.py` decides which runs to compile and compiles them; this module writes them. `emit_run` writes one
function: a loop over the lanes, a vector at a time (`fused_lanes.WIDTH`, or a warp where the run shuffles),
that takes every lane of a vector through every instruction of the run (`Lanes`, in `fused_lanes.py`, holds
the IR values of the rows the run has read or written so far, `Run` what the function computes once).
`EMITTERS` has one emitter per operation, each written to mean exactly what `native_values.py` means: integers
wrap at 32 or 64 bits, float32 and float64 round at every operation and are never contracted into fused
multiply-adds, NaN results are the canonical NaN, min and max are IEEE 754-2019's minimumNumber and
maximumNumber; a load of shared memory reads what `native.memory` reads, a shuffle what `native.shuffle` does.
"""

from collections.abc import Callable

import numpy as np
from llvmlite import ir

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.fused_lanes import F32, F64, I32, I64, Lanes, Run
from lapis.hardware.simt.native import shuffle_source
from lapis.hardware.simt.native_scheduler import FUSED_SIGNATURE
from lapis.hardware.simt.native_values import MASK32
from lapis.hardware.simt.translate import OP

# -- one emitter per operation: (lanes, row, pc), writing the destination ---------------------------------------
# Where each kind of result goes: (lanes, table row, value, active lanes) -> None, and the rows that is, as
# ("R", register row) or ("P", predicate) (`emit_run` finds each row's last write from them).
_PUT = {
    "register": lambda x, t, v, active: x.put_u32(int(t[tr.D]), v, active),          # 32 bits (or a float's)
    "float": lambda x, t, v, active: x.put_float(int(t[tr.D]), v, active),           # a float32 result
    "pair": lambda x, t, v, active: x.put_pair(int(t[tr.D]), int(t[tr.D2]), v, active),
    "predicate": lambda x, t, v, active: x.put_pred(int(t[tr.PD]), v, active),
}
_ROWS = {
    "register": lambda t: [("R", int(t[tr.D]))],
    "float": lambda t: [("R", int(t[tr.D]))],
    "pair": lambda t: [("R", int(t[tr.D])), ("R", int(t[tr.D2]))],
    "predicate": lambda t: [("P", int(t[tr.PD]))],
}


def _writing(result: str) -> Callable:
    """The emitter maker for operations whose `value` (lanes, row, pc) -> IR goes where `_PUT[result]` says;
    an emitter's `writes` (table row -> rows) says which rows that is."""
    def make(value: Callable) -> Callable:
        def emit(x: Lanes, t, pc: int) -> None:
            _PUT[result](x, t, value(x, t, pc), x.active(t))
        emit.writes = _ROWS[result]
        return emit
    return make


_u32, _float, _pair, _predicate = (_writing(result) for result in ("register", "float", "pair", "predicate"))


def _negated(x: Lanes, value, negate):
    return x.b.neg(value) if negate else value


def _iadd(x: Lanes, t, pc):
    flags = t[tr.FLAGS]
    return x.b.add(_negated(x, x.u32(int(t[tr.A])), flags & tr.NEG_A), _negated(x, x.b32(t, pc), flags & tr.NEG_B))


def _imad(x: Lanes, t, pc):
    product = x.b.mul(x.u32(int(t[tr.A])), x.b32(t, pc))
    return x.b.add(product, _negated(x, x.u32(int(t[tr.C])), t[tr.FLAGS] & tr.NEG_C))


def _shift_left(x: Lanes, value, s, bits: int):
    """value << s, 0 from s >= bits (s unsigned)."""
    scalar = I32 if bits == 32 else I64
    shifted = x.b.shl(value, x.b.and_(s, x.const(scalar, bits - 1)))
    return x.choose(x.b.icmp_unsigned(">=", s, x.const(scalar, bits)), x.const(scalar, 0), shifted)


def _shift_right(x: Lanes, value, s, bits: int, arithmetic):
    """value >> s: arithmetic by min(s, bits - 1); logical 0 from s >= bits (s unsigned)."""
    scalar = I32 if bits == 32 else I64
    big = x.b.icmp_unsigned(">=", s, x.const(scalar, bits))
    if arithmetic:
        return x.b.ashr(value, x.choose(big, x.const(scalar, bits - 1), s))
    shifted = x.b.lshr(value, x.b.and_(s, x.const(scalar, bits - 1)))
    return x.choose(big, x.const(scalar, 0), shifted)


def _logic(x: Lanes, t, a, b):
    return (x.b.and_, x.b.or_, x.b.xor)[int(t[tr.M1])](a, b)


def _integer_minmax(x: Lanes, t, a, b, signed):
    less = x.b.icmp_signed("<", a, b) if signed else x.b.icmp_unsigned("<", a, b)
    return x.choose(less, b, a) if t[tr.M1] else x.choose(less, a, b)


def _absolute(x: Lanes, value, scalar):
    return x.choose(x.b.icmp_signed("<", value, x.const(scalar, 0)), x.b.neg(value), value)


def _shift64(x: Lanes, t, pc):
    """SHL64/SHR64's shift: the low word of B."""
    return x.b.and_(x.b64(t, pc), x.const(I64, MASK32))


def _to_float(x: Lanes, t, pc, target: ir.Type):
    """I2F from S32, U32 or S64 (M1 0, 1, 2), rounded once."""
    m1 = t[tr.M1]
    if m1 == 2:
        return x.b.sitofp(x.b64(t, pc), x.type(target))
    b32 = x.b32(t, pc)
    return x.b.sitofp(b32, x.type(target)) if m1 == 0 else x.b.uitofp(b32, x.type(target))


def _fused_multiply_add(x: Lanes, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a * b + c of vectors rounded once: llvm.fma, as the engine's `numerics.fused_multiply_add`."""
    full = f"llvm.fma.v{x.width}{'f32' if a.type.element == F32 else 'f64'}"
    module = x.b.module
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(a.type, [a.type] * 3), full)
    return x.b.call(fn, [a, b, c])


def _ffma(x: Lanes, t, pc):
    z = x.float_of(x.modified(x.bits_of(x.arithmetic(int(t[tr.C])), 32), t[tr.FLAGS] & tr.NEG_C, False, 32), 32)
    return _fused_multiply_add(x, x.fa(t, True), x.fb(t, pc, True), z)


def _dfma(x: Lanes, t, pc):
    z = x.float_of(x.modified(x.pair(int(t[tr.C]), int(t[tr.C2])), t[tr.FLAGS] & tr.NEG_C, False, 64), 64)
    return x.canonical(_fused_multiply_add(x, x.da(t), x.db(t, pc), z), 64)


def _intrinsic(x: Lanes, name: str, value: ir.Value) -> ir.Value:
    """llvm.<name> of a vector of floats (sqrt is the IEEE square root; exp2 and log2 call libm's, as numba's
    math.exp2 and math.log2 in the engine do)."""
    module = x.b.module
    full = f"llvm.{name}.v{x.width}{'f32' if value.type.element == F32 else 'f64'}"
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(value.type, [value.type]), full)
    return x.b.call(fn, [value])


def _mufu(x: Lanes, t, pc):
    """MUFU as the engine computes it (`native_values.v_mufu`): RCP, RSQ and SQRT exactly in float32, EX2 and
    LG2 in float64, rounded once. (SIN and COS, numpy's own, are not translated.)"""
    b, value = x.b, x.fb(t, pc, True)
    one = x.const(F32, 1.0)
    fn = int(t[tr.M1])
    if fn == 0:
        return b.fdiv(one, value)
    if fn == 1:
        return b.fdiv(one, _intrinsic(x, "sqrt", value))
    if fn == 2:
        return _intrinsic(x, "sqrt", value)
    wide = b.fpext(value, x.type(F64))
    return b.fptrunc(_intrinsic(x, "exp2" if fn == 3 else "log2", wide), x.type(F32))


def _f2f(x: Lanes, t, pc):
    """F2F from F64 to F32 (`native_values.v_f2f`: B's raw bits, rounded once to nearest even)."""
    return x.bits_of(x.b.fptrunc(x.float_of(x.b64(t, pc), 64), x.type(F32)), 32)


def _f2f64(x: Lanes, t, pc):
    """F2F to F64 from F32 (M1 0: exact) or F64 (M1 1: the bits), of B's raw bits (`native_values.v_f2f64`). A NaN
    comes out quiet, as the CPU's conversion makes it, in so many words: else LLVM folds an F2F back to F32 that
    follows in the run into nothing, and a signaling NaN would come back signaling where the engine quiets it."""
    if t[tr.M1]:
        return x.b64(t, pc)
    wide = x.b.fpext(x.float_of(x.b32(t, pc), 32), x.type(F64))
    bits = x.bits_of(wide, 64)
    nan = x.b.fcmp_unordered("uno", wide, wide)
    return x.choose(nan, x.b.or_(bits, x.const(I64, 1 << 51)), bits)


def _plop(x: Lanes, t, pc):
    return x.combine(int(t[tr.M1]), x.holds(int(t[tr.PS]), t[tr.PS_NEG]), x.holds(int(t[tr.PQ]), t[tr.PQ_NEG]))


def _loaded_rows(t) -> list[int]:
    """The register rows an LDS of whole words writes, a word each, in order (`native.transfer`'s)."""
    return [int(t[column]) for column in (tr.D, tr.D2, tr.C, tr.C2)[:int(t[tr.WIDTH]) // 4]]


def _load_shared(x: Lanes, t, pc) -> None:
    """LDS of 4, 8 or 16 bytes: each lane's words from its block's shared memory, at the lane's first word plus
    (address register + offset) / 4, as `native.memory` finds them. The engine checked the addresses and
    counted the access before the run (`native_scheduler.check_loads`)."""
    b = x.b
    where = b.add(x.u32(int(t[tr.A])), x.const(I32, int(t[tr.SIMM])))
    base = b.trunc(b.load(x.address("shared base", 0, I64), align=8), x.type(I32))
    first = b.add(base, b.lshr(where, x.const(I32, 2)))
    active = x.active(t)
    rows = _loaded_rows(t)
    for row, value in zip(rows, x.load_shared(first, len(rows)), strict=True):
        x.put_u32(row, value, active)


_load_shared.writes = lambda t: [("R", row) for row in _loaded_rows(t)]


def _shuffle(x: Lanes, t, pc):
    """SHFL, the vector a whole warp (`native.shuffle`): each lane reads another lane's value of A; a source
    outside the warp gives the lane its own. By an immediate every lane's source is a constant: one vector
    shuffle. By a register (or a constant) each lane computes its source, and reads the warp's values
    through the stack."""
    mode, lanes, b = int(t[tr.M1]), x.width, x.b
    value = x.u32(int(t[tr.A]))
    if t[tr.BMODE] == tr.B_IMM:
        sources = [shuffle_source(mode, lane, int(t[tr.BVAL]) & MASK32, lanes) for lane in range(lanes)]
        picks = [source if 0 <= source < lanes else lane for lane, source in enumerate(sources)]
        return b.shuffle_vector(value, ir.Constant(value.type, ir.Undefined), ir.Constant(x.type(I32), picks))
    lane = ir.Constant(x.type(I64), list(range(lanes)))
    operand = b.zext(x.b32(t, pc), x.type(I64))
    source = (b.and_(operand, x.const(I64, lanes - 1)), b.sub(lane, operand), b.add(lane, operand),
              b.xor(lane, operand))[mode]
    inside = b.icmp_unsigned("<", source, x.const(I64, lanes))          # a negative source is a large one
    return x.permute(value, b.select(inside, source, lane))


EMITTERS: dict[int, Callable[[Lanes, np.ndarray, int], None]] = {OP[name]: emit for name, emit in {
    # 32-bit integers
    "MOV": _u32(lambda x, t, pc: x.b32(t, pc)),
    "LDC": _u32(lambda x, t, pc: x.b32(t, pc)),
    "I2I": _u32(lambda x, t, pc: x.b32(t, pc)),                  # to 32 bits: the low word, whatever the source
    "SEL": _u32(lambda x, t, pc: x.choose(x.holds(int(t[tr.PS]), t[tr.PS_NEG]), x.u32(int(t[tr.A])), x.b32(t, pc))),
    "IADD": _u32(_iadd),
    "IMUL": _u32(lambda x, t, pc: x.b.mul(x.u32(int(t[tr.A])), x.b32(t, pc))),
    "IMAD": _u32(_imad),
    "SHL": _u32(lambda x, t, pc: _shift_left(x, x.u32(int(t[tr.A])), x.b32(t, pc), 32)),
    "SHR": _u32(lambda x, t, pc: _shift_right(x, x.u32(int(t[tr.A])), x.b32(t, pc), 32, t[tr.M1])),
    "LOP": _u32(lambda x, t, pc: _logic(x, t, x.u32(int(t[tr.A])), x.b32(t, pc))),
    "IMNMX": _u32(lambda x, t, pc: _integer_minmax(x, t, x.u32(int(t[tr.A])), x.b32(t, pc), t[tr.M2])),
    "IABS": _u32(lambda x, t, pc: _absolute(x, x.b32(t, pc), I32)),
    # float32
    "FADD": _float(lambda x, t, pc: x.b.fadd(x.fa(t, True), x.fb(t, pc, True))),
    "FMUL": _float(lambda x, t, pc: x.b.fmul(x.fa(t, True), x.fb(t, pc, True))),
    "FFMA": _float(_ffma),
    "FMNMX": _u32(lambda x, t, pc: x.bits_of(x.minmax(x.fa(t), x.fb(t, pc), t[tr.M1], 32), 32)),
    "I2F": _u32(lambda x, t, pc: x.bits_of(_to_float(x, t, pc, F32), 32)),
    "MUFU": _float(_mufu),
    # 64-bit results
    "LDC64": _pair(lambda x, t, pc: x.b64(t, pc)),
    "IADD64": _pair(lambda x, t, pc: x.b.add(_negated(x, x.a64(t), t[tr.FLAGS] & tr.NEG_A),
                                             _negated(x, x.b64(t, pc), t[tr.FLAGS] & tr.NEG_B))),
    "IMUL64": _pair(lambda x, t, pc: x.b.mul(x.a64(t), x.b64(t, pc))),
    "IMADWIDE": _pair(lambda x, t, pc: x.b.add(x.b.mul(x.s64(x.u32(int(t[tr.A]))), x.s64(x.b32(t, pc))), x.c64(t))),
    "IMAD64": _pair(lambda x, t, pc: x.b.add(x.b.mul(x.a64(t), x.b64(t, pc)), x.c64(t))),
    "SHL64": _pair(lambda x, t, pc: _shift_left(x, x.a64(t), _shift64(x, t, pc), 64)),
    "SHR64": _pair(lambda x, t, pc: _shift_right(x, x.a64(t), _shift64(x, t, pc), 64, t[tr.M1])),
    "LOP64": _pair(lambda x, t, pc: _logic(x, t, x.a64(t), x.b64(t, pc))),
    "IMNMX64": _pair(lambda x, t, pc: _integer_minmax(x, t, x.a64(t), x.b64(t, pc), t[tr.M2])),
    "IABS64": _pair(lambda x, t, pc: _absolute(x, x.b64(t, pc), I64)),
    "I2I64": _pair(lambda x, t, pc: (x.s64 if t[tr.M1] == 1 else x.u64)(x.b32(t, pc))),
    "DADD": _pair(lambda x, t, pc: x.canonical(x.b.fadd(x.da(t), x.db(t, pc)), 64)),
    "DMUL": _pair(lambda x, t, pc: x.canonical(x.b.fmul(x.da(t), x.db(t, pc)), 64)),
    "DFMA": _pair(_dfma),
    "DMNMX": _pair(lambda x, t, pc: x.bits_of(x.minmax(x.da(t), x.db(t, pc), t[tr.M1], 64), 64)),
    "I2F64": _pair(lambda x, t, pc: x.bits_of(_to_float(x, t, pc, F64), 64)),
    # conversions between float32 and float64 (a float32 division's refinement in float64 is four and one)
    "F2F": _u32(_f2f),
    "F2F64": _pair(_f2f64),
    # predicates
    "ISETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.u32(int(t[tr.A])), x.b32(t, pc),
                                                                False, bool(t[tr.M2])))),
    "ISETP64": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.a64(t), x.b64(t, pc), False,
                                                                  bool(t[tr.M2])))),
    "FSETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.fa(t, True), x.fb(t, pc, True),
                                                                True))),
    "DSETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.da(t), x.db(t, pc), True))),
    "PLOP": _predicate(_plop),
    # loads of shared memory the engine has checked
    "LDS": _load_shared,
    # shuffles, in whole warps
    "SHFL": _u32(_shuffle),
}.items()}


# The forms of an operation its emitter takes, where it does not take them all: F2F from F64 to F32 only (not
# from or to a half, nor F32 to F32, whose NaNs the engine's LLVM and numpy treat apart).
TAKES: dict[int, Callable[[np.ndarray], bool]] = {
    OP["F2F"]: lambda t: t[tr.M1] == 1 and t[tr.M2] == 0 and t[tr.M3] == 0,
}


def emits(t: np.ndarray) -> bool:
    """Whether a fused run can hold the instruction in table row t."""
    kind = int(t[tr.KIND])
    return kind in EMITTERS and TAKES.get(kind, lambda _: True)(t)


def steps_of(table: np.ndarray, pcs: list[int]) -> tuple[list, dict]:
    """The instructions at `pcs` that emit code, as (place, row, pc), and the place of the last write to each
    register and predicate row."""
    steps = [(k, table[pc], pc) for k, pc in enumerate(pcs) if int(table[pc, tr.KIND]) in EMITTERS]
    last_writes = {}
    for k, t, _ in steps:
        last_writes.update({written: k for written in EMITTERS[int(t[tr.KIND])].writes(t)})
    return steps, last_writes


def function(module: ir.Module, name: str, signature: ir.FunctionType, stride: int, width: int):
    """A fused function's declaration, its entry block and `Run` (vectors of `width` lanes), and the lanes
    rounded up to whole vectors."""
    fn = ir.Function(module, signature, name)
    for arg in (fn.args[i] for i in (0, 1, 2, 5, 7, 8)):
        arg.add_attribute("noalias")     # registers, predicates, group, constants, shared memory, its bases
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    run = Run(fn, entry, stride, width)
    padded = entry.and_(entry.add(run.lanes, ir.Constant(I64, width - 1)), ir.Constant(I64, -width))
    return fn, entry, run, padded


def emit_run(module: ir.Module, name: str, table: np.ndarray, pcs: list[int], stride: int, width: int) -> None:
    """One function running the instructions at `pcs` (a run, or a run, an unconditional branch and the run at
    its target: the branch emits nothing) over the lanes, `width` at a time: over every lane when the group is
    full, else under the group's mask. The lanes past the last whole vector are computed too, into the rows'
    padding (`registers.padded_lanes`), where no one reads them. The register file's rows are `stride` lanes
    long."""
    fn, entry, run, padded = function(module, name, FUSED_SIGNATURE, stride, width)
    steps, last_writes = steps_of(table, pcs)
    done = fn.append_basic_block("done")
    ir.IRBuilder(done).ret_void()
    starts = []
    for masked in (False, True):
        head, body = fn.append_basic_block("head"), fn.append_basic_block("body")
        b = ir.IRBuilder(head)
        lane = b.phi(I64)
        b.cbranch(b.icmp_signed("<", lane, padded), body, done)
        b = ir.IRBuilder(body)
        x = Lanes(b, run, lane, last_writes)
        if masked:
            x.load_mask()
        for k, t, pc in steps:
            x.step = k
            EMITTERS[int(t[tr.KIND])](x, t, pc)
        lane.add_incoming(ir.Constant(I64, 0), entry.block)
        lane.add_incoming(b.add(lane, ir.Constant(I64, width)), b.block)
        b.branch(head)
        starts.append(head)
    entry.cbranch(entry.icmp_signed("!=", run.full, ir.Constant(I64, 0)), *starts)
