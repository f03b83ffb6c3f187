"""Layer 5: tensor ops and their gradients against PyTorch on the CPU, on `cpu` and on `cuda`.

`same(fn, *arrays)` runs one lambda on lapis tensors and on torch tensors made from the same
numpy arrays, and compares values, shapes, dtypes and (for float inputs) the gradients of the
sum of the output times a fixed random weight.
"""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lapis
from lapis import nn

rng = np.random.default_rng(5)
DEVICES = ["cpu", "cuda"]


def same(fn, *arrays, device="cpu", grad=True, atol=1e-5):
    ours = [lapis.tensor(a, device=device) for a in arrays]
    theirs = [torch.tensor(a) for a in arrays]
    differentiable = grad and all(a.dtype.kind == "f" for a in arrays)
    if differentiable:
        for o, t in zip(ours, theirs, strict=True):
            o.requires_grad_()
            t.requires_grad_()
    got, want = fn(lapis, ours), fn(torch, theirs)
    assert tuple(got.shape) == tuple(want.shape)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    assert got.device.type == device
    np.testing.assert_allclose(got.cpu().detach().numpy().astype(np.float64),
                               want.detach().numpy().astype(np.float64), rtol=1e-5, atol=atol)
    if differentiable and want.requires_grad:
        weight = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        (got * lapis.tensor(weight, device=device)).sum().backward()
        (want * torch.tensor(weight)).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            if t.grad is None:
                assert o.grad is None or not o.grad.cpu().numpy().any()
                continue
            assert o.grad is not None and tuple(o.grad.shape) == tuple(t.grad.shape)
            assert o.grad.dtype.name == str(t.grad.dtype).removeprefix("torch.")
            np.testing.assert_allclose(o.grad.cpu().numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", [
    ("add", lambda m, x: x[0] + x[1]), ("sub", lambda m, x: x[0] - x[1]), ("mul", lambda m, x: x[0] * x[1]),
    ("div", lambda m, x: x[0] / (x[1].abs() + 1)), ("maximum", lambda m, x: m.maximum(x[0], x[1])),
    ("where", lambda m, x: m.where(x[0] > x[1], x[0], x[1] * 2)), ("pow", lambda m, x: (x[0].abs() + 1) ** x[1]),
    ("pow_negative_base", lambda m, x: x[0] ** 3 + x[1] ** 2),
])
def test_binary_ops_broadcast_with_gradients(device, name, fn):
    same(fn, f32(3, 1, 4), f32(5, 1), device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "relu", "sin", "cos", "abs", "neg", "erf"])
def test_unary_ops_with_gradients(device, op):
    same(lambda m, x: getattr(x[0], op)(), f32(4, 6), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_clamp_values_and_gradients_at_the_bounds(device):
    x = np.array([[-2.0, -0.5, 0.0, 0.5], [1.0, 1.5, 3.0, -1.0]], np.float32)      # bounds hit exactly
    same(lambda m, t: t[0].clamp(-0.5, 1.0), x, device=device)
    same(lambda m, t: m.clamp(t[0], min=0.0), x, device=device)
    same(lambda m, t: t[0].clamp(max=0.5) * 2, x, device=device)
    same(lambda m, t: t[0].clamp(min=t[1]), x, x[::-1].copy(), device=device)          # a tensor bound
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        lapis.tensor(x, device=device).clamp()


@pytest.mark.parametrize("device", DEVICES)
def test_log_sqrt_rsqrt_on_positive_values(device):
    x = rng.uniform(0.5, 2, (7,)).astype(np.float32)
    for op in ("log", "sqrt", "rsqrt"):
        same(lambda m, t, op=op: getattr(t[0], op)(), x, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", [
    ("sum", lambda m, x: x[0].sum()), ("sum_dims", lambda m, x: x[0].sum((0, 2), keepdim=True)),
    ("mean", lambda m, x: x[0].mean(1)), ("max_dim", lambda m, x: x[0].max(1).values),
    ("min_dim", lambda m, x: x[0].min(-1, keepdim=True)[0]), ("argmax", lambda m, x: x[0].argmax(2)),
    ("prod", lambda m, x: x[0].prod(0)), ("var", lambda m, x: x[0].var(1)), ("std", lambda m, x: x[0].std()),
    ("logsumexp", lambda m, x: m.logsumexp(x[0], 1)), ("softmax", lambda m, x: m.softmax(x[0], -1)),
    ("log_softmax", lambda m, x: m.log_softmax(x[0], 0)), ("max_all", lambda m, x: x[0].max()),
])
def test_reductions_with_gradients(device, name, fn):
    same(fn, f32(3, 4, 5), device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", [
    ("permute", lambda m, x: x[0].permute(2, 0, 1) * 1), ("transpose", lambda m, x: x[0].transpose(0, 2).exp()),
    ("view_of_slice", lambda m, x: x[0][1:, ::2].reshape(-1) + 1), ("expand", lambda m, x: x[0][:, :1].expand(3, 4, 5)),
    ("unsqueeze_squeeze", lambda m, x: x[0].unsqueeze(1).squeeze(1).flatten(1)),
    ("index", lambda m, x: x[0][2, ..., None, 1]), ("narrow", lambda m, x: x[0].narrow(1, 1, 2).contiguous()),
    ("t_matmul", lambda m, x: x[0][0].t() @ x[0][1]), ("matmul_t", lambda m, x: x[0][0] @ x[0][1].t()),
    ("cat", lambda m, x: m.cat([x[0], x[0] * 2], 1)),
    ("stack", lambda m, x: m.stack([x[0][0], x[0][1]], 2)),
])
def test_views_and_joins_with_gradients(device, name, fn):
    same(fn, f32(3, 4, 5), device=device)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_matmul_rules_and_gradients(device):
    same(lambda m, x: x[0] @ x[1], f32(5, 3), f32(3, 4), device=device)
    same(lambda m, x: x[0] @ x[1], f32(3), f32(3, 4), device=device)
    same(lambda m, x: x[0] @ x[1], f32(2, 5, 3), f32(3, 4), device=device)
    same(lambda m, x: m.matmul(x[0], x[1]), f32(2, 1, 5, 3), f32(3, 3, 2), device=device)
    same(lambda m, x: x[0] @ x[1], f32(5, 3), f32(2, 3, 4), device=device)           # one matrix, broadcast
    # strided-batched operands read in place: transposed views of each matrix, as attention's q @ k^T
    same(lambda m, x: x[0] @ x[1].transpose(-1, -2), f32(2, 3, 4, 5), f32(2, 3, 6, 5), device=device)
    same(lambda m, x: x[0].transpose(-1, -2) @ x[1], f32(4, 5, 3), f32(4, 5, 2), device=device)
    same(lambda m, x: m.bmm(x[0], x[1]), f32(3, 2, 4), f32(3, 4, 5), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_type_promotion_follows_torch(device):
    i32 = np.arange(6, dtype=np.int32).reshape(2, 3)
    same(lambda m, x: x[0] * 2.5, i32, device=device)
    same(lambda m, x: x[0] + 2, i32, device=device)
    same(lambda m, x: x[0] / 2, i32, device=device)
    same(lambda m, x: x[0] + x[1], i32, np.ones(3, np.float64), device=device)
    same(lambda m, x: (x[0] > 2).sum(), i32, device=device)
    half = np.ones(3, np.float16)
    same(lambda m, x: x[0] * 2.5, half, device=device, grad=False)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.booleans(), min_size=3, max_size=3),
       st.booleans())
def test_broadcasting_over_generated_shapes(shape, ones, transposed):
    other = [1 if o else n for n, o in zip(shape, ones, strict=False)]
    a = f32(*shape)
    fn = (lambda m, x: x[0].t() * x[1].t() if x[0].ndim == 2 else x[0] * x[1]) if transposed else \
        (lambda m, x: x[0] * x[1] + x[0])
    same(fn, a, f32(*other), device="cuda")


# ops that take any strided view; each gets a non-contiguous operand made by permuting and slicing
VIEW_OPS = {
    "exp_add": lambda m, x: x[0].exp() + x[0],
    "mul_broadcast_row": lambda m, x: x[0] * x[0][..., :1],
    "sum_last": lambda m, x: x[0].sum(-1),
    "mean_first": lambda m, x: x[0].mean(0),
    "max_values": lambda m, x: x[0].max(-1).values,
    "softmax": lambda m, x: x[0].softmax(-1),
    "log_softmax_first": lambda m, x: x[0].log_softmax(0),
    "var": lambda m, x: x[0].var(-1),
    "matmul_own_transpose": lambda m, x: x[0] @ x[0].transpose(-1, -2),
    "where_clamp": lambda m, x: m.where(x[0] > 0, x[0].clamp(max=0.5), x[0] * 3),
    "reshape_copy": lambda m, x: x[0].reshape(-1) * 2,
}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=3), st.randoms(use_true_random=False),
       st.sampled_from(sorted(VIEW_OPS)), st.sampled_from(DEVICES))
@pytest.mark.slow
def test_ops_on_generated_non_contiguous_views(shape, random, op, device):
    base = f32(*shape)
    perm = list(range(len(shape)))
    random.shuffle(perm)
    starts = [random.randrange(n) if n > 1 and random.random() < 0.5 else 0 for n in shape]

    def fn(m, x):
        view = x[0].permute(*perm)[tuple(slice(st, None) for st in (starts[p] for p in perm))]
        return VIEW_OPS[op](m, [view])
    same(fn, base, device=device)


def test_autograd_engine():
    x = lapis.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    z = (y * x).sum()
    z.backward()
    assert x.grad.tolist() == [3.0, 12.0, 27.0] and y.grad.tolist() == [1.0, 2.0, 3.0]
    z2 = (x * 2).sum()
    z2.backward()                                             # gradients accumulate in leaves
    assert x.grad.tolist() == [5.0, 14.0, 29.0]
    (gx,) = lapis.autograd.grad((x ** 3).sum(), x)
    assert gx.tolist() == [3.0, 12.0, 27.0]
    with lapis.no_grad():
        assert not (x * 2).requires_grad
    w = x.detach()
    assert not w.requires_grad and w.is_leaf
    loss = (x * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_in_place_ops_bump_versions_and_autograd_notices():
    a = lapis.tensor([1.0, 2.0], requires_grad=True)
    b = a * 1
    c = b * b                                  # saves b
    with lapis.no_grad():
        b.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        a.add_(1)
    t = lapis.zeros(2, 3, device="cuda")
    t[0] = lapis.tensor([1.0, 2.0, 3.0], device="cuda")
    t[1, 1:].fill_(7)
    t.add_(1)
    assert t.tolist() == [[2.0, 3.0, 4.0], [1.0, 8.0, 8.0]]


def _in_place_program(m, device):
    # gradients through in-place ops on intermediates, index assignment and copy_, as torch rewrites history
    def leaf(values):
        return m.tensor(values, requires_grad=True) if m is torch else lapis.tensor(values, device=device,
                                                                                       requires_grad=True)
    w, v = leaf([1.0, 2.0, 3.0]), leaf([0.5, -1.0, 2.0])
    zeros = (lambda n: torch.zeros(n)) if m is torch else (lambda n: lapis.zeros(n, device=device))
    y = w * 2
    z = y.exp()                  # saves its result only, so y may change afterwards
    y.mul_(v)
    y.add_(1)
    q = zeros(3)
    q[1:] = v[:2] * 3            # a region takes a value that requires grad
    q.copy_(q + w * 2)
    buf = zeros(4)
    buf[_index(m, [0, 2], device)] = w[:2]
    buf[buf == 0] = 7.0
    loss = (y * y).sum() + z.sum() + (q * q).sum() + (buf * buf).sum()
    loss.backward()
    return loss, w.grad, v.grad


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_flow_through_in_place_ops_as_in_torch(device):
    ours, theirs = _in_place_program(lapis, device), _in_place_program(torch, None)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-5)
    x = lapis.tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x * 1
    with pytest.raises(NotImplementedError, match="in-place ops on a view"):
        y[0:1].add_(x[0:1])      # the view's base would keep its old history: refused, not silently wrong
    q = x * 2
    r = q * x                    # saves q
    q.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        r.sum().backward()


def _augmented_program(m, device):
    """Python's augmented assignments as torch users write them: names and views that share storage, the manual
    SGD step under no_grad, index assignment through autograd, and the errors torch gives."""
    kw = {} if m is torch else {"device": device}
    a = m.zeros(3, **kw)
    alias = a
    a += 1
    a *= 3
    a /= 4
    a **= 2
    a -= 0.5
    x = m.zeros(2, 3, **kw)
    row = x[0]
    row += m.arange(3, **kw).to(x.dtype)                    # through a view, into x
    lin = m.nn.Linear(2, 1)
    if m is lapis:
        lin = lin.to(device)
    with m.no_grad():
        lin.weight.copy_(m.tensor([[0.5, -1.0]]))
        lin.bias.zero_()
    for _ in range(2):
        lin.zero_grad()
        lin(m.ones(1, 2, **kw)).sum().backward()           # a second backward: the leaf still requires grad
        with m.no_grad():
            for p in lin.parameters():
                p -= 0.25 * p.grad
    w = m.tensor([1.0, 2.0, 3.0], requires_grad=True, **kw)
    z = w * m.ones(2, 3, **kw)
    z[0] += w * w                                          # a view of a graph's tensor: x[0] = x[0] + ...
    z.sum().backward()
    return [alias, a, x, lin.weight, lin.bias, z, w.grad]


@pytest.mark.parametrize("device", DEVICES)
def test_augmented_assignment_works_in_place_as_in_torch(device):
    ours, theirs = _augmented_program(lapis, device), _augmented_program(torch, None)
    assert ours[0] is ours[1]
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-6)
    leaf = lapis.ones(3, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        leaf += 1
    ints = lapis.ones(3, dtype=lapis.int64, device=device)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        ints += 1.5


def test_errors_match_torch():
    a, b = lapis.zeros(2, 3, device="cuda"), lapis.zeros(4, 3, device="cuda")
    with pytest.raises(RuntimeError, match=r"size of tensor a \(2\) must match the size of tensor b \(4\)"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        a + lapis.zeros(2, 3)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        a.t().view(6)
    assert a.t().reshape(6).shape == (6,)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients"):
        lapis.zeros(2, dtype=lapis.int64).requires_grad_()
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x3\)"):
        a @ b
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        a @ lapis.zeros(3, 2, dtype=lapis.float16, device="cuda")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        lapis.zeros(2, dtype=lapis.int64).add_(1.5)
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        lapis.bmm(a, b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, cuda:0 and cpu"):
        nn.functional.layer_norm(a, (3,), lapis.ones(3), lapis.zeros(3))


def _index(m, data, device):
    return m.tensor(data) if m is torch else lapis.tensor(data, device=device)


BASIC_INDICES = [1, -1, (0, 2), (slice(1, None), -2), (Ellipsis, 1), (None, Ellipsis, slice(None, None, 2)),
                 (1, None, Ellipsis, None), (Ellipsis,), (slice(None), None, 0, slice(3)), ()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", BASIC_INDICES, ids=str)
def test_basic_indexing_views_and_gradients_match_torch(index, device):
    same(lambda m, x: x[0][index] * 1, f32(3, 4, 5), device=device)


def test_basic_indexing_refuses_what_torch_refuses():
    for index in ((0, 0, 0, 0), (0, 4), (slice(None), -6)):
        with pytest.raises(IndexError) as expected:
            torch.ones(3, 4, 5)[index]
        with pytest.raises(IndexError) as error:
            lapis.ones(3, 4, 5)[index]
        assert str(error.value) == str(expected.value)


@pytest.mark.parametrize("device", DEVICES)
def test_cat_joins_along_any_dimension_and_refuses_mismatched_sizes_as_torch(device):
    same(lambda m, x: m.cat([x[0], x[1], x[0] * 3], -2), f32(2, 3, 4), f32(2, 1, 4), device=device)
    same(lambda m, x: m.cat([x[0][:, :0], x[1].double().float()], 1), f32(2, 3), f32(2, 2), device=device)
    same(lambda m, x: m.cat([x[0].t(), x[1]], 0), f32(3, 2), f32(1, 3), device=device)     # a strided piece
    for shape in ((2, 3, 1), (3,), (3, 3)):       # torch's error, word for word
        with pytest.raises(RuntimeError) as expected:
            torch.cat([torch.ones(2, 3), torch.ones(*shape)], 1)
        with pytest.raises(RuntimeError) as error:
            lapis.cat([lapis.ones(2, 3, device=device), lapis.ones(*shape, device=device)], 1)
        assert str(error.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="zero-dimensional tensor cannot be concatenated"):
        lapis.cat([lapis.tensor(1.0, device=device)])


@pytest.mark.parametrize("device", DEVICES)
def test_indexing_ops_with_gradients(device):
    idx = np.array([[0, 2, 1, 0], [3, 3, 0, 1], [2, 1, 1, 0]], np.int64)      # for dim 1 of a (3, 4) source
    same(lambda m, x: x[0].gather(1, _index(m, idx, device)), f32(3, 4), device=device)
    rows = np.array([2, 0, 2], np.int64)
    same(lambda m, x: m.index_select(x[0], 0, _index(m, rows, device)), f32(3, 5), device=device)
    same(lambda m, x: x[0][_index(m, rows, device)] * 2, f32(3, 5), device=device)
    same(lambda m, x: x[0].scatter_add(1, _index(m, idx, device), x[1]), f32(3, 4), f32(3, 4), device=device)
    mask = rng.random((3, 5)) > 0.5
    same(lambda m, x: x[0].masked_fill(_index(m, mask, device), -1.5), f32(3, 5), device=device)
    same(lambda m, x: x[0][_index(m, mask, device)], f32(3, 5), device=device)
    same(lambda m, x: m.tril(x[0], -1) + m.triu(x[0], 2), f32(4, 5), device=device)
    same(lambda m, x: m.cat([c * (i + 1) for i, c in enumerate(x[0].chunk(3, 1))], 1), f32(2, 7), device=device)
    same(lambda m, x: x[0].split([1, 3], 0)[1].sum(0), f32(4, 3), device=device)


@pytest.mark.parametrize("dims,kernels", [((0, 1), 1), ((1, 2), 1), ((0, 2), 2), ((0, 1, 2), 1)])
def test_a_sum_over_adjacent_dimensions_is_one_kernel(dims, kernels):
    a = f32(4, 5, 6)
    with lapis.trace() as t:
        got = lapis.tensor(a, device="cuda").sum(dims).cpu().numpy()
    assert len([e for e in t.select(3, "launch") if e.args["kernel"] in ("reduce_kernel", "row_sum_kernel")]) == kernels
    # float32 sums in another order than numpy's: an error of a few ulps of the terms, not of a total near zero
    np.testing.assert_allclose(got, a.astype(np.float64).sum(dims), rtol=1e-5, atol=1e-6 * np.abs(a).sum())
    assert got.shape == a.sum(dims).shape


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_reads_its_index_as_it_is(dim):
    """An embedding's lookup: one gather kernel forward and one scatter back, the index never spread over
    the other dimensions (no copy of it), with torch's values and gradients."""
    a, idx = f32(5, 6, 7), np.array([4, 0, 4, 1], np.int64)
    x = lapis.tensor(a, device="cuda", requires_grad=True)
    with lapis.trace() as t:
        y = x.index_select(dim, lapis.tensor(idx, device="cuda"))
        (y * 2).sum().backward()
    assert y.grad_fn.name() == "IndexSelectBackward0"
    kernels = [e.args["kernel"] for e in t.select(3, "launch")]
    assert "unary_kernel" not in kernels[:kernels.index("gather_kernel")]            # no copy before the gather
    xt = torch.tensor(a, requires_grad=True)
    yt = xt.index_select(dim, torch.tensor(idx))
    (yt * 2).sum().backward()
    np.testing.assert_allclose(y.detach().cpu().numpy(), yt.detach().numpy())
    assert y.shape == yt.shape
    np.testing.assert_allclose(x.grad.cpu().numpy(), xt.grad.numpy())
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(dim, lapis.tensor(idx, device="cuda"))


def test_the_pieces_of_a_chunk_send_their_gradients_back_through_one_join():
    """A packed projection split three ways (attention's q, k, v): one node joins the pieces' gradients,
    zeros for the piece none reached, instead of a zeros tensor, a copy and a sum per piece."""
    x = lapis.tensor(f32(4, 9), device="cuda", requires_grad=True)
    q, k, v = x.chunk(3, 1)
    loss = (q * 2 + k * 3).sum()
    with lapis.trace() as t:
        loss.backward()
    fills = [e for e in t.select(3, "launch") if e.args["kernel"] == "fill_kernel"]
    assert len(fills) == 2                              # the loss's ones and v's zeros, no more
    want = np.repeat(np.array([2, 3, 0], np.float32), 3)[None].repeat(4, 0)
    np.testing.assert_array_equal(x.grad.cpu().numpy(), want)
    assert q.grad_fn is k.grad_fn and q.grad_fn.name() == "SplitBackward0"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding_idx", [2, -1])
def test_an_embedding_s_padding_row_gets_no_gradient_as_torch_s(device, padding_idx):
    weight = f32(5, 3)
    idx = np.array([[2, 4, 0], [4, 2, 2]], np.int64)
    ours = lapis.tensor(weight, device=device, requires_grad=True)
    theirs = torch.tensor(weight, requires_grad=True)
    out = lapis.nn.functional.embedding(lapis.tensor(idx, device=device), ours, padding_idx)
    want = torch.nn.functional.embedding(torch.tensor(idx), theirs, padding_idx)
    w = f32(2, 3, 3)
    (out * lapis.tensor(w, device=device)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    assert tuple(out.shape) == tuple(want.shape)
    np.testing.assert_array_equal(out.detach().cpu().numpy(), want.detach().numpy())
    np.testing.assert_allclose(ours.grad.cpu().numpy(), theirs.grad.numpy(), atol=1e-6)
    module = lapis.nn.Embedding(5, 3, padding_idx=padding_idx).to(device)
    module(lapis.tensor(idx, device=device)).sum().backward()
    assert module.padding_idx == (padding_idx % 5)
    assert not module.weight.grad.cpu().numpy()[module.padding_idx].any()


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_and_save_load(device, tmp_path):
    emb = lapis.nn.Embedding(10, 4).to(device)
    ref = torch.nn.Embedding(10, 4)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(emb.weight.detach().cpu().numpy()))
    idx = np.array([[1, 9, 1], [0, 3, 1]], np.int64)
    out, want = emb(lapis.tensor(idx, device=device)), ref(torch.tensor(idx))
    np.testing.assert_allclose(out.detach().cpu().numpy(), want.detach().numpy())
    w = f32(2, 3, 4)
    (out * lapis.tensor(w, device=device)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.cpu().numpy(), ref.weight.grad.numpy(), atol=1e-6)
    path = tmp_path / "model.safetensors"
    lapis.save(emb.state_dict(), path)
    loaded = lapis.load(path, map_location=device)
    assert list(loaded) == ["weight"] and loaded["weight"].device.type == device
    np.testing.assert_array_equal(loaded["weight"].cpu().numpy(), emb.weight.detach().cpu().numpy())
    half = lapis.tensor([1.5, -2.25], dtype=lapis.bfloat16)
    lapis.save(half, tmp_path / "t.safetensors")
    back = lapis.load(tmp_path / "t.safetensors")
    assert back.dtype == lapis.bfloat16 and back.tolist() == [1.5, -2.25]
    raw = (tmp_path / "t.safetensors").read_bytes()
    header = raw[8:8 + int.from_bytes(raw[:8], "little")]
    assert b'"dtype":"BF16"' in header and b'"data_offsets":[0,4]' in header     # safetensors' layout


@pytest.mark.parametrize("device", DEVICES)
def test_logical_operators_of_bool_tensors(device):
    a, b = rng.random(7) > 0.5, rng.random(7) > 0.5
    ta, tb = lapis.tensor(a, device=device), lapis.tensor(b, device=device)
    for got, want in ((~ta, ~a), (ta & tb, a & b), (ta | tb, a | b), (ta ^ tb, a ^ b), (True & tb, b),
                      (ta | False, a), (ta.logical_not(), ~a)):
        assert got.dtype == lapis.bool and np.array_equal(got.cpu().numpy(), want)
    assert (~lapis.tensor([3, -1], device=device)).tolist() == [-4, 0]
    with pytest.raises(TypeError, match="integer and Boolean"):
        ~lapis.tensor([1.0], device=device)


def test_erf_on_cpu_is_float32_accurate_over_its_range():
    x = np.linspace(-6, 6, 20001, dtype=np.float32)
    got = lapis.tensor(x).erf().numpy()
    np.testing.assert_allclose(got, torch.tensor(x).erf().numpy(), rtol=0, atol=1.2e-7)   # about an ulp near 1
    near_zero = np.array([1e-6, -3e-4, 0.4999, 0.5, 0.5001], np.float32)                # the series' range and edge
    np.testing.assert_allclose(lapis.tensor(near_zero).erf().numpy(), torch.tensor(near_zero).erf().numpy(),
                               rtol=3e-7, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_division_by_zero_and_infinity_follows_ieee_as_torch(device):
    x = np.array([1.0, -1.0, 0.0, -0.0, np.inf], np.float32)
    for divisor in (0.0, -0.0, np.inf):
        for dtype in (lapis.float32, lapis.float64):
            got = (lapis.tensor(x, device=device, dtype=dtype) / divisor).cpu().numpy()
            want = (torch.tensor(x, dtype=getattr(torch, dtype.name)) / divisor).numpy()
            np.testing.assert_array_equal(got, want)
            numbers = ~np.isnan(want)
            assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


@pytest.mark.parametrize("device", DEVICES)
def test_triangles_of_batches_views_and_every_dtype_follow_torch(device):
    same(lambda m, x: m.triu(x[0], 1) * 2, f32(2, 3, 4, 5), device=device)                 # a batch of matrices
    same(lambda m, x: x[0].transpose(1, 2).tril(-2), f32(2, 5, 4), device=device)          # a strided view
    same(lambda m, x: m.tril(x[0], 7) - m.triu(x[0], -9), f32(3, 4), device=device)         # all or nothing kept
    ints = rng.integers(-5, 5, (4, 6)).astype(np.int32)
    same(lambda m, x: x[0].triu(2), ints, device=device)
    same(lambda m, x: m.ones(4, 4, dtype=m.bool, device=x[0].device).triu(1), f32(1), device=device, grad=False)
    with pytest.raises(RuntimeError, match="triu: input tensor must have at least 2 dimensions"):
        lapis.ones(3, device=device).triu()


@pytest.mark.parametrize("args", [(5,), (2, 9), (9, 2, -3), (-4, 7, 3), (3, 3)])
def test_an_integer_arange_on_a_gpu_follows_torch(args):
    for dtype in (None, lapis.int32):
        got = lapis.arange(*args, device="cuda", dtype=dtype)
        want = torch.arange(*args, dtype=None if dtype is None else torch.int32)
        assert got.device.type == "cuda" and tuple(got.shape) == tuple(want.shape)
        assert got.dtype.name == str(want.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())


def test_triangles_and_an_arange_on_a_gpu_are_one_kernel_each_and_upload_nothing():
    # torch launches one kernel for each; building them on the host would copy, and wait for the work before
    x = lapis.ones(16, 16, device="cuda")
    for make in (lambda: x.triu(1), lambda: x.tril(), lambda: lapis.arange(16, device="cuda")):
        make()
        with lapis.trace() as t:
            make()
        assert len(t.select(3, "launch")) == 1 and not t.select(3, "memcpy")


def test_randint_takes_torchs_two_forms():
    # randint(high, size) and randint(low, high, size): randint(2, (8,)) was read as low=2, high=(8,)
    for args, kwargs, low, high, shape in (((2, (8,)), {}, 0, 2, (8,)), ((300, (2, 3)), {}, 0, 300, (2, 3)),
                                           ((5, 7, (50,)), {}, 5, 7, (50,)), ((), {"low": 1, "high": 3, "size": (4,)},
                                                                              1, 3, (4,)),
                                           ((3,), {"size": (2, 2)}, 0, 3, (2, 2))):
        got = lapis.randint(*args, **kwargs)
        assert tuple(got.shape) == shape and got.dtype is lapis.int64
        values = got.numpy()
        assert values.min() >= low and values.max() < high
    with pytest.raises(TypeError, match="size"):
        lapis.randint(5)
    with pytest.raises(RuntimeError, match="expects 'from' to be less than 'to'"):
        lapis.randint(5, 5, (2,))


def test_is_contiguous_follows_a_tensor_whose_layout_changes_in_place():
    x = lapis.arange(6.0).reshape(2, 3).t()
    assert not x.is_contiguous() and not x.is_contiguous()      # asked twice: the second answer is the kept one
    x.data = lapis.zeros(3, 2)
    assert x.is_contiguous()
    y = lapis.zeros(3, 2)
    y._take(lapis.arange(6.0).reshape(2, 3).t())
    assert not y.is_contiguous()


@pytest.mark.parametrize("op", ["sum", "mean", "prod"])
def test_cpu_reductions_of_infinities_give_torchs_values_without_warnings(op):
    # inf + -inf, inf * 0 and overflow make NaN and inf, as torch's do, and numpy's RuntimeWarnings stay quiet
    values = [[np.inf, -np.inf, 1.0], [3e38, 3e38, 0.0], [np.inf, 0.0, 2.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = getattr(lapis.tensor(values), op)(1)
    want = getattr(torch.tensor(values), op)(1)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
