"""Layer 0: the memory-side facts the performance model needs: which cache served each sector, and
shared-memory banks.

The data caches (`DataCaches`), sector caches of 32-byte sectors, physically indexed:
- an L1 per compute unit, for global loads only (stores write through it and atomics bypass it, as
  on NVIDIA and AMD GPUs), emptied at each kernel's start (real L1s are not coherent and are
  invalidated between kernels); on Hopper it shares one array with shared memory and gets what the
  kernel's carve-out leaves (`DeviceProfile.l1_bytes_for`);
- the L2 in slices, unit u using slice u mod slices: the H200's two partitions (each caches lines for
  the SMs next to it), the MI300X's L2 per XCD; kept across kernels, write-back: a sector that
  becomes dirty costs one DRAM write when it is eventually evicted, so the write is counted when it
  turns dirty;
- optionally a far level behind the slices: the H200's other partition, where a line has its home,
  or the MI300X's memory-side Infinity Cache.
A request goes down until a level holds its sector, filling each level it missed. Every level is
direct-mapped (each sector has one slot per level, `sector mod slots`), a simplification of the
set-associative caches of real GPUs that keeps a lookup one gather: capacity misses come out
right; conflict misses are overstated for unlucky strides. Within one instruction, requests that
fill the same slot miss once (thread blocks reading one tile).

The translated engine (`simt/native_counters.py`) runs the same lookups on the same arrays.

Shared memory: 32 banks of 4-byte words. A warp's access is served in wavefronts: each
wavefront serves at most one distinct word per bank (lanes reading the same word share it,
a broadcast). Wide accesses are split into phases of 32 words (a half warp of 8-byte
accesses, a quarter warp of 16-byte ones, as on NVIDIA GPUs); 64-wide AMD wavefronts are
served 32 lanes at a time. Wavefronts beyond one per phase are bank-conflict replays.
"""

import numpy as np

SECTOR_BYTES = 32
BANKS = 32
SECTOR_BITS = 40          # a physical sector number fits in 40 bits (32 TiB); above them the warp, or the L1's epoch
SECTOR_MASK = (1 << SECTOR_BITS) - 1

# The positions of `DataCaches.geometry`, the facts a lookup needs, shared with the translated engine.
(FIRST_BLOCK, WARPS_PER_BLOCK, UNITS, L1_SLOTS, L1_STRIDE, L1_EPOCH, SLICES, SLICE_SLOTS, FAR_SLOTS) = range(9)
L1, L2, FAR = range(3)
EPOCHS = 1 << 22          # kernels before the L1's epoch numbers wrap (and its tags are cleared)


class DataCaches:
    """The tags of every level (`tags[L1]`, `tags[L2]`, `tags[FAR]`: sector number + 1, 0 for an empty slot; the
    L1's with its kernel's epoch above SECTOR_BITS, so that a new kernel finds it empty without clearing it), the
    L2's dirty bits, and per level a scratch array: which request of an access last filled a slot."""

    def __init__(self, profile):
        units = profile.compute_units
        l1_stride = max(1, profile.l1_bytes // SECTOR_BYTES)
        slice_slots = max(1, profile.l2_bytes // profile.l2_slices // SECTOR_BYTES)
        far_slots = profile.far_cache_bytes // SECTOR_BYTES
        sizes = (units * l1_stride, profile.l2_slices * slice_slots, max(1, far_slots))
        self.tags = tuple(np.zeros(n, np.uint64) for n in sizes)
        self.writer = tuple(np.zeros(n, np.int32) for n in sizes)
        self.dirty = np.zeros(sizes[L2], bool)
        self.geometry = np.zeros(9, np.int64)
        g = self.geometry
        g[WARPS_PER_BLOCK], g[UNITS], g[L1_SLOTS], g[L1_STRIDE] = 1, units, l1_stride, l1_stride
        g[SLICES], g[SLICE_SLOTS], g[FAR_SLOTS] = profile.l2_slices, slice_slots, far_slots
        self.native = (*self.tags, *self.writer, self.dirty, self.geometry)     # as the translated engine takes them

    def begin_kernel(self, l1_bytes: int) -> None:
        """A new kernel: every L1 empty, each `l1_bytes` large (at most the profile's)."""
        g = self.geometry
        g[L1_EPOCH] += 1
        if g[L1_EPOCH] == EPOCHS:
            self.tags[L1].fill(0)
            g[L1_EPOCH] = 1
        g[L1_SLOTS] = max(1, min(g[L1_STRIDE], l1_bytes // SECTOR_BYTES))

    def begin_batch(self, first_block: int, warps_per_block: int) -> None:
        """The batch of resident blocks from `first_block` on, of `warps_per_block` warps each: block b runs on unit
        b mod units."""
        self.geometry[FIRST_BLOCK], self.geometry[WARPS_PER_BLOCK] = first_block, warps_per_block

    def access(self, sectors: np.ndarray, warps: np.ndarray, write: bool) -> tuple[int, int, int, int]:
        """Look up the physical sector numbers a warp instruction touched (one per distinct sector of each warp;
        `warps` their warps in the batch); returns (L1 hits, L2 misses, misses of the last level, which go to DRAM,
        and sectors this access made dirty)."""
        g = self.geometry
        units = (g[FIRST_BLOCK] + warps.astype(np.int64) // g[WARPS_PER_BLOCK]) % g[UNITS]
        s = sectors.astype(np.int64)
        going = np.arange(s.size)
        if not write:
            going = self._lookup(L1, going, units * g[L1_STRIDE] + s % g[L1_SLOTS],
                                 s + 1 + (int(g[L1_EPOCH]) << SECTOR_BITS))
        l1_hits = s.size - going.size
        reaching = going
        slot = units[going] % g[SLICES] * g[SLICE_SLOTS] + s[going] % g[SLICE_SLOTS]
        going = self._lookup(L2, going, slot, s[going] + 1)
        l2_misses = going.size
        if g[FAR_SLOTS]:
            going = self._lookup(FAR, going, s[going] % g[FAR_SLOTS], s[going] + 1)
        dirtied = 0
        if write and reaching.size:
            touched = np.unique(slot) if slot.size > 1 and not (slot[1:] > slot[:-1]).all() else slot
            dirtied = int(np.count_nonzero(~self.dirty[touched]))
            self.dirty[touched] = True
        return l1_hits, l2_misses, going.size, dirtied

    def _lookup(self, level: int, requests: np.ndarray, slot: np.ndarray, tag: np.ndarray) -> np.ndarray:
        """Look `requests` up at one level (their slots and tags there, every lookup seeing the tags as they were)
        and fill the slots they missed; returns the requests that go on to the next level: those that missed, one
        per slot (the last to fill it)."""
        tags, writer = self.tags[level], self.writer[level]
        missed = np.flatnonzero(tags[slot] != tag.astype(np.uint64))
        if not missed.size:
            return missed
        at = slot[missed]
        tags[at] = tag[missed]
        writer[at] = missed
        if level == L2:
            self.dirty[at] = False
        return requests[missed[writer[at] == missed]]

    def flush(self) -> None:
        for tags in self.tags:
            tags.fill(0)
        self.dirty.fill(False)


def shared_wavefronts(words: np.ndarray, words_per_lane: int) -> tuple[int, int]:
    """(wavefronts, phases) for shared-memory word indices laid out as (warps, warp lanes).

    `words` holds each lane's first word index, or -1 for a lane that does not take part.
    """
    warps, lanes = words.shape
    if words_per_lane > 1:
        words = np.where(words[:, :, None] >= 0, words[:, :, None] + np.arange(words_per_lane), -1)
    phases = words.reshape(-1, BANKS)                # 32 words per phase
    s = np.sort(phases, axis=1)
    distinct = np.empty(s.shape, bool)
    distinct[:, 0] = True
    np.not_equal(s[:, 1:], s[:, :-1], out=distinct[:, 1:])
    distinct &= s >= 0
    row = np.arange(len(s))[:, None] * BANKS
    per_bank = np.bincount((row + (s & (BANKS - 1)))[distinct], minlength=len(s) * BANKS).reshape(-1, BANKS)
    degree = per_bank.max(axis=1)
    return int(degree.sum()), int(np.count_nonzero(degree))
