"""Layer 4: the framework's elementwise, where and reduction kernels against numpy."""

import math

import numpy as np
import pytest

from lapis import cuda
from lapis.libs import kernels

rng = np.random.default_rng(23)

UNARY_NP = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
            "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "sin": np.sin, "cos": np.cos, "relu": lambda v: np.maximum(v, 0), "copy": lambda v: v,
            "erf": np.vectorize(math.erf)}
BINARY_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
             "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
             "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def run_unary(op, x, out_dtype=None):
    out = cuda.device_array(x.shape, out_dtype or x.dtype)
    kernels.unary(cuda, op, cuda.to_device(x), out)
    return out.copy_to_host()


@pytest.mark.parametrize("op", kernels.UNARY)
def test_unary_float32(op):
    x = rng.uniform(0.1, 3, (5, 7)).astype(np.float32)
    if op in ("neg", "abs", "relu", "sin", "cos", "tanh", "sigmoid", "erf"):
        x -= 1.5
    np.testing.assert_allclose(run_unary(op, x), UNARY_NP[op](x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", kernels.BINARY)
def test_binary_broadcast(op):
    # a: (3, 1, 4), b: (5, 1) -> out: (3, 5, 4)
    a = rng.uniform(0.5, 2, (3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2, (5, 1)).astype(np.float32)
    b[0, 0] = a[0, 0, 0]                                  # equal values, so eq/le/ge see a tie
    want = BINARY_NP[op](a, b)
    out = cuda.device_array(want.shape, want.dtype)
    kernels.binary(cuda, op, cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=2e-6)


def test_integer_ops_and_casting_out():
    a = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    b = rng.integers(1, 9, (6,)).astype(np.int32)
    out = cuda.device_array((4, 6), np.int32)
    kernels.binary(cuda, "mul", cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_array_equal(out.copy_to_host(), a * b)
    # int32 -> float32 through copy, as torch's .to(float32)
    np.testing.assert_array_equal(run_unary("copy", a, np.float32), a.astype(np.float32))
    np.testing.assert_array_equal(run_unary("abs", a), np.abs(a))


def test_strided_and_reversed_views():
    host = rng.standard_normal((6, 8)).astype(np.float32)
    x = cuda.to_device(host)
    view = x[::-2, 1::3]                                   # negative and non-unit strides
    out = cuda.device_array(view.shape, np.float32)
    kernels.unary(cuda, "neg", view, out)
    np.testing.assert_array_equal(out.copy_to_host(), -host[::-2, 1::3])
    # writing into a strided view touches only its elements
    dst_host = np.zeros((6, 8), np.float32)
    dst = cuda.to_device(dst_host)
    kernels.binary(cuda, "add", view, view, dst[1::2, ::3])
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


@pytest.mark.parametrize("op", kernels.REDUCTIONS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_reductions(op, dim):
    x = rng.uniform(0.5, 1.5, (3, 17, 4)).astype(np.float32)
    want = NP_REDUCE[op](x, axis=dim)
    out = cuda.device_array(want.shape, np.int64 if op.startswith("arg") else np.float32)
    kernels.reduce(cuda, op, cuda.to_device(x), dim, out)
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-5)


def test_max_propagates_nan_and_argmax_takes_the_first():
    x = np.array([[1, 5, 5, 2], [3, np.nan, 9, 9]], np.float32)
    out = cuda.device_array((2,), np.float32)
    kernels.reduce(cuda, "max", cuda.to_device(x), 1, out)
    np.testing.assert_array_equal(out.copy_to_host(), [5, np.nan])
    idx = cuda.device_array((2,), np.int64)
    kernels.reduce(cuda, "argmax", cuda.to_device(x), 1, idx)
    np.testing.assert_array_equal(idx.copy_to_host(), [1, 1])


def test_bad_operands_raise_before_launch():
    a = cuda.to_device(np.ones((3, 4), np.float32))
    out = cuda.to_device(np.zeros((3, 5), np.float32))
    with pytest.raises(kernels.KernelArgumentError, match="broadcast"):
        kernels.binary(cuda, "add", a, a, out)
    with pytest.raises(kernels.KernelArgumentError, match="unary op"):
        kernels.unary(cuda, "floor", a, a)
    with pytest.raises(kernels.KernelArgumentError, match="out must be"):
        kernels.reduce(cuda, "sum", a, 0, out)
    np.testing.assert_array_equal(out.copy_to_host(), 0)
