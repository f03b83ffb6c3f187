"""Layer 3 compiler, stage 3: instruction selection, SSA IR -> machine instructions on virtual registers.

Each IR value gets a virtual register: one 32-bit register, an even-aligned pair for 64-bit
values (int64, float64, addresses), or a predicate for bools. Patterns worth knowing:
  - a constant second operand becomes an immediate; kernel arguments are read from
    constant bank 0 (c[0x0][0x160+offset]) where they are used;
  - a*b + c in floats becomes one FFMA/DFMA (contraction, as nvcc does by default);
  - an array element address is IMAD.WIDE index, itemsize, base; a constant added to the
    index moves into the load's immediate offset ([R2.64+0x10]);
  - float32 division is a reciprocal and one Newton step (correctly rounded in practice);
    integer // and % by a power of two are shifts and masks;
  - phi nodes become copies at the end of each predecessor (a parallel copy, ordered so
    no source is overwritten before it is read).
"""

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from lapis.cuda.compiler import ir, passes
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.ir import Op
from lapis.isa import Const, Imm, SpecialRegister, float_bits


class VReg:
    __slots__ = ("id", "width", "pred")

    def __init__(self, id: int, width: int = 1, pred: bool = False):
        self.id, self.width, self.pred = id, width, pred

    def __repr__(self) -> str:
        if self.id < 0:
            return "RZ"
        return f"%p{self.id}" if self.pred else f"%r{self.id}" + (".64" if self.width == 2 else "")


RZ32, RZ64 = VReg(-1), VReg(-1, 2)     # the zero register (a pair of it reads as a 64-bit zero)


@dataclass(frozen=True)
class Imm64:
    """A 64-bit constant for the MOV64 pseudo-instruction."""
    value: int


class Part(VReg):
    """Register `index` of a pair or quad read in place, as an operand (a fragment's element):
    liveness sees the whole, and the operand becomes the whole's register plus index."""
    __slots__ = ("whole", "index")

    def __init__(self, whole: VReg, index: int):
        super().__init__(whole.id, 1)
        self.whole, self.index = whole, index

    def __repr__(self) -> str:
        return f"{self.whole}[{self.index}]"


@dataclass
class MInst:
    op: str
    mods: dict = field(default_factory=dict)
    rd: VReg | None = None
    ra: VReg | None = None
    b: object = None                 # VReg, isa.Imm, isa.Const or Imm64
    rc: VReg | None = None
    pd: VReg | None = None
    ps: tuple | None = None          # (VReg, negated)
    pq: tuple | None = None
    neg: str = ""
    abs_: str = ""
    guard: tuple | None = None
    target: str | None = None        # branch target block
    source: tuple | None = None      # (file, line) of the statement it was selected for: the line table's entry

    def defs(self) -> list[VReg]:
        return [r for r in (self.rd, self.pd) if isinstance(r, VReg) and r.id >= 0]

    def uses(self) -> list[VReg]:
        out = [r.whole if isinstance(r, Part) else r for r in (self.ra, self.b, self.rc) if isinstance(r, VReg)]
        out += [p[0] for p in (self.ps, self.pq, self.guard) if p is not None and isinstance(p[0], VReg)]
        return [r for r in out if r.id >= 0]

    def format(self) -> str:
        parts = [f"{k}={v}" for k, v in (("rd", self.rd), ("pd", self.pd), ("ra", self.ra), ("b", self.b),
                                          ("rc", self.rc), ("ps", self.ps), ("pq", self.pq)) if v is not None]
        mods = "".join(f".{v}" for v in self.mods.values() if v)
        guard = f"@{'!' if self.guard[1] else ''}{self.guard[0]} " if self.guard else ""
        tail = f" -> {self.target}" if self.target else ""
        return f"{guard}{self.op}{mods} {' '.join(parts)}{' neg=' + self.neg if self.neg else ''}{tail}"


@dataclass
class MBlock:
    label: str
    insts: list[MInst] = field(default_factory=list)
    succs: list[str] = field(default_factory=list)


def _int_class(t) -> str:
    return {"int32": "S32", "uint32": "U32", "int64": "S64", "uint64": "U64", "ptr64": "U64"}.get(t.name, "S32")


class InstructionSelector:
    def __init__(self, func: ir.Function):
        self.func = func
        self.next_vreg = 0
        self.vmap: dict[ir.Value, VReg] = {}
        self.const_regs: dict[tuple, VReg] = {}
        self.const_home: dict[str, MBlock] = {}
        self.addr_cache: dict[tuple, VReg] = {}
        self.divmods: dict[tuple, tuple[VReg, VReg]] = {}   # (block, a, b, type) -> (a // b, a % b)
        self.uses = func.uses()
        self.fused: set[ir.Value] = set()
        self.block: MBlock | None = None
        self.source: tuple | None = None     # (file, line) of the value being lowered, given to what it emits

    def error(self, v: ir.Value, message: str) -> CompileError:
        return CompileError(message, v.file or self.func.filename, v.line, self.func.name)

    # -- registers -----------------------------------------------------------------------------
    def new(self, t) -> VReg:
        self.next_vreg += 1
        if t == T.boolean:
            return VReg(self.next_vreg, 1, True)
        if t.kind == "vector":                       # a fragment: an aligned pair or quad
            return VReg(self.next_vreg, t.bits // 32)
        return VReg(self.next_vreg, 2 if t.bits == 64 else 1)

    def emit(self, op: str, **kw) -> MInst:
        inst = MInst(op, source=self.source, **kw)
        self.block.insts.append(inst)
        return inst

    def reg(self, v: ir.Value) -> VReg:
        """v in a register (materializing constants before the loops they are used in)."""
        if v.op is Op.CONST:
            home = self.const_home.get(self.block.label, self.block)
            key = (home.label, v.type, repr(v.attrs["value"]))
            r = self.const_regs.get(key)
            if r is None:
                r = self.const_regs[key] = self.new(v.type)
                current, self.block = self.block, home
                tail = [i for i in home.insts[::-1] if i.op in ("BRA", "EXIT")] if home is not current else []
                del home.insts[len(home.insts) - len(tail):]
                self.load_const(r, v.type, v.attrs["value"])         # before the preheader's jump
                home.insts.extend(tail[::-1])
                self.block = current
            return r
        if v not in self.vmap:
            raise self.error(v, f"internal: {v.name} ({v.op}) used before it was selected")
        return self.vmap[v]

    def _const32(self, value: float) -> VReg:
        """A float32 constant in a register, loaded before the loops it is used in."""
        return self.reg(ir.Value(0, Op.CONST, T.float32, attrs={"value": value}))

    def const64(self, value: float) -> VReg:
        """A float64 constant in a register pair, loaded before the loops it is used in."""
        return self.reg(ir.Value(0, Op.CONST, T.float64, attrs={"value": value}))

    def const_u64(self, value: int) -> VReg:
        """A 64-bit integer constant in a register pair, loaded before the loops it is used in."""
        return self.reg(ir.Value(0, Op.CONST, T.uint64, attrs={"value": value}))

    def load_const(self, r: VReg, t, value) -> None:
        if t == T.boolean:
            self.emit("ISETP", mods={"cmp": "T" if value else "F"}, pd=r, ps=(None, False))
        elif t.bits == 64:
            bits = float_bits64(value) if t.kind == "float" else value & (2**64 - 1)
            self.emit("MOV64", rd=r, b=Imm64(bits))
        else:
            self.emit("MOV", rd=r, b=self.imm(t, value))

    @staticmethod
    def imm(t, value) -> Imm:
        if t.kind == "float" and t.bits == 16:           # the half's bits, in the low half
            return Imm(int(np.asarray(value, t.dtype).view(np.uint16)))
        return Imm(float_bits(value) if t.kind == "float" else int(value) & 0xFFFFFFFF)

    def operand_b(self, v: ir.Value):
        """v as operand B: an immediate when it is a constant that fits, else a register."""
        if v.op is Op.CONST:
            t, value = v.type, v.attrs["value"]
            if t.bits in (16, 32):
                return self.imm(t, value)
            if t.kind in ("int", "uint") and -2**31 <= value < 2**31:
                return Imm(value & 0xFFFFFFFF)      # 64-bit integer ops sign-extend a 32-bit immediate
        if v.op in (Op.PARAM, Op.DIM) and v.type.bits == 32:
            return Const(0, v.attrs["offset"])
        return self.reg(v)

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> list[MBlock]:
        blocks = [MBlock(b.name, succs=[s.name for s in b.succs]) for b in self.func.blocks]
        by_name = {b.label: b for b in blocks}
        self.const_home = {}                  # a loop's blocks load constants in its outermost preheader
        for _, body, preheader in passes.loops(self.func):      # innermost first: outer loops win
            for b in body:
                self.const_home[b.name] = by_name[preheader.name]
        for b in self.func.blocks:
            for phi in b.phis:
                self.vmap[phi] = self.new(phi.type)
        for b, mb in zip(self.func.blocks, blocks, strict=True):
            self.block = mb
            for v in b.instrs:
                if v.op is not Op.CONST and v not in self.fused:
                    self.lower(v)
            for succ in b.succs:
                if succ.phis:
                    self.phi_copies([(self.vmap[phi], phi.args[succ.preds.index(b)]) for phi in succ.phis])
            self.terminator(b, blocks)
        return blocks

    def terminator(self, b: ir.Block, blocks: list[MBlock]) -> None:
        index = self.func.blocks.index(b)
        nxt = self.func.blocks[index + 1].name if index + 1 < len(self.func.blocks) else None
        match b.term:
            case ir.Return():
                self.emit("EXIT")
            case ir.Jump(target):
                if target.name != nxt:
                    self.emit("BRA", target=target.name)
            case ir.Branch(cond, then, orelse):
                p = self.reg(cond)
                if then.name == nxt:
                    self.emit("BRA", guard=(p, True), target=orelse.name)
                elif orelse.name == nxt:
                    self.emit("BRA", guard=(p, False), target=then.name)
                else:
                    self.emit("BRA", guard=(p, False), target=then.name)
                    self.emit("BRA", target=orelse.name)

    def copy(self, dst: VReg, src) -> None:
        if dst.pred:
            self.emit("PLOP", mods={"op": "AND"}, pd=dst, ps=(src, False), pq=(None, False))
        elif dst.width == 4:
            self.emit("MOV128", rd=dst, ra=src)
        elif dst.width == 2:
            self.emit("MOV64", rd=dst, ra=src)
        else:
            self.emit("MOV", rd=dst, b=src)

    def phi_copies(self, copies: list[tuple[VReg, ir.Value]]) -> None:
        consts = [(d, v) for d, v in copies if v.op is Op.CONST]
        pending = {d: self.reg(v) for d, v in copies if v.op is not Op.CONST}
        pending = {d: s for d, s in pending.items() if d is not s}
        while pending:
            sources = set(map(id, pending.values()))
            ready = [d for d in pending if id(d) not in sources]
            if ready:
                for d in ready:
                    self.copy(d, pending.pop(d))
                continue
            d = next(iter(pending))         # a cycle: save one register, then redirect its readers
            tmp = VReg(self._bump(), d.width, d.pred)
            self.copy(tmp, d)
            pending = {k: (tmp if s is d else s) for k, s in pending.items()}
        for d, v in consts:
            self.load_const(d, v.type, v.attrs["value"])

    def _bump(self) -> int:
        self.next_vreg += 1
        return self.next_vreg

    # -- lowering -----------------------------------------------------------------------------
    def lower(self, v: ir.Value) -> None:
        if v.line:                  # a value of no line (a hoisted constant's) keeps the line before it
            self.source = (v.file or self.func.filename, v.line)
        handler = getattr(self, "op_" + v.op.value, None)
        if handler is None:
            raise self.error(v, f"operation {v.op} is not supported by the code generator")
        result = handler(v)
        if result is not None:
            self.vmap[v] = result

    def op_param(self, v):
        r = self.new(v.type)
        if v.type == T.boolean:
            tmp = self.new(T.int32)
            self.emit("MOV", rd=tmp, b=Const(0, v.attrs["offset"]))
            self.emit("ISETP", mods={"cmp": "NE", "t": "U32"}, pd=r, ra=tmp, b=Imm(0), ps=(None, False))
        elif v.type.bits == 64:
            self.emit("LDC", mods={"w": "64"}, rd=r, b=Const(0, v.attrs["offset"]))
        else:
            self.emit("MOV", rd=r, b=Const(0, v.attrs["offset"]))
        return r

    def op_sreg(self, v):
        r = self.new(T.int32)
        number = SpecialRegister[v.attrs["name"].upper().replace(".", "_")]     # PTX's tid.x is TID_X
        self.emit("S2R", rd=r, b=Imm(int(number)))
        return r

    def op_dim(self, v):
        r = self.new(T.int32)
        self.emit("MOV", rd=r, b=Const(0, v.attrs["offset"]))
        return r

    def _fusable(self, m: ir.Value, v: ir.Value) -> bool:
        return m.op is Op.MUL and m.block is v.block and self.uses.get(m, 0) == 1 and m.type == v.type

    def _binary(self, v, op_int, op_float, op_double, mods=None):
        a, b = v.args
        t = v.type
        r = self.new(t)
        if t.kind == "float":
            op = op_float if t.bits == 32 else op_double
            b_op = self.operand_b(b) if t.bits == 32 else self.reg(b)
            self.emit(op, mods=dict(mods or {}), rd=r, ra=self.reg(a), b=b_op)
        else:
            m = dict(mods or {})
            if t.bits == 64:
                m["w"] = "64"
            self.emit(op_int, mods=m, rd=r, ra=self.reg(a), b=self.operand_b(b))
        return r

    def op_add(self, v):
        a, b = v.args
        if v.type.kind == "float":
            for m, c in ((a, b), (b, a)):
                if self._fusable(m, v):
                    self.fused.add(m)
                    r = self.new(v.type)
                    x, y = m.args
                    op, b_op = ("FFMA", self.operand_b(y)) if v.type.bits == 32 else ("DFMA", self.reg(y))
                    self.emit(op, rd=r, ra=self.reg(x), b=b_op, rc=self.reg(c))
                    return r
        return self._binary(v, "IADD", "FADD", "DADD")

    def op_sub(self, v):
        a, b = v.args
        r = self.new(v.type)
        t = v.type
        if t.kind == "float":
            if self._fusable(a, v):                 # a*b - c
                self.fused.add(a)
                x, y = a.args
                op, b_op = ("FFMA", self.operand_b(y)) if t.bits == 32 else ("DFMA", self.reg(y))
                self.emit(op, rd=r, ra=self.reg(x), b=b_op, rc=self.reg(b), neg="c")
                return r
            if t.bits == 32 and b.op is Op.CONST:
                self.emit("FADD", rd=r, ra=self.reg(a), b=self.imm(t, -b.attrs["value"]))
            else:
                self.emit("FADD" if t.bits == 32 else "DADD", rd=r, ra=self.reg(a), b=self.reg(b), neg="b")
            return r
        mods = {"w": "64"} if t.bits == 64 else {}
        self.emit("IADD", mods=mods, rd=r, ra=self.reg(a), b=self.reg(b), neg="b")
        return r

    def op_mul(self, v):
        a, b = v.args
        if v.type.kind in ("int", "uint") and ir.power_of_two(b):
            r = self.new(v.type)
            mods = {"w": "64"} if v.type.bits == 64 else {}
            self.emit("SHL", mods=mods, rd=r, ra=self.reg(a), b=Imm(b.attrs["value"].bit_length() - 1))
            return r
        return self._binary(v, "IMUL", "FMUL", "DMUL")

    def op_min(self, v):
        return self._minmax(v, "MIN")

    def op_max(self, v):
        return self._minmax(v, "MAX")

    def _minmax(self, v, which):
        t = v.type
        if t.kind == "float" and t.bits == 64:
            a, b = self.reg(v.args[0]), self.reg(v.args[1])
            p, r = self.new(T.boolean), self.new(t)
            self.emit("DSETP", mods={"cmp": "LT" if which == "MIN" else "GT"}, pd=p, ra=a, b=b, ps=(None, False))
            self.emit("SEL64", rd=r, ra=a, b=b, ps=(p, False))
            return r
        if t.kind == "float":
            return self._binary(v, "", "FMNMX", "", {"op": which})
        r = self.new(t)
        self.emit("IMNMX", mods={"op": which, "t": _int_class(t)}, rd=r, ra=self.reg(v.args[0]),
                  b=self.operand_b(v.args[1]))
        return r

    def _logic(self, v, op):
        if v.type == T.boolean:
            r = self.new(T.boolean)
            self.emit("PLOP", mods={"op": op}, pd=r, ps=(self.reg(v.args[0]), False), pq=(self.reg(v.args[1]), False))
            return r
        return self._binary(v, "LOP", "", "", {"op": op})

    def op_and(self, v):
        return self._logic(v, "AND")

    def op_or(self, v):
        return self._logic(v, "OR")

    def op_xor(self, v):
        return self._logic(v, "XOR")

    def op_shl(self, v):
        return self._binary(v, "SHL", "", "")

    def op_shr(self, v):
        return self._binary(v, "SHR", "", "", {"t": "U32" if v.type.kind == "uint" else "S32"})

    def op_neg(self, v):
        t, r = v.type, self.new(v.type)
        a = self.reg(v.args[0])
        if t.kind == "float":
            if t.bits == 32:
                self.emit("FMUL", rd=r, ra=a, b=self.imm(t, -1.0))
            else:                                   # -a times 1, not -a + 0: -(+0) is -0
                self.emit("DMUL", rd=r, ra=a, b=self.const64(-1.0))
        else:
            self.emit("IADD", mods={"w": "64"} if t.bits == 64 else {}, rd=r, ra=a, b=RZ32, neg="a")
        return r

    def op_not(self, v):
        r = self.new(T.boolean)
        self.emit("PLOP", mods={"op": "XOR"}, pd=r, ps=(self.reg(v.args[0]), False), pq=(None, False))
        return r

    def op_cmp(self, v):
        a, b = v.args
        t = a.type
        r = self.new(T.boolean)
        cmp = v.attrs["op"].upper()
        if t.kind == "float":
            op = "FSETP" if t.bits == 32 else "DSETP"
            self.emit(op, mods={"cmp": cmp}, pd=r, ra=self.reg(a),
                      b=self.operand_b(b) if t.bits == 32 else self.reg(b), ps=(None, False))
        else:
            self.emit("ISETP", mods={"cmp": cmp, "t": _int_class(t)}, pd=r, ra=self.reg(a), b=self.operand_b(b),
                      ps=(None, False))
        return r

    def op_select(self, v):
        cond, a, b = v.args
        t, r = v.type, self.new(v.type)
        p = self.reg(cond)
        if t == T.boolean:
            x, y = self.new(T.boolean), self.new(T.boolean)
            self.emit("PLOP", mods={"op": "AND"}, pd=x, ps=(p, False), pq=(self.reg(a), False))
            self.emit("PLOP", mods={"op": "AND"}, pd=y, ps=(p, True), pq=(self.reg(b), False))
            self.emit("PLOP", mods={"op": "OR"}, pd=r, ps=(x, False), pq=(y, False))
        elif t.bits == 64:
            self.emit("SEL64", rd=r, ra=self.reg(a), b=self.reg(b), ps=(p, False))
        else:
            self.emit("SEL", rd=r, ra=self.reg(a), b=self.operand_b(b), ps=(p, False))
        return r

    def op_bitcast(self, v):
        """The same register bits read as another type of their width (PTX's untyped .b32 and .b64 registers)."""
        r = self.new(v.type)
        self.copy(r, self.reg(v.args[0]))
        return r

    def op_cast(self, v):
        (x,) = v.args
        src, dst = x.type, v.type
        r = self.new(dst)
        a = self.reg(x)
        sk = "float" if src.kind == "float" else "int"
        dk = "float" if dst.kind == "float" else "int"
        if sk == dk == "int":
            if src.bits == dst.bits:
                self.copy(r, a)
            elif dst.bits == 64:
                self.emit("I2I", mods={"to": "S64", "fr": "U32" if src.kind == "uint" else "S32"}, rd=r, b=a)
            else:
                self.emit("I2I", mods={"to": "S32", "fr": "S64"}, rd=r, b=a)
        elif sk == dk == "float":
            self.emit("F2F", mods={"to": dst.isa_format, "fr": src.isa_format}, rd=r, b=a)
        elif dk == "float":
            if src == T.uint64:
                return self._uint64_to_float(a, dst)
            self.emit("I2F", mods={"to": dst.isa_format, "fr": _int_class(src) if src.bits == 32 else "S64"},
                      rd=r, b=a)
        else:
            if dst == T.uint64:
                return self._float_to_uint64(a, src)
            if dst.bits == 64 or dst.kind == "uint":
                wide = r if dst.bits == 64 else self.new(T.int64)
                self.emit("F2I", mods={"to": "S64", "fr": src.isa_format, "rnd": "TRUNC"}, rd=wide, b=a)
                if wide is not r:
                    self.emit("I2I", mods={"to": "S32", "fr": "S64"}, rd=r, b=wide)
            else:
                self.emit("F2I", mods={"to": "S32", "fr": src.isa_format, "rnd": "TRUNC"}, rd=r, b=a)
        return r

    def _uint64_to_float(self, x: VReg, dst) -> VReg:
        """A uint64 as a float, rounded once (the ISA converts signed 64-bit integers only): below 2^63 as an int64;
        from 2^63 up, half of it with its lowest bit kept (x >> 1 | x & 1: the bit that decides a tie's rounding
        survives) converted, then doubled exactly. A half is rounded from the float64, as an int64's is."""
        fmt = T.float32 if dst == T.float32 else T.float64
        big, half, low, odd, src = self.new(T.boolean), *(self.new(T.uint64) for _ in range(4))
        f, twice, r = self.new(fmt), self.new(fmt), self.new(fmt)
        self.emit("ISETP", mods={"cmp": "LT", "t": "S64"}, pd=big, ra=x, b=Imm(0), ps=(None, False))
        self.emit("SHR", mods={"t": "U32", "w": "64"}, rd=half, ra=x, b=Imm(1))
        self.emit("LOP", mods={"op": "AND", "w": "64"}, rd=low, ra=x, b=Imm(1))
        self.emit("LOP", mods={"op": "OR", "w": "64"}, rd=odd, ra=half, b=low)
        self.emit("SEL64", rd=src, ra=odd, b=x, ps=(big, False))
        self.emit("I2F", mods={"to": fmt.isa_format, "fr": "S64"}, rd=f, b=src)
        self.emit("FADD" if fmt == T.float32 else "DADD", rd=twice, ra=f, b=f)
        self.emit("SEL" if fmt == T.float32 else "SEL64", rd=r, ra=twice, b=f, ps=(big, False))
        if dst == fmt:
            return r
        out = self.new(dst)
        self.emit("F2F", mods={"to": dst.isa_format, "fr": "F64"}, rd=out, b=r)
        return out

    def _float_to_uint64(self, x: VReg, src) -> VReg:
        """A float truncated to a uint64 (the ISA converts to signed 64-bit integers only): from 2^63 up, x - 2^63
        converted and 2^63 added back, and 2^64 and above saturate at 2^64 - 1 (selected: F2I.S64 gives -2^63 for
        2^63 and above); below, as an int64, so NaN gives 0 and a negative value wraps, as numpy's cast does on the
        host (and lapis's uint32 conversion)."""
        if src.half:                                # exact in float32
            wide = self.new(T.float32)
            self.emit("F2F", mods={"to": "F32", "fr": src.isa_format}, rd=wide, b=x)
            x, src = wide, T.float32
        single = src == T.float32
        big, over, shifted, pick = self.new(T.boolean), self.new(T.boolean), self.new(src), self.new(src)
        low, high, fits, r = (self.new(T.uint64) for _ in range(4))
        if single:
            self.emit("FSETP", mods={"cmp": "GE"}, pd=big, ra=x, b=self.imm(T.float32, 2.0**63), ps=(None, False))
            self.emit("FSETP", mods={"cmp": "GE"}, pd=over, ra=x, b=self.imm(T.float32, 2.0**64), ps=(None, False))
            self.emit("FADD", rd=shifted, ra=x, b=self.imm(T.float32, -2.0**63))
            self.emit("SEL", rd=pick, ra=shifted, b=x, ps=(big, False))
        else:
            self.emit("DSETP", mods={"cmp": "GE"}, pd=big, ra=x, b=self.const64(2.0**63), ps=(None, False))
            self.emit("DSETP", mods={"cmp": "GE"}, pd=over, ra=x, b=self.const64(2.0**64), ps=(None, False))
            self.emit("DADD", rd=shifted, ra=x, b=self.const64(-2.0**63))
            self.emit("SEL64", rd=pick, ra=shifted, b=x, ps=(big, False))
        self.emit("F2I", mods={"to": "S64", "fr": src.isa_format, "rnd": "TRUNC"}, rd=low, b=pick)
        self.emit("IADD", mods={"w": "64"}, rd=high, ra=low, b=self.const_u64(2**63))
        self.emit("SEL64", rd=fits, ra=high, b=low, ps=(big, False))
        self.emit("SEL64", rd=r, ra=self.const_u64(2**64 - 1), b=fits, ps=(over, False))
        return r

    # -- division -----------------------------------------------------------------------------
    def op_fdiv(self, v):
        a, b = v.args
        t = v.type
        if t.bits == 32:
            return self._fdiv32(self.reg(a), b)
        return self._fdiv64(self.reg(a), self.reg(b))

    def _fdiv32(self, a: VReg, b: ir.Value) -> VReg:
        if b.op is Op.CONST and b.attrs["value"] != 0 and abs(math.frexp(b.attrs["value"])[0]) == 0.5 \
                and 2**-126 < abs(b.attrs["value"]) < 2**126:       # a power of two: the reciprocal is exact
            r = self.new(T.float32)
            self.emit("FMUL", rd=r, ra=a, b=self.imm(T.float32, 1.0 / b.attrs["value"]))
            return r
        # The quotient is computed in float64 and rounded to float32 once, which is IEEE's correctly rounded
        # answer (a float64 within an ulp of a/b cannot be on the other side of a float32 midpoint, as 53 >=
        # 2 * 24 + 2): a float32 Newton step lost digits wherever its residual was subnormal (a subnormal
        # dividend, or a quotient near 2^-126). The first guess is float32's reciprocal, of a divisor outside
        # [2^-126, 2^126] in magnitude scaled by 2^64 or 2^-64 first (its reciprocal would be inf, or a
        # subnormal that MUFU.RCP flushes to 0: 1e-6 / 1e-40 gave inf), and the guess by the same after.
        d = self.reg(b)
        tiny, huge = self.new(T.boolean), self.new(T.boolean)
        up, scale, ds, rcp = (self.new(T.float32) for _ in range(4))
        self.emit("FSETP", mods={"cmp": "LT"}, pd=tiny, ra=d, b=self.imm(T.float32, 2.0**-126), ps=(None, False),
                  abs_="a")
        self.emit("FSETP", mods={"cmp": "GT"}, pd=huge, ra=d, b=self.imm(T.float32, 2.0**126), ps=(None, False),
                  abs_="a")
        self.emit("SEL", rd=up, ra=self._const32(2.0**64), b=self.imm(T.float32, 1.0), ps=(tiny, False))
        self.emit("SEL", rd=scale, ra=self._const32(2.0**-64), b=up, ps=(huge, False))
        self.emit("FMUL", rd=ds, ra=d, b=scale)
        self.emit("MUFU", mods={"fn": "RCP"}, rd=rcp, b=ds)
        a64, d64, rs, s64, r0, e0, r1, q, e, step = (self.new(T.float64) for _ in range(10))
        to64 = {"to": "F64", "fr": "F32"}
        for wide, narrow in ((a64, a), (d64, d), (rs, rcp), (s64, scale)):
            self.emit("F2F", mods=to64, rd=wide, b=narrow)
        one = self.const64(1.0)
        self.emit("DMUL", rd=r0, ra=rs, b=s64)                    # 1/d, from the scaled divisor's reciprocal
        self.emit("DFMA", rd=e0, ra=d64, b=r0, rc=one, neg="a")    # Newton: r = r + r(1 - d r)
        self.emit("DFMA", rd=r1, ra=r0, b=e0, rc=r0)
        self.emit("DMUL", rd=q, ra=a64, b=r1)
        self.emit("DFMA", rd=e, ra=d64, b=q, rc=a64, neg="a")      # e = a - d*q
        self.emit("DFMA", rd=step, ra=e, b=r1, rc=q)               # q + e/d
        refined, guess, q0 = (self.new(T.float32) for _ in range(3))
        self.emit("F2F", mods={"to": "F32", "fr": "F64"}, rd=refined, b=step)
        self.emit("FMUL", rd=guess, ra=a, b=rcp)                   # IEEE's answer where Newton's steps give NaN
        self.emit("FMUL", rd=q0, ra=guess, b=scale)
        return self._unless_special(a, e, q0, refined, T.float32)

    def _unless_special(self, a: VReg, e: VReg, q: VReg, refined: VReg, t) -> VReg:
        """refined, or q (a times the reciprocal) where it is already IEEE's answer and the Newton step would
        spoil it: where the float64 residual e is not finite (NaN: a zero or infinite divisor, or an infinite dividend,
        giving +-inf, +-0 or NaN; infinite: a quotient that overflows, inf - inf in the step) and where a is +-0
        (a zero quotient keeps its sign: -0 / 2 is -0)."""
        finite, keep, out = self.new(T.boolean), self.new(T.boolean), self.new(t)
        zero = self.imm(T.float32, 0.0) if t.bits == 32 else self.const64(0.0)
        self.emit("DSETP", mods={"cmp": "LT"}, pd=finite, ra=e, b=self.const64(math.inf), ps=(None, False), abs_="a")
        self.emit("FSETP" if t.bits == 32 else "DSETP", mods={"cmp": "EQ", "bop": "OR"}, pd=keep, ra=a, b=zero,
                  ps=(finite, True))
        self.emit("SEL" if t.bits == 32 else "SEL64", rd=out, ra=q, b=refined, ps=(keep, False))
        return out

    def _fdiv64(self, a: VReg, d: VReg) -> VReg:
        """a / d in float64: a and d scaled by exact powers of two into [1, 4) (d's float32 reciprocal, the first
        guess, would be 0 or inf for a d beyond float32's range, and a subnormal a would lose digits), the
        reciprocal refined by two Newton steps, the quotient by one residual step, then scaled back by
        2^(e_a - e_d) in two exact halves (one rounding, where the quotient is subnormal)."""
        field_a, field_d = self._unit_field(a), self._unit_field(d)
        sa, sd = self._power_of_two(field_a, 0), self._power_of_two(field_d, 0)
        f = [self.new(T.float32) for _ in range(2)]
        a_s, ds, r0, r1, r2, e0, e1, q, e, step, q0, guess = (self.new(T.float64) for _ in range(12))
        one = self.const64(1.0)
        self.emit("DMUL", rd=a_s, ra=a, b=sa)
        self.emit("DMUL", rd=ds, ra=d, b=sd)
        self.emit("F2F", mods={"to": "F32", "fr": "F64"}, rd=f[0], b=ds)
        self.emit("MUFU", mods={"fn": "RCP"}, rd=f[1], b=f[0])
        self.emit("F2F", mods={"to": "F64", "fr": "F32"}, rd=r0, b=f[1])
        self.emit("DFMA", rd=e0, ra=ds, b=r0, rc=one, neg="a")     # Newton: r = r + r(1 - d r)
        self.emit("DFMA", rd=r1, ra=r0, b=e0, rc=r0)
        self.emit("DFMA", rd=e1, ra=ds, b=r1, rc=one, neg="a")
        self.emit("DFMA", rd=r2, ra=r1, b=e1, rc=r1)
        self.emit("DMUL", rd=q, ra=a_s, b=r2)
        self.emit("DFMA", rd=e, ra=ds, b=q, rc=a_s, neg="a")
        self.emit("DFMA", rd=step, ra=e, b=r2, rc=q)
        k, half, rest, minus_half, minus_rest = (self.new(T.int64) for _ in range(5))  # the scale: 2^(e_a - e_d)
        self.emit("IADD", mods={"w": "64"}, rd=k, ra=field_d, b=field_a, neg="b")
        self.emit("SHR", mods={"t": "S32", "w": "64"}, rd=half, ra=k, b=Imm(1))
        self.emit("IADD", mods={"w": "64"}, rd=rest, ra=k, b=half, neg="b")
        self.emit("IADD", mods={"w": "64"}, rd=minus_half, ra=half, b=Imm(1023), neg="a")
        self.emit("IADD", mods={"w": "64"}, rd=minus_rest, ra=rest, b=Imm(1023), neg="a")
        up = (self._power_of_two(half, 1023), self._power_of_two(rest, 1023))
        down = (self._power_of_two(minus_rest, 0), self._power_of_two(minus_half, 0))
        refined = self._tie_to_truth(a_s, ds, r2, step, self._scaled(step, up), up, down)
        self.emit("DMUL", rd=guess, ra=a, b=r0)                     # IEEE's answer where Newton's steps give NaN
        self.emit("DMUL", rd=q0, ra=guess, b=sd)
        return self._unless_special(a, e, q0, refined, T.float64)

    def _scaled(self, x: VReg, powers: tuple[VReg, VReg]) -> VReg:
        """x times two powers of two in turn (a scale past float64's exponent range, in two exact halves)."""
        for power in powers:
            y = self.new(T.float64)
            self.emit("DMUL", rd=y, ra=x, b=power)
            x = y
        return x

    def _tie_to_truth(self, a: VReg, d: VReg, r: VReg, q: VReg, scaled: VReg, up, down) -> VReg:
        """`scaled` (q, the correctly rounded a / d, times 2^k by `up`), or its neighbour where the quotient is
        subnormal and q fell exactly halfway between two of its subnormal neighbours: rounding q a second time
        broke that tie to even, where the exact quotient lies to one side (the sign of its residual). q's
        distance t from the nearer one (`scaled` brought back by `down`, exactly) is then half their spacing,
        and the other is that one plus 2t, a number the scale brings back unchanged; a quotient that did not
        round twice (normal, or exact) has t = 0, or a point 2t away that the scale does not keep."""
        e, c, back, t, other, side = (self.new(T.float64) for _ in range(6))
        self.emit("DFMA", rd=e, ra=d, b=q, rc=a, neg="a")          # e = a - d q, exact
        self.emit("DMUL", rd=c, ra=e, b=r)                         # the sign of a/d - q
        self.emit("DADD", rd=t, ra=q, b=self._scaled(scaled, down), neg="b")
        self.emit("DFMA", rd=other, ra=t, b=self.const64(2.0), rc=self._scaled(scaled, down))
        tie_breaker = self._scaled(other, up)
        kept, toward, out = self.new(T.boolean), self.new(T.boolean), self.new(T.float64)
        self.emit("DSETP", mods={"cmp": "EQ"}, pd=kept, ra=self._scaled(tie_breaker, down), b=other, ps=(None, False))
        self.emit("DMUL", rd=side, ra=c, b=t)
        self.emit("DSETP", mods={"cmp": "GT", "bop": "AND"}, pd=toward, ra=side, b=self.const64(0.0), ps=(kept, False))
        self.emit("SEL64", rd=out, ra=tie_breaker, b=scaled, ps=(toward, False))
        return out

    def _unit_field(self, x: VReg) -> VReg:
        """2046 - e for x's exponent field e, clamped to [1, 2046]: the field of 2^(1023 - e), the power of two
        that brings a finite nonzero x into [1, 4) (from x's bits, x >> 52 & 0x7ff)."""
        e, field, low, high, clamped = (self.new(T.int64) for _ in range(5))
        self.emit("SHR", mods={"t": "U32", "w": "64"}, rd=e, ra=x, b=Imm(52))
        self.emit("LOP", mods={"op": "AND", "w": "64"}, rd=field, ra=e, b=Imm(0x7FF))
        self.emit("IADD", mods={"w": "64"}, rd=low, ra=field, b=Imm(2046), neg="a")
        self.emit("IMNMX", mods={"op": "MAX", "t": "S64"}, rd=high, ra=low, b=Imm(1))
        self.emit("IMNMX", mods={"op": "MIN", "t": "S64"}, rd=clamped, ra=high, b=Imm(2046))
        return clamped

    def _power_of_two(self, exponent: VReg, bias: int) -> VReg:
        """The float64 2^(exponent + bias - 1023), exponent + bias (bias >= 0) clamped to the normal fields
        [1, 2046]."""
        field, low, clamped, bits = exponent, *(self.new(T.int64) for _ in range(3))
        if bias:
            field = self.new(T.int64)
            self.emit("IADD", mods={"w": "64"}, rd=field, ra=exponent, b=Imm(bias))
        self.emit("IMNMX", mods={"op": "MAX", "t": "S64"}, rd=low, ra=field, b=Imm(1))
        self.emit("IMNMX", mods={"op": "MIN", "t": "S64"}, rd=clamped, ra=low, b=Imm(2046))
        self.emit("SHL", mods={"w": "64"}, rd=bits, ra=clamped, b=Imm(52))
        return bits

    def _divmod(self, v) -> tuple[VReg, VReg]:
        """Python's floor division and modulo of integers, which the ISA has no instruction for.

        Operands below 2^32 in magnitude (32-bit types, and 64-bit divisions `passes.narrow_divisions`
        found to fit) take `_divide_exact`: one float64 quotient, floored. Other 64-bit operands take
        `_divide`. A zero divisor gives 0 and 0, as numba's kernels do (its numpy error model: no exception,
        both results 0), not an exception. `a // b` and `a % b` in one block share one division."""
        a, b = v.args
        t = v.type
        key = (self.block.label, a, b, t)
        if key not in self.divmods:
            exact = t.bits == 32 or v.attrs.get("narrow")
            if t == T.uint64:
                q, r = self._divide_unsigned(a, b, exact)
            else:
                q, r = (self._divide_exact if exact else self._divide)(a, b, t)
            self.divmods[key] = self._zero_unless_divisor(b, q, r, t)
        return self.divmods[key]

    def _zero_unless_divisor(self, b: ir.Value, q: VReg, r: VReg, t) -> tuple[VReg, VReg]:
        """(q, r), or (0, 0) where the divisor b is 0: the division's own arithmetic leaves a there as r."""
        if b.op is Op.CONST and b.attrs["value"] != 0:
            return q, r
        wide = t.bits == 64
        zero, qz, rz = self.new(T.boolean), self.new(t), self.new(t)
        self.emit("ISETP", mods={"cmp": "EQ", "t": "U64" if wide else "U32"}, pd=zero, ra=self.reg(b), b=Imm(0),
                  ps=(None, False))
        for out, value in ((qz, q), (rz, r)):
            self.emit("SEL64" if wide else "SEL", rd=out, ra=RZ64 if wide else RZ32, b=value, ps=(zero, False))
        return qz, rz

    def _divide_unsigned(self, a: ir.Value, b: ir.Value, narrow: bool) -> tuple[VReg, VReg]:
        """uint64 a // b and a % b from the signed division (Hacker's Delight, 9-3): a divisor from 2^63 up goes
        into a once or not at all; a smaller one divides a >> 1 (both then non-negative int64s), and the doubled
        quotient is at most one short. Operands below 2^32 (`narrow`) divide exactly in float64."""
        t = T.uint64
        ra, rb = self.reg(a), self.reg(b)
        m64 = {"w": "64"}
        if narrow:
            q, r = self._divide_exact(ra, rb, t)
        else:
            half, q1, prod, rem, q2, r2, qs, rs = (self.new(t) for _ in range(8))
            self.emit("SHR", mods={"t": "U32", **m64}, rd=half, ra=ra, b=Imm(1))
            q0, _ = self._divide(half, rb, T.int64)
            self.emit("SHL", mods=m64, rd=q1, ra=q0, b=Imm(1))
            self.emit("IMUL", mods=m64, rd=prod, ra=q1, b=rb)
            self.emit("IADD", mods=m64, rd=rem, ra=ra, b=prod, neg="b")
            short, huge, fits = (self.new(T.boolean) for _ in range(3))
            self.emit("ISETP", mods={"cmp": "GE", "t": "U64"}, pd=short, ra=rem, b=rb, ps=(None, False))
            self.emit("IADD", mods=m64, rd=q2, ra=q1, b=Imm(1))
            self.emit("IADD", mods=m64, rd=r2, ra=rem, b=rb, neg="b")
            self.emit("SEL64", rd=qs, ra=q2, b=q1, ps=(short, False))
            self.emit("SEL64", rd=rs, ra=r2, b=rem, ps=(short, False))
            qh, rh, less, q, r = (self.new(t) for _ in range(5))          # a divisor from 2^63 up
            self.emit("ISETP", mods={"cmp": "LT", "t": "S64"}, pd=huge, ra=rb, b=Imm(0), ps=(None, False))
            self.emit("ISETP", mods={"cmp": "GE", "t": "U64"}, pd=fits, ra=ra, b=rb, ps=(None, False))
            self.emit("SEL64", rd=qh, ra=self.const_u64(1), b=RZ64, ps=(fits, False))
            self.emit("IADD", mods=m64, rd=less, ra=ra, b=rb, neg="b")
            self.emit("SEL64", rd=rh, ra=less, b=ra, ps=(fits, False))
            self.emit("SEL64", rd=q, ra=qh, b=qs, ps=(huge, False))
            self.emit("SEL64", rd=r, ra=rh, b=rs, ps=(huge, False))
        return q, r

    def _divide_exact(self, a: "ir.Value | VReg", b: "ir.Value | VReg", t) -> tuple[VReg, VReg]:
        """Floor division of integers below 2^32 in magnitude (exact in float64), with no correction step.

        The reciprocal after one Newton step is within about 2^-46 of 1/b, so q0 = a * (1/b) is within
        2^-45 |a/b| of a/b. Where a/b is an integer n, q0 may fall just short of it; where it is not, it
        is at least 1/|b| from the integers on either side. Raising q0 by |q0| 2^-40 clears the first
        case and, as 2^-39 |a| < 1, stays short of the next integer in the second: its floor is Python's
        quotient. (Correcting q0 by its residual would need the residual exact, which a DFMA that rounds
        its product, as this simulator's does, does not give.) An int32 quotient is converted through
        int64, so INT_MIN // -1 wraps as the other int32 arithmetic does."""
        cls = _int_class(t) if t.bits == 32 else "S64"
        m64 = {"w": "64"} if t.bits == 64 else {}
        fa, fb, r0, e0, r1, q0, raised = (self.new(T.float64) for _ in range(7))
        f0, f1 = self.new(T.float32), self.new(T.float32)
        ra = self.reg(a) if isinstance(a, ir.Value) else a
        rb = self.reg(b) if isinstance(b, ir.Value) else b
        self.emit("I2F", mods={"to": "F64", "fr": cls}, rd=fa, b=ra)
        self.emit("I2F", mods={"to": "F64", "fr": cls}, rd=fb, b=rb)
        self.emit("F2F", mods={"to": "F32", "fr": "F64"}, rd=f0, b=fb)
        self.emit("MUFU", mods={"fn": "RCP"}, rd=f1, b=f0)
        self.emit("F2F", mods={"to": "F64", "fr": "F32"}, rd=r0, b=f1)
        self.emit("DFMA", rd=e0, ra=fb, b=r0, rc=self.const64(1.0), neg="a")     # Newton: r0 + r0 (1 - b r0)
        self.emit("DFMA", rd=r1, ra=r0, b=e0, rc=r0)
        self.emit("DMUL", rd=q0, ra=fa, b=r1)
        self.emit("DFMA", rd=raised, ra=q0, b=self.const64(2.0**-40), rc=q0, abs_="a")
        q, r, prod = self.new(t), self.new(t), self.new(t)
        if t == T.int32:
            wide = self.new(T.int64)
            self.emit("F2I", mods={"to": "S64", "fr": "F64", "rnd": "FLOOR"}, rd=wide, b=raised)
            self.emit("I2I", mods={"to": "S32", "fr": "S64"}, rd=q, b=wide)
        else:
            self.emit("F2I", mods={"to": cls if t.bits == 32 else "S64", "fr": "F64", "rnd": "FLOOR"}, rd=q,
                      b=raised)
        self.emit("IMUL", mods=m64, rd=prod, ra=q, b=self.operand_b(b) if isinstance(b, ir.Value) else rb)
        self.emit("IADD", mods=m64, rd=r, ra=ra, b=prod, neg="b")
        return q, r

    def _divide(self, a: "ir.Value | VReg", b: "ir.Value | VReg", t) -> tuple[VReg, VReg]:
        """Floor division of 64-bit integers: the quotient estimated in float64 (exact operands below
        2^53; the remainder is divided once more, since a larger numerator was rounded), floored, and
        corrected by one step each way, so the remainder ends up with the divisor's sign as Python
        defines it."""
        ra, rb = (self.reg(x) if isinstance(x, ir.Value) else x for x in (a, b))
        m64, cls = {"w": "64"}, "S64"
        fa, fb, fq, q, r, prod = (self.new(x) for x in (T.float64, T.float64, T.float64, t, t, t))
        self.emit("I2F", mods={"to": "F64", "fr": cls}, rd=fa, b=ra)
        self.emit("I2F", mods={"to": "F64", "fr": cls}, rd=fb, b=rb)
        quotient = self._fdiv64(fa, fb)
        self.emit("FRND", mods={"rnd": "FLOOR", "w": "F64"}, rd=fq, b=quotient)
        self.emit("F2I", mods={"to": cls, "fr": "F64", "rnd": "TRUNC"}, rd=q, b=fq)
        self.emit("IMUL", mods=m64, rd=prod, ra=q, b=rb)
        self.emit("IADD", mods=m64, rd=r, ra=ra, b=prod, neg="b")
        fr, fq1, q1, prod1 = (self.new(x) for x in (T.float64, T.float64, t, t))
        nq, nr = self.new(t), self.new(t)
        self.emit("I2F", mods={"to": "F64", "fr": cls}, rd=fr, b=r)
        self.emit("FRND", mods={"rnd": "FLOOR", "w": "F64"}, rd=fq1, b=self._fdiv64(fr, fb))
        self.emit("F2I", mods={"to": cls, "fr": "F64", "rnd": "TRUNC"}, rd=q1, b=fq1)
        self.emit("IMUL", mods=m64, rd=prod1, ra=q1, b=rb)
        self.emit("IADD", mods=m64, rd=nr, ra=r, b=prod1, neg="b")
        self.emit("IADD", mods=m64, rd=nq, ra=q, b=q1)
        q, r = nq, nr
        for step in (-1, 1):               # the estimate may be one off either way
            p, bpos, x, y = (self.new(T.boolean) for _ in range(4))
            q2, r2 = self.new(t), self.new(t)
            self.emit("ISETP", mods={"cmp": "GT", "t": cls}, pd=bpos, ra=rb, b=Imm(0), ps=(None, False))
            if step < 0:                   # remainder on the wrong side of zero: q -= 1, r += b
                self.emit("ISETP", mods={"cmp": "LT", "t": cls}, pd=x, ra=r, b=Imm(0), ps=(None, False))
                self.emit("ISETP", mods={"cmp": "GT", "t": cls}, pd=y, ra=r, b=Imm(0), ps=(None, False))
            else:                          # remainder as large as the divisor: q += 1, r -= b
                self.emit("ISETP", mods={"cmp": "GE", "t": cls}, pd=x, ra=r, b=rb, ps=(None, False))
                self.emit("ISETP", mods={"cmp": "LE", "t": cls}, pd=y, ra=r, b=rb, ps=(None, False))
            self.emit("ISETP", mods={"cmp": "NE", "t": cls}, pd=p, ra=rb, b=Imm(0), ps=(None, False))
            both = self.new(T.boolean)
            self.emit("PLOP", mods={"op": "AND"}, pd=x, ps=(x, False), pq=(bpos, False))    # divisor > 0
            self.emit("PLOP", mods={"op": "AND"}, pd=y, ps=(y, False), pq=(bpos, True))     # divisor < 0
            self.emit("PLOP", mods={"op": "OR"}, pd=both, ps=(x, False), pq=(y, False))
            self.emit("PLOP", mods={"op": "AND"}, pd=both, ps=(both, False), pq=(p, False))
            self.emit("IADD", mods=m64, rd=q2, ra=q, b=Imm(step & 0xFFFFFFFF))
            self.emit("IADD", mods=m64, rd=r2, ra=r, b=rb, neg="" if step < 0 else "b")
            nq, nr = self.new(t), self.new(t)
            self.emit("SEL64", rd=nq, ra=q2, b=q, ps=(both, False))
            self.emit("SEL64", rd=nr, ra=r2, b=r, ps=(both, False))
            q, r = nq, nr
        return q, r

    def op_div(self, v):
        a, b = v.args
        t = v.type
        if t.kind == "float":
            q = self._fdiv32(self.reg(a), b) if t.bits == 32 else self._fdiv64(self.reg(a), self.reg(b))
            r = self.new(t)
            self.emit("FRND", mods={"rnd": "FLOOR", "w": f"F{t.bits}"}, rd=r, b=q)
            return r
        n = ir.power_of_two(b)
        if n is None:
            return self._divmod(v)[0]
        r = self.new(t)
        mods = {"t": "U32" if t.kind == "uint" else "S32"}
        if t.bits == 64:
            mods["w"] = "64"
        self.emit("SHR", mods=mods, rd=r, ra=self.reg(a), b=Imm(n.bit_length() - 1))
        return r

    def op_mod(self, v):
        a, b = v.args
        t = v.type
        if t.kind == "float":
            floor = self.op_div(v)
            r = self.new(t)
            op, b_op = ("FFMA", self.operand_b(b)) if t.bits == 32 else ("DFMA", self.reg(b))
            self.emit(op, rd=r, ra=floor, b=b_op, rc=self.reg(a), neg="a")     # a - floor(a/b)*b
            return r
        n = ir.power_of_two(b)
        if n is None:
            return self._divmod(v)[1]
        r = self.new(t)
        mask = Imm(n - 1) if n <= 2**31 else self.const_u64(n - 1)     # an immediate's 32 bits sign-extend
        self.emit("LOP", mods={"op": "AND", **({"w": "64"} if t.bits == 64 else {})}, rd=r, ra=self.reg(a),
                  b=mask)
        return r

    # -- math ---------------------------------------------------------------------------------
    MUFU = {"exp2": "EX2", "log2": "LG2", "rcp": "RCP"}      # math functions whose MUFU name is not theirs

    def op_math(self, v):
        """What the hardware computes in one instruction (calls.py sends the rest of math to libdevice):
        fabs, floor, ceil and trunc in any float type, cuda.fma (FFMA, DFMA), and the special function
        unit's float32 approximations (MUFU)."""
        fn, t = v.attrs["fn"], v.type
        x = self.reg(v.args[0])
        r = self.new(t)
        if fn == "fma":
            _, y, z = v.args
            op, b_op = ("FFMA", self.operand_b(y)) if t.bits == 32 else ("DFMA", self.reg(y))
            self.emit(op, rd=r, ra=x, b=b_op, rc=self.reg(z))
        elif fn in ("floor", "ceil", "trunc", "rint"):
            self.emit("FRND", mods={"rnd": "RN" if fn == "rint" else fn.upper(), "w": f"F{t.bits}"}, rd=r, b=x)
        elif fn == "fabs" and t.bits == 64:
            self.emit("DADD", rd=r, ra=x, b=RZ64, abs_="a")     # |x| + 0: +0 for -0 (a select on x < 0 kept -0)
        elif fn == "fabs":
            self.emit("FMNMX", mods={"op": "MAX"}, rd=r, ra=x, b=x, neg="b")
        else:
            self.emit("MUFU", mods={"fn": self.MUFU.get(fn, fn.upper())}, rd=r, b=x)
        return r

    # -- memory -------------------------------------------------------------------------------
    def address(self, addr: ir.Value) -> tuple[VReg, int]:
        """A memory operand (base register, immediate offset) for an address value."""
        if addr.type == ir.ADDRESS:
            ptr, index = addr.args
            scale = addr.attrs["scale"]
            offset = 0
            if index.op is Op.ADD and index.args[1].op is Op.CONST:
                offset = index.args[1].attrs["value"] * scale
                index = index.args[0]
            if index.op is Op.CONST:
                offset += index.attrs["value"] * scale
                base = self.reg(ptr)
            else:
                key = (self.block.label, ptr, index, scale)
                base = self.addr_cache.get(key)
                if base is None:
                    base = self.addr_cache[key] = self.new(ir.ADDRESS)
                    wide = "WIDE" if index.type.bits == 32 else "64"
                    self.emit("IMAD", mods={"w": wide}, rd=base, ra=self.reg(index), b=Imm(scale),
                              rc=self.reg(ptr))
            if not -2**31 <= offset < 2**31:      # an instruction's offset is 32 bits, sign-extended: the rest
                far = self.new(ir.ADDRESS)         # goes into the base (it was cut to its low 32 bits)
                self.emit("IADD", mods={"w": "64"}, rd=far, ra=base, b=self.const_u64(offset % 2**64))
                return far, 0
            return base, offset
        if addr.op is Op.CONST:                   # shared memory: a byte offset
            return RZ32, addr.attrs["value"]
        if addr.op is Op.ADD and addr.args[1].op is Op.CONST:
            return self.reg(addr.args[0]), addr.args[1].attrs["value"]
        return self.reg(addr), 0

    def op_gaddr(self, v):
        base, offset = self.address(v)
        if offset == 0:
            return base
        r = self.new(ir.ADDRESS)
        self.emit("IADD", mods={"w": "64"}, rd=r, ra=base, b=Imm(offset & 0xFFFFFFFF))
        return r

    def op_load(self, v):
        space = v.attrs["space"]
        base, offset = self.address(v.args[0])
        t = v.type
        width = STORAGE_LOAD.get(v.attrs.get("storage")) or {1: "U8", 2: "U16", 8: "64"}.get(t.itemsize, "")
        r = self.new(t)
        dst = self.new(T.int32) if t == T.boolean else r
        if space == "global":
            self.emit("LDG", mods={"e": "E", "w": width}, rd=dst, ra=base, b=Imm(offset & 0xFFFFFFFF))
        else:
            if t == T.boolean:
                raise self.error(v, f"bool arrays in {space} memory are not supported yet")
            self.emit("LDS" if space == "shared" else "LDL", mods={"w": width}, rd=dst, ra=base,
                      b=Imm(offset & 0xFFFFFFFF))
        if t == T.boolean:
            self.emit("ISETP", mods={"cmp": "NE", "t": "U32"}, pd=r, ra=dst, b=Imm(0), ps=(None, False))
        return r

    def op_store(self, v):
        addr, value = v.args
        space = v.attrs["space"]
        base, offset = self.address(addr)
        t = value.type
        width = STORAGE_STORE.get(v.attrs.get("storage")) or {1: "U8", 2: "U16", 8: "64"}.get(t.itemsize, "")
        src = self.reg(value)
        if t == T.boolean:
            data = self.new(T.int32)
            self.emit("SEL", rd=data, ra=RZ32, b=Imm(1), ps=(src, True))
            src = data
        if space == "global":
            self.emit("STG", mods={"e": "E", "w": width}, ra=base, b=Imm(offset & 0xFFFFFFFF), rc=src)
        else:
            if t == T.boolean:
                raise self.error(v, f"bool arrays in {space} memory are not supported yet")
            self.emit("STS" if space == "shared" else "STL", mods={"w": width}, ra=base,
                      b=Imm(offset & 0xFFFFFFFF), rc=src)

    def op_barrier(self, v):
        self.emit("BAR", mods={"op": "SYNC"}, b=Imm(0))

    def op_vload(self, v):
        base, offset = self.address(v.args[0])
        r = self.new(v.type)
        width = "64" if r.width == 2 else "128"
        if v.attrs["space"] == "global":
            self.emit("LDG", mods={"e": "E", "w": width}, rd=r, ra=base, b=Imm(offset & 0xFFFFFFFF))
        else:
            self.emit("LDS" if v.attrs["space"] == "shared" else "LDL", mods={"w": width}, rd=r, ra=base,
                      b=Imm(offset & 0xFFFFFFFF))
        return r

    def op_vstore(self, v):
        addr, value = v.args
        base, offset = self.address(addr)
        src = self.reg(value)
        width = "64" if src.width == 2 else "128"
        if v.attrs["space"] == "global":
            self.emit("STG", mods={"e": "E", "w": width}, ra=base, b=Imm(offset & 0xFFFFFFFF), rc=src)
        else:
            self.emit("STS" if v.attrs["space"] == "shared" else "STL", mods={"w": width}, ra=base,
                      b=Imm(offset & 0xFFFFFFFF), rc=src)

    def op_vzero(self, v):
        r = self.new(v.type)
        self.emit("VZERO", rd=r)
        return r

    def op_vpack(self, v):
        # two pairs, then the quad of them (pseudo-instructions: codegen moves the words into place)
        if len(v.args) == 2:                   # a u32x2: one pair
            r = self.new(v.type)
            self.emit("PAIR", rd=r, ra=self.reg(v.args[0]), b=self.reg(v.args[1]))
            return r
        lo, hi = self.new(T.int64), self.new(T.int64)
        self.emit("PAIR", rd=lo, ra=self.reg(v.args[0]), b=self.reg(v.args[1]))
        self.emit("PAIR", rd=hi, ra=self.reg(v.args[2]), b=self.reg(v.args[3]))
        r = self.new(v.type)
        self.emit("QUAD", rd=r, ra=lo, b=hi)
        return r

    def op_vget(self, v):
        return Part(self.reg(v.args[0]), v.attrs["index"])

    def op_mma(self, v):
        a, b, c = (self.reg(x) for x in v.args)
        r = self.new(v.type)
        self.emit("HMMA", mods={"shape": "16816", "t": v.attrs["kind"]}, rd=r, ra=a, b=b, rc=c)
        return r

    def op_fence(self, v):
        self.emit("MEMBAR", mods={"scope": v.attrs["scope"]})

    def op_trap(self, v):
        self.emit("BPT", mods={"op": "TRAP"}, b=Imm(v.attrs["number"]))

    def op_atomic(self, v):
        addr, *values = v.args
        t, op = v.type, v.attrs["op"].upper()
        kind = {"int32": "S32", "uint32": "U32", "float32": "F32", "float64": "F64"}.get(t.name, "U64")
        base, offset = self.address(addr)
        data = self.reg(values[0])
        if op == "CAS":                      # compare and new value travel in a register pair (64-bit: a quad)
            data = self.new(T.u32x4 if t.bits == 64 else T.int64)
            self.emit("QUAD" if t.bits == 64 else "PAIR", rd=data, ra=self.reg(values[0]), b=self.reg(values[1]))
        r = self.new(t)
        self.emit("ATOMG" if v.attrs["space"] == "global" else "ATOMS", mods={"op": op, "t": kind}, rd=r, ra=base,
                  b=Imm(offset & 0xFFFFFFFF), rc=data)
        return r

    def op_shfl(self, v):
        value, lane = v.args
        r = self.new(v.type)
        op = "SHFL64" if v.type.bits == 64 else "SHFL"
        b = self.operand_b(lane)
        if isinstance(b, Const):                 # SHFL's B is a register or an immediate, not a constant-bank word
            b = self.reg(lane)
        self.emit(op, mods={"mode": v.attrs["mode"]}, rd=r, ra=self.reg(value), b=b)
        return r

    def op_vote(self, v):
        r = self.new(T.boolean)
        self.emit("VOTE", mods={"mode": v.attrs["mode"]}, rd=RZ32, pd=r, ps=(self.reg(v.args[0]), False))
        return r

    def op_ballot(self, v):
        r = VReg(self._bump(), 2)            # a 64-wide device writes the ballot's high half too
        self.emit("VOTE", mods={"mode": "ANY"}, rd=r, pd=None, ps=(self.reg(v.args[0]), False))
        if not v.attrs.get("own_half"):
            return r
        # PTX's warp is 32 lanes: on a 64-lane wave, lanes 32-63 take the ballot's high word, their own 32's
        lane, upper, out = self.new(T.int32), self.new(T.boolean), self.new(T.uint32)
        self.emit("S2R", rd=lane, b=Imm(int(SpecialRegister.LANEID)))
        self.emit("ISETP", mods={"cmp": "GE", "t": "U32"}, pd=upper, ra=lane, b=Imm(32), ps=(None, False))
        self.emit("SEL", rd=out, ra=Part(r, 1), b=Part(r, 0), ps=(upper, False))
        return out


def float_bits64(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


# Small integer elements (types.STORAGE): the load's extension, the store's width
STORAGE_LOAD = {"int8": "S8", "uint8": "U8", "int16": "S16", "uint16": "U16"}
STORAGE_STORE = {"int8": "U8", "uint8": "U8", "int16": "U16", "uint16": "U16"}

SIDE_EFFECTS = {"STG", "STS", "STL", "BAR", "BRA", "EXIT", "ATOMG", "ATOMS", "MEMBAR", "BPT"}


def remove_dead(blocks: list[MBlock]) -> None:
    """Drop instructions whose results nothing reads (e.g. a value every user took as an operand)."""
    while True:
        used = {id(r) for b in blocks for i in b.insts for r in i.uses()}
        removed = False
        for b in blocks:
            keep = [i for i in b.insts if i.op in SIDE_EFFECTS or any(id(r) in used for r in i.defs())]
            removed |= len(keep) != len(b.insts)
            b.insts = keep
        if not removed:
            return


def select(func: ir.Function) -> list[MBlock]:
    blocks = InstructionSelector(func).run()
    remove_dead(blocks)
    return blocks
