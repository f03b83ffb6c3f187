"""The native scheduler: the reference scheduler's loop (`scheduler.py`) as LLVM machine code (numba).

`execute_batch` runs a batch of resident blocks the way `SimtCore._run_reference` does, group
by group, in the same order: the group at the lowest pc runs next and keeps running until it
exits, takes a branch while others wait, or reaches a pc where others wait (it then merges with
them); a branch or exit that splits it parks the lanes that jump at the target (or retires
those that exit) and runs on with the rest (unless the branch went back: the rest then waits
too, and the lowest pc runs next). Each instruction of a group is one of the engine's
(`native.instruction`), run over every active lane in lane order, so values, stores, faults and
counters come out exactly as the reference's.

Where the reference keeps a dict of pc -> lanes, this keeps, per lane, the pc it waits at
(`lane_pc`, -1 for a lane that runs or has exited) and, per pc, how many lanes wait there
(`waiting`); the running group is a boolean row (`group`) with its lane and warp counts (`cur`).

It hands the running group back to Python (`translated.py`) for an instruction the engine does
not implement, one that would fault (its binder raises the reference's fault), a barrier under
divergence (its binder decides), the watchdog, a store a checker must record, and the end of
the program; Python runs that one step and calls back, and the group carries on.
"""

import threading

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.native import (
    ATOMG,
    BAR,
    BRA,
    DONE,
    EXIT,
    LDS,
    NOP,
    PT,
    STG,
    active_range,
    count_shared_access,
    instruction,
    private_addresses,
)
from lapis.hardware.simt.native_counters import (
    BARRIERS,
    SHARED_BYTES,
    SHARED_IDEAL_WAVEFRONTS,
    SHARED_WAVEFRONTS,
    TALLY_SLOTS,
)
from lapis.hardware.simt.native_mma import MMA_WORK

# How `execute_path` stops: the instruction at pc is for the reference (not translated, a branch or
# exit that splits the group, a barrier under divergence, a fault, the watchdog); the group exited;
# it took a branch while other groups wait (park it at pc); it reached pc where another group waits
# (merge); it ran past the program's end; it stored while a checker keeps the writes.
# `execute_batch` stops with REFERENCE, PAST_END, STORED, or FINISHED when every lane has exited.
# LOOPED: a fused loop ran into the watchdog's budget with lanes still looping (`execute_batch` parks the rest).
REFERENCE, EXITED, PARK, MERGE, PAST_END, STORED, FINISHED, LOOPED = range(8)

# A fused run (`fused.py`): void run(R, P, group, group is full, lanes, cbank, cbank's words, the batch's shared
# memory, each lane's first word of it, its words); it was compiled for R's and P's row length (the table's
# RUN_STRIDE).
_I8P, _I32P, _I64 = ir.IntType(8).as_pointer(), ir.IntType(32).as_pointer(), ir.IntType(64)
FUSED_SIGNATURE = ir.FunctionType(ir.VoidType(), [_I32P, _I8P, _I8P, _I64, _I64, _I32P, _I64, _I32P, _I64.as_pointer(),
                                                  _I64])
# A fused loop (`fused.py`) takes as well each lane's trips (written: i64 per lane, in padded storage) and the
# most trips any vector may run.
LOOP_SIGNATURE = ir.FunctionType(ir.VoidType(), [*FUSED_SIGNATURE.args, ir.IntType(64).as_pointer(), _I64])


def _engine(fn):
    """numba without its runtime (`_nrt=False`): it would count references to every array with an atomic
    add on each view and call, which cost the engine more than its arithmetic; Python holds every
    array the engine touches until it returns, so nothing is lost."""
    return njit(cache=True, error_model="numpy", _nrt=False)(fn)


@_engine
def execute_path(table, pc, end, group, group_full, alone, waiting, lanes_n, warps_n, budget, R, P, special, cbank,
                 clock, mem, sizes, lanes, caches, scratch, laid, guarded, missed, log_va, log_active, tally,
                 warp_counts, thread_counts, version, bumps, exited):
    """Run the group (lanes where `group` is true; all when `group_full`; `lanes_n` of them in `warps_n`
    warps) from instruction pc for as long as it stays whole and runs alone or first: through
    translated instructions and uniform branches, exits and barriers, at most `budget` instructions.
    Each one it completes counts as the scheduler counts (`warp_counts`, `thread_counts`, register
    `version`s, memory and barrier counts in `tally`). Returns (how it stopped, pc, instructions completed)."""
    steps = 0
    logging = sizes[7]
    whole_warps = sizes[4] % sizes[3] == 0      # no block ends in part of a warp: runs that shuffle may run
    while True:
        if steps >= budget:
            return REFERENCE, pc, steps
        t = table[pc]
        kind = t[tr.KIND]
        if kind < 0:
            return REFERENCE, pc, steps
        n, fn = t[tr.RUN_LEN], 0                 # a fused run (`fused.py`) starts here
        fits = n and t[tr.RUN_STRIDE] == R.shape[1] and (whole_warps or t[tr.RUN_WARP] == 0)
        cap = (budget - steps) // t[tr.LOOP_LEN] if fits and t[tr.LOOP_LEN] else 0
        looped = cap > 0 and (alone or quiet(waiting, 0, pc + t[tr.LOOP_LEN]))
        if looped:
            # A loop runs to its end where the reference would run it so: no lanes wait below its exit.
            n, trips = t[tr.LOOP_LEN], scratch[0]
            if parted(n, lanes_n, sizes):
                run_parts(t[tr.LOOP_FN], R, P, group, group_full, cbank, mem[0], lanes[4], trips, cap, sizes[8])
            else:
                run_loop(t[tr.LOOP_FN], R, P, group, group_full, cbank, mem[0], lanes[4], trips, cap)
            most = count_trips(pc, n, trips, lanes[0], warp_counts, thread_counts, version, bumps)
            steps += most * n
            if most == cap and still_looping(table[pc + n - 1], group, group_full, trips, cap, P):
                return LOOPED, pc, steps
            pc += n
        elif fits:
            if alone and t[tr.CHAIN_LEN] and steps + t[tr.CHAIN_LEN] <= budget:
                fn, n = t[tr.CHAIN_FN], t[tr.CHAIN_LEN]  # with its branch and the run at the target
            elif steps + n <= budget and (alone or quiet(waiting, pc + 1, pc + n)):
                fn = t[tr.RUN_FN]
            if fn and t[tr.RUN_LOADS] and not check_loads(table, pc, n, group, group_full, R, sizes, lanes, scratch,
                                                          laid, tally):
                fn = 0                                   # a load would fault: one instruction at a time, to it
            if fn:
                if parted(n, lanes_n, sizes):
                    run_parts(fn, R, P, group, group_full, cbank, mem[0], lanes[4], scratch[0], -1, sizes[8])
                else:
                    run_fused(fn, R, P, group, group_full, cbank, mem[0], lanes[4])
                for _ in range(n):
                    issued(pc, warps_n, lanes_n, warp_counts, thread_counts, version, bumps)
                    pc = table[pc, tr.BVAL] if table[pc, tr.KIND] == BRA else pc + 1
                steps += n
        if looped or fn:
            if pc >= end:
                return PAST_END, pc, steps
            if not alone and waiting[pc]:
                return MERGE, pc, steps
            continue
        target = pc + 1
        retired = jumped = False
        if kind == BRA or kind == EXIT:
            taken = taken_lanes(t, group, lanes_n, P)
            if 0 < taken < lanes_n:
                return REFERENCE, pc, steps                  # the group splits: `execute_batch`'s work
            if taken and kind == BRA:
                target = t[tr.BVAL]
                jumped = True
                if not 0 <= target < end:
                    return REFERENCE, pc, steps              # its binder raises the fault
            elif taken:
                for l in range(group.size):
                    if group[l]:
                        exited[l] = True
                retired = True
        elif kind == BAR:
            if not group_full:
                return REFERENCE, pc, steps                  # the binder checks for divergence
            tally[BARRIERS] += warps_n
        elif kind != NOP and instruction(t, kind, group, group_full, R, P, special, cbank, clock, mem, sizes,
                                         lanes, caches, scratch, laid, guarded, missed, log_va, log_active,
                                         tally) != DONE:
            return REFERENCE, pc, steps                      # a fault: its binder raises it
        issued(pc, warps_n, lanes_n, warp_counts, thread_counts, version, bumps)
        steps += 1
        if retired:
            return EXITED, pc, steps
        if jumped and not alone:                             # the reference parks it and picks the lowest pc
            return PARK, target, steps
        pc = target
        if logging and (kind == STG or kind == ATOMG):
            return STORED, pc, steps
        if pc >= end:
            return PAST_END, pc, steps
        if not alone and waiting[pc]:
            return MERGE, pc, steps


PART_ALIGN = 64             # lanes per part: a multiple of every vector width, the widest warp's included


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def parted(n, lanes_n, sizes):
    """Whether a fused run of n instructions over `lanes_n` lanes is split among the engine's threads (`sizes[8]`,
    `NativeRunner.threads`): when it runs at least `sizes[9]` instructions over lanes in all (splitting costs a
    few microseconds) and the lanes make two parts."""
    return sizes[8] > 1 and n * lanes_n >= sizes[9] and lanes_n >= 2 * PART_ALIGN


@njit(parallel=True, cache=True, error_model="numpy", _nrt=False)
def run_parts(fn, R, P, group, group_full, cbank, shared, shared_base, trips, cap, parts):
    """Run the fused run (`cap` < 0) or loop at fn over the group's lanes in `parts` consecutive parts, each on its
    own thread (numba's threading layer): a fused function's lanes are independent of each other, so any order of
    them gives the same values. A part starts at a multiple of PART_ALIGN lanes, so its vectors (and warps) are
    the unsplit run's; it is handed each lane-indexed array from its first lane."""
    L = group.size
    chunk = (L + parts - 1) // parts
    chunk = (chunk + PART_ALIGN - 1) // PART_ALIGN * PART_ALIGN
    for part in prange(parts):
        lo = min(part * chunk, L)
        hi = min(lo + chunk, L)
        if lo < hi:
            if cap < 0:
                run_fused(fn, R[:, lo:], P[:, lo:], group[lo:hi], group_full, cbank, shared, shared_base[lo:])
            else:
                run_loop(fn, R[:, lo:], P[:, lo:], group[lo:hi], group_full, cbank, shared, shared_base[lo:],
                         trips[lo:], cap)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def quiet(waiting, start, stop):
    """Whether no lanes wait at start .. stop - 1, where the group would merge with them or they would run first."""
    for pc in range(start, stop):
        if waiting[pc]:
            return False
    return True


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def count_trips(pc, n, trips, lane_in_warp, warp_counts, thread_counts, version, bumps):
    """Count the n instructions of a fused loop at pc as the reference issues them, from each lane's trips
    (0 for a lane outside the group): trip k is one issue by the lanes that run k trips or more, so each
    instruction counts every lane's trips and, per warp, the trips of its longest-running lane. Returns
    the most trips."""
    lanes_trips, warps_trips, most, warp_most = 0, 0, 0, 0
    for l in range(lane_in_warp.size):
        if lane_in_warp[l] == 0:                 # a warp's first lane
            warps_trips += warp_most
            warp_most = 0
        k = trips[l]
        lanes_trips += k
        warp_most = max(warp_most, k)
        most = max(most, k)
    warps_trips += warp_most
    for i in range(pc, pc + n):
        warp_counts[i] += warps_trips
        thread_counts[i] += lanes_trips
        for k in range(bumps.shape[1]):
            if bumps[i, k] >= 0:
                version[bumps[i, k]] += most
    return most


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def still_looping(branch, group, group_full, trips, cap, P):
    """After a fused loop stopped at `cap` trips: whether any lane would branch back (its trips are cap and
    the branch's guard holds); marks those lanes 1 in trips, the others 0."""
    g, gneg = branch[tr.GUARD], branch[tr.GUARD_NEG] != 0
    again = False
    for l in range(group.size):
        looping = (group_full or group[l]) and trips[l] == cap and P[g, l] != gneg
        trips[l] = looping
        again |= looping
    return again


def _fused_arguments(context, builder, sig, args) -> list:
    """`FUSED_SIGNATURE`'s arguments from (fn, R, P, group, full, cbank, shared, shared base, ...): each array's
    data pointer, the group's lanes (rows are longer: `registers.padded_lanes`) and the words of the constant
    bank and of shared memory."""
    r, p, g, c, m, base = (context.make_array(sig.args[i])(context, builder, args[i]) for i in (1, 2, 3, 5, 6, 7))
    return [builder.bitcast(r.data, _I32P), builder.bitcast(p.data, _I8P), builder.bitcast(g.data, _I8P),
            builder.zext(args[4], _I64), builder.extract_value(g.shape, 0), builder.bitcast(c.data, _I32P),
            builder.extract_value(c.shape, 0), builder.bitcast(m.data, _I32P),
            builder.bitcast(base.data, _I64.as_pointer()), builder.extract_value(m.shape, 0)]


@intrinsic
def run_fused(typingctx, fn, R, P, group, full, cbank, shared, shared_base):
    """Call the fused run at address fn (`FUSED_SIGNATURE`) on the register file, predicates, group, constant
    bank and shared memory."""
    def codegen(context, builder, sig, args):
        builder.call(builder.inttoptr(args[0], FUSED_SIGNATURE.as_pointer()),
                     _fused_arguments(context, builder, sig, args))
        return context.get_dummy_value()
    return types.void(fn, R, P, group, full, cbank, shared, shared_base), codegen


@intrinsic
def run_loop(typingctx, fn, R, P, group, full, cbank, shared, shared_base, trips, cap):
    """Call the fused loop at address fn (`LOOP_SIGNATURE`): `run_fused`'s arguments, then each lane's trips
    and the most trips."""
    def codegen(context, builder, sig, args):
        k = context.make_array(sig.args[8])(context, builder, args[8])
        builder.call(builder.inttoptr(args[0], LOOP_SIGNATURE.as_pointer()),
                     [*_fused_arguments(context, builder, sig, args), builder.bitcast(k.data, _I64.as_pointer()),
                      args[9]])
        return context.get_dummy_value()
    return types.void(fn, R, P, group, full, cbank, shared, shared_base, trips, cap), codegen


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def check_loads(table, pc, n, group, group_full, R, sizes, lanes, scratch, laid, tally):
    """Before the fused run of n instructions at pc, which loads from shared memory: whether no lane's load
    would fault, from the address registers as they are before the run (no instruction of the run writes
    them: `fused.runs`). If none would, each load is counted as the engine counts it; else none is, and the
    engine runs the instructions one at a time, up to the load that faults.

    Loads through one address register of one width (a tile's, at several offsets) differ only by their
    offset. Their lanes' words differ by one constant, which maps each bank to another and keeps each bank's
    distinct words, so they count alike: each such kind is counted once (bank wavefronts cost a pass over
    every warp) and its counts added again for the others. And where the offsets are whole multiples of the
    width, alignment holds for all or none, so the first's lowest and highest address, moved by the offset,
    check the others without another pass over the lanes."""
    where = scratch[1, :group.size]
    kinds = scratch[2]          # per kind counted: KIND_SLOTS values (see below)
    most = kinds.size // KIND_SLOTS
    known = 0
    bytes0, wavefronts0, ideal0 = tally[SHARED_BYTES], tally[SHARED_WAVEFRONTS], tally[SHARED_IDEAL_WAVEFRONTS]
    for i in range(pc, pc + n):
        t = table[i]
        if t[tr.KIND] != LDS:
            continue
        width, offset = t[tr.WIDTH], t[tr.SIMM]
        aligned = offset % width == 0                     # which of the engine's two ways counts it
        k = 0
        while k < known and not (kinds[KIND_SLOTS * k] == t[tr.A] and kinds[KIND_SLOTS * k + 1] == width
                                  and kinds[KIND_SLOTS * k + 2] == aligned):
            k += 1
        kind = kinds[KIND_SLOTS * k:KIND_SLOTS * (k + 1)]
        if k < known and aligned:
            moved = offset - kind[6]
            faults = kind[7] + moved < 0 or kind[8] + moved + width > sizes[0]
        else:
            status = private_addresses(t, group, group_full, R, sizes[0], False, where, where)
            if status == -1:                              # no lane loads: nothing to check or count
                continue
            faults = status == -2
        if faults:
            tally[SHARED_BYTES], tally[SHARED_WAVEFRONTS], tally[SHARED_IDEAL_WAVEFRONTS] = bytes0, wavefronts0, ideal0
            return False
        if k < known:
            tally[SHARED_BYTES] += kind[3]
            tally[SHARED_WAVEFRONTS] += kind[4]
            tally[SHARED_IDEAL_WAVEFRONTS] += kind[5]
            continue
        before = (tally[SHARED_BYTES], tally[SHARED_WAVEFRONTS], tally[SHARED_IDEAL_WAVEFRONTS])
        count_shared_access(t, group, group_full, R, where, sizes, lanes, laid, tally)
        if known < most:
            _, lo, hi, _ = active_range(where, group, group_full)
            kind[0], kind[1], kind[2], kind[6], kind[7], kind[8] = t[tr.A], width, aligned, offset, lo, hi
            kind[3] = tally[SHARED_BYTES] - before[0]
            kind[4] = tally[SHARED_WAVEFRONTS] - before[1]
            kind[5] = tally[SHARED_IDEAL_WAVEFRONTS] - before[2]
            known += 1
    return True


# A kind of load `check_loads` has counted: address row, width, offset a multiple of the width?, its bytes, bank
# wavefronts and ideal wavefronts, then the first one's offset and its active lanes' lowest and highest address.
KIND_SLOTS = 9


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def taken_lanes(t, group, lanes_n, P):
    """How many lanes of the group a branch or exit (table row t) takes: its guard holds there."""
    g, gneg = t[tr.GUARD], t[tr.GUARD_NEG] != 0
    if g == PT and not gneg:
        return lanes_n
    taken = 0
    for l in range(group.size):                 # without a branch: LLVM vectorizes it
        taken += group[l] & (P[g, l] != gneg)
    return taken


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def issued(pc, warps_n, lanes_n, warp_counts, thread_counts, version, bumps):
    """Count instruction pc as issued by the group, and bump the versions of the registers it writes."""
    warp_counts[pc] += warps_n
    thread_counts[pc] += lanes_n
    for k in range(bumps.shape[1]):
        if bumps[pc, k] >= 0:
            version[bumps[pc, k]] += 1


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def count_warps(group, lane_warp):
    """The warps with a lane in the group (a warp's lanes are consecutive)."""
    n, last = 0, -1
    for l in range(group.size):
        if group[l] and lane_warp[l] != last:
            n += 1
            last = lane_warp[l]
    return n


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def park(group, lane_pc, waiting, pc, lanes_n):
    """Leave the group's lanes waiting at pc, with any already there."""
    for l in range(group.size):
        if group[l]:
            lane_pc[l] = pc
    waiting[pc] += lanes_n


@njit(cache=True, error_model="numpy", _nrt=False)
def execute_batch(table, pc, current, end, group, lane_pc, waiting, lane_warp, cur, budget, R, P, special, cbank,
                  clock, mem, sizes, lanes, caches, scratch, laid, guarded, missed, log_va, log_active, tally,
                  warp_counts, thread_counts, version, bumps, exited):
    """Run the batch's groups as the reference scheduler does, at most `budget` instructions. With
    `current`, the running group (`group`, its counts in `cur`) goes on at pc after a step Python
    ran. Returns (how it stopped, pc, instructions completed); on REFERENCE and STORED the running
    group is in `group` and `cur`. It keeps the GIL: released, the command processor's thread waited
    up to the interpreter's switch interval (5 ms) to take it back from a host thread issuing work,
    which cost a tiny kernel more than the overlap won."""
    L = group.size
    steps = 0
    parked = 0
    for p in range(waiting.size):
        parked += waiting[p]
    lanes_n, warps_n = cur[0], cur[1]
    while True:
        if current:                                          # where the reference checks after a step
            if pc >= end:
                return PAST_END, pc, steps
            if waiting[pc]:
                park(group, lane_pc, waiting, pc, lanes_n)
                parked += lanes_n
                current = False
        if not current:                                      # the group at the lowest pc runs next
            if parked == 0:
                return FINISHED, pc, steps
            pc = 0
            while waiting[pc] == 0:
                pc += 1
            lanes_n = waiting[pc]
            waiting[pc] = 0
            parked -= lanes_n
            warps_n, last = 0, -1                            # one pass: the group, and its warps
            for l in range(L):
                here = lane_pc[l] == pc
                group[l] = here
                if here:
                    lane_pc[l] = -1
                    if lane_warp[l] != last:
                        warps_n += 1
                        last = lane_warp[l]
            current = True
        cur[0], cur[1] = lanes_n, warps_n
        status, pc, ran = execute_path(table, pc, end, group, lanes_n == L, parked == 0, waiting, lanes_n, warps_n,
                                       budget - steps, R, P, special, cbank, clock, mem, sizes, lanes, caches, scratch,
                                       laid, guarded, missed, log_va, log_active, tally, warp_counts, thread_counts,
                                       version, bumps, exited)
        steps += ran
        if status == EXITED:
            current = False
        elif status == LOOPED:                               # the lanes that left the loop wait at its exit
            after = pc + table[pc, tr.LOOP_LEN]
            left = 0
            for l in range(L):
                if group[l] and not scratch[0, l]:
                    group[l] = False
                    lane_pc[l] = after
                    left += 1
            waiting[after] += left
            parked += left
            lanes_n -= left
            warps_n = count_warps(group, lane_warp)
        elif status == PARK or status == MERGE:
            park(group, lane_pc, waiting, pc, lanes_n)
            parked += lanes_n
            current = False
        elif status != REFERENCE:
            return status, pc, steps
        else:                                                # a split branch or exit, or the reference's work
            t = table[pc]
            kind = t[tr.KIND]
            if steps >= budget or not (kind == BRA or kind == EXIT):
                return REFERENCE, pc, steps
            taken = taken_lanes(t, group, lanes_n, P)
            target = t[tr.BVAL]
            if not 0 < taken < lanes_n or (kind == BRA and not 0 <= target < end):
                return REFERENCE, pc, steps                  # its binder raises the fault
            issued(pc, warps_n, lanes_n, warp_counts, thread_counts, version, bumps)
            steps += 1
            g, gneg = t[tr.GUARD], t[tr.GUARD_NEG] != 0
            warps_n, last = 0, -1                            # one pass: the lanes that go, the warps that stay
            for l in range(L):
                if group[l]:
                    if P[g, l] != gneg:
                        group[l] = False
                        if kind == BRA:
                            lane_pc[l] = target
                        else:
                            exited[l] = True
                    elif lane_warp[l] != last:
                        warps_n += 1
                        last = lane_warp[l]
            if kind == BRA:
                waiting[target] += taken
                parked += taken
            lanes_n -= taken
            pc += 1                                          # the rest runs on: the end and merge checks above
            if kind == BRA and target < pc < end:            # unless the branch went back: the lowest pc first
                park(group, lane_pc, waiting, pc, lanes_n)
                parked += lanes_n
                current = False
        cur[0], cur[1] = lanes_n, warps_n


_ready = False
_ready_lock = threading.Lock()


def ready_engine() -> None:
    """Have the engine's machine code in this process: loaded from numba's disk cache, or compiled (about a minute
    the first time on a machine, or after its source changed), once per process. The command processor calls
    it before a kernel's time limit starts: compiling is not the kernel's time."""
    global _ready
    with _ready_lock:
        if not _ready:
            compile_engine()
            _ready = True


def compile_engine() -> None:
    """Compile the engine now, by running one instruction (`make` does this once: numba keeps the code)."""
    from lapis.hardware.caches import DataCaches
    from lapis.hardware.profiles import get_profile
    from lapis.isa import assemble
    table = tr.translate(assemble("IADD R1, R0, 0x1 ;\nEXIT ;"), 4).table
    no, lanes = np.zeros(1, np.int64), np.zeros(32, bool)
    words, octets = np.zeros(8, np.uint32), np.zeros(32, np.uint8)
    waiting = np.zeros(3, np.int64)
    waiting[0] = 32
    execute_batch(table, 0, False, 2, lanes, np.zeros(32, np.int64), waiting, np.zeros(32, np.int64),
                  np.zeros(2, np.int64), 10, np.zeros((6, 32), np.uint32), np.ones((8, 32), bool),
                  np.zeros((10, 32), np.uint32), np.zeros(1, np.uint32), 0,
                  (words, octets, words, octets, words, octets, words, octets, np.zeros(4, np.uint64)),
                  (0, 0, -1, 32, 32, 1, 1, False, 1, 0), (no, no, no, no, no),
                  DataCaches(get_profile("teaching")).native,
                  np.zeros((4, MMA_WORK), np.int64), np.zeros(32, np.int64), np.zeros(32, bool), np.zeros(32, bool),
                  np.zeros((1, 32), np.int64), np.zeros((1, 32), bool), np.zeros(TALLY_SLOTS, np.int64),
                  np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(6, np.int64), np.full((2, 4), -1, np.int64),
                  np.zeros(32, bool))
