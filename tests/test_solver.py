"""Layer 4: LU, Cholesky and QR checked by reconstruction (P L U = A, L L^T = A, Q R = A)."""

import numpy as np
import pytest

from lapis import cuda
from lapis.libs import solver

rng = np.random.default_rng(21)


@pytest.fixture(scope="module")
def handle():
    return solver.create(cuda)


def store(a: np.ndarray, ld: int) -> np.ndarray:
    buf = np.zeros((a.shape[1], ld), a.dtype)
    buf[:, :a.shape[0]] = a.T
    return buf.ravel()


def load(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    return buf.reshape(cols, ld)[:, :rows].T


@pytest.mark.parametrize("m,n", [(1, 1), (17, 17), (40, 25), (25, 40)])
def test_lu_with_partial_pivoting(handle, m, n):
    a = rng.standard_normal((m, n)).astype(np.float32)
    lda = m + 2
    dA, ipiv = cuda.to_device(store(a, lda)), cuda.device_array(min(m, n), np.int32)
    assert solver.getrf(handle, m, n, dA, lda, ipiv) == 0
    lu, piv = load(dA.copy_to_host(), m, n, lda), ipiv.copy_to_host()
    k = min(m, n)
    L = np.tril(lu, -1)[:, :k] + np.eye(m, k, dtype=np.float32)
    U = np.triu(lu)[:k, :]
    pa = a.copy()
    for i, p in enumerate(piv):                      # LAPACK order: swap row i with row p-1, in turn
        pa[[i, p - 1]] = pa[[p - 1, i]]
    assert np.allclose(L @ U, pa, atol=1e-4)
    assert np.all(np.abs(np.tril(lu, -1)) <= 1 + 1e-6)   # partial pivoting keeps multipliers at most 1


@pytest.mark.parametrize("trans", ["N", "T"])
def test_lu_solve(handle, trans):
    n, nrhs = 30, 3
    a = rng.standard_normal((n, n)).astype(np.float32) + 4 * np.eye(n, dtype=np.float32)
    b = rng.standard_normal((n, nrhs)).astype(np.float32)
    dA, ipiv, dB = cuda.to_device(store(a, n)), cuda.device_array(n, np.int32), cuda.to_device(store(b, n))
    solver.getrf(handle, n, n, dA, n, ipiv)
    solver.getrs(handle, trans, n, nrhs, dA, n, ipiv, dB, n)
    x = load(dB.copy_to_host(), n, nrhs, n)
    assert np.allclose((a.T if trans == "T" else a) @ x, b, atol=1e-4)


def test_an_infinite_pivot_is_the_largest(handle):
    """An infinite a[0, 0] is its column's largest magnitude: row 1 stays the pivot (the search once started
    from |a[0, 0]| * 0 - 1, NaN for it, and named a row past the matrix)."""
    a = np.array([[np.inf, 1.0], [1.0, 2.0]], np.float32)
    ipiv = cuda.device_array(2, np.int32)
    solver.getrf(handle, 2, 2, cuda.to_device(store(a, 2)), 2, ipiv)
    assert ipiv.copy_to_host().tolist() == [1, 2]


def test_singular_matrix_reports_info(handle):
    a = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    assert solver.getrf(handle, 2, 2, cuda.to_device(store(a, 2)), 2, cuda.device_array(2, np.int32)) == 2


@pytest.mark.parametrize("n", [1, 17, 40])
def test_cholesky_and_its_solve(handle, n):
    g = rng.standard_normal((n, n))
    a = (g @ g.T + n * np.eye(n)).astype(np.float32)
    dA = cuda.to_device(store(a, n))
    assert solver.potrf(handle, "L", n, dA, n) == 0
    L = np.tril(load(dA.copy_to_host(), n, n, n))
    assert np.allclose(L @ L.T, a, rtol=1e-4, atol=1e-3)
    b = rng.standard_normal((n, 2)).astype(np.float32)
    dB = cuda.to_device(store(b, n))
    solver.potrs(handle, "L", n, 2, dA, n, dB, n)
    assert np.allclose(a @ load(dB.copy_to_host(), n, 2, n), b, atol=1e-3)


def test_a_float64_cholesky_factor_has_float64_accuracy(handle):
    """Its square roots are float64's own (not the float32 unit's), so the factor agrees with LAPACK's to 1e-13."""
    n = 24
    g = rng.standard_normal((n, n))
    a = g @ g.T + n * np.eye(n)
    dA = cuda.to_device(store(a, n))
    assert solver.potrf(handle, "L", n, dA, n) == 0
    L, want = np.tril(load(dA.copy_to_host(), n, n, n)), np.linalg.cholesky(a)
    assert L.dtype == np.float64 and np.abs(L - want).max() <= 1e-13 * np.abs(want).max()


def test_cholesky_of_an_indefinite_matrix_reports_info(handle):
    a = np.array([[4.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1.0]], np.float32)        # leading minor 2 is zero
    assert solver.potrf(handle, "L", 3, cuda.to_device(store(a, 3)), 3) == 2


@pytest.mark.parametrize("m,n", [(1, 1), (20, 20), (35, 12)])
def test_householder_qr(handle, m, n):
    a = rng.standard_normal((m, n)).astype(np.float32)
    dA, tau = cuda.to_device(store(a, m)), cuda.device_array(min(m, n), np.float32)
    solver.geqrf(handle, m, n, dA, m, tau)
    qr, taus = load(dA.copy_to_host(), m, n, m).astype(np.float64), tau.copy_to_host()
    Q = np.eye(m)
    for j in range(min(m, n)):
        v = np.zeros(m)
        v[j], v[j + 1:] = 1.0, qr[j + 1:, j]
        Q = Q @ (np.eye(m) - taus[j] * np.outer(v, v))
    R = np.triu(qr)
    assert np.allclose(Q @ R, a, atol=1e-4)
    assert np.allclose(Q.T @ Q, np.eye(m), atol=1e-4)


def test_bad_arguments(handle):
    with pytest.raises(solver.SolverError, match="lda=2 must be at least 3"):
        solver.getrf(handle, 3, 3, cuda.to_device(np.zeros(9, np.float32)), 2, cuda.device_array(3, np.int32))
    with pytest.raises(solver.SolverError, match="uplo='L'"):
        solver.potrf(handle, "U", 3, cuda.to_device(np.zeros(9, np.float32)), 3)
