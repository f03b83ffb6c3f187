"""Layer 3: the ptxas step's builder: a PTX kernel translated into the compiler's typed SSA IR.

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
  - `ptx.OPCODES` maps each PTX opcode to a translator (ptx_arith.py, ptx_memory.py, ptx_matrix.py);
    an opcode or modifier outside it is a CompileError naming the PTX line, never a guess.

Simplified (the docs say so too): directed rounding modifiers (.rm .rp .rz on add, mul, fma) round to
nearest, which CUDA's expf uses only to pick a reduction step; `.ftz` is ignored (subnormals are
kept); `sqrt.rn` is the special function unit's square root.
"""

import re
import struct

import numpy as np

from lapis import abi
from lapis.cuda.compiler import ir
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


# Two halves in a 32-bit register: their instructions run once per half (`packed_halves`)
HALF2 = {"f16x2": "f16", "bf16x2": "bf16"}


# Loads and stores narrower than a register: the element type that widens or narrows them
STORAGE = {"u8": "uint8", "b8": "uint8", "s8": "int8", "u16": "uint16", "b16": "uint16", "s16": "int16"}


SPECIAL = ({f"%{r}.{a}" for r in ("tid", "ctaid", "ntid", "nctaid") for a in "xyz"} |
           {"%laneid", "%warpid", "%smid", "%clock", "%clock64", "%lanemask_eq", "%lanemask_lt", "%lanemask_le",
            "%lanemask_gt", "%lanemask_ge"})


ROUNDING = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"}


IGNORED = {"ftz", "sat", "approx", "full", "uni", "sync", "aligned", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt",
           "relaxed", "gpu", "cta", "sys", "volatile"} | ROUNDING


# instructions that run once per half of an f16x2 or bf16x2 operand
PACKED = {"add", "sub", "mul", "fma", "neg", "abs", "min", "max"}


class PtxFunction(IRBuilder):
    """Builds one `.entry`'s IR."""

    def __init__(self, entry: Entry, module: Module, filename: str, opcodes: dict, predicates_as_words: bool = False):
        self.entry_ptx, self.module, self.opcodes = entry, module, opcodes
        # PTX has as many predicate registers as it likes, the ISA seven: with this set, each .pred register is a
        # 32-bit word (0 or 1), made a predicate where it is used, as ptxas keeps predicates it cannot hold
        self.predicates_as_words = predicates_as_words
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
        self.blocks_made = 0
        self.inlined: dict[str, Entry] = {}                # "@n" -> the function its n-th inlined call runs
        self.calling: list[str] = []                       # the functions being inlined, outermost first
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
    def const(self, value, t=T.int32) -> ir.Value:
        """The constant `value` as an IR value of type t (the translators' literals)."""
        return self.materialize(Const(value, t), t)

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
        if any(s.opcode.startswith(("bar.red", "barrier.red")) for s in self.entry_ptx.body):
            offset = -(-offset // 4) * 4          # bar.red's count (`block_word`)
            symbols["$block_word"] = offset
            offset += 4
        self.func.shared_bytes = offset
        dynamic = -(-offset // 16) * 16
        for v in variables:
            if v.space == "shared" and not v.size:
                symbols[v.name] = dynamic
                self.func.shared_bytes = dynamic      # the launch's dynamic bytes come after the padding too
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
        base, at, call = name.partition("@")        # an inlined function's register: its own declarations
        declared = self.inlined["@" + call].registers if at else self.entry_ptx.registers
        name = base
        kind = declared.get(name) or declared.get(name.rstrip("0123456789"))
        if kind is None:
            raise self.error(f"register {name} is not declared")
        if kind not in TYPES:
            raise self.refuse(f"a .{kind} register ({name})")
        return T.uint32 if kind == "pred" and self.predicates_as_words else TYPES[kind]

    def as_type(self, v: ir.Value, t) -> ir.Value:
        """v's bits as type t: the same value for integers of one width, reinterpreted between ints and floats,
        converted between integer widths (cvt's job, and PTX's implicit widening of a 16-bit operand)."""
        if v.type == t:
            return v
        if v.type == T.boolean and t == T.uint32:          # a predicate kept in a word (`predicates_as_words`)
            return self.emit(Op.SELECT, t, [v, self.const(1, t), self.const(0, t)])
        if t == T.boolean and v.type == T.uint32 and self.predicates_as_words:
            return self.emit(Op.CMP, T.boolean, [v, self.const(0, v.type)], op="ne")
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
        if self.is_register(text):
            if text not in self.var_types:
                self.var_types[text] = self.register_type(text)
            return self.as_type(self.read(text, self.current), t)
        if text in SPECIAL:
            return self.as_type(self.special(text), t)
        if text in self.symbols:
            return self.const(self.symbols[text], t)
        if text in self.globals:
            return self.as_type(self.global_address(text, 0), t)
        if text == "WARP_SZ":                       # PTX's warp size constant: the device's (32, or a 64-lane wave)
            return self.as_type(self.emit(Op.DIM, T.int32, offset=abi.CBANK_WARP_SIZE), t)
        return self.const(immediate(text, t, self), t)

    def warp_lane(self) -> tuple[ir.Value, ir.Value]:
        """(this lane's place in its warp of 32, PTX's warp, and that warp's first lane): on a 64-lane wave each 32
        is a warp of its own."""
        laneid = self.emit(Op.SREG, T.int32, name="laneid")
        return self.emit(Op.AND, T.int32, [laneid, self.const(31)]), self.emit(Op.AND, T.int32, [laneid,
                                                                                                  self.const(~31)])

    def block_word(self) -> ir.Value:
        """The shared address of a 32-bit word of the kernel's own (bar.red's count), after its static shared
        variables (`_shared_layout` reserves it where the kernel has a bar.red)."""
        return self.const(self.symbols["$block_word"])

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
        return self.emit(Op.ADD, T.uint64, [base, self.const(where, T.uint64)]) if where \
            else base

    def is_register(self, text: str) -> bool:
        """A register's name: %-prefixed, or one an inline asm block declared (`{ .reg .pred q; ... }`)."""
        return (text.startswith("%") and text not in SPECIAL) or text in self.entry_ptx.registers or \
            text in self.var_types

    def special(self, name: str) -> ir.Value:
        """A special register: the thread's and block's coordinates and sizes, its lane, warp and compute unit, the
        clock (%clock64 is the 32-bit counter, widened: it wraps as %clock does), and the lane masks."""
        reg, _, axis = name[1:].partition(".")
        if reg in ("tid", "ctaid", "laneid", "warpid", "smid"):
            return self.emit(Op.SREG, T.int32, name=name[1:])
        if reg in ("clock", "clock64"):
            ticks = self.as_type(self.emit(Op.SREG, T.int32, name="clocklo"), T.uint32)
            return self.as_type(ticks, T.uint64) if reg == "clock64" else ticks
        if reg.startswith("lanemask_"):             # bits of the lanes below, at, ... this one (of 32)
            lane = self.as_type(self.warp_lane()[0], T.uint64)
            one = self.const(1, T.uint64)
            at = self.emit(Op.SHL, T.uint64, [one, lane])
            below = self.emit(Op.SUB, T.uint64, [at, one])
            mask = {"eq": at, "lt": below, "le": self.emit(Op.OR, T.uint64, [below, at])}.get(reg[9:])
            if mask is None:                        # gt, ge: the rest of the 32
                mask = self.emit(Op.XOR, T.uint64, [below if reg[9:] == "ge" else self.emit(Op.OR, T.uint64, [
                    below, at]), self.const(0xFFFFFFFF, T.uint64)])
            return self.as_type(mask, T.uint32)
        base = abi.CBANK_BLOCK_DIM if reg == "ntid" else abi.CBANK_GRID_DIM
        return self.emit(Op.DIM, T.int32, offset=base + 4 * "xyz".index(axis))

    def assign(self, text: str, v: ir.Value) -> None:
        if not self.is_register(text):
            raise self.error(f"cannot write to {text}")
        if text not in self.var_types:
            self.var_types[text] = self.register_type(text)
        self.write(text, self.current, self.as_type(v, self.var_types[text]))

    def address(self, text: str, space: str) -> ir.Value:
        """[register], [symbol], [param] or either plus an offset: a 64-bit global address, or a 32-bit shared one."""
        inner = text.strip()[1:-1].replace(" ", "")
        m = re.fullmatch(r"([^+-]+)(?:\+?([+-]?(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)   # [r], [r+8], [r-8], [r+-8]
        if m is None:
            raise self.error(f"cannot read the address {text!r}")
        base, offset = m.group(1), int(m.group(2), 0) if m.group(2) else 0
        if base in self.symbols and (space == "shared") == (base not in self.local_symbols) and space != "global":
            return self.const(self.symbols[base] + offset)
        if base in self.globals and space == "global":
            return self.global_address(base, offset)
        if not self.is_register(base):
            raise self.refuse(f"the address of {base!r} in the {space} space")
        t = T.int32 if space in ("shared", "local") else T.uint64
        v = self.value(base, t)
        return self.emit(Op.ADD, t, [v, self.const(offset, t)]) if offset else v

    # -- driving --------------------------------------------------------------------------------
    def build(self) -> ir.Function:
        self.current = self.entry
        self.emit_body(self.entry_ptx.body)
        return self.func

    def emit_body(self, body: list[Statement], exit_block: ir.Block | None = None) -> None:
        """Translate `body` from the current block on: its blocks in PTX's order, each sealed once its
        predecessors are all translated. A kernel's returns end its threads; an inlined function's (`exit_block`
        given) go to `exit_block`, where the caller's code goes on."""
        segments = self._segments(body, exit_block)
        start, first = self.current, segments[0][0]
        start.term = ir.Jump(first)
        first.preds.append(start)
        done: set[ir.Block] = {start}
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
            done |= {block, end}
            for b in [b for b, _, _ in segments if b not in self.sealed and all(p in done for p in b.preds)]:
                self.seal(b)
        for b, _, _ in segments:
            if b not in self.sealed:
                self.seal(b)
        if exit_block is not None:
            self.place(exit_block)
            self.seal(exit_block)

    def _segments(self, body: list[Statement], exit_block: ir.Block | None = None
                  ) -> list[tuple[ir.Block, list[Statement], tuple]]:
        """The body cut into (block, statements, ending) in PTX's order; an ending is ("jump", target),
        ("branch", guard, target, fall-through) or ("return",) (a jump to `exit_block` where one is given), and the
        edges are recorded as each block's preds."""
        labels: dict[str, ir.Block] = {}
        for s in body:
            if s.label is not None:
                labels[s.label] = ir.Block(s.label)
        segments: list[list] = []
        tails: list[list] = []
        current = [ir.Block(f"ptx{self._next_block()}"), [], None]

        def close(ending, then: ir.Block | None = None):
            nonlocal current
            current[2] = ending
            segments.append(current)
            current = [then or ir.Block(f"ptx{self._next_block()}"), [], None]

        for s in body:
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
            elif name in ("ret", "exit") and exit_block is not None and name == "ret":
                close(("branch", s.guard, exit_block) if s.guard else ("jump", exit_block))
            elif name in ("ret", "exit"):
                if s.guard:                       # the lanes whose guard holds go to a return at the end
                    done = ir.Block(f"ret{self._next_block()}")
                    tails.append([done, [], ("return",)])
                    close(("branch", s.guard, done))
                else:
                    close(("return",))
            elif s.guard:
                guarded = ir.Block(f"guarded{self._next_block()}")
                close(("branch", s.guard, guarded), guarded)
                current[1].append(Statement(s.line, s.opcode, s.operands, None, source=s.source))
                close(("jump", None))
            else:
                current[1].append(s)
        close(("jump", exit_block) if exit_block is not None else ("return",))
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
                if b not in reached and b in by_block:
                    reached.add(b)
                    stack.append(by_block[b])
        for block in [*blocks, *([exit_block] if exit_block is not None else [])]:
            block.preds = [p for p in block.preds if p in reached]
        return [tuple(seg) for seg in segments if seg[0] in reached]

    def _next_block(self) -> int:
        self.blocks_made += 1
        return self.blocks_made

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
        handler = self.opcodes.get(s.parts[0])
        if handler is None:
            raise self.refuse(f"the PTX instruction {s.opcode!r}")
        try:
            if any(p in HALF2 for p in s.parts) and s.parts[0] in PACKED:
                packed_halves(self, s, handler)
            else:
                handler(self, s)
        except (ValueError, IndexError, KeyError, StopIteration) as e:     # operands it cannot take
            raise self.error(f"cannot translate {s.opcode} {', '.join(s.operands)}: wrong operands or modifiers "
                             f"({type(e).__name__}: {e})") from None


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


def operand_type(s: Statement, fn: PtxFunction, index: int = -1):
    """The IR type an instruction computes in: its last (or `index`th) type modifier."""
    types = [p for p in s.parts[1:] if p in TYPES]
    if not types:
        raise fn.error(f"{s.opcode} names no type")
    return TYPES[types[index]], types[index]


def check_modifiers(s: Statement, fn: PtxFunction, allowed: set) -> None:
    for p in s.parts[1:]:
        if p not in TYPES and p not in IGNORED and p not in allowed:
            raise fn.refuse(f"the modifier .{p} of {s.opcode}")


def invert(fn: PtxFunction, x: ir.Value) -> ir.Value:
    """~x of an integer (the IR's not is for bools): x ^ all ones."""
    return fn.emit(Op.XOR, x.type, [x, fn.const((1 << x.type.bits) - 1, x.type)])


def pack(fn: PtxFunction, parts: list[ir.Value], t) -> ir.Value:
    """Equal parts (their low bits) side by side in a register of type t, the first lowest."""
    ut = T.uint64 if t.bits == 64 else T.uint32
    width = t.bits // len(parts)
    out = None
    for i, x in enumerate(parts):
        x = fn.as_type(x, ut)
        if width < ut.bits:
            x = fn.emit(Op.AND, ut, [x, fn.const((1 << width) - 1, ut)])
        if i:
            x = fn.emit(Op.SHL, ut, [x, fn.const(i * width, ut)])
        out = x if out is None else fn.emit(Op.OR, ut, [out, x])
    return out


def part(fn: PtxFunction, whole: ir.Value, i: int, count: int) -> ir.Value:
    """Part i of `count` equal parts of a register (zero-extended in a 32-bit register)."""
    width = whole.type.bits // count
    x = fn.emit(Op.SHR, whole.type, [whole, fn.const(i * width, whole.type)]) if i else whole
    x = fn.as_type(x, T.uint32) if whole.type.bits == 64 else x
    return fn.emit(Op.AND, T.uint32, [x, fn.const((1 << width) - 1, T.uint32)]) \
        if width < 32 else x


def packed_halves(fn: PtxFunction, s: Statement, handler) -> None:
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
            fn.write(name, fn.current, fn.as_type(part(fn, fn.value(operand, T.uint32), lane, 2), half))
            names.append(name)
        out = f"%__half{lane}_out"
        fn.var_types[out] = half
        handler(fn, Statement(s.line, scalar, [out, *names], source=s.source))
        results.append(fn.read(out, fn.current))
    fn.assign(d, pack(fn, results, T.uint32))


def vector_count(s: Statement) -> int:
    """The element count of a vector load or store (.v2, .v4), or 0."""
    return next((int(p[1:]) for p in s.parts if p in ("v2", "v4", "v8")), 0)


def elements(text: str) -> list[str]:
    """The registers (or immediates) of a vector operand {a, b, ...}; `_` is a lane nobody reads."""
    return [x.strip() for x in text.strip()[1:-1].split(",")]


def offset_address(fn: PtxFunction, addr: ir.Value, offset: int) -> ir.Value:
    return fn.emit(Op.ADD, addr.type, [addr, fn.const(offset, addr.type)]) if offset else addr


COMBINE = {"and": Op.AND, "or": Op.OR, "xor": Op.XOR}


def narrow(fn: PtxFunction, x: ir.Value, kind: str) -> ir.Value:
    """x's low 8 or 16 bits, zero- or sign-extended to its 32-bit register."""
    bits = TYPE_BYTES[kind] * 8
    t = x.type
    if kind.startswith("s"):
        shift = fn.const(32 - bits)
        wide = fn.as_type(x, T.int32)
        return fn.emit(Op.SHR, T.int32, [fn.emit(Op.SHL, T.int32, [wide, shift]), shift])
    return fn.emit(Op.AND, t, [x, fn.const((1 << bits) - 1, t)])
