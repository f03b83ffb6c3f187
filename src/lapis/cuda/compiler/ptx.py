"""Layer 3: the ptxas step: a PTX kernel translated into the compiler's typed SSA IR.

From there the kernel goes through the same passes, instruction selection, register allocation and
codegen as a Python kernel (`compile_function`), so PTX's unlimited virtual registers get a real
allocation and its resources and occupancy are worked out as for any kernel.

How the translation goes:
  - Each PTX register is a variable of the IR builder (builder.py), so SSA form, with phi nodes where
    paths join, comes from Braun et al.'s algorithm. Registers are typed by their `.reg` declaration;
    an instruction reads one as the type its suffix names (`add.s32` on a `.b32` register): the same
    bits, reinterpreted (a `bitcast` between ints and floats).
  - Statements are cut into basic blocks at labels, after branches and returns, and around a guarded
    (predicated) instruction other than a branch, which gets a block of its own behind a conditional
    branch. The blocks keep PTX's order, which NVRTC writes structured (an `if`'s join after both arms,
    a loop's exit after its body), as the simulated GPU needs for reconvergence.
  - Parameters are read from the kernarg segment at their C offsets; `.shared` variables get offsets
    in the block's shared memory (an `.extern` array, dynamic shared memory, after every static one).
  - `OPCODES` maps each PTX opcode to a translator; an opcode or modifier outside it is a CompileError
    naming the PTX line, never a guess.

Simplified (the docs say so too): directed rounding modifiers (.rm .rp .rz on add, mul, fma) round to
nearest, which CUDA's expf uses only to pick a reduction step; `.ftz` is ignored (subnormals are
kept); `sqrt.rn` is the special function unit's square root.
"""

import re
import struct

import numpy as np

from lapis import abi
from lapis.cuda.compiler import ir, printing
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.builder import IRBuilder
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.ptx_parse import TYPE_BYTES, Entry, Module, Statement, Variable
from lapis.cuda.compiler.values import Const

# The IR type an instruction's type suffix (or a register's declaration) computes in; 8- and 16-bit values live
# in 32-bit registers, as the hardware's do.
TYPES = {"pred": T.boolean, "b8": T.uint32, "u8": T.uint32, "s8": T.int32, "b16": T.uint32, "u16": T.uint32,
         "s16": T.int32, "b32": T.uint32, "u32": T.uint32, "s32": T.int32, "b64": T.uint64, "u64": T.uint64,
         "s64": T.int64, "f32": T.float32, "f64": T.float64, "f16": T.float16, "bf16": T.bfloat16}
# Two halves in a 32-bit register: their instructions run once per half (`_packed_halves`)
HALF2 = {"f16x2": "f16", "bf16x2": "bf16"}
# Loads and stores narrower than a register: the element type that widens or narrows them
STORAGE = {"u8": "uint8", "b8": "uint8", "s8": "int8", "u16": "uint16", "b16": "uint16", "s16": "int16"}
SPECIAL = {f"%{r}.{a}" for r in ("tid", "ctaid", "ntid", "nctaid") for a in "xyz"} | {"%laneid", "%warpid"}
ROUNDING = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"}
IGNORED = {"ftz", "sat", "approx", "full", "uni", "sync", "aligned", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt",
           "relaxed", "gpu", "cta", "sys", "volatile"} | ROUNDING


class PtxFunction(IRBuilder):
    """Builds one `.entry`'s IR."""

    def __init__(self, entry: Entry, module: Module, filename: str):
        self.entry_ptx, self.module = entry, module
        layout, offsets, offset = [], {}, 0
        for p in entry.params:
            offset = -(-offset // p.align) * p.align
            offsets[p.name] = offset
            layout.append({"kind": "scalar", "offset": offset, "dtype": p.type, "size": p.size})
            offset += p.size
        func = ir.Function(entry.name, [(p.name, TYPES.get(p.type, T.uint32)) for p in entry.params],
                           arg_layout=layout, kernarg_size=-(-offset // 8) * 8, filename=filename,
                           first_line=entry.line)
        super().__init__(func, {}, filename, entry.line, entry.name)
        self.ptx_name, self.ptx_line = filename, entry.line
        self.param_offsets = offsets
        self.local_symbols: set[str] = set()
        self.call_arguments: dict[str, ir.Value] = {}     # a call sequence's .param names -> their values
        self.call_results: dict[str, ir.Value] = {}
        self.symbols = self._shared_layout([*module.variables, *entry.variables])
        # module-scope .global and .const variables live in one device buffer per module and context (as
        # cuModuleLoad makes them), whose address the kernel takes as a hidden argument after its own
        self.globals, _ = globals_image(module, filename)
        if self.globals:
            offset = -(-offset // 8) * 8
            layout.append({"kind": "globals", "offset": offset, "dtype": "u64", "size": 8})
            func.kernarg_size = -(-(offset + 8) // 8) * 8
            self.globals_param = abi.KERNARG_CBANK_OFFSET + offset

    # -- errors, types, operands ----------------------------------------------------------------
    def refuse(self, what: str) -> CompileError:
        where = f" (PTX line {self.ptx_line})" if self.filename != self.ptx_name else ""
        return self.error(f"{what} is not supported by lapis's PTX assembler yet{where}")

    def at(self, s: Statement) -> None:
        """Values and errors from here on belong to s: its CUDA source line where `.loc` names one (compiled with
        -lineinfo), else its PTX line."""
        self.ptx_line = s.line
        if s.source is not None:
            number, self.line = s.source
            self.filename = self.module.files.get(number, f"<file {number}>")
        else:
            self.filename, self.line = self.ptx_name, s.line

    def _shared_layout(self, variables: list[Variable]) -> dict[str, int]:
        """Each shared and local variable's byte offset in its space: the static shared ones in order, then the
        extern (dynamic) ones; the local ones (a kernel's `__local_depot`, its stack) from 0."""
        symbols, offset = {}, 0
        for v in variables:
            if v.space == "shared" and v.size:
                offset = -(-offset // v.align) * v.align
                symbols[v.name] = offset
                offset += v.size
        self.func.shared_bytes = offset
        dynamic = -(-offset // 16) * 16
        for v in variables:
            if v.space == "shared" and not v.size:
                symbols[v.name] = dynamic
        local = 0
        for v in variables:
            if v.space == "local":
                local = -(-local // v.align) * v.align
                symbols[v.name] = local
                self.local_symbols.add(v.name)
                local += v.size
        self.func.local_bytes = -(-local // 16) * 16
        return symbols

    def register_type(self, name: str):
        kind = self.entry_ptx.registers.get(name) or self.entry_ptx.registers.get(name.rstrip("0123456789"))
        if kind is None:
            raise self.error(f"register {name} is not declared")
        if kind not in TYPES:
            raise self.refuse(f"a .{kind} register ({name})")
        return TYPES[kind]

    def as_type(self, v: ir.Value, t) -> ir.Value:
        """v's bits as type t: the same value for integers of one width, reinterpreted between ints and floats,
        converted between integer widths (cvt's job, and PTX's implicit widening of a 16-bit operand)."""
        if v.type == t:
            return v
        if v.type == T.boolean or t == T.boolean:
            raise self.error(f"a {v.type} cannot be used as a {t}")
        if (v.type.half and t.kind != "float" and t.bits == 32) or (t.half and v.type.kind != "float" and
                                                                     v.type.bits == 32):
            return self.emit(Op.BITCAST, t, [v])   # a half in the low bits of its 32-bit register
        if v.type.kind != "float" and t.kind != "float":
            return self.emit(Op.CAST, t, [v])
        if v.type.bits != t.bits:
            raise self.error(f"a {v.type.bits}-bit value cannot be read as a {t}")
        return self.emit(Op.BITCAST, t, [v])

    def value(self, text: str, t) -> ir.Value:
        """An operand as a value of type t: a register, an immediate, a special register or a symbol's address."""
        if text.startswith("%") and text not in SPECIAL:
            if text not in self.var_types:
                self.var_types[text] = self.register_type(text)
            return self.as_type(self.read(text, self.current), t)
        if text in SPECIAL:
            return self.as_type(self.special(text), t)
        if text in self.symbols:
            return self.materialize(Const(self.symbols[text], t), t)
        if text in self.globals:
            return self.as_type(self.global_address(text, 0), t)
        return self.materialize(Const(immediate(text, t, self), t), t)

    def hidden_pointer(self, name: str) -> ir.Value:
        """A hidden 64-bit pointer argument after the kernel's own (`name` in its argument layout; the launch
        passes it), laid out at its first use."""
        entry = next((e for e in self.func.arg_layout if e.get("name") == name), None)
        if entry is None:
            offset = -(-self.func.kernarg_size // 8) * 8
            entry = {"kind": "hidden", "name": name, "offset": offset, "dtype": "u64", "size": 8}
            self.func.arg_layout.append(entry)
            self.func.kernarg_size = offset + 8
        return self.emit(Op.PARAM, T.uint64, offset=abi.KERNARG_CBANK_OFFSET + entry["offset"])

    def global_address(self, name: str, offset: int) -> ir.Value:
        """The 64-bit address of a module variable (plus offset): the module's buffer, from the hidden argument."""
        base = self.emit(Op.PARAM, T.uint64, offset=self.globals_param)
        where = self.globals[name] + offset
        return self.emit(Op.ADD, T.uint64, [base, self.materialize(Const(where, T.uint64), T.uint64)]) if where \
            else base

    def special(self, name: str) -> ir.Value:
        reg, _, axis = name[1:].partition(".")
        if reg in ("tid", "ctaid", "laneid", "warpid"):
            return self.emit(Op.SREG, T.int32, name=name[1:])
        base = abi.CBANK_BLOCK_DIM if reg == "ntid" else abi.CBANK_GRID_DIM
        return self.emit(Op.DIM, T.int32, offset=base + 4 * "xyz".index(axis))

    def assign(self, text: str, v: ir.Value) -> None:
        if not text.startswith("%") or text in SPECIAL:
            raise self.error(f"cannot write to {text}")
        if text not in self.var_types:
            self.var_types[text] = self.register_type(text)
        self.write(text, self.current, self.as_type(v, self.var_types[text]))

    def address(self, text: str, space: str) -> ir.Value:
        """[register], [symbol], [param] or either plus an offset: a 64-bit global address, or a 32-bit shared one."""
        inner = text.strip()[1:-1].replace(" ", "")
        base, sign, rest = inner.partition("+") if "+" in inner else inner.partition("-")
        offset = int(sign + rest, 0) if rest else 0
        if base in self.symbols and (space == "shared") == (base not in self.local_symbols) and space != "global":
            return self.materialize(Const(self.symbols[base] + offset, T.int32), T.int32)
        if base in self.globals and space == "global":
            return self.global_address(base, offset)
        if not base.startswith("%"):
            raise self.refuse(f"the address of {base!r} in the {space} space")
        t = T.int32 if space in ("shared", "local") else T.uint64
        v = self.value(base, t)
        return self.emit(Op.ADD, t, [v, self.materialize(Const(offset, t), t)]) if offset else v

    # -- driving --------------------------------------------------------------------------------
    def build(self) -> ir.Function:
        segments = self._segments()
        first = segments[0][0]
        self.entry.term = ir.Jump(first)
        first.preds.append(self.entry)
        done: set[ir.Block] = {self.entry}
        for block, statements, ending in segments:
            self.place(block)
            for s in statements:
                self.at(s)
                self.translate(s)
            if statements:
                self.at(statements[-1])
            end = self.current                    # where the block's code ended (printf adds blocks of its own)
            if end is not block:
                for succ in (ending[2:] if ending[0] == "branch" else ending[1:2] if ending[0] == "jump" else ()):
                    succ.preds[succ.preds.index(block)] = end
            self._terminate(end, ending)
            done.add(block)
            for b in [b for b, _, _ in segments if b not in self.sealed and all(p in done for p in b.preds)]:
                self.seal(b)
        for b, _, _ in segments:
            if b not in self.sealed:
                self.seal(b)
        return self.func

    def _segments(self) -> list[tuple[ir.Block, list[Statement], tuple]]:
        """The body cut into (block, statements, ending) in PTX's order; an ending is ("jump", target),
        ("branch", guard, target, fall-through) or ("return",), and the edges are recorded as each block's preds."""
        labels: dict[str, ir.Block] = {}
        for s in self.entry_ptx.body:
            if s.label is not None:
                labels[s.label] = ir.Block(s.label)
        segments: list[list] = []
        tails: list[list] = []
        current = [ir.Block("ptx0"), [], None]

        def close(ending, then: ir.Block | None = None):
            nonlocal current
            current[2] = ending
            segments.append(current)
            current = [then or ir.Block(f"ptx{len(segments)}"), [], None]

        for s in self.entry_ptx.body:
            if s.label is not None:
                close(("jump", labels[s.label]), labels[s.label])
                continue
            name = s.parts[0]
            if name == "bra":
                target = labels.get(s.operands[0])
                if target is None:
                    raise CompileError(f"branch to an unknown label {s.operands[0]!r}", self.filename, s.line,
                                       self.kernel)
                close(("branch", s.guard, target) if s.guard else ("jump", target))
            elif name in ("ret", "exit"):
                if s.guard:                       # the lanes whose guard holds go to a return at the end
                    done = ir.Block(f"ret{len(segments)}")
                    tails.append([done, [], ("return",)])
                    close(("branch", s.guard, done))
                else:
                    close(("return",))
            elif s.guard:
                guarded = ir.Block(f"guarded{len(segments)}")
                close(("branch", s.guard, guarded), guarded)
                current[1].append(Statement(s.line, s.opcode, s.operands, None, source=s.source))
                close(("jump", None))
            else:
                current[1].append(s)
        close(("return",))
        segments += tails
        blocks = [seg[0] for seg in segments]
        for i, (block, _, ending) in enumerate(segments):
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            if ending[0] == "jump":
                target = ending[1] or after
                segments[i][2] = ("jump", target)
                target.preds.append(block)
            elif ending[0] == "branch":
                segments[i][2] = (*ending, after)
                ending[2].preds.append(block)
                after.preds.append(block)
        # a block no path reaches (code after an unconditional branch or return, with no label) is dropped
        reached, stack = {blocks[0]}, [segments[0]]
        by_block = {seg[0]: seg for seg in segments}
        while stack:
            ending = stack.pop()[2]
            for b in ending[2:] if ending[0] == "branch" else ending[1:2] if ending[0] == "jump" else ():
                if b not in reached:
                    reached.add(b)
                    stack.append(by_block[b])
        for block in blocks:
            block.preds = [p for p in block.preds if p in reached]
        return [tuple(seg) for seg in segments if seg[0] in reached]

    def _terminate(self, block: ir.Block, ending: tuple) -> None:
        if ending[0] == "jump":
            block.term = ir.Jump(ending[1])
        elif ending[0] == "return":
            block.term = ir.Return()
        else:
            (register, negated), target, after = ending[1], ending[2], ending[3]
            cond = self.value(register, T.boolean)
            block.term = ir.Branch(cond, after, target) if negated else ir.Branch(cond, target, after)
        self.current = None

    def translate(self, s: Statement) -> None:
        handler = OPCODES.get(s.parts[0])
        if handler is None:
            raise self.refuse(f"the PTX instruction {s.opcode!r}")
        if any(p in HALF2 for p in s.parts) and s.parts[0] in PACKED:
            _packed_halves(self, s, handler)
        else:
            handler(self, s)


def globals_image(module: Module, filename: str) -> tuple[dict[str, int], bytes]:
    """The module's .global and .const variables laid out in one buffer: each one's offset, and the buffer's
    first bytes (their initializers; zeros where there are none)."""
    offsets, image = {}, bytearray()
    for v in module.variables:
        if v.space not in ("global", "const"):
            continue
        start = -(-len(image) // v.align) * v.align
        image.extend(bytes(start - len(image)))
        offsets[v.name] = start
        data = bytes(v.size)
        if v.init is not None:
            dtype = INIT_DTYPES.get(v.kind)
            t = TYPES.get(v.kind, T.uint32)
            try:
                values = [immediate(x, t, None) for x in v.init]
            except ValueError:
                raise CompileError(f"the initializer of {v.name!r} is not a list of numbers (an address in an "
                                   "initializer is not supported by lapis's PTX assembler yet)", filename, v.line) \
                    from None
            if dtype is None or len(values) * TYPE_BYTES[v.kind] > v.size:
                raise CompileError(f"cannot read the initializer of {v.name!r}", filename, v.line)
            if t.kind == "float":
                raw = np.array(values, np.float64).astype(dtype)
            else:                                   # integers wrap to the element's width, as C's do
                raw = np.array([int(x) & (2**64 - 1) for x in values], np.uint64).astype(dtype)
            data = raw.tobytes() + bytes(v.size - raw.nbytes)
        image.extend(data)
    return offsets, bytes(image)


INIT_DTYPES = {k: np.dtype(v) for k, v in {
    "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16, "s16": np.int16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "b64": np.uint64, "u64": np.uint64, "s64": np.int64,
    "f32": np.float32, "f64": np.float64}.items()}


def immediate(text: str, t, fn: PtxFunction | None):
    """A PTX immediate: 0fXXXXXXXX (float32 bits), 0dXXXXXXXXXXXXXXXX (float64 bits), an integer (decimal,
    hex, octal), or a decimal float."""
    try:
        if text[:2] in ("0f", "0F") and len(text) == 10:
            return struct.unpack("<f", int(text[2:], 16).to_bytes(4, "little"))[0]
        if text[:2] in ("0d", "0D") and len(text) == 18:
            return struct.unpack("<d", int(text[2:], 16).to_bytes(8, "little"))[0]
        value = int(text.rstrip("U"), 0)
        return float(value) if t.kind == "float" else value
    except ValueError:
        try:
            return float(text)
        except ValueError:
            if fn is None:
                raise
            raise fn.error(f"cannot read the operand {text!r}") from None


def _kind(s: Statement, fn: PtxFunction, index: int = -1):
    """The IR type an instruction computes in: its last (or `index`th) type modifier."""
    types = [p for p in s.parts[1:] if p in TYPES]
    if not types:
        raise fn.error(f"{s.opcode} names no type")
    return TYPES[types[index]], types[index]


def _check(s: Statement, fn: PtxFunction, allowed: set) -> None:
    for p in s.parts[1:]:
        if p not in TYPES and p not in IGNORED and p not in allowed:
            raise fn.refuse(f"the modifier .{p} of {s.opcode}")


# -- instructions ---------------------------------------------------------------------------------
_BINARY = {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "min": Op.MIN, "max": Op.MAX, "and": Op.AND,
           "or": Op.OR, "xor": Op.XOR, "shl": Op.SHL, "shr": Op.SHR, "div": Op.DIV, "rem": Op.MOD}


def _binary(fn: PtxFunction, s: Statement) -> None:
    name = s.parts[0]
    _check(s, fn, {"lo", "wide", "hi", "cc"})
    t, _ = _kind(s, fn)
    d, a, b = s.operands
    if "cc" in s.parts or "hi" in s.parts and t.bits == 64:
        raise fn.refuse(f"{s.opcode}")
    if "hi" in s.parts:                           # the high word of the 64-bit product
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        product = fn.emit(Op.MUL, wide, [x, y])
        fn.assign(d, fn.as_type(fn.emit(Op.SHR, wide, [product, fn.materialize(Const(32, wide), wide)]), t))
        return
    if "wide" in s.parts:                         # mul.wide: the product of two 32-bit values, in 64 bits
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        fn.assign(d, fn.emit(Op.MUL, wide, [x, y]))
        return
    if name in ("shl", "shr"):                    # the amount is a u32 whatever the value's width
        x = fn.value(a, t)
        fn.assign(d, fn.emit(_BINARY[name], t, [x, fn.as_type(fn.value(b, T.uint32), t)]))
        return
    x, y = fn.value(a, t), fn.value(b, t)
    if name == "div" and t.kind == "float":
        fn.assign(d, fn.emit(Op.FDIV, t, [x, y]))
    elif name in ("div", "rem") and t.kind == "int":
        fn.assign(d, _truncating(fn, name, x, y, t))
    else:
        fn.assign(d, fn.emit(_BINARY[name], t, [x, y]))


def _truncating(fn: PtxFunction, name: str, x: ir.Value, y: ir.Value, t) -> ir.Value:
    """C's signed division and remainder (toward zero) from the IR's floor division and modulo: where the
    remainder is not 0 and its sign differs from x's, the quotient is one more and the remainder one y less."""
    q, r = fn.emit(Op.DIV, t, [x, y]), fn.emit(Op.MOD, t, [x, y])
    zero = fn.materialize(Const(0, t), t)
    nonzero = fn.emit(Op.CMP, T.boolean, [r, zero], op="ne")
    differ = fn.emit(Op.CMP, T.boolean, [fn.emit(Op.XOR, t, [r, x]), zero], op="lt")
    fix = fn.emit(Op.AND, T.boolean, [nonzero, differ])
    if name == "div":
        return fn.emit(Op.SELECT, t, [fix, fn.emit(Op.ADD, t, [q, fn.materialize(Const(1, t), t)]), q])
    return fn.emit(Op.SELECT, t, [fix, fn.emit(Op.SUB, t, [r, y]), r])


def _mad(fn: PtxFunction, s: Statement) -> None:
    _check(s, fn, {"lo", "wide"})
    t, _ = _kind(s, fn)
    d, a, b, c = s.operands
    if t.kind == "float":
        fn.assign(d, fn.emit(Op.MATH, t, [fn.value(a, t), fn.value(b, t), fn.value(c, t)], fn="fma"))
        return
    if "wide" in s.parts:
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        fn.assign(d, fn.emit(Op.ADD, wide, [fn.emit(Op.MUL, wide, [x, y]), fn.value(c, wide)]))
        return
    fn.assign(d, fn.emit(Op.ADD, t, [fn.emit(Op.MUL, t, [fn.value(a, t), fn.value(b, t)]), fn.value(c, t)]))


def _unary(fn: PtxFunction, s: Statement) -> None:
    _check(s, fn, set())
    t, _ = _kind(s, fn)
    d, a = s.operands
    x, name = fn.value(a, t), s.parts[0]
    if name == "neg":
        fn.assign(d, fn.emit(Op.NEG, t, [x]))
    elif name == "not":
        fn.assign(d, _invert(fn, x))
    elif t.kind == "float":                        # abs
        fn.assign(d, fn.emit(Op.MATH, t, [x], fn="fabs"))
    else:
        zero = fn.materialize(Const(0, t), t)
        fn.assign(d, fn.emit(Op.SELECT, t, [fn.emit(Op.CMP, T.boolean, [x, zero], op="lt"),
                                             fn.emit(Op.NEG, t, [x]), x]))


def _invert(fn: PtxFunction, x: ir.Value) -> ir.Value:
    """~x of an integer (the IR's not is for bools): x ^ all ones."""
    return fn.emit(Op.XOR, x.type, [x, fn.materialize(Const((1 << x.type.bits) - 1, x.type), x.type)])


_MATH = {"ex2": "exp2", "lg2": "log2", "sin": "sin", "cos": "cos", "sqrt": "sqrt", "rsqrt": "rsqrt"}


def _math(fn: PtxFunction, s: Statement) -> None:
    _check(s, fn, set())
    t, _ = _kind(s, fn)
    d, a = s.operands
    name, x = s.parts[0], fn.value(a, t)
    if name == "rcp" or (name == "sqrt" and t == T.float64):
        if name == "sqrt":
            raise fn.refuse("sqrt.f64")
        fn.assign(d, fn.emit(Op.FDIV, t, [fn.materialize(Const(1.0, t), t), x]))
    elif name == "rsqrt":
        root = fn.emit(Op.MATH, t, [x], fn="sqrt")
        fn.assign(d, fn.emit(Op.FDIV, t, [fn.materialize(Const(1.0, t), t), root]))
    else:
        if t != T.float32:
            raise fn.refuse(f"{s.opcode}")
        fn.assign(d, fn.emit(Op.MATH, t, [x], fn=_MATH[name]))


def _fma(fn: PtxFunction, s: Statement) -> None:
    _check(s, fn, set())
    t, _ = _kind(s, fn)
    d, a, b, c = s.operands
    fn.assign(d, fn.emit(Op.MATH, t, [fn.value(a, t), fn.value(b, t), fn.value(c, t)], fn="fma"))


def _mov(fn: PtxFunction, s: Statement) -> None:
    t, _ = _kind(s, fn)
    d, a = s.operands
    if a.startswith("{"):                         # pack: {low, high} into one register of twice their width
        fn.assign(d, _pack(fn, [fn.value(x, T.uint32 if t.bits == 64 else T.uint32) for x in _elements(a)], t))
    elif d.startswith("{"):                       # unpack
        whole = fn.value(a, T.uint64 if t.bits == 64 else T.uint32)
        names = _elements(d)
        for i, name in enumerate(names):
            if name != "_":
                fn.assign(name, _part(fn, whole, i, len(names)))
    else:
        fn.assign(d, fn.value(a, t))


def _pack(fn: PtxFunction, parts: list[ir.Value], t) -> ir.Value:
    """Equal parts (their low bits) side by side in a register of type t, the first lowest."""
    ut = T.uint64 if t.bits == 64 else T.uint32
    width = t.bits // len(parts)
    out = None
    for i, x in enumerate(parts):
        x = fn.as_type(x, ut)
        if width < ut.bits:
            x = fn.emit(Op.AND, ut, [x, fn.materialize(Const((1 << width) - 1, ut), ut)])
        if i:
            x = fn.emit(Op.SHL, ut, [x, fn.materialize(Const(i * width, ut), ut)])
        out = x if out is None else fn.emit(Op.OR, ut, [out, x])
    return out


def _part(fn: PtxFunction, whole: ir.Value, i: int, count: int) -> ir.Value:
    """Part i of `count` equal parts of a register (zero-extended in a 32-bit register)."""
    width = whole.type.bits // count
    x = fn.emit(Op.SHR, whole.type, [whole, fn.materialize(Const(i * width, whole.type), whole.type)]) if i else whole
    x = fn.as_type(x, T.uint32) if whole.type.bits == 64 else x
    return fn.emit(Op.AND, T.uint32, [x, fn.materialize(Const((1 << width) - 1, T.uint32), T.uint32)]) \
        if width < 32 else x


def _packed_halves(fn: PtxFunction, s: Statement, handler) -> None:
    """An f16x2 or bf16x2 instruction: the same instruction on each half of its operands (the low halves, then
    the high ones), through registers of its own, and the two results packed."""
    kind = next(p for p in s.parts if p in HALF2)
    half = TYPES[HALF2[kind]]
    d, *sources = s.operands
    scalar = s.opcode.replace(kind, HALF2[kind])
    results = []
    for lane in (0, 1):
        names = []
        for i, operand in enumerate(sources):
            name = f"%__half{lane}_{i}"
            fn.var_types[name] = half
            fn.write(name, fn.current, fn.as_type(_part(fn, fn.value(operand, T.uint32), lane, 2), half))
            names.append(name)
        out = f"%__half{lane}_out"
        fn.var_types[out] = half
        handler(fn, Statement(s.line, scalar, [out, *names], source=s.source))
        results.append(fn.read(out, fn.current))
    fn.assign(d, _pack(fn, results, T.uint32))


def _cvta(fn: PtxFunction, s: Statement) -> None:
    """Generic and global addresses are the same virtual addresses here; a generic shared address is not. A
    generic address of local memory stays its local offset: printf's argument buffer is the one use (`_call`)."""
    if "shared" in s.parts:
        raise fn.refuse(f"{s.opcode} (a generic address of shared memory)")
    t, _ = _kind(s, fn)
    d, a = s.operands
    fn.assign(d, fn.value(a, t))


# ordered comparisons; the unordered ones (ltu, ...) are the negation of the ordered opposite
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "lo": "lt", "ls": "le",
            "hi": "gt", "hs": "ge"}
_UNORDERED = {"ltu": "ge", "leu": "gt", "gtu": "le", "geu": "lt", "equ": "ne"}
_COMBINE = {"and": Op.AND, "or": Op.OR, "xor": Op.XOR}


def _compare(fn: PtxFunction, op: str, x: ir.Value, y: ir.Value, t) -> ir.Value:
    def cmp(o):
        return fn.emit(Op.CMP, T.boolean, [x, y], op=o)
    if t.kind != "float":
        return cmp(_COMPARE[op])
    if op == "ne":                       # ordered: false where either is NaN (the IR's ne is unordered)
        return fn.emit(Op.OR, T.boolean, [cmp("lt"), cmp("gt")])
    if op == "equ":
        return fn.emit(Op.NOT, T.boolean, [fn.emit(Op.OR, T.boolean, [cmp("lt"), cmp("gt")])])
    if op == "neu":
        return cmp("ne")
    if op in _UNORDERED:
        return fn.emit(Op.NOT, T.boolean, [cmp(_UNORDERED[op])])
    if op in ("num", "nan"):
        both = fn.emit(Op.AND, T.boolean, [fn.emit(Op.CMP, T.boolean, [x, x], op="eq"),
                                           fn.emit(Op.CMP, T.boolean, [y, y], op="eq")])
        return both if op == "num" else fn.emit(Op.NOT, T.boolean, [both])
    return cmp(_COMPARE[op])


def _setp(fn: PtxFunction, s: Statement) -> None:
    op = s.parts[1]
    if op not in _COMPARE and op not in _UNORDERED and op not in ("neu", "num", "nan"):
        raise fn.refuse(f"the comparison .{op} of {s.opcode}")
    t, _ = _kind(s, fn)
    d, a, b, *rest = s.operands
    p = _compare(fn, op, fn.value(a, t), fn.value(b, t), t)
    combine = next((c for c in s.parts[2:] if c in _COMBINE), None)
    if combine:
        q = rest[0]
        negated = q.startswith("!")
        qv = fn.value(q.lstrip("!"), T.boolean)
        if negated:
            qv = fn.emit(Op.NOT, T.boolean, [qv])
        p = fn.emit(_COMBINE[combine], T.boolean, [p, qv])
    first, _, second = d.partition("|")
    fn.assign(first, p)
    if second:
        fn.assign(second, fn.emit(Op.NOT, T.boolean, [p]))


def _selp(fn: PtxFunction, s: Statement) -> None:
    t, _ = _kind(s, fn)
    d, a, b, c = s.operands
    fn.assign(d, fn.emit(Op.SELECT, t, [fn.value(c, T.boolean), fn.value(a, t), fn.value(b, t)]))


def _predicate_logic(fn: PtxFunction, s: Statement) -> None:
    """and/or/xor/not on .pred (on other types they are _binary's and _unary's)."""
    if s.parts[-1] != "pred":
        (_unary if s.parts[0] == "not" else _binary)(fn, s)
        return
    d, *args = s.operands
    values = [fn.emit(Op.NOT, T.boolean, [fn.value(a[1:], T.boolean)]) if a.startswith("!")
              else fn.value(a, T.boolean) for a in args]
    if s.parts[0] == "not":
        fn.assign(d, fn.emit(Op.NOT, T.boolean, values))
    else:
        fn.assign(d, fn.emit(_COMBINE[s.parts[0]], T.boolean, values))


def _cvt(fn: PtxFunction, s: Statement) -> None:
    if any(p in HALF2 for p in s.parts):          # cvt.rn.f16x2.f32 d, a, b: a's half high, b's low
        kind = next(p for p in s.parts if p in HALF2)
        d, a, b = s.operands
        halves = [fn.emit(Op.CAST, TYPES[HALF2[kind]], [fn.value(x, T.float32)]) for x in (b, a)]
        fn.assign(d, _pack(fn, halves, T.uint32))
        return
    types = [p for p in s.parts[1:] if p in TYPES]
    _check(s, fn, set())
    if len(types) != 2:
        raise fn.error(f"{s.opcode} needs a destination and a source type")
    (dt, dname), (st, sname) = (TYPES[types[0]], types[0]), (TYPES[types[1]], types[1])
    d, a = s.operands
    x = fn.value(a, st)
    if sname in STORAGE:                          # from a narrow integer: its low bits, extended
        x = _narrow(fn, x, sname)
    rounding = next((p for p in s.parts[1:] if p in ROUNDING), None)
    if st.kind == "float" and dt.kind == "float" and rounding in ("rni", "rmi", "rpi", "rzi"):
        x = fn.emit(Op.MATH, st, [x], fn={"rni": "rint", "rmi": "floor", "rpi": "ceil", "rzi": "trunc"}[rounding])
    elif st.kind == "float" and dt.kind != "float" and rounding in ("rni", "rmi", "rpi"):
        x = fn.emit(Op.MATH, st, [x], fn={"rni": "rint", "rmi": "floor", "rpi": "ceil"}[rounding])
    v = fn.as_type(x, dt) if dt.kind != "float" and st.kind != "float" else \
        (x if dt == st else fn.emit(Op.CAST, dt, [x]))
    if "sat" in s.parts and dt.kind == "float":   # clamped to [0, 1] (NaN to 0)
        v = fn.emit(Op.MIN, dt, [fn.emit(Op.MAX, dt, [v, fn.materialize(Const(0.0, dt), dt)]),
                                 fn.materialize(Const(1.0, dt), dt)])
    if dname in STORAGE:
        v = _narrow(fn, v, dname)
    fn.assign(d, v)


def _narrow(fn: PtxFunction, x: ir.Value, kind: str) -> ir.Value:
    """x's low 8 or 16 bits, zero- or sign-extended to its 32-bit register."""
    bits = TYPE_BYTES[kind] * 8
    t = x.type
    if kind.startswith("s"):
        shift = fn.materialize(Const(32 - bits, T.int32), T.int32)
        wide = fn.as_type(x, T.int32)
        return fn.emit(Op.SHR, T.int32, [fn.emit(Op.SHL, T.int32, [wide, shift]), shift])
    return fn.emit(Op.AND, t, [x, fn.materialize(Const((1 << bits) - 1, t), t)])


_SPACES = {"global": "global", "shared": "shared", "param": "param", "local": "local", "const": "global"}


def _space(fn: PtxFunction, s: Statement) -> str:
    spaces = [p for p in s.parts[1:] if p in ("global", "shared", "param", "local", "const")]
    return _SPACES[spaces[0]] if spaces else "global"    # a generic address: a global one here (.const: global
    #                                                      memory the module's buffer holds)


def _vector(s: Statement) -> int:
    """The element count of a vector load or store (.v2, .v4), or 0."""
    return next((int(p[1:]) for p in s.parts if p in ("v2", "v4", "v8")), 0)


def _elements(text: str) -> list[str]:
    """The registers (or immediates) of a vector operand {a, b, ...}; `_` is a lane nobody reads."""
    return [x.strip() for x in text.strip()[1:-1].split(",")]


def _offset(fn: PtxFunction, addr: ir.Value, offset: int) -> ir.Value:
    return fn.emit(Op.ADD, addr.type, [addr, fn.materialize(Const(offset, addr.type), addr.type)]) if offset else addr


def _ld(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    t, kind = _kind(s, fn)
    d, a = s.operands
    if (count := _vector(s)) and space != "param":
        addr = fn.address(a, space)
        names = _elements(d)
        if t.bits == 32 and kind not in STORAGE and count in (2, 4):      # one 64- or 128-bit load
            whole = fn.emit(Op.VLOAD, T.u32x2 if count == 2 else T.u32x4, [addr], space=space)
            for i, name in enumerate(names):
                if name != "_":
                    fn.assign(name, fn.as_type(fn.emit(Op.VGET, T.uint32, [whole], index=i), t))
            return
        for i, name in enumerate(names):                                  # else one load per element
            fn.assign(name, _load(fn, _offset(fn, addr, i * TYPE_BYTES[kind]), space, t, kind))
        return
    if space == "param":
        name = a.strip()[1:-1]
        base, _, off = name.partition("+")
        if base in fn.call_results:               # a call's return value
            fn.assign(d, fn.as_type(fn.call_results[base], t))
            return
        if base not in fn.param_offsets:
            raise fn.error(f"{base!r} is not a parameter of {fn.kernel}")
        offset = abi.KERNARG_CBANK_OFFSET + fn.param_offsets[base] + (int(off, 0) if off else 0)
        v = fn.emit(Op.PARAM, t, offset=offset)
        fn.assign(d, _narrow(fn, v, kind) if kind in STORAGE else v)
        return
    fn.assign(d, _load(fn, fn.address(a, space), space, t, kind))


def _load(fn: PtxFunction, addr: ir.Value, space: str, t, kind: str) -> ir.Value:
    if kind in STORAGE:
        return fn.as_type(fn.emit(Op.LOAD, T.int32, [addr], space=space, storage=STORAGE[kind]), t)
    return fn.emit(Op.LOAD, t, [addr], space=space)


def _st(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    if space == "param":                          # an argument of the call that follows
        a, v = s.operands
        fn.call_arguments[a.strip()[1:-1].split("+")[0]] = fn.value(v, _kind(s, fn)[0])
        return
    t, kind = _kind(s, fn)
    a, v = s.operands
    addr = fn.address(a, space)
    if count := _vector(s):
        values = [fn.value(x, t) for x in _elements(v)]
        if t.bits == 32 and kind not in STORAGE and count in (2, 4):     # one 64- or 128-bit store
            words = [fn.as_type(x, T.float32 if count == 4 else T.uint32) for x in values]
            whole = fn.emit(Op.VPACK, T.f32x4 if count == 4 else T.u32x2, words)
            fn.emit(Op.VSTORE, None, [addr, whole], space=space)
            return
        for i, x in enumerate(values):
            _store(fn, _offset(fn, addr, i * TYPE_BYTES[kind]), x, space, kind)
        return
    _store(fn, addr, fn.value(v, t), space, kind)


def _store(fn: PtxFunction, addr: ir.Value, x: ir.Value, space: str, kind: str) -> None:
    if kind in STORAGE:
        fn.emit(Op.STORE, None, [addr, fn.as_type(x, T.int32)], space=space, storage=STORAGE[kind])
    else:
        fn.emit(Op.STORE, None, [addr, x], space=space)


_ATOMIC = {"add": "add", "min": "min", "max": "max", "exch": "exch", "cas": "cas"}


_CAS_UPDATES = {"and", "or", "xor", "inc", "dec"}      # atomics the hardware has no instruction for: a CAS loop


def _atom(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    op = next((p for p in s.parts[1:] if p in _ATOMIC or p in _CAS_UPDATES), None)
    if op is None:
        raise fn.refuse(f"{s.opcode}")
    t, kind = _kind(s, fn)
    if kind in ("b32", "b64") and op in ("min", "max", "add"):
        raise fn.error(f"{s.opcode}: .{op} needs a typed operand")
    if s.parts[0] == "red":
        a, *values = s.operands
        d = None
    else:
        d, a, *values = s.operands
    addr = fn.address(a, space)
    if op in _CAS_UPDATES:
        old = _cas_loop(fn, addr, space, t, lambda current: _update(fn, op, current, fn.value(values[0], t)))
    else:
        old = fn.emit(Op.ATOMIC, t, [addr, *(fn.value(v, t) for v in values)], op=_ATOMIC[op], space=space)
    if d is not None:
        fn.assign(d, old)


def _update(fn: PtxFunction, op: str, current: ir.Value, b: ir.Value) -> ir.Value:
    """What atom.and/.or/.xor/.inc/.dec writes where memory holds `current` (PTX's definitions)."""
    t = current.type
    if op in _COMBINE:
        return fn.emit(_COMBINE[op], t, [current, b])
    zero, one = fn.materialize(Const(0, t), t), fn.materialize(Const(1, t), t)
    if op == "inc":                                       # (old >= b) ? 0 : old + 1
        wrap = fn.emit(Op.CMP, T.boolean, [current, b], op="ge")
        return fn.emit(Op.SELECT, t, [wrap, zero, fn.emit(Op.ADD, t, [current, one])])
    wrap = fn.emit(Op.OR, T.boolean, [fn.emit(Op.CMP, T.boolean, [current, zero], op="eq"),
                                      fn.emit(Op.CMP, T.boolean, [current, b], op="gt")])
    return fn.emit(Op.SELECT, t, [wrap, b, fn.emit(Op.SUB, t, [current, one])])     # dec


def _cas_loop(fn: PtxFunction, addr: ir.Value, space: str, t, update) -> ir.Value:
    """An atomic read-modify-write by compare-and-swap: read the word, CAS in update(it), again until the CAS saw
    what was read; the old value. Lanes that lose go round again while the winners wait after the loop."""
    seen = "%__cas_seen"
    fn.var_types[seen] = t
    fn.write(seen, fn.current, fn.emit(Op.LOAD, t, [addr], space=space))
    loop, done = fn.new_block("cas"), fn.new_block("cas_done")
    fn.current.term = ir.Jump(loop)
    loop.preds.append(fn.current)
    fn.place(loop)
    expected = fn.read(seen, loop)
    actual = fn.emit(Op.ATOMIC, t, [addr, expected, update(expected)], op="cas", space=space)
    fn.write(seen, loop, actual)
    lost = fn.emit(Op.CMP, T.boolean, [actual, expected], op="ne")
    loop.term = ir.Branch(lost, loop, done)
    loop.preds.append(loop)
    done.preds.append(loop)
    fn.seal(loop)
    fn.place(done)
    fn.seal(done)
    return actual


def _bar(fn: PtxFunction, s: Statement) -> None:
    if s.operands and s.operands[0] != "0" or len(s.operands) > 1 or "arrive" in s.parts or "red" in s.parts:
        raise fn.refuse(f"{s.opcode} {', '.join(s.operands)} (only barrier 0 of the whole block)")
    fn.emit(Op.BARRIER, None)


def _membar(fn: PtxFunction, s: Statement) -> None:
    scope = "CTA" if "cta" in s.parts else "SYS" if "sys" in s.parts else "GPU"
    fn.emit(Op.FENCE, None, scope=scope)


def _shfl(fn: PtxFunction, s: Statement) -> None:
    mode = next((p for p in s.parts[1:] if p in ("up", "down", "bfly", "idx")), None)
    d, a, b, c, *_mask = s.operands
    clamp = fn.value(c, T.uint32)
    whole = 0 if mode == "up" else 0x1F
    if clamp.op is not Op.CONST or clamp.attrs["value"] != whole:
        raise fn.refuse(f"{s.opcode} over part of a warp (its c operand is not {whole:#x})")
    lane = fn.as_type(fn.value(b, T.uint32), T.int32)
    value = fn.emit(Op.SHFL, T.uint32, [fn.value(a, T.uint32), lane], mode=mode.upper())
    first, _, second = d.partition("|")
    fn.assign(first, value)
    if second:                                    # whether the source lane is in the warp
        me = fn.emit(Op.SREG, T.int32, name="laneid")
        combine = {"down": Op.ADD, "up": Op.SUB, "bfly": Op.XOR}.get(mode)
        source = lane if combine is None else fn.emit(combine, T.int32, [me, lane])
        low = fn.emit(Op.CMP, T.boolean, [source, fn.materialize(Const(0, T.int32), T.int32)], op="ge")
        high = fn.emit(Op.CMP, T.boolean, [source, fn.materialize(Const(32, T.int32), T.int32)], op="lt")
        fn.assign(second, fn.emit(Op.AND, T.boolean, [low, high]))


def _vote(fn: PtxFunction, s: Statement) -> None:
    mode = next((p for p in s.parts[1:] if p in ("all", "any", "uni", "ballot")), None)
    d, a, *_mask = s.operands
    p = fn.value(a.lstrip("!"), T.boolean)
    if a.startswith("!"):
        p = fn.emit(Op.NOT, T.boolean, [p])
    if mode == "ballot":
        fn.assign(d, fn.emit(Op.BALLOT, T.uint32, [p]))
    elif mode in ("all", "any"):
        fn.assign(d, fn.emit(Op.VOTE, T.boolean, [p], mode=mode.upper()))
    else:
        raise fn.refuse(f"{s.opcode}")


def _wide_mask(fn: PtxFunction, length: ir.Value, position: ir.Value | None, t) -> ir.Value:
    """((1 << length) - 1) << position in type t, computed in 64 bits so that a length of 32 is every bit."""
    one = fn.materialize(Const(1, T.uint64), T.uint64)
    ones = fn.emit(Op.SUB, T.uint64, [fn.emit(Op.SHL, T.uint64, [one, fn.as_type(length, T.uint64)]), one])
    if position is not None:
        ones = fn.emit(Op.SHL, T.uint64, [ones, fn.as_type(position, T.uint64)])
    return fn.as_type(ones, t) if t.bits == 32 else ones


def _bfi(fn: PtxFunction, s: Statement) -> None:
    """bfi d, a, b, pos, len: b with its bits [pos, pos + len) replaced by a's low len bits."""
    t, _ = _kind(s, fn)
    d, a, b, c, e = s.operands
    pos, length = fn.value(c, T.uint32), fn.value(e, T.uint32)
    mask = _wide_mask(fn, length, pos, t)
    kept = fn.emit(Op.AND, t, [fn.value(b, t), _invert(fn, mask)])
    inserted = fn.emit(Op.AND, t, [fn.emit(Op.SHL, t, [fn.value(a, t), fn.as_type(pos, t)]), mask])
    fn.assign(d, fn.emit(Op.OR, t, [kept, inserted]))


def _bfe(fn: PtxFunction, s: Statement) -> None:
    """bfe d, a, pos, len: a's bits [pos, pos + len), zero-extended (.u) or sign-extended (.s)."""
    t, _ = _kind(s, fn)
    d, a, b, c = s.operands
    pos, length = fn.value(b, T.uint32), fn.value(c, T.uint32)
    x = fn.value(a, t)
    if t.kind == "uint":
        field = fn.emit(Op.SHR, t, [x, fn.as_type(pos, t)])
        fn.assign(d, fn.emit(Op.AND, t, [field, _wide_mask(fn, length, None, t)]))
        return
    width = fn.materialize(Const(t.bits, t), t)
    up = fn.emit(Op.SUB, t, [fn.emit(Op.SUB, t, [width, fn.as_type(pos, t)]), fn.as_type(length, t)])
    down = fn.emit(Op.SUB, t, [width, fn.as_type(length, t)])
    fn.assign(d, fn.emit(Op.SHR, t, [fn.emit(Op.SHL, t, [x, up]), down]))


def _popc(fn: PtxFunction, s: Statement) -> None:
    """The set bits of a 32- or 64-bit value (SWAR: pairs, nibbles, then a multiply that sums the bytes)."""
    t, _ = _kind(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x = fn.value(a, ut)

    def c(v):
        return fn.materialize(Const(v & ((1 << ut.bits) - 1), ut), ut)
    x = fn.emit(Op.SUB, ut, [x, fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, c(1)]), c(0x5555555555555555)])])
    x = fn.emit(Op.ADD, ut, [fn.emit(Op.AND, ut, [x, c(0x3333333333333333)]),
                             fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, c(2)]), c(0x3333333333333333)])])
    x = fn.emit(Op.AND, ut, [fn.emit(Op.ADD, ut, [x, fn.emit(Op.SHR, ut, [x, c(4)])]), c(0x0F0F0F0F0F0F0F0F)])
    x = fn.emit(Op.SHR, ut, [fn.emit(Op.MUL, ut, [x, c(0x0101010101010101)]), c(ut.bits - 8)])
    fn.assign(d, fn.as_type(x, T.uint32))


def _clz(fn: PtxFunction, s: Statement) -> None:
    """Leading zero bits, by halving: where the top half of what is left is zero, count it and shift."""
    t, _ = _kind(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x, count = fn.value(a, ut), fn.materialize(Const(0, T.uint32), T.uint32)
    zero = fn.materialize(Const(0, ut), ut)
    step = ut.bits // 2
    while step:
        top = fn.emit(Op.SHR, ut, [x, fn.materialize(Const(ut.bits - step, ut), ut)])
        empty = fn.emit(Op.CMP, T.boolean, [top, zero], op="eq")
        x = fn.emit(Op.SELECT, ut, [empty, fn.emit(Op.SHL, ut, [x, fn.materialize(Const(step, ut), ut)]), x])
        count = fn.emit(Op.ADD, T.uint32, [count, fn.emit(Op.SELECT, T.uint32, [
            empty, fn.materialize(Const(step, T.uint32), T.uint32), fn.materialize(Const(0, T.uint32), T.uint32)])])
        step //= 2
    last = fn.emit(Op.CMP, T.boolean, [x, zero], op="eq")          # all zero: one more
    fn.assign(d, fn.emit(Op.ADD, T.uint32, [count, fn.emit(Op.SELECT, T.uint32, [
        last, fn.materialize(Const(1, T.uint32), T.uint32), fn.materialize(Const(0, T.uint32), T.uint32)])]))


def _brev(fn: PtxFunction, s: Statement) -> None:
    """The bits reversed: swap halves, then quarters, ... then neighbouring bits."""
    t, _ = _kind(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x, step = fn.value(a, ut), ut.bits // 2
    full = (1 << ut.bits) - 1
    while step:
        mask = 0
        for start in range(0, ut.bits, 2 * step):
            mask |= ((1 << step) - 1) << start
        amount = fn.materialize(Const(step, ut), ut)
        low = fn.emit(Op.SHL, ut, [fn.emit(Op.AND, ut, [x, fn.materialize(Const(mask, ut), ut)]), amount])
        high = fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, amount]), fn.materialize(Const(mask & full, ut), ut)])
        x = fn.emit(Op.OR, ut, [low, high])
        step //= 2
    fn.assign(d, x)


def _lop3(fn: PtxFunction, s: Statement) -> None:
    """lop3.b32 d, a, b, c, lut: each bit of d is lut's bit at index (a's << 2) | (b's << 1) | c's: the OR of the
    minterms lut selects."""
    t, _ = _kind(s, fn)
    d, a, b, c, lut = s.operands
    table = immediate(lut, T.uint32, fn)
    xs = [fn.value(o, t) for o in (a, b, c)]
    inverted = [_invert(fn, x) for x in xs]
    out = fn.materialize(Const(0, t), t)
    for index in range(8):
        if table >> index & 1:
            term = None
            for k, (x, nx) in enumerate(zip(xs, inverted, strict=True)):
                factor = x if index >> (2 - k) & 1 else nx
                term = factor if term is None else fn.emit(Op.AND, t, [term, factor])
            out = fn.emit(Op.OR, t, [out, term])
    fn.assign(d, out)


def _prmt(fn: PtxFunction, s: Statement) -> None:
    """prmt.b32 d, a, b, c: d's byte i is byte (c's nibble i & 7) of b:a (a the low four), or that byte's sign
    replicated where the nibble's bit 3 is set. The selector must be a constant."""
    if len(s.parts) > 2:
        raise fn.refuse(f"{s.opcode} (a prmt mode)")
    d, a, b, c = s.operands
    selector = fn.value(c, T.uint32)
    if selector.op is not Op.CONST:
        raise fn.refuse(f"{s.opcode} with a selector computed at run time")
    both = _pack(fn, [fn.value(a, T.uint32), fn.value(b, T.uint32)], T.uint64)
    out = fn.materialize(Const(0, T.uint32), T.uint32)
    for i in range(4):
        nibble = selector.attrs["value"] >> (4 * i) & 0xF
        byte = _part(fn, fn.emit(Op.SHR, T.uint64, [both, fn.materialize(Const(8 * (nibble & 7), T.uint64),
                                                                          T.uint64)]), 0, 8)
        if nibble & 8:                            # the byte's top bit, in all eight bits
            byte = fn.as_type(fn.emit(Op.SHR, T.int32, [fn.emit(Op.SHL, T.int32, [
                fn.as_type(byte, T.int32), fn.materialize(Const(24, T.int32), T.int32)]),
                fn.materialize(Const(31, T.int32), T.int32)]), T.uint32)
            byte = fn.emit(Op.AND, T.uint32, [byte, fn.materialize(Const(0xFF, T.uint32), T.uint32)])
        if i:
            byte = fn.emit(Op.SHL, T.uint32, [byte, fn.materialize(Const(8 * i, T.uint32), T.uint32)])
        out = fn.emit(Op.OR, T.uint32, [out, byte])
    fn.assign(d, out)


def _shf(fn: PtxFunction, s: Statement) -> None:
    """shf.l/.r.wrap/.clamp.b32 d, a, b, c: b:a (b high) shifted by c (mod 32, or at most 32), the high word
    (left) or the low word (right)."""
    d, a, b, c = s.operands
    amount = fn.value(c, T.uint32)
    if "clamp" in s.parts:
        amount = fn.emit(Op.MIN, T.uint32, [amount, fn.materialize(Const(32, T.uint32), T.uint32)])
    else:
        amount = fn.emit(Op.AND, T.uint32, [amount, fn.materialize(Const(31, T.uint32), T.uint32)])
    both = _pack(fn, [fn.value(a, T.uint32), fn.value(b, T.uint32)], T.uint64)
    n = fn.as_type(amount, T.uint64)
    if "l" in s.parts:
        fn.assign(d, _part(fn, fn.emit(Op.SHL, T.uint64, [both, n]), 1, 2))
    else:
        fn.assign(d, _part(fn, fn.emit(Op.SHR, T.uint64, [both, n]), 0, 2))


def _activemask(fn: PtxFunction, s: Statement) -> None:
    (d,) = s.operands
    fn.assign(d, fn.emit(Op.BALLOT, T.uint32, [fn.materialize(Const(True, T.boolean), T.boolean)]))


def _copysign(fn: PtxFunction, s: Statement) -> None:
    """copysign d, a, b: b's magnitude with a's sign (by their bits)."""
    t, _ = _kind(s, fn)
    ut = T.uint32 if t.bits == 32 else T.uint64
    d, a, b = s.operands
    sign = 1 << (t.bits - 1)
    x = fn.emit(Op.AND, ut, [fn.value(a, ut), fn.materialize(Const(sign, ut), ut)])
    y = fn.emit(Op.AND, ut, [fn.value(b, ut), fn.materialize(Const(sign - 1, ut), ut)])
    fn.assign(d, fn.as_type(fn.emit(Op.OR, ut, [x, y]), t))


def _call(fn: PtxFunction, s: Statement) -> None:
    """call (retval0), vprintf, (param0, param1): CUDA's device printf, into the printf FIFO as a Python kernel's
    print() writes it (`printing.py`), its format kept in the kernel's `prints` table for the host to apply. Other
    calls (a .func the compiler did not inline) are not supported yet."""
    text = ", ".join(s.operands)
    names = re.findall(r"[\w$%]+", text)                   # (retval0), vprintf, (param0, param1)
    callee = names[1] if text.startswith("(") else names[0]
    if callee != "vprintf" or len(names) != 4:
        raise fn.refuse(f"a call to {callee!r} (a device function the compiler did not inline)")
    result, _, fmt_param, args_param = names
    fmt = _constant_string(fn, fn.call_arguments.get(fmt_param))
    kinds, items = printing.c_format_arguments(fmt, lambda why: fn.refuse(f"printf {why}"))
    buffer = fn.call_arguments.get(args_param)
    values = []
    for offset, kind, size in kinds:
        if buffer is None:
            raise fn.error("printf's arguments are not in local memory")
        addr = fn.emit(Op.ADD, T.int32, [fn.as_type(buffer, T.int32), fn.materialize(Const(offset, T.int32), T.int32)])
        t = T.float64 if kind == "float" else {(4, "int"): T.int32, (4, "uint"): T.uint32}.get((size, kind), T.uint64)
        word = fn.emit(Op.LOAD, t, [addr], space="local")
        values.append(fn.as_type(word, T.int64) if kind != "float" else fn.emit(Op.BITCAST, T.int64, [word]))
    number = printing.record_number(fn.ptx_name, fn.ptx_line, fn.kernel, items)
    fn.func.prints[number] = items
    fifo = fn.hidden_pointer(printing.FIFO_INT)
    words = 1 + len(values)
    old = fn.emit(Op.ATOMIC, T.int64, [fifo, fn.materialize(Const(words, T.int64), T.int64)], op="add",
                  space="global")
    fits = fn.emit(Op.CMP, T.boolean, [fn.emit(Op.ADD, T.int64, [old, fn.materialize(Const(1 + words, T.int64),
                                                                                        T.int64)]),
                                       fn.materialize(Const(printing.FIFO_WORDS, T.int64), T.int64)], op="le")
    first = fn.emit(Op.ADD, T.uint64, [fifo, fn.emit(Op.SHL, T.uint64, [
        fn.emit(Op.ADD, T.uint64, [fn.as_type(old, T.uint64), fn.materialize(Const(1, T.uint64), T.uint64)]),
        fn.materialize(Const(3, T.uint64), T.uint64)])])
    write, after = fn.new_block("printf"), fn.new_block("printed")          # a record that does not fit: none
    fn.current.term = ir.Branch(fits, write, after)
    write.preds.append(fn.current)
    after.preds += [fn.current, write]
    fn.place(write)
    fn.seal(write)
    for k, value in enumerate([fn.materialize(Const(number, T.int64), T.int64), *values]):
        at = fn.emit(Op.ADD, T.uint64, [first, fn.materialize(Const(8 * k, T.uint64), T.uint64)])
        fn.emit(Op.STORE, None, [at, value], space="global")
    write.term = ir.Jump(after)
    fn.place(after)
    fn.seal(after)
    fn.call_results[result] = fn.materialize(Const(len(values), T.int32), T.int32)


def _constant_string(fn: PtxFunction, address: ir.Value | None) -> str:
    """The text at a module variable's address known while compiling (printf's format: `$str`)."""
    offset = None
    if address is not None and address.op is Op.PARAM and address.attrs["offset"] == getattr(fn, "globals_param",
                                                                                             None):
        offset = 0
    elif address is not None and address.op is Op.ADD and address.args[0].op is Op.PARAM and \
            address.args[1].op is Op.CONST:
        offset = address.args[1].attrs["value"]
    name = next((n for n, at in fn.globals.items() if at == offset), None)
    variable = next((v for v in fn.module.variables if v.name == name), None)
    if variable is None or variable.init is None:
        raise fn.refuse("printf with a format that is not a string literal")
    data = bytes(int(x, 0) & 0xFF for x in variable.init)
    return data.split(b"\0")[0].decode(errors="replace")


def _trap(fn: PtxFunction, s: Statement) -> None:
    """trap: the kernel stops with a device-side assert (CUDA's assert, as lapis's <assert.h> writes it), which
    the host reports naming this line."""
    number = len(fn.func.assertions) + 1
    fn.func.assertions[number] = f"{fn.filename}:{fn.line}"
    fn.emit(Op.TRAP, None, number=number)


# instructions that run once per half of an f16x2 or bf16x2 operand
PACKED = {"add", "sub", "mul", "fma", "neg", "abs", "min", "max"}

OPCODES = {
    "call": _call, "trap": _trap, "lop3": _lop3, "prmt": _prmt, "shf": _shf, "activemask": _activemask,
    "copysign": _copysign, "bfi": _bfi, "bfe": _bfe, "popc": _popc, "clz": _clz, "brev": _brev,
    **{name: _binary for name in ("add", "sub", "mul", "min", "max", "shl", "shr", "div", "rem")},
    **{name: _predicate_logic for name in ("and", "or", "xor", "not")},
    "neg": _unary, "abs": _unary, "mad": _mad, "fma": _fma, "mov": _mov, "cvta": _cvta, "setp": _setp,
    "selp": _selp, "cvt": _cvt, "ld": _ld, "st": _st, "atom": _atom, "red": _atom, "bar": _bar, "barrier": _bar,
    "membar": _membar, "fence": _membar, "shfl": _shfl, "vote": _vote,
    **{name: _math for name in ("ex2", "lg2", "sin", "cos", "sqrt", "rsqrt", "rcp")},
}


def build_ir(module: Module, name: str, filename: str) -> ir.Function:
    """The IR of the module's kernel `name`."""
    if name not in module.entries:
        known = ", ".join(sorted(module.entries)) or "none"
        raise CompileError(f"the module has no kernel {name!r} (its kernels: {known})", filename)
    return PtxFunction(module.entries[name], module, filename).build()


__all__ = ["OPCODES", "build_ir", "immediate"]
