"""Layer 4: block reductions, the building block of every library kernel that reduces across a block.

    total = block_reduce(s, t, value, False)              # every thread gets the block's sum of value
    top = block_reduce(s, t, value, True)                 # ... or its maximum
    value, index = block_argmax(sv, si, t, value, index)  # the largest value; on ties, the smallest index

Level-1 BLAS (dot, nrm2, asum, iamax), the solver (pivot search, Householder norms) and DNN (softmax,
layer and batch norm) call these. The caller declares the scratch: a shared array with a slot per
thread of the block; the block size (a power of two, at most the scratch's length) sets the tree's
first stride, so one kernel serves rows of any width with as many threads as suit them.
Each is a tree in shared memory with a fixed order of operations (thread t takes in t + stride, the
stride halving from half the block), so a float sum comes out the same bits on every run, launch
and device; warp shuffles would tie the order to the device's warp width. Each ends with a barrier,
so the caller may use the scratch again at once.
"""

from lapis import cuda
from lapis.cuda import syncthreads


@cuda.jit(device=True)
def block_reduce(s, t, value, take_max):
    s[t] = value
    syncthreads()
    stride = min(s.shape[0], cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z) // 2
    while stride > 0:
        if t < stride:
            if take_max:
                s[t] = max(s[t], s[t + stride])
            else:
                s[t] = s[t] + s[t + stride]
        syncthreads()
        stride //= 2
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
