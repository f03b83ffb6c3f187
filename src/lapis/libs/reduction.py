"""Layer 4: block reductions, the building block of every library kernel that reduces across a block.

    total = block_reduce(s, t, value, False)              # every thread gets the block's sum of value
    top = block_reduce(s, t, value, True)                 # ... or its maximum
    total = warp_reduce(value, cuda.warpsize, False)      # every lane gets its warp's sum (no shared memory)
    value, index = block_argmax(sv, si, t, value, index)  # the largest value; on ties, the smallest index

Level-1 BLAS (dot, nrm2, asum, iamax), the solver (pivot search, Householder norms) and DNN (softmax,
layer and batch norm) call these. The caller declares the scratch: a shared array with a slot per
thread of the block; the block size (a power of two, at most the scratch's length) sets the tree's
first stride, so one kernel serves rows of any width with as many threads as suit them.
Each is a tree with a fixed order of operations (thread t takes in t + stride, the stride halving from
half the block), so a float sum comes out the same bits on every run, launch and device. `block_reduce`
runs the levels with strides of 32 and more in shared memory, a barrier between them, and the last five
among the first 32 threads by warp shuffles (`shfl_down_sync` brings lane t + stride to lane t, the same
pairs, so the bits do not depend on the warp's width; CUB's block reductions end in shuffles too). A block
of one warp's 32 threads touches no shared memory and waits at no barrier. Each ends with a barrier when
it used the scratch, so the caller may use the scratch again at once.
"""

from lapis import cuda
from lapis.cuda import syncthreads


@cuda.jit(device=True)
def warp_tree(value, stride, take_max):
    """The levels of a block tree from `stride` down to 1 among lanes 0-31 (lane t takes lane t + stride);
    lane 0 ends with the total."""
    while stride > 0:
        other = cuda.shfl_down_sync(0xFFFFFFFF, value, stride)
        if take_max:
            value = max(value, other)
        else:
            value = value + other
        stride //= 2
    return value


@cuda.jit(device=True)
def warp_reduce(value, lanes, take_max):
    """The sum or maximum of value over the warp's lanes 0 .. lanes - 1 (a power of two, at most the warp's width),
    on every lane: `warp_tree`, then lane 0's total shuffled to all."""
    return cuda.shfl_sync(0xFFFFFFFF, warp_tree(value, lanes // 2, take_max), 0)


@cuda.jit(device=True)
def block_reduce(s, t, value, take_max):
    n = min(s.shape[0], cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z)
    if n <= 32:                                 # one warp: shuffles only
        return warp_reduce(value, n, take_max)
    s[t] = value                                # down to 32 partial results through shared memory
    syncthreads()
    stride = n // 2
    while stride >= 32:
        if t < stride:
            if take_max:
                s[t] = max(s[t], s[t + stride])
            else:
                s[t] = s[t] + s[t + stride]
        syncthreads()
        stride //= 2
    if t < 32:                                  # the first warp finishes, thread 0 publishes the total
        total = warp_tree(s[t], stride, take_max)
        if t == 0:
            s[0] = total
    syncthreads()
    result = s[0]
    syncthreads()
    return result


@cuda.jit(device=True)
def block_argmax(values, indices, t, value, index):
    values[t] = value
    indices[t] = index
    syncthreads()
    stride = min(values.shape[0], cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z) // 2
    while stride > 0:
        if t < stride:
            other, at = values[t + stride], indices[t + stride]
            if other > values[t] or (other == values[t] and at < indices[t]):
                values[t] = other
                indices[t] = at
        syncthreads()
        stride //= 2
    best, at = values[0], indices[0]
    syncthreads()
    return best, at
