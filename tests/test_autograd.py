"""Layer 5: the autograd engine checks what backward returns, as torch's does, names its nodes as torch does, and
keeps in the graph only what backward needs."""

import gc
import weakref

import numpy as np
import pytest
import torch

import lapis
from lapis.autograd import AccumulateGrad, Function


def _custom(backward):
    """A custom Function a * b whose backward is the given one, made the same way for lapis and torch."""
    def make(base):
        return type("Product", (base,), {"forward": staticmethod(lambda ctx, a, b: a * b),
                                         "backward": staticmethod(backward)})
    return make(Function), make(torch.autograd.Function)


def _error(fn, *arrays):
    """The error message a program raises under lapis and under torch (both must raise)."""
    messages = []
    for m in (lapis, torch):
        tensors = [m.tensor(a, requires_grad=True) for a in arrays]
        with pytest.raises(RuntimeError) as e:
            fn(m, tensors)
        messages.append(str(e.value))
    return messages


@pytest.mark.parametrize("backward", [
    lambda ctx, g: (g,),                                  # too few
    lambda ctx, g: (g, g, g),                             # one too many, not None
    lambda ctx, g: (g.sum(), g),                          # a scalar for a (3,) input
    lambda ctx, g: (g, g[:2]),                            # a (2,) gradient for a (3,) input
])
def test_invalid_gradients_raise_torch_errors(backward):
    ours, theirs = _custom(backward)
    x = np.ones(3, np.float32)
    got, want = _error(lambda m, t: (ours if m is lapis else theirs).apply(t[0], t[1]).sum().backward(), x, x)
    assert got.replace("Product", "X") == want.replace("Product", "X")


def test_a_gradient_for_a_number_input_is_refused():
    class Scale(Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, g
    x = lapis.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="gradient different than None at position 2, but the corresponding "
                                           "forward input was not a Variable"):
        Scale.apply(x, 3.0).sum().backward()


def test_broadcast_gradients_are_summed_and_cast_to_the_input():
    class Double(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g.double().unsqueeze(0).expand(4, 3)   # float64, (4, 3) for a float32 (3,) input
    x = lapis.ones(3, requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.dtype == lapis.float32 and x.grad.shape == (3,) and x.grad.tolist() == [4.0, 4.0, 4.0]
    extra = type("Extra", (Function,), {"forward": staticmethod(lambda ctx, a: a * 2),
                                        "backward": staticmethod(lambda ctx, g: (g, None, None))})
    x.grad = None
    extra.apply(x).sum().backward()                        # trailing Nones are allowed, as in torch
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_a_gradient_on_another_device_is_refused():
    class Away(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g.cpu()
    x = lapis.ones(3, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - expected device cuda:0 but "
                                           "got cpu"):
        Away.apply(x).sum().backward()


NAMED = [
    ("add", lambda m, a: a + a), ("mm", lambda m, a: a @ a.t()), ("sum", lambda m, a: a.sum()),
    ("sum_dim", lambda m, a: a.sum(1)), ("view", lambda m, a: a.view(6)), ("permute", lambda m, a: a.permute(1, 0)),
    ("transpose", lambda m, a: a.transpose(0, 1)), ("t", lambda m, a: a.t()), ("select", lambda m, a: a[0]),
    ("slice", lambda m, a: a[:, 1:]), ("unsqueeze", lambda m, a: a.unsqueeze(0)), ("to", lambda m, a: a.double()),
    ("expand", lambda m, a: a[:1].expand(4, 3)), ("where", lambda m, a: m.where(a > 0, a, a)),
    ("softmax", lambda m, a: a.softmax(-1)), ("log_softmax", lambda m, a: a.log_softmax(-1)),
    ("cat", lambda m, a: m.cat([a, a])), ("relu", lambda m, a: a.relu()), ("exp", lambda m, a: a.exp()),
    ("pow_number", lambda m, a: a ** 2), ("pow_tensor", lambda m, a: a ** a), ("max", lambda m, a: a.max()),
    ("max_dim", lambda m, a: a.max(1).values), ("clamp", lambda m, a: a.clamp(0, 1)),
    ("prod", lambda m, a: a.prod()), ("prod_dim", lambda m, a: a.prod(1)), ("clone", lambda m, a: a.clone()),
    ("bmm", lambda m, a: m.bmm(a[None], a.t()[None])), ("neg", lambda m, a: -a), ("mul", lambda m, a: a * 2),
    ("gather", lambda m, a: a.gather(1, m.zeros(2, 1, dtype=m.long))),
    ("scatter_add", lambda m, a: a.scatter_add(1, m.zeros(2, 1, dtype=m.long), a[:, :1])),
    ("gelu", lambda m, a: m.nn.functional.gelu(a)), ("layer_norm", lambda m, a: m.nn.functional.layer_norm(a, (3,))),
    ("conv2d", lambda m, a: m.nn.functional.conv2d(a.reshape(1, 1, 2, 3), m.ones(1, 1, 1, 1))),
    ("max_pool2d", lambda m, a: m.nn.functional.max_pool2d(a.reshape(1, 1, 2, 3), 1)),
    ("batch_norm", lambda m, a: m.nn.functional.batch_norm(a, None, None, training=True)),
    ("split", lambda m, a: a.split(1)[1]), ("split_with_sizes", lambda m, a: a.split([1, 2], 1)[1]),
    ("chunk", lambda m, a: a.chunk(2, 1)[0]), ("narrow", lambda m, a: a.narrow(1, 1, 2)),
]


@pytest.mark.parametrize("name,fn", NAMED, ids=[n for n, _ in NAMED])
def test_grad_fn_names_follow_torch(name, fn):
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    got = fn(lapis, lapis.tensor(x, requires_grad=True)).grad_fn.name()
    assert got == fn(torch, torch.tensor(x, requires_grad=True)).grad_fn.name()


def test_leaves_get_an_accumulate_grad_node_and_nodes_hold_edges():
    x = lapis.tensor([1.0, 2.0], requires_grad=True)
    y = (x * lapis.tensor([3.0, 4.0])).sum()
    (mul, nr), = y.grad_fn.next_functions
    assert mul.name() == "MulBackward0" and nr == 0
    (acc, _), (none, _) = mul.next_functions                # x, and a tensor that needs no gradient
    assert isinstance(acc, AccumulateGrad) and acc.variable is x and none is None
    assert not hasattr(mul, "inputs")


def test_nodes_keep_only_what_backward_saved():
    x = lapis.randn(1000, requires_grad=True)
    middle = x * 2
    y = middle.exp().sum()                                  # exp saves its output, not its input
    ref = weakref.ref(middle)
    del middle
    gc.collect()
    assert ref() is None
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * x.detach().numpy()), rtol=1e-5)


def test_grad_of_non_leaf_inputs_and_retained_grads():
    x = lapis.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * x
    out = (h * x).sum()
    gh, gx = lapis.autograd.grad(out, [h, x], retain_graph=True)
    assert gh.tolist() == [1.0, 2.0, 3.0] and gx.tolist() == [3.0, 12.0, 27.0] and x.grad is None
    h.retain_grad()
    out.backward()
    assert h.grad.tolist() == [1.0, 2.0, 3.0] and x.grad.tolist() == [3.0, 12.0, 27.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        lapis.autograd.grad(out, lapis.tensor([1.0]))


def test_each_grad_is_memory_of_its_own():
    x = lapis.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.sum().backward()                                     # sum's gradient is an expanded view of one number
    x.grad[0] = 5.0
    assert x.grad.tolist() == [5.0, 1.0, 1.0]
    a, b = lapis.ones(2, requires_grad=True), lapis.ones(2, requires_grad=True)
    (a + b).sum().backward()                               # add sends one tensor to both inputs
    a.grad.mul_(3)
    assert a.grad.tolist() == [3.0, 3.0] and b.grad.tolist() == [1.0, 1.0]
    c = lapis.ones(2, requires_grad=True)
    given = lapis.tensor([2.0, 4.0])
    (c * 1).backward(given)
    c.grad.zero_()
    assert given.tolist() == [2.0, 4.0]                    # the caller's gradient is not c.grad


def test_backward_from_a_leaf_accumulates_into_its_grad():
    ours, theirs = lapis.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    ours.backward(lapis.tensor([1.0, 2.0]))
    theirs.backward(torch.tensor([1.0, 2.0]))
    assert ours.grad.tolist() == theirs.grad.tolist() == [1.0, 2.0]


def test_gradients_no_other_tensor_holds_are_stored_without_a_copy():
    # a Linear's weight gradient is computed in the weight's layout and its bias gradient is a reshape of
    # a fresh sum: torch's AccumulateGrad steals both, and so does lapis (no copy kernel on a GPU)
    from lapis import trace
    lin = lapis.nn.Linear(4, 3).to("cuda")
    x, c = lapis.randn(5, 4, device="cuda"), lapis.randn(5, 3, device="cuda")
    loss = (lin(x) * c).sum()                              # (a plain sum's gradient is a broadcast, copied for gemm)
    with trace() as t:
        loss.backward()
    assert not [e for e in t.select(4, "elementwise") if e.args.get("op") == "identity"]
    theirs = torch.nn.Linear(4, 3)
    theirs.weight.data, theirs.bias.data = (torch.tensor(p.detach().cpu().numpy()) for p in (lin.weight, lin.bias))
    (theirs(torch.tensor(x.cpu().numpy())) * torch.tensor(c.cpu().numpy())).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.cpu().numpy(), theirs.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(lin.bias.grad.cpu().numpy(), theirs.bias.grad.numpy(), rtol=1e-5)
    assert lin.weight.grad.is_contiguous() and lin.weight.grad.shape == (3, 4)
    kept = lapis.ones(2, 3, requires_grad=True)
    g = lapis.ones(6)
    kept.reshape(6).backward(g)            # the gradient reaching kept is a view of g, which the caller holds
    kept.grad.mul_(2)
    assert g.tolist() == [1.0] * 6 and kept.grad.tolist() == [[2.0] * 3] * 2


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gradients_masked_by_a_selection_stay_zero_under_an_infinite_gradient(device):
    # sqrt's gradient at 0 is inf; relu, maximum, where and max select it away, as torch's do (inf * 0 is NaN)
    for fn in (lambda m, x: x.relu().sqrt(), lambda m, x: m.maximum(x, x.detach() * 0).sqrt(),
               lambda m, x: m.where(x > 0, x, 0.0).sqrt(), lambda m, x: x.reshape(1, 2).max(1).values.sqrt()):
        ours = lapis.tensor([-1.0, 0.0], device=device, requires_grad=True)
        theirs = torch.tensor([-1.0, 0.0], requires_grad=True)
        fn(lapis, ours).sum().backward()
        fn(torch, theirs).sum().backward()
        np.testing.assert_array_equal(ours.grad.cpu().numpy(), theirs.grad.numpy())


def test_a_second_derivative_through_a_fused_kernel_raises():
    x = lapis.tensor([0.5, 1.0, 1.5], requires_grad=True)
    (g,) = lapis.autograd.grad(lapis.nn.functional.gelu(x).sum(), x, create_graph=True)
    t = torch.tensor([0.5, 1.0, 1.5], requires_grad=True)
    (want,) = torch.autograd.grad(torch.nn.functional.gelu(t).sum(), t)
    np.testing.assert_allclose(g.detach().numpy(), want.numpy(), rtol=1e-5)      # the first derivative is right
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
        g.sum().backward()
    (h,) = lapis.autograd.grad((x * x * x).sum(), x, create_graph=True)          # composed ops: twice is fine
    h.sum().backward()
    assert x.grad.tolist() == [3.0, 6.0, 9.0]


def test_retained_grads_follow_in_place_ops_and_to_with_nothing_to_do_is_the_tensor():
    def program(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        h = x * 2
        h.retain_grad()
        h.mul_(3)
        (h * h).sum().backward()
        return h.grad
    np.testing.assert_array_equal(program(lapis).numpy(), program(torch).numpy())
    leaf = lapis.randn(3, requires_grad=True)
    assert leaf.to("cpu") is leaf and leaf.float() is leaf and leaf.to(lapis.float32).is_leaf


def test_a_function_returning_its_input_leaves_the_input_a_leaf():
    class Identity(Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 2
    x = lapis.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert x.is_leaf and x.grad_fn is None and y is not x and y.grad_fn.name() == "IdentityBackward"
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_root_gradients_are_checked_as_torch_checks_them():
    x = lapis.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of"):
        (x * 2).backward(lapis.ones(3))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        lapis.autograd.grad(x * 2, x)


def test_a_fresh_gradient_is_stored_without_a_copy_whatever_was_freed_before():
    """The engine remembers which tensors are shared (the caller's, those already stored) by id. A gradient
    stored, then freed, must not make a later one that reuses its address look shared: that cost a copy of
    a weight's gradient in about one training step in three, and made kernel counts vary between runs."""
    from lapis.framework import autograd as engine
    p1, p2 = lapis.zeros(3, requires_grad=True), lapis.zeros(3, requires_grad=True)
    shared = {}
    g = lapis.ones(3) * 2
    engine._accumulate(p1, g, False, shared)
    del g
    g = lapis.ones(3) * 3                       # CPython would hand it the first one's freed memory
    engine._accumulate(p2, g, False, shared)
    assert p2.grad._storage is g._storage       # stolen, not copied
    np.testing.assert_array_equal(p1.grad.numpy(), 2)
