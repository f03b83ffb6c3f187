"""What the native engine counts for a memory instruction: the reference's counting, compiled.

Each function here computes, from the same inputs, exactly what the reference's numpy code
counts (`memory_access._global_access`, `_shared_fast`, `_shared_index`, `_local_index`, and the
L2 and bank models of `caches.py`), including their order-dependent parts: the L2 sees the
sectors a warp instruction touches sorted by (warp, sector), a slot filled twice by one
access misses once, and an unmasked shared access counts the batch's first block and scales
it to all its blocks. `tests/test_translated.py` runs kernels both ways and compares every
counter.
"""

import numpy as np
from numba import njit

# Positions in the engine's tally (`NativeRunner.tally`), added to the kernel's Counters after a run.
(GLOBAL_BYTES, GLOBAL_SECTORS, L2_MISSES, DRAM_READ_BYTES, DRAM_WRITE_BYTES, PCIE_BYTES, SHARED_BYTES,
 SHARED_WAVEFRONTS, SHARED_IDEAL_WAVEFRONTS, LOCAL_BYTES, BARRIERS, ATOMIC_LANES) = range(12)
TALLY = ("global_bytes", "global_sectors", "l2_misses", "dram_read_bytes", "dram_write_bytes", "pcie_bytes",
         "shared_bytes", "shared_wavefronts", "shared_ideal_wavefronts", "local_bytes", "barriers", "atomic_lanes")
SECTOR_BITS = 40          # as memory_access.SECTOR_BITS
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
    first lane: a tile's rows), each warp's sectors are a range: write them to keys (as `lane_sectors` would,
    without a key per lane) and return how many; else -1."""
    off = 0
    for l in range(1, n):                              # an or of differences: LLVM vectorizes it
        off |= (pa[l] ^ (pa[l - 1] + nbytes)) if l & (warp_size - 1) else 0
    if off:
        return -1
    touched = 0
    for w0 in range(0, n, warp_size):
        for sector in range(pa[w0] >> 5, (pa[min(w0 + warp_size, n) - 1] >> 5) + 1):
            keys[touched] = sector
            touched += 1
    return touched


@counter
def lane_sectors(active, full, pa, padded_lane, warp_size, keys):
    """The distinct sectors of each warp's active lanes in (warp, sector) order, into keys: returns
    (active lanes, sectors)."""
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
    touched = 0                                       # distinct keys' sectors, compacted to the front, in order
    previous = -1
    for i in range(n):                                # without a branch: a repeat is overwritten by the next
        key = keys[i]
        keys[touched] = key & ((1 << SECTOR_BITS) - 1)
        touched += key != previous
        previous = key
    return n, touched


@counter
def count_global(active, full, pa, padded_lane, warp_size, nbytes, write, atomic, system, l2_tags, l2_writer,
                 l2_dirty, keys, slot_of, missed, tally):
    """A global load, store or (`atomic`) read-modify-write of the active lanes at physical addresses `pa`: bytes,
    the distinct 32-byte sectors of each warp, and the L2's hits, misses and dirtied sectors, or PCIe bytes."""
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
    slots = l2_tags.size
    any_missed = False
    for i in range(touched):                           # each sector's L2 slot, and whether the L2 has it:
        step = keys[i] - keys[i - 1] if i else slots   # every lookup sees the tags as they were
        if 0 <= step < slots:                          # sorted, mostly consecutive: no division
            slot = slot_of[i - 1] + step
            slot = slot - slots if slot >= slots else slot
        else:
            slot = keys[i] % slots
        slot_of[i] = slot
        missed[i] = l2_tags[slot] != np.uint64(keys[i] + 1)
        any_missed |= missed[i]
    misses = 0
    if any_missed:
        for i in range(touched):
            if missed[i]:
                slot = slot_of[i]
                l2_tags[slot] = keys[i] + 1
                l2_dirty[slot] = False
                l2_writer[slot] = i
        for i in range(touched):                       # a slot filled twice by this access misses once
            if missed[i] and l2_writer[slot_of[i]] == i:
                misses += 1
    tally[L2_MISSES] += misses
    if not write or atomic:                            # an atomic reads its sectors too
        tally[DRAM_READ_BYTES] += misses * 32
    if not write:
        return
    dirtied = 0
    for i in range(touched):
        slot = slot_of[i]
        if not l2_dirty[slot]:
            l2_dirty[slot] = True
            dirtied += 1
    tally[DRAM_WRITE_BYTES] += dirtied * 32


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
