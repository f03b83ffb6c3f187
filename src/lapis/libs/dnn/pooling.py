"""Layer 4, DNN: 2-D max and average pooling, forward and backward (cudnnPoolingForward/Backward)."""

import math

import numpy as np

from lapis import cuda, trace
from lapis.libs.dnn.descriptors import DnnError, TensorDescriptor
from lapis.libs.dnn.handle import THREADS, Handle, _flat


def pooling_forward_kernel(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, average, x, sx, y, sy):
    # One thread per output element; sx, sy: element strides of N, C, H, W.
    i = cuda.grid(1)
    if i < n * c * oh * ow:
        ox, rest = i % ow, i // ow                     # each quotient divides the last: three divisions
        oy, rest = rest % oh, rest // oh
        ch, b = rest % c, rest // c
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
    # One thread per input element gathers the gradients of the windows it is in (no atomics): the
    # outputs oy with oy * sh - ph <= iy < oy * sh - ph + kh, and likewise for ox. For max pooling,
    # the gradient goes to the first element equal to the window's maximum.
    i = cuda.grid(1)
    if i < n * c * h * w:
        ix, rest = i % w, i // w
        iy, rest = rest % h, rest // h
        ch, b = rest % c, rest // c
        grad = 0.0
        for oy in range(max(0, (iy + ph - kh) // sh + 1), min(oh, (iy + ph) // sh + 1)):
            for ox in range(max(0, (ix + pw - kw) // sw + 1), min(ow, (ix + pw) // sw + 1)):
                y0, x0 = oy * sh - ph, ox * sw - pw
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
            handle.kernel(pooling_forward_kernel)[-(-out.size // THREADS), THREADS, handle.stream](
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
            handle.kernel(pooling_backward_kernel)[-(-desc.size // THREADS), THREADS, handle.stream](
                *(np.int64(v) for v in geometry), mode == "average", fx, sx, fy, fdy, sy, fdx)
