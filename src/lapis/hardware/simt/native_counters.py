"""What the native engine counts for a memory instruction: the reference's counting, compiled.

Each function here computes, from the same inputs, exactly what the reference's numpy code
counts (`memory_access._global_access`, `_shared_fast`, `_shared_index`, `_local_index`, and the
cache and bank models of `caches.py`), including their order-dependent parts: the caches see the
sectors a warp instruction touches sorted by (warp, sector), a slot filled twice by one
access misses once, and an unmasked shared access counts the batch's first block and scales
it to all its blocks. `tests/test_translated.py` runs kernels both ways and compares every
counter.
"""

import numpy as np
from numba import njit

from lapis.hardware.caches import (
    FAR,
    FAR_SLOTS,
    FIRST_BLOCK,
    L1,
    L1_EPOCH,
    L1_SLOTS,
    L1_STRIDE,
    L2,
    SECTOR_BITS,
    SECTOR_MASK,
    SLICE_SLOTS,
    SLICES,
    UNITS,
    WARPS_PER_BLOCK,
)

# `caches` below: the tuple `DataCaches.native` gives, (L1, L2, far tags; their writers; the L2's dirty bits; geometry)

# Positions in the engine's tally (`NativeRunner.tally`), added to the kernel's Counters after a run.
(GLOBAL_BYTES, GLOBAL_SECTORS, L1_HITS, L2_MISSES, FAR_MISSES, DRAM_READ_BYTES, DRAM_WRITE_BYTES, PCIE_BYTES,
 SHARED_BYTES, SHARED_WAVEFRONTS, SHARED_IDEAL_WAVEFRONTS, LOCAL_BYTES, BARRIERS, ATOMIC_LANES) = range(14)
TALLY = ("global_bytes", "global_sectors", "l1_hits", "l2_misses", "far_misses", "dram_read_bytes",
         "dram_write_bytes", "pcie_bytes", "shared_bytes", "shared_wavefronts", "shared_ideal_wavefronts",
         "local_bytes", "barriers", "atomic_lanes")
BANKS = 32
# The tally array has, after the counts, the bank model's working space (the engine allocates nothing:
# it runs without numba's runtime).
PER_BANK, ENTRIES = len(TALLY), len(TALLY) + BANKS
TALLY_SLOTS = len(TALLY) + 2 * BANKS


def counter(fn):
    return njit(cache=True, error_model="numpy", _nrt=False)(fn)


@njit(inline="always", cache=True, _nrt=False)
def log2(power_of_two):
    """The exponent of a power of two (warp sizes and words per lane are)."""
    shift = 0
    while (1 << shift) < power_of_two:
        shift += 1
    return shift


@counter
def heapsort(a, n):
    """Sort a[:n] in place (numba's np.sort allocates its result)."""
    for start in range(n // 2 - 1, -1, -1):
        sift_down(a, start, n)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        sift_down(a, 0, end)


@counter
def sort_keys(keys, n):
    """Sort the (warp, sector) keys of keys[:n]. Lanes come warp by warp, so keys are out of order only
    within a warp (a gather, a transpose): insertion sort then moves each at most a warp's length. Any
    other order (lanes of one warp far apart) gets a heapsort."""
    for i in range(1, n):
        if (keys[i] >> SECTOR_BITS) < (keys[i - 1] >> SECTOR_BITS):
            heapsort(keys, n)
            return
    for i in range(1, n):
        key = keys[i]
        j = i - 1
        while j >= 0 and keys[j] > key:
            keys[j + 1] = keys[j]
            j -= 1
        keys[j + 1] = key


@njit(inline="always", cache=True, _nrt=False)
def sift_down(a, root, n):
    while True:
        child = 2 * root + 1
        if child >= n:
            return
        if child + 1 < n and a[child] < a[child + 1]:
            child += 1
        if a[root] >= a[child]:
            return
        a[root], a[child] = a[child], a[root]
        root = child


@counter
def run_sectors(pa, n, warp_size, nbytes, keys):
    """When each warp's lanes read consecutive addresses (lane l of n at pa[w0] + (l - w0) * nbytes, w0 its warp's
    first lane: a tile's rows), each warp's sectors are a range: write their (warp, sector) keys (as `lane_sectors`
    would, without a key per lane) and return how many; else -1."""
    off = 0
    for l in range(1, n):                              # an or of differences: LLVM vectorizes it
        off |= (pa[l] ^ (pa[l - 1] + nbytes)) if l & (warp_size - 1) else 0
    if off:
        return -1
    touched = 0
    warp_shift = log2(warp_size)
    for w0 in range(0, n, warp_size):
        warp = (w0 >> warp_shift) << SECTOR_BITS
        for sector in range(pa[w0] >> 5, (pa[min(w0 + warp_size, n) - 1] >> 5) + 1):
            keys[touched] = warp | sector
            touched += 1
    return touched


@counter
def lane_sectors(active, full, pa, padded_lane, warp_size, keys):
    """The distinct (warp, sector) keys of the active lanes, in order, into keys: returns (active lanes, keys)."""
    warp_shift = log2(warp_size)                       # a shift, not a division per lane
    if full:                                           # every lane: a loop LLVM vectorizes
        n = active.size
        for l in range(n):
            keys[l] = ((padded_lane[l] >> warp_shift) << SECTOR_BITS) | (pa[l] >> 5)
    else:
        n = 0
        for l in range(active.size):
            if active[l]:
                keys[n] = ((padded_lane[l] >> warp_shift) << SECTOR_BITS) | (pa[l] >> 5)
                n += 1
    unordered = False
    for i in range(1, n):
        unordered |= keys[i] < keys[i - 1]
    if unordered:
        sort_keys(keys, n)
    touched = 0                                       # distinct keys, compacted to the front, in order
    previous = -1
    for i in range(n):                                # without a branch: a repeat is overwritten by the next
        key = keys[i]
        keys[touched] = key
        touched += key != previous
        previous = key
    return n, touched


@counter
def count_global(active, full, pa, padded_lane, warp_size, nbytes, write, atomic, system, caches, keys, slot_of,
                 missed, tally):
    """A global load, store or (`atomic`) read-modify-write of the active lanes at physical addresses `pa`: bytes,
    the distinct 32-byte sectors of each warp, and what each cache level held (`caches.DataCaches.access`), or PCIe
    bytes. `caches` is (tags of L1, L2, far; their writers; the L2's dirty bits; the geometry)."""
    n = active.size if full else 0
    touched = -1
    if full and padded_lane[n - 1] == n - 1:           # every lane, warps packed: perhaps runs of addresses
        touched = run_sectors(pa, n, warp_size, nbytes, keys)
    if touched < 0:
        n, touched = lane_sectors(active, full, pa, padded_lane, warp_size, keys)
    tally[GLOBAL_BYTES] += n * nbytes
    tally[GLOBAL_SECTORS] += touched
    if atomic:
        tally[ATOMIC_LANES] += n
    if system:
        tally[PCIE_BYTES] += n * nbytes
        return
    g, dirty = caches[7], caches[6]
    going = pa                                         # the requests still looking (pa is not needed again)
    for i in range(touched):
        going[i] = i
    count = touched
    if not write:
        count = lookup(caches[0], caches[3], dirty, keys, going, count, g, L1, g[L1_STRIDE], g[L1_SLOTS], g[UNITS],
                       g[L1_EPOCH] << SECTOR_BITS, slot_of, missed)
        tally[L1_HITS] += touched - count
    reaching = count
    count = lookup(caches[1], caches[4], dirty, keys, going, count, g, L2, g[SLICE_SLOTS], g[SLICE_SLOTS],
                   g[SLICES], 0, slot_of, missed)
    dirtied = 0
    if write:                                          # every request reached the L2 (slot_of holds their slots)
        for j in range(reaching):
            slot = slot_of[j]
            if not dirty[slot]:
                dirty[slot] = True
                dirtied += 1
    tally[L2_MISSES] += count
    if g[FAR_SLOTS]:
        count = lookup(caches[2], caches[5], dirty, keys, going, count, g, FAR, 0, g[FAR_SLOTS], 1, 0, slot_of,
                       missed)
    tally[FAR_MISSES] += count
    if not write or atomic:                            # a store overwrites whole words: nothing to fetch
        tally[DRAM_READ_BYTES] += count * 32
    tally[DRAM_WRITE_BYTES] += dirtied * 32


@njit(inline="always", cache=True, _nrt=False)
def lookup(tags, writer, dirty, keys, going, count, g, level, stride, slots, groups, epoch, slot_of, missed):
    """One level's lookup of the requests going[:count] (indices into keys): each one's slot is its unit's group
    (unit mod groups) times `stride` plus its sector mod `slots`, its tag the sector + 1 + `epoch`; every lookup
    sees the tags as they were, then the missed slots are filled. Returns how many go on (compacted to the front
    of going): those that missed, one per slot, the last to fill it. The L2 clears a filled slot's dirty bit."""
    first_block, wpb, units = g[FIRST_BLOCK], g[WARPS_PER_BLOCK], g[UNITS]
    block_start, block_end, base = 0, 0, 0
    previous, rem = -1, 0
    any_missed = False
    for j in range(count):
        key = keys[going[j]]
        warp = key >> SECTOR_BITS
        if groups > 1 and not block_start <= warp < block_end:     # a block's warps come together: its unit once
            block = warp // wpb
            block_start, block_end = block * wpb, block * wpb + wpb
            base = (first_block + block) % units % groups * stride
        sector = key & SECTOR_MASK
        step = sector - previous                       # sorted, mostly consecutive: no division
        if previous >= 0 and 0 <= step < slots:
            rem += step
            rem = rem - slots if rem >= slots else rem
        else:
            rem = sector % slots
        previous = sector
        slot = base + rem
        slot_of[j] = slot
        missed[j] = tags[slot] != np.uint64(sector + 1 + epoch)
        any_missed |= missed[j]
    if not any_missed:
        return 0
    for j in range(count):
        if missed[j]:
            slot = slot_of[j]
            tags[slot] = np.uint64((keys[going[j]] & SECTOR_MASK) + 1 + epoch)
            writer[slot] = j
            if level == L2:
                dirty[slot] = False
    out = 0
    for j in range(count):                             # a slot filled twice by this access misses once
        if missed[j] and writer[slot_of[j]] == j:
            going[out] = going[j]
            out += 1
    return out


@counter
def wavefronts(laid, warp_size, words_per_lane, tally):
    """(wavefronts, phases) of shared-memory word indices laid out by warp lane (-1: no access), as
    `caches.shared_wavefronts`: each phase serves 32 words; a bank serving k distinct words takes k."""
    total, phases = 0, 0
    wpl_shift = log2(words_per_lane)
    per_bank, entries = tally[PER_BANK:PER_BANK + BANKS], tally[ENTRIES:ENTRIES + BANKS]
    warps = laid.size // warp_size
    for w in range(warps):
        for p in range(warp_size * words_per_lane // BANKS):
            # First, without branches (LLVM vectorizes it): every bank once, or one word (per lane) for all
            # lanes, is one wavefront.
            first = laid[w * warp_size + ((p * BANKS) >> wpl_shift)]
            banks, signs, differ = 0, first, 0
            for e in range(BANKS):
                slot = p * BANKS + e
                word = laid[w * warp_size + (slot >> wpl_shift)]
                signs |= word                             # negative when a lane does not access
                differ |= word ^ first
                banks |= 1 << ((word + (slot & (words_per_lane - 1))) & (BANKS - 1))
            if signs >= 0 and (banks == (1 << BANKS) - 1 or differ == 0):
                total += 1
                phases += 1
                continue
            used, clash = 0, False
            for e in range(BANKS):
                slot = p * BANKS + e                    # the phase's e-th word: lane slot // wpl, word slot % wpl
                word = laid[w * warp_size + (slot >> wpl_shift)]
                if word >= 0:
                    word += slot & (words_per_lane - 1)
                entries[e] = word
                if word >= 0:
                    bank = word & (BANKS - 1)
                    bit = 1 << bank
                    if used & bit:                      # a second word in a bank clashes; the same word is a broadcast
                        clash = clash or per_bank[bank] != word
                    else:
                        used |= bit
                        per_bank[bank] = word
            if used == 0:
                continue
            phases += 1
            if not clash:                                # one word per bank
                total += 1
                continue
            per_bank[:] = 0
            for e in range(BANKS):
                word = entries[e]
                if word < 0:
                    continue
                repeat = False
                for f in range(e):
                    if entries[f] == word:
                        repeat = True                    # a broadcast: the same word is served once
                        break
                if not repeat:
                    per_bank[word & (BANKS - 1)] += 1
            most = 0
            for bank in range(BANKS):
                most = max(most, per_bank[bank])
            total += most
    return total, phases


@counter
def count_shared(active, full, byte, padded_lane, threads_per_block, warps_per_block, warp_size, nblocks,
                 nbytes, fast, laid, tally):
    """A shared-memory access of the active lanes at block byte offsets `byte`: bytes and bank
    wavefronts. With `fast` (every lane active, whole aligned words: the reference's unmasked path)
    the batch's first block is counted and scaled to all its blocks; otherwise every active lane."""
    per_lane = max(1, nbytes // 4)
    if fast and full:
        tally[SHARED_BYTES] += active.size * nbytes
        first = laid[:warps_per_block * warp_size]
        first[:] = -1
        for l in range(threads_per_block):
            first[l] = byte[l] >> 2
        w, ideal = wavefronts(first, warp_size, per_lane, tally)
        tally[SHARED_WAVEFRONTS] += w * nblocks
        tally[SHARED_IDEAL_WAVEFRONTS] += ideal * nblocks
        return
    n = 0
    if padded_lane[active.size - 1] == laid.size - 1:  # lanes in warps without padding: a select per lane
        for l in range(active.size):
            laid[l] = byte[l] >> 2 if active[l] else -1
            n += active[l]
    else:
        laid[:] = -1
        for l in range(active.size):
            if active[l]:
                laid[padded_lane[l]] = byte[l] >> 2
                n += 1
    tally[SHARED_BYTES] += n * nbytes
    # Warps count apart, so where every block laid out the same words (the same lanes of each block active at
    # the same offsets: a block-wide tree reduction's `if t < stride`), the first block's count, times the
    # blocks, is the whole count: one pass over the lanes instead of the bank model's over every warp.
    per_block = warps_per_block * warp_size
    differ = 0
    for k in range(per_block, nblocks * per_block, per_block):
        for i in range(per_block):                    # an or of differences: LLVM vectorizes it
            differ |= laid[k + i] ^ laid[i]
    copies = nblocks if differ == 0 else 1
    w, ideal = wavefronts(laid[:per_block] if copies > 1 else laid, warp_size, per_lane, tally)
    tally[SHARED_WAVEFRONTS] += w * copies
    tally[SHARED_IDEAL_WAVEFRONTS] += ideal * copies
