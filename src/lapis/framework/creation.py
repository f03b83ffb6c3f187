"""Layer 5: creating tensors (torch.tensor, zeros, arange, randn, ...)."""

import builtins
import math

import numpy as np

from lapis import trace
from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.generator import default_generator
from lapis.framework.tensor import Tensor
from lapis.framework.tensor_base import Size, Storage, device_of, parse_shape


def _float(dtype) -> _dtype.dtype:
    return _dtype.get_default_dtype() if dtype is None else dtype


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_() if requires_grad else t


# A new tensor of at least this many elements asks whether its memory holds zeros already before a zero fill (below
# it, the fill costs less than asking); memory new from the driver does, and left unwritten it costs the host nothing.
FRESH_ZEROS_ELEMENTS = 1 << 18


def full(size, fill_value, dtype: _dtype.dtype | None = None, device=None, requires_grad: bool = False) -> Tensor:
    dtype = dtype or _dtype.scalar_dtype(fill_value)
    shape, dev = parse_shape((size,) if isinstance(size, builtins.int) else tuple(size)), device_of(device)
    with trace.lazy_span(5, "full", lambda: dict(shape=list(shape), dtype=str(dtype), device=str(dev),
                                                 value=fill_value)):
        out = Tensor._empty(shape, dtype, dev)
        n = out.numel()
        if n and not (n >= FRESH_ZEROS_ELEMENTS and _zero_bytes(fill_value) and backend.holds_zeros(out._data)):
            backend.fill(out._data, fill_value)
    return _finish(out, requires_grad)


def _zero_bytes(value) -> bool:
    """Whether `value` is stored as zero bytes in every dtype: 0, False or +0.0 (not -0.0)."""
    return (isinstance(value, builtins.int | builtins.float | np.integer | np.floating | np.bool_) and value == 0
            and math.copysign(1.0, value) > 0)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(parse_shape(size), 0, dtype=_float(dtype), device=device, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(parse_shape(size), 1, dtype=_float(dtype), device=device, requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _finish(Tensor._empty(parse_shape(size), _float(dtype), device_of(device)), requires_grad)


def _like(fn, t: Tensor, dtype, device, requires_grad, *args):
    return fn(t.shape, *args, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return _like(full, t, dtype, device, requires_grad, 0)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return _like(full, t, dtype, device, requires_grad, 1)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return _like(full, t, dtype, device, requires_grad, fill_value)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def _infer(data) -> _dtype.dtype:
    flat = np.asarray(data)
    if flat.dtype == np.bool_:
        return _dtype.bool_
    if flat.dtype.kind in "iu":
        return _dtype.int64
    if flat.dtype.kind == "f":
        return _dtype.get_default_dtype()
    raise TypeError(f"cannot make a tensor from {type(data).__name__} data of dtype {flat.dtype}")


def tensor(data, dtype: _dtype.dtype | None = None, device=None, requires_grad: bool = False) -> Tensor:
    if isinstance(data, Tensor):       # a copy, on the same device unless told otherwise (as torch does)
        device = data.device if device is None else device
        dtype = dtype or data.dtype
        data = data._host()
    elif isinstance(data, list | tuple) and any(isinstance(x, Tensor) for x in np.ravel(np.array(data, object))):
        data = [x.item() if isinstance(x, Tensor) else x for x in data]
    dt = dtype or (_dtype.from_numpy(data.dtype) if isinstance(data, np.ndarray) else _infer(data))
    return _finish(Tensor._from_numpy(np.array(data, dtype=dt.np), device_of(device)), requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor):
        return data.to(device or data.device, dtype or data.dtype)
    if not isinstance(data, np.ndarray) and hasattr(data, "__cuda_array_interface__"):
        shared = _from_cuda_array(data)
        return shared.to(device or shared.device, dtype or shared.dtype)
    if isinstance(data, np.ndarray) and device in (None, "cpu") and dtype in (None, _dtype.from_numpy(data.dtype)):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A cpu tensor sharing the array's memory (the array must be contiguous, as a view of a storage)."""
    _dtype.from_numpy(array.dtype)
    if not array.flags.c_contiguous:
        raise ValueError("from_numpy takes a C-contiguous array here (lapis tensors view flat storage)")
    return Tensor._from_numpy(array, device_of("cpu"))


def from_dlpack(ext) -> Tensor:
    """torch.from_dlpack: a cpu tensor sharing the memory of anything that exports DLPack (numpy arrays,
    torch cpu tensors), strides included. GPU memory cannot be imported: it belongs to another device."""
    if isinstance(ext, Tensor):
        return ext
    if hasattr(ext, "__dlpack_device__") and ext.__dlpack_device__()[0] != 1:      # 1: kDLCPU
        raise BufferError(f"from_dlpack imports cpu memory only; {type(ext).__name__} lives on DLPack device "
                          f"{ext.__dlpack_device__()}")
    array = np.from_dlpack(ext)
    _dtype.from_numpy(array.dtype)
    strides, span = _element_strides(array.shape, array.strides, array.dtype.itemsize, "from_dlpack")
    flat = np.lib.stride_tricks.as_strided(array, (span,), (array.dtype.itemsize,))   # the storage under them all
    return Tensor(Storage(flat), array.shape, strides, 0, device_of("cpu"))


def _from_cuda_array(data) -> Tensor:
    """A GPU tensor sharing the memory another library's array describes by its CUDA Array Interface (as torch's
    as_tensor takes a numba or CuPy array), on the device that memory belongs to."""
    refusals = []
    for kind in ("cuda", "hip"):
        try:
            view = device_of(kind).api.as_cuda_array(data)
            break
        except ValueError as e:           # not this API's memory (or past the end of its allocation)
            refusals.append(e)
    else:
        raise TypeError(f"as_tensor: the {type(data).__name__}'s CUDA Array Interface describes no lapis device "
                        f"memory ({'; '.join(map(str, refusals))})")
    _dtype.from_numpy(view.dtype)
    strides, span = _element_strides(view.shape, view.strides, view.dtype.itemsize, "as_tensor")
    flat = type(view)((span,), (view.dtype.itemsize,), view.dtype, view.context, view.memory, view.ptr)
    return Tensor(Storage(flat), view.shape, strides, 0, device_of(f"{kind}:{view.context.device.id}"))


def _element_strides(shape: tuple, byte_strides: tuple, itemsize: int, what: str) -> tuple[tuple, int]:
    """Byte strides as element strides (torch's: whole, non-negative elements), and the number of elements from
    the first to the last one they reach, the storage a tensor of `shape` needs under them."""
    if any(st < 0 or st % itemsize for st in byte_strides):
        raise BufferError(f"{what} needs non-negative whole-element strides, got {byte_strides}")
    strides = tuple(st // itemsize for st in byte_strides)
    span = 1 + builtins.sum((n - 1) * st for n, st in zip(shape, strides, strict=True)) if math.prod(shape) else 1
    return strides, span


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = _dtype.int64 if all(isinstance(v, builtins.int) for v in (start, end, step)) else \
            _dtype.get_default_dtype()
    dev = device_of(device)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if dtype.is_floating_point:         # numpy's values (computed in float64, rounded once) on every device
        length = (builtins.float(end) - builtins.float(start)) / builtins.float(step)    # numpy's count, exactly
        if not math.isfinite(length):
            raise RuntimeError(f"unsupported range: {start} -> {end}")
        shape = (builtins.max(0, math.ceil(length)),)
        values = _made(shape, dtype, dev, lambda: np.arange(start, end, step, dtype=np.float64))
        return _finish(values, requires_grad)
    # integers are made where they live (on a GPU by a kernel, as torch does: an upload would wait for the work
    # before it)
    span = range(start, end, step)          # its len() stops at 2^63: the count, computed
    out = Tensor._empty((builtins.max(0, -((span.start - span.stop) // span.step)),), dtype, dev)
    if out.numel():
        backend.arange(out._data, start, step)
    return _finish(out, requires_grad)


def linspace(start, end, steps: builtins.int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    values = _made(parse_shape((steps,)), _float(dtype), device_of(device),
                   lambda: np.linspace(start, end, steps, dtype=np.float64))
    return _finish(values, requires_grad)


def eye(n: builtins.int, m: builtins.int | None = None, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = _float(dtype)
    values = _made(parse_shape((n, n if m is None else m)), dt, device_of(device), lambda: np.eye(n, m, dtype=dt.np))
    return _finish(values, requires_grad)


def _made(shape: tuple, dt: _dtype.dtype, dev, make) -> Tensor:
    """A tensor of `shape` holding make()'s values (a host array of that many), cast to `dt`. The tensor is
    allocated first, so one too big for its device is refused before make() touches host memory."""
    out = Tensor._empty(shape, dt, dev)
    if out.numel():
        _write(out, 0, make().reshape(-1))
    return out


def _write(t: Tensor, start: int, values: np.ndarray) -> None:
    """Host values into a new tensor's flat storage from element `start` on, cast to its dtype."""
    piece = t._storage.array[start:start + values.size]
    if t.device.type == "cpu":
        piece[...] = values
    else:
        piece.copy_to_device(values.astype(piece.dtype, copy=False))


RANDOM_CHUNK = 1 << 22       # values a random tensor is drawn and written in at a time


def _random(shape: tuple, dt, dev, draw) -> Tensor:
    """A tensor of `draw(n)`'s values (the generator's stream, so every device gets the same numbers). The tensor
    is allocated first (too big for its device: refused before any host memory is touched), then filled
    RANDOM_CHUNK values at a time, so the host never holds more than a chunk besides it."""
    out = Tensor._empty(shape, dt, dev)
    n = out.numel()
    for start in range(0, n, RANDOM_CHUNK):
        _write(out, start, draw(min(RANDOM_CHUNK, n - start)))
    return out


def randn(*size, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    dt = _float(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(f"\"normal_kernel\" not implemented for '{dt.name}'")
    shape, dev = parse_shape(size), device_of(device)
    rng = generator or default_generator()
    with trace.lazy_span(5, "randn", lambda: dict(shape=list(shape), dtype=str(dt), device=str(dev))):
        return _finish(_random(shape, dt, dev, rng.standard_normal), requires_grad)


def rand(*size, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    dt = _float(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(f"\"check_uniform_bounds\" not implemented for '{dt.name}'")
    rng = generator or default_generator()
    return _finish(_random(parse_shape(size), dt, device_of(device), rng.random), requires_grad)


def randint(*args, size=None, low=None, high=None, dtype=None, device=None, generator=None,
            requires_grad: bool = False) -> Tensor:
    """Integers drawn uniformly from [low, high), torch's two forms: randint(high, size) and
    randint(low, high, size), the size a tuple (also as keywords)."""
    args = list(args)
    if size is None and args and isinstance(args[-1], tuple | list | Size):
        size = args.pop()
    if size is None:
        raise TypeError("randint() missing 1 required positional arguments: \"size\"")
    if len(args) > 2:
        raise TypeError(f"randint() takes at most 3 positional arguments (low, high, size), got {len(args) + 1}")
    bounds = dict(zip(("low", "high")[2 - len(args):], args, strict=True))     # one positional bound is high
    for name, value in (("low", low), ("high", high)):
        if value is not None:
            if name in bounds:
                raise TypeError(f"randint() got multiple values for argument '{name}'")
            bounds[name] = value
    if "high" not in bounds:
        raise TypeError("randint() missing 1 required positional arguments: \"high\"")
    lo, hi = bounds.get("low", 0), bounds["high"]
    if lo >= hi:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
    rng = generator or default_generator()
    values = _random(parse_shape(tuple(size)), dtype or _dtype.int64, device_of(device),
                     lambda n: rng.integers(lo, hi, size=n))
    return _finish(values, requires_grad)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Indices drawn from each row of non-negative weights (1-D or 2-D), as torch.multinomial; the weights
    are read back to the host, where the framework's generator draws (a sync point on a GPU)."""
    if input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    weights = input.detach().cpu().numpy().astype(np.float64).reshape(-1, input.shape[-1])
    if (weights < 0).any() or not np.isfinite(weights).all():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if not replacement and num_samples > weights.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    rng = generator or default_generator()
    rows = [rng.choice(weights.shape[1], num_samples, replace=replacement, p=w / w.sum()) for w in weights]
    out = np.stack(rows).astype(np.int64).reshape(*input.shape[:-1], num_samples)
    return Tensor._from_numpy(out, input.device)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def randperm(n: int, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A random permutation of 0 .. n-1 (int64 unless told), drawn on the host by the generator."""
    rng = generator or default_generator()
    order = _made(parse_shape((n,)), dtype or _dtype.int64, device_of(device), lambda: rng.permutation(int(n)))
    return _finish(order, requires_grad)


def _legacy(dt: _dtype.dtype):
    """torch.FloatTensor and friends: LongTensor([1, 2]) is a tensor of those values, FloatTensor(2, 3) an
    uninitialised one of that shape (on the cpu device, as torch's)."""
    def make(*args, device=None):
        if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return empty(*args, dtype=dt, device=device)
        return tensor(args[0] if args else [], dtype=dt, device=device)
    make.__name__ = make.__qualname__ = f"{dt.name.capitalize()}Tensor"
    return make


FloatTensor, DoubleTensor, HalfTensor = _legacy(_dtype.float32), _legacy(_dtype.float64), _legacy(_dtype.float16)
LongTensor, IntTensor, BoolTensor = _legacy(_dtype.int64), _legacy(_dtype.int32), _legacy(_dtype.bool_)
