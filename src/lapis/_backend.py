"""Layer 5: the one thin device interface every framework op goes through (needle's idea).

An array here is a numpy ndarray on `cpu` or a Layer 3 DeviceNDArray on a GPU, each a strided
view of its tensor's storage. Every function takes its output array and writes into it, so the
framework decides shapes, dtypes and allocation; on a GPU each call is one or a few kernel
launches from `lapis.libs` (asynchronous, like ATen's), on `cpu` numpy does the work.

    unary(op, x, out)          neg abs exp log sqrt rsqrt tanh sigmoid sin cos relu copy
    binary(op, a, b, out)      add sub mul div pow maximum minimum eq ne lt le gt ge (broadcasting)
    where(cond, a, b, out)
    reduce(op, x, dim, out)    sum prod max min argmax argmin along one dimension (x contiguous)
    fill(out, value)
    matmul(a, b, out)          2-D, contiguous
"""

import numpy as np

from lapis import cuda, hip
from lapis.cuda import DeviceNDArray
from lapis.libs import blas, kernels

_API = {"cuda": cuda, "hip": hip}
_blas_handles: dict = {}

_UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
          "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
          "sin": np.sin, "cos": np.cos, "relu": lambda v: np.maximum(v, 0), "copy": lambda v: v}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
           "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
           "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}


def on_gpu(x) -> bool:
    return isinstance(x, DeviceNDArray)


def _api(x):
    return _API[x.context.device.api_name]


def unary(op: str, x, out) -> None:
    if on_gpu(out):
        kernels.unary(_api(out), op, x, out)
    else:
        with np.errstate(all="ignore"):
            out[...] = _UNARY[op](x)


def binary(op: str, a, b, out) -> None:
    if on_gpu(out):
        kernels.binary(_api(out), op, a, b, out)
    else:
        with np.errstate(all="ignore"):
            out[...] = _BINARY[op](a, b)


def where(cond, a, b, out) -> None:
    if on_gpu(out):
        kernels.where(_api(out), cond, a, b, out)
    else:
        out[...] = np.where(cond, a, b)


def reduce(op: str, x, dim: int, out) -> None:
    if on_gpu(out):
        kernels.reduce(_api(out), op, x, dim, out)
    else:
        out[...] = _REDUCE[op](x, axis=dim)


def fill(out, value) -> None:
    if on_gpu(out):
        kernels.fill(_api(out), out, value)
    else:
        out[...] = value


def matmul(a, b, out) -> None:
    """out (m, n) = a (m, k) @ b (k, n), all C-contiguous."""
    if not on_gpu(out):
        np.matmul(a, b, out=out)
        return
    (m, k), n = a.shape, b.shape[1]
    handle = _blas_handles.get(out.context)
    if handle is None:
        api = _api(out)
        handle = _blas_handles[out.context] = blas.create(api, out.context.device.id)
    # Row-major C (m x n) = A B is column-major C^T = B^T A^T: BLAS sees (n x m) = (n x k)(k x m).
    # float32 goes to sgemm as PyTorch's does to cublasSgemm; half types to gemm (cublasGemmEx).
    routine = blas.sgemm if out.dtype == np.float32 else blas.gemm
    routine(handle, "N", "N", n, m, k, 1.0, b, max(n, 1), a, max(k, 1), 0.0, out, max(n, 1))
