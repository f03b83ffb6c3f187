"""Layer 4: BLAS with cuBLAS conventions (column-major; C = alpha op(A) op(B) + beta C).

    handle = blas.create(cuda)                  # cublasCreate: bound to a device of an API
    blas.sgemm(handle, "N", "N", m, n, k, 1.0, A, lda, B, ldb, 0.0, C, ldc)

Routines: gemm (float32, float16 or bfloat16 in and out, float32 accumulation; float64 in, out and
accumulation), sgemm, dgemm, gemm_strided_batched, gemm_batched, gemv, and the level-1 routines of
`blas_level1.py`.

Matrices are device arrays read as flat column-major storage with leading dimensions, as
cuBLAS reads device pointers. Row-major callers (the framework) swap the operands:
row-major C = A B is column-major C^T = B^T A^T.

The float32-pipe gemm kernel tiles C into bm x bn blocks (the autotuner picks among
`TILE_CANDIDATES` by predicted time; a small C with 32 rows or columns takes `NARROW_TILES`)
computed by 256 threads, each keeping a tm x tn block of C in
registers (a `cuda.local.array` the compiler keeps in registers) in runs of four rows and four
columns, so every k-step reads its slices of op(A) and op(B) with 128-bit shared loads. k is walked
in slices of bk staged in shared memory; the next slice is loaded into registers while the current
one is computed (register prefetch), and only blocks on the edge of C test bounds. The B slice is
loaded k-fastest (coalesced for column-major B), so its rows are padded against bank conflicts.
Half-precision inputs are widened to float32 as they are staged. A float32 operand read as stored
(op 'N') whose columns start on 16 bytes is staged with 128-bit loads, four words a thread, where the
slice holds a vector for every thread (as CUDA kernels read a float4): a quarter of the loads (B only in
slices 8 deep, whose transposing stores keep clear of bank conflicts).

A float32 gemm whose C has few tiles but whose k is long (a weight gradient: 64 x 64 summed over 512
tokens) is split along k (split-K, as cuBLAS does for such shapes): one strided-batched launch
computes each k-chunk's product into the handle's workspace, and a second kernel adds the chunks in
order, scales by alpha and adds beta C, so the result stays deterministic.

float64 takes a plain kernel (`dgemm_kernel`): one element of C per thread in 16 x 16 blocks, k in
slices of 16 staged in shared memory, float64 throughout (the FP64 pipe; no register tiling yet).

Half inputs with both operands k-contiguous (op(A) = A^T, op(B) = B) take the matrix-unit
kernel: HMMA.16816 with float32 accumulation, 128x256 blocks of eight warps, 64x64 per warp.
Sizes and offsets are int32: each matrix must hold fewer than 2^31 elements.
"""

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, float32
from lapis.cuda.compiler import cache
from lapis.libs.blas_level1 import BlasError, asum, at, axpy, check_vector, copy, dot, iamax, nrm2, scal, swap
from lapis.libs.gemm_kernels import (
    DGEMM_TILE,
    MMA_DEPTH,
    MMA_N_TILES,
    MMA_SHARED_BYTES,
    MMA_THREADS,
    SMALL_GEMM_DEPTH,
    SMALL_GEMM_OUTPUTS,
    SMALL_GEMM_THREADS,
    TRANSPOSE_ROWS,
    TRANSPOSE_TILE,
    GemmTiles,
    dgemm_kernel,
    make_gemm_kernel,
    make_mma_gemm_kernel,
    small_gemm_kernel,
    transpose_kernel,
)
from lapis.libs.handle import LibraryHandle

TILE_CANDIDATES = (GemmTiles(64, 64, 16, 4, 4), GemmTiles(128, 128, 8, 8, 8), GemmTiles(128, 64, 8, 8, 4),
                   GemmTiles(64, 128, 8, 4, 8))
DEFAULT_TILES = TILE_CANDIDATES[0]
# For a small C of 32 rows or columns or fewer (a transformer's 32-wide activations), 256 threads over
# 32 x 128 or 128 x 32: the default's 64 x 64 would compute twice the products needed.
NARROW_TILES = (GemmTiles(32, 128, 8, 4, 4), GemmTiles(128, 32, 8, 4, 4))
TUNE_ABOVE = 1 << 27          # multiply-adds above which a gemm's tiles are chosen by the autotuner
PROBE_K = 64                  # the depth the autotuner runs candidates at
SPLIT_K_BLOCKS = 64           # split-K aims at this many blocks ...
SPLIT_K_MIN_DEPTH = 128       # ... each summing at least this deep
# The matrix-unit kernel's blocks, as (m_tiles, n_tiles): 32 m_tiles rows by 32 n_tiles columns, largest first. The
# largest reuses each staged slice most; the smaller ones give a product too small for its grid blocks for more units
# (1024^2 is 32 blocks of 128 x 256: a quarter of the H200's units, a tenth of the MI300X's).
MMA_TILES_CANDIDATES = ((4, 8), (2, 8), (4, 4), (1, 8), (2, 4), (1, 4))
MMA_PROBE_K = 256             # the depth the autotuner runs them at: deep enough that staging, not the epilogue, counts


__all__ = ["BlasError", "GemmTiles", "Handle", "asum", "axpy", "choose_tiles", "copy", "create", "dgemm", "dot", "gemm",
           "gemm_batched", "gemm_strided_batched", "gemv", "iamax", "nrm2", "scal", "sgemm", "swap"]


class Handle(LibraryHandle):
    """A cuBLAS-style handle: the API (lapis.cuda or lapis.hip), device and stream its routines run on."""

    def __init__(self, api, device: int = 0):
        super().__init__(api, device)
        self.tiled_kernels: dict[tuple, object] = {}    # by (tiles, vector_a, vector_b, with_bias, vector_c)
        self.tiles: dict[tuple, GemmTiles | tuple] = {}  # autotuners' choices (tilings, mma tiles) by shape
        self.mma_kernels: dict[tuple[str, tuple], object] = {}    # by (half type's name, (m_tiles, n_tiles))
        self.workspace: DeviceNDArray | None = None     # split-K's partial products, grown as needed
        self.dgemm = api.jit(dgemm_kernel)
        self.transpose = api.jit(transpose_kernel)     # stages a half operand k-contiguous for the matrix unit
        self.small_gemm = api.jit(small_gemm_kernel)   # batches of small products, an element per thread

    def gemm_kernel(self, tiles: GemmTiles, vector_a: bool = False, vector_b: bool = False, with_bias: bool = False,
                    vector_c: bool = False, k_major_a: bool = False, n_major_b: bool = False):
        key = (tiles, vector_a, vector_b, with_bias, vector_c, k_major_a, n_major_b)
        kernel = self.tiled_kernels.get(key)
        if kernel is None:
            kernel = self.tiled_kernels[key] = self.api.jit(make_gemm_kernel(*key))
        return kernel

    def mma_kernel(self, dtype_name: str, tiles: tuple[int, int]):
        """The matrix-unit gemm kernel for float16 or bfloat16 blocks of 32 m_tiles x 32 n_tiles, compiled once."""
        kernel = self.mma_kernels.get((dtype_name, tiles))
        if kernel is None:
            kind = cuda.float16 if dtype_name == "float16" else cuda.bfloat16
            kernel = self.mma_kernels[dtype_name, tiles] = self.api.jit(make_mma_gemm_kernel(kind, *tiles))
        return kernel


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


GEMM_DTYPES = (np.float32, np.float16, "bfloat16")


def _flat(x: DeviceNDArray, name: str, routine: str = "sgemm") -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise BlasError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype.name not in ("float32", "float16", "bfloat16", "float64"):
        raise BlasError(f"{routine}: {name} must hold float32, float16, bfloat16 or float64, not {x.dtype}")
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        raise BlasError(f"{routine}: {name} must be contiguous storage")
    return x.ravel(order="A")


def _op(trans: str) -> bool:
    t = trans.upper() if isinstance(trans, str) else trans
    if t not in ("N", "T", "C"):
        raise BlasError(f"trans must be 'N', 'T' or 'C', not {trans!r}")
    return t != "N"


def _check_matrix(routine: str, name: str, x: DeviceNDArray, rows: int, cols: int, ld: int, count: int = 1,
                  stride: int = 0) -> None:
    if ld < max(1, rows):
        raise BlasError(f"{routine}: ld{name.lower()}={ld} must be at least {max(1, rows)}")
    need = (cols - 1) * ld + rows if cols and rows else 0
    need = need + (count - 1) * stride if need else 0
    if need > x.size:
        raise BlasError(f"{routine}: {name} holds {x.size} elements but {count} x {rows}x{cols} with ld={ld}"
                        + (f" and batch stride {stride}" if count > 1 else "") + f" needs {need}")
    if need >= 2**31:
        raise BlasError(f"{routine}: {name} spans {need} elements; this kernel indexes with int32 (< 2^31)")


def gemm_strided_batched(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float,
                         A: DeviceNDArray, lda: int, stride_a: int, B: DeviceNDArray, ldb: int, stride_b: int,
                         beta: float, C: DeviceNDArray, ldc: int, stride_c: int, batch: int,
                         routine: str = "gemm_strided_batched", bias: DeviceNDArray | None = None) -> None:
    """C_z = alpha op(A_z) op(B_z) + beta C_z for z < batch, column-major, A_z at A + z * stride_a
    (cublasGemmStridedBatchedEx): float32, float16 or bfloat16 inputs and outputs, float32 accumulation. With
    `bias` (float32 A and B only: cublasLt's bias epilogue), bias[i] is added to every element of row i of C_z, in
    the kernel that writes C."""
    ta, tb = _op(transa), _op(transb)
    if min(m, n, k, batch) < 0:
        raise BlasError(f"{routine}: m, n, k and the batch must be non-negative (got {m}, {n}, {k}, {batch})")
    fa, fb, fc = _flat(A, "A", routine), _flat(B, "B", routine), _flat(C, "C", routine)
    if fa.dtype != fb.dtype:
        raise BlasError(f"{routine}: A and B must share a dtype, got {fa.dtype} and {fb.dtype}")
    _check_matrix(routine, "A", fa, k if ta else m, m if ta else k, lda, batch, stride_a)
    _check_matrix(routine, "B", fb, n if tb else k, k if tb else n, ldb, batch, stride_b)
    _check_matrix(routine, "C", fc, m, n, ldc, batch, stride_c)
    if bias is not None:
        bias = _flat(bias, "bias", routine)
        if fa.dtype != np.float32 or bias.size != m:
            raise BlasError(f"{routine}: the bias epilogue takes float32 A and B and a bias of m = {m} elements (got "
                            f"{fa.dtype} and {bias.size})")
    if (fa.dtype == np.float64) != (fc.dtype == np.float64):
        raise BlasError(f"{routine}: float64 A and B need a float64 C and the other way round (got {fa.dtype} and "
                        f"{fc.dtype})")

    def span(kernel: str, tile: str):
        """The routine's Layer 4 event, naming the kernel that runs it (with the operands as they are then: a
        staged operand's leading dimension)."""
        return trace.span(4, routine, transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                          beta=beta, ldc=ldc, batch=batch, dtype=str(fa.dtype), device=str(handle.context.device),
                          kernel=kernel, tile=tile)

    if fa.dtype == np.float64:
        with span("dgemm_kernel", f"{DGEMM_TILE}x{DGEMM_TILE}x{DGEMM_TILE}"):
            if m and n and batch:
                handle.dgemm[(-(-m // DGEMM_TILE), -(-n // DGEMM_TILE), batch), (DGEMM_TILE, DGEMM_TILE),
                             handle.stream](*_gemm_arguments(ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb,
                                                             stride_b, beta, fc, ldc, stride_c, np.float64))
        return
    if _worth_staging(handle, ta, tb, m, n, k, fa):           # cuBLAS's tensor-core kernels take any layout
        if not ta:
            fa, lda, stride_a, ta = _k_contiguous(handle, fa, m, k, lda, stride_a, batch), k, k * m, True
        if tb:
            fb, ldb, stride_b, tb = _k_contiguous(handle, fb, n, k, ldb, stride_b, batch), k, k * n, False
    if _matrix_unit_fits(handle, ta, tb, k, fa, lda, stride_a, fb, ldb, stride_b):
        tiles = choose_mma_tiles(handle, m, n, k, batch, fa.dtype) if m and n and batch else MMA_TILES_CANDIDATES[0]
        with span("mma_gemm_kernel", f"{_mma_name(tiles)}x{MMA_DEPTH} on the matrix unit"):
            if m and n and batch:
                _launch_mma(handle, tiles, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                            stride_c, batch)
        return
    if _small_items(m, n, k, batch, bias):
        with span("small_gemm_kernel", "an element of C per thread"):
            if m and n:
                handle.small_gemm[-(-(m * n * batch) // SMALL_GEMM_THREADS), SMALL_GEMM_THREADS, handle.stream](
                    *_gemm_arguments(ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                                     stride_c), np.int32(batch))
        return
    tiles = choose_tiles(handle, m, n, k, fa.dtype)
    with span("gemm_kernel", str(tiles)):
        if m == 0 or n == 0 or batch == 0:
            return
        splits = _split_k(tiles, m, n, k, batch, fc.dtype)
        if splits > 1:
            _launch_split_k(handle, tiles, splits, ta, tb, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc, bias)
            return
        _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                     stride_c, batch, bias)


def _small_items(m: int, n: int, k: int, batch: int, bias) -> bool:
    """Whether a batch goes to the small kernel, an element of C per thread: several matrices of at most
    SMALL_GEMM_OUTPUTS elements summing at most SMALL_GEMM_DEPTH deep (no bias epilogue), where the tiled kernel's
    smallest block (4,096 elements of C) would be mostly idle for each one."""
    return (batch > 1 and bias is None and m * n <= SMALL_GEMM_OUTPUTS and k <= SMALL_GEMM_DEPTH
            and m * n * batch < 2**31)


def _split_k(tiles: GemmTiles, m: int, n: int, k: int, batch: int, dtype) -> int:
    """How many k-chunks a float32 gemm is split into: enough blocks to fill SPLIT_K_BLOCKS, each chunk at
    least SPLIT_K_MIN_DEPTH deep; 1 (no split) for batches, half outputs and shapes with tiles enough."""
    if batch != 1 or dtype != np.float32:
        return 1
    blocks = -(-m // tiles.bm) * -(-n // tiles.bn)
    return max(1, min(k // SPLIT_K_MIN_DEPTH, SPLIT_K_BLOCKS // blocks))


def splitk_reduce_kernel(m, n, splits, alpha, ws, beta, c, ldc, with_bias, bias):
    # One thread per element of C: the chunks' partial products added in chunk order (deterministic), then
    # bias[i] where there is one.
    t = cuda.grid(1)
    if t < m * n:
        i, j = t % m, t // m
        acc = float32(0.0)
        for z in range(splits):
            acc += ws[z * m * n + t]
        value = alpha * acc
        if with_bias:
            value += bias[i]
        if beta == 0:
            c[i + j * ldc] = value
        else:
            c[i + j * ldc] = value + beta * c[i + j * ldc]


def _launch_split_k(handle, tiles, splits, ta, tb, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc, bias) -> None:
    """C = alpha op(A) op(B) + beta C as `splits` chunks of k: chunk z is batch item z of one strided-batched
    launch (its op(A) columns and op(B) rows start z * depth into k), written to the workspace; a depth
    that does not divide evenly leaves a tail that a second launch adds into chunk 0."""
    depth = k // splits
    need = splits * m * n
    if handle.workspace is None or handle.workspace.size < need:
        handle.workspace = handle.api.device_array(need, np.float32)
    ws = handle.workspace[:need]
    step_a = 1 if ta else lda          # elements between consecutive k in op(A), and in op(B)
    step_b = ldb if tb else 1
    _launch_gemm(handle, tiles, ta, tb, m, n, depth, 1.0, fa, lda, depth * step_a, fb, ldb, depth * step_b, 0.0,
                 ws, m, m * n, splits)
    tail = k - depth * splits
    if tail:
        at_a, at_b = (depth * splits * step_a, depth * splits * step_b)
        _launch_gemm(handle, tiles, ta, tb, m, n, tail, 1.0, fa[at_a:], lda, 0, fb[at_b:], ldb, 0, 1.0, ws, m, 0, 1)
    handle.kernel(splitk_reduce_kernel)[-(-(m * n) // 256), 256, handle.stream](
        np.int32(m), np.int32(n), np.int32(splits), np.float32(alpha), ws, np.float32(beta), fc, np.int32(ldc),
        bias is not None, fc if bias is None else bias)


def _matrix_unit_fits(handle, ta, tb, k, fa, lda, stride_a, fb, ldb, stride_b) -> bool:
    """Whether the HMMA kernel takes this gemm: half inputs, both operands k-contiguous (op(A) = A^T,
    op(B) = B), k a multiple of the 32-deep slices, every operand 4-byte aligned so its halves pair up
    into words, and a device whose blocks have the shared memory the kernel stages in."""
    return (ta and not tb and _matrix_unit_takes(handle, k, fa)
            and all(v % 2 == 0 for v in (lda, ldb, stride_a, stride_b)) and fa.ptr % 4 == 0 and fb.ptr % 4 == 0)


def _matrix_unit_takes(handle, k: int, fa: DeviceNDArray) -> bool:
    """What the HMMA kernel needs whatever the layout: half inputs, k a multiple of its 32-deep slices, and a device
    whose blocks have the shared memory it stages in."""
    return (fa.dtype.name in ("float16", "bfloat16") and k > 0 and k % MMA_DEPTH == 0
            and handle.properties.shared_memory_per_block >= MMA_SHARED_BYTES)


def _worth_staging(handle, ta, tb, m, n, k, fa) -> bool:
    """Whether a half gemm the HMMA kernel would take but for an operand's layout (op(A) rows or op(B) columns not
    k-contiguous: `lapis.matmul(A, B)` of row-major matrices has B so) should copy that operand k-contiguous first:
    when it is large enough that its tiles are tuned, where the matrix unit's speed pays for the copy many times.
    (At 4096^3 the copies and the HMMA kernel also simulate faster than the float32-pipe kernel: 19 s of wall
    against 28 on a quiet 2-core host.)"""
    return (not ta or tb) and TUNE_ABOVE <= m * n * k and _matrix_unit_takes(handle, k, fa)


def _k_contiguous(handle, flat: DeviceNDArray, rows: int, k: int, ld: int, stride: int, batch: int) -> DeviceNDArray:
    """An operand stored column-major as `rows` x k (element (i, p) of matrix z at i + p ld + z stride), copied so
    that each row's k elements are contiguous: (z, i, p) at (z rows + i) k + p, ld k (`transpose_kernel`)."""
    staged = DeviceNDArray.allocate(handle.context, batch * rows * k, flat.dtype)
    handle.transpose[(-(-rows // TRANSPOSE_TILE), -(-k // (2 * TRANSPOSE_TILE)), batch),
                     (TRANSPOSE_TILE, TRANSPOSE_ROWS), handle.stream](
        np.int32(rows), np.int32(k), flat.view(np.uint16), np.int32(ld), np.int32(stride), staged.view(np.uint32))
    return staged


def _launch_mma(handle, tiles, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc, stride_c,
                batch) -> None:
    """The matrix-unit kernel's launch, for k-contiguous op(A) and op(B) (`_matrix_unit_fits`)."""
    words = [x[:x.size // 2 * 2].view(np.uint32) for x in (fa, fb)]     # the halves in pairs
    handle.mma_kernel(fa.dtype.name, tiles)[_mma_grid(tiles, m, n, batch), MMA_THREADS, handle.stream](
        np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), words[0], np.int32(lda // 2), np.int32(stride_a // 2),
        words[1], np.int32(ldb // 2), np.int32(stride_b // 2), np.float32(beta), fc, np.int32(ldc), np.int32(stride_c))


def _mma_grid(tiles: tuple[int, int], m: int, n: int, batch: int) -> tuple[int, int, int]:
    """The matrix-unit kernel's grid for an m x n C (times batch) in blocks of `tiles`."""
    return -(-m // (32 * tiles[0])), -(-n // (32 * tiles[1])), batch


def _fills_units(tiles: tuple[int, int], m: int, n: int, batch: int, units: int) -> bool:
    """Whether the matrix-unit kernel's grid in blocks of `tiles` has a block for each of `units` units."""
    return math.prod(_mma_grid(tiles, m, n, batch)) >= units


def _mma_name(tiles: tuple[int, int]) -> str:
    return f"{32 * tiles[0]}x{32 * tiles[1]}"


def choose_mma_tiles(handle: Handle, m: int, n: int, k: int, batch: int, dtype) -> tuple[int, int]:
    """The matrix-unit kernel's block for a gemm, as (m_tiles, n_tiles) (blocks of 32 m_tiles x 32 n_tiles): at or
    below TUNE_ABOVE multiply-adds the largest of MMA_TILES_CANDIDATES whose grid has a block for every unit (else
    the smallest); above, the candidate the performance model predicts fastest at a depth of MMA_PROBE_K, kept as
    `choose_tiles` keeps its choices."""
    units = handle.properties.multi_processor_count
    if m * n * k * batch <= TUNE_ABOVE:
        return next((tiles for tiles in MMA_TILES_CANDIDATES if _fills_units(tiles, m, n, batch, units)),
                    MMA_TILES_CANDIDATES[-1])
    key = (handle.properties.profile, m, n, -(-k // 256), batch, np.dtype(dtype).name, "mma")
    candidates = mma_candidates(m, n, batch, units)

    def probes():
        depth = min(k, MMA_PROBE_K)
        a, b = handle.api.device_array(m * depth * batch, dtype), handle.api.device_array(depth * n * batch, dtype)
        c = handle.api.device_array(m * n * batch, dtype)
        return lambda tiles: _launch_mma(handle, tiles, m, n, depth, 1.0, a, depth, m * depth, b, depth, n * depth,
                                         0.0, c, m, m * n, batch)
    return _autotuned(handle, key, m, n, k, candidates, _mma_name, probes, tuple, list)


def mma_candidates(m: int, n: int, batch: int, units: int) -> tuple:
    """The blocks the autotuner ranks for a matrix-unit gemm: the 256-column ones, and the narrower only where none of
    those gives every unit a block. Where one does, a narrower block only stages each operand slice more often, which
    a probe MMA_PROBE_K deep underrates: at 2048^3 on h200 it ranked 64 x 128 first, predicted 44 us at the full
    depth against 128 x 256's 23."""
    wide = tuple(tiles for tiles in MMA_TILES_CANDIDATES if tiles[1] == MMA_N_TILES)
    return wide if any(_fills_units(tiles, m, n, batch, units) for tiles in wide) else MMA_TILES_CANDIDATES


def _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                 stride_c, batch, bias=None) -> None:
    """The tiled kernel's launch (its bias argument is C itself where there is no bias: it is not read)."""
    grid_dim = (-(-m // tiles.bm), -(-n // tiles.bn), batch)
    vector_a = not ta and _vectors(fa, lda, stride_a)
    vector_b = not tb and _vectors(fb, ldb, stride_b)
    vector_c = _vectors(fc, ldc, stride_c)
    kernel = handle.gemm_kernel(tiles, vector_a, vector_b, bias is not None, vector_c, bool(ta), bool(tb))
    kernel[grid_dim, tiles.threads, handle.stream](
        *_gemm_arguments(ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc, stride_c),
        fc if bias is None else bias)


def _gemm_arguments(ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc, stride_c,
                    scalar=np.float32) -> tuple:
    """The arguments gemm_kernel, dgemm_kernel and small_gemm_kernel begin with: op(A)[i, p] = A[i a_si + p a_sp]
    and op(B)[p, j] = B[p b_sp + j b_sj] for A and B as stored, transposed or not; alpha and beta as `scalar`."""
    a_si, a_sp = (lda, 1) if ta else (1, lda)
    b_sp, b_sj = (ldb, 1) if tb else (1, ldb)
    return (np.int32(m), np.int32(n), np.int32(k), scalar(alpha), fa, np.int32(a_si), np.int32(a_sp), fb,
            np.int32(b_sp), np.int32(b_sj), scalar(beta), fc, np.int32(ldc), np.int32(stride_a), np.int32(stride_b),
            np.int32(stride_c))


def _vectors(x: DeviceNDArray, ld: int, stride: int) -> bool:
    """Whether float32 x's columns (ld apart, matrices stride apart) start on 16 bytes: read four words at a time."""
    return x.dtype == np.float32 and x.ptr % 16 == 0 and ld % 4 == 0 and stride % 4 == 0


def choose_tiles(handle: Handle, m: int, n: int, k: int, dtype) -> GemmTiles:
    """The tiling for a gemm: below TUNE_ABOVE multiply-adds, the default or a narrow tiling, whichever
    covers m x n with the fewest padded elements (the default on a tie); above, the candidate the
    Layer 0 performance model predicts fastest (cuBLAS's heuristics, made an autotuner).

    Each candidate runs once on this m x n with a depth of PROBE_K on scratch operands, timed with
    events on the handle's stream (simulated device time); the choice is kept per device profile,
    shape and dtype, so later calls of the same shape skip the probing."""
    if m * n * k <= TUNE_ABOVE:
        return min((DEFAULT_TILES, *NARROW_TILES), key=lambda t: -(-m // t.bm) * t.bm * -(-n // t.bn) * t.bn)
    key = (handle.properties.profile, m, n, -(-k // 256), np.dtype(dtype).name)

    def probes():
        depth = min(k, PROBE_K)
        a, b = handle.api.device_array(m * depth, dtype), handle.api.device_array(depth * n, dtype)
        c = handle.api.device_array(m * n, dtype)
        return lambda tiles: _launch_gemm(handle, tiles, False, False, m, n, depth, 1.0, a, m, 0, b, depth, 0, 0.0, c,
                                          m, 0, 1)
    return _autotuned(handle, key, m, n, k, TILE_CANDIDATES, str, probes, lambda stored: GemmTiles(*stored),
                      dataclasses.astuple)


def _autotuned(handle: Handle, key: tuple, m: int, n: int, k: int, candidates: tuple, name, probes, from_json,
               to_json):
    """The autotuner's choice among `candidates` for `key` (profile first): the one kept in memory, else in the
    tuning file (`from_json` turns it back), else the fastest of `probes()(candidate)` (launches on scratch operands
    that `probes` allocates) in simulated device time, kept in both (`to_json`). A `gemm_autotune` trace span ranks
    them by `name`."""
    chosen = handle.tiles.get(key)
    if chosen is None:
        stored = _stored_choice(key)
        chosen = None if stored is None else from_json(stored)
    if chosen is not None:
        handle.tiles[key] = chosen
        return chosen
    run = probes()
    with trace.span(4, "gemm_autotune", m=m, n=n, k=k, profile=key[0], candidates=len(candidates)) as info:
        timings = [(handle.device_time_ms(lambda c=c: run(c)) * 1e6, name(c), c) for c in candidates]
        chosen = handle.tiles[key] = min(timings, key=lambda t: t[0])[2]
        info.update(ranking=[(label, round(ns)) for ns, label, _ in sorted(timings, key=lambda t: t[0])],
                    chosen=name(chosen))
    _store_choice(key, to_json(chosen))
    return chosen


def _tuning_file():
    """Where the autotuner keeps its choices between runs: beside the compile cache, named by a hash of
    this module, its kernels' and the compiler, so a changed kernel or compiler tunes afresh."""
    root = cache.directory()
    if root is None:
        return None
    kernels = Path(__file__).with_name("gemm_kernels.py")
    digest = hashlib.sha256(Path(__file__).read_bytes() + kernels.read_bytes() + cache.compiler_hash().encode()
                            ).hexdigest()[:16]
    return root / f"gemm-tiles-{digest}.json"


def _stored_choice(key):
    """The autotuner's choice kept for `key` (as JSON holds it), or None."""
    path = _tuning_file()
    try:
        return json.loads(path.read_text()).get(repr(key)) if path else None
    except (OSError, ValueError):
        return None


def _store_choice(key, choice) -> None:
    path = _tuning_file()
    if path is None:
        return
    try:
        choices = json.loads(path.read_text()) if path.exists() else {}
        choices[repr(key)] = choice
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(choices, indent=1))
    except (OSError, ValueError):
        pass              # an unwritable cache costs a re-tune next run, nothing more


def gemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DeviceNDArray,
         lda: int, B: DeviceNDArray, ldb: int, beta: float, C: DeviceNDArray, ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C, column-major (cublasGemmEx): float32, float16 or bfloat16."""
    gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                         routine="gemm")


def dgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DeviceNDArray,
          lda: int, B: DeviceNDArray, ldb: int, beta: float, C: DeviceNDArray, ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C, column-major, float64 (cublasDgemm)."""
    for name, x in (("A", A), ("B", B), ("C", C)):
        if isinstance(x, DeviceNDArray) and x.dtype != np.float64:
            raise BlasError(f"dgemm: {name} must hold float64, not {x.dtype}")
    gemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)


def sgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DeviceNDArray,
          lda: int, B: DeviceNDArray, ldb: int, beta: float, C: DeviceNDArray, ldc: int,
          bias: DeviceNDArray | None = None) -> None:
    """C = alpha op(A) op(B) + beta C, column-major, float32 (cublasSgemm); with `bias`, plus bias[i] on row i of C
    (cublasLt's bias epilogue, in the same kernel)."""
    for name, x in (("A", A), ("B", B), ("C", C)):
        if isinstance(x, DeviceNDArray) and x.dtype != np.float32:
            raise BlasError(f"sgemm: {name} must hold float32, not {x.dtype} (gemm takes half types)")
    gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                         routine="sgemm", bias=bias)


def gemm_batched(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, As: list,
                 lda: int, Bs: list, ldb: int, beta: float, Cs: list, ldc: int) -> None:
    """C[z] = alpha op(A[z]) op(B[z]) + beta C[z] for lists of matrices (cublasGemmBatchedEx). Kernels
    take no arrays of pointers here, so each matrix of the batch is its own launch on the stream."""
    if not len(As) == len(Bs) == len(Cs):
        raise BlasError(f"gemm_batched: the batch lists differ in length ({len(As)}, {len(Bs)}, {len(Cs)})")
    for A, B, C in zip(As, Bs, Cs, strict=True):
        gemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)


def gemv_kernel(rows, cols, alpha, A, a_sr, a_sc, x, incx, beta, y, incy):
    # y[i] = alpha * sum_j op(A)[i, j] x[j] + beta y[i], one thread per row of op(A)
    i = cuda.grid(1)
    if i < rows:
        acc = float32(0.0)
        for j in range(cols):
            acc += float32(A[i * a_sr + j * a_sc]) * float32(x[at(j, cols, incx)])
        yi = at(i, rows, incy)
        if beta == float32(0.0):
            y[yi] = alpha * acc
        else:
            y[yi] = alpha * acc + beta * float32(y[yi])


def gemv(handle: Handle, trans: str, m: int, n: int, alpha: float, A: DeviceNDArray, lda: int, x, incx: int,
         beta: float, y, incy: int) -> None:
    """y = alpha op(A) x + beta y, A m x n column-major (cublasSgemv)."""
    t = _op(trans)
    if min(m, n) < 0:
        raise BlasError(f"gemv: m and n must be non-negative (got {m}, {n})")
    fa = _flat(A, "A", "gemv")
    _check_matrix("gemv", "A", fa, m, n, lda)
    rows, cols = (n, m) if t else (m, n)
    fx, fy = check_vector(x, "x", cols, incx), check_vector(y, "y", rows, incy)
    with trace.span(4, "gemv", trans=trans, m=m, n=n, alpha=alpha, lda=lda, incx=incx, beta=beta, incy=incy):
        if rows == 0:
            return
        a_sr, a_sc = (lda, 1) if t else (1, lda)
        handle.kernel(gemv_kernel)[-(-rows // 256), 256, handle.stream](
            np.int32(rows), np.int32(cols), np.float32(alpha), fa, np.int32(a_sr), np.int32(a_sc), fx,
            np.int32(incx), np.float32(beta), fy, np.int32(incy))
