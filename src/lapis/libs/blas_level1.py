"""Layer 4: level-1 BLAS (vector operations) with cuBLAS conventions.

    blas.axpy(handle, n, alpha, x, incx, y, incy)        # y = alpha x + y
    blas.dot(handle, n, x, incx, y, incy) -> float       # results come back to the host

Vectors are device arrays read as flat storage with an increment; a negative increment walks
the vector backwards from its end, as in the reference BLAS. float32 and float64 (cuBLAS's
S and D routines) share one kernel, compiled per type. Reductions (dot, nrm2, asum, iamax)
run in two passes: each block of 256 threads reduces a stretch of the vector through a tree
in shared memory, then one block reduces the partial results; the order of every addition
is fixed, so results are bitwise deterministic. Result pointer mode is "host": the scalar
is copied back and returned. nrm2 sums squares without cuBLAS's scaling, so it can overflow
for elements above about 1e19 (float32).
"""

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, gridsize, shared, threadIdx
from lapis.cuda import grid as thread_index
from lapis.libs.reduction import block_argmax, block_reduce

THREADS = 256
MAX_BLOCKS = 1024
DOT, SQUARES, ABS_SUM, SUM = 0, 1, 2, 3


class BlasError(ValueError):
    """Invalid arguments (cuBLAS would return CUBLAS_STATUS_INVALID_VALUE); nothing was launched."""


@cuda.jit(device=True)
def at(i, n, inc):
    """Where element i of a strided vector lives (a negative increment starts from the end)."""
    return i * inc if inc > 0 else (n - 1 - i) * (-inc)


def axpy_kernel(n, alpha, x, incx, y, incy):
    i = thread_index(1)
    while i < n:
        yi = at(i, n, incy)
        y[yi] = alpha * x[at(i, n, incx)] + y[yi]
        i += gridsize(1)


def scal_kernel(n, alpha, x, incx):
    i = thread_index(1)
    while i < n:
        xi = at(i, n, incx)
        x[xi] = alpha * x[xi]
        i += gridsize(1)


def copy_swap_kernel(n, x, incx, y, incy, swap):
    i = thread_index(1)
    while i < n:
        xi, yi = at(i, n, incx), at(i, n, incy)
        v = x[xi]
        if swap:
            x[xi] = y[yi]
        y[yi] = v
        i += gridsize(1)


def reduce_kernel(n, x, incx, y, incy, op, partial):
    # partial[block] = sum over this block's stretch of x*y, x*x or |x|
    s = shared.array(256, x.dtype)
    t = threadIdx.x
    acc = x.dtype(0)                # not x[0] * 0: an infinite x[0] would make it NaN
    i = thread_index(1)
    while i < n:
        v = x[at(i, n, incx)]
        if op == 0:
            acc += v * y[at(i, n, incy)]
        elif op == 1:
            acc += v * v
        elif op == 2:
            acc += abs(v)
        else:
            acc += v
        i += gridsize(1)
    total = block_reduce(s, t, acc, False)
    if t == 0:
        partial[blockIdx.x] = total


def iamax_kernel(n, x, incx, positions, indirect, best_value, best_index):
    # per block: the largest |x| and, on ties, its smallest index (0-based; the second pass reads
    # each candidate's index from `positions`)
    sv = shared.array(256, x.dtype)
    si = shared.array(256, np.int64)
    t = threadIdx.x
    value = x.dtype(-1)
    index = n
    i = thread_index(1)
    while i < n:
        a = abs(x[at(i, n, incx)])
        where = positions[i] if indirect else i
        if a > value or (a == value and where < index):
            value = a
            index = where
        i += gridsize(1)
    value, index = block_argmax(sv, si, t, value, index)
    if t == 0:
        best_value[blockIdx.x] = value
        best_index[blockIdx.x] = index


def check_vector(x, name: str, n: int, inc: int) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise BlasError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype not in (np.float32, np.float64):
        raise BlasError(f"{name} must hold float32 or float64, not {x.dtype}")
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        raise BlasError(f"{name} must be contiguous storage")
    if inc == 0:
        raise BlasError(f"inc{name} must not be zero")
    if n > 0 and (n - 1) * abs(inc) + 1 > x.size:
        raise BlasError(f"{name} holds {x.size} elements but n={n} with inc{name}={inc} needs "
                          f"{(n - 1) * abs(inc) + 1}")
    return x.ravel(order="A")


def _check(n: int, *vectors):
    if n < 0:
        raise BlasError(f"n must be non-negative, not {n}")
    dtypes = {v.dtype for v in vectors}
    if len(dtypes) > 1:
        raise BlasError(f"the vectors must share a dtype, got {sorted(map(str, dtypes))}")
    return vectors[0].dtype.type


def _blocks(n: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-n // THREADS)))


def axpy(handle, n: int, alpha: float, x, incx: int, y, incy: int) -> None:
    """y = alpha x + y (cublasSaxpy / cublasDaxpy)."""
    fx, fy = check_vector(x, "x", n, incx), check_vector(y, "y", n, incy)
    dtype = _check(n, fx, fy)
    with trace.span(4, "axpy", n=n, alpha=alpha, incx=incx, incy=incy, dtype=str(np.dtype(dtype))):
        if n:
            handle.kernel(axpy_kernel)[_blocks(n), THREADS, handle.stream](
                np.int64(n), dtype(alpha), fx, np.int64(incx), fy, np.int64(incy))


def scal(handle, n: int, alpha: float, x, incx: int) -> None:
    """x = alpha x (cublasSscal)."""
    fx = check_vector(x, "x", n, incx)
    dtype = _check(n, fx)
    with trace.span(4, "scal", n=n, alpha=alpha, incx=incx):
        if n:
            handle.kernel(scal_kernel)[_blocks(n), THREADS, handle.stream](
                np.int64(n), dtype(alpha), fx, np.int64(incx))


def _copy_swap(handle, n, x, incx, y, incy, swap: bool) -> None:
    fx, fy = check_vector(x, "x", n, incx), check_vector(y, "y", n, incy)
    _check(n, fx, fy)
    with trace.span(4, "swap" if swap else "copy", n=n, incx=incx, incy=incy):
        if n:
            handle.kernel(copy_swap_kernel)[_blocks(n), THREADS, handle.stream](
                np.int64(n), fx, np.int64(incx), fy, np.int64(incy), swap)


def copy(handle, n: int, x, incx: int, y, incy: int) -> None:
    """y = x (cublasScopy)."""
    _copy_swap(handle, n, x, incx, y, incy, False)


def swap(handle, n: int, x, incx: int, y, incy: int) -> None:
    """x, y = y, x (cublasSswap)."""
    _copy_swap(handle, n, x, incx, y, incy, True)


def _reduce(handle, name: str, op: int, n: int, x, incx: int, y=None, incy: int = 1) -> float:
    fx = check_vector(x, "x", n, incx)
    fy = check_vector(y, "y", n, incy) if y is not None else fx
    dtype = _check(n, fx, fy)
    with trace.span(4, name, n=n, incx=incx):
        if n == 0:
            return 0.0
        api, kernel = handle.api, handle.kernel(reduce_kernel)
        blocks = _blocks(n)
        partial = api.device_array(blocks, dtype)
        kernel[blocks, THREADS, handle.stream](np.int64(n), fx, np.int64(incx), fy, np.int64(incy), np.int32(op),
                                               partial)
        total = api.device_array(1, dtype)
        kernel[1, THREADS, handle.stream](np.int64(blocks), partial, np.int64(1), partial, np.int64(1), np.int32(SUM),
                                          total)
        return float(total.copy_to_host()[0])


def dot(handle, n: int, x, incx: int, y, incy: int) -> float:
    """sum x_i y_i (cublasSdot)."""
    return _reduce(handle, "dot", DOT, n, x, incx, y, incy)


def nrm2(handle, n: int, x, incx: int) -> float:
    """sqrt(sum x_i^2) (cublasSnrm2)."""
    return float(np.sqrt(np.float64(_reduce(handle, "nrm2", SQUARES, n, x, incx))))


def asum(handle, n: int, x, incx: int) -> float:
    """sum |x_i| (cublasSasum)."""
    return _reduce(handle, "asum", ABS_SUM, n, x, incx)


def iamax(handle, n: int, x, incx: int) -> int:
    """The 1-based index of the first element of largest |x_i| (cublasIsamax); 0 when n is 0."""
    fx = check_vector(x, "x", n, incx)
    dtype = _check(n, fx)
    with trace.span(4, "iamax", n=n, incx=incx):
        if n == 0:
            return 0
        api, kernel = handle.api, handle.kernel(iamax_kernel)
        blocks = _blocks(n)
        values, indices = api.device_array(blocks, dtype), api.device_array(blocks, np.int64)
        kernel[blocks, THREADS, handle.stream](np.int64(n), fx, np.int64(incx), indices, False, values, indices)
        best_v, best_i = api.device_array(1, dtype), api.device_array(1, np.int64)
        kernel[1, THREADS, handle.stream](np.int64(blocks), values, np.int64(1), indices, True, best_v, best_i)
        return int(best_i.copy_to_host()[0]) + 1
