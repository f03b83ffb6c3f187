"""Layer 4, DNN: activations and softmax, forward and backward (cudnnActivationForward/Backward,
cudnnSoftmaxForward/Backward). Softmax gives a row of up to WARP_ROW_COLS to one warp, which reduces by shuffles, and
a longer row to one block of up to ROW_THREADS threads (`row_threads`), which reduce through shared memory; both in
a fixed order, so results are deterministic."""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import blockDim, blockIdx, float32, shared, threadIdx
from lapis.libs.dnn.descriptors import DnnError, TensorDescriptor
from lapis.libs.dnn.handle import THREADS, Handle, _blocks, _flat, _rows, row_threads
from lapis.libs.reduction import block_reduce, warp_reduce

ACTIVATIONS = {"relu": 0, "gelu": 1, "silu": 2, "tanh": 3, "sigmoid": 4}


@cuda.jit(device=True)
def activate(kind, v):
    # returns (f(v), f'(v))
    # in float32 throughout, as torch's kernels compute a float tensor's activation
    zero, one, half = float32(0.0), float32(1.0), float32(0.5)
    if kind == 0:                                  # relu: NaN and -0 kept, as torch's (not v * 0: NaN at -inf)
        return (zero if v < 0 else v), (one if v > 0 else zero)
    if kind == 1:                                  # gelu, exact: v * Phi(v)
        cdf = half * (one + math.erf(v * float32(0.7071067811865476)))
        pdf = math.exp(-half * v * v) * float32(0.3989422804014327)
        return v * cdf, cdf + v * pdf
    if kind == 2:                                  # silu: v * sigmoid(v)
        s = one / (one + math.exp(-v))
        return v * s, s * (one + v * (one - s))
    if kind == 3:
        t = math.tanh(v)
        return t, one - t * t
    s = one / (one + math.exp(-v))
    return s, s * (one - s)


def make_activation_kernel(kind: int, backward: bool):
    """The kernel of one activation in one direction, both compile-time constants (closure variables): it holds
    only that function's code, where a kernel taking the kind at run time ends each run of arithmetic at a branch."""
    def activation_kernel(n, x, dy, out):
        i = cuda.grid(1)
        while i < n:
            value, slope = activate(kind, x[i])
            if backward:
                out[i] = slope * dy[i]
            else:
                out[i] = value
            i += cuda.gridsize(1)
    return activation_kernel


ACTIVATION_KERNELS = {(kind, backward): make_activation_kernel(kind, backward)
                      for kind in ACTIVATIONS.values() for backward in (False, True)}


def activation_forward(handle: Handle, mode: str, desc: TensorDescriptor, x, y) -> None:
    """y = f(x) for f in relu, gelu (exact, erf-based), silu, tanh, sigmoid (cudnnActivationForward)."""
    _activation(handle, mode, desc, x, x, y, False)


def activation_backward(handle: Handle, mode: str, desc: TensorDescriptor, x, dy, dx) -> None:
    """dx = f'(x) dy (cudnnActivationBackward, from the input x)."""
    _activation(handle, mode, desc, x, dy, dx, True)


def _activation(handle, mode, desc, x, dy, out, backward: bool) -> None:
    if mode not in ACTIVATIONS:
        raise DnnError(f"activation must be one of {', '.join(ACTIVATIONS)}, not {mode!r}")
    n = desc.size
    fx, fdy, fout = _flat(x, "x", n), _flat(dy, "dy", n), _flat(out, "dx" if backward else "y", n)
    with trace.span(4, "activation_backward" if backward else "activation_forward", mode=mode, dims=desc.dims):
        if n:
            handle.kernel(ACTIVATION_KERNELS[ACTIVATIONS[mode], backward])[_blocks(n), THREADS, handle.stream](
                np.int64(n), fx, fdy, fout)


def softmax_forward_kernel(cols, log, x, y):
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    m = float32(-math.inf)
    j = t
    while j < cols:
        m = max(m, x[base + j])
        j += blockDim.x
    m = block_reduce(s, t, m, True)
    total = float32(0.0)
    j = t
    while j < cols:
        total += math.exp(x[base + j] - m)
        j += blockDim.x
    total = block_reduce(s, t, total, False)
    j = t
    while j < cols:
        if log:
            y[base + j] = x[base + j] - m - math.log(total)
        else:
            y[base + j] = math.exp(x[base + j] - m) / total
        j += blockDim.x


def softmax_backward_kernel(cols, log, y, dy, dx):
    # softmax:      dx = y * (dy - sum(dy * y));   log-softmax: dx = dy - exp(y) * sum(dy)
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    acc = float32(0.0)
    j = t
    while j < cols:
        acc += dy[base + j] if log else dy[base + j] * y[base + j]
        j += blockDim.x
    acc = block_reduce(s, t, acc, False)
    j = t
    while j < cols:
        if log:
            dx[base + j] = dy[base + j] - math.exp(y[base + j]) * acc
        else:
            dx[base + j] = y[base + j] * (dy[base + j] - acc)
        j += blockDim.x


# Rows of at most WARP_ROW_COLS take a warp each (PyTorch's softmax_warp_forward for rows up to 1,024): lane l reads
# elements l, l + warpSize, ... and the warp's max and sum are trees of shuffles shared with every lane
# (`reduction.warp_reduce`); no shared memory, no barrier. A block holds WARP_ROWS_THREADS // warpSize rows.
WARP_ROW_COLS = 1024
WARP_ROWS_THREADS = 128


@cuda.jit(device=True)
def warp_row(rows):
    """This warp's row (the block's warps take consecutive rows), its lane, and whether the row exists."""
    lane = threadIdx.x % cuda.warpsize
    row = blockIdx.x * (blockDim.x // cuda.warpsize) + threadIdx.x // cuda.warpsize
    return row, lane, row < rows


def softmax_warp_forward_kernel(rows, cols, log, x, y):
    row, lane, live = warp_row(rows)
    if live:                                           # a whole warp's rows exist or not: shuffles see all lanes
        base = row * cols
        m = float32(-math.inf)
        for j in range(lane, cols, cuda.warpsize):
            m = max(m, x[base + j])
        m = warp_reduce(m, cuda.warpsize, True)
        total = float32(0.0)
        for j in range(lane, cols, cuda.warpsize):
            total += math.exp(x[base + j] - m)
        total = warp_reduce(total, cuda.warpsize, False)
        for j in range(lane, cols, cuda.warpsize):
            if log:
                y[base + j] = x[base + j] - m - math.log(total)
            else:
                y[base + j] = math.exp(x[base + j] - m) / total


def softmax_warp_backward_kernel(rows, cols, log, y, dy, dx):
    row, lane, live = warp_row(rows)
    if live:
        base = row * cols
        acc = float32(0.0)
        for j in range(lane, cols, cuda.warpsize):
            acc += dy[base + j] if log else dy[base + j] * y[base + j]
        acc = warp_reduce(acc, cuda.warpsize, False)
        for j in range(lane, cols, cuda.warpsize):
            if log:
                dx[base + j] = dy[base + j] - math.exp(y[base + j]) * acc
            else:
                dx[base + j] = y[base + j] * (dy[base + j] - acc)


def _softmax_launch(handle: Handle, rows: int, cols: int, block_kernel, warp_kernel, args: tuple) -> None:
    """A warp per row up to WARP_ROW_COLS columns, else a block per row."""
    if cols <= WARP_ROW_COLS:
        per_block = WARP_ROWS_THREADS // handle.properties.warp_size
        handle.kernel(warp_kernel)[-(-rows // per_block), WARP_ROWS_THREADS, handle.stream](np.int64(rows), *args)
    else:
        handle.kernel(block_kernel)[rows, row_threads(cols), handle.stream](*args)


def softmax_forward(handle: Handle, x, y, log: bool = False) -> None:
    """y = softmax(x) or log_softmax(x) over the last dimension (cudnnSoftmaxForward, instance mode)."""
    rows, cols = _rows(x, "x")
    fx, fy = _flat(x, "x"), _flat(y, "y", x.size)
    with trace.span(4, "softmax_forward", rows=rows, cols=cols, log=log):
        if rows and cols:
            _softmax_launch(handle, rows, cols, softmax_forward_kernel, softmax_warp_forward_kernel,
                            (np.int64(cols), log, fx, fy))


def softmax_backward(handle: Handle, y, dy, dx, log: bool = False) -> None:
    """dx from the forward output y and dy (cudnnSoftmaxBackward)."""
    rows, cols = _rows(y, "y")
    fy, fdy, fdx = _flat(y, "y"), _flat(dy, "dy", y.size), _flat(dx, "dx", y.size)
    with trace.span(4, "softmax_backward", rows=rows, cols=cols, log=log):
        if rows and cols:
            _softmax_launch(handle, rows, cols, softmax_backward_kernel, softmax_warp_backward_kernel,
                            (np.int64(cols), log, fy, fdy, fdx))
