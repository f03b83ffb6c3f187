"""Layer 4: the framework's elementwise, where and reduction kernels against numpy.

`unary` and `binary` apply any device function per element (the framework's op table supplies one per op;
tests/test_tensor_ops.py walks that table); here device functions of the test's own check the machinery:
broadcasting, strides, numbers as arguments, casts into the output's dtype.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lapis import cuda, hip, trace
from lapis.libs import kernels, reductions

rng = np.random.default_rng(23)


@cuda.jit(device=True)
def softplus(v):
    return math.log(1.0 + math.exp(v))


@cuda.jit(device=True)
def negate(v):
    return -v


@cuda.jit(device=True)
def hypot(x, y):
    return math.sqrt(x * x + y * y)


@cuda.jit(device=True)
def plus(x, y):
    return x + y


@cuda.jit(device=True)
def less(x, y):
    return x < y


def run_unary(fn, x, out_dtype=None):
    out = cuda.device_array(x.shape, out_dtype or x.dtype)
    kernels.unary(cuda, fn, cuda.to_device(x), out)
    return out.copy_to_host()


def test_unary_applies_a_device_function():
    x = rng.uniform(-3, 3, (5, 7)).astype(np.float32)
    np.testing.assert_allclose(run_unary(softplus, x), np.log1p(np.exp(x)), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("fn,reference", [(hypot, np.hypot), (plus, np.add), (less, np.less)])
def test_binary_broadcast(fn, reference):
    # a: (3, 1, 4), b: (5, 1) -> out: (3, 5, 4)
    a = rng.uniform(0.5, 2, (3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2, (5, 1)).astype(np.float32)
    b[0, 0] = a[0, 0, 0]                                  # equal values, so a comparison sees a tie
    want = reference(a, b)
    out = cuda.device_array(want.shape, want.dtype)
    kernels.binary(cuda, fn, cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=2e-6)
    out = cuda.device_array(want.shape, want.dtype)        # a number operand travels as a kernel argument
    kernels.binary(cuda, fn, cuda.to_device(a), np.float32(1.25), out)
    np.testing.assert_allclose(out.copy_to_host(), reference(a, np.float32(1.25)) * np.ones(want.shape), rtol=2e-6)


def test_integer_ops_and_casting_out():
    a = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    b = rng.integers(1, 9, (6,)).astype(np.int32)
    out = cuda.device_array((4, 6), np.int32)
    kernels.binary(cuda, plus, cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_array_equal(out.copy_to_host(), a + b)
    # int32 -> float32 through copy, as torch's .to(float32)
    out = cuda.device_array(a.shape, np.float32)
    kernels.copy(cuda, cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), a.astype(np.float32))
    np.testing.assert_array_equal(run_unary(negate, a), -a)


def test_strided_and_reversed_views():
    host = rng.standard_normal((6, 8)).astype(np.float32)
    x = cuda.to_device(host)
    view = x[::-2, 1::3]                                   # negative and non-unit strides
    out = cuda.device_array(view.shape, np.float32)
    kernels.unary(cuda, negate, view, out)
    np.testing.assert_array_equal(out.copy_to_host(), -host[::-2, 1::3])
    # writing into a strided view touches only its elements
    dst_host = np.zeros((6, 8), np.float32)
    dst = cuda.to_device(dst_host)
    kernels.binary(cuda, plus, view, view, dst[1::2, ::3])
    dst_host[1::2, ::3] = 2 * host[::-2, 1::3]
    np.testing.assert_array_equal(dst.copy_to_host(), dst_host)


def test_where_and_scalars_as_zero_d():
    cond = rng.random((4, 5)) > 0.5
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = np.array(7.0, np.float32)                          # a 0-d operand broadcasts everywhere
    out = cuda.device_array((4, 5), np.float32)
    kernels.where(cuda, cuda.to_device(cond), cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_array_equal(out.copy_to_host(), np.where(cond, a, b))


NP_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "argmax": np.argmax,
             "argmin": np.argmin}


@pytest.mark.parametrize("op", reductions.REDUCTIONS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_reductions(op, dim):
    x = rng.uniform(0.5, 1.5, (3, 17, 4)).astype(np.float32)
    want = NP_REDUCE[op](x, axis=dim)
    out = cuda.device_array(want.shape, np.int64 if op.startswith("arg") else np.float32)
    reductions.reduce(cuda, op, cuda.to_device(x), dim, out)
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-5)


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
@pytest.mark.parametrize("shape,dim", [((3, 100, 45), 1), ((130, 64), 0), ((64, 32), 0)])
def test_a_sum_down_long_columns_splits_them_over_a_block(shape, dim, api):
    # 45 columns: a partial tile of 32; 130 rows: not a multiple of the block's rows; on the mi300x a wave of
    # 64 holds two warps' worth of the shuffle tree
    x = rng.standard_normal(shape).astype(np.float32)
    out = api.device_array(np.sum(x, axis=dim).shape, np.float32)
    with trace() as t:
        reductions.reduce(api, "sum", api.to_device(x), dim, out)
        api.synchronize()
    assert [e.args["kernel"] for e in t.select(3, "launch")] == ["column_sum_kernel"]
    np.testing.assert_allclose(out.copy_to_host(), np.sum(x.astype(np.float64), axis=dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,dim", [((3, 5), 1), ((70, 40), 0), ((2, 5000), 1)])   # by thread, column, split
def test_sums_and_products_start_from_zero_and_one_not_the_first_element_times_zero(shape, dim):
    """An infinite first element (of the whole array, or of each row) gives an infinite sum and product, as
    torch's: the reductions once started from x[0] * 0, which is NaN for it."""
    x = np.ones(shape, np.float32)
    x[0, 0] = np.inf
    x[(slice(None), 0) if dim == 1 else (0, slice(None))] = np.inf
    for op in ("sum", "prod"):
        out = cuda.device_array(np.sum(x, axis=dim).shape, np.float32)
        reductions.reduce(cuda, op, cuda.to_device(x), dim, out)
        np.testing.assert_array_equal(out.copy_to_host(), NP_REDUCE[op](x, axis=dim))


@pytest.mark.parametrize("shape,dtype", [((4096,), np.float32), ((3, 5000), np.float32), ((128, 65), np.float32),
                                         ((7, 33), np.float64), ((5, 100), np.int32)])
def test_a_sum_along_contiguous_rows_gives_each_row_a_block(shape, dtype):
    """x.sum() and sums over the last dimension: a block per row (a warp for short rows), the block's tree adding
    the threads' sums; int32 rows sum exactly into int64, as torch's."""
    x = (rng.standard_normal(shape) * 1000).astype(dtype)
    want = np.sum(x.astype(np.float64 if dtype != np.int32 else np.int64), axis=-1)
    out = cuda.device_array(want.shape, np.int64 if dtype == np.int32 else dtype)
    with trace() as t:
        reductions.reduce(cuda, "sum", cuda.to_device(x), x.ndim - 1, out)
        cuda.synchronize()
    launch = t.select(3, "launch")[0]
    assert launch.args["kernel"] == "row_sum_kernel"
    assert launch.args["block"][0] == reductions.row_sum_threads(shape[-1])
    if dtype == np.int32:
        np.testing.assert_array_equal(out.copy_to_host(), want)
    else:
        eps = np.finfo(dtype).eps                     # error bounded by the magnitudes added, not their sum
        np.testing.assert_allclose(out.copy_to_host(), want, rtol=0, atol=4 * eps * np.abs(x).sum(-1).max())


@pytest.mark.parametrize("shape,dim,dtype,kernel", [((256, 10), 0, np.float32, "row_sum_kernel"),
                                                    ((4, 300, 7), 1, np.float64, "row_sum_kernel"),
                                                    ((64, 5), 0, np.int32, "row_sum_kernel"),
                                                    ((40, 300, 7), 1, np.float32, "reduce_kernel"),
                                                    ((20, 3), 0, np.float32, "reduce_kernel")])
def test_a_few_sums_down_narrow_columns_give_each_a_block(shape, dim, dtype, kernel):
    """Up to 256 sums down columns narrower than 32 (a 10-way classifier's bias gradient) get a block each, as a
    row's sum does, instead of one thread adding its whole column alone; more outputs, or columns shorter than
    32, keep a thread each."""
    x = (np.random.default_rng(len(shape) + dim).standard_normal(shape) * 1000).astype(dtype)
    want = np.sum(x.astype(np.float64 if dtype != np.int32 else np.int64), axis=dim)
    out = cuda.device_array(want.shape, np.int64 if dtype == np.int32 else dtype)
    with trace() as t:
        reductions.reduce(cuda, "sum", cuda.to_device(x), dim, out)
        cuda.synchronize()
    assert t.select(3, "launch")[0].args["kernel"] == kernel
    if dtype == np.int32:
        np.testing.assert_array_equal(out.copy_to_host(), want)
    else:
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(out.copy_to_host(), want, rtol=0, atol=4 * eps * np.abs(x).sum(dim).max())


def test_max_propagates_nan_and_argmax_takes_the_first():
    x = np.array([[1, 5, 5, 2], [3, np.nan, 9, 9]], np.float32)
    out = cuda.device_array((2,), np.float32)
    reductions.reduce(cuda, "max", cuda.to_device(x), 1, out)
    np.testing.assert_array_equal(out.copy_to_host(), [5, np.nan])
    idx = cuda.device_array((2,), np.int64)
    reductions.reduce(cuda, "argmax", cuda.to_device(x), 1, idx)
    np.testing.assert_array_equal(idx.copy_to_host(), [1, 1])


@pytest.mark.parametrize("op", reductions.REDUCTIONS)
@pytest.mark.parametrize("shape,dim", [((20000,), 0), ((2, 9001, 3), 1), ((5000, 6), 0)])
def test_a_reduction_of_few_long_rows_splits_them_into_chunks(op, shape, dim):
    # x.sum() of a whole tensor: one thread per output would walk 20,000 elements alone (and a bigger tensor ran
    # into the watchdog); chunks of the row in parallel, then their partials in order, keep torch's answers:
    # the first extreme's index, a NaN winning, ties going to the first
    x = rng.uniform(0.999, 1.001, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[[7, 4100, 4101]] = 2.0                              # a tie for the maximum, across two chunks
    flat[[9, 13000]] = 0.5
    if op in ("max", "argmax"):
        np.moveaxis(x, dim, -1)[..., 5000 if x.shape[dim] > 5000 else 3] = np.nan
    want = NP_REDUCE[op](x.astype(np.float64), axis=dim)
    out = cuda.device_array(want.shape, np.int64 if op.startswith("arg") else np.float32)
    with trace() as t:
        reductions.reduce(cuda, op, cuda.to_device(x), dim, out)
        cuda.synchronize()
    rows = op == "sum" and math.prod(shape[dim + 1:]) < 32         # a sum along rows or narrow columns: a block each
    assert [e.args["kernel"] for e in t.select(3, "launch")][0] == ("row_sum_kernel" if rows else "split_reduce_kernel")
    got = out.copy_to_host()
    if op.startswith("arg"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_bad_operands_raise_before_launch():
    a = cuda.to_device(np.ones((3, 4), np.float32))
    out = cuda.to_device(np.zeros((3, 5), np.float32))
    with pytest.raises(kernels.KernelArgumentError, match="broadcast"):
        kernels.binary(cuda, plus, a, a, out)
    with pytest.raises(kernels.KernelArgumentError, match="device function"):
        kernels.unary(cuda, plus, a, a)                      # two arguments, where unary applies one
    with pytest.raises(kernels.KernelArgumentError, match="device function"):
        kernels.unary(cuda, "floor", a, a)
    with pytest.raises(kernels.KernelArgumentError, match="out must be"):
        reductions.reduce(cuda, "sum", a, 0, out)
    np.testing.assert_array_equal(out.copy_to_host(), 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_a_divider_divides_every_index_as_integer_division(d, n):
    """offset_of's quotient by multiplication equals n // d over the whole range it is used for."""
    magic, shift = kernels.divider(d)
    assert 0 <= magic < 2**32 and n * magic < 2**63
    for m in (n, n % (4 * d), d - 1, d, 2**31 - 1):
        assert (((m * magic) >> 32) + m) >> shift == m // d


@cuda.jit
def _split(values, d, word, out):
    i = cuda.grid(1)
    if i < values.size:
        out[i, 0], out[i, 1] = kernels.split_index(values[i], d, word)


@pytest.mark.parametrize("d", [1, 3, 96, 2**31 - 1])
def test_split_index_divides_by_its_word_and_by_division_past_2_31(d):
    """Below 2^31 the divider word's quotient; at and past it (word 0, as `divider_words` gives for such sizes)
    a division, exact up to 2^62."""
    small = np.array([0, 1, d - 1, d, min(2 * d + 1, 2**31 - 1), 2**31 - 1], np.int64)
    large = np.array([2**31, 2**40 + 7, 2**62 - 1, d * 2**20 + 5], np.int64)
    assert kernels.divider_words(2**31 - 1, d)[0] != 0 and kernels.divider_words(2**31, d) == [0]
    for values, word in ((small, kernels.divider_words(2**31 - 1, d)[0]), (large, np.int64(0))):
        out = cuda.device_array((values.size, 2), np.int64)
        _split[1, 32](cuda.to_device(values), np.int64(d), word, out)
        np.testing.assert_array_equal(out.copy_to_host(), np.stack([values // d, values % d], 1))


def test_strided_reads_of_every_rank_find_their_elements():
    """A permuted view of each rank read through offset_of (quotients by multiplication)."""
    rng = np.random.default_rng(3)
    for shape in [(7,), (3, 5), (2, 3, 7), (2, 3, 5, 7), (3, 1, 4, 1, 5)]:
        x = rng.standard_normal(shape).astype(np.float32)
        d = cuda.to_device(x)
        view = d._view(x.T.shape, d.strides[::-1], d.dtype)     # reversed axes: every dimension strided
        out = cuda.device_array(x.T.shape, np.float32)
        kernels.copy(cuda, view, out)
        assert np.array_equal(out.copy_to_host(), x.T)
