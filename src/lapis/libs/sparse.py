"""Layer 4: sparse matrices (CSR and COO) and their products with dense ones, cuSPARSE's way.

    handle = sparse.create(cuda)
    A = sparse.CsrMatrix((rows, cols), indptr, indices, data)      # device arrays
    sparse.spmv(handle, alpha, A, x, beta, y)                       # y = alpha A x + beta y
    sparse.spmm(handle, alpha, A, B, beta, C)                       # C = alpha A B + beta C (dense, row-major)
    coo = sparse.csr_to_coo(handle, A); csr = sparse.coo_to_csr(handle, coo)

Index arrays are int32 or int64 and values float32 or float64, as cuSPARSE's generic API
takes them; every kernel is compiled per combination. CSR products give each row to one
thread (the "scalar CSR" kernel), so a row's sum runs in index order and results are
deterministic. COO products scale the output by beta first, then add each nonzero with an
atomic add; the simulated device applies a warp's atomics in lane order, so these results are
deterministic here, as they would not be on a real GPU. `coo_to_csr` wants the COO entries
sorted by row, as cusparseXcoo2csr does; each row's start is found by binary search. Sums
are accumulated in float64 and rounded to the value type once.
"""

from dataclasses import dataclass

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray
from lapis.libs.handle import LibraryHandle

THREADS = 256


class SparseError(ValueError):
    """Invalid arguments (CUSPARSE_STATUS_INVALID_VALUE); nothing was launched."""


@dataclass
class CsrMatrix:
    shape: tuple[int, int]
    indptr: DeviceNDArray          # rows + 1 offsets into indices and data
    indices: DeviceNDArray         # the column of each stored value
    data: DeviceNDArray

    @property
    def nnz(self) -> int:
        return self.data.size


@dataclass
class CooMatrix:
    shape: tuple[int, int]
    row: DeviceNDArray
    col: DeviceNDArray
    data: DeviceNDArray

    @property
    def nnz(self) -> int:
        return self.data.size


def csr_spmv_kernel(rows, alpha, indptr, indices, data, x, beta, y):
    r = cuda.grid(1)
    if r < rows:
        acc = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            acc += data[k] * x[indices[k]]
        if beta == 0:
            y[r] = alpha * acc
        else:
            y[r] = alpha * acc + beta * y[r]


def csr_spmm_kernel(rows, n, alpha, indptr, indices, data, b, beta, c):
    # c[r, j] = alpha * sum_k data[k] * b[indices[k], j] + beta * c[r, j]
    j, r = cuda.grid(2)
    if r < rows and j < n:
        acc = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            acc += data[k] * b[indices[k], j]
        if beta == 0:
            c[r, j] = alpha * acc
        else:
            c[r, j] = alpha * acc + beta * c[r, j]


def scale_kernel(count, beta, y):
    i = cuda.grid(1)
    if i < count:
        if beta == 0:
            y[i] = y.dtype(0)            # beta 0: y is not read (a NaN in it stays out)
        else:
            y[i] = beta * y[i]


def coo_spmv_kernel(nnz, alpha, row, col, data, x, y):
    k = cuda.grid(1)
    if k < nnz:
        cuda.atomic.add(y, row[k], alpha * data[k] * x[col[k]])


def coo_spmm_kernel(nnz, n, alpha, row, col, data, b, c):
    j, k = cuda.grid(2)
    if k < nnz and j < n:
        cuda.atomic.add(c, (row[k], j), alpha * data[k] * b[col[k], j])


def csr_to_coo_kernel(rows, indptr, row):
    r = cuda.grid(1)
    if r < rows:
        for k in range(indptr[r], indptr[r + 1]):
            row[k] = r


def coo_to_csr_kernel(rows, nnz, row, indptr):
    # indptr[r] = the first k with row[k] >= r (row sorted), for r = 0 .. rows
    r = cuda.grid(1)
    if r <= rows:
        lo = 0
        hi = nnz
        while lo < hi:
            mid = (lo + hi) // 2
            if row[mid] < r:
                lo = mid + 1
            else:
                hi = mid
        indptr[r] = lo


class Handle(LibraryHandle):
    """A cuSPARSE-style handle: the API, device and stream its routines launch on, and its kernels."""


def create(api, device: int = 0) -> Handle:
    return Handle(api, device)


def _array(x, name: str, dtypes: tuple, ndim: int = 1) -> DeviceNDArray:
    if not isinstance(x, DeviceNDArray):
        raise SparseError(f"{name} must be a device array, not {type(x).__name__}")
    if x.dtype not in dtypes:
        raise SparseError(f"{name} must hold {' or '.join(map(str, dtypes))}, not {x.dtype}")
    if x.ndim != ndim:
        raise SparseError(f"{name} must have {ndim} dimension(s), not {x.ndim}")
    return x


_INDEX, _VALUE = (np.dtype(np.int32), np.dtype(np.int64)), (np.dtype(np.float32), np.dtype(np.float64))


def _check_matrix(A) -> tuple[int, int]:
    if isinstance(A, CsrMatrix):
        rows, cols = A.shape
        _array(A.indptr, "indptr", _INDEX)
        _array(A.indices, "indices", (A.indptr.dtype,))
        _array(A.data, "data", _VALUE)
        if A.indptr.size != rows + 1:
            raise SparseError(f"indptr has {A.indptr.size} entries; a {rows}-row CSR matrix needs {rows + 1}")
        if A.indices.size != A.data.size:
            raise SparseError(f"indices ({A.indices.size}) and data ({A.data.size}) differ in length")
    elif isinstance(A, CooMatrix):
        rows, cols = A.shape
        _array(A.row, "row", _INDEX)
        _array(A.col, "col", (A.row.dtype,))
        _array(A.data, "data", _VALUE)
        if not A.row.size == A.col.size == A.data.size:
            raise SparseError(f"row, col and data differ in length ({A.row.size}, {A.col.size}, {A.data.size})")
    else:
        raise SparseError(f"A must be a CsrMatrix or a CooMatrix, not {type(A).__name__}")
    if min(rows, cols) < 0:
        raise SparseError(f"shape {A.shape} has a negative dimension")
    return rows, cols


def spmv(handle: Handle, alpha: float, A, x: DeviceNDArray, beta: float, y: DeviceNDArray) -> None:
    """y = alpha A x + beta y (cusparseSpMV)."""
    rows, cols = _check_matrix(A)
    value = A.data.dtype
    _array(x, "x", (value,))
    _array(y, "y", (value,))
    if x.size != cols or y.size != rows:
        raise SparseError(f"A is {rows}x{cols} but x has {x.size} and y {y.size} elements")
    kind = "csr" if isinstance(A, CsrMatrix) else "coo"
    t = value.type
    with trace.span(4, "spmv", format=kind, rows=rows, cols=cols, nnz=A.nnz, alpha=alpha, beta=beta):
        if rows == 0:
            return
        if kind == "csr":
            handle.kernel(csr_spmv_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                np.int64(rows), t(alpha), A.indptr, A.indices, A.data, x, t(beta), y)
            return
        handle.kernel(scale_kernel)[-(-rows // THREADS), THREADS, handle.stream](np.int64(rows), t(beta), y)
        if A.nnz:
            handle.kernel(coo_spmv_kernel)[-(-A.nnz // THREADS), THREADS, handle.stream](
                np.int64(A.nnz), t(alpha), A.row, A.col, A.data, x, y)


def spmm(handle: Handle, alpha: float, A, B: DeviceNDArray, beta: float, C: DeviceNDArray) -> None:
    """C = alpha A B + beta C with dense row-major B (cols x n) and C (rows x n) (cusparseSpMM)."""
    rows, cols = _check_matrix(A)
    value = A.data.dtype
    _array(B, "B", (value,), 2)
    _array(C, "C", (value,), 2)
    if B.shape[0] != cols or C.shape != (rows, B.shape[1]):
        raise SparseError(f"A is {rows}x{cols}, B {B.shape[0]}x{B.shape[1]}, C {C.shape[0]}x{C.shape[1]}: "
                          "they do not chain")
    n, t = B.shape[1], value.type
    kind = "csr" if isinstance(A, CsrMatrix) else "coo"
    with trace.span(4, "spmm", format=kind, rows=rows, cols=cols, n=n, nnz=A.nnz, alpha=alpha, beta=beta):
        if rows == 0 or n == 0:
            return
        if kind == "csr":
            handle.kernel(csr_spmm_kernel)[(-(-n // 16), -(-rows // 16)), (16, 16), handle.stream](
                np.int64(rows), np.int64(n), t(alpha), A.indptr, A.indices, A.data, B, t(beta), C)
            return
        if not C.is_c_contiguous():
            raise SparseError("C must be C-contiguous for a COO product")
        handle.kernel(scale_kernel)[-(-C.size // THREADS), THREADS, handle.stream](np.int64(C.size), t(beta), C.ravel())
        if A.nnz:
            handle.kernel(coo_spmm_kernel)[(-(-n // 16), -(-A.nnz // 16)), (16, 16), handle.stream](
                np.int64(A.nnz), np.int64(n), t(alpha), A.row, A.col, A.data, B, C)


def csr_to_coo(handle: Handle, A: CsrMatrix) -> CooMatrix:
    """The same matrix in COO form, rows expanded from indptr (cusparseXcsr2coo)."""
    rows, _ = _check_matrix(A)
    if not isinstance(A, CsrMatrix):
        raise SparseError("csr_to_coo needs a CsrMatrix")
    row = handle.api.device_array(A.nnz, A.indptr.dtype)
    with trace.span(4, "csr_to_coo", rows=rows, nnz=A.nnz):
        if rows and A.nnz:
            handle.kernel(csr_to_coo_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                np.int64(rows), A.indptr, row)
    return CooMatrix(A.shape, row, A.indices, A.data)


def coo_to_csr(handle: Handle, A: CooMatrix) -> CsrMatrix:
    """The same matrix in CSR form; A's entries must be sorted by row (cusparseXcoo2csr)."""
    rows, _ = _check_matrix(A)
    if not isinstance(A, CooMatrix):
        raise SparseError("coo_to_csr needs a CooMatrix")
    indptr = handle.api.device_array(rows + 1, A.row.dtype)
    with trace.span(4, "coo_to_csr", rows=rows, nnz=A.nnz):
        handle.kernel(coo_to_csr_kernel)[-(-(rows + 1) // THREADS), THREADS, handle.stream](
            np.int64(rows), np.int64(A.nnz), A.row, indptr)
    return CsrMatrix(A.shape, indptr, A.col, A.data)
