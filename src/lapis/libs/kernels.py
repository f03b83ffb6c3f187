"""Layer 4: elementwise kernels the framework needs (ATen's place on the CUDA side).

    kernels.fill(api, array, value)              # every element of a device array = value
    kernels.unary(api, "exp", x, out)            # out = exp(x), x broadcast to out's shape
    kernels.binary(api, "add", a, b, out)        # numpy broadcasting over any strides, up to 6-D
    kernels.where(api, cond, a, b, out)
    kernels.reduce(api, "argmax", x, dim, out)   # along one dimension, in order (deterministic)

Operands are device arrays of any strides (views, broadcast); each element's offset is found
from its linear index and the operand's (broadcast) strides. Each operation compiles its own
kernel (the op name is a closure constant the compiler folds), once per dtype combination;
the output's dtype decides the result's (a float32 out of int32 inputs casts, as `copy` does).
"""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, grid

THREADS = 256


def fill_kernel(out, value, n):
    i = grid(1)
    if i < n:
        out[i] = value


_dispatchers: dict = {}


def fill(api, array: DeviceNDArray, value) -> None:
    if not (array.is_c_contiguous() or array.is_f_contiguous()):
        raise ValueError("fill needs a contiguous device array")
    kernel = _dispatchers.get(api.__name__)
    if kernel is None:
        kernel = _dispatchers[api.__name__] = api.jit(fill_kernel)
    flat = DeviceNDArray((array.size,), (array.dtype.itemsize,), array.dtype, array.context, array.memory, array.ptr)
    with trace.span(4, "fill", dtype=str(array.dtype), elements=array.size, value=value):
        if array.size:
            kernel[-(-array.size // THREADS), THREADS](flat, array.dtype.type(value), np.int64(array.size))


# -- elementwise operations over broadcast, strided operands -------------------------------------------
MAX_DIMS = 6
UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "relu", "copy")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge")


class KernelArgumentError(ValueError):
    """Operands that do not broadcast, or arrays of the wrong kind; nothing was launched."""


@cuda.jit(device=True)
def offset_of(i, ndim, shape, strides):
    """The element offset of linear index i (C order over `shape`) in an array with `strides`;
    strides[ndim] holds the offset of the array's first element in its flat view."""
    off = strides[ndim]
    rest = i
    d = ndim - 1
    while d >= 0:
        off += rest % shape[d] * strides[d]
        rest = rest // shape[d]
        d -= 1
    return off


def make_unary_kernel(op: str):
    OP = op

    def unary_kernel(n, ndim, shape, sx, x, sout, out):
        i = cuda.grid(1)
        while i < n:
            v = x[offset_of(i, ndim, shape, sx)]
            if OP == "neg":
                r = -v
            elif OP == "abs":
                r = abs(v)
            elif OP == "exp":
                r = math.exp(v)
            elif OP == "log":
                r = math.log(v)
            elif OP == "sqrt":
                r = math.sqrt(v)
            elif OP == "rsqrt":
                r = 1.0 / math.sqrt(v)
            elif OP == "tanh":
                r = math.tanh(v)
            elif OP == "sigmoid":
                r = 1.0 / (1.0 + math.exp(-v))
            elif OP == "sin":
                r = math.sin(v)
            elif OP == "cos":
                r = math.cos(v)
            elif OP == "relu":
                r = v if v > 0 else v * 0
            else:
                r = v
            out[offset_of(i, ndim, shape, sout)] = r
            i += cuda.gridsize(1)
    return unary_kernel


def make_binary_kernel(op: str):
    OP = op

    def binary_kernel(n, ndim, shape, sa, a, sb, b, sout, out):
        i = cuda.grid(1)
        while i < n:
            x = a[offset_of(i, ndim, shape, sa)]
            y = b[offset_of(i, ndim, shape, sb)]
            if OP == "add":
                r = x + y
            elif OP == "sub":
                r = x - y
            elif OP == "mul":
                r = x * y
            elif OP == "div":
                r = x / y
            elif OP == "pow":
                r = x ** y
            elif OP == "maximum":
                r = max(x, y)
            elif OP == "minimum":
                r = min(x, y)
            elif OP == "eq":
                r = x == y
            elif OP == "ne":
                r = x != y
            elif OP == "lt":
                r = x < y
            elif OP == "le":
                r = x <= y
            elif OP == "gt":
                r = x > y
            else:
                r = x >= y
            out[offset_of(i, ndim, shape, sout)] = r
            i += cuda.gridsize(1)
    return binary_kernel


def where_kernel(n, ndim, shape, sc, cond, sa, a, sb, b, sout, out):
    i = cuda.grid(1)
    while i < n:
        take = cond[offset_of(i, ndim, shape, sc)]
        out[offset_of(i, ndim, shape, sout)] = a[offset_of(i, ndim, shape, sa)] if take else \
            b[offset_of(i, ndim, shape, sb)]
        i += cuda.gridsize(1)


def flat_view(x: DeviceNDArray) -> tuple[DeviceNDArray, int]:
    """A 1-D view over every element x can reach, and the offset of x's first element in it
    (nonzero when a stride is negative, as a reversed slice makes)."""
    item = x.dtype.itemsize
    low = sum((n - 1) * s // item for n, s in zip(x.shape, x.strides, strict=True) if s < 0 and n)
    high = sum((n - 1) * s // item for n, s in zip(x.shape, x.strides, strict=True) if s > 0 and n)
    span = high - low + 1 if x.size else 1
    return DeviceNDArray((span,), (item,), x.dtype, x.context, x.memory, x.ptr + low * item), -low


def broadcast_strides(x: DeviceNDArray, shape: tuple) -> list[int]:
    """Element strides of x broadcast to `shape` (0 along broadcast dimensions), numpy's rules."""
    if x.ndim > len(shape):
        raise KernelArgumentError(f"cannot broadcast shape {x.shape} to {shape}")
    strides = [0] * (len(shape) - x.ndim) + [s // x.dtype.itemsize for s in x.strides]
    dims = [1] * (len(shape) - x.ndim) + list(x.shape)
    for k, (have, want) in enumerate(zip(dims, shape, strict=True)):
        if have == 1 and want != 1:
            strides[k] = 0
        elif have != want:
            raise KernelArgumentError(f"cannot broadcast shape {x.shape} to {shape}")
    return strides


_elementwise: dict = {}


def _dispatcher(api, name: str, make):
    key = (api.__name__, name)
    if key not in _elementwise:
        _elementwise[key] = api.jit(make())
    return _elementwise[key]


def _geometry(api, out: DeviceNDArray, *inputs) -> list:
    if not isinstance(out, DeviceNDArray) or not all(isinstance(x, DeviceNDArray) for x in inputs):
        raise KernelArgumentError("elementwise operands and outputs are device arrays")
    shape = tuple(out.shape)
    if len(shape) > MAX_DIMS:
        raise KernelArgumentError(f"at most {MAX_DIMS} dimensions, not {len(shape)}")
    padded = list(shape) or [1]
    operands = [api.to_device(np.array(padded, np.int64))]
    for x in (*inputs, out):
        flat, base = flat_view(x)
        strides = broadcast_strides(x, shape) or [0]
        operands += [api.to_device(np.array([*strides, base], np.int64)), flat]
    return [np.int64(int(np.prod(shape))), np.int64(len(padded)), *operands]


def unary(api, op: str, x: DeviceNDArray, out: DeviceNDArray) -> None:
    """out = op(x) elementwise, x broadcast to out's shape; out's dtype is the result's (a cast when it
    differs, as `copy` into an array of another dtype)."""
    if op not in UNARY:
        raise KernelArgumentError(f"unary op must be one of {', '.join(UNARY)}, not {op!r}")
    n, ndim, shape, sx, x, sout, out = _geometry(api, out, x)
    with trace.span(4, "elementwise", op=op, shape=tuple(out.shape), dtype=str(out.dtype)):
        if n:
            _dispatcher(api, "unary_" + op, lambda: make_unary_kernel(op))[
                max(1, min(1024, -(-int(n) // THREADS))), THREADS](n, ndim, shape, sx, x, sout, out)


def binary(api, op: str, a: DeviceNDArray, b: DeviceNDArray, out: DeviceNDArray) -> None:
    """out = a op b elementwise with numpy broadcasting; comparisons write bool arrays."""
    if op not in BINARY:
        raise KernelArgumentError(f"binary op must be one of {', '.join(BINARY)}, not {op!r}")
    n, ndim, shape, sa, a, sb, b, sout, out = _geometry(api, out, a, b)
    with trace.span(4, "elementwise", op=op, shape=tuple(out.shape), dtype=str(out.dtype)):
        if n:
            _dispatcher(api, "binary_" + op, lambda: make_binary_kernel(op))[
                max(1, min(1024, -(-int(n) // THREADS))), THREADS](n, ndim, shape, sa, a, sb, b, sout, out)


def where(api, cond: DeviceNDArray, a: DeviceNDArray, b: DeviceNDArray, out: DeviceNDArray) -> None:
    """out = a where cond else b, broadcast."""
    n, ndim, shape, sc, cond, sa, a, sb, b, sout, out = _geometry(api, out, cond, a, b)
    with trace.span(4, "elementwise", op="where", shape=tuple(out.shape), dtype=str(out.dtype)):
        if n:
            _dispatcher(api, "where", lambda: where_kernel)[max(1, min(1024, -(-int(n) // THREADS))), THREADS](
                n, ndim, shape, sc, cond, sa, a, sb, b, sout, out)


# -- reductions along one dimension ----------------------------------------------------------------------
REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin")


def make_reduce_kernel(op: str):
    OP = op

    def reduce_kernel(outer, length, inner, sx_outer, sx_len, sx_inner, x, out):
        # out[o, i] = op over j of x[o, j, i], one thread per (o, i); in order of j, so deterministic
        t = cuda.grid(1)
        if t < outer * inner:
            o = t // inner
            i = t % inner
            base = o * sx_outer + i * sx_inner
            best = x[base]
            where = 0
            acc = best * 0
            if OP == "prod":
                acc = acc + 1
            for j in range(length):
                v = x[base + j * sx_len]
                if OP == "sum":
                    acc += v
                elif OP == "prod":
                    acc *= v
                elif OP == "max" or OP == "argmax":
                    if v > best or (v != v and best == best):          # NaN wins, as in torch
                        best = v
                        where = j
                else:
                    if v < best or (v != v and best == best):
                        best = v
                        where = j
            if OP == "sum" or OP == "prod":
                out[t] = acc
            elif OP == "max" or OP == "min":
                out[t] = best
            else:
                out[t] = where
    return reduce_kernel


def reduce(api, op: str, x: DeviceNDArray, dim: int, out: DeviceNDArray) -> None:
    """out = op of x along `dim` (out holds x's shape without that dimension, C-contiguous); argmax and
    argmin write int64 indices of the first extreme, as torch does."""
    if op not in REDUCTIONS:
        raise KernelArgumentError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {op!r}")
    if not isinstance(x, DeviceNDArray) or not isinstance(out, DeviceNDArray):
        raise KernelArgumentError("reductions take device arrays")
    if not -x.ndim <= dim < x.ndim:
        raise KernelArgumentError(f"dimension {dim} is out of range for a {x.ndim}-d array")
    dim %= x.ndim
    if x.shape[dim] == 0:
        raise KernelArgumentError("cannot reduce over an empty dimension")
    kept = x.shape[:dim] + x.shape[dim + 1:]
    if tuple(out.shape) != tuple(kept) or not out.is_c_contiguous():
        raise KernelArgumentError(f"out must be a C-contiguous array of shape {kept}, not {out.shape}")
    if not x.is_c_contiguous():
        raise KernelArgumentError("reduce reads a C-contiguous array; make a contiguous copy first (unary 'copy')")
    outer, length, inner = int(np.prod(x.shape[:dim])), x.shape[dim], int(np.prod(x.shape[dim + 1:]))
    flat_x, flat_out = flat_view(x)[0], flat_view(out)[0]
    with trace.span(4, "reduce", op=op, shape=tuple(x.shape), dim=dim, dtype=str(x.dtype)):
        if out.size:
            _dispatcher(api, "reduce_" + op, lambda: make_reduce_kernel(op))[-(-out.size // THREADS), THREADS](
                np.int64(outer), np.int64(length), np.int64(inner), np.int64(length * inner), np.int64(inner),
                np.int64(1), flat_x, flat_out)
