"""Layer 5: the one thin device interface every framework op goes through (needle's idea).

An array here is a numpy ndarray on `cpu` or a Layer 3 DeviceNDArray on a GPU, each a strided
view of its tensor's storage. Every function takes its output array and writes into it, so the
framework decides shapes, dtypes and allocation; on a GPU each call is one or a few kernel
launches from `lapis.libs` (asynchronous, like ATen's), on `cpu` numpy does the work.

    pointwise(op, inputs, out) an elementwise op of the framework's table (ops/elementwise.py) over
                               broadcast inputs: its numpy reference, or its device function in a kernel
    copy(x, out)               out = x, broadcast and cast
    where(cond, a, b, out)
    reduce(op, x, dim, out)    sum prod max min argmax argmin along one dimension (x contiguous)
    fill(out, value), holds_zeros(out)   a new array's memory holds zeros already (new from the driver)
    matmul(a, b, out)          2-D; operands C- or F-contiguous
    bmm(a, b, out)             3-D batches of matrices, each operand row-major or transposed: one launch
    adam(p, g, m, v, ...)      one fused Adam/AdamW step, in place
    rmsprop(p, g, sq, buf, ...), sgd(p, g, buf, ...)   one fused RMSprop or SGD step on GPU arrays, in place
    softmax(x, out, log), softmax_backward(y, dy, dx, log)   over the last dimension, x contiguous
    gather(x, dim, index, out), scatter_add(out, dim, index, src)   torch.gather / scatter_add_, contiguous
    conv2d, conv2d_backward_data, conv2d_backward_filter, pool2d, pool2d_backward   NCHW, KCRS, contiguous
    batch_norm(x, ...), batch_norm_backward(x, dy, ...)    training batch norm of (N, C, H, W), contiguous
    layer_norm(x, ...), layer_norm_backward(x, dy, ...)    over the last dimension of contiguous (rows, cols)
    activation(mode, x, out), activation_backward(mode, x, dy, dx)   gelu (exact) and silu, contiguous float32
    attention(q, k, v, o, lse, ...), attention_backward(...)   fused (flash) attention of (BH, T, D), contiguous
"""

import math

import numpy as np

from lapis import cuda, hip
from lapis.cuda import DeviceNDArray
from lapis.libs import blas, dnn, kernels, optimizers, patterns, reductions

_API = {"cuda": cuda, "hip": hip}
_blas_handles: dict = {}
_dnn_handles: dict = {}

# the ufuncs' own reductions: np.sum and its kin are these behind a Python wrapper that costs more than a small sum
_REDUCE = {"sum": np.add.reduce, "prod": np.multiply.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce,
           "argmax": np.argmax, "argmin": np.argmin}


# erfc(a) ~ t exp(-a^2 + P(t)), t = 1 / (1 + a / 2): a Chebyshev fit with relative error below 1.2e-7
# (Numerical Recipes' erfcc); below |x| = 0.5 the Maclaurin series, whose terms shrink fast there.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def erf(v: np.ndarray) -> np.ndarray:
    """erf elementwise (the cpu reference of the framework's erf): exact (math.erf) for float64, vectorized to
    float32 accuracy for the other types."""
    if v.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[v.dtype])(v)
    x = v.astype(np.float64)
    a = np.abs(x)
    t = 1 / (1 + 0.5 * a)
    poly = np.zeros_like(t)
    for c in reversed(_ERFC):
        poly = poly * t + c
    tail = np.sign(x) * (1 - t * np.exp(-a * a + poly))
    x2 = x * x
    series = (2 / math.sqrt(math.pi)) * x * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (
        1 / 216 + x2 * (-1 / 1320 + x2 / 9360))))))
    return np.where(a < 0.5, series, tail).astype(v.dtype)


def on_gpu(x) -> bool:
    return isinstance(x, DeviceNDArray)


def _api(x):
    return _API[x.context.device.api_name]


def pointwise(op, inputs: list, out) -> None:
    """out = op(*inputs) for an elementwise op of the framework's table: numpy on cpu, one kernel applying the
    op's device function for the inputs' dtype on a GPU."""
    if on_gpu(out):
        fn = op.device_function(inputs[0].dtype)
        (kernels.unary if len(inputs) == 1 else kernels.binary)(_api(out), fn, *inputs, out)
    else:
        with np.errstate(all="ignore"):
            out[...] = op.cpu(*inputs)


def copy(x, out) -> None:
    """out = x, broadcast to out's shape and cast to its dtype."""
    if on_gpu(out):
        kernels.copy(_api(out), x, out)
    else:
        with np.errstate(invalid="ignore"):        # NaN or inf to an integer: some value, with no warning, as torch
            out[...] = x


def where(cond, a, b, out) -> None:
    if on_gpu(out):
        kernels.where(_api(out), cond, a, b, out)
    else:
        out[...] = np.where(cond, a, b)


def arange(out, start: int, step: int) -> None:
    """out[i] = start + i * step, for an integer out."""
    if on_gpu(out):
        patterns.arange(_api(out), out, start, step)
    else:
        out[...] = np.arange(start, start + step * out.size, step, dtype=np.int64)[:out.size]


def triangle(x, out, diagonal: int, lower: bool) -> None:
    """out = tril(x, diagonal) (triu when not `lower`) over the last two dimensions."""
    if on_gpu(out):
        patterns.triangle(_api(out), x, out, diagonal, lower)
    else:
        out[...] = np.tril(x, diagonal) if lower else np.triu(x, diagonal)


def cumsum(x, dim: int, out) -> None:
    if on_gpu(out):
        reductions.cumsum(_api(out), x, dim, out)
    else:
        np.cumsum(x, axis=dim, dtype=out.dtype, out=out)


def reduce(op: str, x, dim: int, out) -> None:
    if on_gpu(out):
        reductions.reduce(_api(out), op, x, dim, out)
    else:
        with np.errstate(all="ignore"):        # inf - inf, overflow: NaN and inf with no warning, as torch
            out[...] = _REDUCE[op](x, axis=dim)


def fill(out, value) -> None:
    if on_gpu(out):
        kernels.fill(_api(out), out, value)
    else:
        out[...] = value


def holds_zeros(out) -> bool:
    """Whether a new array's memory is known to hold zeros: a GPU array in memory its context's pool has just taken
    from the driver (`MemoryPool.take_fresh`). Asked once, by whoever allocated it."""
    return on_gpu(out) and out.context.pool.take_fresh(out.memory.va)


def _layout(x) -> str | None:
    """'C' or 'F' for a 2-D array BLAS can read in place (row-major, or the transpose of row-major)."""
    if x.is_c_contiguous() if on_gpu(x) else x.flags.c_contiguous:
        return "C"
    if x.is_f_contiguous() if on_gpu(x) else x.flags.f_contiguous:
        return "F"
    return None


def matmul(a, b, out, bias=None) -> None:
    """out (m, n) = a (m, k) @ b (k, n) (+ bias (n,), added to every row); a and b C- or F-contiguous (a transposed
    view costs no copy), out C-contiguous. On a GPU the bias is float32 BLAS's epilogue, in the gemm's kernel."""
    if not on_gpu(out):
        np.matmul(a, b, out=out)
        if bias is not None:
            out += bias
        return
    (m, k), n = a.shape, b.shape[1]
    handle = _blas(out)
    # Row-major C (m x n) = A B is column-major C^T = B^T A^T: BLAS sees (n x m) = (n x k)(k x m). A
    # row-major operand is its own transpose in column-major; an F-contiguous one (a transposed view)
    # is read with op 'T' instead.
    tb, ldb = ("N", max(n, 1)) if _layout(b) == "C" else ("T", max(k, 1))
    ta, lda = ("N", max(k, 1)) if _layout(a) == "C" else ("T", max(m, 1))
    # float32 goes to sgemm as PyTorch's does to cublasSgemm, float64 to dgemm; half types to gemm (cublasGemmEx).
    routine = {np.dtype(np.float32): blas.sgemm, np.dtype(np.float64): blas.dgemm}.get(out.dtype, blas.gemm)
    if bias is not None:                 # column-major C^T: the bias runs down its rows
        blas.sgemm(handle, tb, ta, n, m, k, 1.0, b, ldb, a, lda, 0.0, out, max(n, 1), bias=bias)
        return
    routine(handle, tb, ta, n, m, k, 1.0, b, ldb, a, lda, 0.0, out, max(n, 1))


def _blas(out) -> blas.Handle:
    handle = _blas_handles.get(out.context)
    if handle is None:
        handle = _blas_handles[out.context] = blas.create(_api(out), out.context.device.id)
    return handle


def batch_layout(x) -> str | None:
    """'C' when each matrix of a dense (batch, rows, cols) block is row-major, 'F' when it is the transpose
    of row-major (the batch's last two dimensions swapped), None when bmm cannot read it in place."""
    _, rows, cols = x.shape
    strides = [s // x.dtype.itemsize for s in x.strides]

    def fits(want) -> bool:              # a dimension of size 1 may have any stride
        return all(n == 1 or s in w for n, s, w in zip(x.shape, strides, want, strict=True))
    if fits(((rows * cols, 0), (cols,), (1,))):
        return "C"
    if fits(((rows * cols, 0), (1,), (rows,))):
        return "F"
    return None


def _dense(x) -> DeviceNDArray:
    """The flat memory under a dense batch of matrices (one matrix when the batch is a broadcast), for
    BLAS's pointer-and-strides view of it."""
    size = x.size if x.strides[0] else x.size // max(x.shape[0], 1)
    return DeviceNDArray((size,), (x.dtype.itemsize,), x.dtype, x.context, x.memory, x.ptr)


def bmm(a, b, out) -> None:
    """out (B, m, n) = a (B, m, k) @ b (B, k, n): one strided-batched gemm on a GPU (cublasGemmStridedBatchedEx,
    operands swapped as in matmul); out C-contiguous."""
    if not on_gpu(out):
        np.matmul(a, b, out=out)
        return
    batch, m, k = a.shape
    n = b.shape[2]
    layout_a, layout_b = batch_layout(a), batch_layout(b)
    if layout_a is None or layout_b is None:
        raise ValueError(f"bmm reads dense batches of matrices, got strides {a.strides} and {b.strides}")
    tb, ldb = ("N", max(n, 1)) if layout_b == "C" else ("T", max(k, 1))
    ta, lda = ("N", max(k, 1)) if layout_a == "C" else ("T", max(m, 1))
    stride_a, stride_b = (m * k if a.strides[0] or batch == 1 else 0), (k * n if b.strides[0] or batch == 1 else 0)
    blas.gemm_strided_batched(_blas(out), tb, ta, n, m, k, 1.0, _dense(b), ldb, stride_b, _dense(a), lda, stride_a,
                              0.0, _dense(out), max(n, 1), m * n, batch)


def adam(params: list[tuple], *, lr, beta1, beta2, eps, step, weight_decay, decoupled) -> None:
    """A fused Adam step, in place, on each (p, g, m, v) of `params` (contiguous arrays of one size and dtype, all
    on one device: float32, or on a GPU float16 or bfloat16 too)."""
    if params and on_gpu(params[0][0]):
        optimizers.adam(_api(params[0][0]), params, lr=lr, beta1=beta1, beta2=beta2, eps=eps, step=step,
                     weight_decay=weight_decay, decoupled=decoupled)
        return
    for p, g, m, v in params:
        f = p.dtype.type
        grad = g.copy()
        if decoupled:
            p *= f(1 - lr * weight_decay)
        else:
            grad += f(weight_decay) * p
        m += (grad - m) * f(1 - beta1)
        v *= f(beta2)
        v += grad * grad * f(1 - beta2)
        p -= m / (np.sqrt(v) / f(math.sqrt(1 - beta2 ** step)) + f(eps)) * f(lr / (1 - beta1 ** step))


def rmsprop(params: list[tuple], *, lr, alpha, eps, weight_decay, momentum, maximize) -> None:
    """A fused RMSprop step (not centered), in place, on each (p, g, square_avg, buf) of `params` (contiguous float32
    GPU arrays of one size, all on one device); `optim.RMSprop` steps cpu parameters with tensor ops."""
    if params:
        optimizers.rmsprop(_api(params[0][0]), params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                           momentum=momentum, maximize=maximize)


def sgd(params: list[tuple], *, lr, momentum, dampening, weight_decay, nesterov, maximize, first) -> None:
    """A fused SGD step, in place, on each (p, g, buf) of `params` (contiguous float32 GPU arrays of one size, all
    on one device); `optim.SGD` steps cpu parameters with tensor ops."""
    if params:
        optimizers.sgd(_api(params[0][0]), params, lr=lr, momentum=momentum, dampening=dampening,
                       weight_decay=weight_decay, nesterov=nesterov, maximize=maximize, first=first)


def _dnn(x) -> dnn.Handle:
    handle = _dnn_handles.get(x.context)
    if handle is None:
        handle = _dnn_handles[x.context] = dnn.create(_api(x), x.context.device.id)
    return handle


def softmax(x, out, log: bool) -> None:
    """out = (log_)softmax of x over its last dimension: one fused kernel on a GPU (a block per row)."""
    if on_gpu(out):
        dnn.softmax_forward(_dnn(out), x, out, log)
        return
    # in place in out, through the ufuncs' own reductions: a small row's cost is numpy's per-call overhead
    shifted = np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True), out=out)
    if log:
        shifted -= np.log(np.add.reduce(np.exp(shifted), axis=-1, keepdims=True))
    else:
        e = np.exp(shifted, out=out)
        e /= np.add.reduce(e, axis=-1, keepdims=True)


def softmax_backward(y, dy, dx, log: bool) -> None:
    if on_gpu(dx):
        dnn.softmax_backward(_dnn(dx), y, dy, dx, log)
    elif log:
        dx[...] = dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
    else:
        dx[...] = y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def nll_loss(logp, target, ignore_index: int, reduction: str, out, kept_rows) -> None:
    """The negative log-likelihood of (N, C) log-probabilities at (N,) targets into `out` ((N,) for
    reduction "none", else the mean or sum over kept rows, whose count goes to `kept_rows`): one
    kernel on a GPU."""
    if on_gpu(out):
        dnn.nll_loss_forward(_dnn(out), logp, target, ignore_index, reduction, out, kept_rows)
        return
    kept = target != ignore_index
    bad = kept & ((target < 0) | (target >= logp.shape[1]))
    if bad.any():
        raise IndexError(f"Target {int(target[bad][0])} is out of bounds.")
    rows = np.flatnonzero(kept)
    loss = np.zeros(len(target), logp.dtype)
    loss[rows] = -logp[rows, target[rows]]
    kept_rows[...] = len(rows)
    if reduction == "none":
        out[...] = loss
    else:
        with np.errstate(invalid="ignore"):        # every row ignored: 0 / 0 is NaN, as torch's
            out[...] = loss.sum() / kept_rows.reshape(()) if reduction == "mean" else loss.sum()


def nll_loss_backward(target, ignore_index: int, reduction: str, dloss, kept_rows, dlogp) -> None:
    """dlogp from the loss's gradient and the forward's count of kept rows."""
    if on_gpu(dlogp):
        dnn.nll_loss_backward(_dnn(dlogp), target, ignore_index, reduction, dloss, kept_rows, dlogp)
        return
    rows = np.flatnonzero(target != ignore_index)
    dlogp[...] = 0
    if reduction == "none":
        dlogp[rows, target[rows]] = -dloss[rows]
    else:
        dlogp[rows, target[rows]] = -(dloss.reshape(-1)[0] / kept_rows.reshape(-1)[0] if reduction == "mean"
                                      else dloss.reshape(-1)[0])


def _in_bounds(index: np.ndarray, dim: int, size: int, wrap: bool) -> np.ndarray:
    """index, checked: numpy would take any negative index from the end; torch's gather and scatter refuse one,
    as one past the end, and x[t] (`wrap`) takes those down to -size from the end."""
    bad = (index < -size if wrap else index < 0) | (index >= size)
    if bad.any():
        raise IndexError(f"index {index[bad].flat[0]} is out of bounds for dimension {dim} with size {size}")
    return np.where(index < 0, index + size, index) if wrap else index


def gather(x, dim: int, index, out, wrap: bool = False) -> None:
    if on_gpu(out):
        kernels.gather(_api(out), x, dim, index, out, wrap)
        return
    index = _in_bounds(index, dim, x.shape[dim], wrap)
    if index.ndim == 1 and x.ndim > 1:                       # a vector along dim: index_select
        out[...] = np.take(x, index, axis=dim)
    else:
        out[...] = np.take_along_axis(x, index, axis=dim)


def scatter_add(out, dim: int, index, src, wrap: bool = False) -> None:
    if on_gpu(out):
        api = _api(out)
        if out.dtype.name not in ("float16", "bfloat16"):
            kernels.scatter_add(api, out, dim, index, src, wrap)
            return
        # The atomic unit adds 32-bit words: a half tensor's sums (an embedding's gradient) are made in float32
        # and rounded once, where torch rounds after each atomic add, in no fixed order.
        wide, part = (DeviceNDArray.allocate(out.context, x.shape, np.float32) for x in (out, src))
        kernels.copy(api, out, wide)
        kernels.copy(api, src, part)
        kernels.scatter_add(api, wide, dim, index, part, wrap)
        kernels.copy(api, wide, out)
    else:
        index = _in_bounds(index, dim, out.shape[dim], wrap)
        vector = index.ndim == 1 and out.ndim > 1              # index_add along dim
        where = [slice(None)] * out.ndim if vector else list(np.indices(index.shape, sparse=True))
        where[dim] = index
        np.add.at(out, tuple(where), src)


# -- convolution and pooling (NCHW tensors, KCRS filters) ------------------------------------------------
def _windows(x: np.ndarray, r: int, s: int, p: int, q: int, stride, dilation) -> np.ndarray:
    """(N, C, P, Q, R, S) view of a padded NCHW array: element [n, c, i, j, a, b] is
    x[n, c, i * stride_h + a * dil_h, j * stride_w + b * dil_w]."""
    sn, sc, sh, sw = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (x.shape[0], x.shape[1], p, q, r, s),
        (sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1]), writeable=False)


def _pad(x: np.ndarray, padding, value=0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=value)


def _conv_descriptors(x, w, padding, stride, dilation, groups):
    desc = dnn.TensorDescriptor(tuple(x.shape))
    conv = dnn.ConvolutionDescriptor(tuple(padding), tuple(stride), tuple(dilation), groups)
    return desc, tuple(w.shape), conv


def conv2d(x, w, out, padding, stride, dilation, groups: int) -> None:
    if on_gpu(out):
        desc, filt, conv = _conv_descriptors(x, w, padding, stride, dilation, groups)
        dnn.convolution_forward(_dnn(out), desc, x, filt, w, conv, out, "implicit_gemm")
        return
    k, cg, r, s = w.shape
    win = _windows(_pad(x, padding), r, s, out.shape[2], out.shape[3], stride, dilation)
    kg = k // groups
    for g in range(groups):
        out[:, g * kg:(g + 1) * kg] = np.einsum("ncpqrs,kcrs->nkpq", win[:, g * cg:(g + 1) * cg],
                                                w[g * kg:(g + 1) * kg], optimize=True)


def conv2d_backward_data(w, dy, dx, padding, stride, dilation, groups: int) -> None:
    if on_gpu(dx):
        desc, filt, conv = _conv_descriptors(dx, w, padding, stride, dilation, groups)
        dnn.convolution_backward_data(_dnn(dx), desc, filt, w, conv, dy, dx, "implicit_gemm")
        return
    k, cg, r, s = w.shape
    kg = k // groups
    n, c, h, wd = dx.shape
    padded = np.zeros((n, c, h + 2 * padding[0], wd + 2 * padding[1]), dx.dtype)
    p, q = dy.shape[2:]
    for g in range(groups):
        # the unfolded gradient, then each (a, b) tap added back where it was read
        cols = np.einsum("nkpq,kcrs->ncpqrs", dy[:, g * kg:(g + 1) * kg], w[g * kg:(g + 1) * kg], optimize=True)
        for a in range(r):
            for b in range(s):
                y0, x0 = a * dilation[0], b * dilation[1]
                padded[:, g * cg:(g + 1) * cg, y0:y0 + stride[0] * (p - 1) + 1:stride[0],
                       x0:x0 + stride[1] * (q - 1) + 1:stride[1]] += cols[..., a, b]
    dx[...] = padded[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd]


def conv2d_backward_filter(x, dy, dw, padding, stride, dilation, groups: int) -> None:
    if on_gpu(dw):
        desc, filt, conv = _conv_descriptors(x, dw, padding, stride, dilation, groups)
        dnn.convolution_backward_filter(_dnn(dw), desc, x, filt, conv, dy, dw, "implicit_gemm")
        return
    k, cg, r, s = dw.shape
    kg = k // groups
    win = _windows(_pad(x, padding), r, s, dy.shape[2], dy.shape[3], stride, dilation)
    for g in range(groups):
        dw[g * kg:(g + 1) * kg] = np.einsum("nkpq,ncpqrs->kcrs", dy[:, g * kg:(g + 1) * kg],
                                            win[:, g * cg:(g + 1) * cg], optimize=True)


def pool2d(mode: str, x, out, window, stride, padding) -> None:
    """Max or average (padding counted, cuDNN's INCLUDE_PADDING and torch's default) pooling."""
    if on_gpu(out):
        dnn.pooling_forward(_dnn(out), mode, dnn.TensorDescriptor(tuple(x.shape)), x, window, stride, padding, out)
        return
    fill = -np.inf if mode == "max" else 0.0
    win = _windows(_pad(x, padding, fill), window[0], window[1], out.shape[2], out.shape[3], stride, (1, 1))
    out[...] = win.max(axis=(4, 5)) if mode == "max" else win.mean(axis=(4, 5))


def pool2d_backward(mode: str, x, y, dy, dx, window, stride, padding) -> None:
    if on_gpu(dx):
        dnn.pooling_backward(_dnn(dx), mode, dnn.TensorDescriptor(tuple(x.shape)), x, y, dy, window, stride, padding,
                             dx)
        return
    n, c, h, wd = x.shape
    p, q = dy.shape[2:]
    fill = -np.inf if mode == "max" else 0.0
    padded_x = _pad(x, padding, fill)
    grad = np.zeros(padded_x.shape, dx.dtype)
    win = _windows(padded_x, window[0], window[1], p, q, stride, (1, 1)).reshape(n, c, p, q, -1)
    first = win.argmax(axis=-1)                        # the first maximal element gets the gradient
    for a in range(window[0]):
        for b in range(window[1]):
            share = dy / (window[0] * window[1]) if mode == "average" else dy * (first == a * window[1] + b)
            grad[:, :, a:a + stride[0] * (p - 1) + 1:stride[0], b:b + stride[1] * (q - 1) + 1:stride[1]] += share
    dx[...] = grad[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd]


def batch_norm(x, weight, bias, running_mean, running_var, out, mean, rstd, momentum: float, eps: float) -> None:
    """Training batch norm per channel of (N, C, H, W) x: out, the batch's mean and 1/std saved, and the
    running statistics moved by momentum (unbiased variance), in one cuDNN-style kernel on a GPU."""
    if on_gpu(out):
        dnn.batch_norm_forward(_dnn(out), dnn.TensorDescriptor(tuple(x.shape)), x, weight, bias, running_mean,
                               running_var, eps, out, mean, rstd, training=True, momentum=momentum)
        return
    count = x.size // x.shape[1]
    mean[...] = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    rstd[...] = 1 / np.sqrt(var + eps)
    out[...] = (x - mean[:, None, None]) * (rstd * weight)[:, None, None] + bias[:, None, None]
    running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    running_var[...] = (1 - momentum) * running_var + momentum * var * count / max(count - 1, 1)


def batch_norm_backward(x, dy, weight, mean, rstd, dx, dweight, dbias) -> None:
    if on_gpu(dx):
        dnn.batch_norm_backward(_dnn(dx), dnn.TensorDescriptor(tuple(x.shape)), x, dy, weight, mean, rstd, dx,
                                dweight, dbias)
        return
    count = x.size // x.shape[1]
    xhat = (x - mean[:, None, None]) * rstd[:, None, None]
    dbias[...] = dy.sum(axis=(0, 2, 3))
    dweight[...] = (dy * xhat).sum(axis=(0, 2, 3))
    dx[...] = (weight * rstd)[:, None, None] / count * (count * dy - dbias[:, None, None]
                                                         - xhat * dweight[:, None, None])


def layer_norm(x, weight, bias, out, mean, rstd, eps: float) -> None:
    """out = (x - mean) * rstd * weight + bias per row of (rows, cols) x, saving mean and rstd."""
    if on_gpu(out):
        dnn.layer_norm_forward(_dnn(out), x, weight, bias, eps, out, mean, rstd)
        return
    mean[...] = x.mean(axis=1)
    rstd[...] = 1 / np.sqrt(x.var(axis=1) + eps)
    out[...] = (x - mean[:, None]) * rstd[:, None] * weight + bias


def layer_norm_backward(x, dy, weight, mean, rstd, dx, dweight, dbias) -> None:
    if on_gpu(dx):
        dnn.layer_norm_backward(_dnn(dx), x, dy, weight, mean, rstd, dx, dweight, dbias)
        return
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * weight
    dx[...] = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    dweight[...] = (dy * xhat).sum(axis=0)
    dbias[...] = dy.sum(axis=0)


def _attention_probabilities(q, k, lse, scale: float, causal: bool):
    # q: (..., Tq, D), k: (..., Tk, D) -> p: (..., Tq, Tk); a causal row i sees keys j <= i (top-left aligned)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        scores = np.where(np.tri(q.shape[-2], k.shape[-2], dtype=bool), scores, -np.inf)
    if lse is not None:
        return np.exp(scores - lse[..., None])
    top = scores.max(axis=-1, keepdims=True)
    return scores, top[..., 0] + np.log(np.exp(scores - top).sum(axis=-1))


def attention(q, k, v, o, lse, scale: float, causal: bool) -> None:
    """o = softmax(q k^T scale) v per batch-head, saving each row's log-sum-exp: cuDNN-style fused
    flash attention on a GPU (the scores never stored), the plain product on cpu."""
    if on_gpu(o):
        dnn.attention_forward(_dnn(o), q, k, v, o, lse, scale, causal)
        return
    scores, lse[...] = _attention_probabilities(q, k, None, scale, causal)
    o[...] = np.matmul(np.exp(scores - lse[..., None]), v)


def attention_backward(q, k, v, o, do, lse, dq, dk, dv, scale: float, causal: bool) -> None:
    if on_gpu(dq):
        dnn.attention_backward(_dnn(dq), q, k, v, o, do, lse, dq, dk, dv, scale, causal)
        return
    p = _attention_probabilities(q, k, lse, scale, causal)             # (..., Tq, Tk)
    dv[...] = np.matmul(np.swapaxes(p, -1, -2), do)
    ds = p * (np.matmul(do, np.swapaxes(v, -1, -2)) - (do * o).sum(axis=-1, keepdims=True)) * scale
    dq[...] = np.matmul(ds, k)
    dk[...] = np.matmul(np.swapaxes(ds, -1, -2), q)


def _activation_numpy(mode: str, x):
    # (f(x), f'(x)) for the fused activations
    if mode == "gelu":
        cdf = 0.5 * (1 + erf(x * x.dtype.type(1 / math.sqrt(2))))
        return x * cdf, cdf + x * np.exp(-0.5 * x * x) * x.dtype.type(1 / math.sqrt(2 * math.pi))
    s = 1 / (1 + np.exp(-x))
    return x * s, s * (1 + x * (1 - s))


def activation(mode: str, x, out) -> None:
    """out = gelu(x) (x Phi(x), exact) or silu(x): one cuDNN-style activation kernel on a GPU."""
    if on_gpu(out):
        dnn.activation_forward(_dnn(out), mode, dnn.TensorDescriptor((x.size, 1, 1, 1)), x, out)
    else:
        out[...] = _activation_numpy(mode, x)[0]


def activation_backward(mode: str, x, dy, dx) -> None:
    if on_gpu(dx):
        dnn.activation_backward(_dnn(dx), mode, dnn.TensorDescriptor((x.size, 1, 1, 1)), x, dy, dx)
    else:
        dx[...] = dy * _activation_numpy(mode, x)[1]
