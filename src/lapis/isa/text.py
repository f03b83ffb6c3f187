"""Text forms of the lapis ISA: a cuobjdump-style disassembler and an assembler that reads it back.

Shared specification (imports no layer). A listing line looks like

    /*0040*/  FFMA R5, R2, R3, R5 ;                         /* 0x0000000302057232 */
                                                            /* 0x000fc80000000005 */

with the low and high 64 bits of the word in the comments, as cuobjdump prints them. The
assembler accepts plain instruction text (with `name:` labels and `BRA name`) and whole
listings; for listing lines it takes the control bits from the hex words and checks that
the text and the word agree.
"""

import re
import struct

import numpy as np

from lapis.isa.encoding import INSTRUCTION_BYTES, decode, decode_program, encode
from lapis.isa.instruction import Const, Control, Imm, Instruction, IsaError, Reg, make
from lapis.isa.opcodes import OPCODES, PT, RZ, SPECIAL_REGISTERS

_TEXT_WIDTH = 46


def float_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def bits_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _hex(value: int) -> str:
    return f"-{-value:#x}" if value < 0 else f"{value:#x}"


def _reg(index: int, neg: bool = False, absolute: bool = False) -> str:
    return _sign("RZ" if index == RZ else f"R{index}", neg, absolute)


def _sign(text: str, neg: bool, absolute: bool) -> str:
    """An operand with its modifiers as SASS prints them: -R2, |R2|, -|R2|."""
    return ("-" if neg else "") + (f"|{text}|" if absolute else text)


def _pred(index: int, neg: bool = False) -> str:
    return ("!" if neg else "") + ("PT" if index == PT else f"P{index}")


def _offset(off: int) -> str:
    return "" if off == 0 else f"+{off:#x}" if off > 0 else f"-{-off:#x}"


def _operand_b(inst: Instruction) -> str:
    b, spec = inst.b, inst.opcode
    if isinstance(b, Reg):
        return _reg(b.index, "b" in inst.neg, "b" in inst.abs_)
    if isinstance(b, Const):
        return _sign(f"c[{b.bank:#x}][{b.offset:#x}]", "b" in inst.neg, "b" in inst.abs_)
    if spec.b_float:
        value = bits_float(b.bits)
        if np.isfinite(value):
            return np.format_float_positional(np.float32(value), unique=True, trim="-")
        return f"{b.bits:#x}"
    return _hex(inst.simm)


def format_instruction(inst: Instruction, address: int = 0) -> str:
    """The assembly text of one instruction, e.g. '@!P0 BRA 0x80 ;'."""
    spec = inst.opcode
    parts = []
    for operand in spec.operands:
        if operand == "Rd":
            parts.append(_reg(inst.rd))
        elif operand == "Ra":
            parts.append(_reg(inst.ra, "a" in inst.neg, "a" in inst.abs_))
        elif operand == "Rc":
            parts.append(_reg(inst.rc, "c" in inst.neg))
        elif operand in ("B", "C"):
            parts.append(_operand_b(inst))
        elif operand == "SR":
            parts.append(SPECIAL_REGISTERS[inst.b.bits])
        elif operand == "T":
            parts.append(f"{inst.branch_target(address):#x}")
        elif operand == "MG":
            parts.append(f"[{_reg(inst.ra)}.64{_offset(inst.simm)}]")
        elif operand == "MS":
            base = "" if inst.ra == RZ else _reg(inst.ra)
            off = _offset(inst.simm)
            parts.append(f"[{base}{off}]" if base else f"[{inst.simm:#x}]")
        elif operand == "Pd":
            parts.append(_pred(inst.pd))
        elif operand == "Ps":
            parts.append(_pred(inst.ps, inst.ps_neg))
        elif operand == "Pq":
            parts.append(_pred(inst.pq, inst.pq_neg))
    guard = "" if inst.guard == PT and not inst.guard_neg else "@" + _pred(inst.guard, inst.guard_neg) + " "
    name = inst.op + "".join("." + m for m in inst.mods if m)
    return f"{guard}{name} {', '.join(parts)} ;" if parts else f"{guard}{name} ;"


def disassemble(code: bytes | list[Instruction], base: int = 0, indent: str = "        ",
                sources: list | None = None) -> str:
    """The cuobjdump-style listing of a program (bytes or decoded instructions); with `sources`, each instruction's
    (file, line) or None (a code object's line table), a `// file:line` line where the line changes, as
    cuobjdump -lineinfo prints them (`assemble` skips them, as any `//` comment)."""
    if isinstance(code, bytes | bytearray):
        insts = decode_program(bytes(code), base)
        words = [bytes(code[i:i + INSTRUCTION_BYTES]) for i in range(0, len(code), INSTRUCTION_BYTES)]
    else:
        insts = list(code)
        words = [encode(i) for i in insts]
    lines = []
    for i, (inst, word) in enumerate(zip(insts, words, strict=True)):
        address = base + i * INSTRUCTION_BYTES
        lo = int.from_bytes(word[:8], "little")
        hi = int.from_bytes(word[8:], "little")
        text = format_instruction(inst, address)
        if sources and sources[i] is not None and (i == 0 or sources[i] != sources[i - 1]):
            lines.append(f"{indent}// {sources[i][0]}:{sources[i][1]}")
        lines.append(f"{indent}/*{address:04x}*/  {text:<{_TEXT_WIDTH}} /* 0x{lo:016x} */")
        lines.append(f"{indent}{'':10}{'':<{_TEXT_WIDTH}} /* 0x{hi:016x} */")
    return "\n".join(lines)


_LISTING = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*/\*\s*0x([0-9a-fA-F]{16})\s*\*/\s*$")
_HIGH_WORD = re.compile(r"^\s*/\*\s*0x([0-9a-fA-F]{16})\s*\*/\s*$")
_LABEL = re.compile(r"^\s*([A-Za-z_.$][\w.$]*)\s*:\s*$")


def assemble(source: str) -> list[Instruction]:
    """Instructions from assembly text or a listing; raises IsaError naming the line and its text."""
    pending: list[tuple[int, str, int | None]] = []   # (line number, text, low word of a listing line)
    labels: dict[str, int] = {}
    words: dict[int, list[int]] = {}
    for number, raw in enumerate(source.splitlines(), 1):
        line = raw.split("//")[0].rstrip()
        if not line.strip():
            continue
        if m := _HIGH_WORD.match(line):
            if len(words.get(len(pending) - 1, [])) != 1:
                raise IsaError(f"line {number}: the high half of a word with no listing line above it to complete "
                               f"(in {line.strip()!r})")
            words[len(pending) - 1].append(int(m.group(1), 16))
            continue
        if m := _LABEL.match(line):
            if m.group(1) in labels:
                raise IsaError(f"line {number}: label {m.group(1)!r} is already defined")
            labels[m.group(1)] = len(pending) * INSTRUCTION_BYTES
            continue
        if m := _LISTING.match(line):
            pending.append((number, m.group(2), int(m.group(3), 16)))
            words[len(pending) - 1] = [int(m.group(3), 16)]
            continue
        pending.append((number, re.sub(r"^\s*/\*[0-9a-fA-F]+\*/", "", line).strip(), None))
    program = []
    for index, (number, text, _) in enumerate(pending):
        address = index * INSTRUCTION_BYTES
        try:
            inst = parse_instruction(text, address, labels)
            if len(words.get(index, [])) == 2:
                lo, hi = words[index]
                decoded = decode((hi << 64 | lo).to_bytes(16, "little"), address)
                if decoded.__class__(**{**decoded.__dict__, "ctrl": inst.ctrl}) != inst:
                    raise IsaError(f"the text does not match its word 0x{hi:016x}{lo:016x}")
                inst = decoded
        except IsaError as e:
            raise IsaError(f"line {number}: {e} (in {text!r})") from None
        program.append(inst)
    return program


_TOKEN_SPLIT = re.compile(r",\s*(?![^\[]*\])")


def _unwrap(token: str) -> tuple[str, bool, bool]:
    """Strip the sign and absolute-value bars: '-|R2|' -> ('R2', True, True)."""
    neg = token.startswith("-") and not re.fullmatch(r"-(0x[0-9a-fA-F]+|[\d.]+(e-?\d+)?|inf)", token)
    token = token[1:] if neg else token
    absolute = len(token) > 2 and token[0] == token[-1] == "|"
    return (token[1:-1] if absolute else token), neg, absolute


def _parse_reg(token: str) -> tuple[int, bool]:
    neg = token.startswith("-")
    token = token.lstrip("-")
    if token == "RZ":
        return RZ, neg
    if re.fullmatch(r"R\d+", token) and int(token[1:]) < RZ:
        return int(token[1:]), neg
    raise IsaError(f"expected a register, got {token!r}")


def _parse_pred(token: str) -> tuple[int, bool]:
    neg = token.startswith("!")
    token = token.lstrip("!")
    if token == "PT":
        return PT, neg
    if re.fullmatch(r"P[0-6]", token):
        return int(token[1]), neg
    raise IsaError(f"expected a predicate, got {token!r}")


def _parse_int(token: str) -> int:
    try:
        return int(token, 0)
    except ValueError:
        raise IsaError(f"expected a number, got {token!r}") from None


def _imm(value: int) -> Imm:
    if not -(1 << 31) <= value < (1 << 32):
        raise IsaError(f"immediate {value:#x} does not fit in 32 bits")
    return Imm(value & 0xFFFFFFFF)


def _parse_b(token: str, b_float: bool) -> tuple[Reg | Imm | Const, bool, bool]:
    inner, neg, absolute = _unwrap(token)
    if m := re.fullmatch(r"c\[(0x[0-9a-fA-F]+|\d+)\]\[(0x[0-9a-fA-F]+|\d+)\]", inner):
        return Const(_parse_int(m.group(1)), _parse_int(m.group(2))), neg, absolute
    if re.fullmatch(r"R\d+|RZ", inner):
        return Reg(_parse_reg(inner)[0]), neg, absolute
    if b_float and not re.fullmatch(r"-?0x[0-9a-fA-F]+", token):
        try:
            return Imm(float_bits(float(token))), False, False
        except ValueError:
            raise IsaError(f"expected a float, got {token!r}") from None
        except OverflowError:   # finite but past float32's largest, which struct refuses to round to inf
            raise IsaError(f"float {token} does not fit in 32 bits") from None
    return _imm(_parse_int(token)), False, False


def _parse_address(token: str, wide: bool) -> tuple[int, Imm]:
    m = re.fullmatch(r"\[\s*(?:(R\d+|RZ)(\.64)?)?\s*(?:([+-])?\s*(0x[0-9a-fA-F]+|\d+))?\s*\]", token)
    if not m or (m.group(1) and bool(m.group(2)) != wide):
        raise IsaError(f"expected an address like {'[R2.64+0x10]' if wide else '[R2+0x10]'}, got {token!r}")
    base = _parse_reg(m.group(1))[0] if m.group(1) else RZ
    off = _parse_int(m.group(4)) if m.group(4) else 0
    return base, _imm(-off if m.group(3) == "-" else off)


def parse_instruction(text: str, address: int = 0, labels: dict[str, int] | None = None) -> Instruction:
    text = text.strip().rstrip(";").strip()
    guard, guard_neg = PT, False
    if text.startswith("@"):
        head, *after = text[1:].split(None, 1) or [""]
        guard, guard_neg = _parse_pred(head)
        if not after:
            raise IsaError(f"guard @{head} has no instruction after it")
        text = after[0]
    name, _, rest = text.partition(" ")
    op, *given = name.split(".")
    if op not in OPCODES:
        raise IsaError(f"unknown opcode {op!r}")
    spec = OPCODES[op]
    # Map each given modifier to its group: a width like "64" may belong to several groups, so
    # take groups in table order, leaving a group at its default when the token is not its.
    mods: dict[str, str] = {}
    tokens = list(given)
    for group, choices in spec.modifiers:
        if tokens and tokens[0] in choices:
            mods[group] = tokens.pop(0)
        elif "" not in choices and len(choices) > 1 and not tokens:
            raise IsaError(f"{op} needs a .{'/.'.join(choices)} modifier")
    if tokens:
        raise IsaError(f"{op} does not take modifier(s) .{'.'.join(tokens)}")
    operands = [t.strip() for t in _TOKEN_SPLIT.split(rest.strip())] if rest.strip() else []
    if len(operands) != len(spec.operands):
        raise IsaError(f"{op} takes {len(spec.operands)} operand(s) {spec.operands}, got {len(operands)}")
    fields: dict = {"guard": guard, "guard_neg": guard_neg}
    neg = absolute = ""
    for kind, token in zip(spec.operands, operands, strict=True):
        if kind == "Rd":
            fields["rd"] = _parse_reg(token)[0]
        elif kind in ("Ra", "Rc"):
            inner, negated, bars = _unwrap(token)
            fields["ra" if kind == "Ra" else "rc"] = _parse_reg(inner)[0]
            neg += kind[1].lower() if negated else ""
            absolute += kind[1].lower() if bars else ""
        elif kind in ("B", "C"):
            fields["b"], negated, bars = _parse_b(token, spec.b_float)
            neg += "b" if negated else ""
            absolute += "b" if bars else ""
        elif kind == "SR":
            if token not in SPECIAL_REGISTERS:
                raise IsaError(f"unknown special register {token!r}")
            fields["b"] = Imm(SPECIAL_REGISTERS.index(token))
        elif kind == "T":
            target = (labels or {}).get(token)
            target = _parse_int(token) if target is None else target
            fields["b"] = _imm(target - address - INSTRUCTION_BYTES)
        elif kind in ("MG", "MS"):
            fields["ra"], fields["b"] = _parse_address(token, kind == "MG")
        elif kind == "Pd":
            fields["pd"] = _parse_pred(token)[0]
        elif kind == "Ps":
            fields["ps"], fields["ps_neg"] = _parse_pred(token)
        elif kind == "Pq":
            fields["pq"], fields["pq_neg"] = _parse_pred(token)
    inst = make(op, mods=mods, neg="".join(sorted(neg)), abs_="".join(sorted(absolute)), ctrl=Control(), **fields)
    encode(inst)   # validates the combination
    return inst
