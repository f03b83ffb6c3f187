"""Layer 3 compiler: the typed SSA intermediate representation.

A `Function` is a list of `Block`s in layout order; each block holds phi nodes, then
instructions (`Value`s), then one terminator. Every value has a type and is defined once.
The layout order is structured (the join of an `if` after both arms, a loop's exit after
its body), which the simulated GPU relies on to reconverge diverged threads.

Operations (`Op`; args are Values, attrs hold constants):
  const(value)                 param(offset)            sreg(name)          dim(name)
  add sub mul fdiv div mod min max and or xor shl shr  (binary, same-typed)
  neg  not  cmp(op)  select(cond, a, b)  cast  bitcast (the same bits as another type of their width)
  math(fn): what the hardware does in one instruction (sqrt sin cos exp2 log2 rcp in float32; fabs
            floor ceil trunc); the rest of math is libdevice's functions, inlined
  gaddr(ptr, index, scale) -> 64-bit address     load(addr, space)   store(addr, value, space)
  barrier   phi   fence(scope)
  atomic(addr, value[, value], op, space) -> old value    shfl(value, lane, mode)
  vote(pred, mode) -> bool    ballot(pred) -> uint32
  vload(addr, space) -> fragment    vzero -> fragment    mma(a, b, c, kind) -> f32x4    vget(v, index)
Terminators: Jump(target), Branch(cond, then, orelse), Return().
"""

from dataclasses import dataclass, field
from enum import Enum

from lapis.cuda.compiler import types as T


class Op(Enum):
    """Every operation of the IR; the value is the name the IR's text uses."""
    CONST = "const"
    PARAM = "param"
    SREG = "sreg"
    DIM = "dim"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    FDIV = "fdiv"
    DIV = "div"
    MOD = "mod"
    MIN = "min"
    MAX = "max"
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHL = "shl"
    SHR = "shr"
    NEG = "neg"
    NOT = "not"
    CMP = "cmp"
    SELECT = "select"
    CAST = "cast"
    BITCAST = "bitcast"
    MATH = "math"
    GADDR = "gaddr"
    LOAD = "load"
    STORE = "store"
    BARRIER = "barrier"
    FENCE = "fence"
    TRAP = "trap"
    PHI = "phi"
    ATOMIC = "atomic"
    SHFL = "shfl"
    VOTE = "vote"
    BALLOT = "ballot"
    VLOAD = "vload"
    VSTORE = "vstore"
    VZERO = "vzero"
    VGET = "vget"
    VPACK = "vpack"
    MMA = "mma"

    def __str__(self) -> str:
        return self.value


# Pure operations depend on their operands alone: CSE may merge them, hoisting may move them.
PURE = frozenset({Op.CONST, Op.PARAM, Op.SREG, Op.DIM, Op.ADD, Op.SUB, Op.MUL, Op.FDIV, Op.DIV, Op.MOD, Op.MIN,
                  Op.MAX, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.NEG, Op.NOT, Op.CMP, Op.SELECT, Op.CAST,
                  Op.BITCAST, Op.MATH, Op.GADDR, Op.VZERO, Op.VGET, Op.VPACK, Op.MMA})
# Operations kept even when nothing reads their result.
EFFECTS = frozenset({Op.STORE, Op.VSTORE, Op.BARRIER, Op.ATOMIC, Op.FENCE, Op.TRAP})
ADDRESS = T.Scalar("ptr64", "uint", 64)      # a 64-bit global address


class Value:
    __slots__ = ("id", "op", "type", "args", "attrs", "block", "line", "file")

    def __init__(self, id, op, type, args=(), attrs=None, block=None, line=0, file=None):
        self.id, self.op, self.type, self.args = id, op, type, list(args)
        # the source line it was made for, in `file` (None: the kernel's own file; an inlined device function's
        # values name the function's file), for errors and the code object's line table
        self.attrs, self.block, self.line, self.file = attrs or {}, block, line, file

    @property
    def name(self) -> str:
        return f"%{self.id}"

    def __repr__(self) -> str:
        return self.name

    def format(self) -> str:
        attrs = " ".join(f"{k}={v}" for k, v in self.attrs.items())
        if self.op is Op.PHI:
            args = ", ".join(f"[{a.name}, {b.name}]" for a, b in zip(self.args, self.block.preds, strict=False))
        else:
            args = ", ".join(a.name for a in self.args)
        lhs = "" if self.type is None else f"{self.name}: {self.type} = "
        return f"{lhs}{self.op} {args}{' ' + attrs if attrs else ''}".rstrip()


def power_of_two(v: Value) -> int | None:
    """The value of an integer constant that is a positive power of two (a multiply or a divide by it is a
    shift), else None."""
    if v.op is not Op.CONST or v.attrs["value"] <= 0 or v.attrs["value"] & (v.attrs["value"] - 1):
        return None
    return v.attrs["value"]


@dataclass(frozen=True, eq=False)
class Jump:
    """Go to `target`."""
    target: "Block"

    @property
    def succs(self) -> list["Block"]:
        return [self.target]

    def format(self) -> str:
        return f"br {self.target.name}"


@dataclass(frozen=True, eq=False)
class Branch:
    """Go to `then` where the bool `cond` holds, to `orelse` where it does not."""
    cond: Value
    then: "Block"
    orelse: "Block"

    @property
    def succs(self) -> list["Block"]:
        return [self.then, self.orelse]

    def format(self) -> str:
        return f"cbr {self.cond.name}, {self.then.name}, {self.orelse.name}"


@dataclass(frozen=True)
class Return:
    """The thread is done."""

    @property
    def succs(self) -> list["Block"]:
        return []

    def format(self) -> str:
        return "ret"


@dataclass(eq=False)
class Block:
    name: str
    phis: list[Value] = field(default_factory=list)
    instrs: list[Value] = field(default_factory=list)
    term: Jump | Branch | Return | None = None
    preds: list["Block"] = field(default_factory=list)

    @property
    def succs(self) -> list["Block"]:
        return [] if self.term is None else self.term.succs

    def __repr__(self) -> str:
        return self.name


@dataclass
class Function:
    name: str
    params: list            # (name, type) in order
    blocks: list[Block] = field(default_factory=list)
    shared_bytes: int = 0
    local_bytes: int = 0
    arg_layout: list = field(default_factory=list)
    kernarg_size: int = 0
    filename: str = "<kernel>"
    first_line: int = 0
    variable_types: dict = field(default_factory=dict)     # the user's variables and their types
    const_arrays: list = field(default_factory=list)       # cuda.const.array_like data, hidden arguments
    assertions: dict = field(default_factory=dict)         # trap number -> "file:line: assert <source>[, message]"
    prints: dict = field(default_factory=dict)             # print() number -> its items (see printing.py)
    _next: int = 0

    def new_value(self, op, type, args=(), attrs=None, block=None, line=0, file=None) -> Value:
        self._next += 1
        return Value(self._next, op, type, args, attrs, block, line, file)

    def format(self) -> str:
        lines = [f"kernel {self.name}({', '.join(f'{n}: {t}' for n, t in self.params)})"
                 f"  shared={self.shared_bytes} bytes, kernarg={self.kernarg_size} bytes"]
        for b in self.blocks:
            preds = f"   ; preds: {', '.join(p.name for p in b.preds)}" if b.preds else ""
            lines.append(f"{b.name}:{preds}")
            lines += ["    " + v.format() for v in b.phis + b.instrs]
            if b.term is not None:
                lines.append("    " + b.term.format())
        return "\n".join(lines)

    def uses(self) -> dict[Value, int]:
        count: dict[Value, int] = {}
        for b in self.blocks:
            for v in b.phis + b.instrs:
                for a in v.args:
                    count[a] = count.get(a, 0) + 1
            if isinstance(b.term, Branch):
                count[b.term.cond] = count.get(b.term.cond, 0) + 1
        return count
