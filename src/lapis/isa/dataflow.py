"""Which registers an instruction reads and writes, with the widths its modifiers imply.

Shared specification (imports no layer). A scheduler needs this to place dependent
instructions (the compiler's control bits) and the performance model needs it to find a
warp's dependency chain. Predicates are numbered after the registers: P0 is PRED_BASE.
"""

import functools

from lapis.isa.instruction import INSTRUCTION_BYTES, Instruction, Reg
from lapis.isa.opcodes import ATOM_WIDE, PT, RZ

PRED_BASE = 256
_MEM_WORDS = {"": 1, "U8": 1, "S8": 1, "U16": 1, "S16": 1, "64": 2, "128": 4}


def _widths(inst: Instruction) -> dict[str, int]:
    """Registers spanned by each of d, a, b, c (1 unless a modifier says pair or quad)."""
    op, mods = inst.op, dict(zip((name for name, _ in inst.opcode.modifiers), inst.mods, strict=True))
    if op.startswith("D"):
        return {"d": 2, "a": 2, "b": 2, "c": 2}
    if op == "HMMA":
        return {"d": 4, "a": 4, "b": 2, "c": 4}
    if op in ("LDG", "LDS", "LDL", "STG", "STS", "STL"):
        n = _MEM_WORDS[mods["w"]]
        return {"d": n, "a": 2 if op.endswith("G") else 1, "b": 1, "c": n}
    if op in ("ATOMG", "ATOMS"):
        n = 2 if mods["t"] in ATOM_WIDE else 1
        return {"d": n, "a": 2 if op == "ATOMG" else 1, "b": 1, "c": n * (2 if mods["op"] == "CAS" else 1)}
    if op == "IMAD" and mods["w"] == "WIDE":
        return {"d": 2, "a": 1, "b": 1, "c": 2}
    if mods.get("w") in ("64", "F64") or mods.get("t") in ("S64", "U64"):
        return {"d": 1 if op == "ISETP" else 2, "a": 2, "b": 2, "c": 2}
    if op in ("I2I", "I2F", "F2I", "F2F"):
        return {"d": 2 if mods["to"] in ("S64", "F64") else 1, "a": 1,
                "b": 2 if mods["fr"] in ("S64", "F64") else 1, "c": 1}
    return {"d": 1, "a": 1, "b": 1, "c": 1}


def _span(first: int, n: int) -> tuple[int, ...]:
    return () if first == RZ else tuple(range(first, first + n))


@functools.lru_cache(maxsize=1 << 16)      # the simulator and the performance model ask once per instruction run
def registers(inst: Instruction) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(read, written) register numbers of an instruction, predicates at PRED_BASE + p."""
    used, w = inst.opcode.operands, _widths(inst)
    reads: list[int] = []
    writes: list[int] = []
    if "Ra" in used or "MG" in used or "MS" in used:
        reads += _span(inst.ra, w["a"])
    if "B" in used and isinstance(inst.b, Reg):
        reads += _span(inst.b.index, w["b"])
    if "Rc" in used:
        reads += _span(inst.rc, w["c"])
    if "Rd" in used:
        writes += _span(inst.rd, w["d"])
    for slot, pred in (("Ps", inst.ps), ("Pq", inst.pq)):
        if slot in used and pred != PT:
            reads.append(PRED_BASE + pred)
    if inst.guard != PT:
        reads.append(PRED_BASE + inst.guard)
    if "Pd" in used and inst.pd != PT:
        writes.append(PRED_BASE + inst.pd)
    return tuple(reads), tuple(writes)


def read_before_written(program: list[Instruction]) -> frozenset[int]:
    """The registers some thread may read before its own path through `program` has written them: the
    registers a launch must start at zero. Each thread runs one path of the control-flow graph (divergence
    only masks the others' lanes), so a register counts as written at an instruction when every path from
    the entry writes it on the way with an unguarded instruction (a forward must-analysis over bitsets)."""
    n = len(program)
    everything = (1 << PRED_BASE) - 1
    written_in = [everything] * n          # at each instruction, the registers every path there wrote
    reads, writes, successors = [], [], []
    for pc, inst in enumerate(program):
        r, w = registers(inst)
        reads.append(sum(1 << x for x in set(r) if x < PRED_BASE))
        always = inst.guard == PT and not inst.guard_neg
        writes.append(sum(1 << x for x in set(w) if x < PRED_BASE) if always else 0)
        nxt = [] if inst.op == "EXIT" and always else [pc + 1]
        if inst.op == "BRA":
            target = inst.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES
            nxt = [target] if always else [target, pc + 1]
        successors.append([s for s in nxt if 0 <= s < n])
    if n:
        written_in[0] = 0
    pending = list(range(n))
    while pending:
        pc = pending.pop()
        out = written_in[pc] | writes[pc]
        for s in successors[pc]:
            meet = written_in[s] & out
            if meet != written_in[s]:
                written_in[s] = meet
                pending.append(s)
    unset = 0
    for pc in range(n):
        unset |= reads[pc] & ~written_in[pc]
    return frozenset(r for r in range(PRED_BASE) if unset >> r & 1)
