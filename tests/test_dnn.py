"""Layer 4: DNN primitives, forward against numpy and backward against numerical gradients."""

import inspect
import math

import numpy as np
import pytest
import torch

from lapis import cuda, hip, trace
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


@pytest.mark.parametrize("mode", list(ACT))
def test_activations_at_infinities_and_nan_answer_as_torch(handle, mode):
    x = np.array([-np.inf, np.inf, np.nan, -3.0, 3.0], np.float32)
    y = cuda.device_array(5, np.float32)
    dnn.activation_forward(handle, mode, dnn.TensorDescriptor((5, 1, 1, 1)), dev(x), y)
    fn = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
          "tanh": torch.tanh, "sigmoid": torch.sigmoid}[mode]
    want = fn(torch.tensor(x)).numpy()
    if mode == "gelu":       # torch's erf form gives NaN at +inf (inf * 1); Phi(inf) = 1 makes it inf, as exact math
        want[1] = np.inf
    np.testing.assert_allclose(y.copy_to_host(), want, rtol=1e-5, atol=1e-6, equal_nan=True)


def softmax(v, log=False):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    return np.log(s) if log else s


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("cols", [1, 17, 300, 1500])       # a warp per row up to 1,024 columns, then a block
def test_softmax_forward_and_backward(handle, log, cols):
    x = (rng.standard_normal((5, cols)) * 3).astype(np.float32)
    dy = rng.standard_normal((5, cols)).astype(np.float32)
    y, dx = cuda.device_array(x.shape, np.float32), cuda.device_array(x.shape, np.float32)
    with trace() as t:
        dnn.softmax_forward(handle, dev(x), y, log=log)
        cuda.synchronize()
    kernel = "softmax_forward_kernel" if cols > dnn.WARP_ROW_COLS else "softmax_warp_forward_kernel"
    assert [e.args["kernel"] for e in t.select(3, "launch")] == [kernel]
    assert np.allclose(y.copy_to_host(), softmax(x.astype(np.float64), log), atol=1e-5)
    dnn.softmax_backward(handle, y, dev(dy), dx, log=log)
    assert np.allclose(dx.copy_to_host(), numeric_grad(lambda v: softmax(v, log), x, dy), atol=2e-3)


def test_softmax_of_a_warp_per_row_on_64_wide_waves():
    """On the mi300x a row's warp is a wave of 64 lanes, two rows a block of 128 threads: 7 rows leave the last
    block's second wave without a row."""
    x = (rng.standard_normal((7, 100)) * 3).astype(np.float32)
    y = hip.device_array(x.shape, np.float32)
    dnn.softmax_forward(dnn.create(hip), hip.to_device(x), y, log=True)
    np.testing.assert_allclose(y.copy_to_host(), softmax(x.astype(np.float64), True), atol=1e-5)


@pytest.mark.parametrize("cols", [5, 33, 300])        # blocks of 32, 64 and 128 threads
def test_layer_norm_forward_and_backward(handle, cols):
    rows, eps = 4, 1e-5
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


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
def test_layer_norm_parameter_gradients_sum_every_row(api):
    """dgamma and dbeta over 37 rows (not a multiple of the 16 row lanes) of 45 columns (a partial tile of 32);
    on the mi300x a wave of 64 holds four columns' shuffle trees."""
    rows, cols = 37, 45
    x, dy = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    mean, rstd = x.mean(1), 1 / np.sqrt(x.var(1) + 1e-5)
    dx, dg, db = api.device_array(x.shape, np.float32), api.device_array(cols, np.float32), \
        api.device_array(cols, np.float32)
    gamma = np.ones(cols, np.float32)
    dnn.layer_norm_backward(dnn.create(api), *(api.to_device(a) for a in (x, dy, gamma, mean.astype(np.float32),
                                                                         rstd.astype(np.float32))), dx, dg, db)
    xhat = (x.astype(np.float64) - mean[:, None]) * rstd[:, None]
    np.testing.assert_allclose(dg.copy_to_host(), (dy * xhat).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db.copy_to_host(), dy.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


def test_a_row_gets_a_block_of_its_length_rounded_up_to_a_power_of_two_from_a_warp_to_row_threads():
    assert [dnn.row_threads(c) for c in (1, 17, 32, 33, 64, 100, 128, 300)] == [32, 32, 32, 64, 64, 128, 128, 128]
    assert dnn.ROW_THREADS == 128


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
    # distinct values at least 0.01 apart: no window's two largest within the finite differences' 1e-3
    x = (rng.permutation(math.prod(dims)) * 0.01 - 1.2).astype(np.float32).reshape(dims)
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


def batch_norm_ref(x, gamma, beta, eps):
    mu = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma[None, :, None, None] + beta[None, :, None, None]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_training_inference_and_backward(handle, layout):
    dims, eps = (3, 4, 5, 6), 1e-5
    x = rng.standard_normal(dims).astype(np.float32) * 2 + 1
    gamma, beta = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    desc = dnn.TensorDescriptor(dims, layout)

    def to_layout(a):
        return a.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else a

    def from_layout(a):
        return a.reshape(3, 5, 6, 4).transpose(0, 3, 1, 2) if layout == "NHWC" else a.reshape(dims)
    run_mean, run_var = dev(np.zeros(4)), dev(np.ones(4))
    y, mean, rstd = cuda.device_array(x.size, np.float32), cuda.device_array(4, np.float32), \
        cuda.device_array(4, np.float32)
    dnn.batch_norm_forward(handle, desc, dev(to_layout(x)), dev(gamma), dev(beta), run_mean, run_var, eps, y, mean,
                           rstd)
    assert np.allclose(from_layout(y.copy_to_host()), batch_norm_ref(x.astype(np.float64), gamma, beta, eps),
                       atol=1e-4)
    assert np.allclose(run_mean.copy_to_host(), 0.1 * x.mean(axis=(0, 2, 3)), atol=1e-5)
    assert np.allclose(run_var.copy_to_host(), 0.9 + 0.1 * x.var(axis=(0, 2, 3), ddof=1), atol=1e-4)
    dx, dg, db = cuda.device_array(x.size, np.float32), cuda.device_array(4, np.float32), \
        cuda.device_array(4, np.float32)
    dnn.batch_norm_backward(handle, desc, dev(to_layout(x)), dev(to_layout(dy)), dev(gamma), mean, rstd, dx, dg, db)
    assert np.allclose(from_layout(dx.copy_to_host()),
                       numeric_grad(lambda v: batch_norm_ref(v, gamma, beta, eps), x, dy), atol=3e-3)
    assert np.allclose(db.copy_to_host(), dy.sum(axis=(0, 2, 3)), atol=1e-4)
    inference = cuda.device_array(x.size, np.float32)
    dnn.batch_norm_forward(handle, desc, dev(to_layout(x)), dev(gamma), dev(beta), run_mean, run_var, eps,
                           inference, training=False)
    rm, rv = run_mean.copy_to_host(), run_var.copy_to_host()
    expected = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + eps) * gamma[None, :, None, None] \
        + beta[None, :, None, None]
    assert np.allclose(from_layout(inference.copy_to_host()), expected, atol=1e-4)


def conv_ref(x, w, pad, stride, dil, groups):
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    p = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // stride[0] + 1
    q = (wd + 2 * pad[1] - dil[1] * (s - 1) - 1) // stride[1] + 1
    xp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]))
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    y = np.zeros((n, k, p, q))
    kg = k // groups
    for o in range(k):
        grp = o // kg
        for rr in range(r):
            for ss in range(s):
                patch = xp[:, grp * cg:(grp + 1) * cg, rr * dil[0]:rr * dil[0] + stride[0] * (p - 1) + 1:stride[0],
                           ss * dil[1]:ss * dil[1] + stride[1] * (q - 1) + 1:stride[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, rr, ss])
    return y


CONVS = [((2, 3, 9, 8), (4, 3, 3, 3), dnn.ConvolutionDescriptor()),
         ((1, 4, 10, 10), (6, 2, 3, 2), dnn.ConvolutionDescriptor((1, 2), (2, 1), (2, 1), 2)),
         ((2, 2, 5, 7), (3, 2, 1, 1), dnn.ConvolutionDescriptor((0, 0), (1, 2)))]


@pytest.mark.slow
@pytest.mark.parametrize("x_dims,w_dims,conv", CONVS)
def test_convolutions_every_algorithm_in_every_direction(handle, x_dims, w_dims, conv):
    x = rng.standard_normal(x_dims).astype(np.float32)
    w = rng.standard_normal(w_dims).astype(np.float32)
    desc = dnn.TensorDescriptor(x_dims)
    out = dnn.convolution_output(desc, w_dims, conv)
    ref = conv_ref(x.astype(np.float64), w, conv.padding, conv.stride, conv.dilation, conv.groups)
    assert out.dims == ref.shape
    dy = rng.standard_normal(ref.shape).astype(np.float32)
    f_x = lambda v: conv_ref(v, w, conv.padding, conv.stride, conv.dilation, conv.groups)   # noqa: E731
    f_w = lambda v: conv_ref(x, v, conv.padding, conv.stride, conv.dilation, conv.groups)   # noqa: E731
    want_dx, want_dw = numeric_grad(f_x, x, dy), numeric_grad(f_w, w, dy)
    y = cuda.device_array(out.size, np.float32)
    dx, dw = cuda.device_array(x.size, np.float32), cuda.device_array(w.size, np.float32)
    need = dnn.convolution_workspace_size(desc, w_dims, conv, "gemm")
    assert need == 4 * x.size * w_dims[2] * w_dims[3] * out.dims[2] * out.dims[3] // (x_dims[2] * x_dims[3])
    workspace = cuda.device_array(need, np.uint8)
    for algorithm in dnn.CONV_ALGORITHMS:
        dnn.convolution_forward(handle, desc, dev(x), w_dims, dev(w), conv, y, algorithm, workspace)
        assert np.allclose(y.copy_to_host().reshape(ref.shape), ref, atol=1e-4), algorithm
        dnn.convolution_backward_data(handle, desc, w_dims, dev(w), conv, dev(dy), dx, algorithm, workspace)
        assert np.allclose(dx.copy_to_host().reshape(x_dims), want_dx, atol=3e-3), algorithm
        dnn.convolution_backward_filter(handle, desc, dev(x), w_dims, conv, dev(dy), dw, algorithm, workspace)
        assert np.allclose(dw.copy_to_host().reshape(w_dims), want_dw, atol=3e-3), algorithm


@pytest.mark.parametrize("micro", [(4, 4), (2, 4), (4, 2)])
def test_every_micro_tile_of_the_implicit_gemm_agrees_with_the_direct_kernels(handle, monkeypatch, micro):
    # each direction's kernel with 4 outputs a thread along either side or both (a stride of 2 takes
    # backward-data through its dividing branch), forced onto a small problem
    from lapis.libs.dnn import convolution
    monkeypatch.setattr(convolution, "_micro_tile", lambda *args: micro)
    x_dims, w_dims, conv = (2, 48, 9, 9), (64, 48, 3, 3), dnn.ConvolutionDescriptor((1, 1), (2, 2))
    x, w = rng.standard_normal(x_dims).astype(np.float32), rng.standard_normal(w_dims).astype(np.float32)
    desc = dnn.TensorDescriptor(x_dims)
    out = dnn.convolution_output(desc, w_dims, conv)
    dy = rng.standard_normal(out.dims).astype(np.float32)
    got = {}
    for algorithm in ("implicit_gemm", "direct"):
        y = cuda.device_array(out.size, np.float32)
        dx, dw = cuda.device_array(x.size, np.float32), cuda.device_array(w.size, np.float32)
        with trace() as t:
            dnn.convolution_forward(handle, desc, dev(x), w_dims, dev(w), conv, y, algorithm)
            dnn.convolution_backward_data(handle, desc, w_dims, dev(w), conv, dev(dy), dx, algorithm)
            dnn.convolution_backward_filter(handle, desc, dev(x), w_dims, conv, dev(dy), dw, algorithm)
            got[algorithm] = [a.copy_to_host() for a in (y, dx, dw)]
        if algorithm == "implicit_gemm":           # (columns, rows) of 50, 162 and 432 by 64, 48 and 64
            grids = [e.args["grid"][:2] for e in t.select(3, "launch") if e.args["kernel"] == "conv_gemm_kernel"]
            tiles = [(-(-cols // (16 * micro[1])), -(-rows // (16 * micro[0])))
                     for cols, rows in ((50, 64), (162, 48), (432, 64))]
            assert grids == tiles
    ref = conv_ref(x.astype(np.float64), w, conv.padding, conv.stride, conv.dilation, conv.groups)
    assert np.allclose(got["implicit_gemm"][0].reshape(ref.shape), ref, atol=1e-3)
    for ours, direct in zip(got["implicit_gemm"], got["direct"], strict=True):
        assert np.allclose(ours, direct, atol=1e-3)


def test_a_micro_tile_widens_only_long_sides_of_grids_that_stay_full():
    from lapis.libs.dnn.convolution import _micro_tile
    assert _micro_tile("forward", 32, 50176, 9, 1, 132) == (2, 4)           # 32 rows: only the columns widen
    assert _micro_tile("forward", 64, 12544, 288, 1, 132) == (4, 4)
    assert _micro_tile("forward", 16, 4096, 9, 1, 132) == (2, 2)            # 64 blocks would leave units idle
    assert _micro_tile("backward_filter", 64, 288, 12544, 1, 132) == (4, 4)  # split-K fills the grid
    assert _micro_tile("backward_filter", 32, 144, 1024, 1, 132) == (2, 2)   # a short depth: few splits


def test_every_convolution_kernel_takes_the_geometry_fields_first():
    fields = list(dnn.ConvGeometry._fields)
    kernels = [dnn.conv_direct_kernel, dnn.conv_backward_data_kernel, dnn.conv_backward_filter_kernel,
               dnn.conv_im2col_kernel, dnn.conv_col2im_kernel, *map(dnn.make_conv_gemm_kernel, dnn.CONV_DIRECTIONS)]
    for kernel in kernels:                              # launches spread a ConvGeometry into these parameters
        assert list(inspect.signature(kernel).parameters)[:len(fields)] == fields, kernel.__name__
    x, filt = dnn.TensorDescriptor((2, 4, 5, 6), "NHWC"), dnn.FilterDescriptor((8, 2, 3, 3), "NHWC")
    out, g = dnn.convolution._conv_geometry(x, filt, dnn.ConvolutionDescriptor(padding=(1, 0), stride=(2, 1), groups=2))
    assert (g.n, g.c, g.h, g.wd, g.k, g.r, g.s, g.p, g.q, g.groups) == (2, 4, 5, 6, 8, 3, 3, 3, 4, 2)
    assert out.dims == (2, 8, 3, 4)
    assert (g.xs_n, g.xs_c, g.xs_h, g.xs_w) == (120, 1, 24, 4) and (g.ws_k, g.ws_c, g.ws_r, g.ws_s) == (18, 1, 6, 2)
    assert (g.pad_h, g.pad_w, g.stride_h, g.stride_w) == (1, 0, 2, 1)
    assert all(v.dtype == np.int32 for v in g.kernel_args())


@pytest.mark.slow
@pytest.mark.parametrize("x_layout,w_layout", [("NHWC", "NHWC"), ("NHWC", "NCHW"), ("NCHW", "NHWC")])
def test_convolutions_of_nhwc_tensors_and_krsc_filters(handle, x_layout, w_layout):
    x_dims, w_dims, conv = CONVS[1]                     # groups, stride, dilation and padding
    x = rng.standard_normal(x_dims).astype(np.float32)
    w = rng.standard_normal(w_dims).astype(np.float32)
    desc, filt = dnn.TensorDescriptor(x_dims, x_layout), dnn.FilterDescriptor(w_dims, w_layout)
    ref = conv_ref(x.astype(np.float64), w, conv.padding, conv.stride, conv.dilation, conv.groups)
    dy = rng.standard_normal(ref.shape).astype(np.float32)
    f_x = lambda v: conv_ref(v, w, conv.padding, conv.stride, conv.dilation, conv.groups)   # noqa: E731
    f_w = lambda v: conv_ref(x, v, conv.padding, conv.stride, conv.dilation, conv.groups)   # noqa: E731
    want_dx, want_dw = numeric_grad(f_x, x, dy), numeric_grad(f_w, w, dy)

    def lay(a, layout):                                 # NCHW (KCRS) -> the layout's order, and back
        return a.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else a

    def unlay(a, layout, dims):
        return a.reshape(dims[0], dims[2], dims[3], dims[1]).transpose(0, 3, 1, 2) if layout == "NHWC" else \
            a.reshape(dims)
    out = dnn.convolution_output(desc, filt, conv)
    assert out.layout == x_layout and out.dims == ref.shape
    y, dx, dw = (cuda.device_array(n, np.float32) for n in (out.size, x.size, w.size))
    for algorithm in ("implicit_gemm", "direct"):
        dnn.convolution_forward(handle, desc, dev(lay(x, x_layout)), filt, dev(lay(w, w_layout)), conv, y, algorithm)
        assert np.allclose(unlay(y.copy_to_host(), x_layout, ref.shape), ref, atol=1e-4), algorithm
        dnn.convolution_backward_data(handle, desc, filt, dev(lay(w, w_layout)), conv, dev(lay(dy, x_layout)), dx,
                                      algorithm)
        assert np.allclose(unlay(dx.copy_to_host(), x_layout, x_dims), want_dx, atol=3e-3), algorithm
        dnn.convolution_backward_filter(handle, desc, dev(lay(x, x_layout)), filt, conv, dev(lay(dy, x_layout)), dw,
                                        algorithm)
        assert np.allclose(unlay(dw.copy_to_host(), w_layout, w_dims), want_dw, atol=3e-3), algorithm
    with pytest.raises(dnn.DnnError, match="NCHW tensors and KCRS filters"):
        dnn.convolution_forward(handle, desc, dev(lay(x, x_layout)), filt, dev(lay(w, w_layout)), conv, y, "gemm",
                                cuda.device_array(1 << 20, np.uint8))
    ranking = dnn.find_convolution_forward_algorithm(handle, desc, dev(lay(x, x_layout)), filt,
                                                     dev(lay(w, w_layout)), conv, y)
    assert sorted(a for a, _ in ranking) == ["direct", "implicit_gemm"]     # gemm is not supported here


@pytest.mark.slow
def test_find_steps_rank_the_algorithms_and_get_remembers_the_winner():
    handle = dnn.create(cuda)
    x_dims, w_dims, conv = CONVS[0]
    desc = dnn.TensorDescriptor(x_dims)
    out = dnn.convolution_output(desc, w_dims, conv)
    x, w, dy = dev(rng.standard_normal(x_dims)), dev(rng.standard_normal(w_dims)), dev(rng.standard_normal(out.dims))
    assert dnn.get_convolution_algorithm(handle, "forward", desc, w_dims, conv) == "implicit_gemm"
    y, dx, dw = (cuda.device_array(size, np.float32) for size in (out.size, desc.size, int(np.prod(w_dims))))
    for direction, ranking in (
            ("forward", dnn.find_convolution_forward_algorithm(handle, desc, x, w_dims, w, conv, y)),
            ("backward_data", dnn.find_convolution_backward_data_algorithm(handle, desc, w_dims, w, conv, dy, dx)),
            ("backward_filter", dnn.find_convolution_backward_filter_algorithm(handle, desc, x, w_dims, conv, dy,
                                                                               dw))):
        assert sorted(a for a, _ in ranking) == sorted(dnn.CONV_ALGORITHMS)
        times = [ms for _, ms in ranking]
        assert all(ms > 0 for ms in times) and times == sorted(times)
        assert dnn.get_convolution_algorithm(handle, direction, desc, w_dims, conv) == ranking[0][0]


def test_a_missing_or_small_workspace_is_refused_before_launch(handle):
    x_dims, w_dims, conv = CONVS[0]
    desc = dnn.TensorDescriptor(x_dims)
    out = dnn.convolution_output(desc, w_dims, conv)
    y = cuda.to_device(np.full(out.size, 7, np.float32))
    x, w = dev(rng.standard_normal(x_dims)), dev(rng.standard_normal(w_dims))
    need = dnn.convolution_workspace_size(desc, w_dims, conv, "gemm")
    assert dnn.convolution_workspace_size(desc, w_dims, conv, "implicit_gemm") == 0
    with pytest.raises(dnn.DnnError, match=f"needs a workspace of {need} bytes, got none"):
        dnn.convolution_forward(handle, desc, x, w_dims, w, conv, y, "gemm")
    with pytest.raises(dnn.DnnError, match=f"needs a workspace of {need} bytes, got {need - 4}"):
        dnn.convolution_forward(handle, desc, x, w_dims, w, conv, y, "gemm", cuda.device_array(need - 4, np.uint8))
    with pytest.raises(dnn.DnnError, match="algorithm must be one of"):
        dnn.convolution_backward_data(handle, desc, w_dims, w, conv, y, x, "winograd")
    assert np.all(y.copy_to_host() == 7)


def attention_ref(q, k, v, causal):
    d = q.shape[-1]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool))[None], s, -np.inf)
    return softmax(s) @ v


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t,d", [(5, 8), (70, 16), (9, 24)])       # lanes kernels, then the tiled ones
def test_fused_attention_forward_and_backward(handle, causal, t, d):
    bh = 3
    q, k, v = (rng.standard_normal((bh, t, d)).astype(np.float32) for _ in range(3))
    do = rng.standard_normal((bh, t, d)).astype(np.float32)
    o, lse = cuda.device_array((bh, t, d), np.float32), cuda.device_array((bh, t), np.float32)
    dq, dk, dv = (cuda.device_array((bh, t, d), np.float32) for _ in range(3))
    dev_q, dev_k, dev_v = dev(q), dev(k), dev(v)
    dnn.attention_forward(handle, dev_q, dev_k, dev_v, o, lse, causal=causal)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    assert np.allclose(o.copy_to_host(), attention_ref(q64, k64, v64, causal), atol=1e-5)
    dnn.attention_backward(handle, dev_q, dev_k, dev_v, o, dev(do), lse, dq, dk, dv, causal=causal)
    scale = 1 / np.sqrt(d)                                # the analytic gradients, for every size
    s = q64 @ k64.transpose(0, 2, 1) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool))[None], s, -np.inf)
    p = softmax(s)
    dp = do @ v64.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    assert np.allclose(dv.copy_to_host(), p.transpose(0, 2, 1) @ do, atol=1e-4)
    assert np.allclose(dq.copy_to_host(), ds @ k64 * scale, atol=1e-4)
    assert np.allclose(dk.copy_to_host(), ds.transpose(0, 2, 1) @ q64 * scale, atol=1e-4)
    if t > 10:
        return                                            # finite differences on the small case only
    assert np.allclose(dq.copy_to_host(), numeric_grad(lambda a: attention_ref(a, k64, v64, causal), q, do),
                       atol=2e-3)
    assert np.allclose(dk.copy_to_host(), numeric_grad(lambda a: attention_ref(q64, a, v64, causal), k, do),
                       atol=2e-3)
    assert np.allclose(dv.copy_to_host(), numeric_grad(lambda a: attention_ref(q64, k64, a, causal), v, do),
                       atol=2e-3)


def _strided(base_dev, base_host: np.ndarray, view: np.ndarray) -> cuda.DeviceNDArray:
    """The device twin of `view`, a numpy view of base_host, over base_dev (a copy of base_host)."""
    offset = view.__array_interface__["data"][0] - base_host.__array_interface__["data"][0]
    return cuda.DeviceNDArray(view.shape, view.strides, view.dtype, base_dev.context, base_dev.memory,
                              base_dev.ptr + offset)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t_q,t_k,d", [(5, 37, 16), (40, 3, 32), (33, 33, 4)])   # chunks of 16, 8, 32 rows
def test_lanes_attention_with_query_and_key_lengths_apart(handle, causal, t_q, t_k, d):
    # The lanes kernels stage the other side's rows in chunks: a chunk past the end, a partial one, and a
    # causal mask (top-left, as torch's is_causal) over rectangular scores.
    bh = 2
    q, do = (rng.standard_normal((bh, t_q, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((bh, t_k, d)).astype(np.float32) for _ in range(2))
    o, lse = cuda.device_array((bh, t_q, d), np.float32), cuda.device_array((bh, t_q), np.float32)
    dq, dk, dv = (cuda.device_array(x.shape, np.float32) for x in (q, k, v))
    dev_q, dev_k, dev_v = dev(q), dev(k), dev(v)
    dnn.attention_forward(handle, dev_q, dev_k, dev_v, o, lse, causal=causal)
    dnn.attention_backward(handle, dev_q, dev_k, dev_v, o, dev(do), lse, dq, dk, dv, causal=causal)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ k64.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((t_q, t_k), bool))[None], s, -np.inf)
    p = softmax(s)
    dp = do @ v64.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / np.sqrt(d)
    assert np.allclose(o.copy_to_host(), p @ v64, atol=1e-5)
    assert np.allclose(lse.copy_to_host(), np.log(np.exp(s).sum(axis=-1)), atol=1e-5)
    assert np.allclose(dq.copy_to_host(), ds @ k64, atol=1e-4)
    assert np.allclose(dk.copy_to_host(), ds.transpose(0, 2, 1) @ q64, atol=1e-4)
    assert np.allclose(dv.copy_to_host(), p.transpose(0, 2, 1) @ do, atol=1e-4)


@pytest.mark.parametrize("d", [8, 24])                  # the lanes kernels, then the tiled ones
def test_fused_attention_reads_and_writes_strided_heads(handle, d):
    # q, k, v: (B, H, T, D) views of one packed projection (B, T, 3 H D), as a transformer's heads are;
    # o and the gradients: (B, H, T, D) views of (B, T, H, D) storage.
    b, h, t = 2, 3, 6
    packed = rng.standard_normal((b, t, 3 * h * d)).astype(np.float32)
    heads = [packed[:, :, n * h * d:(n + 1) * h * d].reshape(b, t, h, d).transpose(0, 2, 1, 3) for n in range(3)]
    packed_dev = dev(packed)
    q, k, v = (_strided(packed_dev, packed, x) for x in heads)
    storage = [cuda.device_array((b, t, h, d), np.float32) for _ in range(5)]
    host = np.empty((b, t, h, d), np.float32)
    o, do, dq, dk, dv = (_strided(x, host, host.transpose(0, 2, 1, 3)) for x in storage)
    g = rng.standard_normal((b, t, h, d)).astype(np.float32)
    storage[1].copy_to_device(g)
    lse = cuda.device_array((b * h, t), np.float32)
    dnn.attention_forward(handle, q, k, v, o, lse, causal=True)
    q3, k3, v3 = (np.ascontiguousarray(x).reshape(b * h, t, d).astype(np.float64) for x in heads)
    rows = lambda x: x.transpose(0, 2, 1, 3).reshape(b * h, t, d)       # noqa: E731  (B, T, H, D) -> (BH, T, D)
    assert np.allclose(rows(storage[0].copy_to_host()), attention_ref(q3, k3, v3, True), atol=1e-5)
    dnn.attention_backward(handle, q, k, v, o, do, lse, dq, dk, dv, causal=True)
    s = np.where(np.tril(np.ones((t, t), bool))[None], q3 @ k3.transpose(0, 2, 1) / np.sqrt(d), -np.inf)
    p, g3 = softmax(s), rows(g)
    dp = g3 @ v3.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / np.sqrt(d)
    assert np.allclose(rows(storage[4].copy_to_host()), p.transpose(0, 2, 1) @ g3, atol=1e-4)
    assert np.allclose(rows(storage[2].copy_to_host()), ds @ k3, atol=1e-4)
    assert np.allclose(rows(storage[3].copy_to_host()), ds.transpose(0, 2, 1) @ q3, atol=1e-4)


def test_fused_attention_refuses_a_strided_head_dimension(handle):
    x = cuda.device_array((2, 4, 8, 2), np.float32)
    transposed = cuda.DeviceNDArray((2, 4, 2, 8), (256, 64, 4, 8), np.float32, x.context, x.memory, x.ptr)
    with pytest.raises(dnn.DnnError, match="q must have a contiguous head dimension"):
        dnn.attention_forward(handle, transposed, transposed, transposed, transposed,
                              cuda.device_array((8, 2), np.float32))


def test_the_package_exports_every_family_name_and_keeps_kernels_beside_their_wrappers():
    from lapis.libs.dnn import activation, attention, convolution, descriptors, dropout, handle, normalization, pooling
    for module in (activation, attention, convolution, descriptors, dropout, handle, normalization, pooling):
        for name, value in vars(module).items():
            if not name.startswith("_") and not inspect.ismodule(value) and \
                    getattr(value, "__module__", module.__name__) == module.__name__:
                assert name in dnn.__all__ and getattr(dnn, name) is value, f"{module.__name__}.{name}"
    for kernel, wrapper in ((dnn.make_activation_kernel, dnn.activation_forward),
                            (dnn.dropout_kernel, dnn.dropout_forward),
                            (dnn.softmax_backward_kernel, dnn.softmax_backward),
                            (dnn.batch_norm_forward_kernel, dnn.batch_norm_forward),
                            (dnn.pooling_backward_kernel, dnn.pooling_backward),
                            (dnn.conv_col2im_kernel, dnn.convolution_backward_data),
                            (dnn.lanes_kernels, dnn.attention_backward)):
        assert kernel.__module__ == wrapper.__module__
