"""Layer 3: a grid barrier (numba's `cuda.cg.this_grid().sync()`, CUDA's `cooperative_groups::this_grid().sync()`),
written in the kernel language, as CUDA's cooperative-groups library builds it from block barriers and atomics.

GPUs have no instruction that waits for a whole grid: a block barrier gathers each block, then one thread of each
block adds to a word in global memory and spins until every block has added. The word need never be reset: the
first block adds 2^31 - (blocks - 1) and every other block 1, so each completed barrier adds exactly 2^31, which
flips the word's top bit; a thread waits until the top bit differs from the one in the value its own add saw. Every
value a thread's add sees has the starting top bit, so the flip is the barrier's completion, provided the word starts
each barrier with its low 31 bits zero (true of a fresh word, and after every completed barrier). The waiting loop
reads the word with an atomic add of 0, which no optimisation can hoist out of the loop.

Spinning blocks wait for blocks that have yet to arrive, so all of them must be resident at once: the dispatcher
launches a kernel that syncs its grid cooperatively, refusing a grid larger than the device holds at once, and the
simulated GPU then runs its blocks in one batch (`SimtCore.execute`), in lockstep: by the time the first thread
reads the word, every block's thread 0 has added to it, and the loop ends at its first test.
"""

from numpy import uint32

from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.compiler.intrinsics import atomic, blockIdx, gridDim, syncthreads, threadfence, threadIdx

BARRIER_WORD = "$grid_barrier"     # the hidden kernel argument holding the word (a uint32 array of one element)
TOP_BIT = 0x80000000


@DeviceFunction
def grid_sync(word):
    """Wait until every thread of the grid arrives; `word` is the grid's barrier word."""
    syncthreads()
    if threadIdx.x == 0 and threadIdx.y == 0 and threadIdx.z == 0:
        blocks = uint32(gridDim.x * gridDim.y * gridDim.z)
        first = blockIdx.x == 0 and blockIdx.y == 0 and blockIdx.z == 0
        add = uint32(TOP_BIT) - (blocks - uint32(1)) if first else uint32(1)
        threadfence()                                   # this block's writes before its arrival
        seen = atomic.add(word, 0, add)
        while ((atomic.add(word, 0, uint32(0)) ^ seen) & uint32(TOP_BIT)) == uint32(0):
            pass
        threadfence()                                   # the other blocks' writes before this block's next reads
    syncthreads()
