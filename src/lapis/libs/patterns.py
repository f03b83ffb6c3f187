"""Layer 4: kernels whose every element follows from its index alone, as ATen's arange and triu/tril.

    patterns.arange(api, out, start, step)                  # out[i] = start + i * step (integer out)
    patterns.triangle(api, x, out, diagonal, lower=True)    # tril: out[.., i, j] = x[.., i, j] if j - i <= diagonal

Each is one launch over the output (a grid-stride loop of `kernels.launch_shape`'s blocks): the values are
made on the device, not uploaded, so building them neither copies from the host nor waits for the kernels
before it. Arrays are contiguous.
"""

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray
from lapis.libs.kernels import MAX_BLOCKS, KernelArgumentError, _dispatcher, launch_shape


def arange_kernel(n, start, step, out):
    # out[i] = start + i * step in 64-bit integers, then stored in out's type
    i = cuda.grid(1)
    while i < n:
        out[i] = start + i * step
        i += cuda.gridsize(1)


def arange(api, out: DeviceNDArray, start: int, step: int) -> None:
    """out[i] = start + i * step for a contiguous integer device array (torch.arange's kernel)."""
    if not (isinstance(out, DeviceNDArray) and out.is_c_contiguous() and np.issubdtype(out.dtype, np.integer)):
        raise KernelArgumentError("arange fills a contiguous integer device array")
    with trace.span(4, "arange", elements=out.size, start=start, step=step):
        if out.size:
            _dispatcher(api, ("arange",), lambda: arange_kernel)[launch_shape(out.size, MAX_BLOCKS)](
                np.int64(out.size), np.int64(start), np.int64(step), out.ravel())


def make_triangle_kernel(lower: bool):
    """The kernel keeping one triangle of each matrix of x (the lower with `lower`), zeroing the rest."""
    LOWER = lower

    def triangle_kernel(n, rows, cols, diagonal, x, out):
        # element k of (..., rows, cols) sits at row i, column j; kept where j - i <= diagonal (lower) or
        # j - i >= diagonal (upper)
        k = cuda.grid(1)
        while k < n:
            j = k % cols
            i = k // cols % rows
            if (j - i <= diagonal) if LOWER else (j - i >= diagonal):
                out[k] = x[k]
            else:
                out[k] = 0
            k += cuda.gridsize(1)
    return triangle_kernel


def triangle(api, x: DeviceNDArray, out: DeviceNDArray, diagonal: int, lower: bool) -> None:
    """out = tril(x, diagonal) (or triu, not `lower`) over the last two dimensions of contiguous x and out."""
    if not all(isinstance(a, DeviceNDArray) and a.is_c_contiguous() for a in (x, out)) or x.shape != out.shape \
            or x.dtype != out.dtype or x.ndim < 2:
        raise KernelArgumentError("triangle takes contiguous device arrays x and out of one shape and dtype, "
                                  "of at least two dimensions")
    rows, cols = x.shape[-2:]
    with trace.span(4, "tril" if lower else "triu", shape=tuple(x.shape), diagonal=diagonal):
        if x.size:
            kernel = _dispatcher(api, ("triangle", lower), lambda: make_triangle_kernel(lower))
            kernel[launch_shape(x.size, MAX_BLOCKS)](
                np.int64(x.size), np.int64(rows), np.int64(cols), np.int64(diagonal), x.ravel(), out.ravel())
