"""Layer 3 compiler, stage 4: register allocation by linear scan.

Liveness is computed on the machine CFG (live-in / live-out sets, iterated to a fixed
point); each virtual register's live interval runs from its first to its last live point
in layout order, so a value used inside a loop stays live around the whole loop. Intervals
are then scanned in order of their start, taking the lowest free physical register (an
even-aligned pair for 64-bit values; predicates come from their own file of seven). A
register whose interval ends at an instruction may be the destination of that same
instruction: the hardware reads every source before it writes.

Spilling to local memory is not implemented yet: a kernel that needs more than 255
registers (or 7 predicates) live at once gets a clear error.
"""

from lapis.cuda.compiler.frontend import CompileError
from lapis.cuda.compiler.isel import MBlock
from lapis.isa import NUM_PREDICATES, NUM_REGISTERS


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


def allocate(blocks: list[MBlock], func) -> tuple[dict, int, int]:
    """Map each virtual register to a physical index; returns (map, registers used, predicates used)."""
    span = intervals(blocks)
    assignment: dict = {}
    regs_free = [True] * NUM_REGISTERS
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
            index = next((i for i in range(0, NUM_REGISTERS - step + 1, step)
                          if all(regs_free[i:i + step])), None)
            if index is None:
                raise CompileError(f"kernel needs more than {NUM_REGISTERS} registers live at once; spilling to "
                                   "local memory is not implemented yet (use smaller tiles or fewer locals)",
                                   func.filename, func.first_line, func.name)
            for k in range(step):
                regs_free[index + k] = False
            used_regs = max(used_regs, index + step)
        assignment[vreg] = index
        active.append((vreg, end))
    return assignment, used_regs, used_preds
