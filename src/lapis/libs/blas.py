"""Layer 4: BLAS with cuBLAS conventions (column-major; C = alpha op(A) op(B) + beta C).

    handle = blas.create(cuda)                  # cublasCreate: bound to a device of an API
    blas.sgemm(handle, "N", "N", m, n, k, 1.0, A, lda, B, ldb, 0.0, C, ldc)

Routines: gemm (float32, float16 or bfloat16 in and out, float32 accumulation), sgemm,
gemm_strided_batched, gemm_batched, gemv, and the level-1 routines of `blas_level1.py`.

Matrices are device arrays read as flat column-major storage with leading dimensions, as
cuBLAS reads device pointers. Row-major callers (the framework) swap the operands:
row-major C = A B is column-major C^T = B^T A^T.

The gemm kernel tiles C into 64x64 blocks (grid z runs through a strided batch) computed by
256 threads; each thread keeps a 4x4 block of C in registers (a `cuda.local.array` the compiler keeps in registers) and
steps through k in slices of 16, staging a 64x16 slice of op(A) and a 16x64 slice of op(B)
in shared memory. Thread (ti, tj) owns rows ti + 16r and columns tj + 16c, so a warp's
shared-memory reads hit consecutive words and its stores of C are coalesced. The B slice is
loaded k-fastest (coalesced for column-major B), so its rows are padded by 32 // BK words: without
that, the threads storing one column would all hit the same shared-memory bank.
Half-precision inputs are widened to float32 as they are staged, so float16 and bfloat16
gemm runs on the FP32 pipes (the HMMA matrix path is not used yet). Sizes and offsets are
int32: each matrix must hold fewer than 2^31 elements.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, Stream, blockIdx, float32, local, shared, syncthreads, threadIdx
from lapis.cuda.compiler import cache
from lapis.libs.blas_level1 import BlasError, Level1, asum, at, axpy, check_vector, copy, dot, iamax, nrm2, scal, swap


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
TUNE_ABOVE = 1 << 27          # multiply-adds above which a gemm's tiles are chosen by the autotuner
PROBE_K = 64                  # the depth the autotuner runs candidates at


__all__ = ["BlasError", "GemmTiles", "Handle", "asum", "axpy", "choose_tiles", "copy", "create", "dot", "gemm",
           "gemm_batched", "gemm_strided_batched", "gemv", "iamax", "nrm2", "scal", "sgemm", "swap"]


def make_gemm_kernel(tiles: GemmTiles):
    """The gemm kernel for one tiling; the tile sizes are compile-time constants (closure variables)."""
    BM, BN, BK, TM, TN = tiles.bm, tiles.bn, tiles.bk, tiles.tm, tiles.tn
    THREADS = tiles.threads
    # A warp stores the B slice k-fastest: 32 // BK consecutive j of BK k each. Rows padded to a width
    # of 32 // BK (mod 32) put all 32 stores in different banks; at least 4, so rows stay 16-byte aligned.
    PAD = max(4, 32 // BK)
    SB_ROW = BN + PAD
    # A thread's rows of C are TM // 4 runs of four, BM // (TM // 4) apart (columns likewise), so each run
    # of a staged slice is one 128-bit shared load (an f32x4 fragment).
    RUNS_M, RUNS_N = TM // 4, TN // 4
    GAP_M, GAP_N = BM // RUNS_M, BN // RUNS_N
    A_STEPS, B_STEPS = BM * BK // THREADS, BK * BN // THREADS

    def gemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc, stride_a, stride_b, stride_c):
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
            b_off[step] = zb + e % BK * b_sp + (j0 + e // BK) * b_sj
        inside = i0 + BM <= m and j0 + BN <= n
        va = local.array(A_STEPS, float32)
        vb = local.array(B_STEPS, float32)
        # Trip p1 stores the slice loaded in the trip before (p1 - BK) to shared memory, loads slice p1 from
        # global memory into registers, then computes on the stored slice: the loads are in flight while the
        # FFMAs run (register prefetch), instead of stalling the stores behind them.
        for p1 in range(0, k + BK, BK):
            if p1 > 0:
                for step in range(A_STEPS):
                    e = tx + step * THREADS
                    sA[e // BM * BM + e % BM] = va[step]
                for step in range(B_STEPS):
                    e = tx + step * THREADS
                    sB[e % BK * SB_ROW + e // BK] = vb[step]
                syncthreads()
            if inside and p1 + BK <= k:
                for step in range(A_STEPS):
                    va[step] = float32(A[a_off[step] + p1 * a_sp])
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
                    if p1 + e % BK < k and j0 + e // BK < n:
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
            for c in range(TN):
                i = i0 + ti + r // 4 * GAP_M + r % 4
                j = j0 + tj + c // 4 * GAP_N + c % 4
                if i < m and j < n:
                    if beta == float32(0.0):
                        C[zc + i + j * ldc] = alpha * acc[r, c]
                    else:
                        C[zc + i + j * ldc] = alpha * acc[r, c] + beta * float32(C[zc + i + j * ldc])
    return gemm_kernel


MMA_M_TILES, MMA_DEPTH = 2, 32      # the matrix-unit gemm: 64x128 tiles of C, k in slices of 32 halves
MMA_ROWS, MMA_COLS = 32 * MMA_M_TILES, 128


def make_mma_gemm_kernel(kind, m_tiles: int = MMA_M_TILES):
    """The matrix-unit gemm kernel for one half type (cuda.float16 or cuda.bfloat16), each warp computing
    m_tiles x 8 tiles of 16x8 (so a block computes 32 m_tiles x 128 of C)."""
    KIND = kind
    MT = m_tiles
    ROWS = 32 * MT
    A_STEPS = ROWS * 16 // 128

    def mma_gemm_kernel(m, n, k, alpha, A, lda2, stride_a2, B, ldb2, stride_b2, beta, C, ldc, stride_c):
        # C = alpha op(A) op(B) + beta C with half inputs on the matrix unit (HMMA), for op(A) = A^T and
        # op(B) = B, both k-contiguous, read as uint32 words of two halves: op(A)[i, 2q:2q+2] =
        # A[q + i * lda2], op(B)[2q:2q+2, j] = B[q + j * ldb2]. Four warps in a 2 x 2 grid, each MT x 8
        # HMMA tiles of 16x8. Staged slices are stored in fragment order, so each lane's fragment is one
        # 128-bit (A) or 64-bit (B) shared load.
        sA = shared.array(ROWS * 16, np.uint32)    # [m16 tile][k16 step][lane][4 words]
        sB = shared.array(2048, np.uint32)         # [n8 tile][k16 step][lane][2 words]
        acc = local.array(MT * 8, cuda.mma.f32x4)  # [m16 tile of the warp * 8 + n8 tile of the warp]
        af = local.array(MT, cuda.mma.u32x4)
        tid = threadIdx.x
        lane = tid % 32
        wm = tid // 32 % 2
        wn = tid // 64
        i0 = blockIdx.x * ROWS
        j0 = blockIdx.y * 128
        za = blockIdx.z * stride_a2
        zb = blockIdx.z * stride_b2
        zc = blockIdx.z * stride_c
        for mt in range(MT):
            for nt in range(8):
                acc[mt * 8 + nt] = cuda.mma.zeros()
        # Thread tid stages words q = tid % 16 of rows (columns) tid // 16 + 8 step; in fragment order that
        # is a fixed base plus a step-dependent constant, so staging costs a load, a store and a test.
        q = tid % 16
        r0 = tid // 16
        a_base = ((q // 8) * 32 + r0 * 4 + q % 4) * 4 + 2 * (q % 8 // 4)
        b_base = ((q // 8) * 32 + r0 * 4 + q % 4) * 2 + q % 8 // 4
        a_src = za + q + (i0 + r0) * lda2
        b_src = zb + q + (j0 + r0) * ldb2
        for k0 in range(0, k // 2, 16):
            for step in range(A_STEPS):            # ROWS rows x 16 words of op(A)
                word = np.uint32(0)
                if i0 + r0 + 8 * step < m:
                    word = A[a_src + k0 + 8 * step * lda2]
                sA[a_base + step // 2 * 256 + step % 2] = word
            for step in range(16):                 # and 16 words x 128 columns of op(B)
                word = np.uint32(0)
                if j0 + r0 + 8 * step < n:
                    word = B[b_src + k0 + 8 * step * ldb2]
                sB[b_base + step * 128] = word
            syncthreads()
            for ks in range(2):
                for mt in range(MT):
                    af[mt] = cuda.mma.load(sA, (((wm * MT + mt) * 2 + ks) * 32 + lane) * 4, 4)
                for nt in range(8):
                    b = cuda.mma.load(sB, (((wn * 8 + nt) * 2 + ks) * 32 + lane) * 2, 2)
                    for mt in range(MT):
                        acc[mt * 8 + nt] = cuda.mma.mma_sync(af[mt], b, acc[mt * 8 + nt], KIND)
            syncthreads()
        g = lane // 4
        t = lane % 4
        for mt in range(MT):
            for nt in range(8):
                for r in range(4):
                    i = i0 + (wm * MT + mt) * 16 + g + 8 * (r // 2)
                    j = j0 + (wn * 8 + nt) * 8 + 2 * t + r % 2
                    if i < m and j < n:
                        v = cuda.mma.get(acc[mt * 8 + nt], r)
                        if beta == float32(0.0):
                            C[zc + i + j * ldc] = alpha * v
                        else:
                            C[zc + i + j * ldc] = alpha * v + beta * float32(C[zc + i + j * ldc])
    return mma_gemm_kernel


class Handle:
    """A cuBLAS-style handle: the API (lapis.cuda or lapis.hip) and device its routines run on."""

    def __init__(self, api, device: int = 0):
        self.api = api
        self.device = device
        self.kernels: dict[GemmTiles, object] = {}
        self.tiles: dict[tuple, GemmTiles] = {}        # the autotuner's choices, by profile and shape
        self.gemv_kernel = api.jit(gemv_kernel)
        self.mma_kernels = {np.dtype(t).name: api.jit(make_mma_gemm_kernel(t)) for t in (cuda.float16, cuda.bfloat16)}
        self.level1 = Level1(api)

    @property
    def context(self):
        return self.api.current_context(self.device)

    def gemm_kernel(self, tiles: GemmTiles):
        kernel = self.kernels.get(tiles)
        if kernel is None:
            kernel = self.kernels[tiles] = self.api.jit(make_gemm_kernel(tiles))
        return kernel

    @property
    def stream(self):
        return Stream(self.context)


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


GEMM_DTYPES = (np.float32, np.float16, "bfloat16")


def _flat(x: DeviceNDArray, name: str, routine: str = "sgemm") -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise BlasError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype.name not in ("float32", "float16", "bfloat16"):
        raise BlasError(f"{routine}: {name} must hold float32, float16 or bfloat16, not {x.dtype}")
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        raise BlasError(f"{routine}: {name} must be contiguous storage")
    return DeviceNDArray((x.size,), (x.dtype.itemsize,), x.dtype, x.context, x.memory, x.ptr)


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
                         routine: str = "gemm_strided_batched") -> None:
    """C_z = alpha op(A_z) op(B_z) + beta C_z for z < batch, column-major, A_z at A + z * stride_a
    (cublasGemmStridedBatchedEx): float32, float16 or bfloat16 inputs and outputs, float32 accumulation."""
    ta, tb = _op(transa), _op(transb)
    if min(m, n, k, batch) < 0:
        raise BlasError(f"{routine}: m, n, k and the batch must be non-negative (got {m}, {n}, {k}, {batch})")
    fa, fb, fc = _flat(A, "A", routine), _flat(B, "B", routine), _flat(C, "C", routine)
    if fa.dtype != fb.dtype:
        raise BlasError(f"{routine}: A and B must share a dtype, got {fa.dtype} and {fb.dtype}")
    _check_matrix(routine, "A", fa, k if ta else m, m if ta else k, lda, batch, stride_a)
    _check_matrix(routine, "B", fb, n if tb else k, k if tb else n, ldb, batch, stride_b)
    _check_matrix(routine, "C", fc, m, n, ldc, batch, stride_c)
    if _matrix_unit_fits(ta, tb, k, fa, lda, stride_a, fb, ldb, stride_b):
        with trace.span(4, routine, transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                        beta=beta, ldc=ldc, batch=batch, dtype=str(fa.dtype), device=str(handle.context.device),
                        kernel="mma_gemm_kernel", tile=f"{MMA_ROWS}x{MMA_COLS}x{MMA_DEPTH} on the matrix unit"):
            if m and n and batch:
                words = [DeviceNDArray((x.size // 2,), (4,), np.uint32, x.context, x.memory, x.ptr) for x in (fa, fb)]
                handle.mma_kernels[fa.dtype.name][(-(-m // MMA_ROWS), -(-n // MMA_COLS), batch), 128, handle.stream](
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
        _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                     stride_c, batch)


def _matrix_unit_fits(ta, tb, k, fa, lda, stride_a, fb, ldb, stride_b) -> bool:
    """Whether the HMMA kernel takes this gemm: half inputs, both operands k-contiguous (op(A) = A^T,
    op(B) = B), k a multiple of the 32-deep slices, and every operand 4-byte aligned so its halves
    pair up into words."""
    return (fa.dtype.name in ("float16", "bfloat16") and ta and not tb and k > 0 and k % MMA_DEPTH == 0
            and all(v % 2 == 0 for v in (lda, ldb, stride_a, stride_b)) and fa.ptr % 4 == 0 and fb.ptr % 4 == 0)


def _launch_gemm(handle, tiles, ta, tb, m, n, k, alpha, fa, lda, stride_a, fb, ldb, stride_b, beta, fc, ldc,
                 stride_c, batch) -> None:
    a_si, a_sp = (lda, 1) if ta else (1, lda)
    b_sp, b_sj = (ldb, 1) if tb else (1, ldb)
    grid_dim = (-(-m // tiles.bm), -(-n // tiles.bn), batch)
    handle.gemm_kernel(tiles)[grid_dim, tiles.threads, handle.stream](
        np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), fa, np.int32(a_si), np.int32(a_sp), fb,
        np.int32(b_sp), np.int32(b_sj), np.float32(beta), fc, np.int32(ldc), np.int32(stride_a),
        np.int32(stride_b), np.int32(stride_c))


def choose_tiles(handle: Handle, m: int, n: int, k: int, dtype) -> GemmTiles:
    """The tiling for a gemm: below TUNE_ABOVE multiply-adds, the default; above, the candidate the
    Layer 0 performance model predicts fastest (cuBLAS's heuristics, made an autotuner).

    Each candidate runs once on this m x n with a depth of PROBE_K on scratch operands, and the
    kernel's simulated time (from the kernel trace event) ranks it; the choice is kept per device
    profile, shape and dtype, so later calls of the same shape skip the probing."""
    if m * n * k <= TUNE_ABOVE:
        return DEFAULT_TILES
    profile = handle.context.device.profile
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
            with trace() as probe:
                _launch_gemm(handle, tiles, False, False, m, n, depth, 1.0, a, m, 0, b, depth, 0, 0.0, c, m, 0, 1)
                handle.context.synchronize()
            kernel = probe.select(0, "kernel")[-1].args
            timings.append((kernel["duration_ns"], str(tiles), tiles))
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


def sgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DeviceNDArray,
          lda: int, B: DeviceNDArray, ldb: int, beta: float, C: DeviceNDArray, ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C, column-major, float32 (cublasSgemm)."""
    for name, x in (("A", A), ("B", B), ("C", C)):
        if isinstance(x, DeviceNDArray) and x.dtype != np.float32:
            raise BlasError(f"sgemm: {name} must hold float32, not {x.dtype} (gemm takes half types)")
    gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                         routine="sgemm")


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
        handle.gemv_kernel[-(-rows // 256), 256, handle.stream](
            np.int32(rows), np.int32(cols), np.float32(alpha), fa, np.int32(a_sr), np.int32(a_sc), fx,
            np.int32(incx), np.float32(beta), fy, np.int32(incy))
