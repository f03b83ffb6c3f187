"""Layer 0: atomic read-modify-write on a memory of words, for every active lane at once.

Real GPUs perform the atomics of one warp instruction one at a time at the L2 (or in the
shared-memory unit) in some order. lapis fixes the order: lanes that hit one address apply
their operations in lane order, so results are deterministic and each lane gets back the
value memory held just before its own operation. No loop runs over lanes: lanes are sorted
by address, and
  - integer ADD and EXCH are segmented prefix scans (one cumulative sum / one shift);
  - 32-bit integer MIN and MAX are segmented running maxima (segment id in the high bits);
  - float ADD adds each address's lanes in lane order in float64 (float32 values) or the host's
    long double (float64 values), from the value memory held, and rounds each value a lane sees,
    and the total, once to the array's format (a simplification: hardware rounds after every
    addition); a round per lane of the crowded addresses' first ROUNDS, then a running sum;
  - CAS, INC, DEC, AND, OR, XOR, float MIN/MAX and 64-bit MIN/MAX run in rounds: round r applies the r-th lane of
    every address, so the number of numpy steps is the largest number of lanes sharing an
    address, not the number of lanes.
"""

import numpy as np

from lapis.hardware.numerics import float_max, float_min, order_key

U32, I32, F32, U64, I64, F64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64
FLOATS = {"F32": F32, "F64": F64}
# What float ADD sums an address's lanes in before rounding each once: wider than the format.
SUMS = {"F32": F64, "F64": np.longdouble}


BITWISE = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}


def combine(op: str, t: str, old: np.ndarray, value: np.ndarray, new: np.ndarray | None) -> np.ndarray:
    """What memory holds after one lane's atomic: op(old, value), as raw bits of old's dtype."""
    if op == "EXCH":
        return value
    if op == "CAS":
        return np.where(old == value, new, old)
    if t in FLOATS:
        f = FLOATS[t]
        a, b = old.view(f), value.view(f)
        fn = {"ADD": np.add, "MIN": float_min, "MAX": float_max}[op]
        return fn(a, b).astype(f).view(old.dtype)
    if op == "ADD":
        return old + value
    if op in BITWISE:
        return BITWISE[op](old, value)
    if op in ("INC", "DEC"):                         # compared as the type says (S32: signed)
        view = {"U32": U32, "S32": I32, "U64": U64}[t]
        a, b = old.view(view), value.view(view)
        if op == "INC":                              # atom.inc: wraps to 0 past the limit
            return np.where(a >= b, old.dtype.type(0), old + old.dtype.type(1))
        return np.where((a == 0) | (a > b), value, old - old.dtype.type(1))     # dec: to the limit at 0 or past
    view = {"U32": U32, "S32": I32, "U64": U64}[t]
    fn = np.minimum if op == "MIN" else np.maximum
    return fn(old.view(view), value.view(view)).view(old.dtype)


def apply(memory: np.ndarray, index: np.ndarray, value: np.ndarray, op: str, t: str,
          new: np.ndarray | None = None) -> np.ndarray:
    """Apply one instruction's atomics; `index` are word indices into `memory` in lane order.

    Returns the old value each lane observed. `memory` is a uint32 array (uint64 for U64).
    """
    n = index.size
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    first = np.empty(n, bool)
    first[:1] = True
    np.not_equal(sorted_index[1:], sorted_index[:-1], out=first[1:])
    if first.all():                                  # no two lanes share an address
        old = memory[index]
        memory[index] = combine(op, t, old, value, new)
        return old
    seg = np.cumsum(first) - 1                       # address number of each sorted lane
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], n] - 1
    addresses = sorted_index[starts]
    before = memory[addresses]
    v = value[order]
    if op == "EXCH" or op == "ADD" and t not in FLOATS:
        if op == "ADD":
            total = np.cumsum(v.astype(U64))
            exclusive = total - v - (total[starts] - v[starts])[seg]
            old_sorted = (before[seg].astype(U64) + exclusive).astype(memory.dtype)
            memory[addresses] = old_sorted[ends] + v[ends]
        else:
            old_sorted = np.empty_like(v)
            old_sorted[1:] = v[:-1]
            old_sorted[starts] = before
            memory[addresses] = v[ends]
    elif op == "ADD":                                # float32 or float64
        f = FLOATS[t]
        old_wide, running = _float_sums(v.view(f).astype(SUMS[t]), before.view(f).astype(SUMS[t]), starts, ends)
        old_sorted = old_wide.astype(f).view(memory.dtype)
        memory[addresses] = running.astype(f).view(memory.dtype)
    elif op in ("MIN", "MAX") and t in ("U32", "S32"):
        sign = 1 if op == "MAX" else -1
        span = np.int64(1) << np.int64(34)           # keys fit in 33 bits; each address gets its own range
        keys = sign * order_key(v, t) + (np.int64(1) << np.int64(32))
        running = np.maximum.accumulate(seg * span + keys) - seg * span
        seed = sign * order_key(before, t) + (np.int64(1) << np.int64(32))
        previous = np.empty_like(running)
        previous[1:] = running[:-1]
        previous[starts] = seed
        best = np.maximum(previous, seed[seg])
        old_sorted = order_value(sign * (best - (np.int64(1) << np.int64(32))), t)
        memory[addresses] = order_value(sign * (np.maximum(running[ends], seed) - (np.int64(1) << np.int64(32))), t)
    else:
        return _in_rounds(memory, index, value, op, t, new, order, starts, seg)
    old = np.empty_like(old_sorted)
    old[order] = old_sorted
    return old


# Float ADD takes the first ROUNDS lanes of every address a round each (one numpy step over all addresses), then
# the rest of a crowded address in one running sum (np.cumsum adds in order).
ROUNDS = 16


def _float_sums(x: np.ndarray, before: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple:
    """Each address's lanes (x sorted by address, then lane; address a's from starts[a] to ends[a]) added in lane
    order to the value memory held (`before`), in the wider format: the running value each lane saw, and each
    address's total. (One running sum over every address, less the sums of the addresses before, lost an address's
    small values beside a large one elsewhere, and turned another address's sums NaN after an infinity.)"""
    lengths = ends - starts + 1
    running = before.copy()
    seen = np.empty_like(x)
    for r in range(min(int(lengths.max()), ROUNDS)):
        at = np.flatnonzero(lengths > r)
        lane = starts[at] + r
        seen[lane] = running[at]
        running[at] += x[lane]
    for a in np.flatnonzero(lengths > ROUNDS):
        rest = slice(starts[a] + ROUNDS, ends[a] + 1)
        sums = np.cumsum(np.concatenate([running[a:a + 1], x[rest]]))
        seen[rest] = sums[:-1]
        running[a] = sums[-1]
    return seen, running


def order_value(key: np.ndarray, t: str) -> np.ndarray:
    """The inverse of numerics.order_key: uint32 bits of the integers the keys stand for."""
    return key.astype(I32).view(U32) if t == "S32" else key.astype(U32)


def _in_rounds(memory, index, value, op, t, new, order, starts, seg) -> np.ndarray:
    rank = np.arange(index.size) - starts[seg]       # position of each sorted lane within its address
    by_rank = order[np.argsort(rank, kind="stable")]
    bounds = np.r_[0, np.cumsum(np.bincount(rank))]
    old = np.empty_like(value)
    for r in range(len(bounds) - 1):
        lanes = by_rank[bounds[r]:bounds[r + 1]]     # at most one lane per address
        i = index[lanes]
        current = memory[i]
        old[lanes] = current
        memory[i] = combine(op, t, current, value[lanes], None if new is None else new[lanes])
    return old
