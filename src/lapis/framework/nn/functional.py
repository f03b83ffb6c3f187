"""Layer 5: torch.nn.functional, built from the framework's differentiable tensor ops.

Each function composes `lapis` ops, so its gradient comes from theirs and it runs as kernels on a
GPU. Losses reduce with torch's `reduction` ('mean', 'sum', 'none').
"""

import math

import numpy as np

from lapis.framework import amp
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function
from lapis.framework.creation import arange, full, ones, rand, tensor, zeros
from lapis.framework.ops import linalg
from lapis.framework.ops.common import broadcast_shapes
from lapis.framework.ops.elementwise import where
from lapis.framework.ops.nn import (
    Activation,
    Attention,
    BatchNorm,
    Conv2d,
    ConvTranspose2d,
    LayerNorm,
    NllLoss,
    Pool2d,
)
from lapis.framework.tensor import Tensor


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    # x: (..., in), weight: (out, in), bias: (out,) -> (..., out)
    x, weight, bias = amp.lower(x, weight, bias)
    fused = linalg.linear(x, weight, bias) if bias is not None else None       # one gemm with a bias epilogue
    if fused is not None:
        return fused
    y = x @ weight.t()
    return y + bias if bias is not None else y


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    # x: (N, C, H, W), weight: (K, C/groups, R, S) -> (N, K, P, Q)
    return Conv2d.apply(x, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    # x: (N, C, H, W), weight: (C, K/groups, R, S) -> (N, K, (H-1)*stride - 2*padding + dilation*(R-1) + output_padding
    # + 1, likewise for W)
    return ConvTranspose2d.apply(x, weight, bias, stride, padding, output_padding, dilation, groups)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return where(x > 0, x, x * negative_slope)


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    return Pool2d.apply(x, "max", kernel_size, stride, padding)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    return Pool2d.apply(x, "average", kernel_size, stride, padding)


def _or_full(t: Tensor | None, shape, value: float, like: Tensor) -> Tensor:
    """t, or (when an affine parameter or a running statistic is absent) its neutral value: what the
    fused kernels read in its place."""
    return t if t is not None else full(shape, value, dtype=like.dtype, device=like.device)


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    # x: (N, C) or (N, C, L) or (N, C, H, W); statistics per channel C
    c = x.shape[1]
    if training:
        return BatchNorm.apply(x, _or_full(weight, (c,), 1.0, x), _or_full(bias, (c,), 0.0, x),
                               _or_full(running_mean, (c,), 0.0, x), _or_full(running_var, (c,), 1.0, x), momentum,
                               eps)
    shape = [1, c] + [1] * (x.ndim - 2)
    y = (x - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu_() if inplace else x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    if x.dtype == _dtype.float32:                 # one fused kernel each way
        return Activation.apply(x, "gelu")
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())


def silu(x: Tensor) -> Tensor:
    return Activation.apply(x, "silu") if x.dtype == _dtype.float32 else x * x.sigmoid()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return x.softmax(dim, dtype)


def log_softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return x.log_softmax(dim, dtype)


def _resampling(source: int, target: int, rows) -> np.ndarray:
    """A (target, source) matrix whose row i holds the weights `rows(i)` gives as (source index, weight) pairs:
    resampling one dimension is a product with it, so its gradient is the transposed product."""
    m = np.zeros((target, source))
    for i in range(target):
        for j, w in rows(i):
            m[i, j] += w
    return m


def _resample(x: Tensor, matrices: list) -> Tensor:
    """x (N, C, *spatial) with each spatial dimension d multiplied by matrices[d] (target, source)."""
    for d, m in enumerate(matrices):
        dim = x.ndim - len(matrices) + d
        m = tensor(m.astype(x.dtype.np), device=x.device)
        x = (x.transpose(dim, -1) @ m.t()).transpose(dim, -1)
    return x


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    # x: (N, C, H, W) or (C, H, W) -> (..., oh, ow): output i averages rows floor(i H / oh) .. ceil((i + 1) H / oh)
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    sizes = tuple(x.shape[x.ndim - 2 + d] if s is None else s for d, s in enumerate(sizes))

    def window(n: int, out: int):
        def rows(i: int):
            start, end = i * n // out, -(-(i + 1) * n // out)
            return [(j, 1.0 / (end - start)) for j in range(start, end)]
        return rows
    return _resample(x, [_resampling(x.shape[x.ndim - 2 + d], s, window(x.shape[x.ndim - 2 + d], s))
                         for d, s in enumerate(sizes)])


def interpolate(x: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """torch's resize of the spatial dimensions of x (N, C, *spatial): 'nearest' (source floor(i * scale)),
    'linear', 'bilinear' (half-pixel centers, or the corners aligned), each dimension a product with a sparse
    matrix of its weights, so gradients flow back through the transposed products."""
    spatial = x.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    if mode not in ("nearest", "linear", "bilinear"):
        raise NotImplementedError(f"interpolate mode {mode!r} is not supported yet (nearest, linear, bilinear)")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear")
    count = len(spatial)
    factors = [None] * count
    if size is not None:
        sizes = [size] * count if isinstance(size, int) else list(size)
    else:
        factors = [scale_factor] * count if isinstance(scale_factor, (int, float)) else list(scale_factor)
        sizes = [int(math.floor(n * f)) for n, f in zip(spatial, factors, strict=True)]
        if recompute_scale_factor:
            factors = [None] * count

    def rows_for(n: int, out: int, factor):
        scale = 1.0 / factor if factor else n / out
        if mode == "nearest":
            return lambda i: [(min(int(math.floor(i * scale)), n - 1), 1.0)]
        def rows(i: int):
            if align_corners:
                src = i * (n - 1) / (out - 1) if out > 1 else 0.0
            else:
                src = max((i + 0.5) * scale - 0.5, 0.0)
            j0 = min(int(math.floor(src)), n - 1)
            j1, w1 = min(j0 + 1, n - 1), src - j0
            return [(j0, 1.0 - w1), (j1, w1)]
        return rows
    return _resample(x, [_resampling(n, out, rows_for(n, out, f))
                         for n, out, f in zip(spatial, sizes, factors, strict=True)])


def kl_div(x: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    # x: log-probabilities; target: probabilities (or log-probabilities with log_target) -> target (log target - x),
    # 0 where the target is 0
    if log_target:
        loss = target.exp() * (target - x)
    else:
        loss = where(target > 0, target * (where(target > 0, target, ones((), device=target.device)).log() - x),
                     zeros((), device=x.device, dtype=x.dtype))
    if reduction == "batchmean":
        return loss.sum() / x.shape[0]
    return _reduce(loss, reduction)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` (V, E) picked by `input` (...) int64 -> (..., E), gathered (scattered back in backward). A
    `padding_idx` row is read like any other but gets no gradient, as torch's (its rows of the result are the
    picked values with the graph cut)."""
    # input: (...) int64, weight: (V, E); index_select, unlike weight[input], refuses a negative index, as torch's
    # embedding does
    out = weight.index_select(0, input.reshape(-1)).reshape(*input.shape, weight.shape[1])     # (..., E)
    if padding_idx is None:
        return out
    if not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise AssertionError("Padding_idx must be within num_embeddings")
    padding_idx %= weight.shape[0]
    return where((input != padding_idx).unsqueeze(-1), out, out.detach())


def one_hot(target: Tensor, num_classes: int = -1) -> Tensor:
    """(..., ) int64 -> (..., C) int64, as an elementwise comparison with arange(C) (no scatter needed)."""
    if target.dtype is not _dtype.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes < 0:
        num_classes = int(target.max().item()) + 1
    classes = arange(num_classes, device=target.device)
    return (target.unsqueeze(-1) == classes).long()


def _reduce(loss: Tensor, reduction: str, weight_sum: Tensor | None = None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / weight_sum if weight_sum is not None else loss.mean()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def nll_loss(logp: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    # logp: (N, C) log-probabilities, target: (N,) class indices -> the picked -logp, averaged over kept rows;
    # also, as torch: logp (N, C, d1, ...) with target (N, d1, ...) (a class per position), and logp (C,) with a 0-d
    # target; "none" gives the target's shape
    if logp.ndim >= 3 or (logp.ndim == 1 and target.ndim == 0):
        if tuple(target.shape) != (logp.shape[0], *logp.shape[2:]) if logp.ndim >= 3 else target.ndim != 0:
            raise ValueError(f"Expected target size {(logp.shape[0], *logp.shape[2:])}, got {tuple(target.shape)}")
        classes = logp.shape[0] if logp.ndim == 1 else logp.shape[1]
        rows = logp.reshape(1, classes) if logp.ndim == 1 else \
            logp.permute(0, *range(2, logp.ndim), 1).reshape(-1, classes)          # (N * d1 * ..., C)
        loss = nll_loss(rows, target.reshape(-1), ignore_index, reduction)
        return loss.reshape(target.shape) if reduction == "none" else loss
    if logp.ndim != 2 or target.ndim != 1 or target.shape[0] != logp.shape[0]:
        raise ValueError(f"Expected input batch_size ({logp.shape[0]}) to match target batch_size "
                         f"({target.shape[0] if target.ndim else 0}).")
    if logp.dtype is _dtype.float32 and target.dtype is _dtype.int64 and reduction in ("none", "mean", "sum"):
        return NllLoss.apply(logp, target, ignore_index, reduction)          # one kernel each way
    keep = (target != ignore_index).to(logp.dtype)
    picked = one_hot(where(target == ignore_index, 0, target), logp.shape[1]).to(logp.dtype)
    loss = -(logp * picked).sum(1) * keep
    return _reduce(loss, reduction, keep.sum() if reduction == "mean" else None)


def cross_entropy(logits: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    # logits: (N, C), target: (N,) class indices (or as nll_loss takes them: (N, C, d1, ...) and (C,))
    logp = log_softmax(logits, 1 if logits.ndim > 1 else 0)
    if not label_smoothing:
        return nll_loss(logp, target, ignore_index, reduction)               # PyTorch's two kernels
    nll = nll_loss(logp, target, ignore_index, "none")
    if label_smoothing:
        keep = (target != ignore_index).to(logp.dtype)
        smooth = -logp.mean(1 if logp.ndim > 1 else 0) * keep
        nll = (1 - label_smoothing) * nll + label_smoothing * smooth
    keep_sum = (target != ignore_index).to(logp.dtype).sum() if reduction == "mean" else None
    return _reduce(nll, reduction, keep_sum)


def mse_loss(x: Tensor, y: Tensor, reduction: str = "mean") -> Tensor:
    d = amp.upper(x) - amp.upper(y)
    return _reduce(d * d, reduction)


class _BinaryCrossEntropyWithLogits(Function):
    """log(1 + exp(-|x|)) + max(x, 0) - x y, the stable form torch uses, with torch's gradients: sigmoid(x) - y
    for x and -x for y. (The form's |x| and max(x, 0) have no slope at 0, where their sum has 1/2: through
    them a logit of exactly 0, as zero-initialized weights give, would get -y.) With a pos_weight p (broadcast
    along the last dimension, the classes), (1 - y) x + (1 + (p - 1) y) softplus(-x), whose gradients are
    (p y + 1 - y) sigmoid(x) - p y for x, (p - 1) softplus(-x) - x for y (torch's), and y softplus(-x) for p.
    The backward is made of differentiable ops, so a second derivative follows."""
    node_name = "BinaryCrossEntropyWithLogitsBackward0"

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, pos_weight: Tensor | None = None):
        ctx.save_for_backward(x, y, pos_weight)
        if pos_weight is None:
            return (1 + (-x.abs()).exp()).log() + x.relu() - x * y
        softplus = (1 + (-x.abs()).exp()).log() + (-x).relu()          # -log(sigmoid(x)), stable
        return (1 - y) * x + (1 + (pos_weight - 1) * y) * softplus

    @staticmethod
    def backward(ctx, g):
        x, y, p = ctx.saved_tensors
        if p is None:
            return g * (x.sigmoid() - y), -g * x, None
        softplus = (1 + (-x.abs()).exp()).log() + (-x).relu()
        py = p * y
        return (g * ((py + 1 - y) * x.sigmoid() - py), g * ((p - 1) * softplus - x),
                g * y * softplus if ctx.needs_input_grad[2] else None)


class _BinaryCrossEntropy(Function):
    """-(y log x + (1 - y) log(1 - x)) with each log clamped at -100 (torch's, so x = 0 or 1 gives a finite
    loss), and torch's gradient (x - y) / max(x (1 - x), 1e-12) for x."""
    node_name = "BinaryCrossEntropyBackward0"

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor):
        ctx.save_for_backward(x, y)
        return -(y * x.log().clamp(min=-100) + (1 - y) * (1 - x).log().clamp(min=-100))

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (x - y) / (x * (1 - x)).clamp(min=1e-12), None


def binary_cross_entropy(x: Tensor, y: Tensor, weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    # x: probabilities in [0, 1], y: targets of x's shape
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"Using a target size ({tuple(y.shape)}) that is different to the input size "
                         f"({tuple(x.shape)}) is deprecated. Please ensure they have the same size.")
    loss = _BinaryCrossEntropy.apply(x, y)
    return _reduce(loss * weight if weight is not None else loss, reduction)


def l1_loss(x: Tensor, y: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce((x - y).abs(), reduction)


def smooth_l1_loss(x: Tensor, y: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta beyond (the L1 loss for beta 0)."""
    d = (x - y).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(x: Tensor, y: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) beyond."""
    d = (x - y).abs()
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def pad(x: Tensor, pad: tuple, mode: str = "constant", value: float | None = None) -> Tensor:
    """x with pad = (left, right) for its last dimension, then (top, bottom) for the one before, ... (a negative
    amount crops), differentiable as torch's. 'constant' fills with `value` (0 by default), any number of
    dimensions; 'reflect' (mirrored about the edge element), 'replicate' (the edge element repeated) and 'circular'
    (wrapped around) pad the last 1, 2 or 3 dimensions of a batched or unbatched input, as torch's
    reflection/replication/circular pads do: one index_select per padded dimension, at indices computed on the
    host, so the gradient scatter-adds back into every element a padded one was copied from."""
    if len(pad) % 2:
        raise ValueError(f"Padding length must be divisible by 2 and at most twice the input's dimensions, got "
                         f"{len(pad)} for {x.ndim} dimensions")
    if len(pad) // 2 > x.ndim:
        raise ValueError(f"Padding length should be less than or equal to two times the input dimension but got "
                         f"padding length {len(pad)} and input of dimension {x.ndim}")
    if mode == "constant":
        return _pad_constant(x, pad, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    count = len(pad) // 2
    if count not in (1, 2, 3) or x.ndim not in (count + 1, count + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor.\nSupported combinations for "
            "non-constant padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)\n  - 3D or 4D input: "
            "padding size = 4 (pads last 2 dimensions)\n  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if any(n == 0 for n in x.shape[1:]):                   # the first may be empty (a batch, or the channels)
        raise RuntimeError(f"Expected {count + 1}D or {count + 2}D (batch mode) tensor with possibly 0 batch size and "
                           f"other non-zero dimensions for input, but got: {list(x.shape)}")
    for k in range(count):
        d, before, after = x.ndim - 1 - k, int(pad[2 * k]), int(pad[2 * k + 1])
        n = x.shape[d]
        if mode == "reflect" and (before >= n or after >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({before}, {after}) at dimension {d} of input {list(x.shape)}")
        kept = n - max(0, -before) - max(0, -after)          # circular: crops first, then wraps what is kept
        if mode == "circular" and (before > kept or after > kept):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if n + before + after < 0 or (mode != "circular" and n + before + after < 1):
            raise RuntimeError(f"input (W: {n}) is too small. Calculated output W: {n + before + after}")
        if before == after == 0:
            continue
        j = np.arange(-before, n + after)
        if mode == "reflect":
            j = np.abs(j)
            j = np.where(j > n - 1, 2 * (n - 1) - j, j)
        elif mode == "replicate":
            j = np.clip(j, 0, n - 1)
        else:
            j = max(0, -before) + (np.arange(-max(before, 0), kept + max(after, 0)) % max(kept, 1))
        x = x.index_select(d, tensor(j.astype(np.int64), device=x.device))
    return x


def _pad_constant(x: Tensor, pad: tuple, value) -> Tensor:
    shape, inside, source = list(x.shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for k in range(len(pad) // 2):
        d, before, after = x.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]
        shape[d] = x.shape[d] + before + after
        if shape[d] < 0:
            raise RuntimeError(f"The input size {x.shape[d]}, plus negative padding {before} and {after} resulted "
                               f"in a negative output size, which is invalid")
        source[d] = slice(max(0, -before), x.shape[d] - max(0, -after))
        inside[d] = slice(max(0, before), max(0, before) + source[d].stop - source[d].start)
    out = full(shape, value, dtype=x.dtype, device=x.device)
    out[tuple(inside)] = x[tuple(source)]
    return out


def binary_cross_entropy_with_logits(x: Tensor, y: Tensor, weight: Tensor | None = None, size_average=None,
                                     reduce=None, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """torch's: the loss of sigmoid(x) against y, computed from the logits x (stable); `weight` rescales each
    element's loss (broadcast to x), `pos_weight` the positive term of each class (broadcast along the last
    dimension); `size_average` and `reduce` are torch's legacy spellings of `reduction`."""
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"Target size ({y.shape}) must be the same as input size ({x.shape})")
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = _BinaryCrossEntropyWithLogits.apply(x, y, pos_weight)
    return _reduce(loss * weight if weight is not None else loss, reduction)


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's legacy_get_string: size_average and reduce (None means True) decide when either is given."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return ("mean" if size_average else "sum") if reduce else "none"


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (in x itself with `inplace`); the
    mask is drawn by the framework's generator (on the host, as its other random numbers)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x.mul_(0) if inplace else x * 0
    keep = (rand(x.shape, device=x.device) >= p).to(x.dtype)
    return x.mul_(keep).mul_(1 / (1 - p)) if inplace else x * keep * (1 / (1 - p))


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    # x: (..., *normalized_shape); statistics per row of the normalized dimensions
    x = amp.upper(x)
    normalized_shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    if tuple(x.shape[x.ndim - len(normalized_shape):]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(x.shape)}")
    if x.dtype == _dtype.float32:                            # the fused kernels are float32
        return LayerNorm.apply(x, _or_full(weight, normalized_shape, 1.0, x), _or_full(bias, normalized_shape, 0.0, x),
                               eps)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dims, keepdim=True)
    y = centred * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    # query: (..., L, E), key: (..., S, E), value: (..., S, Ev) -> (..., L, Ev); a boolean mask is True where
    # a query may attend, a float mask is added to the scores; is_causal lets row i see keys 0..i
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    fused = (attn_mask is None and dropout_p == 0 and query.dtype == key.dtype == value.dtype == _dtype.float32
             and query.shape[-1] == value.shape[-1] and (query.device.type == "cpu" or query.shape[-1] <= 64))
    if fused:                                   # the flash kernels: scores never stored
        shape = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        return Attention.apply(query.expand(*shape, *query.shape[-2:]), key.expand(*shape, *key.shape[-2:]),
                               value.expand(*shape, *value.shape[-2:]), scale, is_causal)
    scores = query @ key.mT * scale             # (..., L, S)
    if is_causal:
        attn_mask = ones(scores.shape[-2:], dtype=_dtype.bool_, device=query.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == _dtype.bool_ else scores + attn_mask
    weights = dropout(softmax(scores, -1), dropout_p)
    return weights @ value


def multi_head_attention_forward(module, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None,
                                 need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                                 is_causal: bool = False):
    """nn.MultiheadAttention's forward on batch-first (N, L, E) inputs; torch's mask conventions (True in a
    boolean attn_mask or key_padding_mask means "do not attend")."""
    # query: (N, L, E), key and value: (N, S, E)
    n, length, e = query.shape
    heads, head_dim = module.num_heads, e // module.num_heads
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    def heads_of(x):                            # (N, T, E) -> (N, H, T, Dh)
        return x.reshape(n, x.shape[1], heads, head_dim).transpose(1, 2)
    if query is key is value:                   # self-attention: one packed projection (N, L, 3E), as torch
        q, k, v = (heads_of(x) for x in linear(query, module.in_proj_weight, module.in_proj_bias).chunk(3, -1))
    else:
        w_q, w_k, w_v = module.in_proj_weight.chunk(3)
        b_q, b_k, b_v = module.in_proj_bias.chunk(3) if module.in_proj_bias is not None else (None, None, None)
        q, k, v = (heads_of(linear(x, w, b)) for x, w, b in ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v)))
    p = module.dropout if module.training else 0.0
    use_hint = is_causal and key_padding_mask is None and not need_weights
    mask = None
    if not use_hint:
        for m in (attn_mask, key_padding_mask):
            if m is None:
                continue
            add = zeros(m.shape, device=query.device).masked_fill(m, -math.inf) if m.dtype == _dtype.bool_ \
                else m
            if m is key_padding_mask:
                add = add.reshape(n, 1, 1, key.shape[1])
            elif m.ndim == 3:                   # (N * H, L, S)
                add = add.reshape(n, heads, length, key.shape[1])
            mask = add if mask is None else mask + add
    if need_weights:
        scores = q @ k.mT * (1 / math.sqrt(head_dim))
        weights = softmax(scores if mask is None else scores + mask, -1)    # (N, H, L, S)
        out = dropout(weights, p) @ v
        weights = weights.mean(1) if average_attn_weights else weights
    else:
        out, weights = scaled_dot_product_attention(q, k, v, mask, p, use_hint), None
    out = out.transpose(1, 2).reshape(n, length, e)
    return module.out_proj(out), weights

__all__ = ["linear", "conv2d", "conv_transpose2d", "adaptive_avg_pool2d", "interpolate", "kl_div", "leaky_relu",
           "max_pool2d", "avg_pool2d", "batch_norm", "relu", "gelu", "silu", "sigmoid", "tanh", "softmax",
           "log_softmax", "embedding", "one_hot", "nll_loss", "cross_entropy", "mse_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "dropout", "huber_loss", "l1_loss", "pad", "smooth_l1_loss",
           "layer_norm", "scaled_dot_product_attention", "multi_head_attention_forward"]
