"""Layer 5: sort, argsort and topk along one dimension.

The order is found on the host (numpy's stable argsort, with torch's place for NaN: last going up, first going
down), so on a GPU this is a sync point, as nonzero and multinomial are; the values are then a gather of x on its
own device, so their gradient is the gather's (a scatter-add into x's shape)."""

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
