"""Layer 5: `TensorBase`, what a tensor is before anything is computed with it (torch._C.TensorBase's place).

A tensor is a view of a storage: a flat numpy array on `cpu`, a flat device array (Layer 3) on a GPU, read
through a shape, element strides and an offset. Views make a new tensor over the same storage and cost
nothing; `_contiguous` copies. The storage carries a version counter that in-place ops bump and autograd
checks. TensorBase also holds the autograd state (it implements `autograd.Variable`), conversions to host
values, and tensors made like this one (`new_zeros`, ...).

`Tensor` (tensor.py) adds the ops. The op modules make their results through TensorBase (`_empty`,
`_from_numpy`), which builds `TensorBase.made_class`, the Tensor class, set where it is defined: the way
PyTorch's C++ core is handed its Python Tensor class, so that ops never import the class that calls them.
"""

import builtins
import math
import sys

import numpy as np

from lapis.cuda import DeviceNDArray, OutOfMemoryError
from lapis.cuda.context import PinnedHostMemory
from lapis.framework import autograd, backend
from lapis.framework import dtype as _dtype
from lapis.framework.device import device


class Size(tuple):
    """The shape of a tensor: a tuple that prints as lapis.Size([2, 3])."""

    def __repr__(self) -> str:
        return f"lapis.Size({list(self)})"

    def numel(self) -> int:
        return math.prod(self)


class Storage:
    """A tensor's memory: a flat array, its dtype, and a version counter that in-place ops bump (autograd checks it)."""
    __slots__ = ("array", "dtype", "version")

    def __init__(self, array):
        self.array, self.version = array, 0
        self.dtype = _dtype.from_numpy(array.dtype)


def _size_text(nbytes: builtins.int) -> str:
    """A size as torch's out-of-memory message writes it: bytes, KiB, MiB or GiB with two decimals."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def device_of(d) -> device:
    """A device argument (None for cpu, a string or a device) as a device with its index."""
    if d is None:
        return device("cpu")
    return (d if isinstance(d, device) else device(d)).normalized()


def parse_shape(size: tuple) -> tuple:
    """zeros(2, 3) and zeros((2, 3)) alike: the sizes as a tuple of non-negative ints."""
    if len(size) == 1 and isinstance(size[0], tuple | list | Size):
        size = tuple(size[0])
    if not all(isinstance(s, builtins.int | np.integer) and s >= 0 for s in size):
        raise TypeError(f"size must be non-negative integers, got {size}")
    return tuple(builtins.int(s) for s in size)


MAX_STORAGE_BYTES = 2**63 - 1   # a storage's size in bytes is an int64, as torch's (and numpy's intp)

_STRIDES: dict = {}          # contiguous_strides by shape: a training loop's shapes repeat, op after op
STRIDES_KEPT = 4096          # shapes kept before the table starts over


def contiguous_strides(shape: tuple) -> tuple:
    """The element strides of a C-contiguous tensor of `shape` (a tuple)."""
    strides = _STRIDES.get(shape)
    if strides is None:
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(out))
        if len(_STRIDES) >= STRIDES_KEPT:
            _STRIDES.clear()
        _STRIDES[shape] = strides
    return strides


def wrap_dim(d: builtins.int, ndim: builtins.int) -> builtins.int:
    """A dimension index in [-ndim, ndim) as a non-negative one (a 0-d tensor has dimensions -1 and 0)."""
    if 0 <= d < ndim:                      # the common case, as it is
        return d
    n = builtins.max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


class TensorBase(autograd.Variable):
    made_class: type        # the class the ops make (lapis.Tensor), set in tensor.py

    def __init__(self, storage: Storage, shape: tuple, strides: tuple, offset: builtins.int, dev: device):
        self._storage, self._shape, self._strides, self._offset = storage, tuple(shape), tuple(strides), offset
        self._data_view = None       # `_data`, made at its first use
        self._contiguity = None      # (strides, shape, whether contiguous): `is_contiguous` of that layout
        self.device = dev
        self.requires_grad = False
        self.grad: TensorBase | None = None
        self.grad_fn = None
        self._output_nr = 0
        self._accumulator = None
        self._retains_grad = False
        self._is_view = False        # shares memory with a tensor it was made from (in-place autograd refuses it)

    # -- storage and views --------------------------------------------------------------------------
    @staticmethod
    def _empty(shape: tuple, dt: _dtype.dtype, dev: device) -> "TensorBase":
        n = builtins.max(math.prod(shape), 1)
        try:
            if dev.type == "cpu":
                flat = np.empty(n, dt.np)
            else:
                context = dev.api.current_context(dev.index)    # this device's, without changing the current one
                flat = DeviceNDArray.vector(context, n, dt.np)
        except (ValueError, OutOfMemoryError) as e:      # numpy's "array is too big", or the device's
            nbytes = n * dt.itemsize
            if nbytes > MAX_STORAGE_BYTES:
                raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}") from None
            if isinstance(e, OutOfMemoryError):       # torch's words first, then the device's account
                raise OutOfMemoryError(f"{dev.type.upper()} out of memory. Tried to allocate {_size_text(nbytes)}. "
                                       f"{e}") from None
            raise
        out = TensorBase.made_class(Storage(flat), shape, contiguous_strides(shape), 0, dev)
        out._contiguity = (out._strides, out._shape, True)       # made contiguous: no need to look
        return out

    @staticmethod
    def _from_numpy(array: np.ndarray, dev: device) -> "TensorBase":
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        if dev.type == "cpu":
            flat = array.reshape(-1) if array.size else np.empty(1, array.dtype)
            return TensorBase.made_class(Storage(flat), array.shape, contiguous_strides(array.shape), 0, dev)
        out = TensorBase._empty(array.shape, _dtype.from_numpy(array.dtype), dev)
        if array.size:
            out._storage.array[:array.size].copy_to_device(array.reshape(-1))
        return out

    @property
    def _data(self):
        """The strided array the backend reads and writes: a numpy view on cpu, a DeviceNDArray view on a GPU."""
        if self._data_view is None:
            self._data_view = self._make_data()
        return self._data_view

    def _make_data(self):
        flat = self._storage.array
        item = flat.dtype.itemsize
        strides = tuple(s * item for s in self._strides)
        if isinstance(flat, np.ndarray):            # a view of the storage (the constructor: as_strided is slower)
            return np.ndarray(self._shape, flat.dtype, flat, self._offset * item, strides)
        return flat._view(self._shape, strides, flat.dtype, flat.ptr + self._offset * item,
                          "C" if self.is_contiguous() else None)

    def _take(self, other: "TensorBase") -> None:
        """Become a view of other's memory, layout and device in place (torch's `.data` assignment)."""
        self._storage, self._shape, self._strides, self._offset = other._storage, other._shape, other._strides, \
            other._offset
        self.device = other.device
        self._data_view = None

    def _view(self, shape, strides, offset) -> "TensorBase":
        view = TensorBase.made_class(self._storage, shape, strides, offset, self.device)
        view._is_view = True
        return view

    def _contiguous(self) -> "TensorBase":
        """self if contiguous, else a contiguous copy (no autograd: for the backend's use)."""
        if self.is_contiguous():
            return self
        out = self._empty(self._shape, self.dtype, self.device)
        backend.copy(self._data, out._data)
        return out

    def _shares_storage(self, other: "TensorBase") -> bool:
        return self._storage is other._storage

    def _alone_on_storage(self) -> bool:
        """No other tensor holds this one's memory (CPython's reference count: this tensor's and the call's)."""
        return sys.getrefcount(self._storage) <= 2

    @property
    def _version(self) -> builtins.int:
        return self._storage.version

    # -- properties -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._shape)

    def size(self, dim: builtins.int | None = None):
        return self.shape if dim is None else self._shape[wrap_dim(dim, self.ndim)]

    def stride(self, dim: builtins.int | None = None):
        return self._strides if dim is None else self._strides[wrap_dim(dim, self.ndim)]

    def storage_offset(self) -> builtins.int:
        return self._offset

    def is_contiguous(self) -> bool:
        known = self._contiguity     # kept for the layout it was found for: ops ask again and again
        if known is not None and known[0] is self._strides and known[1] is self._shape:
            return known[2]
        dense = contiguous_strides(self._shape)
        contiguous = self._strides == dense or all(st == c for st, c, n in zip(self._strides, dense, self._shape,
                                                                                strict=True) if n != 1)
        self._contiguity = (self._strides, self._shape, contiguous)
        return contiguous

    @property
    def dtype(self) -> _dtype.dtype:
        return self._storage.dtype

    @property
    def ndim(self) -> builtins.int:
        return len(self._shape)

    def dim(self) -> builtins.int:
        return self.ndim

    def numel(self) -> builtins.int:
        return self.shape.numel()

    def element_size(self) -> builtins.int:
        return self.dtype.itemsize

    def data_ptr(self) -> builtins.int:
        """The address of the tensor's first element (torch's): on a GPU, a device address a CUDA C++ kernel can be
        given; on the cpu, the host address."""
        array = self._storage.array
        base = array.ptr if self.device.type != "cpu" else array.ctypes.data
        return base + self._offset * self.element_size()

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA Array Interface of a GPU tensor (version 3, as torch's): so a RawKernel, numba or CuPy-style
        code takes the tensor's memory as it is. A cpu tensor has none (torch raises too)."""
        if self.device.type == "cpu":
            raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor type: the tensor is on the cpu")
        itemsize = self.element_size()
        return {"shape": tuple(self._shape), "typestr": self.dtype.np.str, "data": (self.data_ptr(), False),
                "version": 3, "strides": None if self.is_contiguous() else tuple(s * itemsize for s in self._strides)}

    def is_pinned(self, device=None) -> bool:
        """Whether this cpu tensor's memory is page-locked host memory (what `pin_memory` copies into: a buffer of
        the runtime's host pool, mapped for the GPU), which the copy engine reads and writes without staging."""
        owner = self._storage.array
        while isinstance(owner, np.ndarray):
            owner = owner.base
        return self.device.type == "cpu" and isinstance(owner, PinnedHostMemory)

    @property
    def is_cuda(self) -> bool:
        return self.device.type != "cpu"

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    # -- autograd -----------------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> "TensorBase":
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if not self.is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        """Keep the gradient of this non-leaf in .grad after backward (a leaf's is kept anyway)."""
        if self.grad_fn is None:
            if not self.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        self._retains_grad = True
        self.grad_fn.retain(self._output_nr, self)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def detach(self) -> "TensorBase":
        return self._view(self._shape, self._strides, self._offset)

    def backward(self, gradient=None, retain_graph: bool = False, create_graph: bool = False) -> None:
        autograd.backward([self], [gradient] if gradient is not None else None, retain_graph, create_graph)

    # -- tensors made like this one (same dtype and device unless told) ------------------------------
    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False) -> "TensorBase":
        out = self._empty(parse_shape(size), dtype or self.dtype, device_of(device) if device else self.device)
        return out.requires_grad_() if requires_grad else out

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> "TensorBase":
        out = self.new_empty(size, dtype=dtype, device=device)
        if out.numel():
            backend.fill(out._data, fill_value)
        return out.requires_grad_() if requires_grad else out

    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False) -> "TensorBase":
        return self.new_full(parse_shape(size), 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False) -> "TensorBase":
        return self.new_full(parse_shape(size), 1, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False) -> "TensorBase":
        host = data._host() if isinstance(data, TensorBase) else data
        out = self._from_numpy(np.array(host, dtype=(dtype or self.dtype).np),
                               device_of(device) if device else self.device)
        return out.requires_grad_() if requires_grad else out

    # -- host values --------------------------------------------------------------------------------
    def _host(self) -> np.ndarray:
        data = self._data
        return np.array(data) if isinstance(data, np.ndarray) else self._contiguous()._data.copy_to_host()

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
            # torch's class name: <NotImplemented> for the node named torch::autograd::NotImplemented
            extras += f", grad_fn=<{self.grad_fn.name().rpartition('::')[2]}>"
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
