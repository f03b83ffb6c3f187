"""Layer 4: DNN primitives, forward against numpy and backward against numerical gradients."""

import math

import numpy as np
import pytest

from lapis import cuda
from lapis.libs import dnn

rng = np.random.default_rng(17)
erf = np.vectorize(math.erf)


@pytest.fixture(scope="module")
def handle():
    return dnn.create(cuda)


def dev(a):
    return cuda.to_device(np.ascontiguousarray(a, np.float32))


def numeric_grad(f, x, dy, eps=1e-3):
    """d(sum(f(x) * dy))/dx by central differences, in float64."""
    g = np.zeros_like(x, np.float64)
    for i in np.ndindex(x.shape):
        up, down = x.astype(np.float64), x.astype(np.float64)
        up[i] += eps
        down[i] -= eps
        g[i] = ((f(up) * dy).sum() - (f(down) * dy).sum()) / (2 * eps)
    return g


ACT = {"relu": lambda v: np.maximum(v, 0), "gelu": lambda v: v * 0.5 * (1 + erf(v / np.sqrt(2))),
       "silu": lambda v: v / (1 + np.exp(-v)), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}


@pytest.mark.parametrize("mode", list(ACT))
def test_activations_forward_and_backward(handle, mode):
    desc = dnn.TensorDescriptor((2, 3, 4, 5))
    x = rng.standard_normal(desc.dims).astype(np.float32)
    x[np.abs(x) < 1e-2] = 0.5                         # keep relu's kink away from the finite differences
    dy = rng.standard_normal(desc.dims).astype(np.float32)
    y, dx = cuda.device_array(desc.dims, np.float32), cuda.device_array(desc.dims, np.float32)
    dnn.activation_forward(handle, mode, desc, dev(x), y)
    assert np.allclose(y.copy_to_host(), ACT[mode](x.astype(np.float64)), atol=2e-6)
    dnn.activation_backward(handle, mode, desc, dev(x), dev(dy), dx)
    assert np.allclose(dx.copy_to_host(), numeric_grad(ACT[mode], x, dy), atol=2e-3)


def softmax(v, log=False):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    return np.log(s) if log else s


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("cols", [1, 17, 300])
def test_softmax_forward_and_backward(handle, log, cols):
    x = (rng.standard_normal((5, cols)) * 3).astype(np.float32)
    dy = rng.standard_normal((5, cols)).astype(np.float32)
    y, dx = cuda.device_array(x.shape, np.float32), cuda.device_array(x.shape, np.float32)
    dnn.softmax_forward(handle, dev(x), y, log=log)
    assert np.allclose(y.copy_to_host(), softmax(x.astype(np.float64), log), atol=1e-5)
    dnn.softmax_backward(handle, y, dev(dy), dx, log=log)
    assert np.allclose(dx.copy_to_host(), numeric_grad(lambda v: softmax(v, log), x, dy), atol=2e-3)


def test_layer_norm_forward_and_backward(handle):
    rows, cols, eps = 4, 33, 1e-5
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    gamma, beta = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)

    def ln(v, g=gamma, b=beta):
        mu = v.mean(axis=-1, keepdims=True)
        return (v - mu) / np.sqrt(v.var(axis=-1, keepdims=True) + eps) * g + b
    y, mean, rstd = cuda.device_array(x.shape, np.float32), cuda.device_array(rows, np.float32), \
        cuda.device_array(rows, np.float32)
    dnn.layer_norm_forward(handle, dev(x), dev(gamma), dev(beta), eps, y, mean, rstd)
    assert np.allclose(y.copy_to_host(), ln(x.astype(np.float64)), atol=1e-5)
    dx, dg, db = cuda.device_array(x.shape, np.float32), cuda.device_array(cols, np.float32), \
        cuda.device_array(cols, np.float32)
    dnn.layer_norm_backward(handle, dev(x), dev(dy), dev(gamma), mean, rstd, dx, dg, db)
    assert np.allclose(dx.copy_to_host(), numeric_grad(ln, x, dy), atol=2e-3)
    assert np.allclose(dg.copy_to_host(), numeric_grad(lambda g: ln(x.astype(np.float64), g=g), gamma, dy),
                       atol=2e-3)
    assert np.allclose(db.copy_to_host(), dy.sum(axis=0), atol=1e-4)


def pool_ref(x, mode, k, s, p):
    n, c, h, w = x.shape
    padded = np.full((n, c, h + 2 * p, w + 2 * p), -np.inf if mode == "max" else 0.0)
    padded[:, :, p:p + h, p:p + w] = x
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = padded[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else win.sum(axis=(2, 3)) / (k * k)
    return out


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling_forward_and_backward(handle, mode, layout):
    dims, k, s, p = (2, 3, 7, 6), 3, 2, 1
    x = rng.standard_normal(dims).astype(np.float32)
    dy = rng.standard_normal(pool_ref(x, mode, k, s, p).shape).astype(np.float32)
    desc = dnn.TensorDescriptor(dims, layout)
    out = dnn.pooling_output(desc, (k, k), (s, s), (p, p))

    def to_layout(a):
        return a.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else a

    def from_layout(a, shape):
        return a.reshape(shape[0], shape[2], shape[3], shape[1]).transpose(0, 3, 1, 2) if layout == "NHWC" else \
            a.reshape(shape)
    y = cuda.device_array(out.size, np.float32)
    dnn.pooling_forward(handle, mode, desc, dev(to_layout(x)), (k, k), (s, s), (p, p), y)
    assert np.allclose(from_layout(y.copy_to_host(), out.dims), pool_ref(x, mode, k, s, p), atol=1e-6)
    dx = cuda.device_array(x.size, np.float32)
    dnn.pooling_backward(handle, mode, desc, dev(to_layout(x)), y, dev(to_layout(dy)), (k, k), (s, s), (p, p), dx)
    expected = numeric_grad(lambda v: pool_ref(v, mode, k, s, p), x, dy)
    assert np.allclose(from_layout(dx.copy_to_host(), dims), expected, atol=2e-3)


def test_dropout_is_seeded_scaled_and_reversible(handle):
    x = rng.standard_normal(10_000).astype(np.float32)
    y, mask = cuda.device_array(x.size, np.float32), cuda.device_array(x.size, np.bool_)
    dnn.dropout_forward(handle, 0.25, 7, dev(x), y, mask)
    m = mask.copy_to_host()
    assert 0.72 < m.mean() < 0.78
    assert np.allclose(y.copy_to_host(), np.where(m, x / 0.75, 0), atol=1e-6)
    y2, mask2 = cuda.device_array(x.size, np.float32), cuda.device_array(x.size, np.bool_)
    dnn.dropout_forward(handle, 0.25, 7, dev(x), y2, mask2)
    assert np.array_equal(mask2.copy_to_host(), m)                      # same seed, same mask
    dnn.dropout_forward(handle, 0.25, 8, dev(x), y2, mask2)
    assert not np.array_equal(mask2.copy_to_host(), m)
    dx = cuda.device_array(x.size, np.float32)
    dnn.dropout_backward(handle, 0.25, dev(np.ones_like(x)), mask, dx)
    assert np.allclose(dx.copy_to_host(), np.where(m, 1 / 0.75, 0))


def test_bad_arguments(handle):
    with pytest.raises(dnn.DnnError, match="one of relu"):
        dnn.activation_forward(handle, "swish", dnn.TensorDescriptor((1, 1, 1, 2)), dev([1, 2]), dev([1, 2]))
    with pytest.raises(dnn.DnnError, match="descriptor says 4"):
        dnn.activation_forward(handle, "relu", dnn.TensorDescriptor((1, 1, 2, 2)), dev([1, 2]), dev([1, 2]))
    with pytest.raises(dnn.DnnError, match="does not fit"):
        dnn.pooling_output(dnn.TensorDescriptor((1, 1, 2, 2)), (3, 3), (1, 1), (0, 0))
