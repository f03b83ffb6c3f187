"""Translation: a kernel's machine code turned, once per code object, into a table the native engine runs.

The reference executor (`binders.py` and the instruction families) binds one numpy closure
per instruction and the scheduler calls it once per step: readable, and every figure the
profiler shows is defined there, but each step costs microseconds of Python whatever the
number of lanes. QEMU's answer is to translate guest code once into host code; lapis does
the same in two parts:

- this module decodes each instruction once more, into one row of integers (`Translation.table`:
  the engine's operation, register rows, immediates, modifiers, guard, a branch's target);
- `native.py` holds the engine, numba-compiled functions (LLVM machine code, compiled once
  and cached on disk by numba) that run a group of lanes through the program, instruction by
  instruction over every lane, as the reference does, so results are the same bit for bit
  and memory sees the same order of accesses, for as long as the scheduler would keep the group
  together (uniform branches, exits and barriers included).

Instructions the engine leaves to the reference (atomics other than 32-bit global adds, votes, packed
halves, the sine and cosine of MUFU, whose numpy results differ from libm's, conversions to 16-bit formats,
a barrier under a guard, whose arriving lanes the binder finds, and any instruction naming a register the
kernel does not declare, which must fault as the reference faults) go back to the
scheduler, which runs them through their binders, as it does branches that split a group or jump
to no instruction of the program. The engine counts what the reference counts with the
reference's algorithms (`native_counters.py`).
"""

from dataclasses import dataclass

import numpy as np

from lapis.isa import INSTRUCTION_BYTES, OPCODES, PT, RZ, Const, Imm, Instruction, Reg
from lapis.isa.opcodes import CMP, MEM_BYTES
from lapis.isa.verify import branch_problem, register_problem

# The engine's operations, one per row kind (the numbers only link this table to native.py), in
# families by what they write: a 32-bit register, a float32 register, a register pair, a
# predicate; then the rest, and memory. The engine tells the families apart by range.
U32_OPS = "MOV LDC SEL IADD IMUL IMAD SHL SHR LOP IMNMX IABS I2I F2I F2F".split()
F32_OPS = "FADD FMUL FFMA FMNMX I2F FRND MUFU".split()
PAIR_OPS = ("LDC64 IADD64 IMUL64 IMADWIDE IMAD64 SHL64 SHR64 LOP64 IMNMX64 IABS64 I2I64 DADD DMUL DFMA DMNMX "
            "I2F64 F2I64 F2F64 FRND64").split()
PREDICATE_OPS = "ISETP ISETP64 FSETP DSETP PLOP".split()
OTHER_OPS = "NOP S2R SHFL HMMA BRA EXIT BAR".split()
HALVES = ("F16", "BF16")        # F2F's half formats, as its M2 (source) and M3 (destination) count them from 1
MEMORY_OPS = "LDG STG LDS STS LDL STL ATOMG".split()
OPS = U32_OPS + F32_OPS + PAIR_OPS + PREDICATE_OPS + OTHER_OPS + MEMORY_OPS
OP = {name: i for i, name in enumerate(OPS)}

# Columns of a table row.
(KIND, D, A, B, C, BMODE, BVAL, FLAGS, M1, M2, M3, GUARD, GUARD_NEG, PD, PS, PS_NEG, PQ, PQ_NEG,
 WIDTH, SIMM, D2, A2, B2, C2, LOG, RUN_FN, RUN_STRIDE, RUN_LEN, CHAIN_FN, CHAIN_LEN, LOOP_FN, LOOP_LEN,
 RUN_LOADS, RUN_WARP) = range(34)
COLUMNS = 34
B_REG, B_IMM, B_CONST = 0, 1, 2
NEG_A, NEG_B, NEG_C, ABS_A, ABS_B = 1, 2, 4, 8, 16

_MEMORY = frozenset(MEMORY_OPS)
_SIGNED_SUBWORD = {"S8", "S16"}
_NATIVE_MUFU = ("RCP", "RSQ", "SQRT", "EX2", "LG2")    # exact, or float64 rounded once; SIN, COS are numpy's own


class Untranslatable(Exception):
    """The instruction is left to the reference executor."""


@dataclass
class Translation:
    """A program's table and the memory instructions whose addresses the engine logs (for a checker)."""
    table: np.ndarray            # (instructions, COLUMNS) int64; KIND is UNTRANSLATED where the binders run it
    translated: list[bool]       # per pc: the engine runs it
    logged: list[int]            # pc of each logged memory instruction, by log slot
    log_of: dict[int, int]       # pc -> log slot
    executed: np.ndarray | None = None     # per pc, thread-instructions run by every launch so far (`fused.py`)
    unfused: np.ndarray | None = None      # (first pc, length) of each run of arithmetic not yet compiled


UNTRANSLATED = -1


def translate(program: list[Instruction], registers: int) -> Translation:
    """The table of `program` for a launch declaring `registers` registers."""
    table = np.zeros((len(program), COLUMNS), np.int64)
    translated = [False] * len(program)
    logged: list[int] = []
    for pc, inst in enumerate(program):
        try:
            _row(table[pc], inst, registers, pc, len(program))
        except Untranslatable:
            table[pc] = 0
            table[pc, KIND] = UNTRANSLATED
            continue
        translated[pc] = True
        if inst.op in _MEMORY:
            table[pc, LOG] = len(logged)
            logged.append(pc)
    return Translation(table, translated, logged, {pc: slot for slot, pc in enumerate(logged)})


def _target(inst: Instruction, pc: int) -> int:
    return inst.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES


def _row(row: np.ndarray, inst: Instruction, registers: int, pc: int, end: int) -> None:
    """Fill one table row (of a program of `end` instructions), or raise Untranslatable."""
    op = inst.op
    spec = OPCODES[op]
    # A register past the declared count (a pair running into RZ included) faults in its binder. The warp size
    # matters only to VOTE, which the engine leaves to the binders anyway.
    if register_problem(inst, registers, warp_size=32):
        raise Untranslatable

    def src(r: int) -> int:                 # the row register r is read from
        if r == RZ:
            return registers
        if r >= registers:
            raise Untranslatable
        return r

    def dst(r: int) -> int:
        return registers + 1 if r == RZ else src(r)

    def pair_src(r: int) -> tuple[int, int]:
        return (registers, registers) if r == RZ else (src(r), src(r + 1))

    def pair_dst(r: int) -> tuple[int, int]:
        return (registers + 1, registers + 1) if r == RZ else (src(r), dst(r + 1))

    def mod(group: str) -> str:
        return inst.mod(group)

    def result(wide: bool, wide_kind: str) -> str:
        """Rd, or the pair Rd:Rd+1 when `wide` (then the operation is `wide_kind`); the kind to use."""
        if wide:
            row[D], row[D2] = pair_dst(inst.rd)
            return wide_kind
        row[D] = dst(inst.rd)
        return kind

    row[GUARD], row[GUARD_NEG] = inst.guard, inst.guard_neg
    row[PD], row[PS], row[PS_NEG], row[PQ], row[PQ_NEG] = inst.pd, inst.ps, inst.ps_neg, inst.pq, inst.pq_neg
    row[FLAGS] = sum(bit for name, bit in (("a", NEG_A), ("b", NEG_B), ("c", NEG_C)) if name in inst.neg)
    row[FLAGS] |= sum(bit for name, bit in (("a", ABS_A), ("b", ABS_B)) if name in inst.abs_)
    row[SIMM] = inst.simm if isinstance(inst.b, Imm) else 0
    b = inst.b
    if isinstance(b, Reg):
        row[BMODE] = B_REG
        if "B" in spec.operands or "SR" in spec.operands:
            row[B] = src(b.index)
    elif isinstance(b, Imm):
        row[BMODE], row[BVAL] = B_IMM, b.bits
    else:
        row[BMODE], row[BVAL] = B_CONST, b.offset
    wide_b = False
    kind = op

    if op in ("NOP", "MEMBAR"):
        kind = "NOP"
    elif op == "BRA":
        # The target's index, not the displacement; -1 for no instruction of the program (an address between two
        # included), which the engine's range check hands to the binder, to fault if a lane takes the branch.
        invalid = branch_problem(inst, pc * INSTRUCTION_BYTES, end * INSTRUCTION_BYTES)
        row[BMODE], row[BVAL] = B_IMM, -1 if invalid else _target(inst, pc)
    elif op == "BAR" and (inst.guard != PT or inst.guard_neg):
        raise Untranslatable                                    # its binder finds the lanes that arrive
    elif op in ("EXIT", "BAR"):
        pass
    elif op == "MOV":
        row[D] = dst(inst.rd)
    elif op == "S2R":
        row[D], row[BVAL] = dst(inst.rd), b.bits
    elif op == "LDC":
        kind = result(mod("w") == "64", "LDC64")
    elif op == "SEL":
        row[D], row[A] = dst(inst.rd), src(inst.ra)
    elif op in ("IADD", "IMUL", "LOP", "SHL", "SHR"):
        if op == "LOP":
            row[M1] = ("AND", "OR", "XOR").index(mod("op"))
        if op == "SHR":
            row[M1] = mod("t") == "S32"
        if mod("w") == "64":
            kind, wide_b = op + "64", True
            row[D], row[D2] = pair_dst(inst.rd)
            row[A], row[A2] = pair_src(inst.ra)
        else:
            row[D], row[A] = dst(inst.rd), src(inst.ra)
    elif op == "IMAD":
        w = mod("w")
        if w == "":
            row[D], row[A], row[C] = dst(inst.rd), src(inst.ra), src(inst.rc)
        else:
            kind = "IMADWIDE" if w == "WIDE" else "IMAD64"
            wide_b = w == "64"
            row[D], row[D2] = pair_dst(inst.rd)
            row[C], row[C2] = pair_src(inst.rc)
            if w == "WIDE":
                row[A] = src(inst.ra)
            else:
                row[A], row[A2] = pair_src(inst.ra)
    elif op in ("IMNMX", "ISETP"):
        t = mod("t")
        if op == "IMNMX":
            row[M1] = mod("op") == "MAX"
        else:
            row[M1], row[M3] = CMP.index(mod("cmp")), ("AND", "OR", "XOR").index(mod("bop"))
        row[M2] = t in ("S32", "S64")
        if t in ("S64", "U64"):
            kind, wide_b = op + "64", True
            row[A], row[A2] = pair_src(inst.ra)
            if op == "IMNMX":
                row[D], row[D2] = pair_dst(inst.rd)
        else:
            row[A] = src(inst.ra)
            if op == "IMNMX":
                row[D] = dst(inst.rd)
    elif op == "I2I":
        to, fr = mod("to"), mod("fr")
        if fr == "S64":
            row[M1], wide_b = 0, True
            row[D] = dst(inst.rd)
        else:
            row[M1] = (1 if fr == "S32" else 2) if to == "S64" else 3
            kind = result(to == "S64", "I2I64")
    elif op == "IABS":
        wide_b = mod("w") == "64"
        kind = result(wide_b, "IABS64")
    elif op in ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP"):
        row[A] = src(inst.ra)
        if op == "FFMA":
            row[C] = src(inst.rc)
        if op == "FMNMX":
            row[M1] = mod("op") == "MAX"
        if op == "FSETP":
            row[M1], row[M3] = CMP.index(mod("cmp")), ("AND", "OR", "XOR").index(mod("bop"))
        else:
            row[D] = dst(inst.rd)
    elif op in ("DADD", "DMUL", "DFMA", "DMNMX", "DSETP"):
        wide_b = True
        row[A], row[A2] = pair_src(inst.ra)
        if op == "DFMA":
            row[C], row[C2] = pair_src(inst.rc)
        if op == "DMNMX":
            row[M1] = mod("op") == "MAX"
        if op == "DSETP":
            row[M1], row[M3] = CMP.index(mod("cmp")), ("AND", "OR", "XOR").index(mod("bop"))
        else:
            row[D], row[D2] = pair_dst(inst.rd)
    elif op == "I2F":
        to, fr = mod("to"), mod("fr")
        if to not in ("F32", "F64"):
            raise Untranslatable
        row[M1] = ("S32", "U32", "S64").index(fr)
        wide_b = fr == "S64"
        kind = result(to == "F64", "I2F64")
    elif op == "F2I":
        to, fr = mod("to"), mod("fr")
        if fr not in ("F32", "F64"):
            raise Untranslatable
        row[M1], row[M2] = ("S32", "S64", "U32").index(to), fr == "F64"
        row[M3] = ("TRUNC", "FLOOR", "CEIL", "RN").index(mod("rnd"))
        wide_b = fr == "F64"
        kind = result(to == "S64", "F2I64")
    elif op == "F2F":
        to, fr = mod("to"), mod("fr")
        # Between F32 and F64, and a half to or from F32 (a model's half tensors through float32 arithmetic); the
        # binder converts a half to or from F64, and a half to the other.
        if not ({to, fr} <= {"F32", "F64"} or (fr == "F32" and to in HALVES) or (fr in HALVES and to == "F32")):
            raise Untranslatable
        row[M1] = wide_b = fr == "F64"
        row[M2], row[M3] = HALVES.index(fr) + 1 if fr in HALVES else 0, HALVES.index(to) + 1 if to in HALVES else 0
        kind = result(to == "F64", "F2F64")
    elif op == "FRND":
        row[M1] = ("RN", "FLOOR", "CEIL", "TRUNC").index(mod("rnd"))
        wide_b = mod("w") == "F64"
        kind = result(wide_b, "FRND64")
    elif op == "MUFU":
        fn = mod("fn")
        if fn not in _NATIVE_MUFU:
            raise Untranslatable
        row[M1] = _NATIVE_MUFU.index(fn)
        row[D] = dst(inst.rd)
    elif op == "PLOP":
        row[M1] = ("AND", "OR", "XOR").index(mod("op"))
    elif op == "ATOMG":                      # 32-bit adds: the old values to Rd, the values added from Rc
        if mod("op") != "ADD" or mod("t") not in ("U32", "S32", "F32"):
            raise Untranslatable
        row[WIDTH], row[M1] = 4, mod("t") == "F32"
        row[A], row[A2] = pair_src(inst.ra)
        row[D], row[C] = dst(inst.rd), src(inst.rc)
    elif op in _MEMORY:
        width = mod("w")
        nbytes = MEM_BYTES[width]
        row[WIDTH], row[M1] = nbytes, width in _SIGNED_SUBWORD
        words = max(1, nbytes // 4)
        if op == "LDG" or op == "STG":
            row[A], row[A2] = pair_src(inst.ra)
        else:
            row[A] = src(inst.ra)
        first = inst.rd if op.startswith("LD") else inst.rc
        at = dst if op.startswith("LD") else src
        rows = [at(first + i if first != RZ else RZ) for i in range(words)]
        row[D], row[D2], row[C], row[C2] = (rows + rows[-1:] * 4)[:4]       # the data rows, in order
    elif op == "SHFL":
        row[M1] = ("IDX", "UP", "DOWN", "BFLY").index(mod("mode"))
        row[D], row[A] = dst(inst.rd), src(inst.ra)
    elif op == "HMMA":
        # Each fragment's first row and the step to its next register: 0 for RZ, whose every register reads
        # zeros (or, for D, takes the result nobody reads). The halves' format in M1.
        row[A], row[A2] = (registers, 0) if inst.ra == RZ else (src(inst.ra), 1)
        row[B], row[B2] = (registers, 0) if b.index == RZ else (src(b.index), 1)
        row[C], row[C2] = (registers, 0) if inst.rc == RZ else (src(inst.rc), 1)
        row[D], row[D2] = (registers + 1, 0) if inst.rd == RZ else (src(inst.rd), 1)
        row[M1] = mod("t") == "BF16"
    else:
        raise Untranslatable
    if wide_b:
        row[BVAL] = _b64(inst, row, registers, src)
    row[KIND] = OP[kind]


def _b64(inst: Instruction, row: np.ndarray, registers: int, src) -> int:
    """Operand B read as 64 bits: a register pair (rows in B and B2), or the immediate sign-extended.

    A constant pair's offset stays in BVAL and the engine reads both words at run time."""
    b = inst.b
    if isinstance(b, Reg):
        row[B], row[B2] = (registers, registers) if b.index == RZ else (src(b.index), src(b.index + 1))
        return 0
    if isinstance(b, Const):
        return b.offset
    return inst.simm

