"""Layer 5: reductions (sum, prod, max/min with their indices, argmax, mean, var, std, logsumexp) with their
gradients. A reduction over several dimensions runs one dimension at a time, highest first, adjacent ones
merged into one; each step is one kernel on a GPU (`lapis.libs.reductions.reduce`), reading in order, so results
are deterministic."""

import builtins
import math
from collections import namedtuple

import numpy as np

from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function
from lapis.framework.ops.common import dims as _dims
from lapis.framework.ops.common import new
from lapis.framework.ops.elementwise import where
from lapis.framework.tensor_base import TensorBase, contiguous_strides, parse_shape, wrap_dim

return_types = namedtuple("return_types", ["values", "indices"])


def reduce(op: str, x: TensorBase, dims: list, keepdim: bool, out_dtype: _dtype.dtype) -> TensorBase:
    """Reduce x over `dims`, one dimension at a time (highest first), in out_dtype, without autograd. Adjacent
    reduced dimensions are one dimension of the contiguous input, reduced in one step (a bias's gradient,
    summed over batch and tokens: one kernel, not two)."""
    cur = (x if x.dtype is out_dtype or op.startswith("arg") else x.to(out_dtype))._contiguous()
    if x.ndim == 0:
        cur = _reshaped(cur, (1,))
        dims = [0]
    shape, merged = _merge_adjacent(cur._shape, sorted(dims))
    if shape != cur._shape:
        cur = _reshaped(cur, shape)
    for d in reversed(merged):
        shape = cur._shape[:d] + cur._shape[d + 1:]
        if cur._shape[d] == 0:
            if op in ("max", "min", "argmax", "argmin"):
                raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
            out = new(shape, out_dtype, x.device)
            backend.fill(out._data, 0 if op == "sum" else 1)
        else:
            out = new(shape, _dtype.int64 if op.startswith("arg") else out_dtype, x.device)
            backend.reduce(op, cur._data, d, out._data)
        cur = out
    if keepdim:
        cur = _reshaped(cur, tuple(_kept(x.shape, dims)))
    return cur


def _reshaped(t: TensorBase, shape: tuple) -> TensorBase:
    """Contiguous t in another shape of its size, a view with no autograd: reduce runs inside a Function's forward,
    which records no view nodes anyway."""
    return t._view(shape, contiguous_strides(shape), t._offset)


def _merge_adjacent(shape: tuple, dims: list) -> tuple[tuple, list]:
    """shape with each run of adjacent dims (sorted) merged into one dimension, and the merged runs' places."""
    out, places = [], []
    for i, n in enumerate(shape):
        if i in dims and i - 1 in dims:
            out[-1] *= n
        else:
            if i in dims:
                places.append(len(out))
            out.append(n)
    return tuple(out), places


def _kept(shape: tuple, dims: list) -> list:
    """shape with the reduced dims kept as 1 (keepdim's shape)."""
    return [1 if i in dims else n for i, n in enumerate(shape)]


class Sum(Function):
    node_name = "SumBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dim=None, keepdim=False, dtype=None):
        dims = _dims(dim, x.ndim)
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dims, keepdim
        if dim is not None:
            ctx.node_name = "SumBackward1"
        out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else _dtype.int64)
        return reduce("sum", x, dims, keepdim, out_dtype)

    @staticmethod
    def backward(ctx, g):
        if not ctx.keepdim and ctx.shape:
            g = g.reshape(_kept(ctx.shape, ctx.dims))
        return g.expand(ctx.shape), None, None, None


class Prod(Function):
    node_name = "ProdBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dim=None, keepdim=False):
        dims = _dims(dim, x.ndim)
        out = reduce("prod", x, dims, keepdim, x.dtype if x.dtype.is_floating_point else _dtype.int64)
        ctx.save_for_backward(x, out)
        ctx.dims, ctx.keepdim = dims, keepdim
        if dim is not None:
            ctx.node_name = "ProdBackward1"
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        if not ctx.keepdim and x.ndim:
            g, out = g.reshape(_kept(x.shape, ctx.dims)), out.reshape(_kept(x.shape, ctx.dims))
        return g * out / x, None, None


class MaxMin(Function):
    """max/min along one dimension: values and the index of the first extreme (torch.return_types.max)."""

    @staticmethod
    def forward(ctx, x: TensorBase, dim, keepdim, op):
        d = wrap_dim(dim, x.ndim)
        values = reduce(op, x, [d], keepdim, x.dtype)
        indices = reduce("arg" + op, x, [d], keepdim, x.dtype)
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, d, keepdim
        ctx.node_name = op.capitalize() + "Backward0"
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, g, _indices_grad):
        (indices,) = ctx.saved_tensors
        if not ctx.keepdim and ctx.shape:
            g, indices = g.unsqueeze(ctx.dim), indices.unsqueeze(ctx.dim)
        if not ctx.shape:
            return g, None, None, None
        positions = TensorBase._from_numpy(np.arange(ctx.shape[ctx.dim], dtype=np.int64), g.device).reshape(
            [-1 if i == ctx.dim else 1 for i in range(len(ctx.shape))])
        return where(positions == indices, g, 0.0).expand(ctx.shape), None, None, None


class MaxAll(Function):
    @staticmethod
    def forward(ctx, x: TensorBase, op):
        if x.numel() == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                               "reduction dim with the 'dim' argument.")
        out = reduce(op, x, list(range(x.ndim)), False, x.dtype)
        ctx.node_name = op.capitalize() + "Backward1"
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        hit = (x == out).to(g.dtype)
        return g * hit / hit.sum(), None                         # torch spreads the gradient over ties


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001 - torch.sum
    return Sum.apply(x, dim, keepdim, dtype)


def sum_to_size(x, *size):
    """x summed over the dimensions that broadcasting `size` to x's shape would add or stretch (torch's)."""
    shape = parse_shape(size)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    if lead < 0 or builtins.any(n not in (1, m) for n, m in zip(shape, x.shape[lead:], strict=True)):
        raise RuntimeError(f"size {list(shape)} is not expandable to size {list(x.shape)}.")
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1]
    return (sum(x, dims, keepdim=True) if dims else x).reshape(shape)


def mean(x, dim=None, keepdim=False, dtype=None):
    if not (dtype or x.dtype).is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {x.dtype.name.capitalize()}")
    count = 1
    for d in _dims(dim, x.ndim):
        count *= x.shape[d]
    return sum(x if dtype is None else x.to(dtype), dim, keepdim) / count


def var(x, dim=None, unbiased=True, keepdim=False, correction=None):
    dims = _dims(dim, x.ndim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    c = (1 if unbiased else 0) if correction is None else correction
    centred = x - mean(x, dims, keepdim=True)
    return sum(centred * centred, dims, keepdim) / builtins.max(n - c, 0)


def std(x, dim=None, unbiased=True, keepdim=False, correction=None):
    return var(x, dim, unbiased, keepdim, correction).sqrt()


def prod(x, dim=None, keepdim=False):
    return Prod.apply(x, dim, keepdim)


def _extreme(op):
    def extreme(x, dim=None, keepdim=False):
        if isinstance(dim, TensorBase):                 # torch.max(a, b) is maximum
            return (x.maximum if op == "max" else x.minimum)(dim)
        if dim is None:
            return MaxAll.apply(x, op)
        values, indices = MaxMin.apply(x, dim, keepdim, op)
        return return_types(values, indices)
    extreme.__name__ = op
    return extreme


max = _extreme("max")  # noqa: A001 - torch.max
min = _extreme("min")  # noqa: A001 - torch.min


def _arg_extreme(op):
    def arg_extreme(x, dim=None, keepdim=False):
        if dim is None:
            return reduce(op, x.reshape(-1), [0], False, x.dtype)
        return reduce(op, x, [wrap_dim(dim, x.ndim)], keepdim, x.dtype)
    arg_extreme.__name__ = op
    return arg_extreme


argmax = _arg_extreme("argmax")
argmin = _arg_extreme("argmin")


def logsumexp(x, dim, keepdim=False):
    """log(sum(exp(x))) along dim, computed as m + log(sum(exp(x - m))) with m the maximum, so that large values do
    not overflow. As torch's: an infinite maximum shifts by 0 instead (inf - inf would be NaN), and an empty dim
    gives -inf (the log of an empty sum) where max would refuse it."""
    if x.numel() == 0:
        return x.exp().sum(dim, keepdim).log()
    m = max(x, dim, keepdim=True).values.detach()
    m = where(m.abs() == math.inf, 0.0, m)
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dim)


def all(x, dim=None, keepdim=False):  # noqa: A001 - torch.all
    """Whether every element (along dim) is nonzero (NaN is), as bool."""
    return sum(x == 0, dim, keepdim) == 0


def any(x, dim=None, keepdim=False):  # noqa: A001 - torch.any
    """Whether some element (along dim) is nonzero, as bool."""
    return sum(x != 0, dim, keepdim) > 0


def norm(x, p="fro", dim=None, keepdim=False):
    """The vector p-norm over dim (all elements when None): 2 (and "fro") the root of the sum of squares, 1 the sum
    of magnitudes, inf and -inf the largest and smallest magnitude, 0 the count of nonzeros, other p the p-th
    root of the sum of |x|^p (torch.norm's vector norms)."""
    a = x.abs()
    if p in ("fro", 2):
        return sum(x * x, dim, keepdim).sqrt()
    if p == 1:
        return sum(a, dim, keepdim)
    if p in (math.inf, -math.inf):
        picked = _extreme("max" if p > 0 else "min")
        return picked(a) if dim is None else picked(a, dim, keepdim)[0]
    if p == 0:
        return sum((x != 0).to(x.dtype), dim, keepdim)
    return sum(a ** p, dim, keepdim) ** (1.0 / p)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b| elementwise, as bool (equal infinities are close; NaN only with equal_nan)."""
    close = ((a - b).abs() <= atol + rtol * b.abs()) | (a == b)
    return close | (a.isnan() & b.isnan()) if equal_nan else close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return builtins.bool(all(isclose(a, b, rtol, atol, equal_nan)).item())


def equal(a, b) -> bool:
    """Whether a and b have the same shape and elements (torch.equal)."""
    return tuple(a.shape) == tuple(b.shape) and builtins.bool(all(a == b).item())


class CumSum(Function):
    """The running sums along dim, in order; integers and bool sum in int64 (torch's); the gradient is the running
    sums of g taken from the far end."""
    node_name = "CumsumBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dim: int, dtype):
        out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else _dtype.int64)
        src = x.reshape(1) if x.ndim == 0 else x
        d = wrap_dim(dim, src.ndim)
        out = new(src.shape, out_dtype, x.device)
        backend.cumsum(src.to(out_dtype)._contiguous()._data, d, out._data)
        ctx.d, ctx.shape = d, x.shape
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        g = g.reshape(1) if g.ndim == 0 else g
        return g.flip(ctx.d).cumsum(ctx.d).flip(ctx.d).reshape(ctx.shape), None, None


def cumsum(x, dim, dtype=None):
    return CumSum.apply(x, dim, dtype)
