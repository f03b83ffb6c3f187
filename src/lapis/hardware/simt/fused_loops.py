"""Fused loops, the IR: a loop tested at its bottom, run to its end one vector of lanes at a time.

A loop whose body is one run of arithmetic (`fused.runs`) and ends in a conditional branch back to its
start is, where no other lanes wait below its exit, run by the reference scheduler trip after trip until
every lane has left it (`scheduler.py`: the lanes that branch back run first). The order does not matter
to the values: each lane's trips depend only on its own registers. So `emit_loop` writes one function that
takes a vector of lanes through every one of their trips before the next vector, with the rows in vector registers
throughout (`Carried`), and writes each lane's trips out for the engine (`native_scheduler.count_trips`) to
count the instructions as the reference issues them. The operations are `fused_ir`'s emitters.
"""

import numpy as np
from llvmlite import ir

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.fused_ir import EMITTERS, function, steps_of
from lapis.hardware.simt.fused_lanes import I1, I64, Lanes, Run
from lapis.hardware.simt.native_scheduler import FUSED_SIGNATURE, LOOP_SIGNATURE


class Carried:
    """The rows a fused loop carries from trip to trip as IR values: each a phi in the loop's header, loaded in
    the block before it (`before`, a `Lanes` there) when a trip first reads or writes it."""

    def __init__(self, header: ir.IRBuilder, before: Lanes):
        self.header, self.before = header, before
        self.phis: dict[tuple[str, int], ir.Value] = {}

    def value(self, which: str, row: int) -> ir.Value:
        if (which, row) not in self.phis:
            first = self.before.read_row(which, row)
            phi = self.phis[which, row] = self.header.phi(first.type)
            phi.add_incoming(first, self.before.b.block)
        return self.phis[which, row]


class CarriedLanes(Lanes):
    """A trip of a fused loop: rows come from the loop's `Carried` values and stay values (stored after it)."""

    def __init__(self, builder: ir.IRBuilder, run: Run, l: ir.Value, last_writes: dict, carried: Carried):
        super().__init__(builder, run, l, last_writes)
        self.carried = carried

    def read_row(self, which: str, row: int) -> ir.Value:
        return self.carried.value(which, row)

    def write_row(self, which: str, row: int, value: ir.Value) -> None:
        pass                                          # held in rows / pred_rows to the trip's end

    def value(self, which: str, row: int) -> ir.Value:
        """The row's value at the trip's end."""
        held = self.rows if which == "R" else self.pred_rows
        return held.get(row, self.carried.phis[which, row])


def emit_loop(module: ir.Module, name: str, table: np.ndarray, pcs: list[int], stride: int, width: int) -> None:
    """One function running a loop to its end: the run at `pcs[:-1]` and the conditional branch back to its
    start at `pcs[-1]`, `width` lanes at a time, each vector trip after trip until none of its lanes branches
    back or `cap` trips have run (`LOOP_SIGNATURE`). A trip runs unmasked while all the vector's lanes are in
    the loop, else under the mask of those still in it (the group's lanes, never one past the last, on the
    first). The rows stay in vector registers from the first trip to the last (loaded before, stored after):
    through memory, each trip waited for the last one's stores. Each lane's trips go to `trips[lane]`, for
    the engine to count the instructions as the reference issues them."""
    fn, entry, run, padded = function(module, name, LOOP_SIGNATURE, stride, width)
    trips, cap = fn.args[len(FUSED_SIGNATURE.args):]
    steps, last_writes = steps_of(table, pcs[:-1])
    guard, negated = int(table[pcs[-1], tr.GUARD]), bool(table[pcs[-1], tr.GUARD_NEG])
    done, head, tile, trip, latch, tail = (fn.append_basic_block(what) for what in (
        "done", "head", "tile", "trip", "latch", "tail"))
    ir.IRBuilder(done).ret_void()
    b = ir.IRBuilder(head)
    lane = b.phi(I64)
    b.cbranch(b.icmp_signed("<", lane, padded), tile, done)
    # The vector's lanes that enter: in the group (every lane when it is full), and none past the last.
    b = ir.IRBuilder(tile)
    before = Lanes(b, run, lane, last_writes)
    before.load_mask()
    vector, ones = before.type, ir.IntType(width)
    index = b.add(before.splat(lane), ir.Constant(vector(I64), list(range(width))))
    everyone = b.select(b.icmp_signed("!=", run.full, ir.Constant(I64, 0)), before.const(I1, 1), before.mask)
    entering = b.and_(everyone, b.icmp_signed("<", index, before.splat(run.lanes)))
    # A trip: the lanes in the loop, their trips so far, the vector's trips; then the body, whole or masked.
    h = ir.IRBuilder(trip)
    active, counted, made = h.phi(vector(I1)), h.phi(vector(I64)), h.phi(I64)
    carried = Carried(h, before)
    ends = []                                   # per body: its Lanes, the lanes going round again, their trips
    for mask in (None, active):
        x = CarriedLanes(ir.IRBuilder(fn.append_basic_block("masked" if mask else "whole")), run, lane,
                         last_writes, carried)
        x.mask = mask
        for k, t, pc in steps:
            x.step = k
            EMITTERS[int(t[tr.KIND])](x, t, pc)
        again = x.holds(guard, negated)
        if mask is None:
            ends.append((x, again, x.b.add(counted, x.const(I64, 1))))
        else:
            ends.append((x, x.b.and_(mask, again), x.b.add(counted, x.b.zext(mask, vector(I64)))))
        x.b.branch(latch)
    every = h.icmp_unsigned("==", h.bitcast(active, ones), ir.Constant(ones, -1))
    h.cbranch(every, ends[0][0].b.block, ends[1][0].b.block)
    # The latch joins the two bodies' values and goes round again while a lane does (and `cap` allows).
    b = ir.IRBuilder(latch)

    def join(values: list[ir.Value]) -> ir.Value:
        phi = b.phi(values[0].type)
        for value, (x, _, _) in zip(values, ends, strict=True):
            phi.add_incoming(value, x.b.block)
        return phi
    again, counted_now = join([end[1] for end in ends]), join([end[2] for end in ends])
    rows = {key: join([x.value(*key) for x, _, _ in ends]) for key in carried.phis}
    made_now = b.add(made, ir.Constant(I64, 1))
    some = b.icmp_unsigned("!=", b.bitcast(again, ones), ir.Constant(ones, 0))
    b.cbranch(b.and_(some, b.icmp_signed("<", made_now, cap)), trip, tail)
    for phi, first, next_trip in ((active, entering, again), (counted, before.const(I64, 0), counted_now),
                                  (made, ir.Constant(I64, 0), made_now)):
        phi.add_incoming(first, tile)
        phi.add_incoming(next_trip, latch)
    for key, phi in carried.phis.items():       # a carried row's first value came with its phi
        phi.add_incoming(rows[key], latch)
    ir.IRBuilder(tile).branch(trip)
    # After the last trip: the rows the loop writes, and the lanes' trips (stored whole: the array is padded).
    b = ir.IRBuilder(tail)
    after = Lanes(b, run, lane, last_writes)
    for key, value in rows.items():
        if key in last_writes:
            after.write_row(*key, value)
    b.store(counted_now, b.bitcast(b.gep(trips, [lane]), vector(I64).as_pointer()), align=8)
    lane.add_incoming(ir.Constant(I64, 0), entry.block)
    lane.add_incoming(b.add(lane, ir.Constant(I64, width)), tail)
    b.branch(head)
    entry.branch(head)                          # last: operands hoisted into the entry block come first
