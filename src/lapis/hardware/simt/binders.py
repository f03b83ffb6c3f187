"""The one table from opcode to the code that executes it.

GPGPU-Sim's opcodes.def names, for every opcode, the function that implements it, and its
functional simulator dispatches through that table. `BINDERS` is that table for the lapis
ISA: each instruction family registers its binders beside their definitions with
`@binds("MNEMONIC")` (`integer.py`, `floating.py`, `memory_access.py`, `warp.py`, and the
control instructions in `scheduler.py`), and a test checks it against the ISA's opcode table:
every opcode has exactly one binder and every binder an opcode.

A binder does an instruction's decoding work once: it reads the operands and modifiers,
picks the register rows, folds constants and chooses the numpy functions, and returns the
instruction's executor, a closure that runs it for the lanes of an active-lane mask. `bind`
looks the binder up and applies the instruction's guard predicate (`@P0`), so binders leave
the guard alone; the exception is the control instructions (`CONTROL`), which the scheduler
runs itself: their executors say which lanes the instruction applies to, guard included,
and the scheduler moves those lanes.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from lapis.isa import OPCODES, PT, Instruction
from lapis.isa.verify import register_problem

if TYPE_CHECKING:
    from lapis.hardware.simt.blocks import ResidentBlocks

Mask = np.ndarray | None                 # the active lanes; None when every lane is active
Executor = Callable[[Mask], object]      # runs one instruction for the lanes of a mask
Binder = Callable[["ResidentBlocks", Instruction, int], Executor]    # (blocks, instruction, pc) -> executor

# Branches, exits and barriers move lanes between program counters or hold them there: the
# scheduler (`SimtCore._run_blocks`) runs them, asking their executors which lanes take part.
CONTROL = frozenset({"BRA", "EXIT", "BAR"})

BINDERS: dict[str, Binder] = {}


def binds(*mnemonics: str) -> Callable[[Binder], Binder]:
    """Register the decorated function as the binder of each of `mnemonics`."""
    def register(binder: Binder) -> Binder:
        for mnemonic in mnemonics:
            if mnemonic not in OPCODES:
                raise ValueError(f"{binder.__name__} binds {mnemonic}, which the ISA does not define")
            if mnemonic in BINDERS:
                raise ValueError(f"{mnemonic} is bound by both {BINDERS[mnemonic].__name__} and {binder.__name__}")
            BINDERS[mnemonic] = binder
        return binder
    return register


def bind(blocks: "ResidentBlocks", pc: int) -> Executor:
    """The executor of the instruction at `pc` for this batch of blocks."""
    inst = blocks.d.program[pc]
    # A register the launch does not have faults here, once, rather than as the executor writes it.
    problem = register_problem(inst, blocks.d.registers, blocks.core.warp_size)
    if problem is not None:
        raise blocks.fault(pc, problem)
    try:
        execute = BINDERS[inst.op](blocks, inst, pc)
    except ValueError as e:            # the instruction asks for something this launch does not have
        raise blocks.fault(pc, str(e)) from None
    if inst.op in CONTROL or (inst.guard == PT and not inst.guard_neg):
        return execute
    guard, negated = blocks.registers.P[inst.guard], inst.guard_neg

    def guarded(mask: Mask) -> None:
        active = ~guard if negated else guard.copy()
        if mask is not None:
            active &= mask
        if active.any():
            execute(active)
    return guarded
