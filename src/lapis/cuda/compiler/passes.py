"""Layer 3 compiler, stage 2: clean-up passes over the SSA IR.

  remove_trivial_phis   a phi whose inputs are all one value (or itself) is that value
  dominator_cse         a pure operation repeated in a block its first copy dominates is
                        replaced by that copy (global value numbering over the dominator tree)
  hoist_invariants      loop-invariant code motion: a pure operation whose operands are all
                        defined outside a loop moves to the loop's preheader (at most HOIST_BUDGET
                        per loop, as each hoisted value holds a register through the loop)
  reduce_strength       i * c, for an induction variable i stepping by a constant, becomes a
                        second induction variable stepping by step * c (a multiply becomes an add)
  eliminate_dead_code   drop values nothing uses (stores and barriers stay)
  narrow_divisions      a 64-bit // or % tests whether its operands fit 32 bits, for a fast path
  legalize_halves       float16/bfloat16 arithmetic becomes float32 arithmetic between casts
  split_critical_edges  give every phi copy a block of its own to live in

Constant folding, local CSE and small-loop unrolling already happened while the frontend
built the IR.
"""

from dataclasses import replace
from functools import partial

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op


def _rewrite(func: ir.Function, repl: dict) -> None:
    def resolve(v):
        while v in repl:
            v = repl[v]
        return v
    for b in func.blocks:
        for v in b.phis + b.instrs:
            v.args = [resolve(a) for a in v.args]
        if isinstance(b.term, ir.Branch):
            b.term = replace(b.term, cond=resolve(b.term.cond))


def remove_trivial_phis(func: ir.Function) -> None:
    repl: dict = {}
    changed = True
    while changed:
        changed = False
        for b in func.blocks:
            for phi in list(b.phis):
                inputs = set()
                for a in phi.args:
                    while a in repl:
                        a = repl[a]
                    if a is not phi:
                        inputs.add(a)
                if len(inputs) == 1:
                    repl[phi] = inputs.pop()
                    b.phis.remove(phi)
                    changed = True
    _rewrite(func, repl)


def dominators(func: ir.Function) -> dict[ir.Block, ir.Block | None]:
    """Immediate dominator of each reachable block (Cooper, Harvey and Kennedy's iteration)."""
    entry = func.blocks[0]
    order, seen, stack = [], {entry}, [(entry, iter(entry.succs))]
    while stack:                       # postorder by DFS, with a stack: kernels can have thousands of blocks
        b, succs = stack[-1]
        s = next((s for s in succs if s not in seen), None)
        if s is None:
            order.append(stack.pop()[0])
        else:
            seen.add(s)
            stack.append((s, iter(s.succs)))
    rpo = order[::-1]
    index = {b: i for i, b in enumerate(rpo)}
    idom: dict = {entry: entry}

    def intersect(a, b):
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            preds = [p for p in b.preds if p in idom]
            new = preds[0]
            for p in preds[1:]:
                new = intersect(p, new)
            if idom.get(b) is not new:
                idom[b] = new
                changed = True
    idom[entry] = None
    return idom


def dominator_cse(func: ir.Function) -> None:
    idom = dominators(func)
    children: dict = {b: [] for b in idom}
    for b, parent in idom.items():
        if parent is not None:
            children[parent].append(b)
    repl: dict = {}
    table: dict = {}

    def key(v):
        args = []
        for a in v.args:
            while a in repl:
                a = repl[a]
            args.append(a.id)
        return (v.op, v.type, tuple(args), tuple(sorted(v.attrs.items(), key=str)))

    def walk(block):
        added = []
        for v in block.instrs:
            if v.op not in ir.PURE or v.op is Op.CONST:
                continue
            k = key(v)
            if k in table:
                repl[v] = table[k]
            else:
                table[k] = v
                added.append(k)
        for child in children[block]:
            walk(child)
        for k in added:
            del table[k]
    walk(func.blocks[0])
    _rewrite(func, repl)


def loops(func: ir.Function) -> list[tuple[ir.Block, set, ir.Block]]:
    """Natural loops, innermost first: (header, body blocks, preheader), for loops entered from one
    block that jumps only to the header (the frontend builds every loop that way)."""
    idom = dominators(func)

    def dominates(a, b):
        while b is not None and b is not a:
            b = idom.get(b)
        return b is a
    found = []
    for latch in func.blocks:
        for header in latch.succs:
            if latch not in idom or not dominates(header, latch):
                continue
            body, work = {header, latch}, [latch]
            while work:
                for p in work.pop().preds:
                    if p not in body:
                        body.add(p)
                        work.append(p)
            outside = [p for p in header.preds if p not in body]
            if len(outside) == 1 and outside[0].succs == [header]:
                found.append((header, body, outside[0]))
    return sorted(found, key=lambda loop: len(loop[1]))


HOIST_BUDGET = 96      # values hoisted out of one loop at most: each stays live across the whole loop


def hoist_invariants(func: ir.Function) -> None:
    for _, body, preheader in loops(func):          # innermost first, so code can climb out of nests
        inside = {v for b in body for v in b.phis + b.instrs if v.op is not Op.CONST}
        budget = HOIST_BUDGET
        for b in [b for b in func.blocks if b in body]:         # layout order: definitions come first
            for v in list(b.instrs):
                # Conditions stay: predicates are few (7), and recomputing one costs a single ISETP.
                if budget and v.op in ir.PURE and v.op is not Op.CONST and v.type != T.boolean and \
                        not any(a in inside for a in v.args):
                    budget -= 1
                    for a in v.args:                 # constants it reads come along (they dominate nothing)
                        if a.op is Op.CONST and a.block in body:
                            a.block.instrs.remove(a)
                            preheader.instrs.append(a)
                            a.block = preheader
                    b.instrs.remove(v)
                    preheader.instrs.append(v)
                    v.block = preheader
                    inside.discard(v)


def reduce_strength(func: ir.Function) -> None:
    for header, body, preheader in loops(func):
        for phi in list(header.phis):
            if phi.type.kind not in ("int", "uint") or len(phi.args) != 2:
                continue
            init_pos = 0 if header.preds[0] is preheader else 1
            init, update = phi.args[init_pos], phi.args[1 - init_pos]
            if not (update.op is Op.ADD and update.args[0] is phi and update.args[1].op is Op.CONST):
                continue
            step = update.args[1].attrs["value"]
            for b in body:
                for v in list(b.instrs):
                    if not (v.op is Op.MUL and v.args[0] is phi and v.args[1].op is Op.CONST and v.type == phi.type):
                        continue
                    scale = func.new_value(Op.CONST, phi.type, attrs=dict(v.args[1].attrs), block=preheader)
                    start = func.new_value(Op.MUL, phi.type, [init, scale], block=preheader, line=v.line,
                                           file=v.file)
                    preheader.instrs += [scale, start]
                    delta = func.new_value(Op.CONST, phi.type, attrs={"value": step * scale.attrs["value"]},
                                           block=update.block)
                    reduced = func.new_value(Op.PHI, phi.type, block=header, line=v.line, file=v.file)
                    advanced = func.new_value(Op.ADD, phi.type, [reduced, delta], block=update.block,
                                              line=v.line, file=v.file)
                    reduced.args = [None, None]
                    reduced.args[init_pos], reduced.args[1 - init_pos] = start, advanced
                    header.phis.append(reduced)
                    at = update.block.instrs.index(update)
                    update.block.instrs[at + 1:at + 1] = [delta, advanced]
                    _rewrite(func, {v: reduced})
                    b.instrs.remove(v)


_HALF_ARITHMETIC = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.FDIV, Op.DIV, Op.MOD, Op.MIN, Op.MAX, Op.NEG, Op.MATH})


def legalize_halves(func: ir.Function) -> None:
    """Compute half-precision operations in float32 and round back: one F2F each way."""
    for b in func.blocks:
        out = []
        for v in b.instrs:
            halves_in = [a for a in v.args if getattr(a.type, "half", False)]
            if v.op in _HALF_ARITHMETIC and v.type.half or v.op is Op.CMP and halves_in:
                args = []
                for a in v.args:
                    if getattr(a.type, "half", False):
                        a = func.new_value(Op.CAST, T.float32, [a], block=b, line=v.line, file=v.file)
                        out.append(a)
                    args.append(a)
                if v.op is Op.CMP:
                    v.args = args
                else:                       # v becomes the rounding back, so its users keep it
                    wide = func.new_value(v.op, T.float32, args, dict(v.attrs), block=b, line=v.line, file=v.file)
                    out.append(wide)
                    v.op, v.args, v.attrs = Op.CAST, [wide], {}
            out.append(v)
        b.instrs = out


def eliminate_dead_code(func: ir.Function) -> None:
    while True:
        uses = func.uses()
        removed = False
        for b in func.blocks:
            keep = [v for v in b.phis if uses.get(v, 0) > sum(a is v for a in v.args)]
            removed |= len(keep) != len(b.phis)
            b.phis = keep
            keep = [v for v in b.instrs if v.op in ir.EFFECTS or uses.get(v, 0)]
            removed |= len(keep) != len(b.instrs)
            b.instrs = keep
        if not removed:
            return


_WIDE_INTS = (T.int64, T.uint64)


def narrow_divisions(func: ir.Function) -> None:
    """Give each 64-bit `//` or `%` by a value a fast path, as nvcc does: where both operands lie in
    [0, 2^32) (indices and sizes, nearly always), a division exact in float64 (isel's `narrow`);
    elsewhere the full 64-bit one. The block splits at the division into a test, the two paths and
    a join whose phis take the quotient and remainder; `a // b` and `a % b` of one block go together."""
    count = 0
    blocks = list(func.blocks)
    while blocks:
        b = blocks.pop(0)
        at = next((k for k, v in enumerate(b.instrs) if v.op in (Op.DIV, Op.MOD) and v.type in _WIDE_INTS
                   and "narrow" not in v.attrs and not ir.power_of_two(v.args[1])), None)   # those are shifts
        if at is None:
            continue
        count += 1
        head = b.instrs[at]
        x, d = head.args
        pair = [v for v in b.instrs[at:] if v.op in (Op.DIV, Op.MOD) and v.args == [x, d] and v.type == head.type]
        narrow, wide, join = (ir.Block(f"{kind}{count}_{b.name}") for kind in ("narrow", "wide", "join"))
        join.instrs, join.term = [v for v in b.instrs[at + 1:] if v not in pair], b.term
        for v in join.instrs:
            v.block = join
        for succ in join.succs:
            succ.preds = [join if p is b else p for p in succ.preds]
        value = partial(_append, func, line=head.line, file=head.file)
        b.instrs = b.instrs[:at]
        both = value(Op.OR, T.int64, [x, d], b)
        high = value(Op.SHR, T.int64, [both, value(Op.CONST, T.int64, [], b, value=32)], b)
        fits = value(Op.CMP, T.boolean, [high, value(Op.CONST, T.int64, [], b, value=0)], b, op="eq")
        b.term = ir.Branch(fits, narrow, wide)
        repl = {}
        for v in pair:
            fast = value(v.op, v.type, [x, d], narrow, narrow=True)
            slow = value(v.op, v.type, [x, d], wide, **v.attrs)
            repl[v] = value(Op.PHI, v.type, [fast, slow], join)
        narrow.preds, wide.preds, join.preds = [b], [b], [narrow, wide]
        narrow.term, wide.term = ir.Jump(join), ir.Jump(join)
        where = func.blocks.index(b) + 1
        func.blocks[where:where] = [narrow, wide, join]
        _rewrite(func, repl)
        blocks.insert(0, join)


def _append(func: ir.Function, kind: Op, t, args: list, block: ir.Block, line: int = 0, file: str | None = None,
            **attrs) -> ir.Value:
    """A new value at the end of block (among its phis for a phi)."""
    v = func.new_value(kind, t, args, attrs, block, line, file)
    (block.phis if kind is Op.PHI else block.instrs).append(v)
    return v


def split_critical_edges(func: ir.Function) -> None:
    """An edge from a block with two successors to one with phis gets a block between them, placed just
    before the successor, or, for a backward edge (a loop whose test at its bottom branches to its header, as
    PTX's loops do), just after the branching block, so the copies come after every value they read."""
    count = 0
    for b in list(func.blocks):
        if not isinstance(b.term, ir.Branch):
            continue
        then, orelse = b.term.then, b.term.orelse
        for succ in (then, orelse):
            if not succ.phis or len(succ.preds) < 2:
                continue
            count += 1
            mid = ir.Block(f"edge{count}_{b.name}_{succ.name}", preds=[b], term=ir.Jump(succ))
            succ.preds[succ.preds.index(b)] = mid
            backward = func.blocks.index(succ) <= func.blocks.index(b)
            func.blocks.insert(func.blocks.index(b) + 1 if backward else func.blocks.index(succ), mid)
            then = mid if succ is then else then
            orelse = mid if succ is orelse else orelse
        b.term = replace(b.term, then=then, orelse=orelse)


def optimize(func: ir.Function) -> ir.Function:
    remove_trivial_phis(func)
    dominator_cse(func)
    hoist_invariants(func)
    reduce_strength(func)
    dominator_cse(func)
    eliminate_dead_code(func)
    narrow_divisions(func)
    legalize_halves(func)
    split_critical_edges(func)
    return func
