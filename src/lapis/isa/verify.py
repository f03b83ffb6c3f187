"""What a decoded program must satisfy to run with its kernel descriptor: the loader's and the front end's check.

Shared specification (imports no layer). A word that decodes is a valid instruction, but a program can still
ask for what its launch does not have: a register at or past the count its kernel descriptor declares (a
register pair or quad counts every register it spans), or a branch to an address outside the program or
between two instructions. The runtime refuses such a code object when it is loaded (as ROCr refuses one with
HSA_STATUS_ERROR_INVALID_CODE_OBJECT), and the command processor refuses a dispatch of one that reaches it
another way (a packet pointing at hand-written machine code) as a fault of that queue alone, as an NVIDIA SM
reports an out-of-range register or a PC outside the program as an error of the one launch.
"""

from lapis.isa.dataflow import PRED_BASE, registers
from lapis.isa.instruction import INSTRUCTION_BYTES, Instruction, IsaError
from lapis.isa.opcodes import RZ
from lapis.isa.text import format_instruction


class InvalidProgram(IsaError):
    """An instruction its launch cannot run: where it is, its text and why, as a `KernelFault` names them."""

    def __init__(self, pc: int, instruction: str, reason: str):
        super().__init__(f"{reason} (instruction /*{pc:04x}*/ {instruction})")
        self.pc, self.instruction, self.reason = pc, instruction, reason


def register_problem(inst: Instruction, declared: int, warp_size: int) -> str | None:
    """Why the instruction cannot run in a kernel declaring `declared` registers on warps of `warp_size` lanes
    (a register it reads or writes is not there), or None."""
    read, written = registers(inst)
    used = [r for r in (*read, *written) if r < PRED_BASE]
    if inst.op == "VOTE" and warp_size > 32 and inst.rd != RZ:
        used.append(inst.rd + 1)            # a ballot of 64 lanes fills a register pair
    past = [r for r in used if r >= declared]
    return f"uses R{min(past)} but the kernel declares {declared} registers" if past else None


def branch_problem(inst: Instruction, address: int, end: int) -> str | None:
    """Why the branch at byte `address` of a program of `end` bytes cannot jump to its target (not an
    instruction of the program), or None."""
    target = inst.branch_target(address)
    if inst.simm % INSTRUCTION_BYTES:
        return f"branch target {target:#x} is not at an instruction boundary"
    if not 0 <= target < end:
        return f"branch target {target:#x} is outside the program"
    return None


def check_program(program: list[Instruction], declared: int, warp_size: int) -> None:
    """Raise InvalidProgram for the first instruction of `program` that a kernel declaring `declared` registers,
    on warps of `warp_size` lanes, cannot run: a register past the declared count, or a branch whose target
    is not an instruction of the program (before its first, past its last, or between two)."""
    end = len(program) * INSTRUCTION_BYTES
    for pc, inst in enumerate(program):
        address = pc * INSTRUCTION_BYTES
        reason = register_problem(inst, declared, warp_size)
        if reason is None and inst.op == "BRA":
            reason = branch_problem(inst, address, end)
        if reason is not None:
            raise InvalidProgram(address, format_instruction(inst, address), reason)
