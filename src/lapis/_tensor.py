"""Layer 5: `Tensor`, its creation functions and `matmul`, with PyTorch's names and semantics.

A tensor on `cpu` holds a numpy array. A tensor on `cuda`/`hip` holds a device array
(Layer 3) and every operation on it runs as kernels on the simulated GPU: `matmul` calls
the BLAS library (Layer 4) the way PyTorch calls cuBLAS, `zeros` a fill kernel. Moving a
tensor between host and device is an explicit copy (`.to()`, `.cpu()`, `.cuda()`).

Simplification for now: `randn` and `tensor(...)` on a GPU create the values on the host
and copy them over (PyTorch generates random numbers on the device).
"""

import numpy as np

from lapis import _dtype, trace
from lapis._device import device
from lapis.cuda import DeviceNDArray
from lapis.libs import blas, kernels

_generator = np.random.default_rng(0)
_blas_handles: dict = {}


class Size(tuple):
    """The shape of a tensor: a tuple that prints as lapis.Size([2, 3])."""

    def __repr__(self) -> str:
        return f"lapis.Size({list(self)})"

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))


def manual_seed(seed: int) -> None:
    global _generator
    _generator = np.random.default_rng(seed)


def _device_of(d) -> device:
    if d is None:
        return device("cpu")
    return (d if isinstance(d, device) else device(d)).normalized()


def _shape(size: tuple) -> tuple:
    if len(size) == 1 and isinstance(size[0], tuple | list | Size):
        size = tuple(size[0])
    if not all(isinstance(s, int | np.integer) and s >= 0 for s in size):
        raise TypeError(f"size must be non-negative integers, got {size}")
    return tuple(int(s) for s in size)


class Tensor:
    def __init__(self, data, dev: device):
        self._data = data            # numpy.ndarray on cpu, DeviceNDArray on a GPU
        self.device = dev

    # -- construction helpers -------------------------------------------------------------------
    @classmethod
    def _from_numpy(cls, array: np.ndarray, dev: device) -> "Tensor":
        if dev.type == "cpu":
            return cls(array, dev)
        out = cls._empty(array.shape, _dtype.from_numpy(array.dtype), dev)
        out._data.copy_to_device(np.ascontiguousarray(array))
        return out

    @classmethod
    def _empty(cls, shape: tuple, dt: _dtype.dtype, dev: device) -> "Tensor":
        if dev.type == "cpu":
            return cls(np.empty(shape, dt.np), dev)
        context = dev.api.current_context(dev.index)      # this device's, without changing the current one
        return cls(DeviceNDArray.allocate(context, shape, dt.np), dev)

    # -- properties -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    @property
    def dtype(self) -> _dtype.dtype:
        return _dtype.from_numpy(self._data.dtype)

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self.shape.numel()

    @property
    def is_cuda(self) -> bool:
        return self.device.type != "cpu"

    # -- moving -----------------------------------------------------------------------------------
    def to(self, target=None, dtype: _dtype.dtype | None = None) -> "Tensor":
        if isinstance(target, _dtype.dtype):
            target, dtype = None, target
        dev = self.device if target is None else _device_of(target)
        cast = dtype is not None and dtype != self.dtype
        if cast and self.device.type != "cpu" and dev.type != "cpu":
            raise NotImplementedError("changing the dtype of a tensor on a GPU is not supported yet; "
                                      "convert on the cpu")
        out = self
        if cast and self.device.type == "cpu":           # cast where the data is, on the host
            out = Tensor(self._data.astype(dtype.np), self.device)
        if dev != out.device:
            with trace.span(5, "to", src=str(out.device), dst=str(dev), shape=list(out.shape),
                            dtype=str(out.dtype)):
                out = Tensor._from_numpy(out._host(), dev)
        if cast and out.dtype != dtype:                  # a GPU tensor arrived on the host: cast it there
            out = Tensor(out._data.astype(dtype.np), out.device)
        return out

    def _host(self) -> np.ndarray:
        return self._data if self.device.type == "cpu" else self._data.copy_to_host()

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "Tensor":
        return self.to(device("cuda", index))

    def numpy(self) -> np.ndarray:
        if self.device.type != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy "
                            "the tensor to host memory first.")
        return self._data

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self._host(), separator=", ", prefix="tensor(")
        extras = "" if self.device.type == "cpu" else f", device='{self.device}'"
        if self.dtype not in (_dtype.float32, _dtype.int64, _dtype.bool_):
            extras += f", dtype={self.dtype!r}"
        return f"tensor({body}{extras})"

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __matmul__(self, other: "Tensor") -> "Tensor":
        return matmul(self, other)

    def matmul(self, other: "Tensor") -> "Tensor":
        return matmul(self, other)


# -- creation ------------------------------------------------------------------------------------
def _default_float(dtype) -> _dtype.dtype:
    return _dtype.float32 if dtype is None else dtype


def randn(*size, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    dt = _default_float(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(f"\"normal_kernel\" not implemented for '{dt.name}'")
    shape, dev = _shape(size), _device_of(device)
    with trace.span(5, "randn", shape=list(shape), dtype=str(dt), device=str(dev)):
        return Tensor._from_numpy(_generator.standard_normal(shape, dtype=np.float64).astype(dt.np), dev)


def rand(*size, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    dt = _default_float(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(f"\"check_uniform_bounds\" not implemented for '{dt.name}'")
    shape, dev = _shape(size), _device_of(device)
    return Tensor._from_numpy(_generator.random(shape).astype(dt.np), dev)


def full(size, fill_value, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    if dtype is None:
        dtype = _dtype.bool_ if isinstance(fill_value, bool) else \
            _dtype.int64 if isinstance(fill_value, int) else _dtype.float32
    shape, dev = _shape((size,) if isinstance(size, int) else tuple(size)), _device_of(device)
    with trace.span(5, "full", shape=list(shape), dtype=str(dtype), device=str(dev), value=fill_value):
        if dev.type == "cpu":
            return Tensor(np.full(shape, fill_value, dtype.np), dev)
        out = Tensor._empty(shape, dtype, dev)
        kernels.fill(dev.api, out._data, fill_value)
        return out


def zeros(*size, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    return full(_shape(size), 0, dtype=_default_float(dtype), device=device)


def ones(*size, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    return full(_shape(size), 1, dtype=_default_float(dtype), device=device)


def _infer(data) -> _dtype.dtype:
    flat = np.asarray(data)
    if flat.dtype == np.bool_:
        return _dtype.bool_
    if flat.dtype.kind in "iu":
        return _dtype.int64
    if flat.dtype.kind == "f":
        return _dtype.float32
    raise TypeError(f"cannot make a tensor from {type(data).__name__} data of dtype {flat.dtype}")


def tensor(data, dtype: _dtype.dtype | None = None, device=None) -> Tensor:
    if isinstance(data, Tensor):       # a copy, on the same device unless told otherwise (as torch does)
        device = data.device if device is None else device
        data = data._host()
    if isinstance(data, np.ndarray):
        dt = dtype or _dtype.from_numpy(data.dtype)
    else:
        dt = dtype or _infer(data)
    return Tensor._from_numpy(np.array(data, dtype=dt.np), _device_of(device))


def from_numpy(array: np.ndarray) -> Tensor:
    _dtype.from_numpy(array.dtype)
    return Tensor(array, device("cpu"))


# -- matmul ----------------------------------------------------------------------------------------
def _blas(dev: device) -> blas.Handle:
    handle = _blas_handles.get(dev)
    if handle is None:
        handle = _blas_handles[dev] = blas.create(dev.api, dev.index)
    return handle


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with torch.matmul's rules for 1-D and 2-D operands."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul(): arguments must be Tensors, not {type(a).__name__} and {type(b).__name__}")
    if a.device != b.device:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{a.device} and {b.device}!")
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype.name} != {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    if a.ndim > 2 or b.ndim > 2:
        raise NotImplementedError("batched matmul (operands with more than 2 dimensions) is not supported yet")
    m, k = (1, a.shape[0]) if a.ndim == 1 else a.shape
    k2, n = (b.shape[0], 1) if b.ndim == 1 else b.shape
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    out_shape = tuple(([m] if a.ndim == 2 else []) + ([n] if b.ndim == 2 else []))
    with trace.span(5, "matmul", a_shape=list(a.shape), b_shape=list(b.shape), out_shape=list(out_shape),
                    dtype=str(a.dtype), device=str(a.device)):
        if a.device.type == "cpu":
            return Tensor(np.matmul(a._data, b._data), a.device)
        if a.dtype != _dtype.float32:
            raise NotImplementedError(f"matmul on {a.device} supports float32 for now, not {a.dtype.name}")
        c = Tensor._empty(out_shape, a.dtype, a.device)
        # Row-major C (m x n) = A B is column-major C^T = B^T A^T: cuBLAS sees (n x m) = (n x k)(k x m).
        blas.sgemm(_blas(a.device), "N", "N", n, m, k, 1.0, b._data, max(n, 1), a._data, max(k, 1), 0.0,
                   c._data, max(n, 1))
        return c

