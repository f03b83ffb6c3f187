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

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, float32, float64, local, shared, syncthreads, threadIdx
from lapis.cuda.compiler import cache
from lapis.libs.blas_level1 import BlasError, asum, at, axpy, check_vector, copy, dot, iamax, nrm2, scal, swap
from lapis.libs.handle import LibraryHandle


@dataclass(frozen=True)
class GemmTiles:
    """A gemm kernel's tiling: a bm x bn tile of C per block, k in slices of bk, tm x tn per thread."""
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}, {self.tm}x{self.tn} per thread"


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


__all__ = ["BlasError", "GemmTiles", "Handle", "asum", "axpy", "choose_tiles", "copy", "create", "dgemm", "dot", "gemm",
           "gemm_batched", "gemm_strided_batched", "gemv", "iamax", "nrm2", "scal", "sgemm", "swap"]


def make_gemm_kernel(tiles: GemmTiles, vector_a: bool = False, vector_b: bool = False, with_bias: bool = False):
    """The gemm kernel for one tiling; the tile sizes are compile-time constants (closure variables).

    With `vector_a` (float32 op(A) = A, column-major: a_si = 1, each slice's columns 16-byte aligned) a block whose
    tile lies inside C stages A four rows at a time with 128-bit loads, as CUDA kernels read a float4; with
    `vector_b` (op(B) = B: b_sp = 1) likewise four k of B, where slices are 8 deep. An operand whose slice has
    fewer such vectors than the block has threads keeps word loads. With `with_bias`, the epilogue adds bias[i] to
    row i of C (cublasLt's bias epilogue); without, the kernel does not read its bias argument."""
    BM, BN, BK, TM, TN = tiles.bm, tiles.bn, tiles.bk, tiles.tm, tiles.tn
    THREADS = tiles.threads
    # A's vectors are stored whole (STS.128); B's are transposed, a word to each of four rows of the slice, which
    # only slices of 8 k keep free of bank conflicts (lanes 16 columns apart fall 16 banks apart).
    VEC_A = vector_a and BM * BK % (4 * THREADS) == 0
    VEC_B = vector_b and BK * BN % (4 * THREADS) == 0 and BK == 8
    A_VSTEPS, B_VSTEPS = BM * BK // (4 * THREADS), BK * BN // (4 * THREADS)
    A_VREGS, B_VREGS = max(A_VSTEPS, 1), max(B_VSTEPS, 1)
    # A thread stages B's elements e = tx + step * THREADS k-fastest, in groups of KG = min(BK, 8) k (one 32-byte
    # sector of a column of column-major B): element e is k = e // (KG * BN) * KG + e % KG of column e // KG % BN,
    # so a warp stores KG k of 32 // KG columns. Rows padded to 32 // KG words (mod 32; at least 4, so they stay
    # 16-byte aligned for the 128-bit reads) put its 32 stores in 32 banks.
    KG = min(BK, 8)
    PAD = max(4, 32 // KG)
    SB_ROW = BN + PAD
    # A thread's rows of C are TM // 4 runs of four, BM // (TM // 4) apart (columns likewise), so each run
    # of a staged slice is one 128-bit shared load (an f32x4 fragment).
    RUNS_M, RUNS_N = TM // 4, TN // 4
    GAP_M, GAP_N = BM // RUNS_M, BN // RUNS_N
    A_STEPS, B_STEPS = BM * BK // THREADS, BK * BN // THREADS

    def gemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc, stride_a, stride_b, stride_c, bias):
        # op(A)[i, p] = A[i * a_si + p * a_sp];  op(B)[p, j] = B[p * b_sp + j * b_sj];  C[i + j * ldc];
        # matrix number blockIdx.z of a strided batch starts stride_a, stride_b, stride_c elements further.
        # Half-precision inputs are widened to float32 as they enter shared memory (fp32 accumulation).
        sA = shared.array(BK * BM, float32)           # sA[p * BM + i]
        sB = shared.array(BK * SB_ROW, float32)       # sB[p * SB_ROW + j], padded against bank conflicts
        acc = local.array((TM, TN), float32)
        a = local.array(TM, float32)
        b = local.array(TN, float32)
        tx = threadIdx.x
        ti = tx % (BM // TM) * 4
        tj = tx // (BM // TM) * 4
        i0 = blockIdx.x * BM
        j0 = blockIdx.y * BN
        za = blockIdx.z * stride_a
        zb = blockIdx.z * stride_b
        zc = blockIdx.z * stride_c
        for r in range(TM):
            for c in range(TN):
                acc[r, c] = float32(0.0)
        # This thread stages elements e = tx + step * THREADS of each slice; their offsets in A and B
        # at p = 0 are fixed, so slice p1 adds p1 times one stride. Blocks whose tile lies inside C
        # stage whole slices without bounds tests (every block but the edges).
        a_off = local.array(A_STEPS, np.int32)
        b_off = local.array(B_STEPS, np.int32)
        for step in range(A_STEPS):
            e = tx + step * THREADS
            a_off[step] = za + (i0 + e % BM) * a_si + e // BM * a_sp
        for step in range(B_STEPS):
            e = tx + step * THREADS
            b_off[step] = zb + (e // (KG * BN) * KG + e % KG) * b_sp + (j0 + e // KG % BN) * b_sj
        # Vector v = tx + step * THREADS of a slice is A's rows 4 (v % (BM / 4)) .. + 3 at k = v // (BM / 4), and
        # B's k 4 (v % (BK / 4)) .. + 3 at column v // (BK / 4).
        a_voff = local.array(A_VREGS, np.int32)
        b_voff = local.array(B_VREGS, np.int32)
        if VEC_A:
            for step in range(A_VSTEPS):
                v = tx + step * THREADS
                a_voff[step] = za + i0 + v % (BM // 4) * 4 + v // (BM // 4) * a_sp
        if VEC_B:
            for step in range(B_VSTEPS):
                v = tx + step * THREADS
                b_voff[step] = zb + v % (BK // 4) * 4 + (j0 + v // (BK // 4)) * b_sj
        inside = i0 + BM <= m and j0 + BN <= n
        va = local.array(A_STEPS, float32)
        vb = local.array(B_STEPS, float32)
        fa = local.array(A_VREGS, cuda.mma.f32x4)
        fb = local.array(B_VREGS, cuda.mma.f32x4)
        vectors = False                               # whether the slice in registers came in vectors
        # Trip p1 stores the slice loaded in the trip before (p1 - BK) to shared memory, loads slice p1 from
        # global memory into registers, then computes on the stored slice: the loads are in flight while the
        # FFMAs run (register prefetch), instead of stalling the stores behind them.
        for p1 in range(0, k + BK, BK):
            if p1 > 0:
                if VEC_A and vectors:
                    for step in range(A_VSTEPS):
                        v = tx + step * THREADS
                        cuda.mma.store(sA, v // (BM // 4) * BM + v % (BM // 4) * 4, fa[step])
                else:
                    for step in range(A_STEPS):
                        e = tx + step * THREADS
                        sA[e // BM * BM + e % BM] = va[step]
                if VEC_B and vectors:
                    for step in range(B_VSTEPS):
                        v = tx + step * THREADS
                        for q in range(4):
                            sB[(v % (BK // 4) * 4 + q) * SB_ROW + v // (BK // 4)] = cuda.mma.get(fb[step], q)
                else:
                    for step in range(B_STEPS):
                        e = tx + step * THREADS
                        sB[(e // (KG * BN) * KG + e % KG) * SB_ROW + e // KG % BN] = vb[step]
                syncthreads()
            vectors = inside and p1 + BK <= k
            if vectors:
                if VEC_A:
                    for step in range(A_VSTEPS):
                        fa[step] = cuda.mma.load(A, a_voff[step] + p1 * a_sp, 4)
                else:
                    for step in range(A_STEPS):
                        va[step] = float32(A[a_off[step] + p1 * a_sp])
                if VEC_B:
                    for step in range(B_VSTEPS):
                        fb[step] = cuda.mma.load(B, b_voff[step] + p1, 4)
                else:
                    for step in range(B_STEPS):
                        vb[step] = float32(B[b_off[step] + p1 * b_sp])
            elif p1 < k:
                for step in range(A_STEPS):
                    e = tx + step * THREADS
                    va[step] = float32(0.0)
                    if i0 + e % BM < m and p1 + e // BM < k:
                        va[step] = float32(A[a_off[step] + p1 * a_sp])
                for step in range(B_STEPS):
                    e = tx + step * THREADS
                    vb[step] = float32(0.0)
                    if p1 + e // (KG * BN) * KG + e % KG < k and j0 + e // KG % BN < n:
                        vb[step] = float32(B[b_off[step] + p1 * b_sp])
            if p1 > 0:
                for pp in range(BK):
                    for h in range(RUNS_M):
                        run = cuda.mma.load(sA, pp * BM + ti + h * GAP_M, 4)
                        for q in range(4):
                            a[h * 4 + q] = cuda.mma.get(run, q)
                    for h in range(RUNS_N):
                        run = cuda.mma.load(sB, pp * SB_ROW + tj + h * GAP_N, 4)
                        for q in range(4):
                            b[h * 4 + q] = cuda.mma.get(run, q)
                    for r in range(TM):
                        for c in range(TN):
                            acc[r, c] += a[r] * b[c]
                syncthreads()
        for r in range(TM):
            i = i0 + ti + r // 4 * GAP_M + r % 4
            row_bias = float32(0.0)                   # the row's bias, loaded once for its TN columns
            if with_bias and i < m:
                row_bias = float32(bias[i])
            for c in range(TN):
                j = j0 + tj + c // 4 * GAP_N + c % 4
                if i < m and j < n:
                    value = alpha * acc[r, c]
                    if with_bias:
                        value += row_bias
                    if beta == float32(0.0):
                        C[zc + i + j * ldc] = value
                    else:
                        C[zc + i + j * ldc] = value + beta * float32(C[zc + i + j * ldc])
    return gemm_kernel


MMA_M_TILES, MMA_N_TILES, MMA_DEPTH = 4, 8, 32   # the matrix-unit gemm: per warp 4 x 8 HMMA tiles of 16x8
MMA_THREADS = 256                                # eight warps, two down and four across
MMA_ROWS, MMA_COLS = 2 * 16 * MMA_M_TILES, 4 * 8 * MMA_N_TILES
MMA_SHARED_BYTES = (MMA_ROWS + MMA_COLS) * 16 * 4  # one slice of each operand, 16 words deep


def make_mma_gemm_kernel(kind, m_tiles: int = MMA_M_TILES):
    """The matrix-unit gemm kernel for one half type (cuda.float16 or cuda.bfloat16): eight warps in a
    2 x 4 grid, each computing m_tiles x 8 HMMA tiles of 16x8, so a block computes 32 m_tiles x 256 of C."""
    KIND = kind
    MT, NT = m_tiles, MMA_N_TILES
    ROWS, COLS = 32 * MT, 32 * NT
    A_STEPS, B_STEPS = ROWS // 16, COLS // 16       # a step stages 16 rows (columns) x 16 words

    def mma_gemm_kernel(m, n, k, alpha, A, lda2, stride_a2, B, ldb2, stride_b2, beta, C, ldc, stride_c):
        # C = alpha op(A) op(B) + beta C with half inputs on the matrix unit (HMMA), for op(A) = A^T and
        # op(B) = B, both k-contiguous, read as uint32 words of two halves: op(A)[i, 2q:2q+2] =
        # A[q + i * lda2], op(B)[2q:2q+2, j] = B[q + j * ldb2]. k advances in slices of 16 words (32
        # halves, two HMMA k-steps). Staged slices are stored in fragment order, so each lane's fragment
        # is one 128-bit (A) or 64-bit (B) shared load.
        sA = shared.array(ROWS * 16, np.uint32)    # [m16 tile][k16 step][lane][4 words]
        sB = shared.array(COLS * 16, np.uint32)    # [n8 tile][k16 step][lane][2 words]
        acc = local.array(MT * NT, cuda.mma.f32x4)  # [m16 tile of the warp * NT + n8 tile of the warp]
        af = local.array(MT, cuda.mma.u32x4)
        bf = local.array(NT, cuda.mma.u32x2)
        va = local.array(A_STEPS, np.uint32)
        vb = local.array(B_STEPS, np.uint32)
        tid = threadIdx.x
        lane = tid % 32
        w = tid // 32
        wm = w % 2
        wn = w // 2
        i0 = blockIdx.x * ROWS
        j0 = blockIdx.y * COLS
        za = blockIdx.z * stride_a2
        zb = blockIdx.z * stride_b2
        zc = blockIdx.z * stride_c
        for mt in range(MT):
            for nt in range(NT):
                acc[mt * NT + nt] = cuda.mma.zeros()
        # Staging: this thread moves word q of row (column) r of each 16-row (16-column) step. A warp takes
        # q = 0..7 of four rows, whose fragment-order slots fall in 32 different banks, so its stores are
        # conflict-free; its loads read 32 contiguous bytes of each of the four rows.
        q = lane % 8 + 8 * (w % 2)
        ra = lane // 8 % 2 + 2 * (w // 2 % 4) + 8 * (lane // 16)       # row within the 16: g + 8 * upper half
        cb = lane // 8 + 4 * (w // 2 % 2) + 8 * (w // 4)               # column within the 16
        a_slot = (q // 8) * 128 + (ra % 8 * 4 + q % 4) * 4 + 2 * (q % 8 // 4) + ra // 8
        b_slot = (cb // 8) * 128 + (q // 8) * 64 + (cb % 8 * 4 + q % 4) * 2 + q % 8 // 4
        a_src = za + q + (i0 + ra) * lda2
        b_src = zb + q + (j0 + cb) * ldb2
        inside = i0 + ROWS <= m and j0 + COLS <= n
        a_frag = wm * MT * 256 + lane * 4              # this lane's fragments: a register base plus constants
        b_frag = wn * NT * 128 + lane * 2
        # Trip k1 stores the slice loaded in the trip before to shared memory, loads slice k1 into
        # registers, then runs the HMMAs of the stored slice while those loads are in flight.
        for k1 in range(0, k // 2 + 16, 16):
            if k1 > 0:
                for step in range(A_STEPS):
                    sA[a_slot + step * 256] = va[step]
                for step in range(B_STEPS):
                    sB[b_slot + step * 256] = vb[step]
                syncthreads()
            if k1 < k // 2:
                if inside:
                    for step in range(A_STEPS):
                        va[step] = A[a_src + k1 + 16 * step * lda2]
                    for step in range(B_STEPS):
                        vb[step] = B[b_src + k1 + 16 * step * ldb2]
                else:
                    for step in range(A_STEPS):
                        va[step] = np.uint32(0)
                        if i0 + ra + 16 * step < m:
                            va[step] = A[a_src + k1 + 16 * step * lda2]
                    for step in range(B_STEPS):
                        vb[step] = np.uint32(0)
                        if j0 + cb + 16 * step < n:
                            vb[step] = B[b_src + k1 + 16 * step * ldb2]
            if k1 > 0:
                for ks in range(2):
                    for mt in range(MT):
                        af[mt] = cuda.mma.load(sA, a_frag + (mt * 2 + ks) * 128, 4)
                    for nt in range(NT):                   # every fragment first: no HMMA waits on a load
                        bf[nt] = cuda.mma.load(sB, b_frag + (nt * 2 + ks) * 64, 2)
                    for nt in range(NT):
                        for mt in range(MT):
                            acc[mt * NT + nt] = cuda.mma.mma_sync(af[mt], bf[nt], acc[mt * NT + nt], KIND)
                syncthreads()
        g = lane // 4
        t = lane % 4
        for mt in range(MT):
            for nt in range(NT):
                for r in range(4):
                    i = i0 + (wm * MT + mt) * 16 + g + 8 * (r // 2)
                    j = j0 + (wn * NT + nt) * 8 + 2 * t + r % 2
                    if i < m and j < n:
                        v = cuda.mma.get(acc[mt * NT + nt], r)
                        if beta == float32(0.0):
                            C[zc + i + j * ldc] = alpha * v
                        else:
                            C[zc + i + j * ldc] = alpha * v + beta * float32(C[zc + i + j * ldc])
    return mma_gemm_kernel


DGEMM_TILE = 16         # the float64 kernel's block: DGEMM_TILE x DGEMM_TILE threads, one element of C each


def dgemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc, stride_a, stride_b, stride_c):
    # op(A)[i, p] = A[i * a_si + p * a_sp];  op(B)[p, j] = B[p * b_sp + j * b_sj];  C[i + j * ldc], as gemm_kernel
    sA = shared.array((DGEMM_TILE, DGEMM_TILE), float64)      # sA[i, p] of the slice
    sB = shared.array((DGEMM_TILE, DGEMM_TILE), float64)      # sB[p, j]
    ti, tj = threadIdx.x, threadIdx.y
    i = blockIdx.x * DGEMM_TILE + ti
    j = blockIdx.y * DGEMM_TILE + tj
    za, zb, zc = blockIdx.z * stride_a, blockIdx.z * stride_b, blockIdx.z * stride_c
    acc = float64(0.0)
    for p0 in range(0, k, DGEMM_TILE):
        # thread (ti, tj) stages op(A)[i, p0 + tj] and op(B)[p0 + ti, j], zero past the edges
        sA[ti, tj] = float64(0.0)
        if i < m and p0 + tj < k:
            sA[ti, tj] = A[za + i * a_si + (p0 + tj) * a_sp]
        sB[ti, tj] = float64(0.0)
        if p0 + ti < k and j < n:
            sB[ti, tj] = B[zb + (p0 + ti) * b_sp + j * b_sj]
        syncthreads()
        for p in range(DGEMM_TILE):
            acc += sA[ti, p] * sB[p, tj]
        syncthreads()
    if i < m and j < n:
        if beta == float64(0.0):
            C[zc + i + j * ldc] = alpha * acc
        else:
            C[zc + i + j * ldc] = alpha * acc + beta * C[zc + i + j * ldc]


class Handle(LibraryHandle):
    """A cuBLAS-style handle: the API (lapis.cuda or lapis.hip), device and stream its routines run on."""

    def __init__(self, api, device: int = 0):
        super().__init__(api, device)
        self.tiled_kernels: dict[tuple, object] = {}    # by (tiles, vector_a, vector_b, with_bias)
        self.tiles: dict[tuple, GemmTiles] = {}        # the autotuner's choices, by profile and shape
        self.mma_kernels = {np.dtype(t).name: api.jit(make_mma_gemm_kernel(t)) for t in (cuda.float16, cuda.bfloat16)}
        self.workspace: DeviceNDArray | None = None     # split-K's partial products, grown as needed
        self.dgemm = api.jit(dgemm_kernel)

    def gemm_kernel(self, tiles: GemmTiles, vector_a: bool = False, vector_b: bool = False, with_bias: bool = False):
        key = (tiles, vector_a, vector_b, with_bias)
        kernel = self.tiled_kernels.get(key)
        if kernel is None:
            kernel = self.tiled_kernels[key] = self.api.jit(make_gemm_kernel(*key))
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
    if fa.dtype == np.float64:
        with trace.span(4, routine, transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                        beta=beta, ldc=ldc, batch=batch, dtype="float64", device=str(handle.context.device),
                        kernel="dgemm_kernel", tile=f"{DGEMM_TILE}x{DGEMM_TILE}x{DGEMM_TILE}"):
            if m and n and batch:
                a_si, a_sp = (lda, 1) if ta else (1, lda)
                b_sp, b_sj = (ldb, 1) if tb else (1, ldb)
                handle.dgemm[(-(-m // DGEMM_TILE), -(-n // DGEMM_TILE), batch), (DGEMM_TILE, DGEMM_TILE),
                             handle.stream](
                    np.int32(m), np.int32(n), np.int32(k), np.float64(alpha), fa, np.int32(a_si), np.int32(a_sp), fb,
                    np.int32(b_sp), np.int32(b_sj), np.float64(beta), fc, np.int32(ldc), np.int32(stride_a),
                    np.int32(stride_b), np.int32(stride_c))
        return
    if _matrix_unit_fits(handle, ta, tb, k, fa, lda, stride_a, fb, ldb, stride_b):
        with trace.span(4, routine, transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                        beta=beta, ldc=ldc, batch=batch, dtype=str(fa.dtype), device=str(handle.context.device),
                        kernel="mma_gemm_kernel", tile=f"{MMA_ROWS}x{MMA_COLS}x{MMA_DEPTH} on the matrix unit"):
            if m and n and batch:
                words = [x[:x.size // 2 * 2].view(np.uint32) for x in (fa, fb)]     # the halves in pairs
                handle.mma_kernels[fa.dtype.name][(-(-m // MMA_ROWS), -(-n // MMA_COLS), batch), MMA_THREADS,
                                                  handle.stream](
                    np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), words[0], np.int32(lda // 2),
                    np.int32(stride_a // 2), words[1], np.int32(ldb // 2), np.int32(stride_b // 2),
                    np.float32(beta), fc, np.int32(ldc), np.int32(stride_c))
        return
    tiles = choose_tiles(handle, m, n, k, fa.dtype)
    with trace.span(4, routine, transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                    beta=beta, ldc=ldc, batch=batch, dtype=str(fa.dtype), device=str(handle.context.device),
                    kernel="gemm_kernel", tile=str(tiles)):
        if m == 0 or n == 0 or batch == 0:
            return
        splits = _split_k(tiles, m, n, k, batch, fc.dtype)
        if splits > 1:
            _launch_split_k(handle, tiles, splits, ta, tb, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc, bias)
            return
        _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                     stride_c, batch, bias)


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
    return (fa.dtype.name in ("float16", "bfloat16") and ta and not tb and k > 0 and k % MMA_DEPTH == 0
            and handle.properties.shared_memory_per_block >= MMA_SHARED_BYTES
            and all(v % 2 == 0 for v in (lda, ldb, stride_a, stride_b)) and fa.ptr % 4 == 0 and fb.ptr % 4 == 0)


def _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                 stride_c, batch, bias=None) -> None:
    """The tiled kernel's launch (its bias argument is C itself where there is no bias: it is not read)."""
    a_si, a_sp = (lda, 1) if ta else (1, lda)
    b_sp, b_sj = (ldb, 1) if tb else (1, ldb)
    grid_dim = (-(-m // tiles.bm), -(-n // tiles.bn), batch)
    vector_a = not ta and _vectors(fa, lda, stride_a)
    vector_b = not tb and _vectors(fb, ldb, stride_b)
    handle.gemm_kernel(tiles, vector_a, vector_b, bias is not None)[grid_dim, tiles.threads, handle.stream](
        np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), fa, np.int32(a_si), np.int32(a_sp), fb,
        np.int32(b_sp), np.int32(b_sj), np.float32(beta), fc, np.int32(ldc), np.int32(stride_a),
        np.int32(stride_b), np.int32(stride_c), fc if bias is None else bias)


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
    profile = handle.properties.profile
    key = (profile, m, n, -(-k // 256), np.dtype(dtype).name)
    chosen = handle.tiles.get(key) or _stored_choice(key)
    if chosen is not None:
        handle.tiles[key] = chosen
        return chosen
    depth = min(k, PROBE_K)
    a, b = handle.api.device_array(m * depth, dtype), handle.api.device_array(depth * n, dtype)
    c = handle.api.device_array(m * n, dtype)
    timings = []
    with trace.span(4, "gemm_autotune", m=m, n=n, k=k, profile=profile, candidates=len(TILE_CANDIDATES)) as info:
        for tiles in TILE_CANDIDATES:
            ms = handle.device_time_ms(lambda tiles=tiles: _launch_gemm(handle, tiles, False, False, m, n, depth, 1.0,
                                                                         a, m, 0, b, depth, 0, 0.0, c, m, 0, 1))
            timings.append((ms * 1e6, str(tiles), tiles))
        chosen = handle.tiles[key] = min(timings, key=lambda t: t[0])[2]
        info.update(ranking=[(name, round(ns)) for ns, name, _ in sorted(timings, key=lambda t: t[0])],
                    chosen=str(chosen))
    _store_choice(key, chosen)
    return chosen


def _tuning_file():
    """Where the autotuner keeps its choices between runs: beside the compile cache, named by a hash of
    this module and the compiler, so a changed kernel or compiler tunes afresh."""
    root = cache.directory()
    if root is None:
        return None
    digest = hashlib.sha256(Path(__file__).read_bytes() + cache.compiler_hash().encode()).hexdigest()[:16]
    return root / f"gemm-tiles-{digest}.json"


def _stored_choice(key) -> GemmTiles | None:
    path = _tuning_file()
    try:
        entry = json.loads(path.read_text()).get(repr(key)) if path else None
    except (OSError, ValueError):
        return None
    return GemmTiles(*entry) if entry else None


def _store_choice(key, tiles: GemmTiles) -> None:
    path = _tuning_file()
    if path is None:
        return
    try:
        choices = json.loads(path.read_text()) if path.exists() else {}
        choices[repr(key)] = [tiles.bm, tiles.bn, tiles.bk, tiles.tm, tiles.tn]
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
