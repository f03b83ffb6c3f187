"""Layer 5: sort, argsort and topk along one dimension; unique, bincount and searchsorted.

The order is found on the host (numpy's stable argsort, with torch's place for NaN: last going up, first going
down), so on a GPU this is a sync point, as nonzero and multinomial are; the values are then a gather of x on its
own device, so their gradient is the gather's (a scatter-add into x's shape). unique, bincount and searchsorted
are computed on the host too (numpy's), their results put on x's device; they have no gradient, as in torch."""

import numpy as np

from lapis.framework.ops.indexing import Gather
from lapis.framework.ops.reductions import return_types
from lapis.framework.tensor_base import TensorBase, wrap_dim


def _order(x: TensorBase, d: int, descending: bool) -> np.ndarray:
    """The stable argsort of x along d, going up or down."""
    a = x.detach().cpu().numpy()
    if a.dtype.kind in "iub":
        key = a.astype(np.int64)
        key = -key if descending else key
    else:
        key = a.astype(np.float64)
        key = np.where(np.isnan(key), -np.inf, -key) if descending else key
    return np.argsort(key, axis=d, kind="stable")


def _indices(order: np.ndarray, x: TensorBase) -> TensorBase:
    return TensorBase._from_numpy(np.ascontiguousarray(order, dtype=np.int64), x.device)


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """(values, indices) of x sorted along dim (equal elements keep their order whatever `stable` says)."""
    d = wrap_dim(dim, x.ndim)
    indices = _indices(_order(x, d, descending), x)
    return return_types(Gather.apply(x, d, indices), indices)


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    return sort(x, dim, descending, stable).indices


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002 - torch's name
    """(values, indices) of the k largest (or smallest) elements along dim, in order."""
    d = wrap_dim(dim, x.ndim)
    if not 0 <= k <= x.shape[d]:
        raise RuntimeError(f"selected index k out of range: k is {k} for a dimension of size {x.shape[d]}")
    order = np.take(_order(x, d, largest), np.arange(k), axis=d)
    indices = _indices(order, x)
    return return_types(Gather.apply(x, d, indices), indices)


def _device_array(values: np.ndarray, like: TensorBase) -> TensorBase:
    return TensorBase._from_numpy(np.ascontiguousarray(values), like.device)


def unique(x, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim=None):
    """torch.unique: the distinct values in ascending order (of the flattened x, or the distinct slices along dim),
    with the index of each element's value (shaped as x) and each value's count when asked."""
    a = x.detach().cpu().numpy()
    values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True,
                                        axis=None if dim is None else wrap_dim(dim, x.ndim))
    out = [_device_array(values.astype(a.dtype), x)]
    if return_inverse:
        out.append(_device_array(inverse.reshape(a.shape if dim is None else -1).astype(np.int64), x))
    if return_counts:
        out.append(_device_array(counts.astype(np.int64), x))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x, weights=None, minlength: int = 0):
    """torch.bincount of a 1-D non-negative integer tensor: how often each value occurs (or the sum of its weights)."""
    if x.ndim != 1 or x.dtype.is_floating_point:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    a = x.detach().cpu().numpy()
    if a.size and a.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else weights.detach().cpu().numpy()
    counts = np.bincount(a, w, minlength)
    dtype = np.int64 if w is None else (w.dtype if w.dtype == np.float32 else np.float64)
    return _device_array(counts.astype(dtype), x)


def searchsorted(sorted_sequence, values, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    """torch.searchsorted: for each of `values`, the index in the (last dimension of the) sorted sequence where it
    would go, leftmost or rightmost among equal elements; a sequence of several dimensions pairs its rows with
    `values`' rows."""
    right = right or side == "right"
    seq = sorted_sequence.detach().cpu().numpy()
    scalar = not isinstance(values, TensorBase)
    v = np.asarray(values) if scalar else values.detach().cpu().numpy()
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter.detach().cpu().numpy(), -1)
    side_name = "right" if right else "left"
    if seq.ndim == 1:
        found = np.searchsorted(seq, v, side=side_name)
    else:
        rows, inner = seq.reshape(-1, seq.shape[-1]), v.reshape(-1, v.shape[-1])
        found = np.stack([np.searchsorted(r, q, side=side_name) for r, q in zip(rows, inner, strict=True)])
        found = found.reshape(v.shape)
    return _device_array(np.asarray(found, np.int32 if out_int32 else np.int64), sorted_sequence)
