"""cuda.reduce (numba.cuda's Reduce) and lambdas as device functions, as numba's documentation uses them."""

import numpy as np
import pytest

from lapis import cuda, hip
from lapis.cuda import CompileError


@cuda.reduce
def sum_reduce(a, b):
    return a + b


max_reduce = cuda.reduce(lambda a, b: max(a, b))


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
def test_the_documentation_s_sum_is_numpy_s_on_both_profiles(api):
    reducer = api.reduce(lambda a, b: a + b)
    values = np.arange(1234, dtype=np.float64) + 1
    got = reducer(values)
    assert got == values.sum() and isinstance(got, np.float64)


def test_a_lambda_reduction_over_many_blocks_folds_in_init_and_keeps_the_dtype():
    x = np.random.default_rng(3).standard_normal(300_000).astype(np.float32)   # more than 1024 blocks of 256
    got = max_reduce(x)
    assert got == x.max() and isinstance(got, np.float32)
    assert max_reduce(x, init=np.float32(100)) == 100           # init takes part, as in numba
    ints = np.arange(-50, 50, dtype=np.int32)
    total = sum_reduce(ints, init=7)
    assert total == ints.sum() + 7 and isinstance(total, np.int32)


def test_size_res_and_an_empty_reduction():
    x = np.arange(1, 101, dtype=np.float32)
    d = cuda.to_device(x)
    assert sum_reduce(d, size=10) == x[:10].sum()
    res = cuda.device_array(3, np.float32)
    assert sum_reduce(d, res=res) is None and res.copy_to_host()[0] == x.sum()      # no copy back: it is in res[0]
    assert sum_reduce(d, size=0, init=5) == 5
    assert sum_reduce(d, size=0, res=res, init=-2) is None and res.copy_to_host()[0] == -2
    with pytest.raises(ValueError, match="1-D"):
        sum_reduce(np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="outside"):
        sum_reduce(d, size=101)
    for functor in (5, lambda a: a):
        with pytest.raises(TypeError, match="function of two arguments"):
            cuda.reduce(functor)


def test_lambdas_compile_as_device_functions_and_an_ambiguous_one_is_a_clear_error():
    twice = cuda.jit(device=True)(lambda v: v * 2)
    offset = cuda.jit(device=True)(
        lambda v, by: v + by
    )

    @cuda.jit
    def apply(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = offset(twice(x[i]), 1.0)

    x = np.arange(8, dtype=np.float32)
    out = cuda.device_array_like(x)
    apply[1, 32](cuda.to_device(x), out)
    assert np.array_equal(out.copy_to_host(), x * 2 + 1)

    first, _ = cuda.jit(device=True)(lambda a, b: a - b), cuda.jit(device=True)(lambda a, b: a + b)

    @cuda.jit
    def ambiguous(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = first(x[i], 1.0)

    with pytest.raises(CompileError, match="2 lambdas of \\(a, b\\).*give the function a def"):
        ambiguous[1, 32](cuda.to_device(x))
