"""The ISA specification: encoding round trips, strict decoding, the text forms."""

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lapis import isa
from lapis.isa import OPCODES, PT, RZ, Const, Control, Imm, IsaError, Reg

regs = st.integers(0, RZ)
preds = st.integers(0, PT)


@st.composite
def instructions(draw):
    """Any valid instruction: every field the opcode uses drawn at random, the rest at default."""
    op = draw(st.sampled_from(sorted(OPCODES)))
    spec = OPCODES[op]
    used = isa.slots(spec)
    fields = {}
    mods = {name: draw(st.sampled_from(choices)) for name, choices in spec.modifiers}
    if "rd" in used:
        fields["rd"] = draw(regs)
    if "ra" in used:
        fields["ra"] = draw(regs)
    if "rc" in used:
        fields["rc"] = draw(regs)
    if "pd" in used:
        fields["pd"] = draw(preds)
    if "ps" in used:
        fields["ps"], fields["ps_neg"] = draw(preds), draw(st.booleans())
    if "pq" in used:
        fields["pq"], fields["pq_neg"] = draw(preds), draw(st.booleans())
    if "b" in used:
        kinds = [k for k in spec.b_kinds]
        kind = draw(st.sampled_from(kinds))
        top = len(isa.SPECIAL_REGISTERS) - 1 if "SR" in spec.operands else 2**32 - 1
        fields["b"] = {"r": lambda: Reg(draw(regs)), "i": lambda: Imm(draw(st.integers(0, top))),
                       "c": lambda: Const(draw(st.integers(0, 31)), draw(st.integers(0, 2**16 - 1)))}[kind]()
    fields["neg"] = "".join(x for x in spec.negatable if draw(st.booleans())
                            and not (x == "b" and isinstance(fields.get("b"), Imm)))
    fields["abs_"] = "".join(x for x in spec.absolutable if draw(st.booleans())
                             and not (x == "b" and isinstance(fields.get("b"), Imm)))
    fields["guard"], fields["guard_neg"] = draw(preds), draw(st.booleans())
    fields["ctrl"] = Control(draw(st.integers(0, 15)), draw(st.booleans()), draw(st.integers(0, 7)),
                             draw(st.integers(0, 7)), draw(st.integers(0, 63)), draw(st.integers(0, 15)))
    return isa.make(op, mods=mods, **fields)


@given(instructions())
def test_decode_inverts_encode(inst):
    word = isa.encode(inst)
    assert len(word) == 16
    assert isa.decode(word) == inst


@given(st.lists(instructions(), min_size=1, max_size=12))
def test_listing_assembles_back_to_the_same_program(program):
    listing = isa.disassemble(program)
    assert isa.assemble(listing) == program


def test_listing_looks_like_cuobjdump():
    program = isa.assemble("S2R R0, SR_TID.X ;\nMOV R1, c[0x0][0x160] ;\n@!P0 BRA 0x0 ;\nEXIT ;")
    lines = isa.disassemble(program).splitlines()
    assert len(lines) == 8
    assert re.fullmatch(r"\s*/\*0010\*/  MOV R1, c\[0x0\]\[0x160\] ;\s+/\* 0x[0-9a-f]{16} \*/", lines[2])
    assert re.fullmatch(r"\s+/\* 0x[0-9a-f]{16} \*/", lines[3])
    word = isa.encode(program[1])
    assert f"0x{int.from_bytes(word[:8], 'little'):016x}" in lines[2]
    assert f"0x{int.from_bytes(word[8:], 'little'):016x}" in lines[3]
    assert "@!P0 BRA 0x0 ;" in lines[4]


def test_text_round_trip_with_labels():
    source = """
        S2R R0, SR_TID.X ;
    loop:
        ISETP.GE.S32.AND P0, R0, 0x40, PT ;
        @P0 BRA done ;
        FFMA R2, -R3, 1.5, R2 ;
        LDG.E.64 R4, [R6.64+0x10] ;
        STS [R8-0x4], R2 ;
        IADD R0, R0, 0x20 ;
        BRA loop ;
    done:
        EXIT ;
    """
    program = isa.assemble(source)
    assert program[3].neg == "a" and isa.bits_float(program[3].b.bits) == 1.5
    assert program[4].mods == ("E", "64") and program[4].b == Imm(0x10)
    assert program[5].b == Imm((-4) & 0xFFFFFFFF)
    text = [isa.format_instruction(inst, 16 * i) for i, inst in enumerate(program)]
    assert text[2] == "@P0 BRA 0x80 ;" and text[7] == "BRA 0x10 ;"
    assert isa.assemble("\n".join(text)) == program


def test_invalid_words_are_rejected_with_a_reason():
    good = int.from_bytes(isa.encode(isa.make("IADD", rd=1, ra=2, b=Reg(3))), "little")
    with pytest.raises(IsaError, match="unknown opcode"):
        isa.decode((good & ~0xFFF | 0xABC).to_bytes(16, "little"))
    with pytest.raises(IsaError, match="reserved"):
        isa.decode((good | 1 << 104).to_bytes(16, "little"))
    with pytest.raises(IsaError, match="absolute value"):
        isa.decode((good | 1 << 127).to_bytes(16, "little"))        # IADD has no |b|
    with pytest.raises(IsaError, match="kind 3"):
        isa.decode((good | 3 << 72).to_bytes(16, "little"))
    with pytest.raises(IsaError, match=r"at /\*0040\*/"):
        isa.decode((good | 1 << 104).to_bytes(16, "little"), 0x40)
    exit_word = int.from_bytes(isa.encode(isa.make("EXIT")), "little")
    with pytest.raises(IsaError, match="does not use"):
        isa.decode((exit_word & ~(0xFF << 16) | 5 << 16).to_bytes(16, "little"))   # EXIT with a destination


def test_assembler_errors_name_the_line():
    with pytest.raises(IsaError, match="line 2: unknown opcode 'FOO'"):
        isa.assemble("NOP ;\nFOO R1, R2 ;")
    with pytest.raises(IsaError, match="takes 3 operand"):
        isa.assemble("IADD R1, R2 ;")
    with pytest.raises(IsaError, match="cannot negate"):
        isa.assemble("FMUL R1, R2, -R3 ;".replace("FMUL", "SHL"))


MALFORMED_SOURCES = [   # (source, what the error must say); each once raised a raw ValueError or went unreported
    ("@P0", r"line 1: guard @P0 has no instruction after it \(in '@P0'\)"),
    ("NOP ;\n@!P1 ;", r"line 2: guard @!P1 has no instruction after it"),
    ("STS [R8-04], R2 ;", r"line 1: expected a number, got '04' \(in 'STS \[R8-04\], R2 ;'\)"),
    ("MOV R1, c[08][0x160] ;", r"expected a number, got '08'"),
    ("FADD R1, R2, 1e39 ;", r"float 1e39 does not fit in 32 bits"),
    ("loop:\nNOP ;\nloop:\nBRA loop ;", r"line 3: label 'loop' is already defined"),
    ("/* 0x000fc200000efcff */", r"line 1: the high half of a word with no listing line above it"),
    ("        /*0000*/  EXIT ;  /* 0x000000ffffff7001 */\n  /* 0x000fc200000efcff */\n  /* 0x000fc200000efcff */",
     r"line 3: the high half of a word"),
    ("        /*0000*/  NOP ;  /* 0x000000ffffff7001 */\n  /* 0x000fc200000efcff */",
     r"line 1: the text does not match its word 0x000fc200000efcff000000ffffff7001 \(in 'NOP ;'\)"),
]


@pytest.mark.parametrize("source, message", MALFORMED_SOURCES)
def test_malformed_assembly_is_refused_with_the_line_and_its_text(source, message):
    with pytest.raises(IsaError, match=message):
        isa.assemble(source)


@pytest.mark.parametrize("word, message", [
    (bytes(15), "an instruction word is 16 bytes, got 15"),
    (b"", "an instruction word is 16 bytes, got 0"),
    (1 << 128, "is not a 128-bit instruction word"),
    (-1, "is not a 128-bit instruction word"),
])
def test_words_of_the_wrong_size_are_refused(word, message):
    with pytest.raises(IsaError, match=message):
        isa.decode(word)


def test_a_listing_of_a_partial_word_is_refused():
    code = isa.encode(isa.make("EXIT")) + b"\x01"
    with pytest.raises(IsaError, match="code size 17 is not a multiple of 16"):
        isa.disassemble(code)


# Bytes a hostile or careless source is made of: operand syntax, digits, separators, controls and non-ASCII.
FUZZ_ALPHABET = "RPZTcxSR_0123456789abcdefE.@!-|[]+*/,;: \t\n\x00\xff\u00e9"


@st.composite
def mutated_sources(draw):
    """A real program's listing or plain text with a few characters inserted, deleted or replaced."""
    program = draw(st.lists(instructions(), min_size=1, max_size=3))
    text = list(draw(st.sampled_from([isa.disassemble(program),
                                      "\n".join(isa.format_instruction(i, 16 * n) for n, i in enumerate(program))])))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text) - 1))
        edit = draw(st.sampled_from(["insert", "delete", "replace"]))
        if edit == "delete":
            del text[at]
        else:
            text[at:at + (edit == "replace")] = draw(st.sampled_from(FUZZ_ALPHABET))
    return "".join(text)


# Tokens of the assembly language and near misses of them, for lines that are wrong in their structure.
FUZZ_TOKENS = [*OPCODES, "ISETP.GE.S32.AND", "LDG.E.64", "IADD.FOO", "@P0", "@!PT", "@P9", "R0", "R255", "R300", "RZ",
               "P0", "!P6", "PT", "SR_TID.X", "SR_NOPE", "0x10", "010", "-0x4", "0x1ffffffff", "1.5", "1e39", "-inf",
               "nan", "c[0x0][0x160]", "c[08][0x0]", "c[0x20][0x0]", "[R2.64+0x10]", "[R8-04]", "[R8+-0x4]", "[0x10]",
               "loop", "loop:", ",", ";", "-|R3|", "|R4", "--R1", "/*0010*/", "/* 0x000fc200000efcff */", "//"]


@st.composite
def token_sources(draw):
    lines = draw(st.lists(st.lists(st.sampled_from(FUZZ_TOKENS), max_size=7), min_size=1, max_size=4))
    return "\n".join(" ".join(line) for line in lines)


@settings(max_examples=200, deadline=None)
@given(st.one_of(mutated_sources(), token_sources(), st.text(FUZZ_ALPHABET, max_size=60), st.text(max_size=60)))
@example("@P0")                      # these three once escaped as a raw ValueError or OverflowError
@example("STS [R8-04], R2 ;")
@example("FADD R1, R2, 1e39 ;")
def test_assemble_accepts_a_program_or_raises_isa_error(source):
    """Anything the assembler accepts lists and assembles back to itself; the rest is an IsaError naming the line
    (never an IndexError, KeyError, OverflowError or a bare ValueError from a parser underneath)."""
    try:
        program = isa.assemble(source)
    except IsaError as e:
        assert re.match(r"line \d+: ", str(e)), str(e)
    else:
        assert isa.assemble(isa.disassemble(program)) == program


@st.composite
def mutated_words(draw):
    """A valid instruction's word with one to three bits flipped."""
    word = int.from_bytes(isa.encode(draw(instructions())), "little")
    for bit in draw(st.lists(st.integers(0, 127), min_size=1, max_size=3)):
        word ^= 1 << bit
    return word.to_bytes(16, "little")


@settings(max_examples=200, deadline=None)
@given(st.one_of(mutated_words(), st.binary(min_size=16, max_size=16), st.binary(max_size=40)))
def test_decode_and_disassemble_list_a_word_or_raise_isa_error(code):
    """Random code decodes into a listing that assembles back to the same bytes, or is refused with IsaError."""
    try:
        listing = isa.disassemble(code)
    except IsaError as e:
        assert re.search(r"invalid instruction word 0x[0-9a-f]{32} at /\*[0-9a-f]{4}\*/: |code size", str(e)), str(e)
    else:
        assert isa.encode_program(isa.assemble(listing)) == code


def test_the_isa_reference_page_is_generated_from_the_table():
    from pathlib import Path

    from lapis.isa.reference import markdown
    page = Path(__file__).resolve().parent.parent / "docs" / "isa.md"
    assert page.read_text() == markdown(), "regenerate it: python -m lapis.isa > docs/isa.md"
    assert all(f"| `{op}` |" in page.read_text() for op in OPCODES)


READ_BEFORE_WRITTEN = [
    ("MOV R1, 0x1 ;\nIADD R2, R1, R1 ;\nEXIT ;", set()),                      # written first
    ("IADD R2, R1, 0x1 ;\nEXIT ;", {1}),                                        # read first
    ("@P0 MOV R1, 0x1 ;\nIADD R2, R1, 0x1 ;\nEXIT ;", {1}),                     # a guarded write may not happen
    ("@P0 BRA 0x20 ;\nMOV R1, 0x1 ;\nIADD R2, R1, 0x1 ;\nEXIT ;", {1}),         # a path around the write
    ("@P0 BRA 0x30 ;\nMOV R1, 0x1 ;\nBRA 0x40 ;\nMOV R1, 0x2 ;\nIADD R2, R1, 0x1 ;\nEXIT ;", set()),  # both paths
    ("MOV R3, 0x0 ;\nIADD R3, R3, R4 ;\nISETP.LT.S32.AND P0, R3, 0x10, PT ;\n@P0 BRA 0x10 ;\nEXIT ;", {4}),     # a loop
    ("LDG.E.64 R4, [R6.64] ;\nDADD R8, R4, R4 ;\nEXIT ;", {6, 7}),             # a pair read, a pair written
    ("FRND.FLOOR.F64 R4, R6 ;\nEXIT ;", {6, 7}),
    ("EXIT ;\nIADD R2, R1, 0x1 ;", set()),                                      # never reached
]


@pytest.mark.parametrize("source, expected", READ_BEFORE_WRITTEN)
def test_registers_read_before_written_follow_every_path(source, expected):
    from lapis.isa.dataflow import read_before_written
    assert read_before_written(isa.assemble(source)) == expected
