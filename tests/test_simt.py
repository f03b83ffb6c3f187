"""Layer 0: the SIMT core's own machinery: its dispatch table against the ISA."""

import pytest

from lapis.hardware.simt import BINDERS, KernelFault
from lapis.hardware.simt.binders import binds
from lapis.isa import OPCODES


def test_every_opcode_has_exactly_one_binder():
    assert sorted(BINDERS) == sorted(OPCODES)

    def again(blocks, inst, pc):
        return None
    fadd = BINDERS["FADD"]
    with pytest.raises(ValueError, match="FADD is bound by both fadd and again"):
        binds("FADD")(again)
    with pytest.raises(ValueError, match="again binds FOO, which the ISA does not define"):
        binds("FOO")(again)
    assert BINDERS["FADD"] is fadd and "FOO" not in BINDERS


def test_a_branch_out_of_the_program_faults_only_when_taken(bench):
    assert bench.run("@P0 BRA 0x1000 ;\nEXIT ;").steps == 2          # P0 is false: nothing jumps
    with pytest.raises(KernelFault, match=r"branch target 0x1000 is outside the program \(instruction /\*0000\*/"):
        bench.run("BRA 0x1000 ;\nEXIT ;")


@pytest.mark.parametrize("instruction", ["LDS R1, [R40]", "ATOMS.ADD.U32 R1, [R40], R2",
                                         "HMMA.16816.F16 R0, R4, R40, R8"])
def test_a_register_past_the_declared_count_faults_when_reached(bench, instruction):
    with pytest.raises(KernelFault, match=r"uses R40 but the kernel declares 32 registers \(instruction /\*0010\*/"):
        bench.run(f"NOP ;\n{instruction} ;\nEXIT ;", registers=32, shared=64)
