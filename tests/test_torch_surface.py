"""Layer 5: the parts of torch's surface that programs reach for beside the op table, each derived from the ops
(reductions, gathers, in-place writes) and checked against PyTorch on `cpu` and `cuda`: all/any, norm, flip, roll,
unbind, masked_fill_, clamp_, isclose/allclose/equal, type names, .data, grad-mode switches, indexing (out of range,
negative, several index tensors), nn.utils clipping, Module.apply, more losses and pad, generators, nonzero,
index_add, pinned memory, lapis.accelerator, and where lapis.load puts a checkpoint's tensors."""

import math
import pickle

import numpy as np
import pytest
import torch

import lapis
from test_op_table import DEVICES
from test_op_table import _check as same  # shape, dtype and values against torch's

rng = np.random.default_rng(5)


@pytest.mark.parametrize("device", DEVICES)
def test_all_and_any_over_everything_and_along_dims(device):
    x = np.array([[1.0, 0.0, 3.0], [np.nan, -2.0, 5.0]], np.float32)
    ours, theirs = lapis.tensor(x, device=device), torch.tensor(x)
    for name in ("all", "any"):
        same(getattr(ours, name)(), getattr(theirs, name)())
        same(getattr(lapis, name)(ours), getattr(torch, name)(theirs))
        for dim in (0, 1, -1):
            for keepdim in (False, True):
                same(getattr(ours, name)(dim, keepdim), getattr(theirs, name)(dim, keepdim))
    assert lapis.tensor([True, True], device=device).all().item() is True


@pytest.mark.parametrize("device", DEVICES)
def test_norm_of_each_order_and_its_gradient(device):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[0, 1] = 0.0
    for p in ("fro", 2, 1, 3, math.inf, -math.inf, 0):
        for dim in (None, 1):
            ours = lapis.tensor(x, device=device, requires_grad=True)
            theirs = torch.tensor(x, requires_grad=True)
            got, want = ours.norm(p, dim), theirs.norm(p, dim)
            same(got, want)
            if p not in (0, math.inf, -math.inf):
                got.sum().backward()
                want.sum().backward()
                same(ours.grad, theirs.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_flip_roll_and_unbind_move_elements_as_torch_and_carry_gradients(device):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((2, 3, 4)).astype(np.float32)
    cases = [(lambda t: t.flip(0), None), (lambda t: t.flip([1, 2]), None), (lambda t: t.roll(1, 2), None),
             (lambda t: t.roll(-5), None), (lambda t: t.roll((1, -2), (0, 2)), None)]
    for f, _ in cases:
        ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = f(ours), f(theirs)
        same(got, want)
        (got * lapis.tensor(w, device=device)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        same(ours.grad, theirs.grad)
    same(lapis.flip(lapis.tensor(x, device=device), (2,)), torch.flip(torch.tensor(x), (2,)))
    same(lapis.roll(lapis.tensor(x, device=device), 3), torch.roll(torch.tensor(x), 3))
    for dim in (0, 1, -1):
        got, want = lapis.tensor(x, device=device).unbind(dim), torch.tensor(x).unbind(dim)
        assert len(got) == len(want)
        for g, t in zip(got, want, strict=True):
            same(g, t)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        lapis.tensor(x, device=device).roll((1, 2), 0)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_fill_and_clamp_in_place(device):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ours, theirs = lapis.tensor(x, device=device), torch.tensor(x)
    assert ours.masked_fill_(ours < 0, 0.5) is ours
    theirs.masked_fill_(theirs < 0, 0.5)
    same(ours, theirs)
    assert ours.clamp_(max=0.7) is ours
    same(ours, theirs.clamp_(max=0.7))
    same(lapis.clip(ours, 0.6, 0.65), torch.clip(theirs, 0.6, 0.65))
    leaf = lapis.ones(2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.clamp_(min=0)


@pytest.mark.parametrize("device", DEVICES)
def test_closeness_and_equality(device):
    a = lapis.tensor([1.0, math.inf, math.nan, 2.0], device=device)
    b = lapis.tensor([1.0 + 1e-7, math.inf, math.nan, 2.1], device=device)
    ta, tb = torch.tensor([1.0, math.inf, math.nan, 2.0]), torch.tensor([1.0 + 1e-7, math.inf, math.nan, 2.1])
    same(lapis.isclose(a, b), torch.isclose(ta, tb))
    same(lapis.isclose(a, b, equal_nan=True), torch.isclose(ta, tb, equal_nan=True))
    assert lapis.allclose(a[:2], b[:2]) and not lapis.allclose(a, b)
    assert lapis.allclose(a[:3], b[:3], equal_nan=True)
    assert lapis.equal(a[:2], a[:2].clone()) and not lapis.equal(a[:2], b[:2]) and not lapis.equal(a, a[:2])
    # and as methods (x.allclose(y), as the PyTorch benchmark recipe checks its two functions agree)
    same(a.isclose(b, equal_nan=True), ta.isclose(tb, equal_nan=True))
    assert a[:2].allclose(b[:2]) and not a.allclose(b) and a[:3].allclose(b[:3], equal_nan=True)
    assert a[:2].equal(a[:2].clone()) and not a.equal(a[:2])


@pytest.mark.parametrize("device", DEVICES)
def test_sizes_type_names_and_data(device):
    x = lapis.ones(2, 3, device=device)
    assert x.nelement() == lapis.numel(x) == 6 and x.ndimension() == 2 and lapis.is_tensor(x)
    assert not lapis.is_tensor(np.ones(2))
    where = "" if device == "cpu" else "cuda."
    assert x.type() == f"lapis.{where}FloatTensor" and x.long().type() == f"lapis.{where}LongTensor"
    assert x.type(lapis.int32).dtype is lapis.int32 and x.type("torch.DoubleTensor").dtype is lapis.float64
    assert x.type_as(lapis.zeros(1, dtype=lapis.int64)).dtype is lapis.int64
    with pytest.raises(ValueError, match="invalid type"):
        x.type("numpy.float32")
    p = lapis.ones(3, device=device, requires_grad=True)
    d = p.data
    assert not d.requires_grad and d.grad_fn is None
    d.mul_(2)                                              # the same storage: p sees it
    assert p.detach().cpu().tolist() == [2.0, 2.0, 2.0] and p.requires_grad
    p.data = lapis.zeros(4, device=device)                 # the swap keeps p's autograd state
    assert tuple(p.shape) == (4,) and p.requires_grad and p.detach().cpu().tolist() == [0.0] * 4
    assert tuple(lapis.broadcast_to(lapis.ones(3, device=device), (2, 3)).shape) == (2, 3)
    same(lapis.flatten(lapis.ones(2, 3, device=device)), torch.flatten(torch.ones(2, 3)))
    same(lapis.unsqueeze(lapis.ones(3, device=device), 0), torch.unsqueeze(torch.ones(3), 0))
    same(lapis.squeeze(lapis.ones(1, 3, device=device)), torch.squeeze(torch.ones(1, 3)))


def test_set_grad_enabled_as_a_statement_a_context_and_a_decorator():
    assert lapis.is_grad_enabled()
    lapis.set_grad_enabled(False)
    try:
        assert not lapis.is_grad_enabled()
    finally:
        lapis.set_grad_enabled(True)
    with lapis.set_grad_enabled(False):
        assert not lapis.is_grad_enabled()
    assert lapis.is_grad_enabled()

    @lapis.set_grad_enabled(False)
    def inside():
        return lapis.is_grad_enabled()
    assert lapis.is_grad_enabled() and inside() is False and lapis.is_grad_enabled()
    with lapis.inference_mode():
        assert not (lapis.ones(2, requires_grad=True) * 2).requires_grad
    assert lapis.is_grad_enabled()


@pytest.mark.parametrize("device", DEVICES)
def test_an_index_out_of_range_is_an_error_and_a_negative_one_counts_from_the_end(device):
    """Never a plausible value from outside the tensor: on a GPU the gather's device-side assertion stops the
    kernel (torch's CUDA kernels assert the same), on the cpu numpy's IndexError; a cpu index of a GPU tensor
    goes to its device, as torch's."""
    x = lapis.tensor([1.0, 2.0, 3.0], device=device)
    assert x[lapis.tensor([-1, 0])].cpu().tolist() == [3.0, 1.0]
    leaf = lapis.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    (leaf[lapis.tensor([-1, 0, -1], device=device)] * lapis.tensor([1.0, 2.0, 4.0], device=device)).sum().backward()
    assert leaf.grad.cpu().tolist() == [2.0, 0.0, 5.0]                  # the gradient goes where the values came from
    assert x[lapis.tensor([2, -3], device=device)].cpu().tolist() == [3.0, 1.0]
    emb = lapis.nn.Embedding(4, 2).to(device)
    for bad in (lambda: x[lapis.tensor([3], device=device)], lambda: x[lapis.tensor([-4], device=device)],
                lambda: x.gather(0, lapis.tensor([5], device=device)),
                lambda: x.index_select(0, lapis.tensor([0, -1], device=device)),
                lambda: emb(lapis.tensor([[1, 4]], device=device))):
        with pytest.raises(IndexError if device == "cpu" else RuntimeError,
                           match="out of bounds" if device == "cpu" else "device-side assert triggered"):
            bad().cpu()
    assert (x + 1).cpu().tolist() == [2.0, 3.0, 4.0]                 # and the device goes on


def test_a_zero_dimensional_tensor_formats_as_its_number():
    assert f"{lapis.tensor(2.5):.4f}|{lapis.ones(3, device='cuda').sum():6.2f}|{lapis.tensor(7):d}" == \
        f"{torch.tensor(2.5):.4f}|{torch.ones(3).sum():6.2f}|{torch.tensor(7):d}"
    assert f"{lapis.ones(2)}" == str(lapis.ones(2))
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{lapis.ones(2):.2f}"


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_clipping_and_flattening_match_torch_nn_utils(device):
    from lapis.nn.utils import clip_grad_norm_, clip_grad_value_, parameters_to_vector, vector_to_parameters
    weights = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,))]
    grads = [3 * rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,))]

    def twins():
        ours = [lapis.nn.Parameter(lapis.tensor(w, device=device)) for w in weights]
        theirs = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
        for o, t, g in zip(ours, theirs, grads, strict=True):
            o.grad, t.grad = lapis.tensor(g, device=device), torch.tensor(g)
        return ours, theirs
    for norm_type in (2.0, 1.0, math.inf):
        for max_norm in (1.0, 1e3):                       # clipped, and left alone
            ours, theirs = twins()
            want = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
            same(clip_grad_norm_(ours, max_norm, norm_type), want)
            for o, t in zip(ours, theirs, strict=True):
                same(o.grad, t.grad)
    ours, theirs = twins()
    clip_grad_value_(ours, 0.5)
    torch.nn.utils.clip_grad_value_(theirs, 0.5)
    for o, t in zip(ours, theirs, strict=True):
        same(o.grad, t.grad)
    flat = parameters_to_vector(ours)
    same(flat, torch.nn.utils.parameters_to_vector(theirs))
    vector_to_parameters(flat * 2, ours)
    same(ours[1], torch.tensor(weights[1]) * 2)
    ours[0].grad.fill_(math.nan)
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)


def test_module_apply_and_non_persistent_buffers():
    model = lapis.nn.Sequential(lapis.nn.Linear(2, 3), lapis.nn.ReLU(), lapis.nn.Linear(3, 1))
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "ReLU", "Linear", "Sequential"]                  # children first, as torch's

    class Masked(lapis.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", lapis.ones(2), persistent=False)
            self.register_buffer("stat", lapis.zeros(2))
    m = Masked()
    assert list(m.state_dict()) == ["stat"] and [n for n, _ in m.named_buffers()] == ["mask", "stat"]
    m.load_state_dict({"stat": lapis.ones(2)})
    assert m.stat.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("device", DEVICES)
def test_more_losses_and_pad_match_torch_with_gradients(device):
    F, TF = lapis.nn.functional, torch.nn.functional
    x = rng.uniform(0.01, 0.99, (3, 4)).astype(np.float32)
    x[0, :2] = 0.0, 1.0                                       # where BCE's logs are clamped at -100
    y = rng.uniform(0, 1, (3, 4)).astype(np.float32)
    weight = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    cases = [(F.binary_cross_entropy, TF.binary_cross_entropy, {}),
             (F.binary_cross_entropy, TF.binary_cross_entropy, {"weight": weight}),
             (F.smooth_l1_loss, TF.smooth_l1_loss, {"beta": 0.5}), (F.smooth_l1_loss, TF.smooth_l1_loss, {"beta": 0}),
             (F.huber_loss, TF.huber_loss, {"delta": 0.3}), (F.l1_loss, TF.l1_loss, {})]
    for ours_fn, torch_fn, kwargs in cases:
        for reduction in ("mean", "sum", "none"):
            ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
            got = ours_fn(ours, lapis.tensor(y, device=device), reduction=reduction,
                          **{k: lapis.tensor(v, device=device) if isinstance(v, np.ndarray) else v
                             for k, v in kwargs.items()})
            want = torch_fn(theirs, torch.tensor(y), reduction=reduction,
                            **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
            same(got, want)
            got.sum().backward()
            want.sum().backward()
            np.testing.assert_allclose(ours.grad.cpu().numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)
    for amounts in ((1, 2), (1, 1, 2, 0), (-1, 1), (0, 0, 1, -1, 2, 0)):
        ours = lapis.tensor(x.reshape(1, 3, 4), device=device, requires_grad=True)
        theirs = torch.tensor(x.reshape(1, 3, 4), requires_grad=True)
        got, want = F.pad(ours, amounts, value=0.5), TF.pad(theirs, amounts, value=0.5)
        same(got, want)
        w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        (got * lapis.tensor(w, device=device)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        same(ours.grad, theirs.grad)
    with pytest.raises(NotImplementedError, match="not supported for 1D input"):        # as torch's
        F.pad(lapis.ones(2, device=device), (1, 1), mode="reflect")


def test_legacy_constructors_generators_nonzero_and_compile():
    assert lapis.LongTensor([1, 2]).dtype is lapis.int64 and lapis.LongTensor([1, 2]).tolist() == [1, 2]
    assert tuple(lapis.FloatTensor(2, 3).shape) == (2, 3) and lapis.FloatTensor(2, 3).dtype is lapis.float32
    assert lapis.BoolTensor([True]).dtype is lapis.bool and lapis.DoubleTensor([1]).dtype is lapis.float64
    g = lapis.Generator().manual_seed(3)
    assert g.initial_seed() == 3
    first = lapis.randperm(10, generator=g)
    assert sorted(first.tolist()) == list(range(10)) and first.dtype is lapis.int64
    assert lapis.randperm(10, generator=lapis.Generator().manual_seed(3)).tolist() == first.tolist()
    state = g.get_state()
    a = lapis.rand(3, generator=g)
    g.set_state(state)
    assert lapis.rand(3, generator=g).tolist() == a.tolist()
    for device in DEVICES:
        cond = np.array([[True, False, True], [False, True, False]])
        for got, want in zip(lapis.where(lapis.tensor(cond, device=device)), torch.where(torch.tensor(cond)),
                             strict=True):
            same(got, want)
        same(lapis.tensor(cond, device=device).nonzero(), torch.tensor(cond).nonzero())
        same(lapis.nonzero(lapis.tensor([0, 3, 0], device=device)), torch.nonzero(torch.tensor([0, 3, 0])))
    model = lapis.nn.Linear(2, 2)
    assert lapis.compile(model) is model and lapis.compile(mode="max-autotune")(model) is model


ADVANCED = [lambda t: (t([0, 2]), t([1, 3])), lambda t: (slice(None), [-1], slice(None)),
            lambda t: (t([[0, 1], [2, 0]]), slice(None), t([4, -5])), lambda t: (0, slice(None), t([1, 2])),
            lambda t: (slice(None), t([0, 3]), t([1, 2])), lambda t: (Ellipsis, t([0, -1])),
            lambda t: (range(2), t([1, 2])), lambda t: (t([True, False, True]), slice(1, 3)),
            lambda t: (None, t([1]), 2), lambda t: (slice(None), None, t([0, 1]), slice(0, 2)),
            lambda t: (t([0, 1]), 0, t([1, 2])), lambda t: (t([[True, False, True, True]] * 3),)]


@pytest.mark.parametrize("device", DEVICES)
def test_advanced_indexing_with_several_index_tensors_matches_torch(device):
    """x[rows, cols], x[:, [-1], :], masks beside slices, integers between (which select first, as in torch,
    not numpy): torch's shapes, values and gradients; an index out of range is an error on either device; and
    assignment through them (index_put_), with its gradients."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for index in ADVANCED:
        ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = ours[index(lambda v: lapis.tensor(v, device=device))], theirs[index(torch.tensor)]
        same(got, want)
        w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        (got * lapis.tensor(w, device=device)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        same(ours.grad, theirs.grad)
    with pytest.raises(IndexError if device == "cpu" else RuntimeError,
                       match="out of bounds for dimension 1 with size 4" if device == "cpu" else "device-side"):
        lapis.tensor(x, device=device)[lapis.tensor([0], device=device), lapis.tensor([4], device=device)].cpu()

    ours, theirs = lapis.ones(3, 4, device=device, requires_grad=True), torch.ones(3, 4, requires_grad=True)
    value, value_t = lapis.tensor([2.0, 3.0], device=device, requires_grad=True), torch.tensor([2.0, 3.0],
                                                                                           requires_grad=True)
    target, target_t = ours * 1, theirs * 1                   # assignment through index tensors: index_put_
    target[lapis.tensor([0, 1], device=device), lapis.tensor([1, -1], device=device)] = value
    target_t[torch.tensor([0, 1]), torch.tensor([1, -1])] = value_t
    target[range(3), [0, 1, 2]] = 7.0
    target_t[range(3), [0, 1, 2]] = 7.0
    target[:, [-1]] = lapis.tensor([[1.5], [2.5], [3.5]], device=device)
    target_t[:, [-1]] = torch.tensor([[1.5], [2.5], [3.5]])
    same(target, target_t)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    (target * lapis.tensor(w, device=device)).sum().backward()
    (target_t * torch.tensor(w)).sum().backward()
    same(ours.grad, theirs.grad)
    same(value.grad, value_t.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_cumsum_along_each_dimension_with_its_gradient(device):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for dim in (0, 1, 2, -1):
        ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = ours.cumsum(dim), theirs.cumsum(dim)
        same(got, want)
        w = rng.standard_normal(x.shape).astype(np.float32)
        (got * lapis.tensor(w, device=device)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        same(ours.grad, theirs.grad)
        assert got.grad_fn.name() == want.grad_fn.name()
    ints = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    same(lapis.cumsum(lapis.tensor(ints, device=device), 1), torch.cumsum(torch.tensor(ints), 1))   # in int64
    same(lapis.tensor([True, False, True], device=device).cumsum(0), torch.tensor([True, False, True]).cumsum(0))
    same(lapis.tensor(3.0, device=device).cumsum(0), torch.tensor(3.0).cumsum(0))


@pytest.mark.parametrize("device", DEVICES)
def test_sort_argsort_and_topk_match_torch_with_nan_ties_and_gradients(device):
    """The order is found on the host (a sync point on a GPU, as nonzero is); the values are a gather, so they
    carry gather's gradient. Stable, with torch's place for NaN (last going up, first going down)."""
    x = rng.integers(0, 5, (3, 6)).astype(np.float32)
    x[0, 2] = np.nan
    for descending in (False, True):
        ours, theirs = lapis.tensor(x, device=device), torch.tensor(x)
        got, want = ours.sort(dim=1, descending=descending, stable=True), theirs.sort(dim=1, descending=descending,
                                                                                      stable=True)
        same(got.values, want.values)
        same(got.indices, want.indices)
        same(lapis.argsort(ours, 0, descending), torch.argsort(theirs, dim=0, descending=descending, stable=True))
    distinct = rng.permutation(18).reshape(3, 6).astype(np.float32)      # topk leaves equal elements' order open
    distinct[1, 4] = np.nan
    ours, theirs = lapis.tensor(distinct, device=device, requires_grad=True), torch.tensor(distinct, requires_grad=True)
    for k, largest in ((2, True), (3, False)):
        got, want = ours.topk(k, dim=1, largest=largest), theirs.topk(k, dim=1, largest=largest)
        same(got.values, want.values)
        same(got.indices, want.indices)
        got.values.sum().backward()
        want.values.sum().backward()
        same(ours.grad, theirs.grad)
    same(lapis.sort(lapis.tensor([3, 1, 2], device=device)).values, torch.sort(torch.tensor([3, 1, 2])).values)
    with pytest.raises(RuntimeError, match="k out of range"):
        ours.topk(7, dim=1)


EINSUMS = [("ij,jk->ik", (3, 4), (4, 5)), ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
           ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)), ("i,i->", (4,), (4,)), ("i,j->ij", (3,), (4,)),
           ("ij->ji", (3, 4)), ("ij->", (3, 4)), ("ijk->kj", (2, 3, 4)), ("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),
           ("ij,jk", (3, 4), (4, 5)), ("bn,anm,bm->ba", (2, 3), (4, 3, 5), (2, 5))]


def einsum_like_torch(device, equation: str, shapes: list, weighted: bool = False) -> None:
    """lapis.einsum and torch.einsum of the same random operands: the same values, and the same gradients of their
    sum (`weighted`: of a random weighting of it, so every element's gradient differs)."""
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ours = [lapis.tensor(a, device=device, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    got, want = lapis.einsum(equation, *ours), torch.einsum(equation, *theirs)
    same(got, want)
    weight = rng.standard_normal(tuple(want.shape)).astype(np.float32) if weighted else np.float32(1)
    (got * lapis.tensor(weight, device=device)).sum().backward()
    (want * torch.tensor(weight)).sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        same(o.grad, t.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_einsum_contracts_as_torch_with_gradients(device):
    for equation, *shapes in EINSUMS:
        einsum_like_torch(device, equation, shapes)
    with pytest.raises(NotImplementedError, match="without '...'"):
        lapis.einsum("...ij->...ji", lapis.ones(2, 3, device=device))
    with pytest.raises(RuntimeError, match="do not match"):
        lapis.einsum("ij,jk->ik", lapis.ones(2, 3, device=device), lapis.ones(4, 2, device=device))


REPEATED = [("ii->i", (3, 3)), ("ii", (3, 3)), ("iij->j", (3, 3, 2)), ("bii->bi", (2, 3, 3)), ("ii,i->i", (3, 3), (3,)),
            ("iji->j", (3, 2, 3)), ("ijij->ji", (2, 3, 2, 3)), ("iij,jkk->ik", (2, 2, 3), (3, 4, 4)),
            ("ii,jj", (2, 2), (3, 3))]


@pytest.mark.parametrize("device", DEVICES)
def test_einsum_takes_the_diagonal_of_a_repeated_subscript(device):
    """A letter twice in one operand is that operand's diagonal (a trace where it is summed), values and
    gradients as torch's; sizes that differ, a repeated output letter and a wrong count raise torch's errors."""
    for equation, *shapes in REPEATED:
        einsum_like_torch(device, equation, shapes, weighted=True)
    with pytest.raises(RuntimeError, match="subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"):
        lapis.einsum("ii", lapis.ones(2, 3, device=device))
    with pytest.raises(RuntimeError, match="output subscript i appears more than once"):
        lapis.einsum("ii->ii", lapis.ones(2, 2, device=device))
    with pytest.raises(RuntimeError, match=r"subscripts in the equation \(2\) does not match the number of dimensions "
                                           r"\(1\) for operand 0"):
        lapis.einsum("ij->", lapis.ones(2, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_diagonal_is_a_view_with_torchs_offsets_dimensions_and_gradient(device):
    """torch.diagonal and Tensor.diagonal: any two dimensions (negative ones too), offsets above and below and
    past the end (an empty diagonal), the diagonal last; a view of the same storage, with torch's strides; its
    gradient zeros with the incoming one on the diagonal, and that gradient differentiable again."""
    x_np = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x, tx = lapis.tensor(x_np, device=device), torch.tensor(x_np)
    for args in ((), (1,), (-2,), (1, 0, 2), (-1, -1, 0), (2, 2, 1), (7,), (-5, 1, 2)):
        got, want = x.diagonal(*args), tx.diagonal(*args)
        same(got, want)
        same(lapis.diagonal(x, *args), torch.diagonal(tx, *args))
        assert got.stride() == want.stride() and got._shares_storage(x)
        assert got.storage_offset() == want.storage_offset() or not want.numel()
    ours, theirs = lapis.tensor(x_np, device=device, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    got, want = ours.diagonal(1, 2, 0), theirs.diagonal(1, 2, 0)
    assert got.grad_fn.name() == want.grad_fn.name() == "DiagonalBackward0"
    weight = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    (g,) = lapis.autograd.grad((got * got * lapis.tensor(weight, device=device)).sum(), ours, create_graph=True)
    (tg,) = torch.autograd.grad((want * want * torch.tensor(weight)).sum(), theirs, create_graph=True)
    same(g, tg)
    g.sum().backward()
    tg.sum().backward()
    same(ours.grad, theirs.grad)
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, -2"):
        x.diagonal(0, 1, -2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.diagonal(0, 1, 3)


def test_the_backend_switches_programs_set_keep_their_values():
    """nanoGPT's first lines: lapis computes float32 products in float32 whatever they say, and reads back what was
    set; an unknown precision is refused as torch's."""
    lapis.backends.cuda.matmul.allow_tf32 = True
    lapis.backends.cudnn.allow_tf32 = lapis.backends.cudnn.benchmark = True
    try:
        assert lapis.backends.cuda.matmul.allow_tf32 and lapis.backends.cudnn.benchmark
        lapis.set_float32_matmul_precision("high")
        assert lapis.get_float32_matmul_precision() == "high"
        with pytest.raises(RuntimeError, match="Invalid precision"):
            lapis.set_float32_matmul_precision("low")
        a = rng.standard_normal((8, 8)).astype(np.float32)
        np.testing.assert_allclose((lapis.tensor(a, device="cuda") @ lapis.tensor(a, device="cuda")).cpu().numpy(),
                                   a @ a, rtol=1e-5, atol=1e-5)       # still float32's products
    finally:
        lapis.backends.cuda.matmul.allow_tf32 = lapis.backends.cudnn.benchmark = False
        lapis.set_float32_matmul_precision("highest")


def test_torch_utils_data_samplers_subsets_and_loader_options():
    """torch.utils.data as programs use it: samplers, batch samplers, Subset, random_split, ConcatDataset, an
    IterableDataset, dict samples, and DataLoader's worker and pinning options (accepted; loading is in-process)."""
    from lapis.utils.data import (
        BatchSampler,
        ConcatDataset,
        DataLoader,
        IterableDataset,
        RandomSampler,
        SequentialSampler,
        Subset,
        SubsetRandomSampler,
        TensorDataset,
        random_split,
    )
    from lapis.utils.data.dataloader import default_collate
    x, y = lapis.arange(10.0).reshape(10, 1), lapis.arange(10)
    data = TensorDataset(x, y)
    assert list(SequentialSampler(data)) == list(range(10))
    shuffled = list(RandomSampler(data, generator=lapis.Generator().manual_seed(0)))
    assert sorted(shuffled) == list(range(10)) and shuffled != list(range(10))
    assert len(list(RandomSampler(data, replacement=True, num_samples=25))) == 25
    assert sorted(SubsetRandomSampler([2, 5, 7])) == [2, 5, 7]
    assert list(BatchSampler(SequentialSampler(data), 4, drop_last=False)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(BatchSampler(SequentialSampler(data), 4, drop_last=True)) == 2
    loader = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 3, False), num_workers=4,
                        pin_memory=True, persistent_workers=True)
    assert [b[1].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]] and len(loader) == 4
    assert all(t.is_pinned() for b in loader for t in b)                 # pin_memory=True pins each batch
    assert not any(t.is_pinned() for b in DataLoader(data, batch_size=5) for t in b)
    pinned = next(iter(DataLoader(data, batch_size=2, pin_memory=True,
                                  collate_fn=lambda rows: {"x": [r[0] for r in rows], "y": rows[0][1]})))
    assert all(t.is_pinned() for t in pinned["x"]) and pinned["y"].is_pinned()
    picked = DataLoader(data, batch_size=2, sampler=SubsetRandomSampler([1, 3, 5, 7]))
    assert sorted(sum((b[1].tolist() for b in picked), [])) == [1, 3, 5, 7]
    assert [s[1].item() for s in DataLoader(data, batch_size=None)][:3] == [0, 1, 2]
    train, test = random_split(data, [0.7, 0.3], generator=lapis.Generator().manual_seed(1))
    assert len(train) == 7 and len(test) == 3
    assert sorted(train.indices + test.indices) == list(range(10))
    assert Subset(data, [4, 2])[1][1].item() == 2
    both = ConcatDataset([Subset(data, [0, 1]), Subset(data, [9])])
    assert len(both) == 3 and both[2][1].item() == 9 and both[-1][1].item() == 9
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(data, [3, 3])
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(data, sampler=SequentialSampler(data), shuffle=True)

    class Counting(IterableDataset):
        def __iter__(self):
            return iter(range(7))
    assert [b.tolist() for b in DataLoader(Counting(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    batch = default_collate([{"x": np.ones(2, np.float32), "n": 1}, {"x": np.zeros(2, np.float32), "n": 2}])
    assert tuple(batch["x"].shape) == (2, 2) and batch["n"].tolist() == [1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_categorical_log_prob_entropy_and_gradients_match_torch(device):
    """An actor-critic's use: log_prob of sampled actions times an advantage, minus an entropy bonus, backpropagated
    into the logits; from probs too, with a zero probability (its entropy term is 0)."""
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    actions = np.array([[0, 3, 1], [2, 2, 0]])                    # (samples, batch)
    ours, theirs = lapis.tensor(logits, device=device, requires_grad=True), torch.tensor(logits, requires_grad=True)
    do, dt = lapis.distributions.Categorical(logits=ours), torch.distributions.Categorical(logits=theirs)
    assert do.batch_shape == tuple(dt.batch_shape) and do.num_categories == 4
    lo, lt = do.log_prob(lapis.tensor(actions, device=device)), dt.log_prob(torch.tensor(actions))
    same(lo, lt)
    same(do.entropy(), dt.entropy())
    same(do.probs, dt.probs)
    ((lo * 0.5).sum() - do.entropy().sum()).backward()
    ((lt * 0.5).sum() - dt.entropy().sum()).backward()
    same(ours.grad, theirs.grad)
    probs = np.array([[0.2, 0.0, 0.8], [1.0, 1.0, 2.0]], np.float32)
    po, pt = (lapis.distributions.Categorical(probs=lapis.tensor(probs, device=device)),
              torch.distributions.Categorical(probs=torch.tensor(probs)))
    same(po.entropy(), pt.entropy())
    same(po.log_prob(lapis.tensor([2, 1], device=device)), pt.log_prob(torch.tensor([2, 1])))
    with pytest.raises(ValueError, match="not both"):
        lapis.distributions.Categorical()


@pytest.mark.parametrize("device", DEVICES)
def test_categorical_samples_follow_the_probabilities(device):
    lapis.manual_seed(0)
    probs = lapis.tensor([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5]], device=device)
    draws = lapis.distributions.Categorical(probs=probs).sample((4000,))
    assert tuple(draws.shape) == (4000, 2) and draws.dtype is lapis.int64 and str(draws.device) == str(probs.device)
    counts = np.stack([np.bincount(draws.cpu().numpy()[:, b], minlength=3) for b in range(2)]) / 4000
    np.testing.assert_allclose(counts, probs.cpu().numpy(), atol=0.03)
    assert tuple(lapis.distributions.Categorical(probs=probs[0]).sample().shape) == ()


@pytest.mark.parametrize("device", DEVICES)
def test_normal_log_prob_entropy_rsample_and_gradients_match_torch(device):
    loc = rng.standard_normal(3).astype(np.float32)
    scale = (rng.random(3) + 0.5).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    lo, so = (lapis.tensor(v, device=device, requires_grad=True) for v in (loc, scale))
    lt, st = (torch.tensor(v, requires_grad=True) for v in (loc, scale))
    do, dt = lapis.distributions.Normal(lo, so), torch.distributions.Normal(lt, st)
    same(do.log_prob(lapis.tensor(x, device=device)), dt.log_prob(torch.tensor(x)))
    same(do.entropy(), dt.entropy())
    (do.log_prob(lapis.tensor(x, device=device)).sum() + do.entropy().sum()).backward()
    (dt.log_prob(torch.tensor(x)).sum() + dt.entropy().sum()).backward()
    same(lo.grad, lt.grad)
    same(so.grad, st.grad)
    lapis.manual_seed(1)
    draws = lapis.distributions.Normal(lapis.tensor([1.0, -2.0], device=device), 0.5).sample((5000,))
    assert tuple(draws.shape) == (5000, 2) and not draws.requires_grad
    np.testing.assert_allclose(draws.mean(0).cpu().numpy(), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(draws.std(0).cpu().numpy(), [0.5, 0.5], atol=0.05)
    lo.grad = so.grad = None
    sample = do.rsample((4,))                                # d sample / d loc = 1, d sample / d scale = eps
    sample.sum().backward()
    np.testing.assert_allclose(lo.grad.cpu().numpy(), [4.0] * 3)
    eps = (sample.detach() - lo.detach()) / so.detach()
    np.testing.assert_allclose(so.grad.cpu().numpy(), eps.sum(0).cpu().numpy(), rtol=1e-5)


def test_parallel_and_distributed_import_and_say_what_they_do():
    """nn.parallel.DataParallel on one device is the module called through the wrapper (as torch's); distributed
    reports itself unavailable and refuses to start a process group, saying so."""
    model = lapis.nn.Linear(3, 2)
    wrapped = lapis.nn.parallel.DataParallel(model)
    assert lapis.nn.DataParallel is lapis.nn.parallel.DataParallel         # torch.nn.DataParallel too
    x = lapis.ones(4, 3)
    assert wrapped.module is model and lapis.equal(wrapped(x), model(x))
    assert [n for n, _ in wrapped.named_parameters()] == ["module.weight", "module.bias"]
    with pytest.raises(NotImplementedError, match="several devices"):
        lapis.nn.parallel.DataParallel(model, device_ids=[0, 1])
    with pytest.raises(NotImplementedError, match="DistributedDataParallel"):
        lapis.nn.parallel.DistributedDataParallel(model)
    import lapis.distributed as dist
    assert dist.is_available() is False and dist.is_initialized() is False
    with pytest.raises(RuntimeError, match="no process groups"):
        dist.init_process_group("nccl")


@pytest.mark.parametrize("device", DEVICES)
def test_normal_and_uniform_fill_in_place_from_the_generator(device):
    x = lapis.zeros(20000, device=device)
    view = x[:10]
    assert x.normal_(1.0, 2.0) is x
    values = x.cpu().numpy()
    assert abs(values.mean() - 1.0) < 0.05 and abs(values.std() - 2.0) < 0.05
    assert np.array_equal(view.cpu().numpy(), values[:10])                 # the storage itself, views see it
    x.uniform_(-3.0, -1.0)
    values = x.cpu().numpy()
    assert values.min() >= -3.0 and values.max() < -1.0 and abs(values.mean() + 2.0) < 0.05
    draws = [lapis.empty(5, device=device).normal_(generator=lapis.Generator().manual_seed(7)) for _ in range(2)]
    assert lapis.equal(draws[0], draws[1])


def _checkpoint(lib, model, optimizer):
    """nanoGPT's checkpoint: the model's and optimizer's state dicts, the step, the best loss, the model's arguments
    and the run's config."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "model_args": {"n_layer": 2, "bias": False}, "iter_num": 250, "best_val_loss": lib.tensor(1.4375),
            "config": {"dataset": "shakespeare_char", "betas": (0.9, 0.99), "decay": None},
            "tokens": [3, 1, 4], "scale": float("inf")}


def _trained(lib, device):
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2)).to(device)
    optimizer = lib.optim.AdamW(model.parameters(), lr=0.01)
    x = lib.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3), device=device)
    for _ in range(2):
        optimizer.zero_grad()
        (model(x) ** 2).sum().backward()
        optimizer.step()
    return model, optimizer, x


@pytest.mark.parametrize("device", DEVICES)
def test_a_checkpoint_saves_and_resumes_training_exactly(device, tmp_path):
    """lapis.save of a nested checkpoint (state dicts with int keys, tuples, None, inf, a 0-d tensor), loaded back with
    the same structure and values; a new model and optimizer resumed from it train as the original goes on."""
    model, optimizer, x = _trained(lapis, device)
    lapis.save(_checkpoint(lapis, model, optimizer), tmp_path / "ckpt.pt")
    back = lapis.load(tmp_path / "ckpt.pt", map_location=device)
    assert back["iter_num"] == 250 and back["config"] == {"dataset": "shakespeare_char", "betas": (0.9, 0.99),
                                                          "decay": None}
    assert back["tokens"] == [3, 1, 4] and back["scale"] == math.inf and back["model_args"]["bias"] is False
    assert tuple(back["best_val_loss"].shape) == () and back["best_val_loss"].item() == 1.4375
    assert sorted(back["optimizer"]["state"]) == [0, 1, 2, 3]
    assert back["model"]["0.weight"].device.type == device
    resumed = lapis.nn.Sequential(lapis.nn.Linear(3, 4), lapis.nn.Tanh(), lapis.nn.Linear(4, 2)).to(device)
    resumed.load_state_dict(back["model"])
    resumed_optimizer = lapis.optim.AdamW(resumed.parameters(), lr=0.5)
    resumed_optimizer.load_state_dict(back["optimizer"])
    for m, o in ((model, optimizer), (resumed, resumed_optimizer)):
        o.zero_grad()
        (m(x) ** 2).sum().backward()
        o.step()
    for a, b in zip(resumed.parameters(), model.parameters(), strict=True):
        assert np.array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())
    with pytest.raises(TypeError, match="stores tensors, dicts"):
        lapis.save({"model": model}, tmp_path / "bad.pt")


@pytest.mark.parametrize("device", DEVICES)
def test_a_checkpoint_written_by_pytorch_loads_without_running_its_pickle(device, tmp_path, capsys):
    """torch.save's zip (a pickle and raw storages): tensors (strided views and 0-d ones included), parameters,
    bfloat16, OrderedDict state dicts and an optimizer's state load as torch.load(weights_only=True) gives them;
    a pickle that names any other global is refused, and its code never runs."""
    model, optimizer, _ = _trained(torch, "cpu")
    checkpoint = _checkpoint(torch, model, optimizer)
    checkpoint.update(strided=torch.arange(12.0).reshape(3, 4).t(), parameter=torch.nn.Parameter(torch.ones(2)),
                      half=torch.tensor([1.5, -2.0], dtype=torch.bfloat16), index=torch.tensor([3, 1]))
    torch.save(checkpoint, tmp_path / "torch.pt")
    ours = lapis.load(tmp_path / "torch.pt", map_location=device)
    theirs = torch.load(tmp_path / "torch.pt", weights_only=True)
    assert list(ours) == list(theirs) and list(ours["model"]) == list(theirs["model"])
    for key in ("strided", "index", "best_val_loss"):
        same(ours[key], theirs[key])
        assert ours[key].device.type == device
    assert ours["half"].dtype is lapis.bfloat16 and ours["half"].tolist() == theirs["half"].tolist()
    for key, value in theirs["model"].items():
        same(ours["model"][key], value)
    assert isinstance(ours["parameter"], lapis.nn.Parameter) and ours["parameter"].requires_grad
    state = ours["optimizer"]["state"]
    assert sorted(state) == [0, 1, 2, 3] and int(state[0]["step"].item()) == 2
    same(state[2]["exp_avg"], theirs["optimizer"]["state"][2]["exp_avg"])
    assert ours["config"]["betas"] == (0.9, 0.99) and ours["iter_num"] == 250

    class Payload:
        def __reduce__(self):
            return (print, ("this ran",))
    torch.save({"evil": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError, match="will not run .*print"):
        lapis.load(tmp_path / "evil.pt")
    assert "this ran" not in capsys.readouterr().out


def test_cuda_manual_seed_makes_device_draws_repeat_and_bf16_is_supported():
    for seed_all in (lapis.cuda.manual_seed, lapis.cuda.manual_seed_all):
        seed_all(5)
        first = lapis.randn(4, device="cuda")
        seed_all(5)
        assert lapis.equal(lapis.randn(4, device="cuda"), first)
    assert lapis.cuda.is_bf16_supported() is True


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_autocast_runs_products_in_half_precision_and_keeps_float32_ops(dtype):
    """Inside autocast on cuda, linear and matmul take float32 inputs in the autocast dtype (the values of casting
    them by hand, near torch's products in that dtype); softmax, log_softmax, layer_norm and mse_loss compute in
    float32; outside it, enabled=False inside it, and cpu tensors stay float32; the decorator form too."""
    half = getattr(lapis, dtype)
    a, b = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
    ao, bo = lapis.tensor(a, device="cuda"), lapis.tensor(b, device="cuda")
    lin = lapis.nn.Linear(32, 8).to("cuda")
    with lapis.autocast(device_type="cuda", dtype=half):
        product = ao @ bo
        assert product.dtype is half and lin(ao).dtype is half
        assert lapis.equal(product, ao.to(half) @ bo.to(half))
        assert (lapis.tensor(a) @ lapis.tensor(b)).dtype is lapis.float32           # a cpu product: not this region
        for out in (lapis.softmax(product, -1), lapis.log_softmax(product, -1),
                    lapis.nn.functional.layer_norm(product, (24,)), lapis.nn.functional.mse_loss(product, product)):
            assert out.dtype is lapis.float32
        with lapis.autocast(device_type="cuda", enabled=False):
            assert (ao @ bo).dtype is lapis.float32
        assert (ao @ bo).dtype is half
    assert (ao @ bo).dtype is lapis.float32
    theirs = (torch.tensor(a).to(getattr(torch, dtype)) @ torch.tensor(b).to(getattr(torch, dtype))).float().numpy()
    np.testing.assert_allclose(product.float().cpu().numpy(), theirs, rtol=2e-2, atol=2e-2)

    @lapis.amp.autocast("cuda", dtype=half)
    def forward(x):
        return lin(x)
    assert forward(ao).dtype is half and not lapis.amp.is_autocast_enabled("cuda")


def test_grad_scaler_follows_torch_s_scale_and_skips_steps_with_inf_gradients():
    """scale, unscale_, step and update as torch's GradScaler: the unscaled gradients are the loss's own, a step
    whose gradients hold inf or NaN is skipped and backs the scale off, growth_interval clean steps grow it; the
    state dict round-trips; a disabled scaler passes everything through."""
    w0 = np.array([1.0, -2.0, 0.5], np.float32)
    ours, theirs = lapis.nn.Parameter(lapis.tensor(w0, device="cuda")), torch.nn.Parameter(torch.tensor(w0))
    oo, ot = lapis.optim.SGD([ours], lr=0.1), torch.optim.SGD([theirs], lr=0.1)
    so = lapis.amp.GradScaler("cuda", init_scale=1024.0, growth_interval=2)
    st = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    for factor in (1.0, 1.0, float("inf"), 1.0, 1.0, float("nan"), 1.0):
        lo = (ours * lapis.tensor(w0, device="cuda") * factor).sum()
        lt = (theirs * torch.tensor(w0) * factor).sum()
        oo.zero_grad()
        ot.zero_grad()
        so.scale(lo).backward()
        st.scale(lt).backward()
        so.unscale_(oo)
        st.unscale_(ot)
        if math.isfinite(factor):
            np.testing.assert_allclose(ours.grad.cpu().numpy(), w0)
        so.step(oo)
        st.step(ot)
        so.update()
        st.update()
        assert so.get_scale() == st.get_scale()
        np.testing.assert_allclose(ours.detach().cpu().numpy(), theirs.detach().numpy(), rtol=1e-6)
    resumed = lapis.amp.GradScaler("cuda")
    resumed.load_state_dict(so.state_dict())
    assert resumed.get_scale() == so.get_scale() and resumed.state_dict() == so.state_dict()
    off = lapis.amp.GradScaler(enabled=False)
    loss = lapis.tensor(3.0)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}


def test_pinned_copies_and_cuda_amp_spellings():
    """nanoGPT's loader idiom x.pin_memory().to(device, non_blocking=True) (the copy itself is synchronous), and
    torch.cuda.amp's GradScaler and autocast spellings."""
    x = lapis.arange(6).reshape(2, 3)
    assert not x.is_pinned() and x.pin_memory().is_pinned()
    moved = x.pin_memory().to("cuda", non_blocking=True)
    assert moved.device.type == "cuda" and moved.tolist() == x.tolist()
    with pytest.raises(RuntimeError, match="cannot pin"):
        moved.pin_memory()
    assert not lapis.cuda.amp.GradScaler(enabled=False).is_enabled()
    with lapis.cuda.amp.autocast(dtype=lapis.bfloat16):
        assert (moved.float() @ moved.float().t()).dtype is lapis.bfloat16


@pytest.mark.parametrize("device", DEVICES)
def test_repeat_interleave_meshgrid_outer_and_lerp_match_torch(device):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    for args in ((2,), (2, 0), ([1, 0, 3], 0), (lapis.tensor([2, 1, 0, 1]), 1)):
        torch_args = tuple(torch.tensor(a.tolist() if isinstance(a, lapis.Tensor) else a) if not isinstance(a, int)
                           else a for a in args)
        same(ours.repeat_interleave(*args), theirs.repeat_interleave(*torch_args))
    ours.repeat_interleave(lapis.tensor([2, 1, 0, 1]), 1).sum().backward()
    theirs.repeat_interleave(torch.tensor([2, 1, 0, 1]), 1).sum().backward()
    same(ours.grad, theirs.grad)
    with pytest.raises(RuntimeError, match="same size as input"):
        ours.repeat_interleave([1, 2], 0)
    a, b, c = (np.arange(n, dtype=np.float32) + 1 for n in (2, 3, 4))
    for indexing in ("ij", "xy"):
        for got, want in zip(lapis.meshgrid(*(lapis.tensor(v, device=device) for v in (a, b, c)), indexing=indexing),
                             torch.meshgrid(*(torch.tensor(v) for v in (a, b, c)), indexing=indexing), strict=True):
            same(got, want)
    same(lapis.outer(lapis.tensor(a, device=device), lapis.tensor(b, device=device)),
         torch.outer(torch.tensor(a), torch.tensor(b)))
    end = rng.standard_normal((3, 4)).astype(np.float32)
    for weight in (0.25, 0.75, 1.0):
        same(lapis.lerp(lapis.tensor(x, device=device), lapis.tensor(end, device=device), weight),
             torch.lerp(torch.tensor(x), torch.tensor(end), weight))
    w = rng.random((3, 4)).astype(np.float32)
    same(lapis.tensor(x, device=device).lerp(lapis.tensor(end, device=device), lapis.tensor(w, device=device)),
         torch.tensor(x).lerp(torch.tensor(end), torch.tensor(w)))


@pytest.mark.parametrize("device", DEVICES)
def test_unique_bincount_and_searchsorted_match_torch(device):
    x = np.array([[3, 1, 2], [1, 3, 3]], np.int64)
    ours, theirs = lapis.tensor(x, device=device), torch.tensor(x)
    for kwargs in ({}, {"return_inverse": True}, {"return_counts": True},
                   {"return_inverse": True, "return_counts": True}, {"dim": 1, "return_inverse": True}):
        got, want = ours.unique(**kwargs), theirs.unique(**kwargs)
        for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,))), strict=True):
            same(g, w)
            assert g.device.type == device
    same(lapis.bincount(lapis.tensor([0, 3, 3, 1], device=device)), torch.bincount(torch.tensor([0, 3, 3, 1])))
    weights = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
    same(lapis.tensor([0, 3, 3, 1], device=device).bincount(lapis.tensor(weights, device=device), minlength=6),
         torch.tensor([0, 3, 3, 1]).bincount(torch.tensor(weights), minlength=6))
    with pytest.raises(RuntimeError, match="non-negative"):
        lapis.bincount(lapis.tensor([1, -1]))
    seq = np.array([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]], np.float32)
    values = np.array([[3.0, 6.0, 9.0], [3.0, 6.0, 9.0]], np.float32)
    for right in (False, True):
        same(lapis.searchsorted(lapis.tensor(seq, device=device), lapis.tensor(values, device=device), right=right),
             torch.searchsorted(torch.tensor(seq), torch.tensor(values), right=right))
        same(lapis.searchsorted(lapis.tensor(seq[0], device=device), lapis.tensor(values[0], device=device),
                                right=right), torch.searchsorted(torch.tensor(seq[0]), torch.tensor(values[0]),
                                                                  right=right))


@pytest.mark.parametrize("device", DEVICES)
def test_index_add_accumulates_repeated_indices_with_alpha_and_gradients_as_torch(device):
    """x.index_add(dim, index, source, alpha=): every slice sent to a repeated index is added; the gradient is g for
    x and alpha * g.index_select(dim, index) for source; index_add_ writes x's own storage (or, under autograd,
    takes torch's IndexAddBackward0); lapis.index_add and an int32 index too."""
    x, src = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    index = np.array([2, 0, 2, 3, 2], np.int64)
    for dim, source, alpha in ((0, src, 1), (0, src, 2.5), (1, src[:4, :2], -1)):
        at = index if dim == 0 else index[:2]
        ours = [lapis.tensor(a, device=device, requires_grad=True) for a in (x, source)]
        theirs = [torch.tensor(a, requires_grad=True) for a in (x, source)]
        got = ours[0].index_add(dim, lapis.tensor(at, device=device), ours[1], alpha=alpha)
        want = theirs[0].index_add(dim, torch.tensor(at), theirs[1], alpha=alpha)
        same(got, want)
        assert got.grad_fn.name() == want.grad_fn.name() == "IndexAddBackward0"
        w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        (got * lapis.tensor(w, device=device)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            same(o.grad, t.grad)
    ours, theirs = lapis.tensor(x, device=device), torch.tensor(x)
    storage = ours._storage
    ours.index_add_(1, lapis.tensor([2, 2], device=device, dtype=lapis.int32), lapis.ones(4, 2, device=device))
    theirs.index_add_(1, torch.tensor([2, 2], dtype=torch.int32), torch.ones(4, 2))
    same(ours, theirs)
    assert ours._storage is storage and ours._version == 1
    leaf = lapis.tensor(x, device=device, requires_grad=True)
    y = leaf * 2
    y.index_add_(0, lapis.tensor([1], device=device), lapis.tensor(src[:1], device=device), alpha=3)
    assert y.grad_fn.name() == "IndexAddBackward0"
    y.sum().backward()
    assert leaf.grad.cpu().tolist() == [[2.0] * 3] * 4
    same(lapis.index_add(lapis.zeros(3, device=device), 0, lapis.tensor([0, 0, 2], device=device),
                         lapis.tensor([1.0, 2.0, 4.0], device=device)),
         torch.index_add(torch.zeros(3), 0, torch.tensor([0, 0, 2]), torch.tensor([1.0, 2.0, 4.0])))
    same(lapis.zeros((), device=device).index_add(0, lapis.tensor(0, device=device), lapis.tensor(3.0, device=device)),
         torch.zeros(()).index_add(0, torch.tensor(0), torch.tensor(3.0)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_embedding_s_gradient_sums_repeated_rows_as_torch(device, dtype):
    """index_add and scatter_add in a half type (an embedding's gradient in a bf16 model), sums of small integers
    that every step of torch's rounding keeps exact: the atomic unit adds float32 words, so a GPU sums in float32
    and rounds once."""
    index = np.array([3, 1, 3, 0, 3, 3], np.int64)
    src = rng.integers(-8, 9, (6, 5)).astype(np.float32)
    ours, theirs = getattr(lapis, dtype), getattr(torch, dtype)
    got = lapis.zeros(4, 5, device=device, dtype=ours).index_add(0, lapis.tensor(index, device=device),
                                                                lapis.tensor(src, device=device, dtype=ours))
    want = torch.zeros(4, 5, dtype=theirs).index_add(0, torch.tensor(index), torch.tensor(src, dtype=theirs))
    assert got.dtype == ours and np.array_equal(got.float().cpu().numpy(), want.float().numpy())   # numpy has no bf16
    table = lapis.nn.Embedding(4, 5).to(device).to(ours)
    table(lapis.tensor(index, device=device)).backward(lapis.tensor(src, device=device, dtype=ours))
    expected = np.zeros((4, 5), np.float32)
    np.add.at(expected, index, src)
    assert table.weight.grad.dtype == ours and np.array_equal(table.weight.grad.float().cpu().numpy(), expected)


def test_index_add_refuses_what_torch_refuses_and_an_index_out_of_range():
    """Torch's checks and messages (the index a vector of int32 or int64, one per source slice, source of x's dtype
    and shape outside dim); an index out of [0, size) is an IndexError on the cpu (torch's for a 1-D x; torch 2.13
    raises a RuntimeError with the same message for more dimensions) and a device-side assert on a GPU."""
    x, t = lapis.zeros(5, 3), torch.zeros(5, 3)
    for args in ((0, [1, 2], (1, 3), "float32"), (0, [1], (1, 3), "float64"), (0, [1], (1, 4), "float32"),
                 (0, [[1]], (1, 3), "float32")):
        dim, at, shape, dt = args
        with pytest.raises((RuntimeError, IndexError)) as theirs:
            t.index_add_(dim, torch.tensor(at), torch.ones(shape, dtype=getattr(torch, dt)))
        with pytest.raises(type(theirs.value), match=re_escape(str(theirs.value).splitlines()[0])):
            x.index_add_(dim, lapis.tensor(at), lapis.ones(shape, dtype=getattr(lapis, dt)))
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        x.index_add(0, lapis.tensor([1.0]), lapis.ones(1, 3))
    with pytest.raises(IndexError):
        torch.zeros(5).index_add_(0, torch.tensor([5]), torch.ones(1))
    for bad in ([5], [-1]):
        with pytest.raises(IndexError, match=f"index {bad[0]} is out of bounds for dimension 0 with size 5"):
            lapis.zeros(5).index_add_(0, lapis.tensor(bad), lapis.ones(1))
        with pytest.raises(IndexError, match="out of bounds"):
            x.index_add(0, lapis.tensor(bad), lapis.ones(1, 3))
    with pytest.raises(RuntimeError, match="device-side assert triggered"):
        lapis.zeros(5, 3, device="cuda").index_add(0, lapis.tensor([7], device="cuda"),
                                                   lapis.ones(1, 3, device="cuda")).cpu()
    assert (lapis.ones(2, device="cuda") + 1).tolist() == [2.0, 2.0]             # and the device goes on


def re_escape(text: str) -> str:
    import re
    return re.escape(text)


def test_pin_memory_copies_into_page_locked_memory_the_copy_engine_reads_directly():
    """pin_memory is a copy in the runtime's pinned host pool (is_pinned() True; a pageable tensor's False), whose
    upload is one copy-engine transfer from it (the runtime's memory_copy names its source address), where a
    pageable tensor's goes through the staging buffer; gradients pass through it. And .cuda()/.cpu() take torch's
    keywords."""
    x = lapis.arange(6.0).reshape(2, 3)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned() and pinned is not x and pinned.pin_memory() is pinned
    assert pinned.tolist() == x.tolist() and pinned.device.type == "cpu"
    for source, direct in ((pinned, True), (x, False)):
        with lapis.trace() as t:
            moved = source.cuda(non_blocking=True)
        copies = [e for e in t.events if e.name == "memory_copy" and e.args["kind"] == "host_to_device"]
        assert copies and all(("src" in e.args) == direct for e in copies)
        assert moved.device == lapis.device("cuda", 0) and moved.tolist() == x.tolist()
    assert not moved.is_pinned() and not moved.cpu().is_pinned()
    leaf = lapis.ones(3, requires_grad=True)
    (leaf.pin_memory() * 2).sum().backward()
    assert leaf.grad.tolist() == [2.0, 2.0, 2.0]
    for device in (None, 0, "cuda:0", lapis.device("cuda")):
        assert x.cuda(device, memory_format=lapis.preserve_format).device == lapis.device("cuda:0")
    assert x.t().cpu(memory_format=lapis.contiguous_format).is_contiguous()
    assert x.cuda().cpu(memory_format=lapis.preserve_format).tolist() == x.tolist()
    with pytest.raises(RuntimeError, match="must be cuda device"):
        x.cuda("cpu")
    with pytest.raises(NotImplementedError, match="channels_last"):
        x.cuda(memory_format=lapis.channels_last)


def test_accelerator_is_the_cuda_device_with_torchs_calls():
    """lapis.accelerator as torch.accelerator (2.6+): the current accelerator is device('cuda'), its count, the
    current index and setting it (an int, 'cuda:N' or a device), synchronize, and device_index as a block."""
    acc = lapis.accelerator
    assert acc.is_available() and acc.current_accelerator() == lapis.device("cuda")
    assert acc.current_accelerator(check_available=True).type == "cuda"
    assert acc.device_count() == lapis.cuda.device_count() >= 1
    assert acc.current_device_index() == lapis.cuda.current_device() == 0
    acc.set_device_index("cuda:0")
    acc.set_device_index(lapis.device("cuda", 0))
    acc.set_device_index(0)
    assert acc.current_device_index() == 0
    y = lapis.ones(4, device="cuda") * 3
    acc.synchronize()
    acc.synchronize(0)
    assert y.tolist() == [3.0] * 4
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        acc.set_device_index("cpu")
    with pytest.raises(ValueError, match="specified index"):
        acc.set_device_index("cuda")
    assert isinstance(acc.memory_allocated(), int) and set(acc.__all__) >= {
        "is_available", "current_accelerator", "device_count", "current_device_index", "set_device_index",
        "synchronize"}


def test_load_puts_tensors_back_on_the_device_they_were_saved_from_unless_map_location_says(tmp_path):
    """A checkpoint saved from cuda tensors loads onto cuda, as torch.load does; map_location as a name or device
    (everything there), a dict of locations (the others stay) or a function of (cpu tensor, location) (None: its
    saved place) overrides; a PyTorch file's locations ('cpu') reach the function as torch's load gives them."""
    model = lapis.nn.Linear(2, 2).to("cuda")
    lapis.save({"model": model.state_dict(), "host": lapis.ones(2), "step": 3}, tmp_path / "ckpt.pt")
    lapis.save(model.weight.detach(), tmp_path / "weight.pt")
    lapis.save(model.state_dict(), tmp_path / "state.pt")
    back = lapis.load(tmp_path / "ckpt.pt")
    assert back["model"]["weight"].device == lapis.device("cuda:0") and back["host"].device.type == "cpu"
    assert lapis.equal(back["model"]["weight"], model.weight) and back["step"] == 3
    assert lapis.load(tmp_path / "weight.pt").device.type == "cuda"
    assert {t.device.type for t in lapis.load(tmp_path / "state.pt").values()} == {"cuda"}
    for where, model_on, host_on in (("cpu", "cpu", "cpu"), (lapis.device("cpu"), "cpu", "cpu"),
                                     ("cuda", "cuda", "cuda"), ({"cuda:0": "cpu"}, "cpu", "cpu"),
                                     ({"cpu": "cuda:0"}, "cuda", "cuda"),
                                     (lambda t, location: t, "cpu", "cpu"),
                                     (lambda t, location: None, "cuda", "cpu"),
                                     (lambda t, location: t.cuda() if location == "cpu" else None, "cuda", "cuda")):
        loaded = lapis.load(tmp_path / "ckpt.pt", map_location=where)
        assert loaded["model"]["bias"].device.type == model_on and loaded["host"].device.type == host_on
        assert loaded["model"]["bias"].tolist() == model.bias.tolist()
    torch.save({"x": torch.ones(2), "y": torch.arange(3)}, tmp_path / "torch.pt")
    ours, theirs = [], []
    torch.load(tmp_path / "torch.pt", map_location=lambda s, location: theirs.append(location))
    loaded = lapis.load(tmp_path / "torch.pt", map_location=lambda t, location: ours.append(location) or t.cuda())
    assert ours == theirs == ["cpu", "cpu"] and loaded["y"].device.type == "cuda"
    assert lapis.load(tmp_path / "torch.pt")["x"].device.type == "cpu"


@pytest.mark.parametrize("device", DEVICES)
def test_pad_reflect_replicate_and_circular_match_torch_with_gradients(device):
    """F.pad's non-constant modes on the last 1, 2 or 3 dimensions of batched and unbatched inputs (negative amounts
    crop), values and gradients (which add up where one element was copied to several places) as torch's; torch's
    refusals: reflect's padding must be smaller than the dimension, circular's may not wrap more than once, a value
    is only for 'constant', an unknown mode, too many dimensions."""
    F, TF = lapis.nn.functional, torch.nn.functional
    cases = [((2, 5), (2, 3)), ((1, 2, 5), (-1, 4)), ((2, 3, 4), (1, 2, 2, 0)), ((1, 2, 3, 4), (3, 1, -1, 2)),
             ((2, 3, 3, 4), (1, 0, 2, 1, 2, 2)), ((1, 1, 2, 3, 3), (1, 2, 1, 1, 1, 0))]
    for mode in ("reflect", "replicate", "circular"):
        for shape, amounts in cases:
            x = rng.standard_normal(shape).astype(np.float32)
            ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
            got, want = F.pad(ours, amounts, mode=mode), TF.pad(theirs, amounts, mode=mode)
            same(got, want)
            w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
            (got * lapis.tensor(w, device=device)).sum().backward()
            (want * torch.tensor(w)).sum().backward()
            same(ours.grad, theirs.grad)
    x = lapis.ones(1, 2, 3, device=device)
    for mode, amounts, error, message in (("reflect", (3, 0), RuntimeError, "Padding size should be less than"),
                                          ("circular", (4, 0), RuntimeError, "wrapping around more than once"),
                                          ("foo", (1, 1), NotImplementedError, "Unrecognised padding mode foo"),
                                          ("replicate", (1, 1, 1, 1, 1, 1), NotImplementedError, "not supported")):
        with pytest.raises(error, match=message):
            TF.pad(torch.ones(1, 2, 3), amounts, mode=mode)
        with pytest.raises(error, match=message):
            F.pad(x, amounts, mode=mode)
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
        F.pad(x, (1, 1), mode="reflect", value=1.0)
    same(F.pad(x, (1, 1), mode="reflect", value=0.0), TF.pad(torch.ones(1, 2, 3), (1, 1), mode="reflect", value=0.0))
