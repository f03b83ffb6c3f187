"""Fused runs, the lanes: what a fused function's IR works on, a vector of lanes at a time (`WIDTH`, or a warp).

`Run` holds the function's arguments and what it computes once (operands that are the same in every lane);
`Lanes` holds, for one vector of lanes, the IR values of the register and predicate rows the run has read or
written so far: each row is read from the register file at its first use and stored after the run's last
write to it. It also reads shared memory for the run's loads (`load_shared`): a broadcast or consecutive
words as whole vectors, anything else with the CPU's gather instruction. The emitters of `fused_ir.py`
write each operation's IR with them.
"""

from llvmlite import ir

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.native_values import MASK32
from lapis.hardware.simt.registers import ROW_ALIGNMENT
from lapis.isa import PT  # the predicate that is always true (its row stays true; writes to it are dropped)

WIDTH = ROW_ALIGNMENT         # lanes per vector: one AVX-512 register of float32; LLVM splits it where narrower
# A run that shuffles takes a whole warp per vector instead (32 or 64 lanes: two or four AVX-512 registers).

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()


def splat(b: ir.IRBuilder, value: ir.Value, width: int) -> ir.Value:
    """A scalar in every lane of a vector of `width` lanes."""
    one = b.insert_element(ir.Constant(ir.VectorType(value.type, 1), ir.Undefined), value, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(ir.VectorType(value.type, 1), ir.Undefined),
                            ir.Constant(ir.VectorType(I32, width), [0] * width))


class Run:
    """What the two loops of a fused function share: its arguments (`FUSED_SIGNATURE`: the register file,
    predicates, group, constant bank, the batch's shared memory and each lane's first word of it), the register
    file's row length, the lanes per vector (`width`), and what is computed once in its entry block: operand B
    of each instruction whose B is an immediate or a constant (`native.instruction`'s b32 and b64: a constant
    word past the bank reads 0), and the words of shared memory, in every lane."""

    def __init__(self, fn: ir.Function, entry: ir.IRBuilder, stride: int, width: int = WIDTH):
        self.entry, self.stride, self.width = entry, stride, width
        self.regs, self.preds, self.group, self.full, self.lanes, self.cbank, self.cbank_words = fn.args[:7]
        self.shared, self.shared_base, self.shared_size = fn.args[7:10]          # shared memory's words: i64
        self.shared_words = self.splat(entry.trunc(self.shared_size, I32))
        self.uniforms: dict[int, tuple[ir.Value, ir.Value]] = {}
        self.slots: ir.Value | None = None

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
        return splat(self.entry, value, self.width)

    def stack(self, words: int) -> ir.Value:
        """A place of `words` i32 on the stack, made once in the entry block (a shuffle's copy of a warp)."""
        if self.slots is None:
            self.slots = self.entry.alloca(ir.ArrayType(I32, words))
        return self.slots


class Lanes:
    """The IR for one instruction run over a vector of lanes (`Run.width` of them) from lane `l` (an i64), with
    the running group's lanes in `mask` (an i1 per lane, or None when all run). Rows are read at their first use
    and kept as values, and stored after the run's last write to them."""

    def __init__(self, builder: ir.IRBuilder, run: Run, l: ir.Value, last_writes: dict[tuple[str, int], int]):
        self.b, self.run, self.l = builder, run, l
        self.mask = None
        self.rows: dict[int, ir.Value] = {}
        self.raw: dict[int, ir.Value] = {}   # row -> a float32 result not yet canonicalized (`put_float`)
        self.pred_rows: dict[int, ir.Value] = {}
        self.last_writes = last_writes       # ("R" or "P", row) -> the step that writes it last in the run
        self.step = -1                       # the step being emitted (its place in the run)
        self.width = run.width

    # -- types and constants -----------------------------------------------------------------------------
    def type(self, scalar: ir.Type) -> ir.Type:
        return ir.VectorType(scalar, self.width)

    def const(self, scalar: ir.Type, value) -> ir.Value:
        if isinstance(scalar, ir.IntType) and scalar.width > 1:      # IR integers are written signed
            value &= (1 << scalar.width) - 1
            value -= (value >> (scalar.width - 1)) << scalar.width
        return ir.Constant(self.type(scalar), [value] * self.width)

    def splat(self, value: ir.Value) -> ir.Value:
        return splat(self.b, value, self.width)

    # -- rows -----------------------------------------------------------------------------------------------
    def address(self, which: str, row: int, scalar: ir.Type):
        """These lanes of a row of the registers ("R", i32), the predicates ("P", i8), the group ("group", row
        0) or each lane's first word of its block's shared memory ("shared base", row 0, i64), as a pointer to a
        vector. Rows lie `stride` elements apart, a constant: each address is then the lane's plus a
        displacement, with no base pointer per row to hold in a register."""
        base = {"R": self.run.regs, "P": self.run.preds, "group": self.run.group,
                "shared base": self.run.shared_base}[which]
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

    def load_shared(self, first: ir.Value, words: int) -> list[ir.Value]:
        """Shared-memory words first + i, for i < `words`, in each lane (first: an i32 per lane), as the rows of
        an LDS of 4, 8 or 16 bytes. Where every lane reads the same words (a broadcast) they are loaded once;
        where lane l reads words first[0] + l * words onward (consecutive lanes, consecutive words) they are
        loaded as whole vectors and unzipped; else each word is gathered. Words outside the batch's shared
        memory (a padding lane's, an inactive lane's) are never read: the engine has checked the lanes that load."""
        b = self.b
        lane0 = b.extract_element(first, ir.Constant(I32, 0))
        step = ir.Constant(self.type(I32), [lane * words for lane in range(self.width)])
        uniform = b.and_(self.every(b.icmp_unsigned("==", first, self.splat(lane0))), self.inside(lane0, words))
        consecutive = b.and_(self.every(b.icmp_unsigned("==", first, b.add(self.splat(lane0), step))),
                             self.inside(lane0, words * self.width))
        fn = b.function
        ways = [(fn.append_basic_block(name), load) for name, load in (
            ("broadcast", self._broadcast), ("consecutive", self._consecutive), ("gathered", self._gathered))]
        check, join = fn.append_basic_block("consecutive?"), fn.append_basic_block("loaded")
        b.cbranch(uniform, ways[0][0], check)
        ir.IRBuilder(check).cbranch(consecutive, ways[1][0], ways[2][0])
        loaded = []                          # (the rows, the block they come from) of each way
        for block, load in ways:
            b.position_at_end(block)
            loaded.append((load(first, lane0, words), b.block))
            b.branch(join)
        b.position_at_end(join)
        rows = [b.phi(self.type(I32)) for _ in range(words)]
        for values, block in loaded:
            for row, value in zip(rows, values, strict=True):
                row.add_incoming(value, block)
        return rows

    def every(self, lanes: ir.Value) -> ir.Value:
        """Whether an i1 holds in every lane."""
        every = ir.IntType(self.width)
        return self.b.icmp_unsigned("==", self.b.bitcast(lanes, every), ir.Constant(every, -1))

    def inside(self, word: ir.Value, count: int) -> ir.Value:
        """Whether `count` words from `word` (an i32, read unsigned) lie inside the batch's shared memory."""
        end = self.b.add(self.b.zext(word, I64), ir.Constant(I64, count))
        return self.b.icmp_unsigned("<=", end, self.run.shared_size)

    def _word_pointer(self, word: ir.Value, vector: bool = False) -> ir.Value:
        pointer = self.b.gep(self.run.shared, [self.b.zext(word, I64)])
        return self.b.bitcast(pointer, self.type(I32).as_pointer()) if vector else pointer

    def _broadcast(self, first, lane0, words) -> list[ir.Value]:
        return [self.splat(self.b.load(self._word_pointer(self.b.add(lane0, ir.Constant(I32, i))), align=4))
                for i in range(words)]

    def _consecutive(self, first, lane0, words) -> list[ir.Value]:
        b = self.b
        vectors = [b.load(self._word_pointer(b.add(lane0, ir.Constant(I32, self.width * k)), True), align=4)
                   for k in range(words)]
        if words == 1:
            return vectors
        if words == 2:
            return [b.shuffle_vector(vectors[0], vectors[1], ir.Constant(ir.VectorType(I32, self.width),
                                                                          list(range(i, 2 * self.width, 2))))
                    for i in range(2)]
        half = self.width // 2                   # four words: each half of the lanes from one pair of vectors
        rows = []
        for i in range(words):
            picks = ir.Constant(ir.VectorType(I32, half), list(range(i, 2 * self.width, 4)))
            low, high = (b.shuffle_vector(vectors[k], vectors[k + 1], picks) for k in (0, 2))
            rows.append(b.shuffle_vector(low, high, ir.Constant(self.type(I32), list(range(self.width)))))
        return rows

    def _gathered(self, first, lane0, words) -> list[ir.Value]:
        return [self.gather(self.b.add(first, self.const(I32, i))) for i in range(words)]

    def gather(self, index: ir.Value) -> ir.Value:
        """The shared-memory words at `index` (an i32 per lane), one AVX-512 gather. An index outside the batch's
        shared memory reads word 0 instead."""
        b = self.b
        inside = b.icmp_unsigned("<", index, self.run.shared_words)
        return self.gather_words(self.run.shared, b.sext(b.select(inside, index, self.const(I32, 0)), self.type(I64)))

    def permute(self, value: ir.Value, source: ir.Value) -> ir.Value:
        """Lane l of `value` (an i32 per lane) moved to every lane whose `source` (an i64 per lane, each inside
        the vector) is l: the vector stored to the stack and gathered back."""
        slots = self.run.stack(self.width)
        self.b.store(value, self.b.bitcast(slots, self.type(I32).as_pointer()), align=4)
        return self.gather_words(self.b.bitcast(slots, I32.as_pointer()), source)

    def gather_words(self, first: ir.Value, index: ir.Value) -> ir.Value:
        """first[index] in each lane (first: an i32 pointer; index: an i64 per lane, each inside), one gather."""
        b, words = self.b, self.type(I32)
        base = self.splat(b.ptrtoint(first, I64))
        pointers = b.inttoptr(b.add(base, b.shl(index, self.const(I64, 2))),
                              ir.VectorType(I32.as_pointer(), self.width))
        module = b.module
        name = f"llvm.masked.gather.v{self.width}i32.v{self.width}p0"
        gather = module.globals.get(name) or ir.Function(module, ir.FunctionType(
            words, [pointers.type, I32, self.type(I1), words]), name)
        return b.call(gather, [pointers, ir.Constant(I32, 4), self.const(I1, 1), ir.Constant(words, ir.Undefined)])

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


def _signed32(value: int) -> int:
    value &= MASK32
    return value - (1 << 32) if value >> 31 else value
