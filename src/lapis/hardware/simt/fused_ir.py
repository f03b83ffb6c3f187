"""Fused runs, the IR: what each operation a fused run can hold computes, written in LLVM IR over a vector of lanes.

`fused.py` decides which runs to compile and compiles them; this module writes them. `emit_run` writes one
function: a loop over the lanes, `WIDTH` at a time, that takes every lane of a vector through every
instruction of the run (`Lanes` holds the IR values of the rows the run has read or written so far, `Run`
what the function computes once). `EMITTERS` has one emitter per operation, each written to mean exactly
what `native_values.py` means: integers wrap at 32 or 64 bits, float32 and float64 round at every operation
and are never contracted into fused multiply-adds, NaN results are the canonical NaN, min and max are
IEEE 754-2019's minimumNumber and maximumNumber.
"""

from collections.abc import Callable

import numpy as np
from llvmlite import ir

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.native_scheduler import FUSED_SIGNATURE
from lapis.hardware.simt.native_values import MASK32
from lapis.hardware.simt.registers import ROW_ALIGNMENT
from lapis.hardware.simt.translate import OP
from lapis.isa import PT  # the predicate that is always true (its row stays true; writes to it are dropped)

WIDTH = ROW_ALIGNMENT         # lanes per vector: one AVX-512 register of float32; LLVM splits it where narrower

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()


def splat(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A scalar in every lane of a vector."""
    one = b.insert_element(ir.Constant(ir.VectorType(value.type, 1), ir.Undefined), value, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(ir.VectorType(value.type, 1), ir.Undefined),
                            ir.Constant(ir.VectorType(I32, WIDTH), [0] * WIDTH))


class Run:
    """What the two loops of a fused function share: its arguments, the register file's row length, and what
    is computed once in its entry block: operand B of each instruction whose B is an immediate or a constant
    (`native.instruction`'s b32 and b64: a constant word past the bank reads 0), in every lane."""

    def __init__(self, fn: ir.Function, entry: ir.IRBuilder, stride: int):
        self.entry, self.stride = entry, stride
        self.regs, self.preds, self.group, self.full, self.lanes, self.cbank, self.cbank_words = fn.args[:7]
        self.uniforms: dict[int, tuple[ir.Value, ir.Value]] = {}

    def operand_b(self, t, pc: int) -> tuple[ir.Value, ir.Value]:
        """Operand B of the instruction at pc (table row t), not a register: (32 bits, 64 bits) in every lane."""
        if pc not in self.uniforms:
            b = self.entry
            bval = int(t[tr.BVAL])
            if t[tr.BMODE] == tr.B_IMM:
                lo, wide = ir.Constant(I32, _signed32(bval)), ir.Constant(I64, bval)
            else:
                words = []
                for index in (bval // 4, bval // 4 + 1):
                    inside = b.icmp_signed("<", ir.Constant(I64, index), self.cbank_words)
                    slot = b.select(inside, ir.Constant(I64, index), ir.Constant(I64, 0))
                    words.append(b.select(inside, b.load(b.gep(self.cbank, [slot]), align=4), ir.Constant(I32, 0)))
                lo = words[0]
                wide = b.or_(b.zext(lo, I64), b.shl(b.zext(words[1], I64), ir.Constant(I64, 32)))
            self.uniforms[pc] = (self.splat(lo), self.splat(wide))
        return self.uniforms[pc]

    def splat(self, value: ir.Value) -> ir.Value:
        return splat(self.entry, value)


class Lanes:
    """The IR for one instruction run over WIDTH lanes from lane `l` (an i64), with the running group's
    lanes in `mask` (an i1 per lane, or None when all run). Rows are read at their first use and kept
    as values, and stored after the run's last write to them."""

    def __init__(self, builder: ir.IRBuilder, run: Run, l: ir.Value, last_writes: dict[tuple[str, int], int]):
        self.b, self.run, self.l = builder, run, l
        self.mask = None
        self.rows: dict[int, ir.Value] = {}
        self.raw: dict[int, ir.Value] = {}   # row -> a float32 result not yet canonicalized (`put_float`)
        self.pred_rows: dict[int, ir.Value] = {}
        self.last_writes = last_writes       # ("R" or "P", row) -> the step that writes it last in the run
        self.step = -1                       # the step being emitted (its place in the run)

    # -- types and constants -----------------------------------------------------------------------------
    def type(self, scalar: ir.Type) -> ir.Type:
        return ir.VectorType(scalar, WIDTH)

    def const(self, scalar: ir.Type, value) -> ir.Value:
        if isinstance(scalar, ir.IntType) and scalar.width > 1:      # IR integers are written signed
            value &= (1 << scalar.width) - 1
            value -= (value >> (scalar.width - 1)) << scalar.width
        return ir.Constant(self.type(scalar), [value] * WIDTH)

    def splat(self, value: ir.Value) -> ir.Value:
        return splat(self.b, value)

    # -- rows -----------------------------------------------------------------------------------------------
    def address(self, which: str, row: int, scalar: ir.Type):
        """These lanes of a row of the registers ("R", i32), the predicates ("P", i8) or the group ("group", row
        0), as a pointer to a vector. Rows lie `stride` elements apart, a constant: each address is then the
        lane's plus a displacement, with no base pointer per row to hold in a register."""
        base = {"R": self.run.regs, "P": self.run.preds, "group": self.run.group}[which]
        offset = self.b.add(self.l, ir.Constant(I64, row * self.run.stride))
        return self.b.bitcast(self.b.gep(base, [offset]), self.type(scalar).as_pointer())

    def read_row(self, which: str, row: int) -> ir.Value:
        """Register row `row` ("R", as i32) or predicate `row` ("P", as i1) in these lanes, from memory."""
        if which == "R":
            return self.b.load(self.address("R", row, I32), align=4)
        return self.b.icmp_unsigned("!=", self.b.load(self.address("P", row, I8), align=1), self.const(I8, 0))

    def write_row(self, which: str, row: int, value: ir.Value) -> None:
        """`read_row`'s converse: the row's value in these lanes, to memory."""
        if which == "R":
            self.b.store(value, self.address("R", row, I32), align=4)
        else:
            self.b.store(self.b.zext(value, self.type(I8)), self.address("P", row, I8), align=1)

    def u32(self, row: int) -> ir.Value:
        """Register row `row` in these lanes, as i32."""
        if row not in self.rows:
            if row in self.raw:
                self.rows[row] = self.canonical(self.raw[row], 32)
            else:
                self.rows[row] = self.read_row("R", row)
        return self.rows[row]

    def arithmetic(self, row: int) -> ir.Value:
        """Register row `row` as float32 for a float operation whose result is canonicalized or compared: a
        NaN's payload cannot show there, so a raw result serves."""
        return self.raw[row] if row in self.raw else self.float_of(self.u32(row), 32)

    def pred(self, p: int) -> ir.Value:
        """Predicate p in these lanes, as i1."""
        if p == PT:
            return self.const(I1, 1)
        if p not in self.pred_rows:
            self.pred_rows[p] = self.read_row("P", p)
        return self.pred_rows[p]

    def load_mask(self) -> None:
        """Run under the group's mask (a byte per lane)."""
        octets = self.b.load(self.address("group", 0, I8), align=1)
        self.mask = self.b.icmp_unsigned("!=", octets, self.const(I8, 0))

    def put_u32(self, row: int, value: ir.Value, active) -> None:
        """Row = value in the active lanes; stored at once if no later instruction of the run writes the row
        (a value held to the end of a 32-FFMA run would outgrow the vector registers)."""
        self.rows[row] = value if active is None else self.b.select(active, value, self.u32(row))
        self.raw.pop(row, None)
        if self.last_writes["R", row] == self.step:
            self.write_row("R", row, self.rows[row])

    def put_float(self, row: int, value: ir.Value, active) -> None:
        """Row = a float32 arithmetic result, which the engine canonicalizes (`native_values.canonical32`).
        Written by every lane and read before the run stores it only by float operations, it need not be:
        FFMA R1, R1, ... twice in a run canonicalizes once."""
        if active is not None or self.last_writes["R", row] == self.step:
            self.put_u32(row, self.canonical(value, 32), active)
            return
        self.rows.pop(row, None)
        self.raw[row] = value

    def put_pair(self, lo: int, hi: int, value: ir.Value, active) -> None:
        """The pair (lo, hi) = the i64 value, low word first (as `native_values.put_pair`)."""
        self.put_u32(lo, self.b.trunc(value, self.type(I32)), active)
        self.put_u32(hi, self.b.trunc(self.b.lshr(value, self.const(I64, 32)), self.type(I32)), active)

    def put_pred(self, p: int, value: ir.Value, active) -> None:
        if p == PT:
            return
        self.pred_rows[p] = value if active is None else self.b.select(active, value, self.pred(p))
        if self.last_writes["P", p] == self.step:
            self.write_row("P", p, self.pred_rows[p])

    # -- operands, as `native_values` reads them -------------------------------------------------------------
    def active(self, t) -> ir.Value | None:
        """The lanes instruction t writes: the group's, less those its guard stops (None: every lane)."""
        g, gneg = int(t[tr.GUARD]), bool(t[tr.GUARD_NEG])
        if g == PT and not gneg:
            return self.mask
        guard = self.holds(g, gneg)
        return guard if self.mask is None else self.b.and_(guard, self.mask)

    def holds(self, p: int, negated) -> ir.Value:
        """Predicate p != negated."""
        value = self.pred(p)
        return self.b.xor(value, self.const(I1, 1)) if negated else value

    def pair(self, lo: int, hi: int) -> ir.Value:
        wide = self.type(I64)
        return self.b.or_(self.b.zext(self.u32(lo), wide), self.b.shl(self.b.zext(self.u32(hi), wide),
                                                                         self.const(I64, 32)))

    def b32(self, t, pc: int) -> ir.Value:
        """Operand B's 32 bits (`native_values._b`)."""
        if t[tr.BMODE] == tr.B_REG:
            return self.u32(int(t[tr.B]))
        return self.run.operand_b(t, pc)[0]

    def b64(self, t, pc: int) -> ir.Value:
        """Operand B's 64 bits (`native_values._b64`)."""
        if t[tr.BMODE] == tr.B_REG:
            return self.pair(int(t[tr.B]), int(t[tr.B2]))
        return self.run.operand_b(t, pc)[1]

    def a64(self, t) -> ir.Value:
        return self.pair(int(t[tr.A]), int(t[tr.A2]))

    def c64(self, t) -> ir.Value:
        z = self.pair(int(t[tr.C]), int(t[tr.C2]))
        return self.b.neg(z) if t[tr.FLAGS] & tr.NEG_C else z

    def s64(self, x32: ir.Value) -> ir.Value:
        return self.b.sext(x32, self.type(I64))

    def u64(self, x32: ir.Value) -> ir.Value:
        return self.b.zext(x32, self.type(I64))

    def modified(self, bits: ir.Value, negate, absolute, width: int) -> ir.Value:
        """A float's |x| and -x (the absolute value first), on its bits: what fabs and fneg do."""
        sign = 1 << (width - 1)
        scalar = I32 if width == 32 else I64
        if absolute:
            bits = self.b.and_(bits, self.const(scalar, sign - 1))
        if negate:
            bits = self.b.xor(bits, self.const(scalar, sign))
        return bits

    def float_of(self, bits: ir.Value, width: int) -> ir.Value:
        return self.b.bitcast(bits, self.type(F32 if width == 32 else F64))

    def bits_of(self, value: ir.Value, width: int) -> ir.Value:
        return self.b.bitcast(value, self.type(I32 if width == 32 else I64))

    def fa(self, t, arithmetic: bool = False) -> ir.Value:
        """Operand A as float32 with its modifiers; `arithmetic`: for an operation that cannot show a NaN's
        payload (see `arithmetic`)."""
        flags = t[tr.FLAGS]
        a = int(t[tr.A])
        bits = self.bits_of(self.arithmetic(a), 32) if arithmetic else self.u32(a)
        return self.float_of(self.modified(bits, flags & tr.NEG_A, flags & tr.ABS_A, 32), 32)

    def fb(self, t, pc: int, arithmetic: bool = False) -> ir.Value:
        flags = t[tr.FLAGS]
        if arithmetic and t[tr.BMODE] == tr.B_REG:
            bits = self.bits_of(self.arithmetic(int(t[tr.B])), 32)
        else:
            bits = self.b32(t, pc)
        return self.float_of(self.modified(bits, flags & tr.NEG_B, flags & tr.ABS_B, 32), 32)

    def da(self, t) -> ir.Value:
        flags = t[tr.FLAGS]
        return self.float_of(self.modified(self.a64(t), flags & tr.NEG_A, flags & tr.ABS_A, 64), 64)

    def db(self, t, pc: int) -> ir.Value:
        flags = t[tr.FLAGS]
        return self.float_of(self.modified(self.b64(t, pc), flags & tr.NEG_B, flags & tr.ABS_B, 64), 64)

    # -- values ----------------------------------------------------------------------------------------------
    def canonical(self, value: ir.Value, width: int) -> ir.Value:
        """The bits of value, or of the canonical NaN (all ones but the sign) when it is NaN."""
        scalar = I32 if width == 32 else I64
        nan = self.b.fcmp_unordered("uno", value, value)
        return self.b.select(nan, self.const(scalar, (1 << (width - 1)) - 1), self.bits_of(value, width))

    def choose(self, condition, x, y) -> ir.Value:
        return self.b.select(condition, x, y)

    def minmax(self, x, y, maximum, width: int) -> ir.Value:
        """`native_values.fmax_` / `fmin_`: x if (x beats y, or y is NaN, or they tie and x's sign says so) else y."""
        b = self.b
        sign = b.icmp_signed("<", self.bits_of(x, width), self.const(I32 if width == 32 else I64, 0))
        beats = b.fcmp_ordered(">" if maximum else "<", x, y)
        tie = b.and_(b.fcmp_ordered("==", x, y), b.xor(sign, self.const(I1, 1)) if maximum else sign)
        return self.choose(b.or_(b.or_(beats, b.fcmp_unordered("!=", y, y)), tie), x, y)

    def compare(self, cmp: int, x, y, floating: bool, signed: bool = True) -> ir.Value:
        """CMP's order F LT EQ LE GT NE GE T as a mask of LT, EQ and GT (`native_values.compare`)."""
        b = self.b
        result = self.const(I1, 0)
        for bit, op in ((1, "<"), (2, "=="), (4, ">")):
            if cmp & bit:
                if floating:
                    term = b.fcmp_ordered(op, x, y)
                elif signed:
                    term = b.icmp_signed(op, x, y)
                else:
                    term = b.icmp_unsigned(op, x, y)
                result = b.or_(result, term)
        if floating and cmp in (5, 7):
            result = b.or_(result, b.or_(b.fcmp_unordered("uno", x, x), b.fcmp_unordered("uno", y, y)))
        return result

    def combine(self, bop: int, r, p) -> ir.Value:
        """AND, OR or XOR of two predicates."""
        return (self.b.and_, self.b.or_, self.b.xor)[bop](r, p)

    def with_ps(self, t, r) -> ir.Value:
        return self.combine(int(t[tr.M3]), r, self.holds(int(t[tr.PS]), t[tr.PS_NEG]))


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


def _ffma(x: Lanes, t, pc):
    z = x.float_of(x.modified(x.bits_of(x.arithmetic(int(t[tr.C])), 32), t[tr.FLAGS] & tr.NEG_C, False, 32), 32)
    return x.b.fadd(x.b.fmul(x.fa(t, True), x.fb(t, pc, True)), z)


def _dfma(x: Lanes, t, pc):
    z = x.float_of(x.modified(x.pair(int(t[tr.C]), int(t[tr.C2])), t[tr.FLAGS] & tr.NEG_C, False, 64), 64)
    return x.canonical(x.b.fadd(x.b.fmul(x.da(t), x.db(t, pc)), z), 64)


def _plop(x: Lanes, t, pc):
    return x.combine(int(t[tr.M1]), x.holds(int(t[tr.PS]), t[tr.PS_NEG]), x.holds(int(t[tr.PQ]), t[tr.PQ_NEG]))


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
    # predicates
    "ISETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.u32(int(t[tr.A])), x.b32(t, pc),
                                                                False, bool(t[tr.M2])))),
    "ISETP64": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.a64(t), x.b64(t, pc), False,
                                                                  bool(t[tr.M2])))),
    "FSETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.fa(t, True), x.fb(t, pc, True),
                                                                True))),
    "DSETP": _predicate(lambda x, t, pc: x.with_ps(t, x.compare(int(t[tr.M1]), x.da(t), x.db(t, pc), True))),
    "PLOP": _predicate(_plop),
}.items()}


def _signed32(value: int) -> int:
    value &= MASK32
    return value - (1 << 32) if value >> 31 else value


def steps_of(table: np.ndarray, pcs: list[int]) -> tuple[list, dict]:
    """The instructions at `pcs` that emit code, as (place, row, pc), and the place of the last write to each
    register and predicate row."""
    steps = [(k, table[pc], pc) for k, pc in enumerate(pcs) if int(table[pc, tr.KIND]) in EMITTERS]
    last_writes = {}
    for k, t, _ in steps:
        last_writes.update({written: k for written in EMITTERS[int(t[tr.KIND])].writes(t)})
    return steps, last_writes


def function(module: ir.Module, name: str, signature: ir.FunctionType, stride: int):
    """A fused function's declaration, its entry block and `Run`, and the lanes rounded up to whole vectors."""
    fn = ir.Function(module, signature, name)
    for arg in fn.args[0], fn.args[1], fn.args[2], fn.args[5]:
        arg.add_attribute("noalias")                 # registers, predicates, group, constants: four arrays
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    run = Run(fn, entry, stride)
    padded = entry.and_(entry.add(run.lanes, ir.Constant(I64, WIDTH - 1)), ir.Constant(I64, -WIDTH))
    return fn, entry, run, padded


def emit_run(module: ir.Module, name: str, table: np.ndarray, pcs: list[int], stride: int) -> None:
    """One function running the instructions at `pcs` (a run, or a run, an unconditional branch and the run at
    its target: the branch emits nothing) over the lanes, WIDTH at a time: over every lane when the group is
    full, else under the group's mask. The lanes past the last whole vector are computed too, into the rows'
    padding (`registers.padded_lanes`), where no one reads them. The register file's rows are `stride` lanes
    long."""
    fn, entry, run, padded = function(module, name, FUSED_SIGNATURE, stride)
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
        lane.add_incoming(b.add(lane, ir.Constant(I64, WIDTH)), b.block)
        b.branch(head)
        starts.append(head)
    entry.cbranch(entry.icmp_signed("!=", run.full, ir.Constant(I64, 0)), *starts)
