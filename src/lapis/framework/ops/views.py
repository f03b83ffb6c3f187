"""Layer 5: views, which make a new tensor over the same storage and cost nothing (view/reshape, permute,
transpose, expand, basic indexing, narrow, diagonal, split, chunk, squeeze, unsqueeze, flatten), with their
gradients; and `cat`/`stack`, the joins that undo split and chunk, which copy."""

import builtins
import math

from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function
from lapis.framework.ops.common import check_devices, new
from lapis.framework.ops.common import dims as _dims
from lapis.framework.ops.elementwise import ToCopy
from lapis.framework.tensor_base import Size, TensorBase, contiguous_strides, wrap_dim


def infer_shape(shape, numel: int) -> tuple:
    """view/reshape's size arguments with a -1 worked out, checked against the element count."""
    shape = list(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list | Size) else list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def view_strides(x: TensorBase, shape: tuple):
    """Strides that read x's elements in order as `shape`, or None when no view can (then reshape copies).
    x's non-unit dimensions are merged into chunks that are contiguous with each other; each new
    dimension, innermost first, must fall inside one chunk."""
    if x.is_contiguous():
        return contiguous_strides(shape)
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
    """view (copy_ok False) and reshape (which copies when no view can read x as `shape`)."""

    @staticmethod
    def forward(ctx, x: TensorBase, shape: tuple, copy_ok: bool, node_name: str):
        ctx.shape, ctx.node_name = x.shape, node_name
        strides = view_strides(x, shape)
        if strides is None:
            if not copy_ok:
                raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                                   "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
            x = x._contiguous()
            strides = contiguous_strides(shape)
            ctx.node_name = "UnsafeViewBackward0"
        return x._view(shape, strides, x._offset)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape), None, None, None


class Permute(Function):
    @staticmethod
    def forward(ctx, x: TensorBase, dims: tuple, node_name: str):
        ndim = len(x._shape)
        dims = tuple([wrap_dim(d, ndim) for d in dims])
        if sorted(dims) != list(range(ndim)):
            raise RuntimeError(f"permute(): dims {list(dims)} is not a permutation of the {ndim} dimensions")
        ctx.dims, ctx.node_name = dims, node_name
        return x._view(tuple([x._shape[d] for d in dims]), tuple([x._strides[d] for d in dims]), x._offset)

    @staticmethod
    def backward(ctx, g):
        inverse = tuple(sorted(range(len(ctx.dims)), key=ctx.dims.__getitem__))
        return g.permute(inverse), None, None


class Expand(Function):
    node_name = "ExpandBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, shape: tuple):
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
        return g.sum_to_size(ctx.shape), None


_INDEX_NODE = {builtins.int: "SelectBackward0", type(None): "UnsqueezeBackward0", slice: "SliceBackward0"}


class Index(Function):
    """Basic indexing: integers, slices (positive steps), None and Ellipsis; a view."""

    @staticmethod
    def forward(ctx, x: TensorBase, index: tuple):
        items, ndim = list(index), len(x._shape)
        ellipsis, consumed, last = None, 0, slice(None)     # where the ellipsis is; dimensions indexed; last item
        for at, item in enumerate(items):
            if item is Ellipsis:
                if ellipsis is not None:
                    raise IndexError("an index can only have a single ellipsis ('...')")
                ellipsis = at
                continue
            consumed += item is not None
            last = item
        if consumed > ndim:
            raise IndexError(f"too many indices for tensor of dimension {ndim}")
        ctx.node_name = _INDEX_NODE.get(type(last), "SelectBackward0")
        if ellipsis is not None:                             # the dimensions no item indexes, in its place
            items[ellipsis:ellipsis + 1] = [slice(None)] * (ndim - consumed)
        else:                                                # or after the last item
            items += [slice(None)] * (ndim - consumed)
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
        out = g.new_zeros(ctx.shape)
        out[ctx.index] = g
        return out, None


def view(x, *shape):
    if len(shape) == 1 and isinstance(shape[0], _dtype.dtype):
        raise NotImplementedError("view(dtype) is not supported")
    return View.apply(x, infer_shape(shape, x.numel()), False, "ViewBackward0")


def reshape(x, *shape):
    return View.apply(x, infer_shape(shape, x.numel()), True, "ViewBackward0")


def view_as(x, other):
    return view(x, other.shape)


def permute(x, *dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], tuple | list) else dims
    return Permute.apply(x, dims, "PermuteBackward0")


def _swapped(x, dim0, dim1) -> tuple:
    ndim = len(x._shape)
    dims = list(range(ndim))
    d0, d1 = wrap_dim(dim0, ndim), wrap_dim(dim1, ndim)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return tuple(dims)


def transpose(x, dim0, dim1):
    return Permute.apply(x, _swapped(x, dim0, dim1), "TransposeBackward0")


def t(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return Permute.apply(x, _swapped(x, 0, 1), "TBackward0") if x.ndim == 2 else x


def unsqueeze(x, dim):
    d = wrap_dim(dim, x.ndim + 1)
    return View.apply(x, (*x.shape[:d], 1, *x.shape[d:]), True, "UnsqueezeBackward0")


def squeeze(x, dim=None):
    if dim is None:
        return View.apply(x, tuple(n for n in x.shape if n != 1), True, "SqueezeBackward0")
    dims = _dims(dim, x.ndim)
    return View.apply(x, tuple(n for i, n in enumerate(x.shape) if not (i in dims and n == 1)), True,
                      "SqueezeBackward1")


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = wrap_dim(start_dim, x.ndim), wrap_dim(end_dim, x.ndim)
    return reshape(x, *x.shape[:s], -1, *x.shape[e + 1:])


def expand(x, *shape):
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list | Size) else shape
    return Expand.apply(x, shape)


def expand_as(x, other):
    return expand(x, other.shape)


def narrow(x, dim, start, length):
    d = wrap_dim(dim, x.ndim)
    if not 0 <= start <= x.shape[d] - length or length < 0:
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size ({x.shape[d]}).")
    return Index.apply(x, (slice(None),) * d + (slice(start, start + length),))


def _diagonal_view(x: TensorBase, offset: builtins.int, d1: builtins.int, d2: builtins.int) -> TensorBase:
    """The view of x's diagonal over dimensions d1 and d2 (non-negative, distinct), `offset` above the main one
    (below for a negative offset), as its last dimension: a stride of the two dimensions' strides summed."""
    n1, n2 = x._shape[d1], x._shape[d2]
    size = builtins.max(builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2), 0)
    start = (offset * x._strides[d2] if offset >= 0 else -offset * x._strides[d1]) if size else 0
    keep = [d for d in range(x.ndim) if d not in (d1, d2)]
    return x._view(tuple(x._shape[d] for d in keep) + (size,),
                   tuple(x._strides[d] for d in keep) + (x._strides[d1] + x._strides[d2],), x._offset + start)


class Diagonal(Function):
    """torch.diagonal: a view; its gradient is zeros with the incoming gradient on the diagonal (DiagonalEmbed)."""
    node_name = "DiagonalBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, offset: builtins.int, dim1: builtins.int, dim2: builtins.int):
        d1, d2 = wrap_dim(dim1, x.ndim), wrap_dim(dim2, x.ndim)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        ctx.shape, ctx.where = tuple(x._shape), (offset, d1, d2)
        return _diagonal_view(x, offset, d1, d2)

    @staticmethod
    def backward(ctx, g):
        return DiagonalEmbed.apply(g, ctx.shape, *ctx.where), None, None, None


class DiagonalEmbed(Function):
    """Zeros of `shape` with g written on the diagonal that Diagonal(offset, d1, d2) views (torch's
    diagonal_backward); its own gradient is that diagonal of the incoming one."""
    node_name = "DiagonalBackwardBackward0"

    @staticmethod
    def forward(ctx, g: TensorBase, shape: tuple, offset: builtins.int, d1: builtins.int, d2: builtins.int):
        out = g.new_zeros(shape)
        if g.numel():
            backend.copy(g._data, _diagonal_view(out, offset, d1, d2)._data)
        ctx.where = (offset, d1, d2)
        return out

    @staticmethod
    def backward(ctx, gg):
        return Diagonal.apply(gg, *ctx.where), None, None, None, None


def diagonal(x, offset=0, dim1=0, dim2=1):
    """torch.diagonal (and Tensor.diagonal): a view of the diagonal over dim1 and dim2, as the last dimension."""
    return Diagonal.apply(x, builtins.int(offset), dim1, dim2)


class Split(Function):
    """Consecutive pieces of x along dimension d, as views. One node takes all their gradients and joins
    them (a cat, zeros for a piece no gradient reached), as torch's SplitBackward does: a narrow per piece
    would cost a zeros tensor, a copy into it and a sum per piece in the backward pass. Gradients that
    already lie side by side in one memory, as the pieces did (attention's for a packed projection's q, k
    and v), are joined as a view of it."""

    @staticmethod
    def forward(ctx, x: TensorBase, d: builtins.int, sizes: tuple, node_name: str):
        ctx.node_name, ctx.d, ctx.shape = node_name, d, x._shape
        pieces, at = [], 0
        for n in sizes:
            shape = list(x._shape)
            shape[d] = n
            pieces.append(x._view(tuple(shape), x._strides, x._offset + at * x._strides[d] if n else x._offset))
            at += n
        return tuple(pieces)

    @staticmethod
    def backward(ctx, *grads):
        joined = _side_by_side(grads, ctx.d, ctx.shape)
        return (cat(list(grads), ctx.d) if joined is None else joined), None, None, None


def _side_by_side(pieces: tuple, d: builtins.int, shape: tuple) -> TensorBase | None:
    """The tensor of `shape` that `pieces` are consecutive slices of along d, as a view of their memory, when
    they are such slices (one storage, one layout, each starting where the one before ends); else None."""
    first = pieces[0]
    if any(p is None for p in pieces) or not first._strides[d]:
        return None
    at = first._offset
    for p in pieces:
        if (p._storage is not first._storage or p._strides != first._strides or p._offset != at
                or p._shape[:d] != shape[:d] or p._shape[d + 1:] != shape[d + 1:]):
            return None
        at += p._shape[d] * p._strides[d]
    return first._view(shape, first._strides, first._offset)


def split(x, split_size_or_sections, dim=0):
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, builtins.int):
        size = split_size_or_sections
        sizes = [builtins.min(size, n - s) for s in range(0, n, size)] or [0]
        name = "SplitBackward0"
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
        name = "SplitWithSizesBackward0"
    return Split.apply(x, d, tuple(sizes), name)


def chunk(x, chunks, dim=0):
    n = x.shape[wrap_dim(dim, x.ndim)]
    return split(x, -(-n // chunks) if n else 1, dim)


def T(x):  # noqa: N802 - torch's property name
    return permute(x, *reversed(range(x.ndim)))


def mT(x):  # noqa: N802 - torch's property name
    return transpose(x, -2, -1)


def contiguous(x):
    return x if x.is_contiguous() else clone(x)


def clone(x):
    return ToCopy.apply(x, x.device, x.dtype, True)


# -- joins ------------------------------------------------------------------------------------------------
class Cat(Function):
    node_name = "CatBackward0"

    @staticmethod
    def forward(ctx, dim: builtins.int, *tensors):
        if not tensors:
            raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
        dev = check_devices(*tensors)
        ref = next((t for t in tensors if t.ndim), tensors[0])
        if ref.ndim == 0:
            raise RuntimeError("zero-dimensional tensor cannot be concatenated")
        d = wrap_dim(dim, ref.ndim)
        dt = _dtype.result_type(*tensors)
        around = ref._shape[:d], ref._shape[d + 1:]
        for number, t in enumerate(tensors):
            if len(t._shape) != len(ref._shape):
                raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
            if (t._shape[:d], t._shape[d + 1:]) != around:
                i = next(i for i, (a, b) in enumerate(zip(t._shape, ref._shape, strict=True)) if i != d and a != b)
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref._shape[i]} but got size {t._shape[i]} for tensor number {number} in the "
                                   "list.")
        shape = list(ref._shape)
        shape[d] = builtins.sum(t._shape[d] for t in tensors)
        out = new(shape, dt, dev)
        data, lead, at = out._data, (slice(None),) * d, 0
        for t in tensors:
            n = t._shape[d]
            if n:                                  # its slab of out: a view of the backend array, no Function
                backend.copy(t._data, data[lead + (slice(at, at + n),)])
            at += n
        ctx.d, ctx.sizes = d, [t._shape[d] for t in tensors]
        return out

    @staticmethod
    def backward(ctx, g):
        grads, at = [], 0
        for n in ctx.sizes:
            grads.append(g.narrow(ctx.d, at, n))
            at += n
        return (None, *grads)


def cat(tensors, dim: builtins.int = 0) -> TensorBase:
    return Cat.apply(dim, *tensors)


def stack(tensors, dim: builtins.int = 0) -> TensorBase:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    d = wrap_dim(dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def unbind(x, dim=0):
    """The slices of x along dim, each without that dimension (views, as torch.unbind)."""
    d = wrap_dim(dim, x.ndim)
    return tuple(x[(slice(None),) * d + (i,)] for i in range(x.shape[d]))


def meshgrid(*tensors, indexing: str = "ij") -> tuple:
    """torch.meshgrid: the 1-D (or 0-d) tensors broadcast against each other as views, each varying along its own
    dimension ("ij"), or with the first two dimensions swapped ("xy", numpy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    flat = [t.reshape(-1) for t in tensors]
    order = list(range(len(flat)))
    if indexing == "xy" and len(flat) >= 2:
        order[0], order[1] = 1, 0
    sizes = [flat[k].shape[0] for k in order]
    out = []
    for k, t in enumerate(flat):
        where = order.index(k)
        shape = [1] * len(flat)
        shape[where] = t.shape[0]
        out.append(t.reshape(*shape).expand(*sizes))
    return tuple(out)
