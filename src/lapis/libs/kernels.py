"""Layer 4: elementwise kernels the framework needs (ATen's place on the CUDA side).

    kernels.fill(api, array, value)              # every element of a device array = value
    kernels.copy(api, x, out)                    # out = x, broadcast to out's shape, cast to its dtype
    kernels.unary(api, fn, x, out)               # out = fn(x) for a device function fn of one number
    kernels.binary(api, fn, a, b, out)           # out = fn(a, b), numpy broadcasting over any strides, up to 6-D
    kernels.where(api, cond, a, b, out)
    kernels.gather(api, x, dim, index, out)      # out[.., j, ..] = x[.., index[.., j, ..], ..] (torch.gather)
    kernels.scatter_add(api, out, dim, index, src)   # out[.., index[.., j, ..], ..] += src[.., j, ..]

Operands are device arrays of any strides (views, broadcast); each element's offset is found
from its linear index and the operand's (broadcast) strides. `unary` and `binary` apply a device
function (`@cuda.jit(device=True)`) per element, as numba's `@vectorize` and CuPy's ElementwiseKernel
do: the framework's op table supplies one per op. Each function compiles its own kernel (the function
is a closure constant the compiler inlines), once per dtype combination; the output's dtype decides the
result's (a float32 out of int32 inputs casts, as `copy` does).
"""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, grid
from lapis.cuda.compiler.device_function import DeviceFunction

THREADS = 256
MAX_BLOCKS = 1024             # a grid-stride kernel's most blocks: past them each thread takes several elements


def launch_shape(n, most_blocks: int | None = None) -> tuple[int, int]:
    """(blocks, threads per block) of a kernel over n elements, one element a thread: blocks of THREADS (at
    most `most_blocks` of them, for a grid-stride kernel whose threads then take several elements each), or
    for fewer than THREADS elements one block of whole warps of 32. A real GPU's idle lanes cost nothing, but
    each simulated lane costs its instructions: 4 elements in a block of 256 ran 8 warps to retire 1."""
    n = int(n)
    if n < THREADS:
        return 1, max(32, -(-n // 32) * 32)
    blocks = -(-n // THREADS)
    return (blocks if most_blocks is None else min(most_blocks, blocks)), THREADS


def fill_kernel(out, value, n):
    i = grid(1)
    if i < n:
        out[i] = value


_dispatchers: dict = {}


def fill(api, array: DeviceNDArray, value, stream=0) -> None:
    if not (array.is_c_contiguous() or array.is_f_contiguous()):
        raise ValueError("fill needs a contiguous device array")
    kernel = _dispatchers.get(api.__name__)
    if kernel is None:
        kernel = _dispatchers[api.__name__] = api.jit(fill_kernel)
    flat = array.ravel(order="A")
    with trace.span(4, "fill", dtype=str(array.dtype), elements=array.size, value=value):
        if array.size:
            kernel[(*launch_shape(array.size), stream)](flat, array.dtype.type(value), np.int64(array.size))


# -- elementwise operations over broadcast, strided operands -------------------------------------------
MAX_DIMS = 6


class KernelArgumentError(ValueError):
    """Operands that do not broadcast, or arrays of the wrong kind; nothing was launched."""


@cuda.jit(device=True)
def quotient(v, word):
    """v // d for 0 <= v < 2^31, from d's divider word (`divider_word`): a multiply, an add and two shifts."""
    return (((v * (word & 0xFFFFFFFF)) >> 32) + v) >> (word >> 32)


@cuda.jit(device=True)
def offset_of(i, ndim, shape, strides):
    """The element offset of linear index i (C order over `shape`) in an array with `strides`;
    strides[ndim] holds the offset of the array's first element in its flat view.

    `shape` holds the dimensions, then per dimension a magic multiplier and a shift (`divider`) in
    one word: with them a quotient is a multiply, an add and two shifts instead of a 64-bit
    division's twenty-odd instructions, as PyTorch's IntDivider does. A word of 0 means divide.
    What is left after the inner dimensions is the outermost index (i < n): it needs no division."""
    off = strides[ndim]
    rest = i
    d = ndim - 1
    while d > 0:
        divide = shape[ndim + d]                  # the magic multiplier in the low 32 bits, the shift above
        if divide:
            q = quotient(rest, divide)
        else:
            q = rest // shape[d]
        off += (rest - q * shape[d]) * strides[d]   # the remainder from the quotient
        rest = q
        d -= 1
    return off + rest * strides[0]


@cuda.jit(device=True)
def split_index(v, d, word):
    """(v // d, v % d) for v >= 0: by d's divider word (`divider_word`, for v < 2^31) when it is not 0, else by a
    64-bit division."""
    if word:
        q = quotient(v, word)
    else:
        q = v // d
    return q, v - q * d


def divider_words(n: int, *divisors: int) -> list:
    """The divider words kernels take for indices below n: 0 (divide) for n of 2^31 or more."""
    return [np.int64(divider_word(d) if n < 1 << 31 else 0) for d in divisors]


def divider_word(d: int) -> int:
    """`divider`(d) in one word, as kernels take it: the magic multiplier in the low 32 bits, the shift above
    (never 0, which `offset_of` reads as "divide")."""
    magic, shift = divider(d)
    return magic | shift << 32


def divider(d: int) -> tuple[int, int]:
    """(magic, shift) with q = (((n * magic) >> 32) + n) >> shift equal to n // d for 0 <= n < 2^31 and
    1 <= d < 2^31 (Granlund and Montgomery's division by invariant integers, PyTorch's IntDivider):
    shift = ceil(log2 d), magic = floor(2^32 (2^shift - d) / d) + 1 < 2^32, so n * magic fits int64."""
    shift = (d - 1).bit_length()
    return (1 << 32) * ((1 << shift) - d) // d + 1, shift


# How an operand is read (a compile-time constant per kernel variant): a number passed as an argument,
# a contiguous array of the output's shape (element i), a contiguous array of the output's trailing
# dimensions (a bias row: element i % size), or any strided, broadcast view (offset_of).
SCALAR, FLAT, TRAILING, STRIDED = 0, 1, 2, 3


def make_load(mode: int):
    """The device function that reads operand element i in one mode (the mode a closure constant, so only
    its branch is compiled)."""
    MODE = mode

    def load(x, i, ndim, shape, strides):
        if MODE == SCALAR:
            v = x
        elif MODE == FLAT:
            v = x[i]
        elif MODE == TRAILING:
            v = x[i % x.size]
        else:
            v = x[offset_of(i, ndim, shape, strides)]
        return v
    return cuda.jit(load, device=True)


def make_place(mode: int):
    """The device function giving where output element i goes."""
    MODE = mode

    def place(i, ndim, shape, strides):
        if MODE == FLAT:
            k = i
        else:
            k = offset_of(i, ndim, shape, strides)
        return k
    return cuda.jit(place, device=True)


LOAD = {m: make_load(m) for m in (SCALAR, FLAT, TRAILING, STRIDED)}
PLACE = {m: make_place(m) for m in (FLAT, STRIDED)}


@cuda.jit(device=True)
def identity(v):
    return v


def make_unary_kernel(fn, modes: tuple = (STRIDED, STRIDED)):
    """The kernel applying device function fn to each element of x (identity: a copy or cast)."""
    OP, load_x, place = fn, LOAD[modes[0]], PLACE[modes[1]]

    def unary_kernel(n, ndim, shape, sx, x, sout, out):
        i = cuda.grid(1)
        while i < n:
            out[place(i, ndim, shape, sout)] = OP(load_x(x, i, ndim, shape, sx))
            i += cuda.gridsize(1)
    return unary_kernel


def make_binary_kernel(fn, modes: tuple = (STRIDED, STRIDED, STRIDED)):
    """The kernel applying device function fn to each pair of elements of a and b."""
    OP, load_a, load_b, place = fn, LOAD[modes[0]], LOAD[modes[1]], PLACE[modes[2]]

    def binary_kernel(n, ndim, shape, sa, a, sb, b, sout, out):
        i = cuda.grid(1)
        while i < n:
            out[place(i, ndim, shape, sout)] = OP(load_a(a, i, ndim, shape, sa), load_b(b, i, ndim, shape, sb))
            i += cuda.gridsize(1)
    return binary_kernel


def make_where_kernel(modes: tuple = (STRIDED, STRIDED, STRIDED, STRIDED)):
    load_c, load_a, load_b, place = LOAD[modes[0]], LOAD[modes[1]], LOAD[modes[2]], PLACE[modes[3]]

    def where_kernel(n, ndim, shape, sc, cond, sa, a, sb, b, sout, out):
        i = cuda.grid(1)
        while i < n:
            k = place(i, ndim, shape, sout)
            if load_c(cond, i, ndim, shape, sc):
                out[k] = load_a(a, i, ndim, shape, sa)
            else:
                out[k] = load_b(b, i, ndim, shape, sb)
            i += cuda.gridsize(1)
    return where_kernel


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


def _dispatcher(api, name, make):
    key = (api.__name__, name)
    if key not in _elementwise:
        _elementwise[key] = api.jit(make())
    return _elementwise[key]


_geometries: dict = {}
GEOMETRY_CACHE = 4096       # distinct shapes and strides kept on each device before the cache starts over


def _device_ints(api, context, values: tuple) -> DeviceNDArray:
    """A device array of int64 values, uploaded once per context: a training loop's shapes repeat, and an
    upload is a synchronous copy that would make every op wait for the ones before it."""
    key = (id(context), values)
    array = _geometries.get(key)
    if array is None:
        if len(_geometries) >= GEOMETRY_CACHE:
            _geometries.clear()
        array = _geometries[key] = api.to_device(np.array(values, np.int64))
    return array


def _shape_ints(api, context, shape: tuple) -> DeviceNDArray:
    """The shape array `offset_of` reads: the dimensions, then each one's divider word (0, a division,
    for tensors of 2^31 elements or more), uploaded once per context and shape."""
    key = (id(context), shape, "dividers")
    array = _geometries.get(key)
    if array is None:
        if math.prod(shape) < 1 << 31:
            dividers = tuple(divider_word(n or 1) for n in shape)
        else:
            dividers = (0,) * len(shape)
        array = _geometries[key] = _device_ints(api, context, (*shape, *dividers))
    return array


def _is_scalar(x) -> bool:
    return isinstance(x, np.generic)


def _mode(x, shape: tuple) -> int:
    if _is_scalar(x):
        return SCALAR
    if not x.is_c_contiguous():
        return STRIDED
    if tuple(x.shape) == shape:
        return FLAT
    dims = tuple(x.shape)
    while dims and dims[0] == 1:
        dims = dims[1:]
    return TRAILING if dims and x.size and shape[len(shape) - len(dims):] == dims else STRIDED


def _geometry(api, out: DeviceNDArray, *inputs) -> tuple[tuple, list]:
    """The operands' read modes, and the launch arguments: element count, dimensions, the shape as a device
    array, then per operand its strides (a device array, with the first element's offset appended) and
    the array itself (a flat view where it is read by index), or the number."""
    if not isinstance(out, DeviceNDArray) or not all(isinstance(x, DeviceNDArray) or _is_scalar(x) for x in inputs):
        raise KernelArgumentError("elementwise operands are device arrays or numpy scalars; outputs device arrays")
    shape = tuple(out.shape)
    if len(shape) > MAX_DIMS:
        raise KernelArgumentError(f"at most {MAX_DIMS} dimensions, not {len(shape)}")
    modes = tuple(_mode(x, shape) for x in (*inputs, out))
    for x, mode in zip(inputs, modes[:-1], strict=True):
        if mode != FLAT and mode != SCALAR:
            broadcast_strides(x, shape)            # raises for operands that do not broadcast
    padded = tuple(shape) or (1,)
    shape_array = _shape_ints(api, out.context, padded)
    operands = [shape_array]
    for x, mode in zip((*inputs, out), modes, strict=True):
        if mode == SCALAR:
            operands += [shape_array, x]            # the strides slot is unused: the kernel reads the number
        elif mode in (FLAT, TRAILING):              # C-contiguous: a 1-D one is its own flat view
            operands += [shape_array, x if len(x.shape) == 1 else x.ravel()]
        else:
            flat, base = flat_view(x)
            operands += [_device_ints(api, out.context, (*broadcast_strides(x, shape), base)), flat]
    return modes, [np.int64(math.prod(shape)), np.int64(len(padded)), *operands]


def _span(op: str, out: DeviceNDArray):
    """The trace span of an elementwise op (its arguments made only when a trace is open)."""
    if not trace.enabled():
        return trace.span(4, "elementwise")
    return trace.span(4, "elementwise", op=op, shape=tuple(out.shape), dtype=str(out.dtype))


def _check_function(fn, arity: int) -> None:
    if not isinstance(fn, DeviceFunction) or fn.arity != arity:
        raise KernelArgumentError(f"expected a device function (@cuda.jit(device=True)) of {arity} argument(s), "
                                  f"not {fn!r}")


def unary(api, fn, x: DeviceNDArray, out: DeviceNDArray) -> None:
    """out = fn(x) elementwise for a device function fn of one number, x broadcast to out's shape; out's dtype
    is the result's (a cast when it differs)."""
    _check_function(fn, 1)
    modes, (n, ndim, shape, sx, x, sout, out) = _geometry(api, out, x)
    with _span(fn.__name__, out):
        if n:
            _dispatcher(api, ("unary", fn, modes), lambda: make_unary_kernel(fn, modes))[
                launch_shape(n, MAX_BLOCKS)](n, ndim, shape, sx, x, sout, out)


def copy(api, x: DeviceNDArray, out: DeviceNDArray) -> None:
    """out = x, broadcast to out's shape and cast to out's dtype."""
    unary(api, identity, x, out)


def binary(api, fn, a, b, out: DeviceNDArray) -> None:
    """out = fn(a, b) elementwise for a device function fn of two numbers, with numpy broadcasting; either
    operand may be a numpy scalar, passed to the kernel as an argument."""
    _check_function(fn, 2)
    modes, (n, ndim, shape, sa, a, sb, b, sout, out) = _geometry(api, out, a, b)
    with _span(fn.__name__, out):
        if n:
            _dispatcher(api, ("binary", fn, modes), lambda: make_binary_kernel(fn, modes))[
                launch_shape(n, MAX_BLOCKS)](n, ndim, shape, sa, a, sb, b, sout, out)


def where(api, cond: DeviceNDArray, a, b, out: DeviceNDArray) -> None:
    """out = a where cond else b, broadcast; a or b may be a numpy scalar."""
    modes, (n, ndim, shape, sc, cond, sa, a, sb, b, sout, out) = _geometry(api, out, cond, a, b)
    with _span("where", out):
        if n:
            _dispatcher(api, ("where", modes), lambda: make_where_kernel(modes))[
                launch_shape(n, MAX_BLOCKS)](n, ndim, shape, sc, cond, sa, a, sb, b, sout, out)


# -- gather and scatter along one dimension -----------------------------------------------------------------
def make_indexed(vector: bool, wrap: bool):
    """The device function giving where element t of an (outer, length, inner) array meets an (outer, other,
    inner) one along the middle dimension: at index[t], an index of the first array's shape, or (`vector`)
    at index[j], a 1-D index along the dimension (index_select: not spread over the other dimensions). With
    `wrap` a negative index counts from the end (x[t]'s rule); an index outside stops the kernel. `by_inner`
    and `by_length` are inner's and length's divider words (`divider_words`)."""
    VECTOR, WRAP = vector, wrap

    def indexed(t, length, inner, other, index, by_inner, by_length):
        q, k = split_index(t, inner, by_inner)
        o, j = split_index(q, length, by_length)
        at = index[j] if VECTOR else index[t]
        if WRAP and at < 0:
            at += other
        assert at >= 0 and at < other, "index out of bounds"          # a device-side assert, as ATen's
        return (o * other + at) * inner + k
    return cuda.jit(indexed, device=True)


INDEXED = {(vector, wrap): make_indexed(vector, wrap) for vector in (False, True) for wrap in (False, True)}


def make_gather_kernel(vector: bool, wrap: bool = False):
    """The gather kernel for an index of out's shape, or (`vector`) for a 1-D index along the dimension."""
    indexed = INDEXED[vector, wrap]

    def gather_kernel(n, length, inner, src_length, by_inner, by_length, x, index, out):
        # out is (outer, length, inner), x (outer, src_length, inner), all contiguous:
        # out[o, j, k] = x[o, index[o, j, k], k] (or x[o, index[j], k])
        t = cuda.grid(1)
        while t < n:
            out[t] = x[indexed(t, length, inner, src_length, index, by_inner, by_length)]
            t += cuda.gridsize(1)
    return gather_kernel


def make_scatter_add_kernel(vector: bool, wrap: bool = False):
    """The scatter-add kernel for an index of src's shape, or (`vector`) a 1-D index along the dimension."""
    indexed = INDEXED[vector, wrap]

    def scatter_add_kernel(n, length, inner, dst_length, by_inner, by_length, out, index, src):
        # out[o, index[o, j, k], k] += src[o, j, k] (or out[o, index[j], k]), with atomics (applied in lane
        # order here: deterministic)
        t = cuda.grid(1)
        while t < n:
            cuda.atomic.add(out, indexed(t, length, inner, dst_length, index, by_inner, by_length), src[t])
            t += cuda.gridsize(1)
    return scatter_add_kernel


def _along(x: DeviceNDArray, dim: int) -> tuple[int, int, int]:
    """(outer, length, inner) of a contiguous array viewed around dimension dim."""
    return int(np.prod(x.shape[:dim])), x.shape[dim], int(np.prod(x.shape[dim + 1:]))


def _check_index_op(name, x, dim, index, other, other_name) -> tuple[int, bool]:
    """dim made non-negative, and whether index is a vector along it (a 1-D index of other's length there, for
    an x of more dimensions) rather than of other's shape."""
    arrays = (x, index, other)
    if not all(isinstance(a, DeviceNDArray) and a.is_c_contiguous() for a in arrays):
        raise KernelArgumentError(f"{name} takes C-contiguous device arrays")
    if index.dtype != np.int64:
        raise KernelArgumentError(f"{name}: index must hold int64, not {index.dtype}")
    if not -x.ndim <= dim < x.ndim or other.ndim != x.ndim:
        raise KernelArgumentError(f"{name}: dimension {dim} and {other_name} {other.shape} must fit the {x.ndim} "
                                  f"dimensions of the array")
    dim %= x.ndim
    vector = index.ndim == 1 and x.ndim > 1
    if vector and index.shape[0] != other.shape[dim] or not vector and tuple(index.shape) != tuple(other.shape):
        raise KernelArgumentError(f"{name}: index {index.shape} does not match {other_name} {other.shape}")
    if any(a != b for i, (a, b) in enumerate(zip(other.shape, x.shape, strict=True)) if i != dim):
        raise KernelArgumentError(f"{name}: {other_name} {other.shape} must match {x.shape} outside dimension {dim}")
    return dim, vector


def gather(api, x: DeviceNDArray, dim: int, index: DeviceNDArray, out: DeviceNDArray, wrap: bool = False) -> None:
    """out = x gathered along dim at int64 `index` (torch.gather; index and out share a shape, equal to x's
    outside dim), or at a 1-D index of out's length along dim (torch.index_select). Indices must lie in
    [0, x.shape[dim]) (with `wrap`, [-x.shape[dim], x.shape[dim]), the negative ones from the end): one
    outside stops the kernel with a device-side assert (as scatter_add's)."""
    dim, vector = _check_index_op("gather", x, dim, index, out, "out")
    outer, length, inner = _along(out, dim)
    with trace.span(4, "gather", shape=tuple(out.shape), dim=dim, dtype=str(x.dtype)):
        if out.size:
            _dispatcher(api, ("gather", vector, wrap), lambda: make_gather_kernel(vector, wrap))[
                launch_shape(out.size, MAX_BLOCKS)](
                np.int64(out.size), np.int64(length), np.int64(inner), np.int64(x.shape[dim]),
                *divider_words(out.size, inner, length), x.ravel(), index.ravel(), out.ravel())


def scatter_add(api, out: DeviceNDArray, dim: int, index: DeviceNDArray, src: DeviceNDArray,
                wrap: bool = False) -> None:
    """out[.., index[.., j, ..], ..] += src[.., j, ..] along dim (torch.scatter_add_, in place), or with a 1-D
    index out[.., index[j], ..] += src[.., j, ..] (torch.index_add_), with atomic adds, so float32 or int32
    (what the atomic unit adds)."""
    dim, vector = _check_index_op("scatter_add", out, dim, index, src, "src")
    if out.dtype != src.dtype or out.dtype not in (np.float32, np.int32):
        raise KernelArgumentError(f"scatter_add adds float32 or int32 into the same dtype, not {src.dtype} into "
                                  f"{out.dtype}")
    outer, length, inner = _along(src, dim)
    with trace.span(4, "scatter_add", shape=tuple(src.shape), dim=dim, dtype=str(out.dtype)):
        if src.size:
            _dispatcher(api, ("scatter_add", vector, wrap), lambda: make_scatter_add_kernel(vector, wrap))[
                launch_shape(src.size, MAX_BLOCKS)](
                np.int64(src.size), np.int64(length), np.int64(inner), np.int64(out.shape[dim]),
                *divider_words(src.size, inner, length), out.ravel(), index.ravel(), src.ravel())
