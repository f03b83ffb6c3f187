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

Batch norm reduces each channel in one block. Convolutions (NCHW, KCRS filters, padding,
stride, dilation, groups) come in three algorithms in each direction (forward, backward-data,
backward-filter): "implicit_gemm" (the direction's GEMM, tiled through shared memory, its unfolded
operand gathered as it is staged and never stored), "gemm" (the unfolded input or gradient
materialized in a caller's workspace, multiplied with the BLAS gemm and its tuned tiles, as cuDNN's
ALGO_GEMM does) and "direct" (a thread per output). `find_convolution_*_algorithm` runs each on
the problem and ranks them by simulated device time, as cudnnFindConvolution*Algorithm does, and
`get_convolution_algorithm` returns the winner for that profile and shape afterwards.

Scaled dot-product attention is fused in the flash-attention style: each thread owns a query
row and walks the keys in tiles staged in shared memory, keeping a running maximum and sum
(online softmax), so the T x T score matrix is never stored; the backward pass recomputes the
probabilities from the saved log-sum-exp.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, shared, syncthreads, threadIdx
from lapis.libs import blas, kernels
from lapis.libs.handle import LibraryHandle
from lapis.libs.reduction import block_reduce

THREADS = 256
ROW_THREADS = 128
SPLIT_K_MIN_DEPTH = 64
SPLIT_K_TARGET_BLOCKS = 128
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
    # A block of 32 columns x 16 row lanes: lane ty sums rows ty, ty + 16, ...; then one thread per
    # column adds the 16 partial sums in lane order (deterministic).
    sg = shared.array((16, 32), np.float32)
    sb = shared.array((16, 32), np.float32)
    tx, ty = threadIdx.x, threadIdx.y
    j = blockIdx.x * 32 + tx
    dg = 0.0
    db = 0.0
    if j < cols:
        for row in range(ty, rows, 16):
            xhat = (x[row * cols + j] - mean[row]) * rstd[row]
            dg += dy[row * cols + j] * xhat
            db += dy[row * cols + j]
    sg[ty, tx] = dg
    sb[ty, tx] = db
    syncthreads()
    if ty == 0 and j < cols:
        dg = 0.0
        db = 0.0
        for lane in range(16):
            dg += sg[lane, tx]
            db += sb[lane, tx]
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
    # One thread per input element gathers the gradients of the windows it is in (no atomics): the
    # outputs oy with oy * sh - ph <= iy < oy * sh - ph + kh, and likewise for ox. For max pooling,
    # the gradient goes to the first element equal to the window's maximum.
    i = cuda.grid(1)
    if i < n * c * h * w:
        ix = i % w
        iy = i // w % h
        ch = i // (w * h) % c
        b = i // (w * h * c)
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


# -- batch norm --------------------------------------------------------------------------------------
def batch_norm_forward_kernel(n, c, hw, sx, training, eps, momentum, x, gamma, beta, running_mean, running_var,
                              y, mean, rstd):
    # One block per channel: statistics over N, H, W (training) or the running ones (inference).
    s = shared.array(128, np.float32)
    ch, t = blockIdx.x, threadIdx.x
    count = n * hw
    if training:
        acc = 0.0
        for e in range(t, count, 128):
            acc += x[e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]]
        mu = block_reduce(s, t, acc, False) / count
        acc = 0.0
        for e in range(t, count, 128):
            d = x[e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]] - mu
            acc += d * d
        var = block_reduce(s, t, acc, False) / count
        if t == 0:
            mean[ch] = mu
            rstd[ch] = 1.0 / math.sqrt(var + eps)
            unbiased = var * count / max(count - 1, 1)
            running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mu
            running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * unbiased
    else:
        mu = running_mean[ch]
        var = running_var[ch]
    r = 1.0 / math.sqrt(var + eps)
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        y[at] = (x[at] - mu) * r * gamma[ch] + beta[ch]


def batch_norm_backward_kernel(n, c, hw, sx, x, dy, gamma, mean, rstd, dx, dgamma, dbeta):
    s = shared.array(128, np.float32)
    ch, t = blockIdx.x, threadIdx.x
    count = n * hw
    mu, r = mean[ch], rstd[ch]
    a = 0.0
    b = 0.0
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        a += dy[at]
        b += dy[at] * (x[at] - mu) * r
    a = block_reduce(s, t, a, False)
    b = block_reduce(s, t, b, False)
    if t == 0:
        dbeta[ch] = a
        dgamma[ch] = b
    g = gamma[ch] * r / count
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        dx[at] = g * (count * dy[at] - a - (x[at] - mu) * r * b)


# -- convolution -------------------------------------------------------------------------------------
class ConvGeometry(NamedTuple):
    """A convolution's sizes and its tensors' element strides: every convolution kernel takes these as
    its first parameters, in this order (a struct passed by value, as cuDNN's kernels take theirs).
    x is n x c x h x wd, the filters k x c/groups x r x s, y n x k x p x q; the strides let one kernel
    read NCHW or NHWC tensors and KCRS or KRSC filters."""
    n: int
    c: int
    h: int
    wd: int
    k: int
    r: int
    s: int
    p: int
    q: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dil_h: int
    dil_w: int
    groups: int
    xs_n: int                   # x's element strides along n, c, h, w
    xs_c: int
    xs_h: int
    xs_w: int
    ys_n: int                   # y's (and dy's) along n, k, p, q
    ys_k: int
    ys_p: int
    ys_q: int
    ws_k: int                   # the filters' along k, c, r, s
    ws_c: int
    ws_r: int
    ws_s: int

    def kernel_args(self) -> tuple:
        """The fields as the kernels' int32 parameters."""
        return tuple(np.int32(v) for v in self)


def conv_direct_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, w, y):
    i = cuda.grid(1)
    if i < n * k * p * q:
        oq = i % q
        op = i // q % p
        ok = i // (q * p) % k
        b = i // (q * p * k)
        cg = c // groups
        first = ok // (k // groups) * cg
        acc = 0.0
        for cc in range(cg):
            for rr in range(r):
                iy = op * stride_h - pad_h + rr * dil_h
                if 0 <= iy < h:
                    for ss in range(s):
                        ix = oq * stride_w - pad_w + ss * dil_w
                        if 0 <= ix < wd:
                            acc += x[b * xs_n + (first + cc) * xs_c + iy * xs_h + ix * xs_w] * \
                                w[ok * ws_k + cc * ws_c + rr * ws_r + ss * ws_s]
        y[b * ys_n + ok * ys_k + op * ys_p + oq * ys_q] = acc


CONV_DIRECTIONS = ("forward", "backward_data", "backward_filter")


def make_conv_gemm_kernel(direction: str):
    """The implicit-GEMM kernel of one convolution direction: a rows x columns product over `depth`,
    tiled 32 x 32 in slices of 8 through shared memory, whose operands are gathered from the tensors
    as they are staged (the unfolded matrix is never stored):

        forward          y[k, (b, p, q)]   = w[k, (c, r, s)]  x_unfolded[(c, r, s), (b, p, q)]
        backward_data    dx[c, (b, h, w)]  = w^T[c, (k, r, s)] dy_unfolded[(k, r, s), (b, h, w)]
        backward_filter  dw[k, (c, r, s)]  = dy[k, (b, p, q)] x_unfolded^T[(b, p, q), (c, r, s)]

    per group. A thread's depth index is kept as its three digits (the mixed radix of the bracket)
    and advanced by 8 with carries, so the loop divides nothing. Backward-filter's depth (every output
    pixel of every image) is long and its output small, so it is split over grid z (split-K): each
    block sums a `chunk` of the depth and adds its tile into the zeroed dw with atomics. The direction
    is a closure constant, so each compiles to its own code."""
    MODE = direction

    def conv_gemm_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                         xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, chunk, a_src, b_src,
                         out):
        # forward: a_src = w, b_src = x, out = y; backward_data: w, dy, dx; backward_filter: dy, x, dw
        sa = shared.array((8, 32), np.float32)
        sb = shared.array((8, 33), np.float32)
        kg, cg = k // groups, c // groups
        group = blockIdx.z % groups
        if MODE == "forward":
            rows, columns, depth, rad1, rad2 = kg, n * p * q, cg * r * s, r, s
        elif MODE == "backward_data":
            rows, columns, depth, rad1, rad2 = cg, n * h * wd, kg * r * s, r, s
        else:
            rows, columns, depth, rad1, rad2 = kg, cg * r * s, n * p * q, p, q
        tx, ty = threadIdx.x, threadIdx.y                  # a 16 x 16 block; each thread 2 x 2 outputs
        row0 = blockIdx.y * 32
        col0 = blockIdx.x * 32
        acc00 = 0.0
        acc01 = 0.0
        acc10 = 0.0
        acc11 = 0.0
        lid = ty * 16 + tx
        dd = lid // 32                                     # 256 threads stage 8 x 32 of each operand
        m = lid % 32
        row = row0 + m
        col = col0 + m
        # the column's digits: (b, op, oq), (b, iy, ix) or (cc, rr, ss); fixed for the thread
        if MODE == "forward":
            c0, c1, c2 = col // (q * p), col // q % p, col % q
        elif MODE == "backward_data":
            c0, c1, c2 = col // (wd * h), col // wd % h, col % wd
        else:
            c0, c1, c2 = col // (r * s), col // s % r, col % s
        start = blockIdx.z // groups * chunk
        end = min(depth, start + chunk)
        d = start + dd
        d0, d1, d2 = d // (rad1 * rad2), d // rad2 % rad1, d % rad2
        i0, i1, i2 = 8 // (rad1 * rad2), 8 // rad2 % rad1, 8 % rad2
        unit_stride = stride_h == 1 and stride_w == 1            # backward-data divides by the stride otherwise
        for _ in range(start, end, 8):
            av = 0.0
            if row < rows and d < end:
                if MODE == "forward":                      # w[k, (cc, rr, ss)]
                    av = a_src[(group * kg + row) * ws_k + d0 * ws_c + d1 * ws_r + d2 * ws_s]
                elif MODE == "backward_data":              # w[(kk, rr, ss), c]
                    av = a_src[(group * kg + d0) * ws_k + row * ws_c + d1 * ws_r + d2 * ws_s]
                else:                                      # dy[k, (b, op, oq)]
                    av = a_src[d0 * ys_n + (group * kg + row) * ys_k + d1 * ys_p + d2 * ys_q]
            sa[dd, m] = av
            bv = 0.0
            if col < columns and d < end:
                if MODE == "forward":                      # depth (cc, rr, ss), column (b, op, oq)
                    iy = c1 * stride_h - pad_h + d1 * dil_h
                    ix = c2 * stride_w - pad_w + d2 * dil_w
                    if 0 <= iy < h and 0 <= ix < wd:
                        bv = b_src[c0 * xs_n + (group * cg + d0) * xs_c + iy * xs_h + ix * xs_w]
                elif MODE == "backward_data":              # depth (kk, rr, ss), column (b, iy, ix)
                    oy = c1 + pad_h - d1 * dil_h
                    ox = c2 + pad_w - d2 * dil_w
                    if unit_stride:
                        hit = 0 <= oy < p and 0 <= ox < q
                    else:
                        hit = oy >= 0 and ox >= 0 and oy % stride_h == 0 and ox % stride_w == 0
                        oy, ox = oy // stride_h, ox // stride_w
                        hit = hit and oy < p and ox < q
                    if hit:
                        bv = b_src[c0 * ys_n + (group * kg + d0) * ys_k + oy * ys_p + ox * ys_q]
                else:                                      # depth (b, op, oq), column (cc, rr, ss)
                    iy = d1 * stride_h - pad_h + c1 * dil_h
                    ix = d2 * stride_w - pad_w + c2 * dil_w
                    if 0 <= iy < h and 0 <= ix < wd:
                        bv = b_src[d0 * xs_n + (group * cg + c0) * xs_c + iy * xs_h + ix * xs_w]
            sb[dd, m] = bv
            syncthreads()
            for step in range(8):
                a0 = sa[step, ty]
                a1 = sa[step, ty + 16]
                b0 = sb[step, tx]
                b1 = sb[step, tx + 16]
                acc00 += a0 * b0
                acc01 += a0 * b1
                acc10 += a1 * b0
                acc11 += a1 * b1
            syncthreads()
            d += 8                                         # the digits follow with carries
            d2 += i2
            carry = 0
            if d2 >= rad2:
                d2 -= rad2
                carry = 1
            d1 += i1 + carry
            carry = 0
            if d1 >= rad1:
                d1 -= rad1
                carry = 1
            d0 += i0 + carry
        for i, j, v in ((0, 0, acc00), (0, 16, acc01), (16, 0, acc10), (16, 16, acc11)):
            orow, ocol = row0 + ty + i, col0 + tx + j
            if orow < rows and ocol < columns:
                if MODE == "forward":
                    out[ocol // (q * p) * ys_n + (group * kg + orow) * ys_k + ocol // q % p * ys_p
                        + ocol % q * ys_q] = v
                elif MODE == "backward_data":
                    out[ocol // (wd * h) * xs_n + (group * cg + orow) * xs_c + ocol // wd % h * xs_h
                        + ocol % wd * xs_w] = v
                else:
                    cuda.atomic.add(out, (group * kg + orow) * ws_k + ocol // (r * s) * ws_c
                                    + ocol // s % r * ws_r + ocol % s * ws_s, v)
    return conv_gemm_kernel


def conv_im2col_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, col):
    # col[b, ch, rr, ss, op, oq] = x[b, ch, op * stride - pad + rr * dil, ...] or 0: the unfolded input,
    # per image and group a (cg * r * s) x (p * q) matrix, that the "gemm" algorithm multiplies with BLAS
    i = cuda.grid(1)
    if i < n * c * r * s * p * q:
        oq = i % q
        op = i // q % p
        ss = i // (q * p) % s
        rr = i // (q * p * s) % r
        bc = i // (q * p * s * r)                          # b * c + ch
        iy = op * stride_h - pad_h + rr * dil_h
        ix = oq * stride_w - pad_w + ss * dil_w
        v = 0.0
        if 0 <= iy < h and 0 <= ix < wd:
            v = x[bc // c * xs_n + bc % c * xs_c + iy * xs_h + ix * xs_w]
        col[i] = v


def conv_col2im_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, col, dx):
    # dx[b, ch, iy, ix] = sum of the unfolded gradient's entries that came from (iy, ix): a gather, so
    # each element is summed by one thread in a fixed order
    i = cuda.grid(1)
    if i < n * c * h * wd:
        ix = i % wd
        iy = i // wd % h
        bc = i // (wd * h)
        acc = 0.0
        for rr in range(r):
            oy = iy + pad_h - rr * dil_h
            if oy >= 0 and oy % stride_h == 0 and oy // stride_h < p:
                for ss in range(s):
                    ox = ix + pad_w - ss * dil_w
                    if ox >= 0 and ox % stride_w == 0 and ox // stride_w < q:
                        acc += col[(((bc * r + rr) * s + ss) * p + oy // stride_h) * q + ox // stride_w]
        dx[bc // c * xs_n + bc % c * xs_c + iy * xs_h + ix * xs_w] = acc


def conv_backward_data_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                              xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, dy, w, dx):
    i = cuda.grid(1)
    if i < n * c * h * wd:
        ix = i % wd
        iy = i // wd % h
        ch = i // (wd * h) % c
        b = i // (wd * h * c)
        cg = c // groups
        kg = k // groups
        group = ch // cg
        acc = 0.0
        for kk in range(kg):
            ok = group * kg + kk
            for rr in range(r):
                ty = iy + pad_h - rr * dil_h
                if ty >= 0 and ty % stride_h == 0 and ty // stride_h < p:
                    for ss in range(s):
                        tx = ix + pad_w - ss * dil_w
                        if tx >= 0 and tx % stride_w == 0 and tx // stride_w < q:
                            acc += dy[b * ys_n + ok * ys_k + ty // stride_h * ys_p + tx // stride_w * ys_q] * \
                                w[ok * ws_k + ch % cg * ws_c + rr * ws_r + ss * ws_s]
        dx[b * xs_n + ch * xs_c + iy * xs_h + ix * xs_w] = acc


def conv_backward_filter_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                                xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, dy, dw):
    i = cuda.grid(1)
    cg = c // groups
    if i < k * cg * r * s:
        ss = i % s
        rr = i // s % r
        cc = i // (s * r) % cg
        ok = i // (s * r * cg)
        ch = ok // (k // groups) * cg + cc
        acc = 0.0
        for b in range(n):
            for op in range(p):
                iy = op * stride_h - pad_h + rr * dil_h
                if 0 <= iy < h:
                    for oq in range(q):
                        ix = oq * stride_w - pad_w + ss * dil_w
                        if 0 <= ix < wd:
                            acc += x[b * xs_n + ch * xs_c + iy * xs_h + ix * xs_w] * \
                                dy[b * ys_n + ok * ys_k + op * ys_p + oq * ys_q]
        dw[ok * ws_k + cc * ws_c + rr * ws_r + ss * ws_s] = acc


# -- attention ---------------------------------------------------------------------------------------
KEY_TILE, QUERY_TILE, MAX_HEAD_DIM = 32, 64, 64


def attention_forward_kernel(t_q, t_k, d, scale, causal, q, k, v, o, lse):
    # q, o: (BH, Tq, D); k, v: (BH, Tk, D); lse: (BH, Tq). Block: QUERY_TILE rows of one head.
    sk = shared.array((32, 64), np.float32)
    sv = shared.array((32, 64), np.float32)
    acc = cuda.local.array(64, np.float32)
    qi = cuda.local.array(64, np.float32)
    bh, t = blockIdx.y, threadIdx.x
    i = blockIdx.x * 64 + t
    live = i < t_q
    for c in range(d):
        qi[c] = q[(bh * t_q + i) * d + c] * scale if live else 0.0
        acc[c] = 0.0
    m = -math.inf
    total = 0.0
    for k0 in range(0, t_k, 32):
        for e in range(t, 32 * d, 64):                      # the block stages 32 keys and values
            jj = e // d
            c = e % d
            if k0 + jj < t_k:
                sk[jj, c] = k[(bh * t_k + k0 + jj) * d + c]
                sv[jj, c] = v[(bh * t_k + k0 + jj) * d + c]
        syncthreads()
        for jj in range(32):
            j = k0 + jj
            if live and j < t_k and (not causal or j <= i):
                score = 0.0
                for c in range(d):
                    score += qi[c] * sk[jj, c]
                new_max = max(m, score)
                correction = math.exp(m - new_max)
                weight = math.exp(score - new_max)
                total = total * correction + weight
                for c in range(d):
                    acc[c] = acc[c] * correction + weight * sv[jj, c]
                m = new_max
        syncthreads()
    if live:
        for c in range(d):
            o[(bh * t_q + i) * d + c] = acc[c] / total
        lse[bh * t_q + i] = m + math.log(total)


def attention_delta_kernel(rows, d, o, do, delta):
    # delta_i = sum_c dO[i, c] * O[i, c]
    i = cuda.grid(1)
    if i < rows:
        acc = 0.0
        for c in range(d):
            acc += do[i * d + c] * o[i * d + c]
        delta[i] = acc


def attention_dq_kernel(bh_count, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dq):
    # One thread per query row: dq_i = scale * sum_j p_ij (dO_i . v_j - delta_i) k_j
    row = cuda.grid(1)
    if row < bh_count * t_q:
        bh = row // t_q
        i = row % t_q
        base = row * d
        for c in range(d):
            dq[base + c] = 0.0
        m, dl = lse[row], delta[row]
        for j in range(t_k if not causal else min(t_k, i + 1)):
            kv = (bh * t_k + j) * d
            score = 0.0
            dp = 0.0
            for c in range(d):
                score += q[base + c] * k[kv + c]
                dp += do[base + c] * v[kv + c]
            ds = math.exp(score * scale - m) * (dp - dl) * scale
            for c in range(d):
                dq[base + c] += ds * k[kv + c]


def attention_dkv_kernel(bh_count, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dk, dv):
    # One thread per key row: dv_j = sum_i p_ij dO_i;  dk_j = scale * sum_i p_ij (dO_i . v_j - delta_i) q_i
    row = cuda.grid(1)
    if row < bh_count * t_k:
        bh = row // t_k
        j = row % t_k
        base = row * d
        for c in range(d):
            dk[base + c] = 0.0
            dv[base + c] = 0.0
        for i in range(j if causal else 0, t_q):
            qrow = bh * t_q + i
            qb = qrow * d
            score = 0.0
            dp = 0.0
            for c in range(d):
                score += q[qb + c] * k[base + c]
                dp += do[qb + c] * v[base + c]
            p = math.exp(score * scale - lse[qrow])
            ds = p * (dp - delta[qrow]) * scale
            for c in range(d):
                dv[base + c] += p * do[qb + c]
                dk[base + c] += ds * q[qb + c]


# Head dimensions that are powers of two up to 32 take the "lanes" kernels: a group of d lanes per row
# (lane c holds column c), each dot product a butterfly of shuffles within the group, so a thread does
# O(T) work instead of O(T d). Rows past the end compute on a clamped row and store nothing, so every
# lane of a warp runs the same loop and the shuffles never meet an inactive lane.
@cuda.jit(device=True)
def group_sum(value, lanes):
    off = lanes // 2
    while off > 0:
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, off)
        off //= 2
    return value


def attention_forward_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, o, lse):
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, i = r // t_q, r % t_q
    qc = q[r * d + c] * scale
    m = -math.inf
    total = 0.0
    acc = 0.0
    for j in range(t_k):
        kb = (bh * t_k + j) * d + c
        score = group_sum(qc * k[kb], d)
        if not causal or j <= i:                            # the online softmax of the tiled kernel
            new_max = max(m, score)
            correction = math.exp(m - new_max)
            weight = math.exp(score - new_max)
            total = total * correction + weight
            acc = acc * correction + weight * v[kb]
            m = new_max
    if row < rows:
        o[r * d + c] = acc / total
        if c == 0:
            lse[r] = m + math.log(total)


def attention_dq_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dq):
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, i = r // t_q, r % t_q
    qc, doc, m, dl = q[r * d + c], do[r * d + c], lse[r], delta[r]
    acc = 0.0
    for j in range(t_k):
        kb = (bh * t_k + j) * d + c
        kc = k[kb]
        score = group_sum(qc * kc, d)
        dp = group_sum(doc * v[kb], d)
        if not causal or j <= i:
            acc += math.exp(score * scale - m) * (dp - dl) * scale * kc
    if row < rows:
        dq[r * d + c] = acc


def attention_dkv_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dk, dv):
    # rows: key rows (BH x Tk)
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, j = r // t_k, r % t_k
    kc, vc = k[r * d + c], v[r * d + c]
    dkc = 0.0
    dvc = 0.0
    for i in range(t_q):
        qrow = bh * t_q + i
        qc, doc = q[qrow * d + c], do[qrow * d + c]
        score = group_sum(qc * kc, d)
        dp = group_sum(doc * vc, d)
        if not causal or j <= i:
            p = math.exp(score * scale - lse[qrow])
            dvc += p * doc
            dkc += p * (dp - delta[qrow]) * scale * qc
    if row < rows:
        dk[r * d + c] = dkc
        dv[r * d + c] = dvc


# -- the API -----------------------------------------------------------------------------------------
class Handle(LibraryHandle):
    """A cuDNN-style handle: the API, device and stream its routines launch on, and its kernels."""

    def __init__(self, api, device: int = 0):
        super().__init__(api, device)
        self.kernels = {f.__name__: api.jit(f) for f in (
            activation_kernel, softmax_forward_kernel, softmax_backward_kernel, layer_norm_forward_kernel,
            layer_norm_backward_kernel, layer_norm_params_backward_kernel, pooling_forward_kernel,
            pooling_backward_kernel, dropout_kernel, batch_norm_forward_kernel, batch_norm_backward_kernel,
            conv_direct_kernel, conv_backward_data_kernel, conv_backward_filter_kernel, conv_im2col_kernel,
            conv_col2im_kernel, attention_forward_kernel, attention_delta_kernel, attention_dq_kernel,
            attention_dkv_kernel, attention_forward_lanes_kernel, attention_dq_lanes_kernel,
            attention_dkv_lanes_kernel)}
        self.kernels.update({"conv_gemm_" + d: api.jit(make_conv_gemm_kernel(d)) for d in CONV_DIRECTIONS})
        self.blas = blas.create(api, device)          # the "gemm" convolutions multiply with cuBLAS's twin
        self.algorithms: dict[tuple, str] = {}        # what find steps chose, by direction, profile and shape

    def set_stream(self, stream) -> None:
        super().set_stream(stream)
        self.blas.set_stream(stream)                   # the "gemm" convolutions' products follow it


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
    return x.ravel()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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
            handle.kernels["layer_norm_params_backward_kernel"][_ceil_div(cols, 32), (32, 16), handle.stream](
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


def _channel_strides(handle, desc: TensorDescriptor):
    """Element strides of (n, c, h*w): an NHWC tensor's H and W fold into one index with stride C."""
    sn, sc, _, sw = desc.strides()
    return handle.api.to_device(np.array([sn, sc, sw], np.int64))


def batch_norm_forward(handle: Handle, desc: TensorDescriptor, x, gamma, beta, running_mean, running_var, eps: float,
                       y, mean=None, rstd=None, training: bool = True, momentum: float = 0.1) -> None:
    """Batch norm over N, H, W per channel (cudnnBatchNormalizationForwardTraining / Inference). Training
    saves mean and rstd for the backward pass and updates the running statistics (unbiased variance) by
    `momentum`, as torch.nn.BatchNorm2d does."""
    n, c, h, w = desc.dims
    fx, fy = _flat(x, "x", desc.size), _flat(y, "y", desc.size)
    params = [_flat(a, name, c) for a, name in ((gamma, "gamma"), (beta, "beta"), (running_mean, "running_mean"),
                                                 (running_var, "running_var"))]
    if training and (mean is None or rstd is None):
        raise DnnError("training batch norm needs mean and rstd arrays to save the statistics in")
    saved = [_flat(mean, "mean", c), _flat(rstd, "rstd", c)] if training else params[2:]
    with trace.span(4, "batch_norm_forward", dims=desc.dims, training=training, eps=eps):
        if c and desc.size:
            handle.kernels["batch_norm_forward_kernel"][c, ROW_THREADS, handle.stream](
                np.int64(n), np.int64(c), np.int64(h * w), _channel_strides(handle, desc), training,
                np.float32(eps), np.float32(momentum), fx, *params, fy, *saved)


def batch_norm_backward(handle: Handle, desc: TensorDescriptor, x, dy, gamma, mean, rstd, dx, dgamma,
                        dbeta) -> None:
    """dx, dgamma, dbeta of training batch norm from its saved mean and rstd (cudnnBatchNormalizationBackward)."""
    n, c, h, w = desc.dims
    arrays = [_flat(x, "x", desc.size), _flat(dy, "dy", desc.size), _flat(gamma, "gamma", c),
              _flat(mean, "mean", c), _flat(rstd, "rstd", c), _flat(dx, "dx", desc.size), _flat(dgamma, "dgamma", c),
              _flat(dbeta, "dbeta", c)]
    with trace.span(4, "batch_norm_backward", dims=desc.dims):
        if c and desc.size:
            handle.kernels["batch_norm_backward_kernel"][c, ROW_THREADS, handle.stream](
                np.int64(n), np.int64(c), np.int64(h * w), _channel_strides(handle, desc), *arrays)


@dataclass(frozen=True)
class ConvolutionDescriptor:
    """Padding, stride and dilation per spatial dimension, and the group count (cudnnConvolutionDescriptor)."""
    padding: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


@dataclass(frozen=True)
class FilterDescriptor:
    """Filters (K, C/groups, R, S) and their memory format (cudnnSetFilter4dDescriptor): "NCHW" is KCRS,
    "NHWC" is KRSC. Routines also take a plain (K, C/groups, R, S) tuple, meaning KCRS. It reads as
    its dimensions (`k, cg, r, s = filt`)."""
    dims: tuple[int, int, int, int]
    layout: str = "NCHW"

    def __post_init__(self):
        if len(self.dims) != 4 or min(self.dims) < 1:
            raise DnnError(f"a filter descriptor takes four positive dimensions (K, C/groups, R, S), not {self.dims}")
        if self.layout not in ("NCHW", "NHWC"):
            raise DnnError(f"layout must be NCHW (KCRS) or NHWC (KRSC), not {self.layout!r}")

    def __iter__(self):
        return iter(self.dims)

    def __getitem__(self, i):
        return self.dims[i]

    def __len__(self) -> int:
        return 4

    def strides(self) -> tuple[int, int, int, int]:
        """Element strides of K, C, R, S."""
        _, cg, r, s = self.dims
        return (cg * r * s, r * s, s, 1) if self.layout == "NCHW" else (r * s * cg, 1, s * cg, cg)


def _filter(f) -> FilterDescriptor:
    return f if isinstance(f, FilterDescriptor) else FilterDescriptor(tuple(int(d) for d in f))


CONV_ALGORITHMS = ("implicit_gemm", "gemm", "direct")     # the same three in every direction
CONV_FORWARD_ALGORITHMS = CONV_BACKWARD_DATA_ALGORITHMS = CONV_BACKWARD_FILTER_ALGORITHMS = CONV_ALGORITHMS


def convolution_output(x: TensorDescriptor, filter_dims, conv: ConvolutionDescriptor) -> TensorDescriptor:
    """The output descriptor, in x's layout (cudnnGetConvolution2dForwardOutputDim); filter_dims are
    (K, C/groups, R, S) or a FilterDescriptor."""
    n, c, h, w = x.dims
    k, cg, r, s = _filter(filter_dims)
    if conv.groups < 1 or c % conv.groups or k % conv.groups or cg != c // conv.groups:
        raise DnnError(f"filter {filter_dims} does not match {c} input channels in {conv.groups} group(s)")
    if min(conv.stride + conv.dilation) < 1 or min(conv.padding) < 0:
        raise DnnError(f"bad convolution {conv}")
    p = (h + 2 * conv.padding[0] - conv.dilation[0] * (r - 1) - 1) // conv.stride[0] + 1
    q = (w + 2 * conv.padding[1] - conv.dilation[1] * (s - 1) - 1) // conv.stride[1] + 1
    if p < 1 or q < 1:
        raise DnnError(f"a {r}x{s} filter does not fit a {h}x{w} input with {conv}")
    return TensorDescriptor((n, k, p, q), x.layout)


def _conv_geometry(x: TensorDescriptor, filter_dims, conv) -> tuple[TensorDescriptor, ConvGeometry]:
    """The output descriptor and the kernels' geometry of a convolution."""
    out = convolution_output(x, filter_dims, conv)
    k, _, r, s = filter_dims
    return out, ConvGeometry(*x.dims, k, r, s, *out.dims[2:], *conv.padding, *conv.stride, *conv.dilation,
                             conv.groups, *x.strides(), *out.strides(), *_filter(filter_dims).strides())


def convolution_workspace_size(x_desc: TensorDescriptor, filter_dims, conv: ConvolutionDescriptor,
                               algorithm: str) -> int:
    """Bytes of workspace an algorithm needs, in any direction (cudnnGetConvolutionForwardWorkspaceSize
    and its backward twins): the unfolded input or gradient, n x (C R S) x (P Q) float32, for "gemm";
    nothing for the others."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out = convolution_output(x_desc, filter_dims, conv)
    n, c, _, _ = x_desc.dims
    return 4 * n * c * filter_dims[2] * filter_dims[3] * out.dims[2] * out.dims[3] if algorithm == "gemm" else 0


def _check_algorithm(algorithm: str, x_desc: TensorDescriptor | None = None, filter_dims=None) -> None:
    if algorithm not in CONV_ALGORITHMS:
        raise DnnError(f"algorithm must be one of {CONV_ALGORITHMS}, not {algorithm!r}")
    if x_desc is not None and not _supported(algorithm, x_desc, filter_dims):
        raise DnnError("the 'gemm' algorithm multiplies NCHW tensors and KCRS filters with BLAS; "
                       "use 'implicit_gemm' or 'direct' for NHWC (CUDNN_STATUS_NOT_SUPPORTED)")


def _supported(algorithm: str, x_desc: TensorDescriptor, filter_dims) -> bool:
    return algorithm != "gemm" or (x_desc.layout == "NCHW" and _filter(filter_dims).layout == "NCHW")


def _workspace(x_desc, filter_dims, conv, algorithm, workspace) -> DeviceNDArray | None:
    """The workspace as a flat float32 array, or a DnnError (before any launch) when it is missing or small."""
    need = convolution_workspace_size(x_desc, filter_dims, conv, algorithm)
    if not need:
        return None
    have = workspace.nbytes if isinstance(workspace, DeviceNDArray) else 0
    if have < need:
        raise DnnError(f"algorithm {algorithm!r} needs a workspace of {need} bytes, got "
                       f"{have if workspace is not None else 'none'}; convolution_workspace_size says how much")
    if not workspace.is_c_contiguous() or workspace.ptr % 4:
        raise DnnError("the workspace must be a contiguous, 4-byte aligned device array")
    return workspace.ravel().view(np.uint8)[:need].view(np.float32)


def _conv_launch(handle, direction, g: ConvGeometry, a_src, b_src, out) -> None:
    """The implicit-GEMM kernel of a direction over its (rows, columns) grid, one group (and for
    backward-filter, one depth chunk) per grid z."""
    kg, cg = g.k // g.groups, g.c // g.groups
    rows, columns, depth = {"forward": (kg, g.n * g.p * g.q, cg * g.r * g.s),
                            "backward_data": (cg, g.n * g.h * g.wd, kg * g.r * g.s),
                            "backward_filter": (kg, cg * g.r * g.s, g.n * g.p * g.q)}[direction]
    tiles = _ceil_div(columns, 32) * _ceil_div(rows, 32)
    splits = 1
    if direction == "backward_filter":
        # enough blocks to fill the units (about 128 on the big profiles), each summing at least 64 deep
        splits = max(1, min(_ceil_div(depth, SPLIT_K_MIN_DEPTH), _ceil_div(SPLIT_K_TARGET_BLOCKS, tiles * g.groups)))
        kernels.fill(handle.api, out, 0.0, handle.stream)
    chunk = 8 * max(1, _ceil_div(_ceil_div(depth, splits), 8))        # a multiple of the 8-deep slice
    splits = max(1, _ceil_div(depth, chunk))
    grid = (_ceil_div(columns, 32), _ceil_div(rows, 32), g.groups * splits)
    handle.kernels["conv_gemm_" + direction][grid, (16, 16), handle.stream](*g.kernel_args(), np.int32(chunk), a_src,
                                                                           b_src, out)


def _unfold(handle, g: ConvGeometry, fx, col) -> None:
    total = g.n * g.c * g.r * g.s * g.p * g.q
    handle.kernels["conv_im2col_kernel"][-(-total // THREADS), THREADS, handle.stream](*g.kernel_args(), fx, col)


def _group_gemms(g: ConvGeometry):
    """(groups, kg, crs, pq, column-block stride of a group in the unfolded matrix, per image stride)."""
    pq = g.p * g.q
    crs = g.c // g.groups * g.r * g.s
    return g.groups, g.k // g.groups, crs, pq, crs * pq, g.c * g.r * g.s * pq


def convolution_forward(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, w, conv: ConvolutionDescriptor,
                        y, algorithm: str = "implicit_gemm", workspace=None) -> None:
    """y = conv(x, w) (cudnnConvolutionForward) with the chosen algorithm; "gemm" unfolds x into the
    workspace and multiplies with BLAS (cuDNN's CUDNN_CONVOLUTION_FWD_ALGO_GEMM)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    fx, fw, fy = _flat(x, "x", x_desc.size), _flat(w, "w", int(np.prod(filter_dims))), _flat(y, "y", out.size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_forward", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm,
                    padding=conv.padding, stride=conv.stride, dilation=conv.dilation, groups=conv.groups):
        if not out.size:
            return
        if algorithm == "direct":
            handle.kernels["conv_direct_kernel"][-(-out.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fx, fw, fy)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "forward", geometry, fw, fx, fy)
        else:
            # per image b and group: y (kg x pq) = w_group (kg x crs) col (crs x pq), all row-major, which
            # column-major BLAS computes as y^T = col^T w_group^T: m = pq, n = kg, k = crs
            _unfold(handle, geometry, fx, col)
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                blas.gemm_strided_batched(handle.blas, "N", "N", pq, kg, crs, 1.0, col[grp * group_cols:], pq,
                                          image_cols, fw[grp * kg * crs:], crs, 0, 0.0, fy[grp * kg * pq:], pq,
                                          filter_dims[0] * pq, x_desc.dims[0])


def convolution_backward_data(handle: Handle, x_desc: TensorDescriptor, filter_dims, w, conv, dy, dx,
                              algorithm: str = "implicit_gemm", workspace=None) -> None:
    """dx from dy and the filters (cudnnConvolutionBackwardData); "gemm" forms the unfolded gradient
    w^T dy in the workspace with BLAS, then folds it back (col2im)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    fw, fdy, fdx = _flat(w, "w", int(np.prod(filter_dims))), _flat(dy, "dy", out.size), _flat(dx, "dx", x_desc.size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_backward_data", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm):
        if not x_desc.size:
            return
        if algorithm == "direct":
            handle.kernels["conv_backward_data_kernel"][-(-x_desc.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fdy, fw, fdx)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "backward_data", geometry, fw, fdy, fdx)
        else:
            # per image and group: dcol (crs x pq) = w_group^T (crs x kg) dy (kg x pq), row-major; in
            # column-major BLAS dcol^T = dy^T w_group: m = pq, n = crs, k = kg, w read transposed
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                blas.gemm_strided_batched(handle.blas, "N", "T", pq, crs, kg, 1.0, fdy[grp * kg * pq:], pq,
                                          filter_dims[0] * pq, fw[grp * kg * crs:], crs, 0, 0.0,
                                          col[grp * group_cols:], pq, image_cols, x_desc.dims[0])
            handle.kernels["conv_col2im_kernel"][-(-x_desc.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), col, fdx)


def convolution_backward_filter(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, conv, dy, dw,
                                algorithm: str = "implicit_gemm", workspace=None) -> None:
    """dw from x and dy (cudnnConvolutionBackwardFilter); "gemm" unfolds x into the workspace and sums
    dy col^T over the images with BLAS (beta = 1 after the first)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    size = int(np.prod(filter_dims))
    fx, fdy, fdw = _flat(x, "x", x_desc.size), _flat(dy, "dy", out.size), _flat(dw, "dw", size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_backward_filter", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm):
        if not size:
            return
        if algorithm == "direct":
            handle.kernels["conv_backward_filter_kernel"][-(-size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fx, fdy, fdw)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "backward_filter", geometry, fdy, fx, fdw)
        else:
            # per group: dw (kg x crs) = sum over images of dy (kg x pq) col^T (pq x crs), row-major; in
            # column-major BLAS dw^T = col dy^T: m = crs, n = kg, k = pq, col read transposed
            _unfold(handle, geometry, fx, col)
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                for b in range(x_desc.dims[0]):
                    blas.gemm(handle.blas, "T", "N", crs, kg, pq, 1.0, col[b * image_cols + grp * group_cols:], pq,
                              fdy[(b * filter_dims[0] + grp * kg) * pq:], pq, 1.0 if b else 0.0,
                              fdw[grp * kg * crs:], crs)


def _find(handle, direction, run, x_desc, filter_dims, conv, workspace) -> list[tuple[str, float]]:
    """Time each algorithm with events and rank them by simulated device time in ms; the winner is
    remembered for `get_convolution_algorithm`."""
    algorithms = [a for a in CONV_ALGORITHMS if _supported(a, x_desc, filter_dims)]
    need = max(convolution_workspace_size(x_desc, filter_dims, conv, a) for a in algorithms)
    if need and (workspace is None or workspace.nbytes < need):
        workspace = handle.api.device_array(need, np.uint8)
    timings = []
    for algorithm in algorithms:
        timings.append((algorithm, handle.device_time_ms(lambda a=algorithm: run(a, workspace))))
    timings.sort(key=lambda t: t[1])
    handle.algorithms[_problem(handle, direction, x_desc, filter_dims, conv)] = timings[0][0]
    return timings


def _problem(handle, direction, x_desc, filter_dims, conv) -> tuple:
    return direction, handle.properties.profile, x_desc, _filter(filter_dims), conv


def find_convolution_forward_algorithm(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, w,
                                       conv: ConvolutionDescriptor, y, workspace=None) -> list[tuple[str, float]]:
    """Run every forward algorithm on this problem and rank them by simulated device time in ms
    (cudnnFindConvolutionForwardAlgorithm); y holds the last one's result. A workspace is allocated
    when none as large as "gemm" needs is given."""
    def run(algorithm, ws):
        convolution_forward(handle, x_desc, x, filter_dims, w, conv, y, algorithm, ws)
    return _find(handle, "forward", run, x_desc, filter_dims, conv, workspace)


def find_convolution_backward_data_algorithm(handle: Handle, x_desc: TensorDescriptor, filter_dims, w, conv, dy,
                                             dx, workspace=None) -> list[tuple[str, float]]:
    """cudnnFindConvolutionBackwardDataAlgorithm: every algorithm, ranked by simulated device time in ms."""
    def run(algorithm, ws):
        convolution_backward_data(handle, x_desc, filter_dims, w, conv, dy, dx, algorithm, ws)
    return _find(handle, "backward_data", run, x_desc, filter_dims, conv, workspace)


def find_convolution_backward_filter_algorithm(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, conv, dy,
                                               dw, workspace=None) -> list[tuple[str, float]]:
    """cudnnFindConvolutionBackwardFilterAlgorithm: every algorithm, ranked by simulated device time in ms."""
    def run(algorithm, ws):
        convolution_backward_filter(handle, x_desc, x, filter_dims, conv, dy, dw, algorithm, ws)
    return _find(handle, "backward_filter", run, x_desc, filter_dims, conv, workspace)


def get_convolution_algorithm(handle: Handle, direction: str, x_desc: TensorDescriptor, filter_dims,
                              conv: ConvolutionDescriptor) -> str:
    """The algorithm for a problem without running anything (cudnnGetConvolution*Algorithm): the one a
    find step chose for this profile and shape on this handle, else "implicit_gemm" (no workspace)."""
    if direction not in CONV_DIRECTIONS:
        raise DnnError(f"direction must be one of {CONV_DIRECTIONS}, not {direction!r}")
    return handle.algorithms.get(_problem(handle, direction, x_desc, filter_dims, conv), "implicit_gemm")


def _lanes(d: int) -> bool:
    """Whether a head dimension takes the lanes kernels: a power of two no wider than a 32-lane warp."""
    return d <= 32 and d & (d - 1) == 0


def _attention_shapes(q, k, v) -> tuple[int, int, int, int]:
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, DeviceNDArray) or a.ndim != 3:
            raise DnnError(f"{name} must be a 3-D device array (batch x heads, tokens, head dim)")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise DnnError(f"q {q.shape}, k {k.shape} and v {v.shape} do not match")
    bh, t_q, d = q.shape
    if not 0 < d <= MAX_HEAD_DIM:
        raise DnnError(f"head dimension {d} is outside 1..{MAX_HEAD_DIM}")
    return bh, t_q, k.shape[1], d


def attention_forward(handle: Handle, q, k, v, o, lse, scale: float | None = None, causal: bool = False) -> None:
    """o = softmax(q k^T * scale (+ causal mask)) v per (batch x head), fused; lse (bh, Tq) is saved
    for the backward pass (cudnn's fused flash attention, FlashAttention's forward)."""
    bh, t_q, t_k, d = _attention_shapes(q, k, v)
    scale = 1 / math.sqrt(d) if scale is None else scale
    args = [_flat(q, "q"), _flat(k, "k"), _flat(v, "v"), _flat(o, "o", q.size), _flat(lse, "lse", bh * t_q)]
    with trace.span(4, "attention_forward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k and _lanes(d):
            handle.kernels["attention_forward_lanes_kernel"][_ceil_div(bh * t_q * d, THREADS), THREADS, handle.stream](
                np.int32(bh * t_q), np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal, *args)
        elif bh and t_q and t_k:
            handle.kernels["attention_forward_kernel"][(-(-t_q // QUERY_TILE), bh), QUERY_TILE, handle.stream](
                np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal, *args)


def attention_backward(handle: Handle, q, k, v, o, do, lse, dq, dk, dv, scale: float | None = None,
                       causal: bool = False) -> None:
    """dq, dk, dv from the forward's o and lse, recomputing the probabilities (FlashAttention's backward)."""
    bh, t_q, t_k, d = _attention_shapes(q, k, v)
    scale = 1 / math.sqrt(d) if scale is None else scale
    fq, fk, fv = _flat(q, "q"), _flat(k, "k"), _flat(v, "v")
    fo, fdo, flse = _flat(o, "o", q.size), _flat(do, "do", q.size), _flat(lse, "lse", bh * t_q)
    fdq, fdk, fdv = _flat(dq, "dq", q.size), _flat(dk, "dk", k.size), _flat(dv, "dv", v.size)
    delta = handle.api.device_array(bh * t_q, np.float32)
    geometry = (np.int32(bh), np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal)
    with trace.span(4, "attention_backward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k:
            rows = bh * t_q
            handle.kernels["attention_delta_kernel"][-(-rows // THREADS), THREADS, handle.stream](
                np.int32(rows), np.int32(d), fo, fdo, delta)
            if _lanes(d):
                handle.kernels["attention_dq_lanes_kernel"][_ceil_div(rows * d, THREADS), THREADS, handle.stream](
                    np.int32(rows), *geometry[1:], fq, fk, fv, fdo, flse, delta, fdq)
                handle.kernels["attention_dkv_lanes_kernel"][_ceil_div(bh * t_k * d, THREADS), THREADS,
                                                             handle.stream](
                    np.int32(bh * t_k), *geometry[1:], fq, fk, fv, fdo, flse, delta, fdk, fdv)
                return
            handle.kernels["attention_dq_kernel"][-(-rows // THREADS), THREADS, handle.stream](
                *geometry, fq, fk, fv, fdo, flse, delta, fdq)
            handle.kernels["attention_dkv_kernel"][-(-(bh * t_k) // THREADS), THREADS, handle.stream](
                *geometry, fq, fk, fv, fdo, flse, delta, fdk, fdv)
