"""Layer 4: level-1 BLAS against numpy, with strides, negative increments and odd sizes."""

import numpy as np
import pytest

from lapis import cuda
from lapis.libs import blas

rng = np.random.default_rng(5)


@pytest.fixture(scope="module")
def handle():
    return blas.create(cuda)


def strided(v: np.ndarray, inc: int) -> np.ndarray:
    """Storage holding v at every |inc|-th element (reversed for a negative increment)."""
    out = np.full((len(v) - 1) * abs(inc) + 1, 99.0, v.dtype)
    out[::abs(inc)] = v if inc > 0 else v[::-1]
    return out


@pytest.mark.parametrize("n", [1, 17, 1000, 70_000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_scal_copy_swap(handle, n, dtype):
    x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    axpy = (1.5 * x.astype(np.float64) + y).astype(dtype)      # a float32 FFMA rounds once: the exact value, rounded
    for incx, incy in ((1, 1), (2, -3)):
        dx, dy = cuda.to_device(strided(x, incx)), cuda.to_device(strided(y, incy))
        blas.axpy(handle, n, 1.5, dx, incx, dy, incy)
        assert np.allclose(dy.copy_to_host(), strided(axpy, incy), rtol=1e-6)
        blas.scal(handle, n, -2.0, dx, incx)
        assert np.array_equal(dx.copy_to_host(), strided(dtype(-2.0) * x, incx))
        blas.swap(handle, n, dx, incx, dy, incy)
        assert np.allclose(dx.copy_to_host(), strided(axpy, incx), rtol=1e-6)
        blas.copy(handle, n, dy, incy, dx, incx)
        assert np.array_equal(dx.copy_to_host(), strided(dtype(-2.0) * x, incx))


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 17, 1000, 300_000])
def test_reductions(handle, n):
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = cuda.to_device(strided(x, 3)), cuda.to_device(strided(y, -1))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert blas.dot(handle, n, dx, 3, dy, -1) == pytest.approx(x64 @ y64, rel=1e-4, abs=1e-4)
    assert blas.nrm2(handle, n, dx, 3) == pytest.approx(np.linalg.norm(x64), rel=1e-5)
    assert blas.asum(handle, n, dx, 3) == pytest.approx(np.abs(x64).sum(), rel=1e-5)
    assert blas.iamax(handle, n, dx, 3) == int(np.argmax(np.abs(x))) + 1
    first = blas.dot(handle, n, dx, 3, dy, -1)
    assert blas.dot(handle, n, dx, 3, dy, -1) == first                 # bitwise deterministic


def test_iamax_takes_the_first_of_equal_magnitudes(handle):
    x = np.zeros(5000, np.float32)
    x[[4000, 123, 2600]] = [-7.0, 7.0, 7.0]
    assert blas.iamax(handle, 5000, cuda.to_device(x), 1) == 124


def test_an_infinite_first_element_gives_infinite_sums_and_is_the_largest(handle):
    """Each reduction starts from its dtype's zero, not x[0] * 0 (NaN for an infinite x[0])."""
    d = cuda.to_device(np.array([np.inf, 1, -2], np.float32))
    assert blas.asum(handle, 3, d, 1) == np.inf and blas.nrm2(handle, 3, d, 1) == np.inf
    assert blas.dot(handle, 3, d, 1, d, 1) == np.inf and blas.iamax(handle, 3, d, 1) == 1


def test_bad_arguments_launch_nothing(handle):
    x = cuda.to_device(np.ones(10, np.float32))
    with pytest.raises(blas.BlasError, match="needs 19"):
        blas.axpy(handle, 10, 1.0, x, 2, x, 1)
    with pytest.raises(blas.BlasError, match="not be zero"):
        blas.scal(handle, 5, 1.0, x, 0)
    with pytest.raises(blas.BlasError, match="share a dtype"):
        blas.dot(handle, 10, x, 1, cuda.to_device(np.ones(10)), 1)
    assert blas.asum(handle, 0, x, 1) == 0.0 and blas.iamax(handle, 0, x, 1) == 0
