"""Layer 5: indexing beyond views: `x[mask]`, `x[index_tensor]`, assignment through every kind of index
(`x[i] = v`), `gather`/`scatter_add` along a dimension, `index_select`, `masked_select`/`masked_fill`, and the
triangles (`tril`/`triu`), with their gradients."""

import numpy as np

from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function, no_grad
from lapis.framework.ops import inplace
from lapis.framework.ops.common import broadcast_shapes, check_devices, new
from lapis.framework.ops.elementwise import where
from lapis.framework.ops.views import Index
from lapis.framework.tensor_base import TensorBase, wrap_dim


def _check_index(index: TensorBase) -> None:
    if not isinstance(index, TensorBase) or index.dtype is not _dtype.int64:
        raise RuntimeError(f"gather(): Expected dtype int64 for index, got "
                           f"{index.dtype.name if isinstance(index, TensorBase) else type(index).__name__}")


class Gather(Function):
    """x.gather(dim, index); with a 1-D index of an x of more dimensions, x.index_select(dim, index): the
    index is read as it is, not spread over the other dimensions first. With `wrap`, a negative index counts
    from the end (x[t]'s rule; gather's own refuses it)."""
    node_name = "GatherBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dim: int, index: TensorBase, wrap: bool = False):
        _check_index(index)
        check_devices(x, index)
        d = wrap_dim(dim, x.ndim)
        shape = index.shape
        if index.ndim == 1 and x.ndim > 1:
            ctx.node_name, shape = "IndexSelectBackward0", x.shape[:d] + index.shape + x.shape[d + 1:]
        out = new(shape, x.dtype, x.device)
        backend.gather(x._contiguous()._data, d, index._contiguous()._data, out._data, wrap)
        ctx.shape, ctx.d, ctx.wrap = x.shape, d, wrap
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return ScatterAdd.apply(tuple(ctx.shape), ctx.d, index, g, ctx.wrap), None, None, None   # into zeros


class ScatterAdd(Function):
    """x.scatter_add(dim, index, src): a copy of x with src added at index along dim. x may be a shape, for
    zeros of it (a gather's gradient: filled once, not filled and then copied)."""
    node_name = "ScatterAddBackward0"

    @staticmethod
    def forward(ctx, x, dim: int, index: TensorBase, src: TensorBase, wrap: bool = False):
        _check_index(index)
        zeros = isinstance(x, tuple)
        check_devices(*(() if zeros else (x,)), index, src)
        shape, dtype = (x, src.dtype) if zeros else (x.shape, x.dtype)
        d = wrap_dim(dim, len(shape))
        out = new(shape, dtype, src.device)
        if zeros:
            backend.fill(out._data, 0)
        else:
            backend.copy(x._data, out._data)
        backend.scatter_add(out._data, d, index._contiguous()._data, src.to(dtype)._contiguous()._data, wrap)
        ctx.d, ctx.zeros, ctx.wrap = d, zeros, wrap
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return (None if ctx.zeros else g), None, None, Gather.apply(g, ctx.d, index, ctx.wrap), None


def gather(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    if isinstance(index, TensorBase) and index.ndim != x.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    return Gather.apply(x, dim, index)


def scatter_add(x: TensorBase, dim: int, index: TensorBase, src: TensorBase) -> TensorBase:
    if isinstance(index, TensorBase) and isinstance(src, TensorBase) and index.ndim == src.ndim == x.ndim:
        # torch's shape check: the index no larger than src anywhere, nor than x but along dim (the kernel would
        # read past src)
        d = wrap_dim(dim, x.ndim)
        if any(n > src.shape[k] or (k != d and n > x.shape[k]) for k, n in enumerate(index.shape)):
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(x.shape)} apart "
                               f"from dimension {d} and to be no larger size than src {list(src.shape)}")
        if index.shape != src.shape:        # as torch's, only the part of src the index covers is added
            src = src[tuple(slice(0, n) for n in index.shape)]
    return ScatterAdd.apply(x, dim, index, src)


class IndexAdd(ScatterAdd):
    """x.index_add(dim, index, src) with a 1-D index: ScatterAdd reading the index as a vector along dim (the
    kernel's vector form, as index_select's gradient uses it), under torch's node name."""
    node_name = "IndexAddBackward0"


def _scalar_name(t: TensorBase) -> str:
    return inplace.SCALAR_TYPE[t.dtype.name]


def _index_add_operands(x: TensorBase, dim: int, index: TensorBase, source: TensorBase, alpha):
    """index_add's checks, in torch's order and with its messages; the dimension made non-negative, the index as
    an int64 vector and the source scaled by alpha, all read as at least 1-D (a 0-d x has the one dimension 0)."""
    d = wrap_dim(dim, x.ndim)
    for name, t in (("index", index), ("source", source)):
        if not isinstance(t, TensorBase):
            raise TypeError(f"index_add(): argument '{name}' must be Tensor, not {type(t).__name__}")
    if index.ndim > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
                         f"{_scalar_name(index)} and size: {list(index.shape)}")
    if index.dtype not in (_dtype.int32, _dtype.int64):
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: {_scalar_name(index)}")
    if source.dtype is not x.dtype:
        raise RuntimeError(f"index_add_(): self ({_scalar_name(x)}) and source ({_scalar_name(source)}) must have "
                           f"the same scalar type")
    count = source.shape[d] if source.ndim else 1
    if index.numel() != count:
        raise RuntimeError(f"index_add_(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                           f"({count}), for dim: {d}")
    if max(x.ndim, 1) != max(source.ndim, 1) or any(a != b for k, (a, b) in enumerate(zip(
            x.shape or (1,), source.shape or (1,), strict=True)) if k != d):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}")
    if x.dtype.category == 1 and isinstance(alpha, float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    check_devices(x, index, source)
    source = source if alpha == 1 else source * alpha
    return d, index.reshape(-1).long().to(x.device), source.reshape(source.shape or (1,))


def index_add(x: TensorBase, dim: int, index: TensorBase, source: TensorBase, *, alpha=1) -> TensorBase:
    """x with alpha * source's slices added at x's slices `index` along dim (torch.index_add): a repeated index
    adds every slice sent to it. One scatter-add (atomic adds on a GPU: float32 and int32 there); an index out of
    [0, x.size(dim)) raises IndexError on the cpu and stops the kernel with a device-side assert on a GPU. The
    gradient is g for x and alpha * g.index_select(dim, index) for source."""
    d, index, source = _index_add_operands(x, dim, index, source, alpha)
    if x.ndim == 0:
        return IndexAdd.apply(x.reshape(1), d, index, source).reshape(())
    return IndexAdd.apply(x, d, index, source)


def index_add_(x: TensorBase, dim: int, index: TensorBase, source: TensorBase, *, alpha=1) -> TensorBase:
    """index_add in place: one scatter-add into x's own elements, or, when autograd records it, torch's history
    rewrite (x takes the out-of-place result's IndexAddBackward0)."""
    inplace.check(x, source)
    if inplace.records(x, source):
        return inplace.rebase(x, index_add(x, dim, index, source, alpha=alpha))
    d, index, source = _index_add_operands(x, dim, index, source, alpha)
    if not x.is_contiguous() or x.ndim == 0:
        with no_grad():
            return inplace.write(x, index_add(x.detach(), d, index, source))
    backend.scatter_add(x._data, d, index._contiguous()._data, source.detach()._contiguous()._data)
    x._storage.version += 1
    return x


def index_select(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    """x's slices at `index` along dim: a gather that reads the 1-D index as it is."""
    if index.ndim != 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    return Gather.apply(x, wrap_dim(dim, x.ndim), index)


def masked_select(x, mask):
    """x's elements where mask (broadcast to x) holds, as a 1-D tensor: the count is read back to the host,
    as on a GPU, so this is a sync point."""
    mask = mask.expand(x.shape) if tuple(mask.shape) != tuple(x.shape) else mask
    picked = np.flatnonzero(mask.cpu().numpy().reshape(-1))
    return gather(x.reshape(-1), 0, TensorBase._from_numpy(picked.astype(np.int64), x.device))


def masked_fill(x, mask, value):
    return where(mask, value if isinstance(value, TensorBase) else x.new_full((), value), x)


def masked_fill_(x, mask, value):
    """x where mask holds set to value, in place (torch's masked_fill_)."""
    return inplace.write(x, masked_fill(x, mask, value))


class Triangle(Function):
    """tril (`lower`) or triu of the last two dimensions: one kernel; the gradient is the same triangle of g."""

    @staticmethod
    def forward(ctx, x: TensorBase, diagonal: int, lower: bool):
        name = "tril" if lower else "triu"
        if x.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        ctx.diagonal, ctx.lower, ctx.node_name = diagonal, lower, f"{name.capitalize()}Backward0"
        out = new(x.shape, x.dtype, x.device)
        backend.triangle(x._contiguous()._data, out._data, diagonal, lower)
        return out

    @staticmethod
    def backward(ctx, g):
        return Triangle.apply(g, ctx.diagonal, ctx.lower), None, None


def tril(x, diagonal=0):
    return Triangle.apply(x, int(diagonal), True)


def triu(x, diagonal=0):
    return Triangle.apply(x, int(diagonal), False)


def getitem(x, index):
    if isinstance(index, list):
        index = _list_index(index, x)
    if isinstance(index, TensorBase):
        index = index.to(x.device)                      # a cpu index of a GPU tensor goes there, as torch's
        if index.dtype is _dtype.bool_:                 # a mask: the selected elements, in order
            return masked_select(x, index)
        if index.dtype.category == 1:                   # an index tensor on the first dimension
            flat = index.reshape(-1).long()                  # -1 is the last, as torch's: a wrapping gather
            return Gather.apply(x, 0, flat, True).reshape(*index.shape, *x.shape[1:])
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, TensorBase | list | range) for i in index):
        return _advanced(x, index)
    return Index.apply(x, index)


def _advanced(x, index: tuple):
    """x[index] with index tensors (lists, ranges) among the items: numpy's and torch's advanced indexing. The
    index tensors broadcast to one shape B, which replaces their dimensions where they stand together, or leads
    the result when slices part them (an integer selects first, as torch's, so it parts nothing). Done as the basic
    indexing of the other items, then one gather of the advanced dimensions moved to the front and flattened, at
    a linear index of the (negative-wrapped) components; on a GPU a component out of its range makes it -1, which
    the gather refuses with a device-side assert (the cpu raises IndexError at once)."""
    items = []
    for i in index:
        if isinstance(i, list | range):
            i = _list_index(list(i), x)
        if isinstance(i, TensorBase) and i.dtype is _dtype.bool_:
            items += list(nonzero(i, as_tuple=True))              # a mask covers as many dimensions as it has
        else:
            items.append(i)
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    at = next((k for k, i in enumerate(items) if i is Ellipsis), None)      # by identity: == on a tensor is an op
    if at is not None:
        items[at:at + 1] = [slice(None)] * (x.ndim - used)
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    basic, tensors, where_in_y, y_dim = [], [], [], 0
    for i in items:
        basic.append(slice(None) if isinstance(i, TensorBase) else i)
        if isinstance(i, TensorBase):
            tensors.append(i.to(x.device))
            where_in_y.append(y_dim)
        if not isinstance(i, int):                                # an integer selects (torch's, not numpy's)
            y_dim += 1
    y = Index.apply(x, tuple(basic))
    shape = broadcast_shapes(*(t.shape for t in tensors))
    sizes = [y.shape[d] for d in where_in_y]
    linear, valid = None, None
    for t, n, d in zip(tensors, sizes, where_in_y, strict=True):
        t = t.long().expand(shape)
        ok = (t >= -n) & (t < n)
        if x.device.type == "cpu" and not ok.all().item():
            raise IndexError(f"index {t[~ok].reshape(-1)[0].item()} is out of bounds for dimension {d} with size {n}")
        t = where(t < 0, t + n, t)
        linear = t if linear is None else linear * n + t
        valid = ok if valid is None else valid & ok
    linear = where(valid, linear, -1)
    rest = [d for d in range(y.ndim) if d not in where_in_y]
    flat = y.permute(*where_in_y, *rest).reshape(-1, *(y.shape[d] for d in rest))
    out = Gather.apply(flat, 0, linear.reshape(-1), False).reshape(*shape, *(y.shape[d] for d in rest))
    if where_in_y == list(range(where_in_y[0], where_in_y[0] + len(where_in_y))):     # together: where they stood
        before = sum(1 for d in rest if d < where_in_y[0])
        b = len(shape)
        out = out.permute(*range(b, b + before), *range(b), *range(b + before, out.ndim))
    return out


def _list_index(index: list, x) -> TensorBase:
    """x[[0, 2]] indexes with the list as an int64 (or bool) tensor, as torch does."""
    values = np.asarray(index)
    return TensorBase._from_numpy(values if values.dtype == np.bool_ else values.astype(np.int64), x.device)


def _element_numbers(x) -> TensorBase:
    """An int64 tensor of x's shape on x's device holding 0, 1, 2, ... in row-major order (made there, not
    uploaded)."""
    numbers = new((x.numel(),), _dtype.int64, x.device)
    backend.arange(numbers._data, 0, 1)
    return numbers.reshape(x.shape)


def _set_by_tensor(x, index, value):
    """x with x[index] = value, out of place, for a boolean mask or an integer tensor on the first dimension
    (repeated indices add their values, where torch leaves the result undefined)."""
    value = value if isinstance(value, TensorBase) else x.new_full((), value)
    value = value.to(x.device, x.dtype)
    if index.dtype is _dtype.bool_:
        mask = index.expand(x.shape) if tuple(index.shape) != tuple(x.shape) else index
        if value.numel() == 1:
            return where(mask, value.reshape(()), x)
        flat_positions = _element_numbers(x)
        picked = masked_select(flat_positions, mask)
        placed = scatter_add(x.new_zeros(x.numel()), 0, picked, value.reshape(-1))
        return where(mask, placed.reshape(x.shape), x)
    rows = index.reshape(-1).long()
    value = value.expand(rows.shape[0], *x.shape[1:])
    spread = rows.reshape(-1, *([1] * (x.ndim - 1))).expand(value.shape)
    placed = scatter_add(x.new_zeros(x.shape), 0, spread.contiguous(), value)
    hits = scatter_add(x.new_zeros(x.shape[0], dtype=_dtype.int32), 0, rows,
                       x.new_ones(rows.shape, dtype=_dtype.int32))
    return where((hits > 0).reshape(-1, *([1] * (x.ndim - 1))), placed, x)


def setitem(x, index, value) -> None:
    if isinstance(index, list):
        index = _list_index(index, x)
    if isinstance(index, TensorBase):
        inplace.check(x, value)
        result = _set_by_tensor(x, index, value)
        if inplace.records(x, value):
            inplace.rebase(x, result)
        else:
            inplace.write(x, result)
        return
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, TensorBase | list | range) for i in index):
        _set_advanced(x, index, value)
        return
    if inplace.records(x, value):
        inplace.check(x, value)
        inplace.rebase(x, inplace.SetRegion.apply(x, index, value))
        return
    with no_grad():
        target = getitem(x.detach(), index)
    inplace.write(target, value)                # a view of x's storage: its version is x's


def _set_advanced(x, index: tuple, value) -> None:
    """x[index] = value with index tensors among the items (torch's index_put_): the flat positions the same index
    picks from a grid of x's element numbers (`_advanced`, so the same rules and bounds), then one assignment into
    x's elements read as a vector. A position picked twice gets the sum of its values (torch leaves it undefined)."""
    inplace.check(x, value)
    with no_grad():
        positions = _advanced(_element_numbers(x), index)
    value = value if isinstance(value, TensorBase) else x.new_full((), value)
    value = value.to(x.device, x.dtype).expand(positions.shape).reshape(-1)
    result = _set_by_tensor(x.reshape(-1), positions.reshape(-1), value).reshape(x.shape)
    if inplace.records(x, value):
        inplace.rebase(x, result)
    else:
        inplace.write(x, result)


def _positions(values: np.ndarray, dev) -> TensorBase:
    return TensorBase._from_numpy(values.astype(np.int64), dev)


def flip(x, dims):
    """x reversed along each of dims (torch.flip: a copy, read backwards)."""
    for d in ([dims] if isinstance(dims, int) else dims):
        d = wrap_dim(d, x.ndim)
        x = index_select(x, d, _positions(np.arange(x.shape[d] - 1, -1, -1), x.device))
    return x


def roll(x, shifts, dims=None):
    """x rotated by shifts along dims: element i moves to i + shift, wrapping (torch.roll); with no dims, over the
    flattened tensor, keeping its shape."""
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(x.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    for shift, d in zip(shifts, dims, strict=True):
        d = wrap_dim(d, x.ndim)
        n = x.shape[d]
        if n:
            x = index_select(x, d, _positions((np.arange(n) - shift) % n, x.device))
    return x


def nonzero(x, as_tuple: bool = False):
    """The indices of x's nonzero elements, row-major: an (n, ndim) int64 tensor, or with `as_tuple` one 1-D tensor
    per dimension. How many there are is read back to the host, as on a GPU, so this is a sync point."""
    found = np.nonzero(x.detach().cpu().numpy().reshape(x.shape))
    if as_tuple:
        return tuple(TensorBase._from_numpy(f.astype(np.int64), x.device) for f in found)
    return TensorBase._from_numpy(np.stack(found, axis=1).astype(np.int64).reshape(-1, x.ndim), x.device)


def where_or_nonzero(cond, a=None, b=None):
    """torch.where: a where cond holds, else b (broadcast); with cond alone, the indices where it holds, one
    tensor per dimension (nonzero(cond, as_tuple=True))."""
    if a is None and b is None:
        return nonzero(cond, as_tuple=True)
    if a is None or b is None:
        raise TypeError("where() takes a condition alone, or a condition and two operands")
    return where(cond, a, b)


def repeat_interleave(x: TensorBase, repeats, dim=None, output_size=None) -> TensorBase:
    """Each element (or each slice along `dim`; of the flattened x without one) repeated `repeats` times (an int, or
    one count per element: a list or tensor, read on the host), one index_select: torch.repeat_interleave."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    dim = wrap_dim(dim, x.ndim)
    size = x.shape[dim]
    counts = np.asarray(repeats.tolist() if isinstance(repeats, TensorBase) else repeats, np.int64)
    counts = np.broadcast_to(counts, (size,)) if counts.ndim == 0 or counts.size == 1 else counts
    if counts.shape != (size,):
        raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                           f"{counts.size} and input.size({dim}) = {size}")
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    index = TensorBase._from_numpy(np.repeat(np.arange(size, dtype=np.int64), counts), x.device)
    return index_select(x, dim, index)
