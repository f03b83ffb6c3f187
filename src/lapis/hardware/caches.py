"""Layer 0: the memory-side facts the performance model needs: L2 hits and shared-memory banks.

L2: a sector cache of the profile's L2 size in front of DRAM, physically indexed, kept
across kernels as a real L2 is. It is direct-mapped (each 32-byte sector of physical
memory has one slot, `sector mod slots`), a simplification of the 16-way set-associative
caches on real GPUs that keeps each lookup one numpy gather: capacity misses come out
right, conflict misses are somewhat overstated for unlucky strides. The L2 is write-back:
a sector that becomes dirty (a store to it, hit or miss) costs one DRAM write when it is
eventually evicted, so that write is counted when the sector turns dirty.

Shared memory: 32 banks of 4-byte words. A warp's access is served in wavefronts: each
wavefront serves at most one distinct word per bank (lanes reading the same word share it,
a broadcast). Wide accesses are split into phases of 32 words (a half warp of 8-byte
accesses, a quarter warp of 16-byte ones, as on NVIDIA GPUs); 64-wide AMD wavefronts are
served 32 lanes at a time. Wavefronts beyond one per phase are bank-conflict replays.
"""

import numpy as np

SECTOR_BYTES = 32
BANKS = 32


class L2Cache:
    def __init__(self, nbytes: int):
        self.slots = max(1, nbytes // SECTOR_BYTES)
        self.tags = np.zeros(self.slots, np.uint64)     # sector number + 1; 0 is an empty slot (lazy pages)
        self.writer = np.zeros(self.slots, np.int32)    # scratch: which request of an access last filled a slot
        self.dirty = np.zeros(self.slots, bool)

    def access(self, sectors: np.ndarray, write: bool = False) -> tuple[int, int]:
        """Look up physical sector numbers (one per sector a warp touched); returns (sectors that
        missed, sectors this access made dirty).

        Several warps of one instruction may ask for the same sector (thread blocks reading one
        tile): it misses once. Only the last request to fill a slot counts, which sorts nothing.
        """
        slot = (sectors % np.uint64(self.slots)).astype(np.intp)
        tag = sectors + np.uint64(1)
        missed = np.flatnonzero(self.tags[slot] != tag)
        misses = 0
        if missed.size:
            self.tags[slot[missed]] = tag[missed]
            self.dirty[slot[missed]] = False
            self.writer[slot[missed]] = missed
            misses = int(np.count_nonzero(self.writer[slot[missed]] == missed))
        if not write:
            return misses, 0
        touched = np.unique(slot) if slot.size > 1 and not (slot[1:] > slot[:-1]).all() else slot
        dirtied = int(np.count_nonzero(~self.dirty[touched]))
        self.dirty[touched] = True
        return misses, dirtied

    def flush(self) -> None:
        self.tags.fill(0)
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
