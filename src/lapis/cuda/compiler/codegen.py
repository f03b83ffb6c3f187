"""Layer 3 compiler, stages 5-6: final instructions, scheduling (control bits) and encoding.

After register allocation each machine instruction becomes an `isa.Instruction` with
physical registers; the pseudo-instructions MOV64 and SEL64 become two MOVs or SELs on the
halves of a pair, and branch targets become relative offsets. The scheduler then sets the
control bits every instruction carries, as ptxas does: for a fixed-latency result the stall
count makes the next dependent instruction wait its latency; a variable-latency result
(memory, special function unit, S2R) takes one of six scoreboard barriers, which its
first reader waits on.
"""

from lapis.cuda.compiler.isel import Imm64, MBlock, MInst, Part, VReg
from lapis.isa import INSTRUCTION_BYTES, OPCODES, PT, RZ, Control, Imm, Instruction, Reg, make
from lapis.isa.dataflow import PRED_BASE, registers
from lapis.isa.opcodes import VARIABLE


def _phys(assignment: dict, r) -> int:
    if r is None:
        return RZ
    if isinstance(r, Part):
        return assignment[r.whole] + r.index
    return RZ if r.id < 0 else assignment[r]


def _pred(assignment: dict, p) -> tuple[int, bool]:
    if p is None or p[0] is None:
        return PT, bool(p and p[1])
    return assignment[p[0]], p[1]


def lower(blocks: list[MBlock], assignment: dict) -> tuple[list[Instruction], list[tuple | None]]:
    """Physical instructions with branch targets resolved, and the (file, line) each came from (`MInst.source`)."""
    flat: list[tuple[MInst | Instruction, str | None, tuple | None]] = []
    labels: dict[str, int] = {}
    for b in blocks:
        labels[b.label] = len(flat)
        for inst in b.insts:
            flat.extend((i, inst.target, inst.source) for i in _expand(inst, assignment))
    out = []
    for index, (inst, target, _) in enumerate(flat):
        if target is not None:
            rel = (labels[target] - index - 1) * INSTRUCTION_BYTES
            inst = Instruction(**{**inst.__dict__, "b": Imm(rel & 0xFFFFFFFF)})
        out.append(inst)
    return out, [source for _, _, source in flat]


def _expand(m: MInst, a: dict) -> list[Instruction]:
    guard, guard_neg = _pred(a, m.guard)
    common = {"guard": guard, "guard_neg": guard_neg}
    if m.op == "MOV64":
        d = _phys(a, m.rd)
        if isinstance(m.b, Imm64):
            return [make("MOV", rd=d, b=Imm(m.b.value & 0xFFFFFFFF), **common),
                    make("MOV", rd=d + 1, b=Imm(m.b.value >> 32), **common)]
        s = _phys(a, m.ra)
        halves = [(d, s), (d + 1, s + 1 if s != RZ else RZ)]
        if d == s + 1:       # overlapping pairs: copy the high half first
            halves.reverse()
        return [make("MOV", rd=x, b=Reg(y), **common) for x, y in halves if x != y]
    if m.op == "MOV128":               # a fragment quad, copied high register first when they overlap
        d, s = _phys(a, m.rd), _phys(a, m.ra)
        order = range(3, -1, -1) if s < d else range(4)
        return [make("MOV", rd=d + k, b=Reg(s + k), **common) for k in order if d != s]
    if m.op == "VZERO":
        d = _phys(a, m.rd)
        return [make("MOV", rd=d + k, b=Reg(RZ), **common) for k in range(m.rd.width)]
    if m.op == "PAIR":                 # a register pair from two 32-bit registers
        d, lo, hi = _phys(a, m.rd), _phys(a, m.ra), _phys(a, m.b)
        if (lo, hi) == (d + 1, d):      # the halves are swapped in place: three XORs
            return [make("LOP", mods={"op": "XOR"}, rd=x, ra=x, b=Reg(y), **common)
                    for x, y in ((d, d + 1), (d + 1, d), (d, d + 1))]
        moves = [(d, lo), (d + 1, hi)] if hi != d else [(d + 1, hi), (d, lo)]
        return [make("MOV", rd=x, b=Reg(y), **common) for x, y in moves if x != y]
    if m.op == "QUAD":                 # a quad from two pairs
        d, lo, hi = _phys(a, m.rd), _phys(a, m.ra), _phys(a, m.b)
        return _parallel_moves([(d, lo), (d + 1, lo + 1), (d + 2, hi), (d + 3, hi + 1)], common)
    if m.op == "SHFL64":               # a 64-bit value is shuffled as two halves
        d, s = _phys(a, m.rd), _phys(a, m.ra)
        b = Reg(_phys(a, m.b)) if isinstance(m.b, VReg) else m.b
        return [make("SHFL", mods={"mode": m.mods["mode"]}, rd=d + k, ra=s + k, b=b, **common) for k in (0, 1)]
    if m.op == "SEL64":
        d, x, y = _phys(a, m.rd), _phys(a, m.ra), _phys(a, m.b)
        p, neg = _pred(a, m.ps)
        return [make("SEL", rd=d + k, ra=x + k if x != RZ else RZ, b=Reg(y + k if y != RZ else RZ), ps=p, ps_neg=neg,
                     **common) for k in (0, 1)]
    if m.op == "MOV" and isinstance(m.b, VReg) and m.guard is None and _phys(a, m.b) == _phys(a, m.rd):
        return []                      # a copy register allocation made redundant
    spec = OPCODES[m.op]
    mods = {name: m.mods.get(name, choices[0]) for name, choices in spec.modifiers}
    fields = dict(common)
    operands = spec.operands
    if "Rd" in operands:
        fields["rd"] = _phys(a, m.rd)
    if "Ra" in operands or "MG" in operands or "MS" in operands:
        fields["ra"] = _phys(a, m.ra)
    if "Rc" in operands:
        fields["rc"] = _phys(a, m.rc)
    if "Pd" in operands:
        fields["pd"] = _phys(a, m.pd) if m.pd is not None else PT
    if "Ps" in operands:
        fields["ps"], fields["ps_neg"] = _pred(a, m.ps)
    if "Pq" in operands:
        fields["pq"], fields["pq_neg"] = _pred(a, m.pq)
    if m.b is not None:
        fields["b"] = Reg(_phys(a, m.b)) if isinstance(m.b, VReg) else m.b
    if m.op == "BRA":
        fields["b"] = Imm(0)
    return [make(m.op, mods=mods, neg=m.neg, abs_=m.abs_, **fields)]


def _parallel_moves(moves: list[tuple[int, int]], common: dict) -> list[Instruction]:
    """MOVs giving each destination register its source's value as if all moved at once: a move waits while
    another still reads its destination; where every one waits (a cycle), the first's two registers swap by
    three XORs, and the moves that read either read the other, where that value went."""
    pending = [(d, s) for d, s in moves if d != s]
    out = []
    while pending:
        free = next((k for k, (d, _) in enumerate(pending) if all(s != d for _, s in pending)), None)
        if free is not None:
            d, s = pending.pop(free)
            out.append(make("MOV", rd=d, b=Reg(s), **common))
            continue
        d, s = pending.pop(0)
        out += [make("LOP", mods={"op": "XOR"}, rd=x, ra=x, b=Reg(y), **common) for x, y in ((d, s), (s, d), (d, s))]
        swapped = {d: s, s: d}
        pending = [(d2, swapped.get(s2, s2)) for d2, s2 in pending if d2 != swapped.get(s2, s2)]
    return out


def _regs(inst: Instruction, role: str) -> set[int]:
    """Registers an instruction writes ("def") or reads ("use"); pairs count both halves."""
    reads, writes = registers(inst)
    regs = set(writes if role == "def" else reads)
    if inst.op == "VOTE" and inst.rd != RZ:
        regs.add(inst.rd + 1)                 # the ballot's high half, on 64-wide devices
    return {r for r in regs if r < PRED_BASE}


def schedule(insts: list[Instruction], branch_targets: set[int]) -> list[Instruction]:
    ready: dict[int, int] = {}          # register -> cycle its fixed-latency value is ready
    pending: dict[int, int] = {}        # register -> scoreboard barrier it waits on
    next_bar = 0
    time = 0
    out = []
    for index, inst in enumerate(insts):
        if index in branch_targets:     # a join: assume nothing about what came before
            ready.clear()
        uses = _regs(inst, "use")
        wait = 0
        for r in uses:
            if r in pending:
                wait |= 1 << pending.pop(r)
        issue = max([time + 1] + [ready[r] for r in uses if r in ready])
        if out:
            prev = out[-1]
            out[-1] = Instruction(**{**prev.__dict__, "ctrl": Control(**{**prev.ctrl.__dict__,
                                                                        "stall": min(15, issue - time)})})
        time = issue
        wbar = 7
        spec = inst.opcode
        defs = _regs(inst, "def")
        if spec.latency_class == VARIABLE and defs:
            wbar = next_bar
            next_bar = (next_bar + 1) % 6
            for r in defs:
                pending[r] = wbar
                ready.pop(r, None)
        else:
            for r in defs:
                ready[r] = time + spec.latency
                pending.pop(r, None)
        if spec.mnemonic in ("BRA", "EXIT", "BAR"):
            wait |= sum(1 << b for b in set(pending.values()))
            pending.clear()
        out.append(Instruction(**{**inst.__dict__, "ctrl": Control(stall=1, yield_=spec.mnemonic == "BAR",
                                                                  wbar=wbar, wait=wait)}))
    return out
