"""One instruction of the lapis ISA as a value: opcode, modifiers, operands, control bits.

Shared specification (imports no layer). `Instruction` is what the compiler emits, what the
encoder turns into a 128-bit word, what the decoder gives back and what the disassembler
prints. Register pairs (64-bit values) are named by their even first register, as in SASS.
"""

from dataclasses import dataclass, field

from lapis.isa.opcodes import OPCODES, PT, RZ, Opcode

INSTRUCTION_BYTES = 16


class IsaError(ValueError):
    """An instruction that the ISA cannot express or a word that is not a valid instruction."""


@dataclass(frozen=True)
class Reg:
    index: int


@dataclass(frozen=True)
class Imm:
    """A 32-bit immediate, stored as its raw bits (floats as IEEE-754 single bits)."""
    bits: int


@dataclass(frozen=True)
class Const:
    bank: int
    offset: int


@dataclass(frozen=True)
class Control:
    """The scheduling bits that ride with every instruction (Volta-style)."""
    stall: int = 1          # cycles before the next instruction may issue (0-15)
    yield_: bool = False    # hint: let another warp issue
    wbar: int = 7           # scoreboard barrier set when the result is written (7 = none)
    rbar: int = 7           # scoreboard barrier set when the sources have been read (7 = none)
    wait: int = 0           # mask of barriers to wait on before issuing (6 bits)
    reuse: int = 0          # operand-reuse cache flags (4 bits)


@dataclass(frozen=True)
class Instruction:
    op: str
    mods: tuple[str, ...] = ()     # one choice per modifier group of the opcode, in table order
    rd: int = RZ
    ra: int = RZ
    b: Reg | Imm | Const = Reg(RZ)
    rc: int = RZ
    pd: int = PT
    ps: int = PT
    ps_neg: bool = False
    pq: int = PT
    pq_neg: bool = False
    neg: str = ""                  # which of a, b, c are negated
    abs_: str = ""                 # which of a, b are taken as absolute values (applied before negation)
    guard: int = PT
    guard_neg: bool = False
    ctrl: Control = field(default_factory=Control)

    @property
    def opcode(self) -> Opcode:
        return OPCODES[self.op]

    @property
    def simm(self) -> int:
        """Operand B's immediate read as a signed 32-bit number (memory offsets, branch displacements)."""
        bits = self.b.bits
        return bits - (1 << 32) if bits & 0x80000000 else bits

    def branch_target(self, address: int) -> int:
        """The address a BRA at `address` jumps to: its displacement counts from the next instruction."""
        return address + INSTRUCTION_BYTES + self.simm

    def mod(self, group: str) -> str:
        """The chosen modifier of `group` (e.g. inst.mod('cmp') == 'LT')."""
        for (name, _), choice in zip(self.opcode.modifiers, self.mods, strict=True):
            if name == group:
                return choice
        raise KeyError(group)


def make(op: str, *, mods: dict[str, str] | None = None, **fields) -> Instruction:
    """Build an instruction, filling each modifier group with its first (default) choice."""
    if op not in OPCODES:
        raise IsaError(f"unknown opcode {op!r}")
    chosen = dict(mods or {})
    spec = OPCODES[op]
    values = []
    for name, choices in spec.modifiers:
        value = chosen.pop(name, choices[0])
        if value not in choices:
            raise IsaError(f"{op}: modifier {name} must be one of {choices}, not {value!r}")
        values.append(value)
    if chosen:
        raise IsaError(f"{op} has no modifier group {sorted(chosen)}")
    return Instruction(op, tuple(values), **fields)
