"""Layer 4: dense factorizations and solves with cuSOLVER's conventions (column-major, lda, info).

    handle = solver.create(cuda)
    info = solver.getrf(handle, m, n, A, lda, ipiv)          # P A = L U, ipiv 1-based as LAPACK's
    solver.getrs(handle, "N", n, nrhs, A, lda, ipiv, B, ldb)  # B = A^-1 B from the factors
    info = solver.potrf(handle, "L", n, A, lda)               # A = L L^T
    solver.potrs(handle, "L", n, nrhs, A, lda, B, ldb)
    solver.geqrf(handle, m, n, A, lda, tau)                   # A = Q R, Householder vectors below R

`info` is what cuSOLVER writes to devInfo: 0 on success; for getrf, i when U(i, i) is exactly
zero (the factorization still completes, as LAPACK's does); for potrf, i when the leading minor
of order i is not positive definite (the factorization stops there). It is returned to the
host. The algorithms are the unblocked right-looking ones, a few kernel launches per column: a
single block finds the pivot (a tree reduction in shared memory) and swaps rows, then a grid
updates the trailing matrix. Solves give one thread to each right-hand side. That is simple and
exact in its arithmetic order, and slow for large matrices (no blocking, no look-ahead).
Values are float32 or float64, each computed in its own precision (float64's square roots too:
the kernel language's float64 math library, see the Layer 3 page).
"""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, shared, threadIdx
from lapis.libs.handle import LibraryHandle
from lapis.libs.reduction import block_argmax, block_reduce

THREADS = 256


class SolverError(ValueError):
    """Invalid arguments (CUSOLVER_STATUS_INVALID_VALUE); nothing was launched."""


def lu_pivot_kernel(m, n, j, a, lda, ipiv, info):
    # One block: the row p >= j with the largest |a[p, j]| (the first of equals), then swap rows j and p.
    best = shared.array(256, a.dtype)
    where = shared.array(256, np.int64)
    t = threadIdx.x
    value = a.dtype(-1)
    row = m
    i = j + t
    while i < m:
        v = abs(a[i + j * lda])
        if v > value:
            value = v
            row = i
        i += 256
    value, p = block_argmax(best, where, t, value, row)
    if t == 0:
        ipiv[j] = p + 1
        if value == 0 and info[0] == 0:
            info[0] = j + 1
    if p != j:
        k = t
        while k < n:
            tmp = a[j + k * lda]
            a[j + k * lda] = a[p + k * lda]
            a[p + k * lda] = tmp
            k += 256


def lu_scale_kernel(m, j, a, lda):
    # The multipliers: column j below the pivot divided by it (left alone when the pivot is zero).
    i = cuda.grid(1) + j + 1
    pivot = a[j + j * lda]
    if i < m and pivot != 0:
        a[i + j * lda] = a[i + j * lda] / pivot


def lu_update_kernel(m, n, j, a, lda):
    # The rank-1 update of the trailing matrix, one thread per column k > j.
    k = cuda.grid(1) + j + 1
    if k < n and a[j + j * lda] != 0:
        u = a[j + k * lda]
        for i in range(j + 1, m):
            a[i + k * lda] = a[i + k * lda] - a[i + j * lda] * u


def lu_solve_kernel(n, nrhs, transposed, a, lda, ipiv, b, ldb):
    # One thread per right-hand side: row swaps, then the two triangular solves.
    r = cuda.grid(1)
    if r < nrhs:
        c = r * ldb
        if not transposed:
            for i in range(n):
                p = ipiv[i] - 1
                if p != i:
                    tmp = b[c + i]
                    b[c + i] = b[c + p]
                    b[c + p] = tmp
            for i in range(n):                     # L y = b, L unit lower
                s = b[c + i]
                for k in range(i):
                    s -= a[i + k * lda] * b[c + k]
                b[c + i] = s
            i = n - 1
            while i >= 0:                          # U x = y
                s = b[c + i]
                for k in range(i + 1, n):
                    s -= a[i + k * lda] * b[c + k]
                b[c + i] = s / a[i + i * lda]
                i -= 1
        else:
            for i in range(n):                     # U^T y = b
                s = b[c + i]
                for k in range(i):
                    s -= a[k + i * lda] * b[c + k]
                b[c + i] = s / a[i + i * lda]
            i = n - 1
            while i >= 0:                          # L^T x = y
                s = b[c + i]
                for k in range(i + 1, n):
                    s -= a[k + i * lda] * b[c + k]
                b[c + i] = s
                i -= 1
            i = n - 1
            while i >= 0:
                p = ipiv[i] - 1
                if p != i:
                    tmp = b[c + i]
                    b[c + i] = b[c + p]
                    b[c + p] = tmp
                i -= 1


def cholesky_column_kernel(n, j, a, lda, info):
    # Left-looking Cholesky, column j of L (lower); stops at the first non-positive pivot.
    i = cuda.grid(1) + j
    if info[0] == 0 and i < n:
        d = a[j + j * lda]
        for k in range(j):
            d -= a[j + k * lda] * a[j + k * lda]
        if d <= 0:
            if i == j:
                info[0] = j + 1
        else:
            root = math.sqrt(d)
            if i == j:
                a[j + j * lda] = root
            else:
                s = a[i + j * lda]
                for k in range(j):
                    s -= a[i + k * lda] * a[j + k * lda]
                a[i + j * lda] = s / root


def cholesky_solve_kernel(n, nrhs, a, lda, b, ldb):
    r = cuda.grid(1)
    if r < nrhs:
        c = r * ldb
        for i in range(n):                         # L y = b
            s = b[c + i]
            for k in range(i):
                s -= a[i + k * lda] * b[c + k]
            b[c + i] = s / a[i + i * lda]
        i = n - 1
        while i >= 0:                              # L^T x = y
            s = b[c + i]
            for k in range(i + 1, n):
                s -= a[k + i * lda] * b[c + k]
            b[c + i] = s / a[i + i * lda]
            i -= 1


def householder_kernel(m, j, a, lda, tau):
    # One block: the reflector H = I - tau v v^T with v[0] = 1 that maps a[j:m, j] onto beta e_0.
    sq = shared.array(256, a.dtype)
    t = threadIdx.x
    acc = a.dtype(0)
    i = j + 1 + t
    while i < m:
        acc += a[i + j * lda] * a[i + j * lda]
        i += 256
    tail = block_reduce(sq, t, acc, False)
    alpha = a[j + j * lda]
    if tail == 0:
        if t == 0:
            tau[j] = a.dtype(0)
    else:
        norm = math.sqrt(alpha * alpha + tail)
        beta = -norm if alpha >= 0 else norm
        scale = 1 / (alpha - beta)
        i = j + 1 + t
        while i < m:
            a[i + j * lda] = a[i + j * lda] * scale
            i += 256
        if t == 0:
            tau[j] = (beta - alpha) / beta
            a[j + j * lda] = beta


def householder_apply_kernel(m, n, j, a, lda, tau):
    # Columns k > j: a[j:m, k] -= tau (v^T a[j:m, k]) v, one thread per column.
    k = cuda.grid(1) + j + 1
    if k < n:
        w = a[j + k * lda]
        for i in range(j + 1, m):
            w += a[i + j * lda] * a[i + k * lda]
        w = w * tau[j]
        a[j + k * lda] = a[j + k * lda] - w
        for i in range(j + 1, m):
            a[i + k * lda] = a[i + k * lda] - w * a[i + j * lda]


class Handle(LibraryHandle):
    """A cuSOLVER-style handle: the API, device and stream its routines launch on, and its kernels."""


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


def _matrix(x, name: str, rows: int, cols: int, ld: int) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise SolverError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype not in (np.float32, np.float64):
        raise SolverError(f"{name} must hold float32 or float64, not {x.dtype}")
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        raise SolverError(f"{name} must be contiguous storage")
    if min(rows, cols) < 0:
        raise SolverError(f"{name}: sizes must be non-negative (got {rows}x{cols})")
    if ld < max(1, rows):
        raise SolverError(f"ld{name.lower()}={ld} must be at least {max(1, rows)}")
    if cols and rows and (cols - 1) * ld + rows > x.size:
        raise SolverError(f"{name} holds {x.size} elements but {rows}x{cols} with ld={ld} needs "
                          f"{(cols - 1) * ld + rows}")
    return x.ravel(order="A")


def _vector(x, name: str, size: int, dtypes) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray) or x.dtype not in dtypes or x.size < size:
        raise SolverError(f"{name} must be a device array of at least {size} {' or '.join(map(str, dtypes))}")
    return x


def _blocks(count: int) -> int:
    return max(1, -(-count // THREADS))


def getrf(handle: Handle, m: int, n: int, A, lda: int, ipiv) -> int:
    """LU with partial pivoting, P A = L U, in place (cusolverDnSgetrf); returns info."""
    fa = _matrix(A, "A", m, n, lda)
    _vector(ipiv, "ipiv", min(m, n), (np.int32, np.int64))
    info = handle.api.to_device(np.zeros(1, np.int32))
    with trace.span(4, "getrf", m=m, n=n, lda=lda):
        for j in range(min(m, n)):
            handle.kernel(lu_pivot_kernel)[1, THREADS, handle.stream](np.int64(m), np.int64(n), np.int64(j), fa,
                                                            np.int64(lda), ipiv, info)
            if j + 1 < m:
                handle.kernel(lu_scale_kernel)[_blocks(m - j - 1), THREADS, handle.stream](np.int64(m), np.int64(j), fa,
                                                                                 np.int64(lda))
            if j + 1 < n:
                handle.kernel(lu_update_kernel)[_blocks(n - j - 1), THREADS, handle.stream](
                    np.int64(m), np.int64(n), np.int64(j), fa, np.int64(lda))
        return int(info.copy_to_host()[0])


def getrs(handle: Handle, trans: str, n: int, nrhs: int, A, lda: int, ipiv, B, ldb: int) -> None:
    """Solve op(A) X = B with getrf's factors, B overwritten by X (cusolverDnSgetrs)."""
    if trans not in ("N", "T", "C"):
        raise SolverError(f"trans must be 'N', 'T' or 'C', not {trans!r}")
    fa, fb = _matrix(A, "A", n, n, lda), _matrix(B, "B", n, nrhs, ldb)
    if fa.dtype != fb.dtype:
        raise SolverError(f"A and B must share a dtype ({fa.dtype}, {fb.dtype})")
    _vector(ipiv, "ipiv", n, (np.int32, np.int64))
    with trace.span(4, "getrs", trans=trans, n=n, nrhs=nrhs):
        if n and nrhs:
            handle.kernel(lu_solve_kernel)[_blocks(nrhs), THREADS, handle.stream](
                np.int64(n), np.int64(nrhs), trans != "N", fa, np.int64(lda), ipiv, fb, np.int64(ldb))


def potrf(handle: Handle, uplo: str, n: int, A, lda: int) -> int:
    """Cholesky, A = L L^T, L written over A's lower triangle (cusolverDnSpotrf); returns info."""
    if uplo != "L":
        raise SolverError("potrf supports uplo='L' (the lower triangle); transpose for 'U'")
    fa = _matrix(A, "A", n, n, lda)
    info = handle.api.to_device(np.zeros(1, np.int32))
    with trace.span(4, "potrf", uplo=uplo, n=n, lda=lda):
        for j in range(n):
            handle.kernel(cholesky_column_kernel)[_blocks(n - j), THREADS, handle.stream](
                np.int64(n), np.int64(j), fa, np.int64(lda), info)
        return int(info.copy_to_host()[0])


def potrs(handle: Handle, uplo: str, n: int, nrhs: int, A, lda: int, B, ldb: int) -> None:
    """Solve A X = B with potrf's factor, B overwritten by X (cusolverDnSpotrs)."""
    if uplo != "L":
        raise SolverError("potrs supports uplo='L'")
    fa, fb = _matrix(A, "A", n, n, lda), _matrix(B, "B", n, nrhs, ldb)
    with trace.span(4, "potrs", n=n, nrhs=nrhs):
        if n and nrhs:
            handle.kernel(cholesky_solve_kernel)[_blocks(nrhs), THREADS, handle.stream](
                np.int64(n), np.int64(nrhs), fa, np.int64(lda), fb, np.int64(ldb))


def geqrf(handle: Handle, m: int, n: int, A, lda: int, tau) -> None:
    """Householder QR in place: R on and above the diagonal, the reflectors' vectors below it, their
    scalars in tau (cusolverDnSgeqrf, LAPACK's layout: H_j = I - tau_j v_j v_j^T with v_j[j] = 1)."""
    fa = _matrix(A, "A", m, n, lda)
    _vector(tau, "tau", min(m, n), (fa.dtype,))
    with trace.span(4, "geqrf", m=m, n=n, lda=lda):
        for j in range(min(m, n)):
            handle.kernel(householder_kernel)[1, THREADS, handle.stream](np.int64(m), np.int64(j), fa, np.int64(lda),
                                                                         tau)
            if j + 1 < n:
                handle.kernel(householder_apply_kernel)[_blocks(n - j - 1), THREADS, handle.stream](
                    np.int64(m), np.int64(n), np.int64(j), fa, np.int64(lda), tau)
