"""Layer 5: Tensor's operator and method surface (torch.Tensor's), wired to the ops in `_ops`.

Kept apart from `_tensor.py` so the class holds storage, views and autograd state, and this file
reads as the list of what a tensor can do. In-place ops write into the tensor's storage and bump
its version (autograd refuses a gradient that would read an overwritten saved tensor).
"""

import builtins
from collections import namedtuple

import numpy as np

from lapis.framework import backend as _backend
from lapis.framework import dtype as _dtype
from lapis.framework import ops as _ops
from lapis.framework.autograd import is_grad_enabled
from lapis.framework.creation import full
from lapis.framework.tensor import Size, Tensor, _dim

return_types = namedtuple("return_types", ["values", "indices"])


def _r(f):
    """The reflected operator: 2 - x is sub(2, x)."""
    return lambda self, other: f(other, self)


def add(a, b, alpha=1):
    return _ops.Add.apply(a, b, alpha)


def sub(a, b):
    return _ops.Sub.apply(a, b)


def mul(a, b):
    return _ops.Mul.apply(a, b)


def div(a, b):
    return _ops.Div.apply(a, b)


def pow(a, b):  # noqa: A001 - torch.pow
    return _ops.Pow.apply(a, b)


def maximum(a, b):
    return _ops.Maximum.apply(a, b, "maximum")


def minimum(a, b):
    return _ops.Maximum.apply(a, b, "minimum")


def clamp(x, min=None, max=None):  # noqa: A002 - torch's argument names
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return _ops.Clamp.apply(x, min, max)
    out = x
    if min is not None:
        out = _ops.where(out < min, _ops.Mul.apply(out, 0) + min, out)
    if max is not None:
        out = _ops.where(out > max, _ops.Mul.apply(out, 0) + max, out)
    return out


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001 - torch.sum
    return _ops.Sum.apply(x, dim, keepdim, dtype)


def mean(x, dim=None, keepdim=False, dtype=None):
    if not (dtype or x.dtype).is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {x.dtype.name.capitalize()}")
    dims = _ops._dims(dim, x.ndim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    return sum(x if dtype is None else x.to(dtype), dim, keepdim) / count


def var(x, dim=None, unbiased=True, keepdim=False, correction=None):
    dims = _ops._dims(dim, x.ndim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    c = (1 if unbiased else 0) if correction is None else correction
    centred = x - mean(x, dims, keepdim=True)
    return sum(centred * centred, dims, keepdim) / builtins.max(n - c, 0)


def std(x, dim=None, unbiased=True, keepdim=False, correction=None):
    return var(x, dim, unbiased, keepdim, correction).sqrt()


def prod(x, dim=None, keepdim=False):
    return _ops.Prod.apply(x, dim, keepdim)


def _extreme(op):
    def extreme(x, dim=None, keepdim=False):
        if isinstance(dim, Tensor):                 # torch.max(a, b) is maximum
            return (maximum if op == "max" else minimum)(x, dim)
        if dim is None:
            return _ops.MaxAll.apply(x, op)
        values, indices = _ops.MaxMin.apply(x, dim, keepdim, op)
        return return_types(values, indices)
    return extreme


max = _extreme("max")  # noqa: A001 - torch.max
min = _extreme("min")  # noqa: A001 - torch.min


def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return _ops._reduce("argmax", x.reshape(-1), [0], False, x.dtype)
    return _ops._reduce("argmax", x, [_dim(dim, x.ndim)], keepdim, x.dtype)


def argmin(x, dim=None, keepdim=False):
    if dim is None:
        return _ops._reduce("argmin", x.reshape(-1), [0], False, x.dtype)
    return _ops._reduce("argmin", x, [_dim(dim, x.ndim)], keepdim, x.dtype)


def logsumexp(x, dim, keepdim=False):
    m = max(x, dim, keepdim=True).values.detach()
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dim)


def _fused_softmax(x, dim) -> bool:
    """The last dimension of a float32 tensor: one fused kernel (create_graph needs the composite form)."""
    return _dim(dim, x.ndim) == x.ndim - 1 and x.dtype is _dtype.float32 and x.ndim > 0 and x.numel() > 0


def softmax(x, dim, dtype=None):
    x = x if dtype is None else x.to(dtype)
    if _fused_softmax(x, dim):
        return _ops.Softmax.apply(x, False)
    e = (x - max(x, dim, keepdim=True).values.detach()).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax(x, dim, dtype=None):
    x = x if dtype is None else x.to(dtype)
    if _fused_softmax(x, dim):
        return _ops.Softmax.apply(x, True)
    return x - logsumexp(x, dim, keepdim=True)


# -- views -------------------------------------------------------------------------------------------
def view(x, *shape):
    if len(shape) == 1 and isinstance(shape[0], _dtype.dtype):
        raise NotImplementedError("view(dtype) is not supported")
    return _ops.View.apply(x, _ops._infer_shape(shape, x.numel()), False)


def reshape(x, *shape):
    return _ops.View.apply(x, _ops._infer_shape(shape, x.numel()), True)


def permute(x, *dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], tuple | list) else dims
    return _ops.Permute.apply(x, dims)


def transpose(x, dim0, dim1):
    dims = list(range(x.ndim))
    d0, d1 = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _ops.Permute.apply(x, tuple(dims))


def t(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def unsqueeze(x, dim):
    d = _dim(dim, x.ndim + 1)
    return reshape(x, *x.shape[:d], 1, *x.shape[d:])


def squeeze(x, dim=None):
    if dim is None:
        return reshape(x, *[n for n in x.shape if n != 1])
    dims = _ops._dims(dim, x.ndim)
    return reshape(x, *[n for i, n in enumerate(x.shape) if not (i in dims and n == 1)])


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = _dim(start_dim, x.ndim), _dim(end_dim, x.ndim)
    return reshape(x, *x.shape[:s], -1, *x.shape[e + 1:])


def expand(x, *shape):
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list | Size) else shape
    return _ops.Expand.apply(x, shape)


def narrow(x, dim, start, length):
    d = _dim(dim, x.ndim)
    if not 0 <= start <= x.shape[d] - length or length < 0:
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size ({x.shape[d]}).")
    return _ops.Index.apply(x, (slice(None),) * d + (slice(start, start + length),))


def getitem(x, index):
    if isinstance(index, list):
        index = lapis_tensor(index)
    if isinstance(index, Tensor):
        if index.dtype is _dtype.bool_:                 # a mask: the selected elements, in order
            return masked_select(x, index)
        if index.dtype.category == 1:                   # an index tensor on the first dimension
            flat = index.reshape(-1).long()
            return _ops.index_select(x, 0, flat).reshape(*index.shape, *x.shape[1:])
    index = index if isinstance(index, tuple) else (index,)
    for i in index:
        if isinstance(i, Tensor | list):
            raise NotImplementedError("indexing with several tensors (advanced indexing) is not supported yet")
    return _ops.Index.apply(x, index)


def lapis_tensor(data):
    from lapis.framework.creation import tensor
    return tensor(data)


def masked_select(x, mask):
    """x's elements where mask (broadcast to x) holds, as a 1-D tensor: the count is read back to the host,
    as on a GPU, so this is a sync point."""
    mask = mask.expand(x.shape) if tuple(mask.shape) != tuple(x.shape) else mask
    picked = np.flatnonzero(mask.cpu().numpy().reshape(-1))
    from lapis.framework.creation import tensor
    return _ops.gather(x.reshape(-1), 0, tensor(picked.astype(np.int64), device=x.device))


def masked_fill(x, mask, value):
    fill = value if isinstance(value, Tensor) else full((), value, dtype=x.dtype, device=x.device)
    return _ops.where(mask, fill, x)


def _triangle(x, diagonal, lower: bool):
    from lapis.framework.creation import arange
    rows, cols = x.shape[-2], x.shape[-1]
    i = arange(rows, device=x.device).reshape(rows, 1)
    j = arange(cols, device=x.device).reshape(1, cols)
    keep = (j - i <= diagonal) if lower else (j - i >= diagonal)
    return _ops.where(keep, x, 0)


def tril(x, diagonal=0):
    return _triangle(x, diagonal, True)


def triu(x, diagonal=0):
    return _triangle(x, diagonal, False)


def split(x, split_size_or_sections, dim=0):
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        sizes = [builtins.min(split_size_or_sections, n - s) for s in range(0, n, split_size_or_sections)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
    out, at = [], 0
    for size in sizes:
        out.append(narrow(x, d, at, size))
        at += size
    return tuple(out)


def chunk(x, chunks, dim=0):
    n = x.shape[_dim(dim, x.ndim)]
    return split(x, -(-n // chunks) if n else 1, dim)


def gather(x, dim, index):
    return _ops.gather(x, dim, index)


def scatter_add(x, dim, index, src):
    return _ops.ScatterAdd.apply(x, dim, index, src)


def index_select(x, dim, index):
    return _ops.index_select(x, dim, index)


def contiguous(x):
    return x if x.is_contiguous() else clone(x)


def clone(x):
    return _ops.To.apply(x, x.device, x.dtype, True)


# -- in place ----------------------------------------------------------------------------------------
# Without autograd in the way, an in-place op writes x's storage directly (one kernel). When autograd
# records it (x is in a graph, or an operand requires grad), the new value is computed out of place by
# differentiable ops, written into x's storage, and x takes the result's place in the graph: torch's
# history rewrite. Nodes keep the grad_fn each input had when they ran (autograd.Node.edges), so earlier
# uses of x still send their gradients to its old value, and the version counter catches any saved copy
# of the old value that backward would need.
_SCALAR_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
                "int64": "Long", "bool": "Bool"}          # ATen's names, which torch's messages use


def _records(x, *operands) -> bool:
    return is_grad_enabled() and (x.requires_grad or builtins.any(isinstance(o, Tensor) and o.requires_grad
                                                                  for o in operands))


def _check_inplace(x, *operands) -> None:
    if x.requires_grad and x.is_leaf and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if x._is_view and _records(x, *operands):
        raise NotImplementedError("in-place ops on a view while autograd records them are not supported: the "
                                  "tensor it views would not see the new history. Use the out-of-place op "
                                  "(y = y + z) or index assignment on the tensor itself (x[i] = v)")


def _rebase(x, result) -> Tensor:
    """x takes result's value (same shape and dtype) and its place in the graph."""
    from lapis.framework.autograd import no_grad
    with no_grad():
        _backend.unary("copy", result._data, x._data)
    x._storage.version += 1
    x.grad_fn, x.requires_grad = result.grad_fn, result.requires_grad
    return x


def _write(x, value) -> Tensor:
    """x[...] = value (a tensor broadcast to x's shape, cast to x's dtype), in x's storage."""
    _check_inplace(x, value)
    if _records(x, value):
        return _rebase(x, _ops.SetRegion.apply(x, (Ellipsis,), value))
    src = value if isinstance(value, Tensor) else full((), value, dtype=x.dtype, device=x.device)
    src = src.detach().to(x.device, x.dtype)
    _ops.broadcast_shapes(src.shape, x.shape)
    _backend.unary("copy", src.expand(x.shape)._data if src.ndim <= x.ndim else src._data, x._data)
    x._storage.version += 1
    return x


def _set_by_tensor(x, index, value):
    """x with x[index] = value, out of place, for a boolean mask or an integer tensor on the first dimension
    (repeated indices add their values, where torch leaves the result undefined)."""
    from lapis.framework.creation import arange, zeros
    value = value if isinstance(value, Tensor) else full((), value, dtype=x.dtype, device=x.device)
    value = value.to(x.device, x.dtype)
    if index.dtype is _dtype.bool_:
        mask = index.expand(x.shape) if tuple(index.shape) != tuple(x.shape) else index
        if value.numel() == 1:
            return _ops.where(mask, value.reshape(()), x)
        picked = masked_select(arange(x.numel(), device=x.device).reshape(x.shape), mask)   # flat positions
        placed = _ops.ScatterAdd.apply(zeros(x.numel(), dtype=x.dtype, device=x.device), 0, picked, value.reshape(-1))
        return _ops.where(mask, placed.reshape(x.shape), x)
    rows = index.reshape(-1).long()
    value = value.expand(rows.shape[0], *x.shape[1:])
    spread = rows.reshape(-1, *([1] * (x.ndim - 1))).expand(value.shape)
    placed = _ops.ScatterAdd.apply(zeros(x.shape, dtype=x.dtype, device=x.device), 0, spread.contiguous(), value)
    hits = _ops.ScatterAdd.apply(zeros(x.shape[0], dtype=_dtype.int32, device=x.device), 0, rows,
                                 full(rows.shape, 1, dtype=_dtype.int32, device=x.device))
    return _ops.where((hits > 0).reshape(-1, *([1] * (x.ndim - 1))), placed, x)


def setitem(x, index, value) -> None:
    from lapis.framework.autograd import no_grad
    if isinstance(index, list):
        index = lapis_tensor(index)
    if isinstance(index, Tensor):
        _check_inplace(x, value)
        result = _set_by_tensor(x, index, value)
        if _records(x, value):
            _rebase(x, result)
        else:
            _write(x, result)
        return
    index = index if isinstance(index, tuple) else (index,)
    if _records(x, value):
        _check_inplace(x, value)
        _rebase(x, _ops.SetRegion.apply(x, index, value))
        return
    with no_grad():
        target = getitem(x.detach(), index)
    _write(target, value)
    x._storage.version = target._storage.version


def _inplace(fn, op_name: str):
    def op(x, other, *args):
        from lapis.framework.autograd import no_grad
        _check_inplace(x, other)
        dt = _dtype.result_type([x, other])
        if dt.category > x.dtype.category:
            raise RuntimeError(f"result type {_SCALAR_TYPE[dt.name]} can't be cast to the desired output "
                               f"type {_SCALAR_TYPE[x.dtype.name]}")
        if _records(x, other):
            # x's old value as a copy, so whatever the op saves for backward survives the write into x
            result = fn(x.clone(), other, *args)
            if tuple(result.shape) != tuple(x.shape):
                raise RuntimeError(f"output with shape {list(x.shape)} doesn't match the broadcast shape "
                                   f"{list(result.shape)}")
            return _rebase(x, result.to(x.dtype))
        if not args and _ops.broadcast_shapes(x.shape, _ops._shape_of(other)) == tuple(x.shape) \
                and not (op_name == "div" and x.dtype.category < 2):
            # one kernel reading and writing x's own elements (each by the thread that owns it)
            _backend.binary(op_name, x._data, _ops._operand(other, x.dtype, x.device), x._data)
            x._storage.version += 1
            return x
        with no_grad():
            result = fn(x.detach(), other, *args)
        return _write(x, result)
    return op


def zero_(x):
    return _write(x, 0)


def fill_(x, value):
    return _write(x, value)


def copy_(x, src):
    return _write(x, src)


def invert(x):
    # ~x: logical not of a bool tensor, bitwise not (-x - 1) of an integer one
    if x.dtype == _dtype.bool_:
        return _ops.compare("eq", x, False)
    if x.dtype.is_floating_point:
        raise TypeError("bitwise_not is only implemented on integer and Boolean-type tensors "
                        f"(got {x.dtype})")
    return -x - 1


def _logical(name: str, combine):
    # &, |, ^ of bool tensors (torch also has the bitwise integer forms; lapis has not)
    def op(a, b):
        operands = [t for t in (a, b) if isinstance(t, Tensor)]
        if any(t.dtype != _dtype.bool_ for t in operands) or not all(isinstance(t, Tensor | bool) for t in (a, b)):
            raise TypeError(f"{name} is implemented here for bool tensors (and Python bools) only")
        return combine(a, b) if isinstance(a, Tensor) else combine(b, a)     # all three commute
    return op


_and = _logical("bitwise_and", lambda a, b: _ops.where(a, b, False))
_or = _logical("bitwise_or", lambda a, b: _ops.where(a, True, b))
_xor = _logical("bitwise_xor", lambda a, b: _ops.compare("ne", a, b))


def __dlpack__(x, **kwargs):
    # DLPack export of a cpu tensor: numpy's capsule of the strided view, sharing the storage
    if x.requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    if x.device.type != "cpu":
        raise BufferError(f"DLPack export is for cpu tensors; copy {x.device} tensors with .cpu() first")
    return x._data.__dlpack__(**kwargs)


def __dlpack_device__(x):
    # (kDLCPU, 0); a GPU tensor reports kDLCUDA (2) or kDLROCM (10), though it does not export
    return (1, 0) if x.device.type == "cpu" else (2 if x.device.type == "cuda" else 10, x.device.index or 0)


# -- the surface -------------------------------------------------------------------------------------
_METHODS = {
    "__add__": add, "__radd__": _r(add), "__sub__": sub, "__rsub__": _r(sub), "__mul__": mul, "__rmul__": _r(mul),
    "__truediv__": div, "__rtruediv__": _r(div), "__pow__": pow, "__rpow__": _r(pow),
    "__neg__": lambda x: _ops.unary("neg", x), "__abs__": lambda x: _ops.unary("abs", x),
    "__matmul__": _ops.matmul, "__rmatmul__": _r(_ops.matmul),
    "__eq__": lambda a, b: _ops.compare("eq", a, b), "__ne__": lambda a, b: _ops.compare("ne", a, b),
    "__lt__": lambda a, b: _ops.compare("lt", a, b), "__le__": lambda a, b: _ops.compare("le", a, b),
    "__gt__": lambda a, b: _ops.compare("gt", a, b), "__ge__": lambda a, b: _ops.compare("ge", a, b),
    "__getitem__": getitem, "__setitem__": setitem, "__dlpack__": __dlpack__, "__dlpack_device__": __dlpack_device__,
    "__invert__": invert, "bitwise_not": invert,
    "logical_not": lambda x: _ops.compare("eq", x, 0), "__and__": _and, "__rand__": _r(_and), "__or__": _or,
    "__ror__": _r(_or), "__xor__": _xor, "__rxor__": _r(_xor),
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "maximum": maximum, "minimum": minimum,
    "clamp": clamp, "matmul": _ops.matmul, "mm": _ops.mm, "bmm": _ops.bmm,
    "sum": sum, "mean": mean, "var": var, "std": std, "prod": prod, "max": max, "min": min, "argmax": argmax,
    "argmin": argmin, "logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax,
    "view": view, "reshape": reshape, "permute": permute, "transpose": transpose, "t": t, "unsqueeze": unsqueeze,
    "squeeze": squeeze, "flatten": flatten, "expand": expand, "expand_as": lambda x, o: expand(x, o.shape),
    "narrow": narrow, "contiguous": contiguous, "clone": clone, "gather": gather, "scatter_add": scatter_add,
    "index_select": index_select, "masked_fill": masked_fill, "masked_select": masked_select, "tril": tril,
    "triu": triu, "split": split, "chunk": chunk,
    "add_": _inplace(add, "add"), "sub_": _inplace(sub, "sub"), "mul_": _inplace(mul, "mul"),
    "div_": _inplace(div, "div"), "zero_": zero_,
    "fill_": fill_, "copy_": copy_,
}
for _name in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "abs", "neg", "relu", "erf"):
    _METHODS[_name] = (lambda op: lambda x: _ops.unary(op, x))(_name)
for _name, _f in _METHODS.items():
    setattr(Tensor, _name, _f)
Tensor.T = property(lambda x: permute(x, *reversed(range(x.ndim))))
Tensor.mT = property(lambda x: transpose(x, -2, -1))
