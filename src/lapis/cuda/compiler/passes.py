"""Layer 3 compiler, stage 2: clean-up passes over the SSA IR.

  remove_trivial_phis   a phi whose inputs are all one value (or itself) is that value
  eliminate_dead_code   drop values nothing uses (stores and barriers stay)
  split_critical_edges  give every phi copy a block of its own to live in

Constant folding, local CSE and small-loop unrolling already happened while the frontend
built the IR.
"""

from lapis.cuda.compiler import ir

EFFECTS = {"store", "barrier"}


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
    eliminate_dead_code(func)
    split_critical_edges(func)
    return func
