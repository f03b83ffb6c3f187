"""Layer 5: `Tensor`, with PyTorch's names and semantics: storage, views, dtypes and devices.

A tensor is a view of a storage: a flat numpy array on `cpu`, a flat device array (Layer 3) on a
GPU, read through a shape, element strides and an offset. Views (`view`, `permute`, `expand`,
slicing, ...) make a new tensor over the same storage and cost nothing; `contiguous()` and
`clone()` copy, explicitly. Ops go through `_backend` (numpy on `cpu`, `lapis.libs` kernels on a
GPU) and, where differentiable, through `lapis.autograd` Functions (`_ops`).

Simplifications: random numbers are drawn on the host (numpy's generator, seeded by
`manual_seed`) and copied to the device; PyTorch generates them on the device.
"""

import builtins

import numpy as np

from lapis.cuda import DeviceNDArray
from lapis.framework import autograd
from lapis.framework import backend as _backend
from lapis.framework import dtype as _dtype
from lapis.framework.device import device

_generator = [np.random.default_rng(0)]


class Size(tuple):
    """The shape of a tensor: a tuple that prints as lapis.Size([2, 3])."""

    def __repr__(self) -> str:
        return f"lapis.Size({list(self)})"

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))


class _Storage:
    """A tensor's memory: a flat array and a version counter that in-place ops bump (autograd checks it)."""
    __slots__ = ("array", "version")

    def __init__(self, array):
        self.array, self.version = array, 0


def manual_seed(seed: int) -> None:
    _generator[0] = np.random.default_rng(seed)


def _device_of(d) -> device:
    if d is None:
        return device("cpu")
    return (d if isinstance(d, device) else device(d)).normalized()


def _shape(size: tuple) -> tuple:
    if len(size) == 1 and isinstance(size[0], tuple | list | Size):
        size = tuple(size[0])
    if not all(isinstance(s, builtins.int | np.integer) and s >= 0 for s in size):
        raise TypeError(f"size must be non-negative integers, got {size}")
    return tuple(builtins.int(s) for s in size)


def _contiguous_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


class Tensor:
    def __init__(self, storage: _Storage, shape: tuple, strides: tuple, offset: builtins.int, dev: device):
        self._storage, self._shape, self._strides, self._offset = storage, tuple(shape), tuple(strides), offset
        self.device = dev
        self.requires_grad = False
        self.grad: Tensor | None = None
        self.grad_fn = None
        self._retains_grad = False
        self._is_view = False        # shares memory with a tensor it was made from (in-place autograd refuses it)

    # -- storage and views --------------------------------------------------------------------------
    @classmethod
    def _empty(cls, shape: tuple, dt: _dtype.dtype, dev: device) -> "Tensor":
        n = builtins.max(builtins.int(np.prod(shape, dtype=np.int64)), 1)
        if dev.type == "cpu":
            flat = np.empty(n, dt.np)
        else:
            context = dev.api.current_context(dev.index)    # this device's, without changing the current one
            flat = DeviceNDArray.allocate(context, (n,), dt.np)
        return cls(_Storage(flat), shape, _contiguous_strides(shape), 0, dev)

    @classmethod
    def _from_numpy(cls, array: np.ndarray, dev: device) -> "Tensor":
        array = np.ascontiguousarray(array)
        if dev.type == "cpu":
            flat = array.reshape(-1) if array.size else np.empty(1, array.dtype)
            return cls(_Storage(flat), array.shape, _contiguous_strides(array.shape), 0, dev)
        out = cls._empty(array.shape, _dtype.from_numpy(array.dtype), dev)
        if array.size:
            out._storage.array[:array.size].copy_to_device(array.reshape(-1))
        return out

    @property
    def _data(self):
        """The strided array the backend reads and writes: a numpy view on cpu, a DeviceNDArray view on a GPU."""
        flat = self._storage.array
        item = flat.dtype.itemsize
        if isinstance(flat, np.ndarray):
            return np.lib.stride_tricks.as_strided(flat[self._offset:], self._shape,
                                                   tuple(s * item for s in self._strides))
        return DeviceNDArray(self._shape, tuple(s * item for s in self._strides), flat.dtype, flat.context,
                             flat.memory, flat.ptr + self._offset * item)

    def _view(self, shape, strides, offset) -> "Tensor":
        view = Tensor(self._storage, shape, strides, offset, self.device)
        view._is_view = True
        return view

    # -- properties -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._shape)

    def size(self, dim: builtins.int | None = None):
        return self.shape if dim is None else self._shape[_dim(dim, self.ndim)]

    def stride(self, dim: builtins.int | None = None):
        return self._strides if dim is None else self._strides[_dim(dim, self.ndim)]

    def storage_offset(self) -> builtins.int:
        return self._offset

    def is_contiguous(self) -> bool:
        return all(st == c for st, c, n in zip(self._strides, _contiguous_strides(self._shape), self._shape,
                                                strict=True) if n != 1)

    @property
    def dtype(self) -> _dtype.dtype:
        return _dtype.from_numpy(self._storage.array.dtype)

    @property
    def ndim(self) -> builtins.int:
        return len(self._shape)

    def dim(self) -> builtins.int:
        return self.ndim

    def numel(self) -> builtins.int:
        return self.shape.numel()

    def element_size(self) -> builtins.int:
        return self.dtype.itemsize

    @property
    def is_cuda(self) -> bool:
        return self.device.type != "cpu"

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    # -- autograd -----------------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if not self.is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        self._retains_grad = True

    def detach(self) -> "Tensor":
        return self._view(self._shape, self._strides, self._offset)

    def backward(self, gradient=None, retain_graph: bool = False, create_graph: bool = False) -> None:
        autograd.backward([self], [gradient] if gradient is not None else None, retain_graph, create_graph)

    # -- moving and converting -----------------------------------------------------------------------
    def to(self, *args, dtype: _dtype.dtype | None = None, device=None, copy: bool = False) -> "Tensor":
        for a in args:
            if isinstance(a, _dtype.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            else:
                device = a
        from lapis.framework import ops as _ops
        return _ops.To.apply(self, _device_of(device) if device is not None else self.device, dtype or self.dtype,
                             copy)

    def _host(self) -> np.ndarray:
        data = self._data
        return np.array(data) if isinstance(data, np.ndarray) else \
            _contiguous(self)._data.copy_to_host()

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: builtins.int = 0) -> "Tensor":
        return self.to(globals()["device"]("cuda", index))

    def float(self) -> "Tensor":
        return self.to(_dtype.float32)

    def double(self) -> "Tensor":
        return self.to(_dtype.float64)

    def half(self) -> "Tensor":
        return self.to(_dtype.float16)

    def long(self) -> "Tensor":
        return self.to(_dtype.int64)

    def int(self) -> "Tensor":
        return self.to(_dtype.int32)

    def bool(self) -> "Tensor":
        return self.to(_dtype.bool_)

    def numpy(self) -> np.ndarray:
        if self.device.type != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy "
                            "the tensor to host memory first.")
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._data

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def __repr__(self) -> str:
        host = self._host()
        body = np.array2string(host.astype(np.float32) if self.dtype is _dtype.bfloat16 else host, separator=", ",
                               prefix="tensor(")
        extras = "" if self.device.type == "cpu" else f", device='{self.device}'"
        if self.dtype not in (_dtype.get_default_dtype(), _dtype.int64, _dtype.bool_):
            extras += f", dtype={self.dtype!r}"
        if self.grad_fn is not None:
            extras += f", grad_fn=<{self.grad_fn.name()}>"
        elif self.requires_grad:
            extras += ", requires_grad=True"
        return f"tensor({body}{extras})"

    def __len__(self) -> builtins.int:
        if not self.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(self.item())

    def __float__(self) -> builtins.float:
        return builtins.float(self.item())

    def __int__(self) -> builtins.int:
        return builtins.int(self.item())

    def __index__(self) -> builtins.int:
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return builtins.int(self.item())

    __hash__ = object.__hash__


def _dim(d: builtins.int, ndim: builtins.int) -> builtins.int:
    n = builtins.max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def _contiguous(t: Tensor) -> Tensor:
    """t itself if contiguous, else a contiguous copy (no autograd: for the backend's use)."""
    if t.is_contiguous():
        return t
    out = Tensor._empty(t._shape, t.dtype, t.device)
    _backend.unary("copy", t._data, out._data)
    return out


def ones_like(t: Tensor, dtype=None, device=None) -> Tensor:
    from lapis.framework.creation import full
    return full(t.shape, 1, dtype=dtype or t.dtype, device=device or t.device)
