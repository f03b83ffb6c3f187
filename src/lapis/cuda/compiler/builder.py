"""Layer 3 compiler: building typed SSA IR, the part of stage 1 that knows nothing of Python's AST.

An `IRBuilder` appends to an `ir.Function`: it makes and places blocks and ends them, keeps each
variable's definitions per block and reads them back in SSA form by the algorithm of Braun et
al. ("Simple and Efficient Construction of SSA Form", CC 2013): a read looks through the
block's predecessors, with phi nodes where paths join and, in a loop header not yet sealed
(its back edge unknown), an incomplete phi finished when the block is sealed. Its typed
arithmetic follows numba's rules (`types.py`) and does what keeps later stages' input small:
  - constants are Python values until they meet a run-time value (constant folding);
  - pure operations are numbered per block (local CSE);  x + c1 + c2 folds to x + (c1+c2).
The frontend (frontend.py) walks a kernel's AST and drives it.
"""

import math
import operator

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import Const, cast_constant, describe

_LOGIC = frozenset({Op.AND, Op.OR, Op.XOR})
_SHIFTS = frozenset({Op.SHL, Op.SHR})


def literal_type(x, other):
    """x's type as it meets a value of type `other`: an integer literal that the integer type `other` cannot hold
    is numba's type for it, int64 (uint64 from 2^63 up): a negative one meeting an unsigned type (u // -2 divides
    as int64, u < -1 is False), a large one meeting a narrow type (i + 2**34 with an int32 i is int64, where the
    literal once wrapped to 0); otherwise x's own (a weak literal then takes `other`'s type)."""
    if isinstance(x, Const) and x.type == T.WEAK_INT and isinstance(other, T.Scalar) and other.kind in ("int", "uint"):
        bits, signed = other.bits, other.kind == "int"
        low, high = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
        if not low <= x.value < high:
            return T.uint64 if x.value >= 1 << 63 else T.int64
    return x.type


class IRBuilder:
    """Builds one function; `filename`, `line` and `kernel` say where errors are (the frontend keeps
    them current)."""

    def __init__(self, func: ir.Function, var_types: dict, filename: str, line: int, kernel: str):
        self.func = func
        self.filename, self.line, self.kernel = filename, line, kernel
        self.var_types: dict[str, object] = var_types           # each variable's one type
        self.defs: dict[str, dict[ir.Block, ir.Value]] = {}
        self.sealed: set[ir.Block] = set()
        self.incomplete: dict[ir.Block, dict[str, ir.Value]] = {}
        self.cse: dict[tuple, ir.Value] = {}
        self.counter = 0
        self.current: ir.Block | None = None
        self.entry = self.new_block("entry")
        self.place(self.entry)
        self.seal(self.entry)

    def error(self, message: str) -> CompileError:
        return CompileError(message, self.filename, self.line, self.kernel)

    # -- blocks and SSA ---------------------------------------------------------------------------
    def new_block(self, hint: str) -> ir.Block:
        self.counter += 1
        return ir.Block(f"{hint}{self.counter}" if hint != "entry" else "entry")

    def place(self, block: ir.Block) -> None:
        self.func.blocks.append(block)
        self.current = block

    def jump(self, target: ir.Block) -> None:
        if self.current is not None:
            self.current.term = ir.Jump(target)
            target.preds.append(self.current)
            self.current = None

    def branch(self, cond, then: ir.Block, other: ir.Block) -> None:
        cond = self.materialize(self.to_bool(cond))
        self.current.term = ir.Branch(cond, then, other)
        then.preds.append(self.current)
        other.preds.append(self.current)
        self.current = None

    def write(self, name: str, block: ir.Block, value: ir.Value) -> None:
        self.defs.setdefault(name, {})[block] = value

    def read(self, name: str, block: ir.Block) -> ir.Value:
        found = self.defs.get(name, {}).get(block)
        if found is not None:
            return found
        t = self.var_types[name]
        if block not in self.sealed:
            value = self.func.new_value(Op.PHI, t, block=block)
            block.phis.append(value)
            self.incomplete.setdefault(block, {})[name] = value
        elif len(block.preds) == 1:
            value = self.read(name, block.preds[0])
        elif not block.preds:
            value = self.zero(t)            # read on a path where it was never assigned: zero
        else:
            value = self.func.new_value(Op.PHI, t, block=block)
            block.phis.append(value)
            self.write(name, block, value)
            value.args = [self.read(name, p) for p in block.preds]
        self.write(name, block, value)
        return value

    def seal(self, block: ir.Block) -> None:
        for name, phi in self.incomplete.pop(block, {}).items():
            phi.args = [self.read(name, p) for p in block.preds]
        self.sealed.add(block)

    def zero(self, t) -> ir.Value:
        key = (Op.CONST, t, "0")
        if key not in self.cse:
            if t.kind == "vector":
                v = self.func.new_value(Op.VZERO, t, block=self.entry)
            else:
                v = self.func.new_value(Op.CONST, t, attrs={"value": cast_constant(0, t)}, block=self.entry)
            self.entry.instrs.insert(0, v)
            self.cse[key] = v
        return self.cse[key]

    # -- emitting -------------------------------------------------------------------------------
    def emit(self, op: Op, t, args=(), /, **attrs) -> ir.Value:
        if op in ir.PURE:
            key = (id(self.current), op, t, tuple(a.id for a in args), tuple(sorted(attrs.items(), key=str)))
            if op is Op.CONST:
                key = (id(self.current), op, t, repr(attrs["value"]))
            found = self.cse.get(key)
            if found is not None:
                return found
        v = self.func.new_value(op, t, args, attrs, block=self.current, line=self.line, file=self.filename)
        self.current.instrs.append(v)
        if op in ir.PURE:
            self.cse[key] = v
        return v

    def materialize(self, x, t=None) -> ir.Value:
        """An IR value for x (a Const or Value), of type t if given."""
        if isinstance(x, Const):
            t = t or T.concrete(x.type)
            return self.emit(Op.CONST, t, value=cast_constant(x.value, t))
        if not isinstance(x, ir.Value):
            raise self.error(f"{describe(x)} cannot be used as a value here")
        return self.cast(x, t) if t is not None else x

    def typeof(self, x):
        if isinstance(x, Const | ir.Value):
            return x.type
        raise self.error(f"{describe(x)} is not a number")

    def cast(self, x, t):
        if isinstance(x, Const):
            return Const(cast_constant(x.value, t), t)
        if x.type == t:
            return x
        if t.kind == "vector" or x.type.kind == "vector":
            raise self.error(f"a {x.type} cannot become a {t}")
        if x.type == T.boolean and t != T.boolean:
            return self.emit(Op.SELECT, t, [x, self.materialize(Const(1, t)), self.materialize(Const(0, t))])
        if t == T.boolean:
            return self.compare("ne", x, Const(0, T.WEAK_INT))
        return self.emit(Op.CAST, t, [x])

    def to_bool(self, x):
        if isinstance(x, Const):
            return Const(bool(x.value), T.boolean)
        if self.typeof(x) == T.boolean:
            return x
        return self.compare("ne", x, Const(0, T.WEAK_INT))

    # -- arithmetic -----------------------------------------------------------------------------
    _FOLD = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.AND: operator.and_,
             Op.OR: operator.or_, Op.XOR: operator.xor, Op.SHL: operator.lshift, Op.SHR: operator.rshift,
             Op.MIN: min, Op.MAX: max}

    def binop(self, op: Op, a, b):
        ta, tb = self.typeof(a), self.typeof(b)
        if op not in _LOGIC | _SHIFTS:      # (~x is x ^ -1: a bit pattern of x's type)
            ta, tb = literal_type(a, tb), literal_type(b, ta)
        if op is Op.FDIV:
            t = T.unify(ta, tb)
            if t == T.WEAK_INT or (isinstance(t, T.Scalar) and t.kind != "float"):
                t = T.float64
        elif op in _LOGIC and ta == tb == T.boolean:
            t = T.boolean
        elif op in _SHIFTS:
            t = T.concrete(ta) if not isinstance(ta, T.Weak) or isinstance(tb, T.Weak) else tb
        else:
            t = T.unify(ta, tb) if op in (Op.MIN, Op.MAX) else T.binary(ta, tb)
        if isinstance(t, T.Scalar) and t.kind == "bool" and op not in _LOGIC:
            t = T.int64
        if op in _LOGIC | _SHIFTS and (t == T.WEAK_FLOAT or getattr(t, "kind", "") == "float"):
            raise self.error(f"bitwise operator on a float ({ta} and {tb})")
        if isinstance(a, Const) and isinstance(b, Const):
            return self.fold(op, a.value, b.value, t)
        t = T.concrete(t)
        a, b = self.cast(a, t), self.cast(b, t)
        if isinstance(a, Const) and op in (Op.ADD, Op.MUL, Op.MIN, Op.MAX, *_LOGIC):
            a, b = b, a          # constants on the right
        if t.kind in ("int", "uint") and isinstance(b, Const):
            simplified = self._simplify_int(op, a, b, t)
            if simplified is not None:
                return simplified
        return self.emit(op, t, [self.materialize(a, t), self.materialize(b, t)])

    def _simplify_int(self, op: Op, a: ir.Value, b: Const, t):
        if (op in (Op.ADD, Op.SUB, Op.OR, Op.XOR, *_SHIFTS) and b.value == 0) or (op is Op.MUL and b.value == 1):
            return a
        if op is Op.MUL and b.value == 0:
            return Const(0, t)
        if op in (Op.ADD, Op.SUB) and a.op is Op.ADD and a.args[1].op is Op.CONST:     # (x + c1) + c2
            c = a.args[1].attrs["value"] + (b.value if op is Op.ADD else -b.value)
            return self.binop(Op.ADD, a.args[0], Const(cast_constant(c, t), t))
        if op is Op.MUL and a.op is Op.ADD and a.args[1].op is Op.CONST:              # (x + c1) * c2
            return self.binop(Op.ADD, self.binop(Op.MUL, a.args[0], b),
                              Const(cast_constant(a.args[1].attrs["value"] * b.value, t), t))
        if op is Op.MUL and a.op is Op.MUL and a.args[1].op is Op.CONST:              # (x * c1) * c2
            return self.binop(Op.MUL, a.args[0], Const(cast_constant(a.args[1].attrs["value"] * b.value, t), t))
        if op is Op.SUB:
            return self.binop(Op.ADD, a, Const(cast_constant(-b.value, t), t))
        return None

    def fold(self, op: Op, x, y, t):
        if op is Op.FDIV:
            if y == 0:
                raise self.error("division by zero in a constant expression")
            return Const(x / y, t)
        if op in (Op.DIV, Op.MOD):
            if y == 0:
                raise self.error("division by zero in a constant expression")
            value = x // y if op is Op.DIV else x % y
            if isinstance(t, T.Scalar) and t.kind == "float":
                value = float(math.floor(x / y)) if op is Op.DIV else x - math.floor(x / y) * y
            return Const(value, t)
        value = self._FOLD[op](x, y)
        return Const(cast_constant(value, t) if isinstance(t, T.Scalar) else value, t)

    def compare(self, op: str, a, b):
        fn = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
              "ne": operator.ne}[op]
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(fn(a.value, b.value), T.boolean)
        ta, tb = self.typeof(a), self.typeof(b)
        if literal_type(a, tb) == T.int64 != ta or literal_type(b, ta) == T.int64 != tb:
            # an unsigned value and a negative literal: decided now, as numba's exact comparison decides it
            return Const(fn(0, b.value) if isinstance(b, Const) else fn(a.value, 0), T.boolean)
        t = T.concrete(T.unify(ta, tb))
        if t == T.boolean and op in ("eq", "ne"):
            x = self.emit(Op.XOR, T.boolean, [self.materialize(a), self.materialize(b)])
            return self.emit(Op.NOT, T.boolean, [x]) if op == "eq" else x
        if t == T.boolean:
            t = T.int32
        return self.emit(Op.CMP, T.boolean, [self.materialize(a, t), self.materialize(b, t)], op=op)

    def neg(self, x):
        t = self.typeof(x)
        if isinstance(x, Const):
            return Const(-x.value, t) if not isinstance(t, T.Scalar) else Const(cast_constant(-x.value, t), t)
        if t == T.boolean:
            x, t = self.cast(x, T.int64), T.int64
        return self.emit(Op.NEG, t, [x])

    def logical(self, op: Op, a, b):
        a, b = self.to_bool(a), self.to_bool(b)
        if isinstance(a, Const):
            return b if (a.value if op is Op.AND else not a.value) else a
        if isinstance(b, Const):
            return a if (b.value if op is Op.AND else not b.value) else b
        return self.emit(op, T.boolean, [a, b])
