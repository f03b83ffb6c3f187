"""Layer 5: `Tensor`, with PyTorch's names and semantics: what a tensor is (TensorBase: storage, views, dtype,
device, autograd state) and, here, what it can do. Every method below is an op of `lapis.framework.ops`,
listed by family; the elementwise ops (x.exp(), x.add_(y), x + y, ...) come from their table, one method (and
an in-place one, and its operators) per row.

Ops go through `backend` (numpy on `cpu`, `lapis.libs` kernels on a GPU) and, where differentiable, through
`lapis.framework.autograd` Functions.
"""

import builtins

from lapis.framework import dtype as _dtype
from lapis.framework.device import device as _device
from lapis.framework.ops import elementwise, indexing, inplace, linalg, nn, reductions, sorting, views
from lapis.framework.tensor_base import TensorBase, device_of


class memory_format:  # noqa: N801 - torch.memory_format
    """torch's memory formats: how a copy lays out a tensor's elements. lapis tensors are made row-major
    (contiguous), which is torch.contiguous_format, and what preserve_format gives here too; channels_last
    layouts are not supported."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"lapis.{self.name}"


preserve_format, contiguous_format = memory_format("preserve_format"), memory_format("contiguous_format")
channels_last, channels_last_3d = memory_format("channels_last"), memory_format("channels_last_3d")


def _check_memory_format(fmt) -> bool:
    """Whether fmt asks for a contiguous result (None and preserve_format keep the layout a copy makes anyway)."""
    if fmt is None or fmt is preserve_format:
        return False
    if fmt is contiguous_format:
        return True
    if fmt in (channels_last, channels_last_3d):
        raise NotImplementedError(f"{fmt!r}: lapis tensors are row-major (contiguous_format) only")
    raise TypeError(f"memory_format must be a lapis.memory_format, not {type(fmt).__name__}")


def _reflected(f):
    """The reflected operator: a @ b with a not a tensor is matmul(a, b) called on b."""
    return lambda self, other: f(other, self)


class Tensor(TensorBase, elementwise.ElementwiseMethods):
    """A multi-dimensional array on a device, with autograd (torch.Tensor)."""

    # -- moving and converting -----------------------------------------------------------------------
    def to(self, *args, dtype: _dtype.dtype | None = None, device=None, copy: bool = False,
           non_blocking: bool = False, memory_format=None) -> "Tensor":
        # non_blocking: accepted; a host-device copy here is synchronous (it waits for the work it must follow)
        for a in args:
            if isinstance(a, _dtype.dtype):
                dtype = a
            elif isinstance(a, TensorBase):
                dtype, device = a.dtype, a.device
            else:
                device = a
        device = device_of(device) if device is not None else self.device
        copy = copy or (_check_memory_format(memory_format) and not self.is_contiguous())
        if device == self.device and (dtype or self.dtype) is self.dtype and not copy:
            return self                                  # nothing to change: the tensor itself, as torch
        return elementwise.ToCopy.apply(self, device, dtype or self.dtype, copy)

    def pin_memory(self, device=None) -> "Tensor":
        """A copy of this cpu tensor in page-locked host memory (the tensor itself if it is pinned already), as
        torch's: memory of the runtime's host pool, mapped for the GPU (`device`, the current 'cuda' one by default),
        so a later `.to('cuda')` is one copy-engine transfer from it, with no staging buffer. The copy itself is
        synchronous either way (`non_blocking` changes nothing here). A GPU tensor cannot be pinned, as in torch."""
        if self.device.type != "cpu":
            raise RuntimeError(f"cannot pin '{self.device.type}' memory: only dense CPU tensors can be pinned")
        if self.is_pinned():
            return self
        gpu = _device("cuda", _device("cuda").api.current_device()) if device is None else device_of(device)
        return elementwise.PinMemory.apply(self, gpu)

    def cpu(self, memory_format=None) -> "Tensor":
        return self.to("cpu", memory_format=memory_format)

    def cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> "Tensor":
        """This tensor on a GPU: `device` an index, 'cuda:1' or a device (the current 'cuda' device when None), as
        torch's; the tensor itself when it is there already. `non_blocking` is accepted: the copy is synchronous."""
        if device is None:
            device = _device("cuda", _device("cuda").api.current_device())
        elif isinstance(device, builtins.int):
            device = _device("cuda", device)
        else:
            device = device_of(device)
            if device.type == "cpu":
                raise RuntimeError(f"Invalid device, must be cuda device, got {device}")
        return self.to(device, non_blocking=non_blocking, memory_format=memory_format)

    def float(self) -> "Tensor":
        return self.to(_dtype.float32)

    def double(self) -> "Tensor":
        return self.to(_dtype.float64)

    def half(self) -> "Tensor":
        return self.to(_dtype.float16)

    def bfloat16(self) -> "Tensor":
        return self.to(_dtype.bfloat16)

    def long(self) -> "Tensor":
        return self.to(_dtype.int64)

    def int(self) -> "Tensor":
        return self.to(_dtype.int32)

    def bool(self) -> "Tensor":
        return self.to(_dtype.bool_)

    def type(self, dtype=None) -> "str | Tensor":
        """With no argument torch's type name (lapis.FloatTensor, lapis.cuda.LongTensor); with a dtype, or such a
        name (torch's spelling too), the tensor in that dtype (and on cuda for a cuda name)."""
        if dtype is None:
            where = "" if self.device.type == "cpu" else f"{self.device.type}."
            return f"lapis.{where}{inplace.SCALAR_TYPE[self.dtype.name]}Tensor"
        if isinstance(dtype, _dtype.dtype):
            return self.to(dtype)
        parts = str(dtype).split(".")
        by_name = {v + "Tensor": k for k, v in inplace.SCALAR_TYPE.items()}
        if parts[0] not in ("lapis", "torch") or parts[-1] not in by_name:
            raise ValueError(f"invalid type: '{dtype}'")
        return self.to("cuda" if "cuda" in parts else self.device, getattr(_dtype, by_name[parts[-1]]))

    def type_as(self, other) -> "Tensor":
        return self.to(other.dtype)

    def nelement(self) -> builtins.int:
        return self.numel()

    def ndimension(self) -> builtins.int:
        return self.ndim

    @property
    def data(self) -> "Tensor":
        """The tensor's values without its history (a detached view of the same storage, as torch's .data)."""
        return self.detach()

    @data.setter
    def data(self, value: TensorBase) -> None:
        """x.data = y: x takes y's storage, shape and dtype and keeps its own autograd state (torch's swap)."""
        if not isinstance(value, TensorBase):
            raise TypeError(f"data must be a Tensor, not {type(value).__name__}")
        self._storage, self._shape, self._strides, self._offset = (value._storage, value._shape, value._strides,
                                                                   value._offset)
        self._data_view, self.device = None, value.device

    contiguous, clone = views.contiguous, views.clone

    def __format__(self, spec: str) -> str:
        """f"{loss:.4f}": a 0-d tensor formats as its number, as torch's; others take no format spec."""
        if self.ndim == 0:
            return format(self.item(), spec)
        return super().__format__(spec)

    # -- elementwise beyond the table (ops/elementwise.py) ---------------------------------------------
    clamp, clamp_, clip = elementwise.clamp, elementwise.clamp_, elementwise.clamp
    __invert__ = bitwise_not = elementwise.invert
    logical_not = elementwise.logical_not
    __and__, __or__, __xor__ = elementwise.bitwise_and, elementwise.bitwise_or, elementwise.bitwise_xor
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__          # all three commute

    # -- reductions (ops/reductions.py) ------------------------------------------------------------------
    sum, mean, var, std, prod = reductions.sum, reductions.mean, reductions.var, reductions.std, reductions.prod
    max, min, argmax, argmin = reductions.max, reductions.min, reductions.argmax, reductions.argmin
    logsumexp, sum_to_size = reductions.logsumexp, reductions.sum_to_size
    all, any, norm, cumsum = reductions.all, reductions.any, reductions.norm, reductions.cumsum
    isclose, allclose, equal = reductions.isclose, reductions.allclose, reductions.equal
    sort, argsort, topk = sorting.sort, sorting.argsort, sorting.topk
    unique, bincount = sorting.unique, sorting.bincount

    # -- views and joins (ops/views.py) -------------------------------------------------------------------
    view, view_as, reshape = views.view, views.view_as, views.reshape
    permute, transpose, t = views.permute, views.transpose, views.t
    T, mT = property(views.T), property(views.mT)
    unsqueeze, squeeze, flatten = views.unsqueeze, views.squeeze, views.flatten
    expand, expand_as, narrow, split, chunk = views.expand, views.expand_as, views.narrow, views.split, views.chunk
    unbind, diagonal = views.unbind, views.diagonal

    # -- indexing (ops/indexing.py) and writing (ops/inplace.py) --------------------------------------------
    __getitem__, __setitem__ = indexing.getitem, indexing.setitem
    gather, scatter_add, index_select = indexing.gather, indexing.scatter_add, indexing.index_select
    index_add, index_add_ = indexing.index_add, indexing.index_add_
    repeat_interleave, lerp, outer = indexing.repeat_interleave, elementwise.lerp, linalg.outer
    masked_fill, masked_select, tril, triu = indexing.masked_fill, indexing.masked_select, indexing.tril, indexing.triu
    masked_fill_, flip, roll, nonzero = indexing.masked_fill_, indexing.flip, indexing.roll, indexing.nonzero
    zero_, fill_, copy_ = inplace.zero_, inplace.fill_, inplace.copy_
    normal_, uniform_ = inplace.normal_, inplace.uniform_

    # -- neural-network primitives (ops/nn.py) and matrix products (ops/linalg.py) --------------------------------
    softmax, log_softmax = nn.softmax, nn.log_softmax
    matmul, mm, bmm = linalg.matmul, linalg.mm, linalg.bmm
    __matmul__, __rmatmul__ = linalg.matmul, _reflected(linalg.matmul)

    # -- DLPack ---------------------------------------------------------------------------------------------
    def __dlpack__(self, **kwargs):
        """DLPack export of a cpu tensor: numpy's capsule of the strided view, sharing the storage."""
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        if self.device.type != "cpu":
            raise BufferError(f"DLPack export is for cpu tensors; copy {self.device} tensors with .cpu() first")
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        """(kDLCPU, 0); a GPU tensor reports kDLCUDA (2) or kDLROCM (10), though it does not export."""
        if self.device.type == "cpu":
            return (1, 0)
        return (2 if self.device.type == "cuda" else 10, self.device.index or 0)


TensorBase.made_class = Tensor
