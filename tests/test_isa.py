"""The ISA specification: encoding round trips, strict decoding, the text forms."""

import re

import pytest
from hypothesis import given
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
