"""Layer 4, DNN: 2-D max and average pooling, forward and backward (cudnnPoolingForward/Backward)."""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import float32
from lapis.libs.dnn.descriptors import DnnError, TensorDescriptor
from lapis.libs.dnn.handle import THREADS, Handle, _ceil_div, _flat
from lapis.libs.kernels import divider_word, quotient, split_index

POOL_MAX_GRID_Y = 65535            # blocks along a plane's pixels: past them each thread takes several


# A block of up to THREADS threads works along one (image, channel) plane, blockIdx.x, over its pixels (a grid-stride
# loop along y), so a thread divides only to find its pixel's row and its window, and those quotients take the
# host's magic multipliers (`kernels.quotient`, as offset_of's) instead of 64-bit divisions of dozens of
# instructions. The element strides of N, C, H and W of x (and dx) and of y (and dy) are kernel arguments.
def pooling_forward_kernel(c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, average, by_c, by_ow, x, xn, xc, xh, xw,
                           y, yn, yc, yh, yw):
    # One thread per output element of plane blockIdx.x.
    b, ch = split_index(cuda.blockIdx.x, c, by_c)
    o = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    while o < oh * ow:
        oy, ox = split_index(o, ow, by_ow)
        best = float32(-math.inf)                      # float32 throughout, as the tensors (cuDNN's accumulator)
        total = float32(0.0)
        for dy_ in range(kh):
            for dx_ in range(kw):
                iy = oy * sh - ph + dy_
                ix = ox * sw - pw + dx_
                if 0 <= iy < h and 0 <= ix < w:
                    v = x[b * xn + ch * xc + iy * xh + ix * xw]
                    if v > best or v != v:                 # a NaN wins and stays (CUDNN_PROPAGATE_NAN, torch's)
                        best = v
                    total += v
        y[b * yn + ch * yc + oy * yh + ox * yw] = total / float32(kh * kw) if average else best
        o += cuda.gridDim.y * cuda.blockDim.x


def pooling_backward_kernel(c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, average, by_c, by_w, by_sh, by_sw, x, xn, xc,
                            xh, xw, y, dy, yn, yc, yh, yw, dx):
    # One thread per input element of plane blockIdx.x gathers the gradients of the windows it is in (no
    # atomics): the outputs oy with oy * sh - ph <= iy < oy * sh - ph + kh, that is from
    # ceil((iy + ph - kh + 1) / sh) (the numerator clamped at 0: no window starts above the image) to
    # (iy + ph) // sh, and likewise for ox. For max pooling, the gradient goes to the first element equal to
    # the window's maximum (its first NaN, where the maximum is NaN).
    b, ch = split_index(cuda.blockIdx.x, c, by_c)
    i = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    while i < h * w:
        iy, ix = split_index(i, w, by_w)
        grad = float32(0.0)
        first_y, last_y = quotient(max(0, iy + ph - kh + sh), by_sh), quotient(iy + ph, by_sh)
        first_x, last_x = quotient(max(0, ix + pw - kw + sw), by_sw), quotient(ix + pw, by_sw)
        for oy in range(first_y, min(oh, last_y + 1)):
            for ox in range(first_x, min(ow, last_x + 1)):
                y0, x0 = oy * sh - ph, ox * sw - pw
                at = b * yn + ch * yc + oy * yh + ox * yw
                g = dy[at]
                if average:
                    grad += g / float32(kh * kw)
                else:
                    m = y[at]
                    first = True
                    for wy in range(max(y0, 0), min(y0 + kh, h)):
                        for wx in range(max(x0, 0), min(x0 + kw, w)):
                            v = x[b * xn + ch * xc + wy * xh + wx * xw]
                            if first and (v == m or (v != v and m != m)):      # a NaN maximum is its first NaN
                                first = False
                                if wy == iy and wx == ix:
                                    grad += g
        dx[b * xn + ch * xc + iy * xh + ix * xw] = grad
        i += cuda.gridDim.y * cuda.blockDim.x


def _plane_launch(n: int, c: int, pixels: int) -> tuple[tuple[int, int], int]:
    """(grid, block) for the kernels above: a block per plane (a warp-multiple of threads, up to THREADS, so a
    small plane leaves few idle), along y as many as its pixels need; refuses sizes their quotients cannot
    take (2^31 planes or pixels)."""
    if n * c >= 1 << 31 or pixels >= 1 << 31:
        raise DnnError(f"pooling takes fewer than 2^31 planes and pixels per plane, not {n * c} x {pixels}")
    threads = min(THREADS, 32 * _ceil_div(pixels, 32))
    return (n * c, min(POOL_MAX_GRID_Y, _ceil_div(pixels, threads))), threads


def _words(*divisors: int) -> list:
    return [np.int64(divider_word(d)) for d in divisors]


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
    sx, sy = (tuple(np.int64(s) for s in d.strides()) for d in (desc, out))
    n, c, _, _, oh, ow, *_ = geometry
    with trace.span(4, "pooling_forward", mode=mode, dims=desc.dims, window=window, stride=stride):
        if out.size:
            handle.kernel(pooling_forward_kernel)[(*_plane_launch(n, c, oh * ow), handle.stream)](
                *(np.int64(v) for v in geometry[1:]), mode == "average", *_words(c, ow), fx, *sx, fy, *sy)


def pooling_backward(handle: Handle, mode: str, desc: TensorDescriptor, x, y, dy, window, stride, padding,
                     dx) -> None:
    """dx from x, the forward output y and dy (cudnnPoolingBackward)."""
    if mode not in ("max", "average"):
        raise DnnError(f"pooling mode must be 'max' or 'average', not {mode!r}")
    geometry = _pool_geometry(desc, window, stride, padding)
    out = pooling_output(desc, window, stride, padding)
    fx, fdx = _flat(x, "x", desc.size), _flat(dx, "dx", desc.size)
    fy, fdy = _flat(y, "y", out.size), _flat(dy, "dy", out.size)
    sx, sy = (tuple(np.int64(s) for s in d.strides()) for d in (desc, out))
    n, c, h, w, _, _, _, _, sh, sw, _, _ = geometry
    with trace.span(4, "pooling_backward", mode=mode, dims=desc.dims, window=window, stride=stride):
        if desc.size:
            handle.kernel(pooling_backward_kernel)[(*_plane_launch(n, c, h * w), handle.stream)](
                *(np.int64(v) for v in geometry[1:]), mode == "average", *_words(c, w, sh, sw), fx, *sx, fy, fdy,
                *sy, fdx)
