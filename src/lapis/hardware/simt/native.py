"""The native engine: translated instructions executed as LLVM machine code (numba).

`instruction` runs one instruction of a program's table (`translate.py`) for a group of lanes
of a batch of resident blocks, on the same register, predicate, shared and local arrays the
reference executor uses, physical memory and the L2's arrays: every active lane in lane order,
which is the order the reference executes in, so every value, store and fault comes out the
same. The native scheduler (`native_scheduler.py`) strings instructions together as the
reference scheduler does. What each lane computes is in `native_values.py`, what a memory
instruction counts in `native_counters.py`.

Each instruction is one loop over every lane into a scratch row, then one copy of the active
lanes into the destination: LLVM vectorizes both (it would not vectorize a loop that chose the
instruction per lane, nor one whose destination row may also be a source, as in
FFMA R5, R5, ...). Lanes outside the group compute values that are thrown away. A 32-bit result
that every lane writes and no source reads skips the scratch row (`writes_in_place`), and so does
an FFMA that adds into its destination (`accumulates`, the inner loop of every GEMM).

Global accesses walk the page table in VRAM exactly as the MMU does (`mmu.py`); the engine
checks every lane of a memory instruction before touching memory, and on any fault
(misaligned, unmapped, read-only, outside shared or local memory, both apertures at once) it
stops *before* that instruction and hands it back, so the reference executor can run it and
raise the very fault it would have raised. While a checker keeps the writes (`compare.py`),
the addresses of memory instructions are logged for it.

numba compiles the engine once (`make` does it, `native_scheduler.compile_engine`; about a minute)
and caches the machine code on disk beside this file (`__pycache__`), as it does for any
`cache=True` function.
"""

import hashlib
import sys
from pathlib import Path

import numpy as np
from numba import njit

import lapis.hardware.simt.native_loops as loops
import lapis.hardware.simt.translate as tr
from lapis.hardware.mmu import VPN_LIMIT
from lapis.hardware.simt.native_counters import LOCAL_BYTES, count_global, count_shared
from lapis.hardware.simt.native_mma import matrix_multiply
from lapis.hardware.simt.native_values import DONE, FAULT, MASK32, as_f32, as_u32, pair, put_pair
from lapis.hardware.simt.translate import F32_OPS, OP, PAIR_OPS, PREDICATE_OPS, U32_OPS

ADDRESS_MASK = ((1 << 52) - 1) & ~4095
PT = 7
CLOCKLO = 7

# Operation numbers, bound as globals so numba folds them into constants.
(ATOMG, BAR, BRA, DADD, DFMA, DMNMX, DMUL, DSETP, EXIT, F2F, F2F64, F2I, F2I64, FADD, FFMA, FMNMX, FMUL, FRND, FRND64,
 FSETP, HMMA, I2F, I2F64, I2I, I2I64, IABS, IABS64, IADD, IADD64, IMAD, IMAD64, IMADWIDE, IMNMX, IMNMX64, IMUL,
 IMUL64, ISETP, ISETP64, LDG, LDL, LDS, LOP, LOP64, NOP, PLOP, S2R, SEL, SHFL, SHL, SHL64, SHR, SHR64, STG, STS) = (
    OP[name] for name in ("ATOMG BAR BRA DADD DFMA DMNMX DMUL DSETP EXIT F2F F2F64 F2I F2I64 FADD FFMA FMNMX FMUL "
                          "FRND FRND64 FSETP HMMA I2F I2F64 I2I I2I64 IABS IABS64 IADD IADD64 IMAD IMAD64 IMADWIDE "
                          "IMNMX IMNMX64 IMUL IMUL64 ISETP ISETP64 LDG LDL LDS LOP LOP64 NOP PLOP S2R SEL SHFL "
                          "SHL SHL64 SHR SHR64 STG STS").split())
LAST_U32, LAST_F32, LAST_PAIR, LAST_PREDICATE = (OP[ops[-1]] for ops in (U32_OPS, F32_OPS, PAIR_OPS, PREDICATE_OPS))


def _drop_stale_machine_code() -> None:
    """numba keys its disk cache on a function's own file, but the engine inlines `native_values.py`
    and folds constants of `translate.py` and of `caches.py` (the data caches' geometry): when any of
    the engine's files changes, drop all of its cached code."""
    here = Path(__file__)
    sources = b"".join(here.with_name(name).read_bytes()
                       for name in ("native.py", "native_scheduler.py", "native_loops.py", "native_values.py",
                                    "native_counters.py", "native_mma.py", "translate.py"))
    sources += (here.parent.parent / "caches.py").read_bytes()
    digest = hashlib.sha256(sources).hexdigest()
    cache = here.parent / "__pycache__"
    stamp = cache / "native.sources"
    try:
        if stamp.exists() and stamp.read_text() == digest and any(cache.glob("native_scheduler.execute_batch-*.nbi")):
            return
        for stale in [*cache.glob("native.*.nb[ic]"), *cache.glob("native_*.nb[ic]")]:
            stale.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:                      # a read-only install: numba then keeps its code in a user cache
        return
    print("lapis: the simulated GPU's native engine compiles at its first kernel (once, about a minute; "
          "`make` does it ahead)", file=sys.stderr)


_drop_stale_machine_code()


def _engine(fn):
    return njit(cache=True, error_model="numpy", _nrt=False)(fn)


# -- one instruction over every lane, by what it writes ------------------------------------------------
@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def store(row, values, active, full):
    """row = values, in the active lanes (all of them when `full`)."""
    if full:
        for l in range(row.size):
            row[l] = values[l]
    else:
        for l in range(row.size):
            if active[l]:
                row[l] = values[l]


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def store_pair(R, d, d2, values, active, full):
    """The register pair (R[d], R[d2]) = values, in the active lanes."""
    L = values.size
    if full:
        for l in range(L):
            put_pair(R, d, d2, l, values[l])
    else:
        for l in range(L):
            if active[l]:
                put_pair(R, d, d2, l, values[l])


@_engine
def run_u32(kind, R, F, P, d, active, full, o, bf, out):
    """R[d] = instruction `kind`'s value in each active lane (`out` may be R[d] itself: see `writes_in_place`)."""
    if kind == IADD:
        loops.iadd(R, F, P, o, bf, out)
    elif kind == IMAD:
        loops.imad(R, F, P, o, bf, out)
    elif kind == SHL:
        loops.shl(R, F, P, o, bf, out)
    elif kind == SHR:
        loops.shr(R, F, P, o, bf, out)
    elif kind == LOP:
        loops.lop(R, F, P, o, bf, out)
    elif kind == IMUL:
        loops.imul(R, F, P, o, bf, out)
    elif kind == SEL:
        loops.sel(R, F, P, o, bf, out)
    elif kind == IMNMX:
        loops.imnmx(R, F, P, o, bf, out)
    elif kind == IABS:
        loops.iabs(R, F, P, o, bf, out)
    elif kind == I2I:
        loops.i2i(R, F, P, o, bf, out)
    elif kind == F2I:
        loops.f2i(R, F, P, o, bf, out)
    elif kind == F2F:
        loops.f2f(R, F, P, o, bf, out)
    else:                                               # MOV, LDC
        loops.mov(R, F, P, o, bf, out)
    if out.ctypes.data != R[d].ctypes.data:
        store(R[d, :out.size], out, active, full)


@_engine
def run_f32(kind, R, F, P, d, active, full, o, bf, out):
    """F[d] = instruction `kind`'s value in each active lane (`out` may be F[d] itself)."""
    if kind == FFMA:
        loops.ffma(R, F, P, o, bf, out)
    elif kind == FADD:
        loops.fadd(R, F, P, o, bf, out)
    elif kind == FMUL:
        loops.fmul(R, F, P, o, bf, out)
    elif kind == FMNMX:
        loops.fmnmx(R, F, P, o, bf, out)
    elif kind == I2F:
        loops.i2f(R, F, P, o, bf, out)
    elif kind == FRND:
        loops.frnd(R, F, P, o, bf, out)
    else:                                               # MUFU
        loops.mufu(R, F, P, o, bf, out)
    if out.ctypes.data != F[d].ctypes.data:
        store(F[d, :out.size], out, active, full)


@_engine
def run_pair(kind, R, F, P, d, d2, active, full, o, bf, out):
    """The register pair (R[d], R[d2]) = instruction `kind`'s 64-bit value in each active lane."""
    if kind == IMADWIDE:
        loops.imadwide(R, F, P, o, bf, out)
    elif kind == IADD64:
        loops.iadd64(R, F, P, o, bf, out)
    elif kind == SHL64:
        loops.shl64(R, F, P, o, bf, out)
    elif kind == SHR64:
        loops.shr64(R, F, P, o, bf, out)
    elif kind == IMAD64:
        loops.imad64(R, F, P, o, bf, out)
    elif kind == IMUL64:
        loops.imul64(R, F, P, o, bf, out)
    elif kind == LOP64:
        loops.lop64(R, F, P, o, bf, out)
    elif kind == IMNMX64:
        loops.imnmx64(R, F, P, o, bf, out)
    elif kind == IABS64:
        loops.iabs64(R, F, P, o, bf, out)
    elif kind == I2I64:
        loops.i2i64(R, F, P, o, bf, out)
    elif kind == DFMA:
        loops.dfma(R, F, P, o, bf, out)
    elif kind == DADD:
        loops.dadd(R, F, P, o, bf, out)
    elif kind == DMUL:
        loops.dmul(R, F, P, o, bf, out)
    elif kind == DMNMX:
        loops.dmnmx(R, F, P, o, bf, out)
    elif kind == I2F64:
        loops.i2f64(R, F, P, o, bf, out)
    elif kind == F2I64:
        loops.f2i64(R, F, P, o, bf, out)
    elif kind == F2F64:
        loops.f2f64(R, F, P, o, bf, out)
    elif kind == FRND64:
        loops.frnd64(R, F, P, o, bf, out)
    else:                                               # LDC64
        loops.ldc64(R, F, P, o, bf, out)
    store_pair(R, d, d2, out, active, full)


@_engine
def run_predicate(kind, R, F, P, d, active, full, o, bf, out):
    """P[d] = instruction `kind`'s value in each active lane (writes to PT are dropped; `out` may be P[d])."""
    if kind == ISETP:
        loops.isetp(R, F, P, o, bf, out)
    elif kind == ISETP64:
        loops.isetp64(R, F, P, o, bf, out)
    elif kind == FSETP:
        loops.fsetp(R, F, P, o, bf, out)
    elif kind == DSETP:
        loops.dsetp(R, F, P, o, bf, out)
    else:                                               # PLOP
        loops.plop(R, F, P, o, bf, out)
    if d != PT and out.ctypes.data != P[d].ctypes.data:
        store(P[d, :out.size], out, active, full)


@_engine
def shuffle(t, active, R, b32, lane_in_warp, warp_base, warp_len, warp_size, out):
    """SHFL: every lane's source value read before any is written; a source outside the warp gives
    the lane its own value."""
    d, a, breg, mode = t[tr.D], t[tr.A], t[tr.B], t[tr.M1]
    L = active.size
    source = R[a]
    if t[tr.BMODE] == tr.B_REG:
        for l in range(L):
            src = shuffle_source(mode, lane_in_warp[l], np.int64(R[breg, l]), warp_size)
            out[l] = source[warp_base[l] + src if 0 <= src < warp_len[l] else l]
    else:
        x = np.int64(b32)
        for m in range(4):                  # a loop per mode, in which the mode is a constant
            if m == mode:
                for l in range(L):
                    src = shuffle_source(m, lane_in_warp[l], x, warp_size)
                    out[l] = source[warp_base[l] + src if 0 <= src < warp_len[l] else l]
    store(R[d, :L], out, active, False)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def shuffle_source(mode, lane, x, warp_size):
    """The lane of its warp that `lane` reads in SHFL's mode IDX, UP, DOWN or BFLY (0 to 3) with operand x."""
    if mode == 0:
        return x & (warp_size - 1)
    if mode == 1:
        return lane - x
    if mode == 2:
        return lane + x
    return lane ^ x


# -- memory ------------------------------------------------------------------------------------------
@_engine
def walk(vram_u64, root, vpn):
    """The page table's leaf entry for a virtual page (0 when unmapped), as `Mmu._walk` reads it."""
    return leaf_entry(vram_u64, leaf_table(vram_u64, root, vpn), vpn)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def leaf_entry(vram_u64, table, vpn):
    """A virtual page's entry in the last-level table at `table` (0 when there is no table or it is unmapped)."""
    slot = (table + np.int64(vpn & np.uint64(511)) * 8) >> 3
    if table < 0 or slot >= vram_u64.size:
        return np.int64(0)
    entry = np.int64(vram_u64[slot])
    return entry if entry & 1 else np.int64(0)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def leaf_table(vram_u64, root, vpn):
    """The address of the last-level page table that holds a virtual page's entry (-1 when a level above it
    is unmapped): the table 512 consecutive pages share. A page at or past VPN_LIMIT is in no table."""
    if root < 0 or vpn >= np.uint64(VPN_LIMIT):
        return np.int64(-1)
    table = np.int64(root)
    for level in range(3, 0, -1):
        index = np.int64((vpn >> np.uint64(9 * level)) & np.uint64(511))
        slot = (table + index * 8) >> 3
        if slot < 0 or slot >= vram_u64.size:
            return np.int64(-1)
        entry = np.int64(vram_u64[slot])
        if not entry & 1:
            return np.int64(-1)
        table = entry & ADDRESS_MASK
    return table


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def maps_in_one_run(vram_u64, root, vpn, pages, write, first):
    """Whether pages vpn .. vpn + pages - 1 all allow the access and map, in order, to the physical pages
    from leaf entry `first`'s on, in its aperture: each last-level table is found once, then read in order."""
    table = np.int64(-1)
    for page in range(pages):
        v = vpn + np.uint64(page)
        if table < 0 or v & np.uint64(511) == 0:
            table = leaf_table(vram_u64, root, v)
            if table < 0:
                return False
        entry = leaf_entry(vram_u64, table, v)
        if (not entry & 1 or (write and not entry & 4) or (entry & 2) != (first & 2)
                or (entry & ADDRESS_MASK) != (first & ADDRESS_MASK) + page * 4096):
            return False
    return True


# The widest span of pages the one-run path of `global_addresses` reads the page table for: RUN_PAGES, or a
# page for every LANES_PER_RUN_PAGE active lanes (reading an entry costs less than walking for a lane).
RUN_PAGES, LANES_PER_RUN_PAGE = 64, 8


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def active_range(where, active, full):
    """(active lanes, lowest and highest of their `where`, the or of their `where`), in loops LLVM
    vectorizes: what a memory instruction checks once for all its lanes."""
    lo, hi, bits, n = np.int64(1 << 62), np.int64(-(1 << 62)), np.int64(0), 0
    if full:
        for l in range(where.size):
            x = where[l]
            lo, hi, bits = min(lo, x), max(hi, x), bits | x
        return where.size, lo, hi, bits
    for l in range(where.size):
        x, on = where[l], active[l]
        lo, hi = min(lo, x if on else lo), max(hi, x if on else hi)
        bits |= x if on else 0
        n += on
    return n, lo, hi, bits


@_engine
def global_addresses(t, active, full, R, write, vram_u64, root, logging, va_log, where):
    """Physical address of each active lane's global access into `where`; returns the aperture
    (0 VRAM, 1 host memory), -1 when no lane is active, or -2 when a lane would fault.

    Lanes mostly fall in one buffer: when every active lane's address is aligned and the pages
    they span map, in order, to contiguous physical pages that allow the access, one addition
    translates them all (in loops LLVM vectorizes), as the reference's TLB runs do. Otherwise
    each lane is walked and checked in lane order (`lane_addresses`)."""
    nbytes, off = t[tr.WIDTH], t[tr.SIMM]
    a, a2 = t[tr.A], t[tr.A2]
    L = active.size
    for l in range(L):
        where[l] = pair(R, a, a2, l) + off
    n, lo, hi, bits = active_range(where, active, full)
    if n == 0:
        return -1
    span = (hi >> 12) - (lo >> 12)
    if lo < 0 or bits & (nbytes - 1) or span >= max(RUN_PAGES, n // LANES_PER_RUN_PAGE):
        return lane_addresses(t, active, R, write, vram_u64, root, logging, va_log, where)
    first = walk(vram_u64, root, np.uint64(lo) >> np.uint64(12))
    if not maps_in_one_run(vram_u64, root, np.uint64(lo) >> np.uint64(12), span + 1, write, first):
        return lane_addresses(t, active, R, write, vram_u64, root, logging, va_log, where)
    if logging:
        for l in range(L):
            if active[l]:
                va_log[l] = where[l]
    base = (first & ADDRESS_MASK) - ((lo >> 12) << 12)
    for l in range(L):
        where[l] += base
    return 1 if first & 2 else 0


@_engine
def lane_addresses(t, active, R, write, vram_u64, root, logging, va_log, where):
    """`global_addresses` lane by lane: each active lane's address checked and walked in lane order."""
    nbytes, off = t[tr.WIDTH], t[tr.SIMM]
    a, a2 = t[tr.A], t[tr.A2]
    system = -1
    last_vpn, entry = np.uint64(1) << np.uint64(63), np.int64(0)     # lanes mostly share a page
    for l in range(active.size):
        if not active[l]:
            continue
        va = pair(R, a, a2, l) + off
        if logging:
            va_log[l] = va
        if va & (nbytes - 1):
            return -2
        vpn = np.uint64(va) >> np.uint64(12)
        if vpn != last_vpn:
            entry = walk(vram_u64, root, vpn)
            last_vpn = vpn
        if not entry & 1 or (write and not entry & 4):
            return -2
        here = 1 if entry & 2 else 0
        if system >= 0 and here != system:
            return -2
        system = here
        where[l] = (entry & ADDRESS_MASK) + (va & 4095)
    return system


@_engine
def private_addresses(t, active, full, R, limit, logging, va_log, where):
    """Byte offset of each active lane's shared or local access into `where`; returns -1 when no
    lane is active, -2 when a lane would fault (outside `limit` bytes or misaligned), else 0. Every
    lane's offset is computed, and the active lanes' range and alignment checked once after, in
    loops LLVM vectorizes (a fault is found again, lane by lane, by the instruction's binder)."""
    nbytes, off, a = t[tr.WIDTH], t[tr.SIMM], t[tr.A]
    L = active.size
    for l in range(L):
        where[l] = np.int64(R[a, l]) + off
    n, lo, hi, bits = active_range(where, active, full)
    if logging:
        for l in range(L):
            if active[l]:
                va_log[l] = where[l] - off
    if n == 0:
        return -1
    if lo < 0 or hi + nbytes > limit or bits & (nbytes - 1):
        return -2
    return 0


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def copy_words(load, row, words):
    """Lane l's register word row[l] to or from words[l]: consecutive words, one vectorized copy."""
    if load:
        for l in range(row.size):
            row[l] = words[l]
    else:
        for l in range(row.size):
            words[l] = row[l]


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def move_words(load, row, words32, where):
    """Every lane's word between its register `row` and `words32` at byte address where[l], in lane order (a
    later lane's store wins, as in `transfer`): one copy when the lanes' words are consecutive, else one pass,
    with no word-index array between."""
    L = row.size
    first = where[0]
    off = 0
    for l in range(L):                                   # an or of differences: LLVM vectorizes it
        off |= where[l] ^ (first + 4 * l)
    if off == 0:
        copy_words(load, row, words32[first >> 2:(first >> 2) + L])
        return
    if load:
        for l in range(L):
            row[l] = words32[where[l] >> 2]
    else:
        for l in range(L):
            words32[where[l] >> 2] = row[l]


@_engine
def transfer(load, full, t, active, R, words32, words8, word_of, stride, where):
    """Move the data of every active lane between its registers and memory; lane l's first word
    is word_of[l] (or, for 1- and 2-byte accesses, its byte is 4 * word_of[l] + where[l] % 4)."""
    nbytes, signed = t[tr.WIDTH], t[tr.M1] != 0
    rows = (t[tr.D], t[tr.D2], t[tr.C], t[tr.C2])
    L = active.size
    if nbytes == 4 and full:                         # one word per lane: consecutive words are one copy
        first = word_of[0]
        off = 0
        for l in range(L):
            off |= word_of[l] ^ (first + l)
        if off == 0:
            copy_words(load, R[rows[0], :L], words32[first:first + L])
            return
    if nbytes == 16 and load and full and stride == 1:  # a lane's four words in one pass: one cache line
        r0, r1, r2, r3 = R[rows[0], :L], R[rows[1], :L], R[rows[2], :L], R[rows[3], :L]
        for l in range(L):
            w = word_of[l]
            r0[l], r1[l], r2[l], r3[l] = words32[w], words32[w + 1], words32[w + 2], words32[w + 3]
        return
    if nbytes == 8 and load and full and stride == 1:
        r0, r1 = R[rows[0], :L], R[rows[1], :L]
        for l in range(L):
            w = word_of[l]
            r0[l], r1[l] = words32[w], words32[w + 1]
        return
    if nbytes >= 4:
        for i in range(nbytes // 4):
            row = rows[i]
            if load and full:
                for l in range(L):
                    R[row, l] = words32[word_of[l] + i * stride]
            elif load:
                for l in range(L):
                    if active[l]:
                        R[row, l] = words32[word_of[l] + i * stride]
            else:
                for l in range(L):
                    if active[l]:
                        words32[word_of[l] + i * stride] = R[row, l]
        return
    for l in range(L):
        if not active[l]:
            continue
        at = word_of[l] * 4 + (where[l] & 3)
        if load:
            raw = np.int64(words8[at])
            if nbytes == 2:
                raw |= np.int64(words8[at + 1]) << 8
            if signed:
                shift = 64 - 8 * nbytes
                raw = ((raw << shift) >> shift) & MASK32
            R[rows[0], l] = raw
        else:
            v = np.int64(R[rows[0], l])
            words8[at] = v & 0xFF
            if nbytes == 2:
                words8[at + 1] = (v >> 8) & 0xFF


@_engine
def memory(kind, t, active, full, R, mem, sizes, lanes, caches, scratch, laid, missed, log_va, log_active, tally):
    """One load or store for the active lanes: every lane checked first, then the transfer, then
    what it counts. Returns DONE, or FAULT when a lane would fault (nothing moved, nothing counted)."""
    shared_u32, shared_u8, local_u32, local_u8, vram_u32, vram_u8, sys_u32, sys_u8, vram_u64 = mem
    shared_bytes, local_bytes, root, warp_size, _, _, _, logging, _, _ = sizes
    lane_in_warp, warp_base, warp_len, padded_lane, shared_base = lanes
    L = active.size
    where, word_of, keys = scratch[1, :L], scratch[2, :L], scratch[0, :L]
    load = kind == LDG or kind == LDS or kind == LDL
    nbytes = t[tr.WIDTH]
    k = t[tr.LOG] if logging else 0               # addresses are logged only for a checker (`compare.py`)
    if logging:
        for l in range(L):
            log_active[k, l] = active[l]
    if kind == ATOMG:
        system = global_addresses(t, active, full, R, True, vram_u64, root, logging, log_va[k], where)
        if system == -2:
            return FAULT
        if system < 0:
            return DONE
        atomic_add(t, active, R, sys_u32 if system == 1 else vram_u32, where, keys, word_of, laid)
        count_global(active, full, where, padded_lane, warp_size, 4, True, True, system == 1, caches, keys, word_of,
                     missed, tally)
        return DONE
    if kind == LDG or kind == STG:
        system = global_addresses(t, active, full, R, not load, vram_u64, root, logging, log_va[k], where)
        if system == -2:
            return FAULT
        if system < 0:
            return DONE
        if nbytes == 4 and full:                        # a word per lane: moved in one pass from the addresses
            move_words(load, R[t[tr.D], :L], sys_u32 if system == 1 else vram_u32, where)
        else:
            for l in range(L):
                word_of[l] = where[l] >> 2
            if system == 1:
                transfer(load, full, t, active, R, sys_u32, sys_u8, word_of, 1, where)
            else:
                transfer(load, full, t, active, R, vram_u32, vram_u8, word_of, 1, where)
        count_global(active, full, where, padded_lane, warp_size, nbytes, not load, False, system == 1, caches, keys,
                     word_of, missed, tally)
    elif kind == LDS or kind == STS:
        status = private_addresses(t, active, full, R, shared_bytes, logging, log_va[k], where)
        if status == -2:
            return FAULT
        if status < 0:
            return DONE
        if nbytes == 4 and full:                        # a word per lane: found and moved in one pass
            row = R[t[tr.D], :L]                       # the loaded or stored register (`transfer`'s rows[0])
            if load:
                for l in range(L):
                    row[l] = shared_u32[shared_base[l] + (where[l] >> 2)]
            else:
                for l in range(L):                      # in lane order: a later lane's store wins
                    shared_u32[shared_base[l] + (where[l] >> 2)] = row[l]
        else:
            for l in range(L):
                word_of[l] = shared_base[l] + (where[l] >> 2)
            transfer(load, full, t, active, R, shared_u32, shared_u8, word_of, 1, where)
        count_shared_access(t, active, full, R, where, sizes, lanes, laid, tally)
    else:
        status = private_addresses(t, active, full, R, local_bytes, logging, log_va[k], where)
        if status == -2:
            return FAULT
        if status < 0:
            return DONE
        n = 0
        for l in range(L):                                 # word w of lane l is word w * lanes + l
            word_of[l] = (where[l] >> 2) * L + l
            n += active[l]
        transfer(load, full, t, active, R, local_u32, local_u8, word_of, L, where)
        tally[LOCAL_BYTES] += n * nbytes
    return DONE


@_engine
def merge_sort(keys, spare, n):
    """Sort keys[:n] by bottom-up merges of runs that double, through spare[:n]: n log n moves in order, for the
    scattered lanes of an atomic (an insertion sort moved them n^2 / 4 times, a heapsort jumped about)."""
    src, dst = keys, spare
    in_spare = False
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and src[i] <= src[j]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
        src, dst = dst, src
        in_spare = not in_spare
        width *= 2
    if in_spare:
        for k in range(n):
            keys[k] = spare[k]


@_engine
def atomic_add(t, active, R, words, where, keys, lane_of, spare):
    """ATOMG.ADD of 32-bit words for the active lanes at physical byte addresses `where`, as the reference's
    `atomics.apply`: each address's lanes in lane order from the value memory held, integers wrapping at 32 bits,
    float32 values summed in float64 and each value a lane sees, and the total, rounded once. Lanes are sorted by
    (word, position among the active lanes; `spare` is the sort's working space); Rd gets the values seen."""
    d, c, floats = t[tr.D], t[tr.C], t[tr.M1] != 0
    n = 0
    for l in range(active.size):
        if active[l]:
            keys[n] = ((where[l] >> 2) << 20) | n           # under 2^20 lanes (a cooperative batch: 622,592)
            lane_of[n] = l
            n += 1
    merge_sort(keys, spare, n)
    i = 0
    while i < n:
        w = keys[i] >> 20
        whole = np.int64(words[w])
        wide = np.float64(as_f32(whole))
        while i < n and keys[i] >> 20 == w:
            l = lane_of[keys[i] & 0xFFFFF]
            value = np.int64(R[c, l])
            if floats:
                R[d, l] = as_u32(np.float32(wide))
                wide += np.float64(as_f32(value))
            else:
                R[d, l] = whole
                whole = (whole + value) & MASK32
            i += 1
        words[w] = as_u32(np.float32(wide)) if floats else whole


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def count_shared_access(t, active, full, R, where, sizes, lanes, laid, tally):
    """Count the active lanes' shared-memory access at block byte offsets `where` (bytes, bank wavefronts).
    The reference counts an unmasked access of whole aligned words through a register (not RZ) on the
    first block only (`memory_access._shared_fast`)."""
    nbytes = t[tr.WIDTH]
    fast = t[tr.A] != R.shape[0] - 2 and nbytes >= 4 and t[tr.SIMM] % nbytes == 0
    count_shared(active, full, where, lanes[3], sizes[4], sizes[5], sizes[3], sizes[6], nbytes, fast, laid, tally)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def writes_in_place(t, full):
    """Whether a 32-bit result can go straight into its destination row, without the scratch row: every
    lane writes it, and no source row is the destination (a loop that reads the row it writes does
    not vectorize, and lanes would read values already written)."""
    d = t[tr.D]
    return full and d != t[tr.A] and d != t[tr.B] and d != t[tr.C] and d != t[tr.A2] and d != t[tr.B2] and d != t[tr.C2]


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def accumulates(t, full):
    """Whether an FFMA adds into its destination (D is C) for every lane, and reads it nowhere else."""
    d = t[tr.D]
    return full and d == t[tr.C] and d != t[tr.A] and (d != t[tr.B] or t[tr.BMODE] != tr.B_REG)


@njit(inline="always", cache=True, error_model="numpy", _nrt=False)
def instruction(t, kind, group, group_full, R, P, special, cbank, clock, mem, sizes, lanes, caches, scratch, laid,
                guarded, missed, log_va, log_active, tally):
    """One translated instruction (not control) for the group's active lanes: DONE, or FAULT when it
    would fault (it did nothing)."""
    F = R.view(np.float32)
    L = group.size
    out_u32, out_f32 = scratch[0].view(np.uint32)[:L], scratch[0].view(np.float32)[:L]
    out_bool = scratch[0].view(np.bool_)[:L]
    out_pair = scratch[0, :L]
    lane_in_warp, warp_base, warp_len = lanes[0], lanes[1], lanes[2]
    warp_size = sizes[3]
    g, gneg = t[tr.GUARD], t[tr.GUARD_NEG] != 0
    full = group_full and g == PT and not gneg
    active = group                 # the lanes that execute: the group's, less those the guard stops
    if g != PT or gneg:
        for l in range(L):
            guarded[l] = group[l] and P[g, l] != gneg
        active = guarded
    # Operand B when it is not a register: 32 bits, and 64 bits for the pair forms.
    bmode, bval = t[tr.BMODE], t[tr.BVAL]
    b32, b64 = np.int64(0), np.int64(0)
    if bmode == tr.B_IMM:
        b32, b64 = bval & MASK32, bval
    elif bmode == tr.B_CONST:
        lo = np.int64(cbank[bval // 4]) if bval // 4 < cbank.size else np.int64(0)
        hi = np.int64(cbank[bval // 4 + 1]) if bval // 4 + 1 < cbank.size else np.int64(0)
        b32, b64 = lo, lo | (hi << 32)
    bf = as_f32(b32)
    flags = t[tr.FLAGS]
    o = (t[tr.A], t[tr.B], t[tr.C], b32, np.int64(bmode == tr.B_REG), np.int64((flags & tr.NEG_A) != 0),
         np.int64((flags & tr.NEG_B) != 0), np.int64((flags & tr.NEG_C) != 0),
         np.int64((flags & tr.ABS_A) != 0), np.int64((flags & tr.ABS_B) != 0), t[tr.M1], t[tr.M2], t[tr.M3],
         t[tr.PS], t[tr.PS_NEG], t[tr.A2], t[tr.B2], t[tr.C2], b64)
    if kind == PLOP:                               # Pq and its negation ride in C and NEGC
        o = (o[0], o[1], t[tr.PQ], o[3], o[4], o[5], o[6], t[tr.PQ_NEG], o[8], o[9], o[10], o[11], o[12],
             o[13], o[14], o[15], o[16], o[17], o[18])
    if kind <= LAST_U32:
        run_u32(kind, R, F, P, t[tr.D], active, full, o, bf, R[t[tr.D], :L] if writes_in_place(t, full) else out_u32)
    elif kind == FFMA and accumulates(t, full):
        loops.ffma_accumulate(R, F, P, o, bf, F[t[tr.D], :L])
    elif kind <= LAST_F32:
        run_f32(kind, R, F, P, t[tr.D], active, full, o, bf, F[t[tr.D], :L] if writes_in_place(t, full) else out_f32)
    elif kind <= LAST_PAIR:
        run_pair(kind, R, F, P, t[tr.D], t[tr.D2], active, full, o, bf, out_pair)
    elif kind <= LAST_PREDICATE:
        pd = t[tr.PD]
        in_place = full and pd != PT and pd != t[tr.PS] and (kind != PLOP or pd != t[tr.PQ])
        run_predicate(kind, R, F, P, pd, active, full, o, bf, P[pd, :L] if in_place else out_bool)
    elif kind == S2R:                              # a select, not a branch per lane: LLVM vectorizes it
        row = R[t[tr.D], :L]
        if bval == CLOCKLO:
            now = np.uint32(clock & MASK32)
            for l in range(L):
                row[l] = now if active[l] else row[l]
        else:
            source = special[bval, :L]
            for l in range(L):
                row[l] = source[l] if active[l] else row[l]
    elif kind == SHFL:
        shuffle(t, active, R, b32, lane_in_warp, warp_base, warp_len, warp_size, out_u32)
    elif kind == HMMA:
        if matrix_multiply(t, active, R, F, sizes[4], scratch[3].view(np.float64)) != DONE:
            return FAULT
    elif memory(kind, t, active, full, R, mem, sizes, lanes, caches, scratch, laid, missed, log_va, log_active,
                tally) != DONE:
        return FAULT
    return DONE
