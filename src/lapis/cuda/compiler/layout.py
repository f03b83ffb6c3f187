"""Layer 3 compiler, stage 4b: the branches between blocks, after register allocation.

Instruction selection lays out a loop as its test, its body, and a jump back to the test, so
each trip runs the test, a branch out that is not taken, the body and the jump: two branches a
trip. Here, as ptxas and LLVM do (loop rotation), a jump to a short block that ends in a
conditional branch gets a copy of that block instead: the body then ends in the test and a
branch back to the body's first instruction, one branch a trip. The copy computes what the
block would have, from the same registers (allocation is done), so any such jump may take it.
A test whose branch goes back into the loop (PTX's `if` inside a bottom-tested loop) is not copied.
Then a branch to the instruction that follows it anyway is dropped.
"""

from dataclasses import replace

from lapis.cuda.compiler.isel import SIDE_EFFECTS, MBlock, MInst

MAX_TEST = 6        # instructions in a block worth copying, its branch included


def arrange(blocks: list[MBlock]) -> None:
    """Drop branches to the next instruction, rotate loops (copy short tests into the jumps left to
    them), and drop the branches that leaves to the next instruction. Changes `blocks` in place."""
    drop_jumps_to_next(blocks)
    copy_tests(blocks)
    drop_jumps_to_next(blocks)


def _test(block: MBlock) -> bool:
    """Whether a block is a short test: plain instructions and a conditional branch."""
    *work, last = block.insts or [None]
    return (last is not None and last.op == "BRA" and last.guard is not None and len(block.insts) <= MAX_TEST
            and all(i.op not in SIDE_EFFECTS and i.guard is None for i in work))


def copy_tests(blocks: list[MBlock]) -> None:
    """Replace each unconditional jump to a short test with a copy of the test, branching (with the
    condition inverted) to the block the test falls through to, then jumping to where it branches."""
    index = {b.label: i for i, b in enumerate(blocks)}
    for b in blocks:
        jump = b.insts[-1] if b.insts else None
        if jump is None or jump.op != "BRA" or jump.guard is not None:
            continue
        target = blocks[index[jump.target]]
        if not _test(target) or index[target.label] + 1 == len(blocks):
            continue
        *work, branch = target.insts
        if index[branch.target] <= index[b.label]:
            # The copy's lanes that do not branch back wait at its jump while the others run the loop again (the
            # scheduler runs the lowest pc first): the jump must go forward, past the loop, or those lanes would
            # miss a barrier the others reach (a PTX loop's test that skips to a barrier inside the loop).
            continue
        fall = blocks[index[target.label] + 1].label
        p, negated = branch.guard
        b.insts[-1:] = [replace(i, mods=dict(i.mods)) for i in work] + [
            MInst("BRA", guard=(p, not negated), target=fall, source=branch.source),
            MInst("BRA", target=branch.target, source=branch.source)]
        b.succs = [fall, branch.target]


def drop_jumps_to_next(blocks: list[MBlock]) -> None:
    """Drop a branch whose target is where execution goes on anyway: the next block, or one after
    blocks with no instructions."""
    index = {b.label: i for i, b in enumerate(blocks)}
    dropped = True
    while dropped:
        dropped = False
        for i, b in enumerate(blocks):
            if not b.insts or b.insts[-1].op != "BRA":
                continue
            target = index[b.insts[-1].target]
            if target > i and all(not x.insts for x in blocks[i + 1:target]):
                b.insts.pop()
                dropped = True
