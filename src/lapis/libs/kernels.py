"""Layer 4: elementwise kernels the framework needs (ATen's place on the CUDA side).

    kernels.fill(api, array, value)      # every element of a device array = value
"""

import numpy as np

from lapis import trace
from lapis.cuda import DeviceNDArray, grid

THREADS = 256


def fill_kernel(out, value, n):
    i = grid(1)
    if i < n:
        out[i] = value


_dispatchers: dict = {}


def fill(api, array: DeviceNDArray, value) -> None:
    if not (array.is_c_contiguous() or array.is_f_contiguous()):
        raise ValueError("fill needs a contiguous device array")
    kernel = _dispatchers.get(api.__name__)
    if kernel is None:
        kernel = _dispatchers[api.__name__] = api.jit(fill_kernel)
    flat = DeviceNDArray((array.size,), (array.dtype.itemsize,), array.dtype, array.context, array.memory, array.ptr)
    with trace.span(4, "fill", dtype=str(array.dtype), elements=array.size, value=value):
        if array.size:
            kernel[-(-array.size // THREADS), THREADS](flat, array.dtype.type(value), np.int64(array.size))
