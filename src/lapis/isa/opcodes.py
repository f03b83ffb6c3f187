"""The opcode table of the lapis ISA: the one place every instruction is defined.

Shared specification (imports no layer): the compiler (Layer 3) encodes with it and the
simulated GPU (Layer 0) decodes and executes with it, as ptxas and the silicon share
NVIDIA's instruction set. Each row gives the mnemonic, the opcode number, the operands in
the order they print, the modifier groups (each a list of choices, encoded as a small
field), the pipe that executes it, its latency class and a one-line semantics. The
hardware keeps one implementation per row; a test checks that none is missing.

Operand slots (their bit positions are in `encoding.py`):
  Rd  destination register        Ra, Rc  source registers
  B   register, 32-bit immediate or constant-bank operand c[bank][offset]
  Pd  destination predicate       Ps, Pq  source predicates (may be negated: !P0)
  SR  special register (in B)     T  branch target (relative, in B)
  MG  global address [Ra.64+imm]  MS  shared or local address [Ra+imm]   C  constant operand only

Pipes (the execution units the performance model charges): CBU branch unit, ALU integer and
logic, FMA float32 (and packed half) multiply-add, FP64, SFU transcendentals, LSU loads,
stores, atomics and shuffles, MMA the matrix (tensor-core) unit.
"""

from dataclasses import dataclass
from enum import IntEnum

# Latency classes: fixed-latency pipes have a known result delay the scheduler encodes as
# stall cycles; variable-latency ones (memory, special function unit) use scoreboard barriers.
FIXED, VARIABLE = "fixed", "variable"


@dataclass(frozen=True)
class Opcode:
    mnemonic: str
    code: int
    operands: tuple[str, ...]
    modifiers: tuple[tuple[str, tuple[str, ...]], ...]
    pipe: str
    latency: int
    latency_class: str
    semantics: str
    b_kinds: str = "ric"          # which forms operand B may take: r(egister) i(mmediate) c(onstant)
    b_float: bool = False         # print an immediate B as a float
    negatable: str = ""           # which of a, b, c accept a negation flag
    absolutable: str = ""         # which of a, b accept an absolute-value flag (|R2|)


CMP = ("F", "LT", "EQ", "LE", "GT", "NE", "GE", "T")
BOOL_OP = ("AND", "OR", "XOR")
WIDTH64 = ("", "64")
MEM_WIDTH = ("", "U8", "S8", "U16", "S16", "64", "128")   # "" is 32 bits
MEM_BYTES = dict(zip(MEM_WIDTH, (4, 1, 1, 2, 2, 8, 16), strict=True))   # bytes each width moves per lane
FLOATS = ("F32", "F64", "F16", "BF16")                   # F16 and BF16 live in a register's low half
HALF = ("F16", "BF16")                                    # packed: two halves per register
ATOM_OP = ("ADD", "MIN", "MAX", "EXCH", "CAS", "AND", "OR", "XOR", "INC", "DEC")
ATOM_TYPE = ("U32", "S32", "F32", "U64", "F64")
ATOM_WIDE = ("U64", "F64")                                # atomics on 8-byte words, their values in register pairs

_ROWS = [
    # control
    Opcode("NOP", 0x000, (), (), "CBU", 1, FIXED, "no operation"),
    Opcode("EXIT", 0x001, (), (), "CBU", 1, FIXED, "active lanes finish"),
    Opcode("BRA", 0x002, ("T",), (), "CBU", 1, FIXED, "active lanes whose guard holds jump to T", "i"),
    Opcode("BAR", 0x003, ("B",), (("op", ("SYNC",)),), "CBU", 1, FIXED,
           "wait until every live thread of the block arrives (barrier number B)", "i"),
    Opcode("BPT", 0x004, ("B",), (("op", ("TRAP",)),), "CBU", 1, FIXED,
           "an active lane whose guard holds stops the kernel with trap number B (a device-side assert)", "i"),
    # moves and special registers
    Opcode("S2R", 0x010, ("Rd", "SR"), (), "ALU", 20, VARIABLE, "d = special register", "i"),
    Opcode("MOV", 0x011, ("Rd", "B"), (), "ALU", 4, FIXED, "d = b"),
    Opcode("LDC", 0x012, ("Rd", "C"), (("w", WIDTH64),), "LSU", 12, VARIABLE,
           "d = constant bank word (pair with .64)", "c"),
    Opcode("SEL", 0x013, ("Rd", "Ra", "B", "Ps"), (), "ALU", 4, FIXED, "d = ps ? a : b"),
    # integer
    Opcode("IADD", 0x020, ("Rd", "Ra", "B"), (("w", WIDTH64),), "ALU", 4, FIXED, "d = a + b", negatable="ab"),
    Opcode("IMUL", 0x021, ("Rd", "Ra", "B"), (("w", WIDTH64),), "FMA", 4, FIXED, "d = low bits of a * b"),
    Opcode("IMAD", 0x022, ("Rd", "Ra", "B", "Rc"), (("w", ("", "64", "WIDE")),), "FMA", 4, FIXED,
           "d = a * b + c (.WIDE: 32x32 signed product added to a 64-bit c)", negatable="c"),
    Opcode("SHL", 0x023, ("Rd", "Ra", "B"), (("w", WIDTH64),), "ALU", 4, FIXED, "d = a << b"),
    Opcode("SHR", 0x024, ("Rd", "Ra", "B"), (("t", ("S32", "U32")), ("w", WIDTH64)), "ALU", 4, FIXED,
           "d = a >> b, arithmetic for .S32, logical for .U32"),
    Opcode("LOP", 0x025, ("Rd", "Ra", "B"), (("op", ("AND", "OR", "XOR")), ("w", WIDTH64)), "ALU", 4, FIXED,
           "d = a op b, bitwise"),
    Opcode("IMNMX", 0x026, ("Rd", "Ra", "B"), (("op", ("MIN", "MAX")), ("t", ("S32", "U32", "S64", "U64"))),
           "ALU", 4, FIXED, "d = min or max of a and b"),
    Opcode("ISETP", 0x027, ("Pd", "Ra", "B", "Ps"), (("cmp", CMP), ("t", ("S32", "U32", "S64", "U64")),
                                                    ("bop", BOOL_OP)), "ALU", 4, FIXED,
           "pd = (a cmp b) bop ps"),
    Opcode("I2I", 0x028, ("Rd", "B"), (("to", ("S64", "S32")), ("fr", ("S32", "U32", "S64"))), "ALU", 4, FIXED,
           "d = b converted between integer widths (sign- or zero-extend, truncate)"),
    Opcode("IABS", 0x029, ("Rd", "B"), (("w", WIDTH64),), "ALU", 4, FIXED, "d = |b| (two's complement)"),
    # float32
    Opcode("FADD", 0x030, ("Rd", "Ra", "B"), (), "FMA", 4, FIXED, "d = a + b", b_float=True, negatable="ab",
           absolutable="ab"),
    Opcode("FMUL", 0x031, ("Rd", "Ra", "B"), (), "FMA", 4, FIXED, "d = a * b", b_float=True, negatable="ab",
           absolutable="ab"),
    Opcode("FFMA", 0x032, ("Rd", "Ra", "B", "Rc"), (), "FMA", 4, FIXED, "d = a * b + c",
           b_float=True, negatable="abc", absolutable="ab"),
    Opcode("FMNMX", 0x033, ("Rd", "Ra", "B"), (("op", ("MIN", "MAX")),), "ALU", 4, FIXED,
           "d = min or max of a and b (a NaN operand loses)", b_float=True, negatable="ab", absolutable="ab"),
    Opcode("FSETP", 0x034, ("Pd", "Ra", "B", "Ps"), (("cmp", CMP), ("bop", BOOL_OP)), "ALU", 4, FIXED,
           "pd = (a cmp b) bop ps; NE is true for NaN, the other comparisons false", b_float=True,
           negatable="ab", absolutable="ab"),
    # float64 (register pairs)
    Opcode("DADD", 0x038, ("Rd", "Ra", "B"), (), "FP64", 8, FIXED, "d = a + b", "rc", negatable="ab",
           absolutable="ab"),
    Opcode("DMUL", 0x039, ("Rd", "Ra", "B"), (), "FP64", 8, FIXED, "d = a * b", "rc", negatable="ab",
           absolutable="ab"),
    Opcode("DFMA", 0x03A, ("Rd", "Ra", "B", "Rc"), (), "FP64", 8, FIXED, "d = a * b + c", "rc", negatable="abc",
           absolutable="ab"),
    Opcode("DSETP", 0x03B, ("Pd", "Ra", "B", "Ps"), (("cmp", CMP), ("bop", BOOL_OP)), "FP64", 8, FIXED,
           "pd = (a cmp b) bop ps; NE is true for NaN, the other comparisons false", "rc", negatable="ab",
           absolutable="ab"),
    Opcode("DMNMX", 0x03C, ("Rd", "Ra", "B"), (("op", ("MIN", "MAX")),), "FP64", 8, FIXED,
           "d = min or max of a and b (a NaN operand loses)", "rc", negatable="ab", absolutable="ab"),
    # conversions and the special function unit
    Opcode("I2F", 0x040, ("Rd", "B"), (("to", FLOATS), ("fr", ("S32", "U32", "S64"))), "ALU", 6,
           FIXED, "d = float(b), rounded to nearest even"),
    Opcode("F2I", 0x041, ("Rd", "B"), (("to", ("S32", "S64", "U32")), ("fr", FLOATS),
                                       ("rnd", ("TRUNC", "FLOOR", "CEIL", "RN"))), "ALU", 6, FIXED,
           "d = int(b), rounded as the modifier says; NaN gives 0, out-of-range values saturate"),
    Opcode("F2F", 0x042, ("Rd", "B"), (("to", FLOATS), ("fr", FLOATS)), "ALU", 6, FIXED,
           "d = b converted between float formats, rounded to nearest even"),
    Opcode("FRND", 0x043, ("Rd", "B"), (("rnd", ("RN", "FLOOR", "CEIL", "TRUNC")), ("w", ("F32", "F64"))), "ALU", 6,
           FIXED, "d = b rounded to an integral value, kept as a float", b_float=True),
    # packed half precision: each register holds two float16 or bfloat16 values (low half first)
    Opcode("HADD2", 0x044, ("Rd", "Ra", "B"), (("t", HALF),), "FMA", 4, FIXED,
           "d.lo = a.lo + b.lo, d.hi = a.hi + b.hi", negatable="ab"),
    Opcode("HMUL2", 0x045, ("Rd", "Ra", "B"), (("t", HALF),), "FMA", 4, FIXED,
           "d.lo = a.lo * b.lo, d.hi = a.hi * b.hi", negatable="ab"),
    Opcode("HFMA2", 0x046, ("Rd", "Ra", "B", "Rc"), (("t", HALF),), "FMA", 4, FIXED,
           "each half: d = a * b + c, rounded once", negatable="abc"),
    Opcode("HMNMX2", 0x047, ("Rd", "Ra", "B"), (("op", ("MIN", "MAX")), ("t", HALF)), "ALU", 4, FIXED,
           "each half: d = min or max of a and b (a NaN operand loses)"),
    Opcode("MUFU", 0x050, ("Rd", "B"), (("fn", ("RCP", "RSQ", "SQRT", "EX2", "LG2", "SIN", "COS")),),
           "SFU", 16, VARIABLE, "d = fn(b), float32", b_float=True),
    # predicates
    Opcode("PLOP", 0x060, ("Pd", "Ps", "Pq"), (("op", BOOL_OP),), "ALU", 4, FIXED, "pd = ps op pq"),
    # memory
    Opcode("LDG", 0x070, ("Rd", "MG"), (("e", ("E",)), ("w", MEM_WIDTH)), "LSU", 400, VARIABLE,
           "d = global memory at a.64 + imm", "i"),
    Opcode("STG", 0x071, ("MG", "Rc"), (("e", ("E",)), ("w", MEM_WIDTH)), "LSU", 1, VARIABLE,
           "global memory at a.64 + imm = c", "i"),
    Opcode("LDS", 0x072, ("Rd", "MS"), (("w", MEM_WIDTH),), "LSU", 24, VARIABLE,
           "d = shared memory at a + imm", "i"),
    Opcode("STS", 0x073, ("MS", "Rc"), (("w", MEM_WIDTH),), "LSU", 1, VARIABLE,
           "shared memory at a + imm = c", "i"),
    Opcode("LDL", 0x074, ("Rd", "MS"), (("w", MEM_WIDTH),), "LSU", 30, VARIABLE,
           "d = this thread's local memory at a + imm (register spills, local arrays)", "i"),
    Opcode("STL", 0x075, ("MS", "Rc"), (("w", MEM_WIDTH),), "LSU", 1, VARIABLE,
           "this thread's local memory at a + imm = c", "i"),
    Opcode("ATOMG", 0x076, ("Rd", "MG", "Rc"), (("op", ATOM_OP), ("t", ATOM_TYPE)), "LSU", 500, VARIABLE,
           "atomically: d = global memory at a.64 + imm; memory = op(memory, c) (CAS: if memory == c "
           "then memory = the register after c's; INC: memory >= c ? 0 : memory + 1; DEC: memory == 0 or "
           "memory > c ? c : memory - 1; AND, OR, XOR bitwise); lanes hitting one address apply in lane order",
           "i"),
    Opcode("ATOMS", 0x077, ("Rd", "MS", "Rc"), (("op", ATOM_OP), ("t", ATOM_TYPE)), "LSU", 40, VARIABLE,
           "atomically on shared memory at a + imm, as ATOMG", "i"),
    Opcode("MEMBAR", 0x078, (), (("scope", ("CTA", "GPU", "SYS")),), "LSU", 10, FIXED,
           "earlier memory accesses are visible to the scope before later ones"),
    # warp-level
    Opcode("SHFL", 0x080, ("Rd", "Ra", "B"), (("mode", ("IDX", "UP", "DOWN", "BFLY")),), "LSU", 24, VARIABLE,
           "d = a of the warp lane that mode and b select (IDX: b, UP: lane-b, DOWN: lane+b, BFLY: lane^b); "
           "a source outside the warp gives the lane its own a", "ri"),
    Opcode("VOTE", 0x081, ("Rd", "Pd", "Ps"), (("mode", ("ALL", "ANY")),), "ALU", 4, FIXED,
           "over the warp's active lanes: pd = all/any of ps; d = ballot of ps (a register pair on 64-wide "
           "devices)"),
    Opcode("HMMA", 0x090, ("Rd", "Ra", "B", "Rc"), (("shape", ("16816",)), ("t", HALF)), "MMA", 32, VARIABLE,
           "per 32 lanes: D (16x8 fp32, 4 registers) = A (16x16, 4 registers) x B (16x8, 2 registers) + "
           "C (16x8 fp32), fragments laid out as PTX mma.m16n8k16", "r"),
]

OPCODES: dict[str, Opcode] = {row.mnemonic: row for row in _ROWS}
BY_CODE: dict[int, Opcode] = {row.code: row for row in _ROWS}


class SpecialRegister(IntEnum):
    """The special registers S2R reads, by the number operand B holds."""
    TID_X = 0           # the thread's index in its block
    TID_Y = 1
    TID_Z = 2
    CTAID_X = 3         # the block's index in the grid
    CTAID_Y = 4
    CTAID_Z = 5
    LANEID = 6          # the thread's lane in its warp
    CLOCKLO = 7         # low 32 bits of a clock that counts up as the kernel runs
    SMID = 8            # the compute unit the block runs on
    WARPID = 9          # the warp's index in its block


# Their names in a listing, by number: TID_X prints as SR_TID.X, as cuobjdump spells it.
SPECIAL_REGISTERS = tuple("SR_" + sr.name.replace("_", ".") for sr in SpecialRegister)

RZ = 255        # reads as zero, writes are discarded
PT = 7          # predicate that is always true
NUM_REGISTERS = 255
NUM_PREDICATES = 7
