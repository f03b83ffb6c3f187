"""Layer 5: writing into a tensor: in-place ops (`x.add_(y)`, `x.exp_()`), `fill_`, `zero_`, `copy_`, and
`SetRegion`, the out-of-place form of index assignment that autograd records.

Without autograd in the way, an in-place op writes x's storage directly (one kernel) and bumps its version.
When autograd records it (x is in a graph, or an operand requires grad), the new value is computed out of place
by differentiable ops, written into x's storage, and x takes the result's place in the graph: torch's history
rewrite. Nodes keep the edge each input had when they ran, so earlier uses of x still send their gradients to
its old value, and the version counter catches any saved copy of the old value that backward would need.
"""

import numpy as np

from lapis.framework import backend
from lapis.framework.autograd import Function, is_grad_enabled, no_grad
from lapis.framework.generator import default_generator
from lapis.framework.ops.common import broadcast_shapes, new, operand, shape_of
from lapis.framework.tensor_base import TensorBase

SCALAR_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
               "int64": "Long", "bool": "Bool"}          # ATen's names, which torch's messages use


def records(x, *operands) -> bool:
    """Whether autograd records a write into x of these operands."""
    return is_grad_enabled() and (x.requires_grad or any(isinstance(o, TensorBase) and o.requires_grad
                                                         for o in operands))


def check(x, *operands) -> None:
    """Refuse the writes autograd cannot follow, with torch's errors (or lapis's, where torch can)."""
    if x.requires_grad and x.is_leaf and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if x._is_view and records(x, *operands):
        raise NotImplementedError("in-place ops on a view while autograd records them are not supported: the "
                                  "tensor it views would not see the new history. Use the out-of-place op "
                                  "(y = y + z) or index assignment on the tensor itself (x[i] = v)")


def rebase(x: TensorBase, result: TensorBase) -> TensorBase:
    """x takes result's value (same shape and dtype) and its place in the graph."""
    with no_grad():
        backend.copy(result._data, x._data)
    x._storage.version += 1
    if x._retains_grad and x.grad_fn is not None:     # retain_grad() follows the tensor to its new value
        x.grad_fn.retained.pop(x._output_nr, None)
    x.grad_fn, x.requires_grad, x._output_nr = result.grad_fn, result.requires_grad, result._output_nr
    if x._retains_grad and x.grad_fn is not None:
        x.grad_fn.retain(x._output_nr, x)
    return x


def write(x: TensorBase, value) -> TensorBase:
    """x[...] = value (a tensor broadcast to x's shape, or a number), cast to x's dtype, in x's storage."""
    check(x, value)
    if records(x, value):
        return rebase(x, SetRegion.apply(x, (Ellipsis,), value))
    src = value if isinstance(value, TensorBase) else x.new_full((), value)
    src = src.detach().to(x.device, x.dtype)
    broadcast_shapes(src.shape, x.shape)
    backend.copy(src.expand(x.shape)._data if src.ndim <= x.ndim else src._data, x._data)
    x._storage.version += 1
    return x


def zero_(x):
    return write(x, 0)


def fill_(x, value):
    return write(x, value)


def copy_(x, src):
    return write(x, src)


def normal_(x, mean: float = 0.0, std: float = 1.0, generator=None):
    """x filled with draws from N(mean, std^2) by the framework's generator (or `generator`), as torch's."""
    rng = generator or default_generator()
    return write(x, TensorBase._from_numpy(rng.normal(mean, std, tuple(x.shape)).astype(x.dtype.np), x.device))


def uniform_(x, a: float = 0.0, b: float = 1.0, generator=None):
    """x filled with draws from U(a, b) by the framework's generator (or `generator`), as torch's."""
    rng = generator or default_generator()
    return write(x, TensorBase._from_numpy(rng.uniform(a, b, tuple(x.shape)).astype(x.dtype.np), x.device))


class SetRegion(Function):
    """x with x[index] = value (basic indexing; value broadcast and cast to x's), out of place: the differentiable
    form of index assignment, fill_ and copy_ (torch's CopySlices does this job)."""
    node_name = "CopySlices"

    @staticmethod
    def forward(ctx, x: TensorBase, index: tuple, value):
        out = new(x.shape, x.dtype, x.device)
        backend.copy(x._data, out._data)
        region = out[index]                                 # forward runs without recording: a plain view
        src = value.to(x.device, x.dtype) if isinstance(value, TensorBase) else \
            TensorBase._from_numpy(np.asarray(value, x.dtype.np), x.device)
        broadcast_shapes(src.shape, region.shape)
        backend.copy(src.expand(region.shape)._data, region._data)
        ctx.index, ctx.value_shape = index, shape_of(value)
        return out

    @staticmethod
    def backward(ctx, g):
        dx = g.clone()
        dx[ctx.index] = 0
        return dx, None, g[ctx.index] if ctx.needs_input_grad[2] else None


def augmented(in_place, out_of_place, name: str):
    """x op= y (x.__iadd__(y) and the like): in place, as torch does, so every name and view of x's storage sees
    the new value and a leaf keeps requires_grad (`p -= lr * p.grad` under no_grad is the manual SGD step). A
    view that autograd records (x[0] += y with x in a graph) is computed out of place instead: Python assigns
    the result back (x[0] = ...), and that index assignment is what autograd records."""
    def method(x, other):
        if x._is_view and records(x, other):
            return out_of_place(x, other)
        return in_place(x, other)
    method.__name__ = method.__qualname__ = name
    return method


def op(fn, row):
    """The in-place method of an elementwise op (x.exp_(), x.add_(y, alpha=2)): `fn` is the op's out-of-place
    function, `row` its table entry."""
    def method(x, *others, **kwargs):
        if len(others) != row.arity - 1:
            raise TypeError(f"{row.name}_() takes {row.arity - 1} operand(s) besides the tensor, {len(others)} given")
        check(x, *others)
        out_dtype = row.rule([x, *others])[1]
        if out_dtype.category > x.dtype.category:
            raise RuntimeError(f"result type {SCALAR_TYPE[out_dtype.name]} can't be cast to the desired output "
                               f"type {SCALAR_TYPE[x.dtype.name]}")
        if records(x, *others):
            # x's old value as a copy, so whatever the op saves for backward survives the write into x
            result = fn(x.clone(), *others, **kwargs)
            if tuple(result.shape) != tuple(x.shape):
                raise RuntimeError(f"output with shape {list(x.shape)} doesn't match the broadcast shape "
                                   f"{list(result.shape)}")
            return rebase(x, result.to(x.dtype))
        if not kwargs and broadcast_shapes(x.shape, *(shape_of(o) for o in others)) == tuple(x.shape):
            # one kernel reading and writing x's own elements (each by the thread that owns it)
            if row.check is not None:                # x //= 0 of integers raises, as out of place
                row.check([x, *others], x.dtype)
            backend.pointwise(row, [x._data, *(operand(o, x.dtype, x.device) for o in others)], x._data)
            x._storage.version += 1
            return x
        with no_grad():
            result = fn(x.detach(), *others, **kwargs)
        return write(x, result)
    method.__name__ = method.__qualname__ = row.name + "_"
    return method

