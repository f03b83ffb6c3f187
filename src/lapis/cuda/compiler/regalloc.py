"""Layer 3 compiler, stage 4: register allocation by linear scan.

Liveness is computed on the machine CFG (live-in / live-out sets, iterated to a fixed
point); each virtual register's live interval runs from its first to its last live point
in layout order, so a value used inside a loop stays live around the whole loop. Intervals
are then scanned in order of their start, taking the lowest free physical register (an
even-aligned pair for 64-bit values; predicates come from their own file of seven). A
register whose interval ends at an instruction may be the destination of that same
instruction: the hardware reads every source before it writes.

Before the scan, copies are coalesced (Chaitin's rule): a copy `d = s` whose two registers
are never live at each other's definitions gets one register for both, and the copy goes.
This is what makes a loop's phi copies vanish: the accumulator a loop carries is written by
the last update of each trip straight into the register the next trip reads.

When more than 255 registers would be live at once, the value live the longest is spilled
to local memory: it gets a slot in the thread's local segment, each definition is followed
by a store (STL) to the slot and each use preceded by a load (LDL) into a fresh register
that lives for one instruction, and allocation runs again. Predicates are not spilled: a
kernel with more than 7 conditions live at once gets a clear error.
"""

from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.isel import MBlock, MInst, Part, VReg
from lapis.isa import NUM_PREDICATES, NUM_REGISTERS, Imm

MAX_SPILL_ROUNDS = 512
COALESCE_ROUNDS = 12
COPIES = {"MOV": "b", "MOV64": "ra", "MOV128": "ra"}         # copy opcode -> the field holding its source


class _OutOfRegisters(Exception):
    def __init__(self, victim: VReg):
        self.victim = victim


def liveness(blocks: list[MBlock]) -> tuple[dict, dict, dict]:
    by_label = {b.label: b for b in blocks}
    use, defs = {}, {}
    for b in blocks:
        u, d = set(), set()
        for inst in b.insts:
            u |= {r for r in inst.uses() if r not in d}
            d |= set(inst.defs())
        use[b.label], defs[b.label] = u, d
    live_in = {b.label: set() for b in blocks}
    live_out = {b.label: set() for b in blocks}
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            out = set().union(*(live_in[s] for s in b.succs if s in by_label)) if b.succs else set()
            inn = use[b.label] | (out - defs[b.label])
            if out != live_out[b.label] or inn != live_in[b.label]:
                live_out[b.label], live_in[b.label] = out, inn
                changed = True
    return live_in, live_out, by_label


def intervals(blocks: list[MBlock]) -> dict:
    live_in, live_out, _ = liveness(blocks)
    span: dict = {}

    def extend(r, pos):
        lo, hi = span.get(r, (pos, pos))
        span[r] = (min(lo, pos), max(hi, pos))
    pos = 0
    for b in blocks:
        start = pos
        for r in live_in[b.label]:
            extend(r, start)
        for inst in b.insts:
            pos += 2
            for r in inst.uses():
                extend(r, pos)
            for r in inst.defs():
                extend(r, pos)
        pos += 2
        for r in live_out[b.label]:
            extend(r, pos)
    return span


def _copy_source(inst: MInst):
    source = getattr(inst, COPIES[inst.op]) if inst.op in COPIES and inst.guard is None else None
    if type(source) is VReg and source.id >= 0 and source.width == inst.rd.width and source is not inst.rd:
        return source
    return None


def _pairs(blocks: list[MBlock], live_out: dict, updates: bool) -> tuple[list, set]:
    """Candidate (destination, source) pairs for one register: every copy, and with `updates` every
    unguarded instruction whose source of the same width dies there (an accumulator's update), with
    the pairs found to interfere: one is live where the other is defined (a copy's own source excepted)."""
    pairs, partners, interfering = [], {}, set()
    for b in blocks:
        live = set(live_out[b.label])
        for inst in reversed(b.insts):
            src = _copy_source(inst)
            if src is not None:
                pairs.append((inst.rd, src))
            elif updates and inst.guard is None and isinstance(inst.rd, VReg) and not inst.rd.pred:
                pairs += [(inst.rd, s) for s in {id(r): r for r in (inst.ra, inst.b, inst.rc)}.values()
                          if type(s) is VReg and s.id >= 0 and s.width == inst.rd.width and s is not inst.rd
                          and s not in live]
            live.difference_update(inst.defs())
            live.update(inst.uses())
    for d, s in pairs:
        partners.setdefault(d, set()).add(s)
        partners.setdefault(s, set()).add(d)
    for b in blocks:
        live = set(live_out[b.label])
        for inst in reversed(b.insts):
            src = _copy_source(inst)
            for x in inst.defs():
                for p in partners.get(x, ()):
                    if p in live and p is not src:
                        interfering.add(frozenset((x, p)))
            live.difference_update(inst.defs())
            live.update(inst.uses())
    return pairs, interfering


def coalesce(blocks: list[MBlock]) -> int:
    """Give a copy's destination and source, or an instruction's result and a source that dies there,
    one register where they never interfere (Chaitin's rule); returns how many pairs merged. Each
    round merges disjoint pairs, then liveness is recomputed for the next. Copies go first, in rounds
    of their own: merging those deletes instructions, and an update merged early can make a copy
    interfere (a loop's `v = v + shfl(v)` given the shuffle's register keeps the copy back to v)."""
    merged, updates = 0, False
    for _ in range(COALESCE_ROUNDS):
        _, live_out, _ = liveness(blocks)
        pairs, interfering = _pairs(blocks, live_out, updates)
        rename, taken = {}, set()
        for d, src in pairs:
            if d in taken or src in taken or frozenset((d, src)) in interfering:
                continue
            taken |= {d, src}
            rename[d] = src
        if not rename:
            if updates:
                break
            updates = True
            continue
        for b in blocks:
            for inst in b.insts:
                for name in ("rd", "ra", "b", "rc"):
                    r = getattr(inst, name)
                    if isinstance(r, Part) and r.whole in rename:
                        setattr(inst, name, Part(rename[r.whole], r.index))
                    elif isinstance(r, VReg) and r in rename:
                        setattr(inst, name, rename[r])
            b.insts = [i for i in b.insts if not (i.op in COPIES and i.guard is None
                                                  and getattr(i, COPIES[i.op]) is i.rd)]
        merged += len(rename)
    return merged


def allocate(blocks: list[MBlock], func, registers: int = NUM_REGISTERS) -> tuple[dict, int, int, int]:
    """Map each virtual register to a physical index, spilling as needed.

    Returns (map, registers used, predicates used, spill bytes); the spill slots start at
    `func.local_bytes` (after the local arrays kept in memory)."""
    coalesce(blocks)
    end = func.local_bytes                  # where the spill slots (after the local arrays) end so far
    reloads: set[int] = set()                # registers made by spilling: never spilled again
    for _ in range(MAX_SPILL_ROUNDS):
        try:
            assignment, used, preds = _linear_scan(blocks, func, registers, reloads)
            return assignment, used, preds, -(-(end - func.local_bytes) // 16) * 16
        except _OutOfRegisters as e:
            size = 4 * e.victim.width           # a pair or quad slot is aligned to its own size
            offset = -(-end // size) * size
            end = offset + size
            _spill(blocks, e.victim, offset, reloads)
    raise CompileError(f"register allocation did not converge after {MAX_SPILL_ROUNDS} spills",
                       func.filename, func.first_line, func.name)


def _spill(blocks: list[MBlock], victim: VReg, offset: int, reloads: set[int]) -> None:
    """Rewrite every definition of `victim` to be followed by a store, every use preceded by a load."""
    next_id = max(r.id for b in blocks for i in b.insts for r in (*i.uses(), *i.defs())) + 1
    width = {2: {"w": "64"}, 4: {"w": "128"}}.get(victim.width, {})
    for b in blocks:
        out = []
        for inst in b.insts:
            if victim in inst.uses():
                tmp = VReg(next_id, victim.width)
                next_id += 1
                reloads.add(tmp.id)
                out.append(MInst("LDL", mods=dict(width), rd=tmp, ra=VReg(-1), b=Imm(offset), source=inst.source))
                for field in ("ra", "b", "rc"):
                    r = getattr(inst, field)
                    if r is victim:
                        setattr(inst, field, tmp)
                    elif isinstance(r, Part) and r.whole is victim:
                        setattr(inst, field, Part(tmp, r.index))
            out.append(inst)
            if victim in inst.defs():
                tmp = VReg(next_id, victim.width)
                next_id += 1
                reloads.add(tmp.id)
                inst.rd = tmp
                out.append(MInst("STL", mods=dict(width), ra=VReg(-1), b=Imm(offset), rc=tmp, guard=inst.guard,
                                 source=inst.source))
        b.insts = out


def _linear_scan(blocks: list[MBlock], func, registers: int, reloads: set[int]) -> tuple[dict, int, int]:
    span = intervals(blocks)
    assignment: dict = {}
    regs_free = [True] * registers
    preds_free = [True] * NUM_PREDICATES
    active: list = []
    used_regs = used_preds = 0
    for vreg, (start, end) in sorted(span.items(), key=lambda kv: (kv[1][0], kv[0].id)):
        still = []
        for other, other_end in active:
            if other_end <= start:
                free = preds_free if other.pred else regs_free
                for k in range(other.width):
                    free[assignment[other] + k] = True
            else:
                still.append((other, other_end))
        active = still
        if vreg.pred:
            index = next((i for i, f in enumerate(preds_free) if f), None)
            if index is None:
                raise CompileError(f"kernel needs more than {NUM_PREDICATES} live predicates (too many conditions "
                                   "live at once); simplify the conditions", func.filename, func.first_line, func.name)
            preds_free[index] = False
            used_preds = max(used_preds, index + 1)
        else:
            step = vreg.width
            index = next((i for i in range(0, registers - step + 1, step)
                          if all(regs_free[i:i + step])), None)
            if index is None:                    # spill what lives longest (not a spill's own reload)
                candidates = [(e, v) for v, e in active if not v.pred and v.id not in reloads]
                if vreg.id not in reloads:
                    candidates.append((end, vreg))
                if not candidates:
                    raise CompileError(f"kernel needs more than {registers} registers at one instruction",
                                       func.filename, func.first_line, func.name)
                raise _OutOfRegisters(max(candidates, key=lambda c: (c[0], c[1].id))[1])
            for k in range(step):
                regs_free[index + k] = False
            used_regs = max(used_regs, index + step)
        assignment[vreg] = index
        active.append((vreg, end))
    return assignment, used_regs, used_preds
