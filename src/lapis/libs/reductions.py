"""Layer 4: reductions of device arrays along one dimension (ATen's sum, prod, max, min, argmax and argmin
kernels).

    reductions.reduce(api, "argmax", x, dim, out)    # along one dimension, in order (deterministic)
    reductions.cumsum(api, x, dim, out)              # the running sums along one dimension (torch.cumsum)

One thread per output reads its row in order (`reduce_kernel`); a float32 sum down long columns (a bias's
gradient) splits each column over a block (`column_sum_kernel`); a sum along contiguous rows (`x.sum()` of a
whole tensor, a mean over the last dimension) gives each row a block (`row_sum_kernel`); other reductions of a
few outputs of long rows split the rows into chunks reduced in parallel, then reduce the chunks' results
(`split_reduce_kernel`). Every order of operations is fixed, so results are the same on every run.
"""

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, float32
from lapis.libs.kernels import MAX_BLOCKS, KernelArgumentError, _along, _dispatcher, flat_view, launch_shape
from lapis.libs.reduction import block_reduce, warp_tree

REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin")


def make_reduce_step(op: str):
    """The device function folding element v, the j-th of its row, into a reduction's running (acc, best, at):
    the sum or product so far, the extreme so far and where it was (the first of equals; a NaN wins, as in
    torch)."""
    OP = op

    def reduce_step(acc, best, at, v, j):
        if OP == "sum":
            acc += v
        elif OP == "prod":
            acc *= v
        elif OP == "max" or OP == "argmax":
            if v > best or (v != v and best == best):
                best = v
                at = j
        else:
            if v < best or (v != v and best == best):
                best = v
                at = j
        return acc, best, at
    return cuda.jit(reduce_step, device=True)


def make_reduce_kernel(op: str):
    OP, step = op, make_reduce_step(op)

    def reduce_kernel(outer, length, inner, sx_outer, sx_len, sx_inner, x, out):
        # out[o, i] = op over j of x[o, j, i], one thread per (o, i); in order of j, so deterministic
        t = cuda.grid(1)
        if t < outer * inner:
            o = t // inner
            i = t % inner
            base = o * sx_outer + i * sx_inner
            best = x[base]
            where = 0
            acc = out.dtype(1) if OP == "prod" else out.dtype(0)    # not best * 0: an infinite best makes NaN
            for j in range(length):
                acc, best, where = step(acc, best, where, x[base + j * sx_len], j)
            if OP == "sum" or OP == "prod":
                out[t] = acc
            elif OP == "max" or OP == "min":
                out[t] = best
            else:
                out[t] = where
    return reduce_kernel


def make_split_reduce_kernel(op: str):
    """The first pass of a reduction with few outputs along a long dimension: each thread reduces one chunk of
    one output's elements, in order, into partial[o, c, i] (and, for argmax and argmin, the index of its first
    extreme into where[o, c, i]); the partials are then reduced along c in order, which keeps the first extreme
    first and lets a NaN win."""
    OP, step = op, make_reduce_step(op)

    def split_reduce_kernel(outer, length, inner, chunks, chunk, x, partial, where):
        t = cuda.grid(1)
        if t < outer * chunks * inner:
            i = t % inner
            oc = t // inner
            c = oc % chunks
            start = c * chunk
            base = oc // chunks * length * inner + i
            best = x[base + start * inner]
            at = start
            acc = partial.dtype(1) if OP == "prod" else partial.dtype(0)
            for j in range(start, min(length, start + chunk)):
                acc, best, at = step(acc, best, at, x[base + j * inner], j)
            if OP == "sum" or OP == "prod":
                partial[t] = acc
            else:
                partial[t] = best
            if OP == "argmax" or OP == "argmin":
                where[t] = at
    return split_reduce_kernel


def make_split_arg_kernel(op: str):
    """The second pass of a split argmax or argmin: the index of the first chunk's extreme among the chunks'."""
    MAX = op == "argmax"

    def split_arg_kernel(outer, chunks, inner, partial, where, out):
        t = cuda.grid(1)
        if t < outer * inner:
            base = t // inner * chunks * inner + t % inner
            best = partial[base]
            at = where[base]
            for c in range(1, chunks):
                v = partial[base + c * inner]
                if ((v > best) if MAX else (v < best)) or (v != v and best == best):
                    best = v
                    at = where[base + c * inner]
            out[t] = at
    return split_arg_kernel


# A reduction with fewer outputs than SPLIT_OUTPUTS along more than SPLIT_LENGTH elements (x.sum() of a whole
# tensor) would leave a thread alone with each output's elements: it splits them into at most SPLIT_LENGTH
# chunks of at least SPLIT_CHUNK, about SPLIT_THREADS threads in all, and reduces the partial results again.
SPLIT_LENGTH, SPLIT_OUTPUTS, SPLIT_CHUNK, SPLIT_THREADS = 4096, 4096, 256, 1 << 16


# A sum down long columns (a bias's gradient: many rows, few outputs) splits each column over the
# COLUMN_ROWS threads of a block's y dimension: thread y adds rows y, y + COLUMN_ROWS, ... in order; then warp
# y takes column y's 32 partial sums, one a lane, and adds them as a tree of shuffles (`warp_tree`), so the
# result is deterministic and the last step is five shuffles of every warp rather than 31 additions by one
# thread a column. x spans 32 adjacent columns, so each row's reads coalesce. One thread per output would walk
# the whole column alone.
COLUMN_ROWS = 32
COLUMN_MIN_LENGTH = 64       # columns at least this long, of at least 32 outputs side by side, take it


def column_sum_kernel(outer, length, inner, x, out):
    # out[o, i] = sum over j of x[o, j, i]; block (32, COLUMN_ROWS): columns blockIdx.x * 32 + threadIdx.x
    # of matrix blockIdx.y. A column of padding puts a warp's reads down one column in 32 banks.
    partial = cuda.shared.array((COLUMN_ROWS, 33), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i = cuda.blockIdx.x * 32 + tx
    o = cuda.blockIdx.y
    acc = out.dtype(0)
    if i < inner:
        for j in range(ty, length, COLUMN_ROWS):
            acc += x[(o * length + j) * inner + i]
    partial[ty, tx] = acc
    cuda.syncthreads()
    total = warp_tree(partial[tx, ty], 16, False)      # lane tx: row tx's partial sum of column ty
    column = cuda.blockIdx.x * 32 + ty
    if tx == 0 and column < inner:
        out[o * inner + column] = total


# A sum along contiguous rows (the last dimension: x.sum(), x.mean(-1), a loss's mean) gives each row a block of
# up to ROW_SUM_THREADS threads, about four elements a thread: thread t adds elements t, t + blockDim.x, ... in
# order, then the block adds the threads' sums as a tree (`block_reduce`), a fixed order. One thread per row would
# add a 4,096-element x.sum() alone, one element after another. So do a few outputs down columns narrower than
# column_sum's 32 (the bias gradient of a 10-way classifier: at most ROW_SUM_THREADS outputs, inner < 32), each
# output's block stepping down its column.
ROW_SUM_THREADS = 256
ROW_SUM_MIN_LENGTH = 32      # rows at least this long take it


def row_sum_kernel(length, inner, x, out):
    # out[b] = sum over j of x[o, j, i] for output b = o * inner + i, block b
    s = cuda.shared.array(ROW_SUM_THREADS, out.dtype)
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    base = b // inner * length * inner + b % inner
    acc = out.dtype(0)
    for j in range(t, length, cuda.blockDim.x):
        acc += x[base + j * inner]
    total = block_reduce(s, t, acc, False)
    if t == 0:
        out[b] = total


def row_sum_threads(length: int) -> int:
    """The block `row_sum_kernel` gives a row of `length`: about four elements a thread, a power of two from a
    warp to ROW_SUM_THREADS."""
    return min(ROW_SUM_THREADS, max(32, 1 << (-(-length // 4) - 1).bit_length()))


def reduce(api, op: str, x: DeviceNDArray, dim: int, out: DeviceNDArray) -> None:
    """out = op of x along `dim` (out holds x's shape without that dimension, C-contiguous); argmax and
    argmin write int64 indices of the first extreme, as torch does. A float32 sum down long columns takes
    `column_sum_kernel`; a few outputs of long rows split them (`split_reduce_kernel`) and reduce again."""
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
        if out.size and op == "sum" and x.dtype == np.float32 and length >= COLUMN_MIN_LENGTH and inner >= 32:
            _dispatcher(api, ("column_sum",), lambda: column_sum_kernel)[(-(-inner // 32), outer), (32, COLUMN_ROWS)](
                np.int64(outer), np.int64(length), np.int64(inner), flat_x, flat_out)
        elif out.size and op == "sum" and length >= ROW_SUM_MIN_LENGTH and (
                inner == 1 or (inner < 32 and out.size <= ROW_SUM_THREADS)):
            _dispatcher(api, ("row_sum",), lambda: row_sum_kernel)[out.size, row_sum_threads(length)](
                np.int64(length), np.int64(inner), flat_x, flat_out)
        elif out.size and length > SPLIT_LENGTH and outer * inner < SPLIT_OUTPUTS:
            _split_reduce(api, op, x, dim, out, outer, length, inner)
        elif out.size:
            _dispatcher(api, ("reduce", op), lambda: make_reduce_kernel(op))[launch_shape(out.size)](
                np.int64(outer), np.int64(length), np.int64(inner), np.int64(length * inner), np.int64(inner),
                np.int64(1), flat_x, flat_out)


def _split_reduce(api, op: str, x: DeviceNDArray, dim: int, out: DeviceNDArray, outer: int, length: int,
                  inner: int) -> None:
    """`reduce` of few outputs along a long dimension: chunks of it in parallel, then their partial results."""
    chunk = max(SPLIT_CHUNK, -(-length * outer * inner // SPLIT_THREADS), -(-length // SPLIT_LENGTH))
    chunks = -(-length // chunk)
    arg = op in ("argmax", "argmin")
    partial = DeviceNDArray.allocate(out.context, x.shape[:dim] + (chunks,) + x.shape[dim + 1:],
                                     x.dtype if arg else out.dtype)
    where = DeviceNDArray.allocate(out.context, partial.shape, np.int64) if arg else partial
    _dispatcher(api, ("split_reduce", op), lambda: make_split_reduce_kernel(op))[launch_shape(partial.size)](
        np.int64(outer), np.int64(length), np.int64(inner), np.int64(chunks), np.int64(chunk), flat_view(x)[0],
        partial.ravel(), where.ravel())
    if arg:
        _dispatcher(api, ("split_arg", op), lambda: make_split_arg_kernel(op))[launch_shape(out.size)](
            np.int64(outer), np.int64(chunks), np.int64(inner), partial.ravel(), where.ravel(), flat_view(out)[0])
    else:
        reduce(api, op, partial, dim, out)


def cumsum_kernel(n, length, inner, x, out):
    # x and out are (outer, length, inner), contiguous; thread t runs down the line (t // inner, :, t % inner),
    # adding in order (as numpy's cumsum), in out's type
    t = cuda.grid(1)
    while t < n:
        base = t // inner * length * inner + t % inner
        acc = out.dtype(x[base])
        out[base] = acc
        for j in range(1, length):
            acc += out.dtype(x[base + j * inner])
            out[base + j * inner] = acc
        t += cuda.gridsize(1)


def cumsum(api, x: DeviceNDArray, dim: int, out: DeviceNDArray) -> None:
    """out = the running sums of x along dim (torch.cumsum): one thread a line, in order; x and out contiguous and
    of one shape, the sums in out's dtype."""
    if tuple(x.shape) != tuple(out.shape) or not (x.is_c_contiguous() and out.is_c_contiguous()):
        raise KernelArgumentError(f"cumsum: x {x.shape} and out {out.shape} must be contiguous and of one shape")
    outer, length, inner = _along(x, dim)
    with trace.span(4, "cumsum", shape=tuple(x.shape), dim=dim, dtype=str(out.dtype)):
        if outer * inner and length:
            _dispatcher(api, ("cumsum",), lambda: cumsum_kernel)[launch_shape(outer * inner, MAX_BLOCKS)](
                np.int64(outer * inner), np.int64(length), np.int64(inner), x.ravel(), out.ravel())
