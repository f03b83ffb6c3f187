"""Layer 3: `cuda.reduce`, numba.cuda's reduction of an array by any binary function.

    sum_reduce = cuda.reduce(lambda a, b: a + b)
    total = sum_reduce(A)                      # a host or device array; returns a number of A's dtype

    @cuda.reduce
    def max_reduce(a, b):
        return max(a, b)
    max_reduce(d_A, res=d_out)                 # the result in d_out[0], nothing copied to the host

The function is compiled as a device function (`cuda.jit(device=True)`), and two launches of one kernel
reduce with it, as numba's reduction does: each of up to `MAX_BLOCKS` blocks folds the elements it strides
over, then halves its threads' values through shared memory, and writes one partial; a single block then
reduces the partials and folds in `init`. The function must be associative (the order of its applications is
not the array's); numba makes the same assumption. The threads that hold a value are a prefix of the block
(each block starts inside the array), so a halving combines only pairs that both hold one, and the function
needs no identity.
"""

import functools

import numpy as np

from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.compiler.intrinsics import blockIdx, gridDim, shared, syncthreads, threadIdx
from lapis.cuda.devicearray import DeviceNDArray

THREADS = 256            # threads per block, a power of two (the tree halves it)
MAX_BLOCKS = 1024        # partials the first launch writes at most (the second launch's block folds them)


@functools.cache
def _kernel(api, fn: DeviceFunction, dtype: np.dtype):
    """The reduction kernel for `fn` over arrays of `dtype`, compiled by `api` (`cuda` or `hip`)."""
    STEPS = THREADS.bit_length() - 1                 # the tree's halvings: 128, 64, ..., 1 threads

    def reduce_kernel(src, n, out, init, fold_init):
        # src: (n,) values; out: one value per block. Thread t of block b starts at element b * THREADS + t and
        # strides by the grid, so every block has an element (the host launches at most ceil(n / THREADS)).
        values = shared.array(THREADS, dtype)
        t = threadIdx.x
        first = blockIdx.x * THREADS
        i = first + t
        stride = gridDim.x * THREADS
        acc = src[i] if i < n else init
        i += stride
        while i < n:
            acc = fn(acc, src[i])
            i += stride
        values[t] = acc
        holding = min(n - first, THREADS)            # the block's threads that hold a value: a prefix of them
        for step in range(STEPS):                    # unrolled: each half a constant
            half = THREADS >> (step + 1)
            syncthreads()
            if t + half < holding and t < half:
                values[t] = fn(values[t], values[t + half])
            holding = min(holding, half)
        if t == 0:
            out[blockIdx.x] = fn(init, values[0]) if fold_init else values[0]

    reduce_kernel.__name__ = f"reduce_{fn.__name__.strip('<>')}_{dtype.name}"
    return api.jit(reduce_kernel)


class Reduce:
    """numba.cuda.Reduce: a reduction by `functor`, a binary function (compiled as a device function once, and
    kept with this object). `cuda.reduce` is this class."""

    api = None           # the programming interface that compiles and launches it (set by lapis.cuda and lapis.hip)

    def __init__(self, functor):
        code = getattr(getattr(functor, "py_func", functor), "__code__", None)
        if code is None or code.co_argcount != 2:
            raise TypeError(f"cuda.reduce takes a function of two arguments (a binary operation), not {functor!r}")
        self._device = functor if isinstance(functor, DeviceFunction) else DeviceFunction(functor)
        functools.update_wrapper(self, getattr(functor, "py_func", functor), updated=())

    def __call__(self, arr, size: int | None = None, res: DeviceNDArray | None = None, init=0, stream=0):
        """Reduce the first `size` elements of `arr` (a host or device array; all of them when None), `init`
        folded in. Returns the result as a number of arr's dtype, or, with `res` (a device array), writes it
        to res[0] and returns nothing (no copy to the host)."""
        api = self.api
        if not isinstance(arr, DeviceNDArray):
            arr = np.ascontiguousarray(arr)
        if arr.ndim != 1:
            raise ValueError(f"reduce takes a 1-D array, not one of shape {tuple(arr.shape)}")
        n = arr.shape[0] if size is None else int(size)
        if not 0 <= n <= arr.shape[0]:
            raise ValueError(f"size {n} is outside 0..{arr.shape[0]}, the array's length")
        dtype = np.dtype(arr.dtype)
        start = dtype.type(init)
        if n == 0:
            if res is not None:
                res[:1].copy_to_device(np.array([start], dtype), stream=stream)
                return None
            return start
        src = arr if isinstance(arr, DeviceNDArray) else api.to_device(arr[:n], stream=stream)
        kernel = _kernel(api, self._device, dtype)
        blocks = min(MAX_BLOCKS, -(-n // THREADS))
        partials = api.device_array(blocks, dtype, stream=stream)
        kernel[blocks, THREADS, stream](src, np.int64(n), partials, start, False)
        out = res if res is not None else api.device_array(1, dtype, stream=stream)
        kernel[1, THREADS, stream](partials, np.int64(blocks), out, start, True)
        if res is not None:
            return None
        return out.copy_to_host(stream=stream)[0]
