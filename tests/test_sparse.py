"""Layer 4: sparse CSR and COO products and conversions against scipy.sparse."""

import numpy as np
import pytest
import scipy.sparse as sp

from lapis import cuda
from lapis.libs import sparse

rng = np.random.default_rng(9)


@pytest.fixture(scope="module")
def handle():
    return sparse.create(cuda)


def on_device(m, index=np.int32):
    csr = sp.csr_matrix(m)
    return sparse.CsrMatrix(m.shape, cuda.to_device(csr.indptr.astype(index)),
                            cuda.to_device(csr.indices.astype(index)), cuda.to_device(csr.data))


@pytest.mark.parametrize("shape", [(1, 17), (17, 1), (300, 200), (64, 64)])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_spmv_and_spmm_csr_and_coo(handle, shape, index):
    m = sp.random(*shape, density=0.1, random_state=int(rng.integers(1000)), dtype=np.float64, format="csr")
    m.data = m.data.astype(np.float32)
    m = m.astype(np.float32)
    A = on_device(m, index)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    y = rng.standard_normal(shape[0]).astype(np.float32)
    B = rng.standard_normal((shape[1], 5)).astype(np.float32)
    C = rng.standard_normal((shape[0], 5)).astype(np.float32)
    coo = sparse.csr_to_coo(handle, A)
    for matrix in (A, coo):
        dy, dC = cuda.to_device(y), cuda.to_device(C)
        sparse.spmv(handle, 2.0, matrix, cuda.to_device(x), 0.5, dy)
        assert np.allclose(dy.copy_to_host(), 2.0 * (m @ x) + 0.5 * y, atol=1e-4)
        sparse.spmm(handle, -1.0, matrix, cuda.to_device(B), 2.0, dC)
        assert np.allclose(dC.copy_to_host(), -(m @ B) + 2.0 * C, atol=1e-4)
    back = sparse.coo_to_csr(handle, coo)
    assert np.array_equal(back.indptr.copy_to_host(), sp.csr_matrix(m).indptr)
    assert np.array_equal(coo.row.copy_to_host(), sp.coo_matrix(m).row)


def test_empty_rows_and_beta_zero_ignore_old_values(handle):
    m = sp.csr_matrix(np.array([[0, 0, 0], [1.0, 0, 2.0], [0, 0, 0]], np.float64))
    A = on_device(m)
    y = cuda.to_device(np.full(3, np.nan))
    sparse.spmv(handle, 1.0, A, cuda.to_device(np.ones(3)), 0.0, y)
    assert list(y.copy_to_host()) == [0.0, 3.0, 0.0]
    y = cuda.to_device(np.full(3, np.nan))          # the COO form, which scales y first
    sparse.spmv(handle, 1.0, sparse.csr_to_coo(handle, A), cuda.to_device(np.ones(3)), 0.0, y)
    assert list(y.copy_to_host()) == [0.0, 3.0, 0.0]


def test_bad_arguments(handle):
    A = on_device(sp.csr_matrix(np.eye(3, dtype=np.float32)))
    ones3, ones4 = cuda.to_device(np.ones(3, np.float32)), cuda.to_device(np.ones(4, np.float32))
    with pytest.raises(sparse.SparseError, match="x has 4"):
        sparse.spmv(handle, 1.0, A, ones4, 0.0, ones3)
    with pytest.raises(sparse.SparseError, match="must hold float32"):
        sparse.spmv(handle, 1.0, A, cuda.to_device(np.ones(3)), 0.0, cuda.to_device(np.ones(3)))
    bad = sparse.CsrMatrix((4, 3), A.indptr, A.indices, A.data)
    with pytest.raises(sparse.SparseError, match="needs 5"):
        sparse.spmv(handle, 1.0, bad, ones3, 0.0, ones4)
