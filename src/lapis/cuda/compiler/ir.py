"""Layer 3 compiler: the typed SSA intermediate representation.

A `Function` is a list of `Block`s in layout order; each block holds phi nodes, then
instructions (`Value`s), then one terminator. Every value has a type and is defined once.
The layout order is structured (the join of an `if` after both arms, a loop's exit after
its body), which the simulated GPU relies on to reconverge diverged threads.

Ops (args are Values; attrs hold constants):
  const(value)                 param(offset)            sreg(name)          dim(name)
  add sub mul fdiv div mod min max and or xor shl shr  (binary, same-typed)
  neg  not  cmp(op)  select(cond, a, b)  cast  math(fn)
  gaddr(ptr, index, scale) -> 64-bit address     load(addr, space)   store(addr, value, space)
  barrier   phi   fence(scope)
  atomic(addr, value[, value], op, space) -> old value    shfl(value, lane, mode)
  vote(pred, mode) -> bool    ballot(pred) -> uint32
  vload(addr, space) -> fragment    vzero -> fragment    mma(a, b, c, kind) -> f32x4    vget(v, index)
Terminators: ("br", block) ("cbr", cond, then_block, else_block) ("ret",)
"""

from dataclasses import dataclass, field

from lapis.cuda.compiler import types as T

PURE = {"const", "param", "sreg", "dim", "add", "sub", "mul", "fdiv", "div", "mod", "min", "max", "and", "or", "xor",
        "shl", "shr", "neg", "not", "cmp", "select", "cast", "math", "gaddr", "saddr", "fma", "vzero", "vget", "mma"}
ADDRESS = T.Scalar("ptr64", "uint", 64)      # a 64-bit global address


class Value:
    __slots__ = ("id", "op", "type", "args", "attrs", "block", "line")

    def __init__(self, id, op, type, args=(), attrs=None, block=None, line=0):
        self.id, self.op, self.type, self.args = id, op, type, list(args)
        self.attrs, self.block, self.line = attrs or {}, block, line

    @property
    def name(self) -> str:
        return f"%{self.id}"

    def __repr__(self) -> str:
        return self.name

    def format(self) -> str:
        attrs = " ".join(f"{k}={v}" for k, v in self.attrs.items())
        if self.op == "phi":
            args = ", ".join(f"[{a.name}, {b.name}]" for a, b in zip(self.args, self.block.preds, strict=False))
        else:
            args = ", ".join(a.name for a in self.args)
        lhs = "" if self.type is None else f"{self.name}: {self.type} = "
        return f"{lhs}{self.op} {args}{' ' + attrs if attrs else ''}".rstrip()


@dataclass(eq=False)
class Block:
    name: str
    phis: list[Value] = field(default_factory=list)
    instrs: list[Value] = field(default_factory=list)
    term: tuple | None = None
    preds: list["Block"] = field(default_factory=list)

    @property
    def succs(self) -> list["Block"]:
        if self.term is None or self.term[0] == "ret":
            return []
        return [self.term[1]] if self.term[0] == "br" else [self.term[2], self.term[3]]

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
    _next: int = 0

    def new_value(self, op, type, args=(), attrs=None, block=None, line=0) -> Value:
        self._next += 1
        return Value(self._next, op, type, args, attrs, block, line)

    def format(self) -> str:
        lines = [f"kernel {self.name}({', '.join(f'{n}: {t}' for n, t in self.params)})"
                 f"  shared={self.shared_bytes} bytes, kernarg={self.kernarg_size} bytes"]
        for b in self.blocks:
            preds = f"   ; preds: {', '.join(p.name for p in b.preds)}" if b.preds else ""
            lines.append(f"{b.name}:{preds}")
            lines += ["    " + v.format() for v in b.phis + b.instrs]
            t = b.term
            if t is not None and t[0] == "br":
                lines.append(f"    br {t[1].name}")
            elif t is not None and t[0] == "cbr":
                lines.append(f"    cbr {t[1].name}, {t[2].name}, {t[3].name}")
            elif t is not None:
                lines.append("    ret")
        return "\n".join(lines)

    def uses(self) -> dict[Value, int]:
        count: dict[Value, int] = {}
        for b in self.blocks:
            for v in b.phis + b.instrs:
                for a in v.args:
                    count[a] = count.get(a, 0) + 1
            if b.term and b.term[0] == "cbr":
                count[b.term[1]] = count.get(b.term[1], 0) + 1
        return count
