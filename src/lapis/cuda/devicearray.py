"""Layer 3: device arrays (numba.cuda's DeviceNDArray): a shape, strides and dtype over device memory.

The memory comes from the device's coarse-grained pool through the runtime and goes back
when the last array using it is garbage collected. Copies to and from the host go through
the runtime's copy engine path.
"""

import math
import weakref

import numpy as np

from lapis import trace
from lapis.cuda.context import PinnedHostMemory


class Allocation:
    """Device memory shared by the arrays that view it; given back when the last of them goes (see
    `Context.free`), or at `free()` (cudaFree: views left over then point at freed memory, as in
    C). Its context knows it by address while it lives, so a raw device address leads back to it."""
    __slots__ = ("__weakref__", "va", "size", "_context", "_buffer")

    def __init__(self, context, buffer, size: int | None = None):
        self._context, self._buffer = None, buffer         # nothing to give back until it is known
        self.va = buffer.va
        self.size = buffer.size if size is None else size      # what was asked for (the pool's block may be larger)
        context.allocations[self.va] = weakref.ref(self)
        self._context = context

    def __del__(self) -> None:
        # The last view went (on whatever thread dropped it): back into the pool. A __del__, not a weakref.finalize,
        # which cost a tiny op's tensor 1.6 us more.
        context = self._forget()
        if context is not None:
            context.free(self._buffer)

    def free(self) -> None:
        """Free now, after the device's queued work."""
        context = self._forget()
        if context is not None:
            context.free_now(self._buffer)

    def _forget(self):
        """The context, which stops knowing this memory, to give it back to; None once it has been."""
        context, self._context = self._context, None
        if context is not None:
            context.allocations.pop(self._buffer.va, None)
        return context

    @property
    def freed(self) -> bool:
        return self._context is None


class DeviceNDArray:
    def __init__(self, shape, strides, dtype, context, memory: Allocation, ptr: int | None = None,
                 layout: str | None = None):
        self._set(tuple(int(s) for s in shape), tuple(int(s) for s in strides), np.dtype(dtype), context, memory,
                  memory.va if ptr is None else ptr, layout)

    def _set(self, shape: tuple, strides: tuple, dtype: np.dtype, context, memory: Allocation, ptr: int,
             layout: str | None) -> None:
        self.shape, self.strides, self.dtype = shape, strides, dtype
        self.context, self.memory, self.ptr = context, memory, ptr
        self._size = math.prod(shape)              # shape and strides never change: size and layout are fixed
        self._layout = layout                      # "C", "F", "A", or None to work it out when asked
        self._kind = None                          # its type as a kernel argument, kept at its first launch

    @classmethod
    def allocate(cls, context, shape, dtype, order: str = "C") -> "DeviceNDArray":
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        if not all(isinstance(n, int | np.integer) and not isinstance(n, bool) for n in shape):
            raise TypeError(f"an array's shape takes integers, not {shape}")
        if any(n < 0 for n in shape):
            raise ValueError(f"negative dimensions are not allowed: {shape}")      # numpy's words
        shape = tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        strides = contiguous_strides(shape, dtype.itemsize, order)
        nbytes = max(math.prod(int(n) for n in shape) * dtype.itemsize, 1)
        return cls(shape, strides, dtype, context, Allocation(context, context.allocate(nbytes), nbytes),
                   layout=None if len(shape) > 1 else "C")

    @classmethod
    def vector(cls, context, n: int, dtype: np.dtype) -> "DeviceNDArray":
        """`allocate(context, (n,), dtype)` for a dtype already a np.dtype: the framework's storage for every
        result, without the general path's conversions."""
        nbytes = max(n * dtype.itemsize, 1)
        memory = Allocation(context, context.allocate(nbytes), nbytes)
        array = object.__new__(cls)
        array._set((n,), (dtype.itemsize,), dtype, context, memory, memory.va, "C")
        return array

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def device(self):
        return self.context.device

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA Array Interface (version 3, as numba's and CuPy's arrays give it): the device address, shape,
        byte strides (None where C-contiguous) and type, for code that takes any device array (a RawKernel's
        arguments, another library)."""
        return {"shape": self.shape, "strides": None if self.is_c_contiguous() else self.strides,
                "data": (self.ptr, False), "typestr": self.dtype.str, "version": 3}

    def __len__(self) -> int:
        return self.shape[0]

    def _dense(self, order: str) -> bool:
        # as numpy decides: a dimension of size 1 may have any stride (nothing steps along it)
        want = contiguous_strides(self.shape, self.dtype.itemsize, order)
        return self._size <= 1 or all(n == 1 or s == w for n, s, w in zip(self.shape, self.strides, want, strict=True))

    def is_c_contiguous(self) -> bool:
        return self.layout == "C"

    def is_f_contiguous(self) -> bool:
        return self.layout == "F" or self._dense("F")     # both, for one dimension or a single element

    @property
    def layout(self) -> str:
        if self._layout is None:
            self._layout = "C" if self._dense("C") else "F" if self._dense("F") else "A"
        return self._layout

    def _check_contiguous(self, what: str) -> None:
        if not (self.is_c_contiguous() or self.is_f_contiguous()):
            raise ValueError(f"{what} of a non-contiguous device array is not supported")

    def copy_to_host(self, ary: np.ndarray | None = None, stream=0) -> np.ndarray:
        """Copy the array into host memory (into `ary` if given), once the work it must follow is
        done: with the default stream, every stream's; with a stream, that stream's. The copy has
        finished when this returns, with or without a stream."""
        self._check_contiguous("copy_to_host")
        order = "C" if self.is_c_contiguous() else "F"
        # Into a matching `ary` the bytes land in place: straight from the copy engine if it is pinned.
        into = None
        if ary is not None and ary.shape == self.shape and ary.dtype == self.dtype and \
                (ary.flags.c_contiguous if order == "C" else ary.flags.f_contiguous):
            into = ary.reshape(-1, order=order).view(np.uint8)
        with trace.span(3, "memcpy", kind="DtoH", bytes=self.nbytes, src=self.ptr, device=str(self.device)):
            if self.nbytes:
                raw = self.context.copy_to_host(self.ptr, self.nbytes, stream, into)
            else:
                self.context.before_copy(stream)
                raw = np.zeros(0, np.uint8)
        if into is not None:
            return ary
        out = raw.view(self.dtype).reshape(self.shape, order=order)
        if ary is None:
            return out
        ary[...] = out
        return ary

    def copy_to_device(self, ary, stream=0) -> None:
        """Copy a host array into this one, after the stream's earlier work (see `copy_to_host`)."""
        data = np.asarray(ary, dtype=self.dtype)
        if data.shape != self.shape:
            raise ValueError(f"cannot copy an array of shape {data.shape} into a device array of shape {self.shape}")
        self._check_contiguous("copy_to_device")
        order = "C" if self.is_c_contiguous() else "F"
        with trace.span(3, "memcpy", kind="HtoD", bytes=self.nbytes, dst=self.ptr, device=str(self.device)):
            if self.nbytes:
                self.context.copy_to_device(self.ptr, np.asarray(data, order=order).ravel(order=order), stream)

    def __setitem__(self, index, value) -> None:
        """`d[...] = value`: a copy from the host into the view `d[index]` (numba's DeviceNDArray.__setitem__),
        value broadcast to the view's shape as numpy's assignment does (a number fills it)."""
        key = index if isinstance(index, tuple) else (index,)
        if len(key) <= self.ndim and all(isinstance(k, int | np.integer | slice) for k in key):
            # an integer i is the one-long slice at i (counted from the end when negative): a view to copy into
            key = tuple(slice(k % self.shape[axis], k % self.shape[axis] + 1)
                        if isinstance(k, int | np.integer) and -self.shape[axis] <= k < self.shape[axis] else k
                        for axis, k in enumerate(key))
        view = self[key]
        if not isinstance(view, DeviceNDArray):
            raise IndexError(f"index {index} is out of bounds for a device array of shape {self.shape}")
        view.copy_to_device(np.broadcast_to(np.asarray(value, dtype=self.dtype), view.shape))

    def __getitem__(self, index):
        """A view, as numpy's basic indexing makes one: integers drop a dimension, slices keep it
        with a new start, stop and step. No data moves; the view shares the allocation. An integer
        for every dimension gives the element itself, copied to the host as a numpy scalar (numba's
        `d[i]`, which waits for the work before it as any copy does)."""
        items = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in items):
            at = items.index(Ellipsis)
            items = items[:at] + (slice(None),) * (self.ndim - len(items) + 1) + items[at + 1:]
        if len(items) > self.ndim:
            raise IndexError(f"too many indices for a {self.ndim}-d device array")
        items = items + (slice(None),) * (self.ndim - len(items))
        ptr, shape, strides = self.ptr, [], []
        for item, size, stride in zip(items, self.shape, self.strides, strict=True):
            if isinstance(item, slice):
                start, stop, step = item.indices(size)
                shape.append(len(range(start, stop, step)))
                strides.append(stride * step)
                ptr += start * stride
            elif isinstance(item, int | np.integer):
                i = int(item) + (size if item < 0 else 0)
                if not 0 <= i < size:
                    raise IndexError(f"index {int(item)} is out of bounds for a dimension of size {size}")
                ptr += i * stride
            else:
                raise IndexError(f"device arrays take integers and slices, not {type(item).__name__} "
                                 "(fancy indexing would copy; do it on the host)")
        view = self._view(tuple(shape), tuple(strides), self.dtype, ptr)
        return view.copy_to_host()[()] if not shape else view

    def reshape(self, *newshape, order: str = "C") -> "DeviceNDArray":
        """The same elements in a new shape, read in `order` (numba's DeviceNDArray.reshape): a view
        that shares the memory. One dimension may be -1. Without copying, that is possible when the
        shape is unchanged or the array is contiguous in that order; otherwise it raises
        NotImplementedError, as numba does (numpy would copy)."""
        shape = tuple(int(s) for s in (newshape[0] if len(newshape) == 1 and isinstance(newshape[0], tuple | list)
                                       else newshape))
        if shape == self.shape:
            return self._view(self.shape, self.strides, self.dtype)
        shape = _known_shape(shape, self._size)
        order = self._order(order)
        if not self._dense(order):
            raise NotImplementedError("operation requires copying")
        return self._view(shape, contiguous_strides(shape, self.dtype.itemsize, order), self.dtype)

    def ravel(self, order: str = "C") -> "DeviceNDArray":
        """The elements as a 1-D view, read in `order` (numba's DeviceNDArray.ravel); NotImplementedError
        for an array not contiguous in that order, as numba (numpy would copy)."""
        order = self._order(order)
        if not (self.layout == "C" if order == "C" else self._dense(order)):
            raise NotImplementedError("operation requires copying")
        return self._view((self._size,), (self.dtype.itemsize,), self.dtype, layout="C")

    def transpose(self, axes=None) -> "DeviceNDArray":
        """The array with its dimensions permuted (reversed without `axes`), a view on the same memory
        (numba's DeviceNDArray.transpose and .T)."""
        axes = tuple(range(self.ndim))[::-1] if axes is None else tuple(int(a) % max(self.ndim, 1) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of the array's {self.ndim} dimensions")
        return self._view(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes), self.dtype)

    @property
    def T(self) -> "DeviceNDArray":
        return self.transpose()

    def view(self, dtype) -> "DeviceNDArray":
        """The same bytes read as another dtype (numba's DeviceNDArray.view): the last dimension grows
        or shrinks by the ratio of the item sizes, which needs a C-contiguous array whose last
        dimension's bytes the new item size divides."""
        dtype = np.dtype(dtype)
        if dtype.itemsize == self.dtype.itemsize:
            return self._view(self.shape, self.strides, dtype)
        if not self.is_c_contiguous() or not self.ndim:
            raise ValueError("array must be C-contiguous (and not 0-d) when changing itemsize")
        last, rest = divmod(self.shape[-1] * self.dtype.itemsize, dtype.itemsize)
        if rest:
            raise ValueError("new dtype's itemsize must evenly divide the last dimension")
        # numpy's strides: the last dimension steps by the new item size (numba keeps the old strides)
        return self._view(self.shape[:-1] + (last,), self.strides[:-1] + (dtype.itemsize,), dtype)

    def _order(self, order: str) -> str:
        """'C' or 'F' for an order argument; 'A' is F for an array F-contiguous and not C, as numpy reads it."""
        if order not in ("C", "F", "A"):
            raise ValueError("order not C|F|A")
        return ("F" if self.layout == "F" else "C") if order == "A" else order

    def _view(self, shape: tuple, strides: tuple, dtype, ptr: int | None = None,
              layout: str | None = None) -> "DeviceNDArray":
        """Another array over this one's memory (from this one's first element unless `ptr` says;
        `layout` when the caller knows it)."""
        view = object.__new__(DeviceNDArray)       # without the constructor's conversions: these are ints already
        view._set(tuple(shape), tuple(strides), np.dtype(dtype), self.context, self.memory,
                  self.ptr if ptr is None else ptr, layout)
        return view

    def __repr__(self) -> str:
        return f"<DeviceNDArray shape={self.shape} dtype={self.dtype} on {self.device} at {self.ptr:#x}>"

    def __array__(self, dtype=None, copy=None):
        """np.asarray(d): a copy on the host (numba's; it waits for the work before it, as copy_to_host does)."""
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype)

    @property
    def flags(self) -> dict:
        """numpy's contiguity flags (numba's DeviceNDArray.flags)."""
        return {"C_CONTIGUOUS": self.is_c_contiguous(), "F_CONTIGUOUS": self.is_f_contiguous(), "OWNDATA": False,
                "WRITEABLE": True, "ALIGNED": True}


def _known_shape(shape: tuple, size: int) -> tuple:
    """A reshape's shape with its -1 (if any) worked out from the size, as numpy does."""
    unknown = [i for i, s in enumerate(shape) if s < 0]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    known = math.prod(s for s in shape if s >= 0)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
        shape = shape[:unknown[0]] + (size // known,) + shape[unknown[0] + 1:]
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    return shape


def contiguous_strides(shape: tuple, itemsize: int, order: str) -> tuple:
    strides, acc = [], itemsize
    dims = list(shape) if order == "F" else list(reversed(shape))
    for s in dims:
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(strides) if order == "F" else tuple(reversed(strides))


class MappedNDArray(np.ndarray):
    """numba's mapped array (`cuda.mapped_array`): a numpy array in pinned host memory that the GPU reads and
    writes where it is, over PCIe. A kernel given one (or a view of one) uses it in place, with no copy and no
    wait; the host sees the kernel's writes once it has waited for the kernel (`cuda.synchronize()`)."""

    def device_view(self) -> DeviceNDArray:
        """The same memory as a device array: the GPU's address of this view's first element, its shape and
        strides."""
        owner = self
        while isinstance(owner, np.ndarray):
            owner = owner.base
        if not isinstance(owner, PinnedHostMemory):
            raise ValueError("this array is not in mapped memory (make it with cuda.mapped_array)")
        offset = self.__array_interface__["data"][0] - owner.ptr
        return DeviceNDArray(self.shape, self.strides, self.dtype, owner.context, owner, owner.va + offset)
