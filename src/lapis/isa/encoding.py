"""The 128-bit machine word of the lapis ISA: encode and decode.

Shared specification (imports no layer). One instruction is 16 bytes, little-endian, and
instruction addresses step by 0x10, as on NVIDIA GPUs since Volta. Field map (bit ranges):

  [0,12)   opcode                 [12,15) guard predicate   [15] guard negated
  [16,24)  Rd                     [24,32) Ra                [32,64) operand B payload
  [64,72)  Rc                     [72,74) B kind: 0 register, 1 immediate, 2 constant
  [74,77)  Pd                     [77,80) Ps  [80] Ps negated   [81,84) Pq  [84] Pq negated
  [85,88)  negate a, b, c         [88,104) modifiers, one small field per group in table order
  [104]    reserved (0)
  [105,109) stall  [109] yield  [110,113) write barrier  [113,116) read barrier
  [116,122) wait mask  [122,126) operand reuse   [126,128) absolute value of a, b

A constant operand packs its offset in B[0,16) and its bank in B[16,21). Decoding is strict:
any field an opcode does not use must hold its default, so decode(encode(i)) == i and a
stray bit is reported instead of silently ignored.
"""

from lapis.isa.instruction import INSTRUCTION_BYTES, Const, Control, Imm, Instruction, IsaError, Reg
from lapis.isa.opcodes import BY_CODE, OPCODES, PT, RZ, SPECIAL_REGISTERS, Opcode

_B_REG, _B_IMM, _B_CONST = 0, 1, 2
_MOD_BASE, _MOD_END = 88, 104


def _field(word: int, lo: int, width: int) -> int:
    return (word >> lo) & ((1 << width) - 1)


def _mod_layout(op: Opcode) -> list[tuple[int, int, tuple[str, ...]]]:
    """(bit position, width, choices) of each modifier group."""
    layout, pos = [], _MOD_BASE
    for _, choices in op.modifiers:
        width = max(1, (len(choices) - 1).bit_length())
        layout.append((pos, width, choices))
        pos += width
    if pos > _MOD_END:
        raise IsaError(f"{op.mnemonic}: modifiers need more than {_MOD_END - _MOD_BASE} bits")
    return layout


_LAYOUTS = {op.mnemonic: _mod_layout(op) for op in OPCODES.values()}


def slots(op: Opcode) -> set[str]:
    """The instruction fields an opcode uses."""
    used = set()
    for operand in op.operands:
        used |= {"Rd": {"rd"}, "Ra": {"ra"}, "Rc": {"rc"}, "B": {"b"}, "SR": {"b"}, "T": {"b"}, "C": {"b"},
                 "Pd": {"pd"}, "Ps": {"ps"}, "Pq": {"pq"}, "MG": {"ra", "b"}, "MS": {"ra", "b"}}[operand]
    return used


def encode(inst: Instruction) -> bytes:
    op = inst.opcode
    _check(inst, op)
    w = op.code
    w |= inst.guard << 12 | int(inst.guard_neg) << 15
    w |= inst.rd << 16 | inst.ra << 24 | inst.rc << 64
    b = inst.b
    if isinstance(b, Reg):
        kind, payload = _B_REG, b.index
    elif isinstance(b, Imm):
        kind, payload = _B_IMM, b.bits
    else:
        kind, payload = _B_CONST, b.offset | b.bank << 16
    w |= payload << 32 | kind << 72
    w |= inst.pd << 74 | inst.ps << 77 | int(inst.ps_neg) << 80 | inst.pq << 81 | int(inst.pq_neg) << 84
    w |= sum(1 << (85 + "abc".index(x)) for x in inst.neg)
    w |= sum(1 << (126 + "ab".index(x)) for x in inst.abs_)
    for (pos, _, choices), value in zip(_LAYOUTS[op.mnemonic], inst.mods, strict=True):
        w |= choices.index(value) << pos
    c = inst.ctrl
    w |= c.stall << 105 | int(c.yield_) << 109 | c.wbar << 110 | c.rbar << 113 | c.wait << 116 | c.reuse << 122
    return w.to_bytes(INSTRUCTION_BYTES, "little")


def _check(inst: Instruction, op: Opcode) -> None:
    def bad(why: str) -> IsaError:
        return IsaError(f"{op.mnemonic}: {why}")

    if len(inst.mods) != len(op.modifiers):
        raise bad(f"expects {len(op.modifiers)} modifiers, got {inst.mods}")
    for reg in (inst.rd, inst.ra, inst.rc):
        if not 0 <= reg <= RZ:
            raise bad(f"register index {reg} out of range")
    for pred in (inst.guard, inst.pd, inst.ps, inst.pq):
        if not 0 <= pred <= PT:
            raise bad(f"predicate index {pred} out of range")
    b = inst.b
    kind = "r" if isinstance(b, Reg) else "i" if isinstance(b, Imm) else "c"
    used = slots(op)
    if "b" in used and kind not in op.b_kinds:
        raise bad(f"operand B cannot be {dict(r='a register', i='an immediate', c='a constant')[kind]}")
    if isinstance(b, Reg) and not 0 <= b.index <= RZ:
        raise bad(f"register index {b.index} out of range")
    if isinstance(b, Imm) and not 0 <= b.bits < 1 << 32:
        raise bad(f"immediate {b.bits:#x} does not fit in 32 bits")
    if isinstance(b, Const) and not (0 <= b.offset < 1 << 16 and 0 <= b.bank < 32):
        raise bad(f"constant c[{b.bank:#x}][{b.offset:#x}] out of range")
    if set(inst.neg) - set(op.negatable) or len(set(inst.neg)) != len(inst.neg):
        raise bad(f"cannot negate operand(s) {inst.neg!r}")
    if "SR" in op.operands and not (isinstance(b, Imm) and b.bits < len(SPECIAL_REGISTERS)):
        raise bad(f"special register {b} does not exist")
    if set(inst.abs_) - set(op.absolutable) or len(set(inst.abs_)) != len(inst.abs_) or inst.abs_ != "".join(
            sorted(inst.abs_)):
        raise bad(f"cannot take the absolute value of operand(s) {inst.abs_!r}")
    if ("b" in inst.neg or "b" in inst.abs_) and isinstance(b, Imm):
        raise bad("an immediate operand B takes no negation or absolute value; encode the value instead")
    defaults = {"rd": inst.rd == RZ, "ra": inst.ra == RZ, "rc": inst.rc == RZ, "b": b == Reg(RZ),
                "pd": inst.pd == PT, "ps": inst.ps == PT and not inst.ps_neg,
                "pq": inst.pq == PT and not inst.pq_neg}
    stray = [name for name, is_default in defaults.items() if name not in used and not is_default]
    if stray:
        raise bad(f"sets field(s) {stray} it does not use")
    c = inst.ctrl
    limits = {"stall": (c.stall, 15), "wbar": (c.wbar, 7), "rbar": (c.rbar, 7), "wait": (c.wait, 63),
              "reuse": (c.reuse, 15)}
    for name, (value, top) in limits.items():
        if not 0 <= value <= top:
            raise bad(f"control field {name}={value} out of range 0..{top}")


def decode(word: bytes | int, address: int | None = None) -> Instruction:
    """Decode one 128-bit word; raise IsaError naming the address for anything invalid."""
    where = f" at /*{address:04x}*/" if address is not None else ""
    w = word
    if isinstance(w, bytes | bytearray | memoryview):
        if len(w) != INSTRUCTION_BYTES:
            raise IsaError(f"an instruction word is {INSTRUCTION_BYTES} bytes, got {len(w)}{where}")
        w = int.from_bytes(w, "little")
    if not 0 <= w < 1 << (8 * INSTRUCTION_BYTES):
        raise IsaError(f"{w:#x}{where} is not a {8 * INSTRUCTION_BYTES}-bit instruction word")

    def bad(why: str) -> IsaError:
        return IsaError(f"invalid instruction word 0x{w:032x}{where}: {why}")

    op = BY_CODE.get(_field(w, 0, 12))
    if op is None:
        raise bad(f"unknown opcode 0x{_field(w, 0, 12):03x}")
    if _field(w, 104, 1):
        raise bad("reserved bits are set")
    kind, payload = _field(w, 72, 2), _field(w, 32, 32)
    if kind == _B_REG:
        if payload >> 8:
            raise bad("register operand B has stray high bits")
        b = Reg(payload)
    elif kind == _B_IMM:
        b = Imm(payload)
    elif kind == _B_CONST:
        if payload >> 21:
            raise bad("constant operand B has stray high bits")
        b = Const(payload >> 16, payload & 0xFFFF)
    else:
        raise bad("operand B kind 3 does not exist")
    mods = []
    used_bits = 0
    for pos, width, choices in _LAYOUTS[op.mnemonic]:
        index = _field(w, pos, width)
        if index >= len(choices):
            raise bad(f"modifier value {index} out of range for {op.mnemonic}")
        mods.append(choices[index])
        used_bits += width
    if _field(w, _MOD_BASE + used_bits, _MOD_END - _MOD_BASE - used_bits):
        raise bad("unused modifier bits are set")
    neg = "".join(x for i, x in enumerate("abc") if _field(w, 85 + i, 1))
    abs_ = "".join(x for i, x in enumerate("ab") if _field(w, 126 + i, 1))
    ctrl = Control(stall=_field(w, 105, 4), yield_=bool(_field(w, 109, 1)), wbar=_field(w, 110, 3),
                   rbar=_field(w, 113, 3), wait=_field(w, 116, 6), reuse=_field(w, 122, 4))
    inst = Instruction(op.mnemonic, tuple(mods), rd=_field(w, 16, 8), ra=_field(w, 24, 8), b=b,
                       rc=_field(w, 64, 8), pd=_field(w, 74, 3), ps=_field(w, 77, 3),
                       ps_neg=bool(_field(w, 80, 1)), pq=_field(w, 81, 3), pq_neg=bool(_field(w, 84, 1)),
                       neg=neg, abs_=abs_, guard=_field(w, 12, 3), guard_neg=bool(_field(w, 15, 1)), ctrl=ctrl)
    try:
        _check(inst, op)
    except IsaError as e:
        raise bad(str(e)) from None
    return inst


def decode_program(code: bytes, base: int = 0) -> list[Instruction]:
    """Decode a program whose first instruction is at `base` (the addresses errors name)."""
    if len(code) % INSTRUCTION_BYTES:
        raise IsaError(f"code size {len(code)} is not a multiple of {INSTRUCTION_BYTES} bytes")
    return [decode(code[i:i + INSTRUCTION_BYTES], base + i) for i in range(0, len(code), INSTRUCTION_BYTES)]


def encode_program(instructions: list[Instruction]) -> bytes:
    return b"".join(encode(i) for i in instructions)
