"""Layer 4, DNN: layer norm and batch norm, forward and backward. Layer norm gives each row one block of
up to ROW_THREADS threads (`row_threads`), batch norm each channel one of ROW_THREADS, reducing through
shared memory in a fixed order;
dgamma and dbeta of layer norm are summed in a fixed order (rows in order per lane, then a tree of shuffles), so
results are deterministic."""

import math

import numpy as np

from lapis import trace
from lapis.cuda import blockDim, blockIdx, float32, shared, syncthreads, threadIdx
from lapis.libs.dnn.descriptors import DnnError, TensorDescriptor
from lapis.libs.dnn.handle import ROW_THREADS, Handle, _ceil_div, _flat, _rows, row_threads
from lapis.libs.reduction import block_reduce, warp_tree


def layer_norm_forward_kernel(cols, eps, x, gamma, beta, y, mean, rstd):
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    acc = float32(0.0)
    j = t
    while j < cols:
        acc += x[base + j]
        j += blockDim.x
    mu = block_reduce(s, t, acc, False) / float32(cols)
    acc = float32(0.0)
    j = t
    while j < cols:
        d = x[base + j] - mu
        acc += d * d
        j += blockDim.x
    r = float32(1.0) / math.sqrt(block_reduce(s, t, acc, False) / float32(cols) + eps)
    j = t
    while j < cols:
        y[base + j] = (x[base + j] - mu) * r * gamma[j] + beta[j]
        j += blockDim.x
    if t == 0:
        mean[row] = mu
        rstd[row] = r


def layer_norm_backward_kernel(cols, x, dy, gamma, mean, rstd, dx):
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma
    s = shared.array(128, np.float32)
    row, t = blockIdx.x, threadIdx.x
    base = row * cols
    mu, r = mean[row], rstd[row]
    a = float32(0.0)
    b = float32(0.0)
    j = t
    while j < cols:
        g = dy[base + j] * gamma[j]
        a += g
        b += g * (x[base + j] - mu) * r
        j += blockDim.x
    a = block_reduce(s, t, a, False) / float32(cols)
    b = block_reduce(s, t, b, False) / float32(cols)
    j = t
    while j < cols:
        xhat = (x[base + j] - mu) * r
        dx[base + j] = r * (dy[base + j] * gamma[j] - a - xhat * b)
        j += blockDim.x


def layer_norm_params_backward_kernel(rows, cols, x, dy, mean, rstd, dgamma, dbeta):
    # A block of 32 columns x 16 row lanes: lane ty sums rows ty, ty + 16, ... in order; then warp ty takes
    # columns ty (lanes 0-15) and ty + 16 (lanes 16-31), a partial sum a lane (a padded tile: 32 banks), and
    # adds each column's 16 as a tree of shuffles (deterministic), rather than one thread a column adding them.
    sg = shared.array((16, 33), np.float32)
    sb = shared.array((16, 33), np.float32)
    tx, ty = threadIdx.x, threadIdx.y
    j = blockIdx.x * 32 + tx
    dg = float32(0.0)
    db = float32(0.0)
    if j < cols:
        for row in range(ty, rows, 16):
            xhat = (x[row * cols + j] - mean[row]) * rstd[row]
            dg += dy[row * cols + j] * xhat
            db += dy[row * cols + j]
    sg[ty, tx] = dg
    sb[ty, tx] = db
    syncthreads()
    lane, column = tx % 16, ty + tx // 16 * 16
    dg = warp_tree(sg[lane, column], 8, False)     # lanes 0 and 16 end with their columns' sums
    db = warp_tree(sb[lane, column], 8, False)
    j = blockIdx.x * 32 + column
    if lane == 0 and j < cols:
        dgamma[j] = dg
        dbeta[j] = db


def layer_norm_forward(handle: Handle, x, gamma, beta, eps: float, y, mean, rstd) -> None:
    """y = (x - mean) * rstd * gamma + beta over the last dimension; saves mean and rstd per row."""
    rows, cols = _rows(x, "x")
    args = [_flat(x, "x"), _flat(gamma, "gamma", cols), _flat(beta, "beta", cols), _flat(y, "y", x.size),
            _flat(mean, "mean", rows), _flat(rstd, "rstd", rows)]
    with trace.span(4, "layer_norm_forward", rows=rows, cols=cols, eps=eps):
        if rows and cols:
            handle.kernel(layer_norm_forward_kernel)[rows, row_threads(cols), handle.stream](
                np.int64(cols), np.float32(eps), *args)


def layer_norm_backward(handle: Handle, x, dy, gamma, mean, rstd, dx, dgamma, dbeta) -> None:
    """dx, dgamma, dbeta from x, dy and the forward's saved mean and rstd."""
    rows, cols = _rows(x, "x")
    fx, fdy, fg = _flat(x, "x"), _flat(dy, "dy", x.size), _flat(gamma, "gamma", cols)
    fm, fr, fdx = _flat(mean, "mean", rows), _flat(rstd, "rstd", rows), _flat(dx, "dx", x.size)
    fdg, fdb = _flat(dgamma, "dgamma", cols), _flat(dbeta, "dbeta", cols)
    with trace.span(4, "layer_norm_backward", rows=rows, cols=cols):
        if rows and cols:
            handle.kernel(layer_norm_backward_kernel)[rows, row_threads(cols), handle.stream](
                np.int64(cols), fx, fdy, fg, fm, fr, fdx)
            handle.kernel(layer_norm_params_backward_kernel)[_ceil_div(cols, 32), (32, 16), handle.stream](
                np.int64(rows), np.int64(cols), fx, fdy, fm, fr, fdg, fdb)


def batch_norm_forward_kernel(n, c, hw, sx, training, eps, momentum, x, gamma, beta, running_mean, running_var,
                              y, mean, rstd):
    # One block per channel: statistics over N, H, W (training) or the running ones (inference).
    s = shared.array(128, np.float32)
    ch, t = blockIdx.x, threadIdx.x
    count = n * hw
    if training:
        acc = float32(0.0)
        for e in range(t, count, 128):
            acc += x[e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]]
        mu = block_reduce(s, t, acc, False) / float32(count)
        acc = float32(0.0)
        for e in range(t, count, 128):
            d = x[e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]] - mu
            acc += d * d
        var = block_reduce(s, t, acc, False) / float32(count)
        if t == 0:
            mean[ch] = mu
            rstd[ch] = float32(1.0) / math.sqrt(var + eps)
            unbiased = var * count / max(count - 1, 1)
            running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mu
            running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * unbiased
    else:
        mu = running_mean[ch]
        var = running_var[ch]
    r = float32(1.0) / math.sqrt(var + eps)
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        y[at] = (x[at] - mu) * r * gamma[ch] + beta[ch]


def batch_norm_backward_kernel(n, c, hw, sx, x, dy, gamma, mean, rstd, dx, dgamma, dbeta):
    s = shared.array(128, np.float32)
    ch, t = blockIdx.x, threadIdx.x
    count = n * hw
    mu, r = mean[ch], rstd[ch]
    a = float32(0.0)
    b = float32(0.0)
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        a += dy[at]
        b += dy[at] * (x[at] - mu) * r
    a = block_reduce(s, t, a, False)
    b = block_reduce(s, t, b, False)
    if t == 0:
        dbeta[ch] = a
        dgamma[ch] = b
    g = gamma[ch] * r / float32(count)
    for e in range(t, count, 128):
        at = e // hw * sx[0] + ch * sx[1] + e % hw * sx[2]
        dx[at] = g * (count * dy[at] - a - (x[at] - mu) * r * b)


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
            handle.kernel(batch_norm_forward_kernel)[c, ROW_THREADS, handle.stream](
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
            handle.kernel(batch_norm_backward_kernel)[c, ROW_THREADS, handle.stream](
                np.int64(n), np.int64(c), np.int64(h * w), _channel_strides(handle, desc), *arrays)
