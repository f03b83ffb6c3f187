"""Layer 4, DNN: the handle, and what every routine uses to check its arrays and size its launches."""

import numpy as np

from lapis.cuda import DeviceNDArray
from lapis.libs import blas
from lapis.libs.dnn.descriptors import DnnError
from lapis.libs.handle import LibraryHandle

THREADS = 256

ROW_THREADS = 128


def row_threads(cols: int) -> int:
    """Threads of a block that reduces one row of `cols` (softmax, layer norm): the row's length rounded
    up to a power of two, from a warp to ROW_THREADS, so a short row leaves no warp idle."""
    return min(ROW_THREADS, max(32, 1 << (max(1, cols) - 1).bit_length()))


class Handle(LibraryHandle):
    """A cuDNN-style handle: the API, device and stream its routines launch on, a BLAS handle for the
    "gemm" convolutions, and the algorithms its find steps chose."""

    def __init__(self, api, device: int = 0):
        super().__init__(api, device)
        self.blas = blas.create(api, device)          # the "gemm" convolutions multiply with cuBLAS's twin
        self.algorithms: dict[tuple, str] = {}        # what find steps chose, by direction, profile and shape

    def set_stream(self, stream) -> None:
        super().set_stream(stream)
        self.blas.set_stream(stream)                   # the "gemm" convolutions' products follow it


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


def _flat(x, name: str, size: int | None = None, dtype=np.float32) -> DeviceNDArray:
    """x checked (a C-contiguous device array of dtype, of `size` elements if given) and raveled: the
    kernels index every tensor as flat storage."""
    if not isinstance(x, DeviceNDArray):
        raise DnnError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype != dtype:
        raise DnnError(f"{name} must hold {np.dtype(dtype)}, not {x.dtype}")
    if not x.is_c_contiguous():
        raise DnnError(f"{name} must be C-contiguous")
    if size is not None and x.size != size:
        raise DnnError(f"{name} has {x.size} elements, the descriptor says {size}")
    return x.ravel()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(n: int) -> int:
    """Blocks of THREADS for a grid-stride loop over n elements (at most 1024)."""
    return max(1, min(1024, -(-n // THREADS)))


def _rows(x, name: str) -> tuple[int, int]:
    """(rows, columns) of an array read as rows of its last dimension (softmax, layer norm)."""
    if not isinstance(x, DeviceNDArray) or x.ndim < 1:
        raise DnnError(f"{name} must be a device array with at least one dimension")
    cols = x.shape[-1]
    return x.size // cols if cols else 0, cols
