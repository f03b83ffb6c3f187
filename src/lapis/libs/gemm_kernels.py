"""Layer 4, BLAS: the gemm kernels, written in the kernel language (what `blas.py`'s routines launch; its
docstring says how each works and when each runs): `make_gemm_kernel`, the register-tiled float32-pipe kernel of
one `GemmTiles` tiling (with 128-bit staging and a bias epilogue as variants); `make_mma_gemm_kernel`, the
matrix-unit kernel for half inputs; `dgemm_kernel`, float64's."""

from dataclasses import dataclass

import numpy as np

from lapis import cuda
from lapis.cuda import blockIdx, float32, float64, local, shared, syncthreads, threadIdx


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


def make_gemm_kernel(tiles: GemmTiles, vector_a: bool = False, vector_b: bool = False, with_bias: bool = False,
                     vector_c: bool = False, k_major_a: bool = False, n_major_b: bool = False):
    """The gemm kernel for one tiling; the tile sizes are compile-time constants (closure variables).

    With `vector_a` (float32 op(A) = A, column-major: a_si = 1, each slice's columns 16-byte aligned) a block whose
    tile lies inside C stages A four rows at a time with 128-bit loads, as CUDA kernels read a float4; with
    `vector_b` (op(B) = B: b_sp = 1) likewise four k of B, where slices are 8 deep. An operand whose slice has
    fewer such vectors than the block has threads keeps word loads. With `with_bias`, the epilogue adds bias[i] to
    row i of C (cublasLt's bias epilogue); without, the kernel does not read its bias argument. With `vector_c`
    (float32 C whose columns start on 16 bytes) and beta 0, each run of four rows inside C leaves in one 128-bit
    store (a float4 of a column); the rest, and C read back for beta, go word by word.

    Staging follows each operand's contiguous direction, so a warp's loads share sectors whatever the layout (as
    cuBLAS keeps a kernel per layout): A's lanes run down its rows (i), or with `k_major_a` (op(A) = A^T stored
    k-contiguous: a_sp = 1) along k as B's do; B's lanes run along k, or with `n_major_b` (op(B) = B^T stored
    n-contiguous: b_sj = 1) along its columns (j). The other way each lane of a warp reads its own sector."""
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
    # A k-major A is staged as B is (k-fastest groups of KG, rows padded), its rows of the slice SA_ROW apart; else
    # lanes run down the rows of a column and store consecutive words, with rows BM apart.
    SA_ROW = BM + PAD if k_major_a else BM
    # A thread's rows of C are TM // 4 runs of four, BM // (TM // 4) apart (columns likewise), so each run
    # of a staged slice is one 128-bit shared load (an f32x4 fragment).
    RUNS_M, RUNS_N = TM // 4, TN // 4
    GAP_M, GAP_N = BM // RUNS_M, BN // RUNS_N
    A_STEPS, B_STEPS = BM * BK // THREADS, BK * BN // THREADS

    # Element e of a staged slice, as a thread counts them (e = tx + step * THREADS): its row and depth in A's slice,
    # its depth and column in B's.
    @cuda.jit(device=True)
    def a_row(e):
        return e // KG % BM if k_major_a else e % BM

    @cuda.jit(device=True)
    def a_depth(e):
        return e // (KG * BM) * KG + e % KG if k_major_a else e // BM

    @cuda.jit(device=True)
    def b_depth(e):
        return e // BN if n_major_b else e // (KG * BN) * KG + e % KG

    @cuda.jit(device=True)
    def b_column(e):
        return e % BN if n_major_b else e // KG % BN

    def gemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc, stride_a, stride_b, stride_c, bias):
        # op(A)[i, p] = A[i * a_si + p * a_sp];  op(B)[p, j] = B[p * b_sp + j * b_sj];  C[i + j * ldc];
        # matrix number blockIdx.z of a strided batch starts stride_a, stride_b, stride_c elements further.
        # Half-precision inputs are widened to float32 as they enter shared memory (fp32 accumulation).
        sA = shared.array(BK * SA_ROW, float32)       # sA[p * SA_ROW + i]
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
            a_off[step] = za + (i0 + a_row(e)) * a_si + a_depth(e) * a_sp
        for step in range(B_STEPS):
            e = tx + step * THREADS
            b_off[step] = zb + b_depth(e) * b_sp + (j0 + b_column(e)) * b_sj
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
                        cuda.mma.store(sA, v // (BM // 4) * SA_ROW + v % (BM // 4) * 4, fa[step])
                else:
                    for step in range(A_STEPS):
                        e = tx + step * THREADS
                        sA[a_depth(e) * SA_ROW + a_row(e)] = va[step]
                if VEC_B and vectors:
                    for step in range(B_VSTEPS):
                        v = tx + step * THREADS
                        for q in range(4):
                            sB[(v % (BK // 4) * 4 + q) * SB_ROW + v // (BK // 4)] = cuda.mma.get(fb[step], q)
                else:
                    for step in range(B_STEPS):
                        e = tx + step * THREADS
                        sB[b_depth(e) * SB_ROW + b_column(e)] = vb[step]
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
                    if i0 + a_row(e) < m and p1 + a_depth(e) < k:
                        va[step] = float32(A[a_off[step] + p1 * a_sp])
                for step in range(B_STEPS):
                    e = tx + step * THREADS
                    vb[step] = float32(0.0)
                    if p1 + b_depth(e) < k and j0 + b_column(e) < n:
                        vb[step] = float32(B[b_off[step] + p1 * b_sp])
            if p1 > 0:
                for pp in range(BK):
                    for h in range(RUNS_M):
                        run = cuda.mma.load(sA, pp * SA_ROW + ti + h * GAP_M, 4)
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
        # The epilogue, a run of four rows (a thread's rows h * 4 .. h * 4 + 3 of acc) at a time.
        run_bias = local.array(4, float32)            # the run's rows' bias, loaded once for its TN columns
        four = local.array(4, float32)                # the run's results in one column
        for h in range(RUNS_M):
            i = i0 + ti + h * GAP_M                   # the run's first row
            if with_bias:
                for q in range(4):
                    run_bias[q] = float32(0.0)
                    if i + q < m:
                        run_bias[q] = float32(bias[i + q])
            whole = beta == float32(0.0) and i + 4 <= m      # the run stores as a float4 (where C allows it)
            for c in range(TN):
                j = j0 + tj + c // 4 * GAP_N + c % 4
                if j < n:
                    for q in range(4):
                        four[q] = alpha * acc[h * 4 + q, c]
                        if with_bias:
                            four[q] += run_bias[q]
                    if vector_c and whole:                # vector_c a constant: no such store compiled without it
                        cuda.mma.store(C, zc + i + j * ldc, cuda.mma.pack(four[0], four[1], four[2], four[3]))
                    else:
                        for q in range(4):
                            if i + q < m:
                                if beta == float32(0.0):
                                    C[zc + i + q + j * ldc] = four[q]
                                else:
                                    C[zc + i + q + j * ldc] = four[q] + beta * float32(C[zc + i + q + j * ldc])
    return gemm_kernel


MMA_M_TILES, MMA_N_TILES, MMA_DEPTH = 4, 8, 32   # the matrix-unit gemm: per warp 4 x 8 HMMA tiles of 16x8
MMA_THREADS = 256                                # eight warps, two down and four across
MMA_ROWS, MMA_COLS = 2 * 16 * MMA_M_TILES, 4 * 8 * MMA_N_TILES    # the largest block
MMA_SHARED_BYTES = (MMA_ROWS + MMA_COLS) * 16 * 4  # one slice of each operand, 16 words deep, in the largest block


def make_mma_gemm_kernel(kind, m_tiles: int = MMA_M_TILES, n_tiles: int = MMA_N_TILES):
    """The matrix-unit gemm kernel for one half type (cuda.float16 or cuda.bfloat16): eight warps in a
    2 x 4 grid, each computing m_tiles x n_tiles HMMA tiles of 16x8, so a block computes 32 m_tiles x
    32 n_tiles of C (n_tiles even: a staging step covers 16 columns)."""
    KIND = kind
    MT, NT = m_tiles, n_tiles
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


SMALL_GEMM_THREADS = 256          # the small batched kernel's block: one element of one C_z per thread
SMALL_GEMM_OUTPUTS = 256          # it takes batches whose matrices have at most this many elements of C ...
SMALL_GEMM_DEPTH = 1024           # ... each summing at most this deep


def small_gemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc, stride_a, stride_b, stride_c,
                      batch):
    # One thread per element of every C_z (a batch of small products: attention's scores of a few tokens, a
    # batched dot): element t is row i = t % m of column j = t // m % n of item z = t // (m n), so a warp's
    # stores run down columns; its sum over k in order, in float32 (half inputs widened). A tiled kernel's
    # 64 x 64 block would give each item a block and leave most of it idle.
    t = cuda.grid(1)
    if t < m * n * batch:
        z = t // (m * n)
        e = t - z * (m * n)
        i = e % m
        j = e // m
        a = z * stride_a + i * a_si
        b = z * stride_b + j * b_sj
        acc = float32(0.0)
        for p in range(k):
            acc += float32(A[a + p * a_sp]) * float32(B[b + p * b_sp])
        out = z * stride_c + i + j * ldc
        if beta == float32(0.0):
            C[out] = alpha * acc
        else:
            C[out] = alpha * acc + beta * float32(C[out])


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


TRANSPOSE_TILE = 32        # the staging transpose's tile: 32 rows by 32 words (64 halves) of k; its block is
TRANSPOSE_ROWS = 8         # TRANSPOSE_TILE x TRANSPOSE_ROWS threads


def transpose_kernel(rows, k, src, ld, stride, dst):
    """dst[(z rows + i) k + p] = src[z stride + p ld + i] for 16-bit elements (the bits of a half), k even: a matrix
    stored column-major as rows x k, copied k-contiguous, through a tile in shared memory so that both the reads
    (along i) and the writes (along p) are whole rows of a warp. A thread reads the halves (i, p) and (i, p + 1) and
    keeps them as one word of dst (`dst` is its uint32 view), so the tile, the shared loads and the writes move words,
    half as many as halves. Grid: (rows / 32, k / 64, batch) blocks of 32 x 8."""
    tile = shared.array(TRANSPOSE_TILE * (TRANSPOSE_TILE + 1), np.uint32)   # a padded row: no bank conflicts
    z = blockIdx.z
    i0, w0 = blockIdx.x * TRANSPOSE_TILE, blockIdx.y * TRANSPOSE_TILE          # w0: the tile's first word of k
    tx, ty = threadIdx.x, threadIdx.y
    words = k // 2
    # Four rows of the tile per thread, in a loop of constant trips (unrolled), its pointers moved on each trip.
    reading = i0 + tx < rows
    at = z * stride + 2 * (w0 + ty) * ld + i0 + tx            # where (i0 + tx, 2 (w0 + ty)) is
    for j in range(TRANSPOSE_TILE // TRANSPOSE_ROWS):
        w = ty + j * TRANSPOSE_ROWS
        if reading and w0 + w < words:
            low, high = np.uint32(src[at]), np.uint32(src[at + ld])
            tile[w * (TRANSPOSE_TILE + 1) + tx] = low | (high << np.uint32(16))
        at += 2 * TRANSPOSE_ROWS * ld
    syncthreads()
    writing = w0 + tx < words
    at = (z * rows + i0 + ty) * words + w0 + tx              # where word (i0 + ty, w0 + tx) goes
    for j in range(TRANSPOSE_TILE // TRANSPOSE_ROWS):
        r = ty + j * TRANSPOSE_ROWS
        if writing and i0 + r < rows:
            dst[at] = tile[tx * (TRANSPOSE_TILE + 1) + r]
        at += TRANSPOSE_ROWS * words
