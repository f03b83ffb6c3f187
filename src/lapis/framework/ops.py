"""Layer 5: the framework's ops, each a `lapis.autograd.Function` with forward and backward side by side.

Elementwise ops broadcast with numpy's rules and compute in torch's promoted dtype (operands are
cast first, so an int32 tensor times 2.5 computes in float32); reductions run one dimension at a
time; views share storage. Gradients of broadcast operands are summed back to their shapes
(`_unbroadcast`).
"""

import builtins
import math

import numpy as np

from lapis import trace
from lapis.framework import backend as _backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function
from lapis.framework.device import device
from lapis.framework.tensor import Size, Tensor, _contiguous, _contiguous_strides, _dim


# -- helpers ----------------------------------------------------------------------------------------
def _check_devices(*tensors) -> device:
    devs = []                       # in operand order; a 0-d cpu tensor may join any device, as in torch
    for t in tensors:
        if isinstance(t, Tensor) and (t.ndim or t.device.type != "cpu") and t.device not in devs:
            devs.append(t.device)
    if len(devs) > 1:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{devs[0]} and {devs[1]}!")
    if devs:
        return devs[0]
    return next((t.device for t in tensors if isinstance(t, Tensor)), device("cpu"))


def broadcast_shapes(*shapes) -> tuple:
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s):
            k = ndim - len(s) + i
            if n != 1 and out[k] not in (1, n):
                raise RuntimeError(f"The size of tensor a ({out[k]}) must match the size of tensor b ({n}) at "
                                   f"non-singleton dimension {k}")
            if n != 1:
                out[k] = n
    return tuple(out)


def _operand(x, dt: _dtype.dtype, dev: device):
    """A backend array of x in dtype dt on dev: a cast copy when the dtype differs, a 0-d array for a number."""
    if isinstance(x, Tensor):
        if x.device != dev:                # a 0-d cpu tensor meets a GPU tensor: move it, as torch does
            x = x.to(dev)
        return x._data if x.dtype is dt else x.to(dt)._data
    value = np.array(x, dt.np)
    return value if dev.type == "cpu" else value[()]          # a GPU kernel takes a number as an argument


def _unbroadcast(grad: Tensor, shape: tuple) -> Tensor:
    """Sum grad over the dimensions broadcasting added or stretched, back to `shape`."""
    if tuple(grad.shape) == tuple(shape):
        return grad
    lead = grad.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1]
    return grad.sum(dim=dims, keepdim=True).reshape(shape) if dims else grad.reshape(shape)


def _new(shape, dt: _dtype.dtype, dev: device) -> Tensor:
    return Tensor._empty(tuple(shape), dt, dev)


# -- moving and casting -----------------------------------------------------------------------------
class To(Function):
    @staticmethod
    def forward(ctx, x: Tensor, dev: device, dt: _dtype.dtype, copy: bool):
        ctx.src = (x.device, x.dtype)
        if dev == x.device and dt is x.dtype and not copy:
            return x.detach()
        with trace.span(5, "to", src=str(x.device), dst=str(dev), dtype=str(dt), shape=list(x.shape)):
            if dev == x.device:                                    # a cast (or copy) where the data is
                out = _new(x.shape, dt, dev)
                _backend.unary("copy", x._data, out._data)
                return out
            host = x._host()
            return Tensor._from_numpy(host.astype(dt.np) if host.dtype != dt.np else host, dev)

    @staticmethod
    def backward(ctx, g):
        dev, dt = ctx.src
        return g.to(dev, dt), None, None, None


# -- elementwise ------------------------------------------------------------------------------------
def _elementwise(op: str, a, b, out_dtype=None, compute=None):
    dev = _check_devices(a, b)
    dt = compute or _dtype.result_type([a, b])
    shape = broadcast_shapes(a.shape if isinstance(a, Tensor) else (), b.shape if isinstance(b, Tensor) else ())
    out = _new(shape, out_dtype or dt, dev)
    _backend.binary(op, _operand(a, dt, dev), _operand(b, dt, dev), out._data)
    return out


def _shape_of(x) -> tuple:
    return tuple(x.shape) if isinstance(x, Tensor) else ()


class Add(Function):
    @staticmethod
    def forward(ctx, a, b, alpha=1):
        ctx.shapes = _shape_of(a), _shape_of(b)
        ctx.alpha = alpha
        return _elementwise("add", a, b if alpha == 1 else b * alpha)

    @staticmethod
    def backward(ctx, g):
        return _unbroadcast(g, ctx.shapes[0]), _unbroadcast(g * ctx.alpha if ctx.alpha != 1 else g, ctx.shapes[1])


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = _shape_of(a), _shape_of(b)
        return _elementwise("sub", a, b)

    @staticmethod
    def backward(ctx, g):
        return _unbroadcast(g, ctx.shapes[0]), _unbroadcast(-g, ctx.shapes[1])


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None)
        ctx.scalars = a, b
        return _elementwise("mul", a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        a = ctx.scalars[0] if a is None else a
        b = ctx.scalars[1] if b is None else b
        return (_unbroadcast(g * b, _shape_of(a)) if ctx.needs_input_grad[0] else None,
                _unbroadcast(g * a, _shape_of(b)) if ctx.needs_input_grad[1] else None)


class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None)
        ctx.scalars = a, b
        dt = _dtype.result_type([a, b])
        return _elementwise("div", a, b, compute=dt if dt.is_floating_point else _dtype.get_default_dtype())

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        a = ctx.scalars[0] if a is None else a
        b = ctx.scalars[1] if b is None else b
        return (_unbroadcast(g / b, _shape_of(a)) if ctx.needs_input_grad[0] else None,
                _unbroadcast(-g * a / (b * b), _shape_of(b)) if ctx.needs_input_grad[1] else None)


class Pow(Function):
    @staticmethod
    def forward(ctx, a, b):
        square = isinstance(a, Tensor) and not isinstance(b, Tensor) and b == 2
        out = _elementwise("mul", a, a) if square else _elementwise("pow", a, b)    # x ** 2 exactly, as torch
        ctx.save_for_backward(a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None, out)
        ctx.scalars = a, b
        return out

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        a = ctx.scalars[0] if a is None else a
        b = ctx.scalars[1] if b is None else b
        ga = _unbroadcast(g * b * a ** (b - 1), _shape_of(a)) if ctx.needs_input_grad[0] else None
        gb = _unbroadcast(g * out * log(a), _shape_of(b)) if ctx.needs_input_grad[1] else None
        return ga, gb


class Maximum(Function):
    @staticmethod
    def forward(ctx, a, b, op="maximum"):
        ctx.save_for_backward(a, b)
        ctx.op = op
        return _elementwise(op, a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        pick_a = (a > b) if ctx.op == "maximum" else (a < b)
        tie = (a == b).to(g.dtype) * 0.5                       # torch splits the gradient at ties
        wa = pick_a.to(g.dtype) + tie
        return _unbroadcast(g * wa, a.shape), _unbroadcast(g * (1 - wa), b.shape)


class Clamp(Function):
    """clamp(x, lo, hi) with number bounds: a maximum and a minimum kernel; the gradient passes where
    lo <= x <= hi, bounds included, as torch's does."""

    @staticmethod
    def forward(ctx, x: Tensor, lo, hi):
        out = x
        if lo is not None:
            out = _elementwise("maximum", out, lo)
        if hi is not None:
            out = _elementwise("minimum", out, hi)
        ctx.bounds = lo, hi
        ctx.save_for_backward(x)
        return out if out is not x else out.clone()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        inside = (x >= lo) if lo is not None else None
        if hi is not None:
            inside = (x <= hi) if inside is None else Where.apply(inside, x <= hi, False)
        return Where.apply(inside, g, 0.0), None, None


def compare(op: str, a, b) -> Tensor:
    return _elementwise(op, a, b, out_dtype=_dtype.bool_)


_UNARY_GRAD = {
    "neg": lambda x, y, g: -g,
    "abs": lambda x, y, g: g * sign(x),
    "exp": lambda x, y, g: g * y,
    "log": lambda x, y, g: g / x,
    "sqrt": lambda x, y, g: g / (2 * y),
    "rsqrt": lambda x, y, g: g * -0.5 * y * y * y,
    "tanh": lambda x, y, g: g * (1 - y * y),
    "sigmoid": lambda x, y, g: g * y * (1 - y),
    "sin": lambda x, y, g: g * cos(x),
    "cos": lambda x, y, g: -g * sin(x),
    "relu": lambda x, y, g: g * (x > 0).to(g.dtype),
    "erf": lambda x, y, g: g * (2 / math.sqrt(math.pi)) * (-(x * x)).exp(),
}
_FLOAT_ONLY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "erf")
_GRAD_FROM_OUTPUT = ("exp", "sqrt", "rsqrt", "tanh", "sigmoid")      # these save only their result, as torch


class Unary(Function):
    @staticmethod
    def forward(ctx, x: Tensor, op: str):
        dt = x.dtype if x.dtype.is_floating_point or op not in _FLOAT_ONLY else _dtype.get_default_dtype()
        out = _new(x.shape, dt, x.device)
        _backend.unary(op, _operand(x, dt, x.device), out._data)
        ctx.op = op
        ctx.save_for_backward(*((None, out) if op in _GRAD_FROM_OUTPUT else (x, None)))
        return out

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return _UNARY_GRAD[ctx.op](x, y, g), None


def unary(op: str, x: Tensor) -> Tensor:
    return Unary.apply(x, op)


def exp(x):
    return unary("exp", x)


def log(x):
    return unary("log", x) if isinstance(x, Tensor) else math.log(x)


def sin(x):
    return unary("sin", x)


def cos(x):
    return unary("cos", x)


def sign(x: Tensor) -> Tensor:
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


class Activation(Function):
    """gelu (exact) or silu of a float32 tensor as one fused kernel each way (cuDNN's activation kernels)."""

    @staticmethod
    def forward(ctx, x: Tensor, mode: str):
        x = _contiguous(x)
        out = _new(x.shape, x.dtype, x.device)
        _backend.activation(mode, x._data, out._data)
        ctx.mode = mode
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        dx = _new(x.shape, x.dtype, x.device)
        _backend.activation_backward(ctx.mode, x._data, _contiguous(g)._data, dx._data)
        return dx, None


class Where(Function):
    @staticmethod
    def forward(ctx, cond: Tensor, a, b):
        dev = _check_devices(cond, a, b)
        dt = _dtype.result_type([a, b])
        shape = broadcast_shapes(cond.shape, _shape_of(a), _shape_of(b))
        out = _new(shape, dt, dev)
        _backend.where(_operand(cond, _dtype.bool_, dev), _operand(a, dt, dev), _operand(b, dt, dev), out._data)
        ctx.save_for_backward(cond)
        ctx.shapes = _shape_of(a), _shape_of(b)
        return out

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        zero = g * 0
        return (None, _unbroadcast(where(cond, g, zero), ctx.shapes[0]),
                _unbroadcast(where(cond, zero, g), ctx.shapes[1]))


def where(cond, a, b) -> Tensor:
    return Where.apply(cond, a, b)


class Softmax(Function):
    """(log-)softmax over the last dimension as one fused kernel each way (cuDNN's, on a GPU)."""

    @staticmethod
    def forward(ctx, x: Tensor, log: bool):
        x = _contiguous(x)
        out = _new(x.shape, x.dtype, x.device)
        _backend.softmax(x._data, out._data, log)
        ctx.log = log
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        g = _contiguous(g)
        dx = _new(y.shape, y.dtype, y.device)
        _backend.softmax_backward(y._data, g._data, dx._data, ctx.log)
        return dx, None


# -- reductions -------------------------------------------------------------------------------------
def _dims(dim, ndim: int) -> list:
    if dim is None:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, builtins.int) else list(dim)
    return sorted({_dim(d, ndim) for d in dims})


def _reduce(op: str, x: Tensor, dims: list, keepdim: bool, out_dtype: _dtype.dtype) -> Tensor:
    """Reduce x over `dims`, one dimension at a time (highest first), in out_dtype."""
    cur = _contiguous(x if x.dtype is out_dtype or op.startswith("arg") else x.to(out_dtype))
    if x.ndim == 0:
        cur = cur.reshape(1)
        dims = [0]
    for d in sorted(dims, reverse=True):
        shape = cur._shape[:d] + cur._shape[d + 1:]
        if cur._shape[d] == 0:
            if op in ("max", "min", "argmax", "argmin"):
                raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
            out = _new(shape, out_dtype, x.device)
            _backend.fill(out._data, 0 if op == "sum" else 1)
        else:
            out = _new(shape, _dtype.int64 if op.startswith("arg") else out_dtype, x.device)
            _backend.reduce(op, cur._data, d, out._data)
        cur = out
    if keepdim:
        kept = [1 if i in dims else n for i, n in enumerate(x.shape)]
        cur = cur.reshape(kept)
    return cur


class Sum(Function):
    @staticmethod
    def forward(ctx, x: Tensor, dim=None, keepdim=False, dtype=None):
        dims = _dims(dim, x.ndim)
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dims, keepdim
        out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else _dtype.int64)
        return _reduce("sum", x, dims, keepdim, out_dtype)

    @staticmethod
    def backward(ctx, g):
        if not ctx.keepdim and ctx.shape:
            g = g.reshape([1 if i in ctx.dims else n for i, n in enumerate(ctx.shape)])
        return g.expand(ctx.shape), None, None, None


class Prod(Function):
    @staticmethod
    def forward(ctx, x: Tensor, dim=None, keepdim=False):
        dims = _dims(dim, x.ndim)
        out = _reduce("prod", x, dims, keepdim, x.dtype if x.dtype.is_floating_point else _dtype.int64)
        ctx.save_for_backward(x, out)
        ctx.dims, ctx.keepdim = dims, keepdim
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        if not ctx.keepdim and x.ndim:
            kept = [1 if i in ctx.dims else n for i, n in enumerate(x.shape)]
            g, out = g.reshape(kept), out.reshape(kept)
        return g * out / x, None, None


class MaxMin(Function):
    """max/min along one dimension: values and the index of the first extreme (torch.return_types.max)."""

    @staticmethod
    def forward(ctx, x: Tensor, dim, keepdim, op):
        d = _dim(dim, x.ndim)
        values = _reduce(op, x, [d], keepdim, x.dtype)
        indices = _reduce("arg" + op, x, [d], keepdim, x.dtype)
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, d, keepdim
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, g, *_):
        (indices,) = ctx.saved_tensors
        if not ctx.keepdim and ctx.shape:
            g, indices = g.unsqueeze(ctx.dim), indices.unsqueeze(ctx.dim)
        positions = arange_like(ctx.shape[ctx.dim], g.device).reshape(
            [-1 if i == ctx.dim else 1 for i in range(len(ctx.shape))])
        return where(positions == indices, g, g * 0).expand(ctx.shape) if ctx.shape else g, None, None, None


class MaxAll(Function):
    @staticmethod
    def forward(ctx, x: Tensor, op):
        if x.numel() == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                               "reduction dim with the 'dim' argument.")
        out = _reduce(op, x, list(range(x.ndim)), False, x.dtype)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        hit = (x == out).to(g.dtype)
        return g * hit / hit.sum(), None                         # torch spreads the gradient over ties


def arange_like(n: int, dev: device) -> Tensor:
    return Tensor._from_numpy(np.arange(n, dtype=np.int64), dev)


# -- views ------------------------------------------------------------------------------------------
def _infer_shape(shape, numel: int) -> tuple:
    shape = list(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list | Size) else list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    if int(np.prod(shape, dtype=np.int64)) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def _view_strides(x: Tensor, shape: tuple):
    """Strides that read x's elements in order as `shape`, or None when no view can (then reshape copies).
    x's non-unit dimensions are merged into chunks that are contiguous with each other; each new
    dimension, innermost first, must fall inside one chunk."""
    if x.is_contiguous():
        return _contiguous_strides(shape)
    chunks = []                                    # (elements, innermost stride), outermost first
    for n, st in zip(x._shape, x._strides, strict=True):
        if n == 1:
            continue
        if chunks and chunks[-1][1] == n * st:
            chunks[-1] = (chunks[-1][0] * n, st)
        else:
            chunks.append((n, st))
    out, ci = [], len(chunks) - 1
    left, stride = chunks[ci] if chunks else (1, 1)
    for n in reversed(shape):
        if n != 1:
            while left == 1 and ci > 0:
                ci -= 1
                left, stride = chunks[ci]
            if left % n:
                return None
        out.append(stride)
        if n != 1:
            stride *= n
            left //= n
    return tuple(reversed(out))


class View(Function):
    @staticmethod
    def forward(ctx, x: Tensor, shape: tuple, copy_ok: bool):
        ctx.shape = x.shape
        strides = _view_strides(x, shape)
        if strides is None:
            if not copy_ok:
                raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                                   "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
            x = _contiguous(x)
            strides = _contiguous_strides(shape)
        return x._view(shape, strides, x._offset)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape), None, None


class Permute(Function):
    @staticmethod
    def forward(ctx, x: Tensor, dims: tuple):
        dims = tuple(_dim(d, x.ndim) for d in dims)
        if sorted(dims) != list(range(x.ndim)):
            raise RuntimeError(f"permute(): dims {list(dims)} is not a permutation of the {x.ndim} dimensions")
        ctx.inverse = tuple(int(i) for i in np.argsort(dims))
        return x._view(tuple(x._shape[d] for d in dims), tuple(x._strides[d] for d in dims), x._offset)

    @staticmethod
    def backward(ctx, g):
        return g.permute(ctx.inverse), None


class Expand(Function):
    @staticmethod
    def forward(ctx, x: Tensor, shape: tuple):
        lead = len(shape) - x.ndim
        if lead < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to the "
                               f"number of dimensions in the tensor ({x.ndim})")
        out_shape, strides = [], []
        for i, n in enumerate(shape):
            have = x._shape[i - lead] if i >= lead else 1
            stride = x._strides[i - lead] if i >= lead else 0
            want = have if n == -1 else n
            if have != want:
                if have != 1:
                    raise RuntimeError(f"The expanded size of the tensor ({want}) must match the existing size "
                                       f"({have}) at non-singleton dimension {i}.  Target sizes: {list(shape)}.  "
                                       f"Tensor sizes: {list(x.shape)}")
                stride = 0
            out_shape.append(want)
            strides.append(stride)
        ctx.shape = x.shape
        return x._view(tuple(out_shape), tuple(strides), x._offset)

    @staticmethod
    def backward(ctx, g):
        return _unbroadcast(g, tuple(ctx.shape)), None


class Index(Function):
    """Basic indexing: integers, slices (positive steps), None and Ellipsis; a view."""

    @staticmethod
    def forward(ctx, x: Tensor, index: tuple):
        items = list(index)
        if sum(i is Ellipsis for i in items) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consumed > x.ndim:
            raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items[at:at + 1] = [slice(None)] * (x.ndim - consumed)
        items += [slice(None)] * (x.ndim - sum(1 for i in items if i is not None))
        shape, strides, offset, d = [], [], x._offset, 0
        for item in items:
            if item is None:
                shape.append(1)
                strides.append(0)
                continue
            n, st = x._shape[d], x._strides[d]
            if isinstance(item, slice):
                start, stop, step = item.indices(n)
                if step <= 0:
                    raise ValueError("step must be greater than zero")
                shape.append(len(range(start, stop, step)))
                strides.append(st * step)
                offset += start * st if shape[-1] else 0
            else:
                i = builtins.int(item)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
                offset += (i % n) * st
            d += 1
        ctx.shape, ctx.index = x.shape, index
        return x._view(tuple(shape), tuple(strides), offset)

    @staticmethod
    def backward(ctx, g):
        from lapis.framework.creation import zeros
        out = zeros(ctx.shape, dtype=g.dtype, device=g.device)
        out[ctx.index] = g
        return out, None


# -- gather and scatter -----------------------------------------------------------------------------
class SetRegion(Function):
    """x with x[index] = value (basic indexing; value broadcast and cast to x's), out of place: the
    differentiable form of index assignment, fill_ and copy_ (torch's CopySlices does this job)."""

    @staticmethod
    def forward(ctx, x: Tensor, index: tuple, value):
        out = _new(x.shape, x.dtype, x.device)
        _backend.unary("copy", x._data, out._data)
        region = out[index]                                 # forward runs without recording: a plain view
        src = value.to(x.device, x.dtype) if isinstance(value, Tensor) else \
            Tensor._from_numpy(np.asarray(value, x.dtype.np), x.device)
        broadcast_shapes(src.shape, region.shape)
        _backend.unary("copy", src.expand(region.shape)._data, region._data)
        ctx.index, ctx.value_shape = index, _shape_of(value)
        return out

    @staticmethod
    def backward(ctx, g):
        dx = g.clone()
        dx[ctx.index] = 0
        return dx, None, _unbroadcast(g[ctx.index], ctx.value_shape) if ctx.needs_input_grad[2] else None


def _check_index(index: Tensor) -> None:
    if not isinstance(index, Tensor) or index.dtype is not _dtype.int64:
        raise RuntimeError(f"gather(): Expected dtype int64 for index, got "
                           f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")


class Gather(Function):
    @staticmethod
    def forward(ctx, x: Tensor, dim: int, index: Tensor):
        _check_index(index)
        _check_devices(x, index)
        d = _dim(dim, x.ndim)
        out = _new(index.shape, x.dtype, x.device)
        _backend.gather(_contiguous(x)._data, d, _contiguous(index)._data, out._data)
        ctx.shape, ctx.d = x.shape, d
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        from lapis.framework.creation import zeros
        return ScatterAdd.apply(zeros(ctx.shape, dtype=g.dtype, device=g.device), ctx.d, index, g), None, None


class ScatterAdd(Function):
    """x.scatter_add(dim, index, src): a copy of x with src added at index along dim."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int, index: Tensor, src: Tensor):
        _check_index(index)
        _check_devices(x, index, src)
        d = _dim(dim, x.ndim)
        out = _new(x.shape, x.dtype, x.device)
        _backend.unary("copy", x._data, out._data)
        _backend.scatter_add(out._data, d, _contiguous(index)._data, _contiguous(src.to(x.dtype))._data)
        ctx.d = d
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return g, None, None, gather(g, ctx.d, index)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    return Gather.apply(x, dim, index)


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x's slices at `index` along dim: a gather with the index broadcast over the other dimensions."""
    if index.ndim != 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = _dim(dim, x.ndim)
    shape = list(x.shape)
    shape[d] = index.shape[0]
    spread = index.reshape([-1 if i == d else 1 for i in range(x.ndim)]).expand(shape).contiguous()
    return gather(x, d, spread)


# -- convolution and pooling ------------------------------------------------------------------------
def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Function):
    """NCHW input, (K, C/groups, R, S) filters, optional bias (K,): cuDNN's implicit GEMM on a GPU."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, bias, stride, padding, dilation, groups: int):
        _check_devices(x, w, bias)
        if x.ndim != 4 or w.ndim != 4:
            raise RuntimeError(f"Expected 4D (batched) input to conv2d, but got input of size: {list(x.shape)}")
        if x.shape[1] != w.shape[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(w.shape)}, expected input"
                               f"{list(x.shape)} to have {w.shape[1] * groups} channels, but got {x.shape[1]} "
                               "channels instead")
        geometry = (_pair(padding), _pair(stride), _pair(dilation), groups)
        (ph, pw), (sh, sw), (dh, dw) = geometry[:3]
        n, _, h, wd = x.shape
        k, _, r, s = w.shape
        p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        q = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if p < 1 or q < 1:
            raise RuntimeError("Calculated output size is too small: the kernel is larger than the padded input")
        x, w = _contiguous(x), _contiguous(w)
        out = _new((n, k, p, q), x.dtype, x.device)
        _backend.conv2d(x._data, w._data, out._data, *geometry)
        ctx.geometry = geometry
        ctx.save_for_backward(x, w)
        ctx.has_bias = bias is not None
        return out + bias.reshape(1, k, 1, 1) if bias is not None else out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = _contiguous(g)
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = _new(x.shape, x.dtype, x.device)
            _backend.conv2d_backward_data(w._data, g._data, dx._data, *ctx.geometry)
        if ctx.needs_input_grad[1]:
            dw = _new(w.shape, w.dtype, w.device)
            _backend.conv2d_backward_filter(x._data, g._data, dw._data, *ctx.geometry)
        db = g.sum((0, 2, 3)) if ctx.has_bias else None
        return dx, dw, db, None, None, None, None


class Pool2d(Function):
    @staticmethod
    def forward(ctx, x: Tensor, mode: str, window, stride, padding):
        window, stride, padding = _pair(window), _pair(stride if stride is not None else window), _pair(padding)
        n, c, h, wd = x.shape
        p = (h + 2 * padding[0] - window[0]) // stride[0] + 1
        q = (wd + 2 * padding[1] - window[1]) // stride[1] + 1
        x = _contiguous(x)
        out = _new((n, c, p, q), x.dtype, x.device)
        _backend.pool2d(mode, x._data, out._data, window, stride, padding)
        ctx.args = mode, window, stride, padding
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        dx = _new(x.shape, x.dtype, x.device)
        mode, window, stride, padding = ctx.args
        _backend.pool2d_backward(mode, x._data, y._data, _contiguous(g)._data, dx._data, window, stride, padding)
        return dx, None, None, None, None


class BatchNorm(Function):
    """Training batch norm of (N, C, ...) with batch statistics, forward and backward each one
    kernel on a GPU (cudnnBatchNormalizationForwardTraining / Backward); the running statistics
    move in place."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor, running_var: Tensor,
                momentum: float, eps: float):
        _check_devices(x, weight, bias, running_mean, running_var)
        n, c = x.shape[0], x.shape[1]
        if x.numel() // c <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
        x4 = _contiguous(x).reshape(n, c, -1, 1)               # (N, C, L, 1): any trailing dims as H
        out = _new(x4.shape, x.dtype, x.device)
        mean, rstd = _new((c,), x.dtype, x.device), _new((c,), x.dtype, x.device)
        _backend.batch_norm(x4._data, weight._data, bias._data, running_mean._data, running_var._data, out._data,
                            mean._data, rstd._data, momentum, eps)
        running_mean._storage.version += 1
        running_var._storage.version += 1
        ctx.save_for_backward(x4, weight, mean, rstd)
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        x4, weight, mean, rstd = ctx.saved_tensors
        dx = _new(x4.shape, x4.dtype, x4.device)
        dweight, dbias = (_new(weight.shape, weight.dtype, weight.device) for _ in range(2))
        _backend.batch_norm_backward(x4._data, _contiguous(g).reshape(x4.shape)._data, weight._data, mean._data,
                                     rstd._data, dx._data, dweight._data, dbias._data)
        return dx.reshape(g.shape), dweight, dbias, None, None, None, None


class LayerNorm(Function):
    """Layer norm over the last dimension, saving each row's mean and 1/std: one kernel forward and
    two backward on a GPU (rows of dx; then dweight and dbias per column)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float):
        _check_devices(x, weight, bias)
        cols = weight.numel()
        x2 = _contiguous(x).reshape(-1, cols)                   # x: (..., normalized) -> (rows, cols)
        out = _new(x2.shape, x.dtype, x.device)
        mean, rstd = _new((x2.shape[0],), x.dtype, x.device), _new((x2.shape[0],), x.dtype, x.device)
        w, b = _contiguous(weight).reshape(cols), _contiguous(bias).reshape(cols)
        _backend.layer_norm(x2._data, w._data, b._data, out._data, mean._data, rstd._data, eps)
        ctx.save_for_backward(x2, w, mean, rstd)
        ctx.shapes = x.shape, weight.shape
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        x2, w, mean, rstd = ctx.saved_tensors
        x_shape, w_shape = ctx.shapes
        dx = _new(x2.shape, x2.dtype, x2.device)
        dw, db = (_new(w.shape, w.dtype, w.device) for _ in range(2))
        _backend.layer_norm_backward(x2._data, _contiguous(g).reshape(x2.shape)._data, w._data, mean._data,
                                     rstd._data, dx._data, dw._data, db._data)
        return dx.reshape(x_shape), dw.reshape(w_shape), db.reshape(w_shape), None


class Attention(Function):
    """softmax(q k^T * scale) v over the last two dimensions, with an optional causal mask: FlashAttention's
    forward and backward (cuDNN's fused attention, `libs.dnn`) on a GPU, the scores never stored."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool):
        # q: (..., Tq, D), k and v: (..., Tk, D) -> (..., Tq, D)
        _check_devices(q, k, v)
        batch = q.shape[:-2]
        q3, k3, v3 = (_contiguous(t).reshape(-1, *t.shape[-2:]) for t in (q, k, v))
        o = _new(q3.shape, q.dtype, q.device)
        lse = _new(q3.shape[:2], q.dtype, q.device)
        _backend.attention(q3._data, k3._data, v3._data, o._data, lse._data, scale, causal)
        ctx.save_for_backward(q3, k3, v3, o, lse)
        ctx.args = scale, causal, q.shape, k.shape
        return o.reshape(*batch, *o.shape[1:])

    @staticmethod
    def backward(ctx, g):
        q3, k3, v3, o, lse = ctx.saved_tensors
        scale, causal, q_shape, k_shape = ctx.args
        dq, dk, dv = (_new(t.shape, t.dtype, t.device) for t in (q3, k3, v3))
        _backend.attention_backward(q3._data, k3._data, v3._data, o._data, _contiguous(g).reshape(o.shape)._data,
                                    lse._data, dq._data, dk._data, dv._data, scale, causal)
        return dq.reshape(q_shape), dk.reshape(k_shape), dv.reshape(k_shape), None, None


# -- matmul -----------------------------------------------------------------------------------------
def _blas_ready(x: Tensor) -> Tensor:
    """x itself when BLAS can read it (row-major, or a transposed row-major view), else a contiguous copy."""
    return x if x.is_contiguous() or x.t().is_contiguous() else _contiguous(x)


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """(m, k) @ (k, n) in the operands' dtype."""
    out = _new((a.shape[0], b.shape[1]), a.dtype, a.device)
    _backend.matmul(_blas_ready(a)._data, _blas_ready(b)._data, out._data)
    return out


class MatMul(Function):
    """2-D @ 2-D; matmul() reduces 1-D operands, and batches times one matrix, to this."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor):
        ctx.save_for_backward(a, b)
        return _mm(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g @ b.t() if ctx.needs_input_grad[0] else None, a.t() @ g if ctx.needs_input_grad[1] else None)


def _bmm_ready(x: Tensor) -> Tensor:
    """x (B, r, c) itself when BLAS can read it in place (a dense batch of row-major or transposed matrices,
    or one matrix broadcast over the batch: the backend's rule), else a contiguous copy."""
    return x if _backend.batch_layout(x._data) is not None else _contiguous(x)


class BatchedMatMul(Function):
    """(B, m, k) @ (B, k, n): one strided-batched gemm on a GPU, whose operands may be transposed views."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor):
        ctx.save_for_backward(a, b)
        out = _new((a.shape[0], a.shape[1], b.shape[2]), a.dtype, a.device)
        _backend.bmm(_bmm_ready(a)._data, _bmm_ready(b)._data, out._data)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        da = BatchedMatMul.apply(g, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        db = BatchedMatMul.apply(a.transpose(1, 2), g) if ctx.needs_input_grad[1] else None
        return da, db


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul: 1-D operands gain and lose a dimension; batch dimensions broadcast."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul(): arguments must be Tensors, not {type(a).__name__} and {type(b).__name__}")
    _check_devices(a, b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype.name} != {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        m, k = a2.shape[-2:]
        k2, n = b2.shape[-2:]
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    with trace.span(5, "matmul", a_shape=list(a.shape), b_shape=list(b.shape), dtype=str(a.dtype),
                    device=str(a.device)) as info:
        if a2.ndim == 2 and b2.ndim == 2:
            out = MatMul.apply(a2, b2)
        elif b2.ndim == 2:                     # (..., m, k) @ (k, n): the batch folds into the rows
            out = MatMul.apply(a2.reshape(-1, a2.shape[-1]), b2).reshape(*a2.shape[:-1], b2.shape[-1])
        else:
            batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
            count = math.prod(batch)
            a3 = a2.expand(*batch, *a2.shape[-2:]).reshape(count, *a2.shape[-2:])
            b3 = b2.expand(*batch, *b2.shape[-2:]).reshape(count, *b2.shape[-2:])
            out = BatchedMatMul.apply(a3, b3).reshape(*batch, a2.shape[-2], b2.shape[-1])
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        info.update(out_shape=list(out.shape))
    return out


def mm(a: Tensor, b: Tensor) -> Tensor:
    """torch.mm: 2-D operands only."""
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"{'self' if a.ndim != 2 else 'mat2'} must be a matrix")
    return matmul(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """torch.bmm: (B, m, k) @ (B, k, n), no broadcasting."""
    for name, x in (("batch1", a), ("batch2", b)):
        if x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{a.shape[0]}, "
                           f"{a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return matmul(a, b)
