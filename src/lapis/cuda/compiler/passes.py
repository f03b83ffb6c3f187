"""Layer 3 compiler, stage 2: clean-up passes over the SSA IR.

  remove_trivial_phis   a phi whose inputs are all one value (or itself) is that value
  dominator_cse         a pure operation repeated in a block its first copy dominates is
                        replaced by that copy (global value numbering over the dominator tree)
  eliminate_dead_code   drop values nothing uses (stores and barriers stay)
  split_critical_edges  give every phi copy a block of its own to live in

Constant folding, local CSE and small-loop unrolling already happened while the frontend
built the IR.
"""

from lapis.cuda.compiler import ir

EFFECTS = {"store", "barrier", "atomic", "fence"}


def _rewrite(func: ir.Function, repl: dict) -> None:
    def resolve(v):
        while v in repl:
            v = repl[v]
        return v
    for b in func.blocks:
        for v in b.phis + b.instrs:
            v.args = [resolve(a) for a in v.args]
        if b.term and b.term[0] == "cbr":
            b.term = ("cbr", resolve(b.term[1]), b.term[2], b.term[3])


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
    order, seen = [], set()

    def visit(b):                      # postorder by DFS
        seen.add(b)
        for s in b.succs:
            if s not in seen:
                visit(s)
        order.append(b)
    visit(entry)
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
            if v.op not in ir.PURE or v.op == "const":
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


def eliminate_dead_code(func: ir.Function) -> None:
    while True:
        uses = func.uses()
        removed = False
        for b in func.blocks:
            keep = [v for v in b.phis if uses.get(v, 0) > sum(a is v for a in v.args)]
            removed |= len(keep) != len(b.phis)
            b.phis = keep
            keep = [v for v in b.instrs if v.op in EFFECTS or uses.get(v, 0)]
            removed |= len(keep) != len(b.instrs)
            b.instrs = keep
        if not removed:
            return


def split_critical_edges(func: ir.Function) -> None:
    """An edge from a block with two successors to one with phis gets a block between them,
    placed just before the successor (all such edges go forward, so layout stays structured)."""
    count = 0
    for b in list(func.blocks):
        if not b.term or b.term[0] != "cbr":
            continue
        _, cond, then, other = b.term
        for succ in (then, other):
            if not succ.phis or len(succ.preds) < 2:
                continue
            count += 1
            mid = ir.Block(f"edge{count}_{b.name}_{succ.name}", preds=[b], term=("br", succ))
            succ.preds[succ.preds.index(b)] = mid
            func.blocks.insert(func.blocks.index(succ), mid)
            then = mid if succ is then else then
            other = mid if succ is other else other
        b.term = ("cbr", cond, then, other)


def optimize(func: ir.Function) -> ir.Function:
    remove_trivial_phis(func)
    dominator_cse(func)
    eliminate_dead_code(func)
    split_critical_edges(func)
    return func
