"""Layer 4: deep-learning primitives with cuDNN's conventions (descriptors, forward and backward).

    handle = dnn.create(cuda)
    x = dnn.TensorDescriptor((N, C, H, W), "NCHW")               # describes a device array's layout
    dnn.activation_forward(handle, "gelu", x_desc, x, y)
    dnn.activation_backward(handle, "gelu", x_desc, x, dy, dx)
    dnn.softmax_forward(handle, x, y, log=False)                  # over the last dimension
    dnn.layer_norm_forward(handle, x, gamma, beta, eps, y, mean, rstd)
    dnn.pooling_forward(handle, "max", desc, x, window, stride, padding, y)
    dnn.dropout_forward(handle, p, seed, x, y, mask)

Forward and backward of each op sit side by side, as in cuDNN's API (and in llm.c). Arrays are
device arrays (float32); a TensorDescriptor says how a 4-D NCHW or NHWC tensor is laid out, and
routines check descriptors and array sizes before launching anything. Row-wise ops (softmax,
layer norm) give each row to one block of 128 threads, which reduce through shared memory in a
fixed order, so results are deterministic. Dropout draws its mask from a counter-based hash of
(seed, element index): the same seed gives the same mask on any device and launch shape.

Not here yet: convolutions, batch norm and fused attention (the rest of the Layer 4 issue).
"""

import math
from dataclasses import dataclass

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, Stream, blockIdx, shared, syncthreads, threadIdx

THREADS = 256
ROW_THREADS = 128
ACTIVATIONS = {"relu": 0, "gelu": 1, "silu": 2, "tanh": 3, "sigmoid": 4}
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class DnnError(ValueError):
    """Invalid arguments (CUDNN_STATUS_BAD_PARAM); nothing was launched."""


@dataclass(frozen=True)
class TensorDescriptor:
    """A 4-D tensor's dimensions in NCHW order and its memory format (cudnnSetTensor4dDescriptor)."""
    dims: tuple[int, int, int, int]
    layout: str = "NCHW"

    def __post_init__(self):
        if len(self.dims) != 4 or min(self.dims) < 0:
            raise DnnError(f"a tensor descriptor takes four non-negative dimensions (N, C, H, W), not {self.dims}")
        if self.layout not in ("NCHW", "NHWC"):
            raise DnnError(f"layout must be NCHW or NHWC, not {self.layout!r}")

    @property
    def size(self) -> int:
        return int(np.prod(self.dims))

    def strides(self) -> tuple[int, int, int, int]:
        """Element strides of N, C, H, W."""
        n, c, h, w = self.dims
        if self.layout == "NCHW":
            return c * h * w, h * w, w, 1
        return h * w * c, 1, w * c, c


# -- activations -------------------------------------------------------------------------------------
@cuda.jit(device=True)
def activate(kind, v):
    # returns (f(v), f'(v))
    if kind == 0:
        return (v if v > 0 else v * 0), (v * 0 + 1 if v > 0 else v * 0)
    if kind == 1:                                  # gelu, exact: v * Phi(v)
        cdf = 0.5 * (1.0 + math.erf(v * 0.7071067811865476))
        pdf = math.exp(-0.5 * v * v) * 0.3989422804014327
        return v * cdf, cdf + v * pdf
    if kind == 2:                                  # silu: v * sigmoid(v)
        s = 1.0 / (1.0 + math.exp(-v))
        return v * s, s * (1.0 + v * (1.0 - s))
    if kind == 3:
        t = math.tanh(v)
        return t, 1.0 - t * t
    s = 1.0 / (1.0 + math.exp(-v))
    return s, s * (1.0 - s)


def activation_kernel(n, kind, backward, x, dy, out):
    i = cuda.grid(1)
    while i < n:
        value, slope = activate(kind, x[i])
        out[i] = slope * dy[i] if backward else value
        i += cuda.gridsize(1)


# -- softmax -----------------------------------------------------------------------------------------
@cuda.jit(device=True)
def block_reduce(s, t, value, take_max):
    # Every thread of the block gets the block's max or sum of `value` (a fixed-order tree).
    s[t] = value
    syncthreads()
    stride = 64
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


def softmax_forward_kernel(cols, log, x, y):
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    m = -math.inf
    for j in range(t, cols, 128):
        m = max(m, x[base + j])
    m = block_reduce(s, t, m, True)
    total = 0.0
    for j in range(t, cols, 128):
        total += math.exp(x[base + j] - m)
    total = block_reduce(s, t, total, False)
    for j in range(t, cols, 128):
        if log:
            y[base + j] = x[base + j] - m - math.log(total)
        else:
            y[base + j] = math.exp(x[base + j] - m) / total


def softmax_backward_kernel(cols, log, y, dy, dx):
    # softmax:      dx = y * (dy - sum(dy * y));   log-softmax: dx = dy - exp(y) * sum(dy)
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    acc = 0.0
    for j in range(t, cols, 128):
        acc += dy[base + j] if log else dy[base + j] * y[base + j]
    acc = block_reduce(s, t, acc, False)
    for j in range(t, cols, 128):
        if log:
            dx[base + j] = dy[base + j] - math.exp(y[base + j]) * acc
        else:
            dx[base + j] = y[base + j] * (dy[base + j] - acc)


# -- layer norm --------------------------------------------------------------------------------------
def layer_norm_forward_kernel(cols, eps, x, gamma, beta, y, mean, rstd):
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    acc = 0.0
    for j in range(t, cols, 128):
        acc += x[base + j]
    mu = block_reduce(s, t, acc, False) / cols
    acc = 0.0
    for j in range(t, cols, 128):
        d = x[base + j] - mu
        acc += d * d
    r = 1.0 / math.sqrt(block_reduce(s, t, acc, False) / cols + eps)
    for j in range(t, cols, 128):
        y[base + j] = (x[base + j] - mu) * r * gamma[j] + beta[j]
    if t == 0:
        mean[row] = mu
        rstd[row] = r


def layer_norm_backward_kernel(cols, x, dy, gamma, mean, rstd, dx):
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    mu, r = mean[row], rstd[row]
    a = 0.0
    b = 0.0
    for j in range(t, cols, 128):
        g = dy[base + j] * gamma[j]
        a += g
        b += g * (x[base + j] - mu) * r
    a = block_reduce(s, t, a, False) / cols
    b = block_reduce(s, t, b, False) / cols
    for j in range(t, cols, 128):
        xhat = (x[base + j] - mu) * r
        dx[base + j] = r * (dy[base + j] * gamma[j] - a - xhat * b)


def layer_norm_params_backward_kernel(rows, cols, x, dy, mean, rstd, dgamma, dbeta):
    # One thread per column j: sums over the rows, in row order.
    j = cuda.grid(1)
    if j < cols:
        dg = 0.0
        db = 0.0
        for row in range(rows):
            xhat = (x[row * cols + j] - mean[row]) * rstd[row]
            dg += dy[row * cols + j] * xhat
            db += dy[row * cols + j]
        dgamma[j] = dg
        dbeta[j] = db


# -- pooling -----------------------------------------------------------------------------------------
def pooling_forward_kernel(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, average, x, sx, y, sy):
    # One thread per output element; sx, sy: element strides of N, C, H, W.
    i = cuda.grid(1)
    if i < n * c * oh * ow:
        ox = i % ow
        oy = i // ow % oh
        ch = i // (ow * oh) % c
        b = i // (ow * oh * c)
        best = -math.inf
        total = 0.0
        for dy_ in range(kh):
            for dx_ in range(kw):
                iy = oy * sh - ph + dy_
                ix = ox * sw - pw + dx_
                if 0 <= iy < h and 0 <= ix < w:
                    v = x[b * sx[0] + ch * sx[1] + iy * sx[2] + ix * sx[3]]
                    best = max(best, v)
                    total += v
        out = b * sy[0] + ch * sy[1] + oy * sy[2] + ox * sy[3]
        y[out] = total / (kh * kw) if average else best


def pooling_backward_kernel(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, average, x, sx, y, dy, sy, dx):
    # One thread per input element gathers the gradients of every window it is in (no atomics);
    # for max pooling, the gradient goes to the first element equal to the window's maximum.
    i = cuda.grid(1)
    if i < n * c * h * w:
        ix = i % w
        iy = i // w % h
        ch = i // (w * h) % c
        b = i // (w * h * c)
        grad = 0.0
        for oy in range(oh):
            for ox in range(ow):
                y0, x0 = oy * sh - ph, ox * sw - pw
                if y0 <= iy < y0 + kh and x0 <= ix < x0 + kw:
                    g = dy[b * sy[0] + ch * sy[1] + oy * sy[2] + ox * sy[3]]
                    if average:
                        grad += g / (kh * kw)
                    else:
                        m = y[b * sy[0] + ch * sy[1] + oy * sy[2] + ox * sy[3]]
                        first = True
                        for wy in range(max(y0, 0), min(y0 + kh, h)):
                            for wx in range(max(x0, 0), min(x0 + kw, w)):
                                if first and x[b * sx[0] + ch * sx[1] + wy * sx[2] + wx * sx[3]] == m:
                                    first = False
                                    if wy == iy and wx == ix:
                                        grad += g
        dx[b * sx[0] + ch * sx[1] + iy * sx[2] + ix * sx[3]] = grad


# -- dropout -----------------------------------------------------------------------------------------
@cuda.jit(device=True)
def uniform(seed, i):
    # A counter-based generator: a few rounds of an integer hash (splitmix-like) of (seed, i), in [0, 1).
    z = (seed * 2654435761 + i * 40503 + 12345) % 2147483648
    for _ in range(3):
        z = (z * 1103515245 + 12345) % 2147483648
        z = (z ^ (z // 65536)) % 2147483648
    return z / 2147483648.0


def dropout_kernel(n, p, seed, backward, x, mask, y):
    i = cuda.grid(1)
    while i < n:
        if not backward:
            mask[i] = uniform(seed, i) >= p
        y[i] = x[i] / (1.0 - p) if mask[i] else x[i] * 0
        i += cuda.gridsize(1)


# -- the API -----------------------------------------------------------------------------------------
class Handle:
    """A cuDNN-style handle: the API and device its routines launch on, and its kernels."""

    def __init__(self, api, device: int = 0):
        self.api, self.device = api, device
        self.kernels = {f.__name__: api.jit(f) for f in (
            activation_kernel, softmax_forward_kernel, softmax_backward_kernel, layer_norm_forward_kernel,
            layer_norm_backward_kernel, layer_norm_params_backward_kernel, pooling_forward_kernel,
            pooling_backward_kernel, dropout_kernel)}

    @property
    def stream(self):
        return Stream(self.api.current_context(self.device))


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


def _flat(x, name: str, size: int | None = None, dtype=np.float32) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise DnnError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype != dtype:
        raise DnnError(f"{name} must hold {np.dtype(dtype)}, not {x.dtype}")
    if not x.is_c_contiguous():
        raise DnnError(f"{name} must be C-contiguous")
    if size is not None and x.size != size:
        raise DnnError(f"{name} has {x.size} elements, the descriptor says {size}")
    return DeviceNDArray((x.size,), (x.dtype.itemsize,), x.dtype, x.context, x.memory, x.ptr)


def _blocks(n: int) -> int:
    return max(1, min(1024, -(-n // THREADS)))


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
            handle.kernels["activation_kernel"][_blocks(n), THREADS, handle.stream](
                np.int64(n), np.int32(ACTIVATIONS[mode]), backward, fx, fdy, fout)


def _rows(x, name: str) -> tuple[int, int]:
    if not isinstance(x, DeviceNDArray) or x.ndim < 1:
        raise DnnError(f"{name} must be a device array with at least one dimension")
    cols = x.shape[-1]
    return x.size // cols if cols else 0, cols


def softmax_forward(handle: Handle, x, y, log: bool = False) -> None:
    """y = softmax(x) or log_softmax(x) over the last dimension (cudnnSoftmaxForward, instance mode)."""
    rows, cols = _rows(x, "x")
    fx, fy = _flat(x, "x"), _flat(y, "y", x.size)
    with trace.span(4, "softmax_forward", rows=rows, cols=cols, log=log):
        if rows and cols:
            handle.kernels["softmax_forward_kernel"][rows, ROW_THREADS, handle.stream](np.int64(cols), log, fx, fy)


def softmax_backward(handle: Handle, y, dy, dx, log: bool = False) -> None:
    """dx from the forward output y and dy (cudnnSoftmaxBackward)."""
    rows, cols = _rows(y, "y")
    fy, fdy, fdx = _flat(y, "y"), _flat(dy, "dy", y.size), _flat(dx, "dx", y.size)
    with trace.span(4, "softmax_backward", rows=rows, cols=cols, log=log):
        if rows and cols:
            handle.kernels["softmax_backward_kernel"][rows, ROW_THREADS, handle.stream](
                np.int64(cols), log, fy, fdy, fdx)


def layer_norm_forward(handle: Handle, x, gamma, beta, eps: float, y, mean, rstd) -> None:
    """y = (x - mean) * rstd * gamma + beta over the last dimension; saves mean and rstd per row."""
    rows, cols = _rows(x, "x")
    args = [_flat(x, "x"), _flat(gamma, "gamma", cols), _flat(beta, "beta", cols), _flat(y, "y", x.size),
            _flat(mean, "mean", rows), _flat(rstd, "rstd", rows)]
    with trace.span(4, "layer_norm_forward", rows=rows, cols=cols, eps=eps):
        if rows and cols:
            handle.kernels["layer_norm_forward_kernel"][rows, ROW_THREADS, handle.stream](
                np.int64(cols), np.float32(eps), *args)


def layer_norm_backward(handle: Handle, x, dy, gamma, mean, rstd, dx, dgamma, dbeta) -> None:
    """dx, dgamma, dbeta from x, dy and the forward's saved mean and rstd."""
    rows, cols = _rows(x, "x")
    fx, fdy, fg = _flat(x, "x"), _flat(dy, "dy", x.size), _flat(gamma, "gamma", cols)
    fm, fr, fdx = _flat(mean, "mean", rows), _flat(rstd, "rstd", rows), _flat(dx, "dx", x.size)
    fdg, fdb = _flat(dgamma, "dgamma", cols), _flat(dbeta, "dbeta", cols)
    with trace.span(4, "layer_norm_backward", rows=rows, cols=cols):
        if rows and cols:
            handle.kernels["layer_norm_backward_kernel"][rows, ROW_THREADS, handle.stream](
                np.int64(cols), fx, fdy, fg, fm, fr, fdx)
            handle.kernels["layer_norm_params_backward_kernel"][-(-cols // THREADS), THREADS, handle.stream](
                np.int64(rows), np.int64(cols), fx, fdy, fm, fr, fdg, fdb)


def _pool_geometry(desc, window, stride, padding) -> tuple:
    n, c, h, w = desc.dims
    (kh, kw), (sh, sw), (ph, pw) = window, stride, padding
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0 or ph >= kh or pw >= kw:
        raise DnnError(f"bad pooling window {window}, stride {stride} or padding {padding}")
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise DnnError(f"a {kh}x{kw} window does not fit a {h}x{w} input with padding {padding}")
    return n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw


def pooling_output(desc: TensorDescriptor, window, stride, padding) -> TensorDescriptor:
    """The output descriptor of a pooling (cudnnGetPooling2dForwardOutputDim)."""
    n, c, _, _, oh, ow, *_ = _pool_geometry(desc, window, stride, padding)
    return TensorDescriptor((n, c, oh, ow), desc.layout)


def pooling_forward(handle: Handle, mode: str, desc: TensorDescriptor, x, window, stride, padding, y) -> None:
    """Max or average pooling over 2-D windows (cudnnPoolingForward); average divides by the window size
    (padding counts, as CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING)."""
    if mode not in ("max", "average"):
        raise DnnError(f"pooling mode must be 'max' or 'average', not {mode!r}")
    geometry = _pool_geometry(desc, window, stride, padding)
    out = pooling_output(desc, window, stride, padding)
    fx, fy = _flat(x, "x", desc.size), _flat(y, "y", out.size)
    sx, sy = (handle.api.to_device(np.array(d.strides(), np.int64)) for d in (desc, out))
    with trace.span(4, "pooling_forward", mode=mode, dims=desc.dims, window=window, stride=stride):
        if out.size:
            handle.kernels["pooling_forward_kernel"][-(-out.size // THREADS), THREADS, handle.stream](
                *(np.int64(v) for v in geometry), mode == "average", fx, sx, fy, sy)


def pooling_backward(handle: Handle, mode: str, desc: TensorDescriptor, x, y, dy, window, stride, padding,
                     dx) -> None:
    """dx from x, the forward output y and dy (cudnnPoolingBackward)."""
    if mode not in ("max", "average"):
        raise DnnError(f"pooling mode must be 'max' or 'average', not {mode!r}")
    geometry = _pool_geometry(desc, window, stride, padding)
    out = pooling_output(desc, window, stride, padding)
    fx, fdx = _flat(x, "x", desc.size), _flat(dx, "dx", desc.size)
    fy, fdy = _flat(y, "y", out.size), _flat(dy, "dy", out.size)
    sx, sy = (handle.api.to_device(np.array(d.strides(), np.int64)) for d in (desc, out))
    with trace.span(4, "pooling_backward", mode=mode, dims=desc.dims, window=window, stride=stride):
        if desc.size:
            handle.kernels["pooling_backward_kernel"][-(-desc.size // THREADS), THREADS, handle.stream](
                *(np.int64(v) for v in geometry), mode == "average", fx, sx, fy, fdy, sy, fdx)


def dropout_forward(handle: Handle, p: float, seed: int, x, y, mask) -> None:
    """y = x * mask / (1 - p), mask drawn with probability 1 - p from (seed, index) (cudnnDropoutForward);
    mask is a bool device array kept for the backward pass."""
    if not 0 <= p < 1:
        raise DnnError(f"dropout probability must be in [0, 1), not {p}")
    fx, fy, fm = _flat(x, "x"), _flat(y, "y", x.size), _flat(mask, "mask", x.size, np.bool_)
    with trace.span(4, "dropout_forward", p=p, seed=seed, elements=x.size):
        if x.size:
            handle.kernels["dropout_kernel"][_blocks(x.size), THREADS, handle.stream](
                np.int64(x.size), np.float32(p), np.int64(seed), False, fx, fm, fy)


def dropout_backward(handle: Handle, p: float, dy, mask, dx) -> None:
    """dx = dy * mask / (1 - p) (cudnnDropoutBackward)."""
    fdy, fdx, fm = _flat(dy, "dy"), _flat(dx, "dx", dy.size), _flat(mask, "mask", dy.size, np.bool_)
    with trace.span(4, "dropout_backward", p=p, elements=dy.size):
        if dy.size:
            handle.kernels["dropout_kernel"][_blocks(dy.size), THREADS, handle.stream](
                np.int64(dy.size), np.float32(p), np.int64(0), True, fdy, fm, fdx)
