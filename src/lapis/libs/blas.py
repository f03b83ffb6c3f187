"""Layer 4: BLAS with cuBLAS conventions (column-major; C = alpha op(A) op(B) + beta C).

    handle = blas.create(cuda)                  # cublasCreate: bound to a device of an API
    blas.sgemm(handle, "N", "N", m, n, k, 1.0, A, lda, B, ldb, 0.0, C, ldc)

Matrices are device arrays read as flat column-major storage with leading dimensions, as
cuBLAS reads device pointers. Row-major callers (the framework) swap the operands:
row-major C = A B is column-major C^T = B^T A^T.

The sgemm kernel tiles C into 64x64 blocks computed by 256 threads; each thread keeps a
4x4 block of C in registers (a `cuda.local.array` the compiler keeps in registers) and
steps through k in slices of 16, staging a 64x16 slice of op(A) and a 16x64 slice of op(B)
in shared memory. Thread (ti, tj) owns rows ti + 16r and columns tj + 16c, so a warp's
shared-memory reads hit consecutive words and its stores of C are coalesced. The B slice is
loaded k-fastest (coalesced for column-major B), so its rows are padded by one word: without
that, the 16 threads storing one column would all hit the same shared-memory bank.
Sizes and offsets are int32: each matrix must hold fewer than 2^31 elements.
"""

import numpy as np

from lapis import trace
from lapis.cuda import DeviceNDArray, Stream, blockIdx, float32, local, shared, syncthreads, threadIdx
from lapis.libs.blas_level1 import BlasError, Level1, asum, axpy, copy, dot, iamax, nrm2, scal, swap

BM, BN, BK = 64, 64, 16
TM, TN = 4, 4
THREADS = (BM // TM) * (BN // TN)


__all__ = ["BlasError", "Handle", "asum", "axpy", "copy", "create", "dot", "iamax", "nrm2", "scal",
           "sgemm", "swap"]


def sgemm_kernel(m, n, k, alpha, A, a_si, a_sp, B, b_sp, b_sj, beta, C, ldc):
    # op(A)[i, p] = A[i * a_si + p * a_sp];  op(B)[p, j] = B[p * b_sp + j * b_sj];  C[i + j * ldc]
    sA = shared.array((BK, BM), float32)          # sA[p, i]
    sB = shared.array((BK, BN + 1), float32)      # sB[p, j], padded against bank conflicts
    acc = local.array((TM, TN), float32)
    a = local.array(TM, float32)
    b = local.array(TN, float32)
    tx = threadIdx.x
    ti = tx % (BM // TM)
    tj = tx // (BM // TM)
    i0 = blockIdx.x * BM
    j0 = blockIdx.y * BN
    for r in range(TM):
        for c in range(TN):
            acc[r, c] = float32(0.0)
    for p0 in range(0, k, BK):
        for step in range(BM * BK // THREADS):    # this thread's share of the op(A) slice
            e = tx + step * THREADS
            ii = e % BM
            pp = e // BM
            v = float32(0.0)
            if i0 + ii < m and p0 + pp < k:
                v = A[(i0 + ii) * a_si + (p0 + pp) * a_sp]
            sA[pp, ii] = v
        for step in range(BK * BN // THREADS):    # and of the op(B) slice
            e = tx + step * THREADS
            pp = e % BK
            jj = e // BK
            v = float32(0.0)
            if p0 + pp < k and j0 + jj < n:
                v = B[(p0 + pp) * b_sp + (j0 + jj) * b_sj]
            sB[pp, jj] = v
        syncthreads()
        for pp in range(BK):
            for r in range(TM):
                a[r] = sA[pp, ti + r * (BM // TM)]
            for c in range(TN):
                b[c] = sB[pp, tj + c * (BN // TN)]
            for r in range(TM):
                for c in range(TN):
                    acc[r, c] += a[r] * b[c]
        syncthreads()
    for r in range(TM):
        for c in range(TN):
            i = i0 + ti + r * (BM // TM)
            j = j0 + tj + c * (BN // TN)
            if i < m and j < n:
                if beta == float32(0.0):
                    C[i + j * ldc] = alpha * acc[r, c]
                else:
                    C[i + j * ldc] = alpha * acc[r, c] + beta * C[i + j * ldc]


class Handle:
    """A cuBLAS-style handle: the API (lapis.cuda or lapis.hip) and device its routines run on."""

    def __init__(self, api, device: int = 0):
        self.api = api
        self.device = device
        self.kernel = api.jit(sgemm_kernel)
        self.level1 = Level1(api)

    @property
    def context(self):
        return self.api.current_context(self.device)

    @property
    def stream(self):
        return Stream(self.context)


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


def _flat(x: DeviceNDArray, name: str) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise BlasError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype != np.float32:
        raise BlasError(f"sgemm: {name} must hold float32, not {x.dtype}")
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        raise BlasError(f"sgemm: {name} must be contiguous storage")
    return DeviceNDArray((x.size,), (4,), np.float32, x.context, x.memory, x.ptr)


def _op(trans: str) -> bool:
    t = trans.upper() if isinstance(trans, str) else trans
    if t not in ("N", "T", "C"):
        raise BlasError(f"trans must be 'N', 'T' or 'C', not {trans!r}")
    return t != "N"


def sgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DeviceNDArray,
          lda: int, B: DeviceNDArray, ldb: int, beta: float, C: DeviceNDArray, ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C, column-major, float32 (cublasSgemm)."""
    ta, tb = _op(transa), _op(transb)
    if min(m, n, k) < 0:
        raise BlasError(f"sgemm: m, n and k must be non-negative (got {m}, {n}, {k})")
    rows_a, rows_b = (k if ta else m), (n if tb else k)
    for name, ld, rows in (("lda", lda, rows_a), ("ldb", ldb, rows_b), ("ldc", ldc, m)):
        if ld < max(1, rows):
            raise BlasError(f"sgemm: {name}={ld} must be at least {max(1, rows)}")
    fa, fb, fc = _flat(A, "A"), _flat(B, "B"), _flat(C, "C")
    for name, x, ld, cols in (("A", fa, lda, m if ta else k), ("B", fb, ldb, k if tb else n), ("C", fc, ldc, n)):
        rows = {"A": rows_a, "B": rows_b, "C": m}[name]
        need = (cols - 1) * ld + rows if cols and rows else 0
        if need > x.size:
            raise BlasError(f"sgemm: {name} holds {x.size} elements but {rows}x{cols} with ld={ld} needs {need}")
        if need >= 2**31:
            raise BlasError(f"sgemm: {name} spans {need} elements; this kernel indexes with int32 (< 2^31)")
    with trace.span(4, "sgemm", transa=transa, transb=transb, m=m, n=n, k=k, alpha=alpha, lda=lda, ldb=ldb,
                    beta=beta, ldc=ldc, device=str(handle.context.device), kernel="sgemm_kernel",
                    tile=f"{BM}x{BN}x{BK}, {TM}x{TN} per thread"):
        if m == 0 or n == 0:
            return
        a_si, a_sp = (lda, 1) if ta else (1, lda)
        b_sp, b_sj = (ldb, 1) if tb else (1, ldb)
        grid_dim = (-(-m // BM), -(-n // BN))
        handle.kernel[grid_dim, THREADS, handle.stream](
            np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), fa, np.int32(a_si), np.int32(a_sp), fb,
            np.int32(b_sp), np.int32(b_sj), np.float32(beta), fc, np.int32(ldc))
