"""Layer 3: numba's `@vectorize([...], target='cuda')` (also `cuda.vectorize`): a function of numbers made a ufunc
whose elements are computed by a kernel, one thread per element.

    @cuda.vectorize(["float32(float32, float32)", "float64(float64, float64)"])
    def rel_diff(x, y):
        return 2 * (x - y) / (x + y)

    rel_diff(a, b)          # numpy arrays in, a numpy array out; device arrays in, a device array out

Each signature compiles the function (as a device function) into an elementwise kernel for its argument types; a
call takes the first signature whose argument types the inputs have (numbers convert, as numba's), broadcasts the
inputs against each other as numpy does (on the host; device arrays must already have one shape), and launches
the kernel over the elements. With host inputs the result is copied back, as numba's CUDA ufuncs do; with a device
array among them it stays on the device. `out=` takes an array to write into.
"""

import numpy as np

from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.compiler.intrinsics import grid
from lapis.cuda.devicearray import DeviceNDArray
from lapis.cuda.signatures import function_signature

api = None              # the programming interface that compiles and launches the kernels (lapis.cuda sets it)
THREADS = 256


def _elementwise_kernel(fn: DeviceFunction, arity: int):
    """The kernel out[i] = fn(x0[i], ...) for `arity` inputs, all flat arrays of n elements."""
    if arity == 1:
        def ufunc_kernel(n, x0, out):
            i = grid(1)
            if i < n:
                out[i] = fn(x0[i])
    elif arity == 2:
        def ufunc_kernel(n, x0, x1, out):
            i = grid(1)
            if i < n:
                out[i] = fn(x0[i], x1[i])
    elif arity == 3:
        def ufunc_kernel(n, x0, x1, x2, out):
            i = grid(1)
            if i < n:
                out[i] = fn(x0[i], x1[i], x2[i])
    elif arity == 4:
        def ufunc_kernel(n, x0, x1, x2, x3, out):
            i = grid(1)
            if i < n:
                out[i] = fn(x0[i], x1[i], x2[i], x3[i])
    else:
        raise TypeError(f"vectorize takes functions of 1 to 4 numbers, not {arity}")
    return ufunc_kernel


class CudaUFunc:
    """What numba's @vectorize(target='cuda') returns: call it on arrays (or numbers) of a signature's types."""

    def __init__(self, pyfunc, signatures: list):
        if not signatures:
            raise TypeError("vectorize(target='cuda') needs its signatures, as numba's: "
                            "@vectorize(['float32(float32, float32)'], target='cuda')")
        self.py_func, self.__name__, self.__doc__ = pyfunc, pyfunc.__name__, pyfunc.__doc__
        self.signatures = [function_signature(s) for s in signatures]
        arity = pyfunc.__code__.co_argcount
        for returns, args in self.signatures:
            if not isinstance(returns, T.Scalar) or len(args) != arity or \
                    not all(isinstance(a, T.Scalar) for a in args):
                raise TypeError(f"vectorize signature of {self.__name__!r}: a number type from {arity} number types, "
                                f"as 'float32(float32, float32)'")
        self.kernel = api.jit(_elementwise_kernel(DeviceFunction(pyfunc), arity))

    def __repr__(self) -> str:
        return f"<lapis CUDA ufunc {self.__name__}>"

    def __call__(self, *inputs, out=None, stream=0):
        if len(inputs) != len(self.signatures[0][1]):
            raise TypeError(f"{self.__name__} takes {len(self.signatures[0][1])} inputs, got {len(inputs)}")
        on_device = any(isinstance(x, DeviceNDArray) for x in inputs) or isinstance(out, DeviceNDArray)
        dtypes = [x.dtype if isinstance(x, DeviceNDArray | np.ndarray) else np.asarray(x).dtype for x in inputs]
        returns, args = self._signature(dtypes)
        shape = self._shape(inputs)
        flat = [self._flat(x, t.dtype, shape, stream) for x, t in zip(inputs, args, strict=True)]
        n = int(np.prod(shape))
        result = out if isinstance(out, DeviceNDArray) else api.device_array(shape, returns.dtype, stream=stream)
        if n:
            self.kernel[-(-n // THREADS), THREADS, stream](np.int64(n), *flat, result.reshape(n))
        if on_device:
            return result
        host = result.copy_to_host(stream=stream)
        if out is not None:
            out[...] = host
            return out
        return host

    def _signature(self, dtypes: list) -> tuple:
        """The first signature whose argument types the inputs have; else the first they convert to safely."""
        for returns, args in self.signatures:
            if all(np.dtype(d) == a.dtype for d, a in zip(dtypes, args, strict=True)):
                return returns, args
        for returns, args in self.signatures:
            if all(np.can_cast(d, a.dtype, "same_kind") for d, a in zip(dtypes, args, strict=True)):
                return returns, args
        raise TypeError(f"{self.__name__}: no signature takes inputs of {[str(np.dtype(d)) for d in dtypes]} "
                        f"(it has {', '.join(str(T.Signature(r, a)) for r, a in self.signatures)})")

    def _shape(self, inputs) -> tuple:
        device = {tuple(x.shape) for x in inputs if isinstance(x, DeviceNDArray)}
        if len(device) > 1:
            raise ValueError(f"{self.__name__}: device arrays of different shapes {sorted(device)} (broadcasting "
                             "happens on the host: pass numpy arrays, or device arrays of one shape)")
        host = [np.shape(x) for x in inputs if not isinstance(x, DeviceNDArray)]
        return np.broadcast_shapes(*host, *device)

    def _flat(self, x, dtype: np.dtype, shape: tuple, stream) -> DeviceNDArray:
        """An input as a flat device array of `shape`'s elements in `dtype` (host inputs broadcast and copied)."""
        if isinstance(x, DeviceNDArray):
            if x.dtype != dtype:
                raise TypeError(f"{self.__name__}: a device array of {x.dtype} where the signature takes {dtype}")
            return x.ravel()
        host = np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype), shape)).reshape(-1)
        return api.to_device(host, stream=stream)


def vectorize(signatures=None, target: str = "cuda", **options):
    """numba's @vectorize(signatures, target='cuda') (also @cuda.vectorize(signatures)): a CudaUFunc. Only the
    'cuda' target is here (lapis has no CPU ufunc compiler)."""
    if target != "cuda":
        raise NotImplementedError(f"vectorize(target={target!r}): lapis compiles ufuncs for its simulated GPU only "
                                  "(target='cuda')")
    if callable(signatures):
        raise TypeError("vectorize(target='cuda') needs its signatures, as numba's: "
                        "@vectorize(['float32(float32, float32)'], target='cuda')")
    signatures = [signatures] if isinstance(signatures, str | T.Signature) else list(signatures or ())

    def wrap(fn) -> CudaUFunc:
        return CudaUFunc(fn, signatures)
    return wrap
