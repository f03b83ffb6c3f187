"""Layer 5: nn modules, losses, optimizers and data loading against PyTorch on the CPU; the digits example."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import lapis
from lapis import nn
from lapis.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(11)
DEVICES = ["cpu", "cuda"]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def twin_linear(device, in_f=5, out_f=3):
    ours, theirs = nn.Linear(in_f, out_f).to(device), torch.nn.Linear(in_f, out_f)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.detach().cpu().numpy()))
        theirs.bias.copy_(torch.tensor(ours.bias.detach().cpu().numpy()))
    return ours, theirs


def close(a: lapis.Tensor, b: torch.Tensor, atol=1e-5):
    np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-4, atol=atol)


def test_modules_register_parameters_and_state():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [tuple(p.shape) for p in model.parameters()] == [(8, 4), (8,), (2, 8), (2,)]
    assert all(p.requires_grad and p.is_leaf for p in model.parameters())
    state = model.state_dict()
    other = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    other.load_state_dict(state)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(other.state_dict().values(), state.values(),
                                                                       strict=True))
    with pytest.raises(RuntimeError, match="missing keys"):
        other.load_state_dict({"0.weight": state["0.weight"]})
    assert not model.eval().training and all(not m.training for m in model.modules())
    assert len(list(model.children())) == 3 and isinstance(model[0], nn.Linear)
    moved = model.to("cuda")
    assert moved is model and model[0].weight.device.type == "cuda" and names == [n for n, _ in
                                                                                  model.named_parameters()]


@pytest.mark.parametrize("device", DEVICES)
def test_linear_and_activations_match_torch(device):
    ours, theirs = twin_linear(device)
    x = f32(7, 5)
    xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    for fo, ft in ((lambda v: v, lambda v: v), (nn.GELU(), torch.nn.GELU()), (nn.SiLU(), torch.nn.SiLU()),
                   (nn.Tanh(), torch.nn.Tanh()), (nn.Sigmoid(), torch.nn.Sigmoid())):
        yo, yt = fo(ours(xo)), ft(theirs(xt))
        close(yo, yt)
        w = f32(*yt.shape)
        (yo * lapis.tensor(w, device=device)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        close(ours.weight.grad, theirs.weight.grad, 1e-4)
        close(xo.grad, xt.grad, 1e-4)
        ours.zero_grad()
        theirs.zero_grad()
        xo.grad, xt.grad = None, None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 5), (5,), (40, 300)])     # (40, 300): BLAS splits k on cuda
def test_linear_with_a_bias_is_one_addmm_as_torchs(device, shape):
    """nn.Linear with a bias is one addmm (its gemm adds the bias in the kernel that writes the output: one launch
    on cuda), with torch's values, gradients and shapes for 1-D, 2-D and 3-D inputs."""
    ours, theirs = twin_linear(device, shape[-1], 6)
    x = f32(*shape)
    xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    with lapis.trace() as t:
        yo = ours(xo)
        yo.detach().cpu()
    yt = theirs(xt)
    close(yo, yt)
    assert yo.grad_fn.name() in ("AddmmBackward0", "ViewBackward0")
    if device == "cuda" and shape != (40, 300):
        assert [e.args["kernel"] for e in t.select(3, "launch")] == ["gemm_kernel"]
    w = f32(*yt.shape)
    (yo * lapis.tensor(w, device=device)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    for a, b in ((ours.weight.grad, theirs.weight.grad), (ours.bias.grad, theirs.bias.grad), (xo.grad, xt.grad)):
        close(a, b, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_losses_match_torch(device):
    logits, target = f32(6, 4), np.array([0, 3, 1, 1, 2, -100], np.int64)
    cases = [(nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()),
             (nn.CrossEntropyLoss(label_smoothing=0.1), torch.nn.CrossEntropyLoss(label_smoothing=0.1)),
             (nn.CrossEntropyLoss(reduction="sum"), torch.nn.CrossEntropyLoss(reduction="sum"))]
    for ours, theirs in cases:
        lo, lt = lapis.tensor(logits, device=device, requires_grad=True), torch.tensor(logits, requires_grad=True)
        a, b = ours(lo, lapis.tensor(target, device=device)), theirs(lt, torch.tensor(target))
        close(a, b)
        a.backward()
        b.backward()
        close(lo.grad, lt.grad)
    x, y = f32(5, 3), (rng.random((5, 3)) > 0.5).astype(np.float32)
    for ours, theirs in ((nn.MSELoss(), torch.nn.MSELoss()), (nn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss())):
        close(ours(lapis.tensor(x, device=device), lapis.tensor(y, device=device)),
              theirs(torch.tensor(x), torch.tensor(y)))
    logp = torch.log_softmax(torch.tensor(logits), 1)
    close(nn.NLLLoss()(lapis.tensor(logp.numpy(), device=device), lapis.tensor(target, device=device)),
          torch.nn.NLLLoss()(logp, torch.tensor(target)))


@pytest.mark.parametrize("device", DEVICES)
def test_bce_with_logits_has_torchs_gradients_at_a_logit_of_zero(device):
    # the stable form's |x| and relu have no slope at 0; the loss has sigmoid(x) - y there (zero-initialized
    # weights give such logits), and -x for the target
    x = np.array([[0, 0, -3.5], [2, 50, -60]], np.float32)
    y = np.array([[1, 0, 1], [0, 0.3, 1]], np.float32)
    ours = [lapis.tensor(a, device=device, requires_grad=True) for a in (x, y)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, y)]
    for reduction in ("mean", "sum"):
        a = lapis.nn.functional.binary_cross_entropy_with_logits(*ours, reduction=reduction)
        b = torch.nn.functional.binary_cross_entropy_with_logits(*theirs, reduction=reduction)
        close(a, b)
        a.backward()
        b.backward()
        for o, t in zip(ours, theirs, strict=True):
            close(o.grad, t.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_bce_with_logits_weight_and_pos_weight_match_torch_values_and_gradients(device):
    """F.binary_cross_entropy_with_logits with a per-element weight, a per-class pos_weight (broadcast along the
    last dimension), both, each reduction: values and the gradients for the logits and the targets as torch's (a
    logit of exactly 0 and large ones included); nn.BCEWithLogitsLoss keeps them as buffers that move with .to()."""
    x = (3 * f32(3, 4)).clip(-60, 60)
    x[0, :2] = 0.0, 40.0
    y = rng.random((3, 4)).astype(np.float32)
    weight, pos_weight = rng.uniform(0.5, 2, (3, 4)).astype(np.float32), rng.uniform(0.2, 4, 4).astype(np.float32)
    for kwargs in ({"weight": weight}, {"pos_weight": pos_weight}, {"weight": weight[1], "pos_weight": pos_weight}):
        for reduction in ("mean", "sum", "none"):
            ours = [lapis.tensor(a, device=device, requires_grad=True) for a in (x, y)]
            theirs = [torch.tensor(a, requires_grad=True) for a in (x, y)]
            a = nn.functional.binary_cross_entropy_with_logits(
                *ours, reduction=reduction, **{k: lapis.tensor(v, device=device) for k, v in kwargs.items()})
            b = torch.nn.functional.binary_cross_entropy_with_logits(
                *theirs, reduction=reduction, **{k: torch.tensor(v) for k, v in kwargs.items()})
            close(a, b)
            w = f32(*b.shape)
            (a * lapis.tensor(w, device=device)).sum().backward()
            (b * torch.tensor(w)).sum().backward()
            for o, t in zip(ours, theirs, strict=True):
                close(o.grad, t.grad)
    ours = nn.BCEWithLogitsLoss(pos_weight=lapis.tensor(pos_weight)).to(device)
    theirs = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos_weight))
    assert ours.pos_weight.device.type == device and list(ours.state_dict()) == list(theirs.state_dict())
    close(ours(lapis.tensor(x, device=device), lapis.tensor(y, device=device)),
          theirs(torch.tensor(x), torch.tensor(y)))
    with pytest.raises(ValueError, match="must be the same as input size"):
        nn.functional.binary_cross_entropy_with_logits(lapis.zeros(2, 3), lapis.zeros(3))


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_is_log_softmax_and_one_loss_kernel_each_way(device):
    """As PyTorch: forward launches log-softmax and the loss (2 kernels), backward their two gradients."""
    logits, target = f32(40, 7), rng.integers(0, 7, 40)
    target[[3, 17]] = -100
    for reduction in ("mean", "sum", "none"):
        lo, lt = lapis.tensor(logits, device=device, requires_grad=True), torch.tensor(logits, requires_grad=True)
        with lapis.trace() as t:
            a = nn.functional.cross_entropy(lo, lapis.tensor(target, device=device), reduction=reduction)
            a.detach().cpu()                                # waits for the device
            forward = len(t.select(0, "kernel"))
        b = torch.nn.functional.cross_entropy(lt, torch.tensor(target), reduction=reduction)
        assert a.shape == b.shape
        close(a, b)
        (a.sum() if reduction == "none" else a).backward()
        (b.sum() if reduction == "none" else b).backward()
        close(lo.grad, lt.grad)
        if device != "cpu":
            assert forward == 2
    every_row_ignored = nn.functional.cross_entropy(lapis.tensor(logits[:2], device=device),
                                                    lapis.tensor(np.array([-100, -100]), device=device))
    assert np.isnan(every_row_ignored.item())               # 0 / 0, as torch


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_takes_a_class_per_position_and_unbatched_logits(device):
    """torch's other shapes: logits (N, C, d1, ...) with targets (N, d1, ...) (a segmentation map, a sequence
    with its classes second), and logits (C,) with a 0-d target; "none" gives the target's shape."""
    for shape, target_shape in (((2, 5, 3, 4), (2, 3, 4)), ((4, 5, 6), (4, 6)), ((5,), ())):
        logits, target = f32(*shape), rng.integers(0, 5, target_shape)
        if target.ndim:
            target.flat[1] = -100
        for reduction in ("mean", "sum", "none"):
            for smoothing in (0.0, 0.1):
                lo = lapis.tensor(logits, device=device, requires_grad=True)
                lt = torch.tensor(logits, requires_grad=True)
                a = nn.functional.cross_entropy(lo, lapis.tensor(target, device=device), reduction=reduction,
                                                label_smoothing=smoothing)
                b = torch.nn.functional.cross_entropy(lt, torch.tensor(target), reduction=reduction,
                                                      label_smoothing=smoothing)
                assert a.shape == b.shape
                close(a, b)
                a.sum().backward()
                b.sum().backward()
                close(lo.grad, lt.grad)
    with pytest.raises(ValueError, match=r"Expected target size \(2, 4\), got \(2, 5\)"):
        nn.functional.cross_entropy(lapis.ones(2, 3, 4, device=device), lapis.zeros(2, 5, dtype=lapis.long,
                                                                                       device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_a_target_out_of_range_is_never_a_plausible_loss(device):
    logits, target = lapis.tensor(f32(3, 4), device=device), lapis.tensor(np.array([0, 4, 1]), device=device)
    if device == "cpu":
        with pytest.raises(IndexError, match="Target 4 is out of bounds"):
            nn.functional.cross_entropy(logits, target)
    else:                                                   # a device-side assert, as torch's CUDA kernel
        with pytest.raises(RuntimeError, match="device-side assert triggered"):
            nn.functional.cross_entropy(logits, target).item()
        assert (logits + 1).cpu().shape == (3, 4)           # and the device goes on


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_and_dropout(device):
    x = f32(3, 6)
    ours, theirs = nn.LayerNorm(6).to(device), torch.nn.LayerNorm(6)
    close(ours(lapis.tensor(x, device=device)), theirs(torch.tensor(x)))
    drop = nn.Dropout(0.25)
    ones = lapis.ones(4000, device=device)
    kept = drop(ones)
    values = np.unique(kept.cpu().numpy())
    np.testing.assert_allclose(values, [0.0, 1 / 0.75], rtol=1e-6)
    assert abs((kept == 0).float().mean().item() - 0.25) < 0.03
    assert drop.eval()(ones) is ones


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make", [
    ("sgd", lambda lib, p: lib.optim.SGD(p, lr=0.1)),
    ("momentum", lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("nesterov", lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", lambda lib, p: lib.optim.Adam(p, lr=0.05, weight_decay=0.01)),
    ("adamw", lambda lib, p: lib.optim.AdamW(p, lr=0.05)),
])
@pytest.mark.slow
def test_optimizers_follow_torch_for_several_steps(device, name, make):
    ours, theirs = twin_linear(device)
    opt_o, opt_t = make(lapis, list(ours.parameters())), make(torch, list(theirs.parameters()))
    for _ in range(4):
        x, y = f32(8, 5), f32(8, 3)
        lo = ((ours(lapis.tensor(x, device=device)) - lapis.tensor(y, device=device)) ** 2).mean()
        lt = ((theirs(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        opt_o.zero_grad()
        opt_t.zero_grad()
        lo.backward()
        lt.backward()
        opt_o.step()
        opt_t.step()
    close(ours.weight, theirs.weight, 2e-5)
    close(ours.bias, theirs.bias, 2e-5)


def fused_steps(kind: str, sizes: list[int], seed: int, **options) -> list:
    """Float32 parameters of `sizes` on cuda and in torch, stepped three times by optimizer `kind` (lr 0.05 unless
    given) with the same gradients; checks they stay torch's, and returns the launches of lapis's last step."""
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    ours = [nn.Parameter(lapis.tensor(a, device="cuda")) for a in start]
    theirs = [torch.nn.Parameter(torch.tensor(a)) for a in start]
    options = {"lr": 0.05, **options}
    opt_o, opt_t = getattr(lapis.optim, kind)(ours, **options), getattr(torch.optim, kind)(theirs, **options)
    for _ in range(3):
        grads = [rng.standard_normal(n).astype(np.float32) for n in sizes]
        for p, q, gr in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = lapis.tensor(gr, device="cuda"), torch.tensor(gr)
        with lapis.trace() as t:
            opt_o.step()
        opt_t.step()
    for p, q in zip(ours, theirs, strict=True):
        close(p, q, 2e-5)
    return t.select(3, "launch")


def slots(launches: list) -> list[list[int]]:
    """The element counts a fused optimizer kernel's launches gave their four slots (0: unused)."""
    return [[int(e.args["args"][f"n{k}"]) for k in range(4)] for e in launches]


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_steps_many_parameters_a_few_to_a_launch_as_torch_does(decoupled):
    """Nine parameters of assorted sizes (one empty, one spanning many blocks): the fused kernels step
    them up to four to a launch, one that needs under a quarter of a launch's blocks in a launch of its
    own, and every one follows torch's Adam."""
    launches = fused_steps("AdamW" if decoupled else "Adam", [5, 300, 1, 4097, 64, 0, 7, 2, 1000], 3,
                           weight_decay=0.01)
    assert {e.args["kernel"] for e in launches} == {"adam_kernel"}
    # eight non-empty parameters by size: 4097 elements (17 blocks) alone, as the next needs 4; then four to
    # a launch, over the grid of the launch's largest
    assert slots(launches) == [[4097, 0, 0, 0], [1000, 300, 64, 7], [5, 2, 1, 0]]
    assert [e.args["grid"] for e in launches] == [(17, 1, 1), (4, 1, 1), (1, 1, 1)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_adam_steps_half_parameters_in_float32_with_one_rounding_per_store(dtype):
    """Half parameters on a GPU step in the fused kernel, as torch's fused Adam does: parameter, gradient and moments
    loaded as float32, stepped in float32, rounded once as they are stored. Each step is torch's float32 Adam on
    the upcast values, rounded to the half type (to within one unit in the last place: the float32 steps agree
    to 2e-5, which can move a rounding), two steps, with weight decay."""
    import ml_dtypes
    half = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    rng = np.random.default_rng(7)
    p = rng.standard_normal(300).astype(half)
    ours = nn.Parameter(lapis.tensor(p.astype(np.float32), device="cuda").to(getattr(lapis, dtype)))
    opt = lapis.optim.Adam([ours], lr=0.05, weight_decay=0.01)
    m = v = np.zeros(300, half)
    for step in (1, 2):
        g = rng.standard_normal(300).astype(half)
        ours.grad = lapis.tensor(g.astype(np.float32), device="cuda").to(getattr(lapis, dtype))
        with lapis.trace() as t:
            opt.step()
        assert [e.args["kernel"] for e in t.select(3, "launch")][-1:] == ["adam_kernel"]   # after the state's fills
        q = torch.nn.Parameter(torch.tensor(p.astype(np.float32)))
        reference = torch.optim.Adam([q], lr=0.05, weight_decay=0.01)
        q.grad = torch.tensor(g.astype(np.float32))
        reference.step()                                   # one float32 step from the upcast state, then rounded
        reference.state[q]["step"] = torch.tensor(float(step - 1))
        q.data = torch.tensor(p.astype(np.float32))
        reference.state[q]["exp_avg"] = torch.tensor(m.astype(np.float32))
        reference.state[q]["exp_avg_sq"] = torch.tensor(v.astype(np.float32))
        reference.step()
        p, m, v = (x.detach().numpy().astype(half) for x in (q, reference.state[q]["exp_avg"],
                                                               reference.state[q]["exp_avg_sq"]))
        got = ours.detach().float().cpu().numpy()
        ulp = np.abs(np.spacing(p.astype(np.float32))) * (2 ** 13 if dtype == "float16" else 2 ** 16)
        assert ours.dtype == getattr(lapis, dtype) and np.all(np.abs(got - p.astype(np.float32)) <= ulp)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind, options", [("SGD", {"momentum": 0.9, "weight_decay": 0.01}),
                                           ("RMSprop", {"momentum": 0.5, "weight_decay": 0.01})])
def test_sgd_and_rmsprop_step_half_parameters_in_float32_too(kind, options, dtype):
    """SGD's and RMSprop's fused kernels load half parameters, gradients and state as float32 too: a first step
    (with momentum and weight decay) is torch's float32 step on the upcast values, rounded to the half type (to
    within one unit in the last place, or 1e-5 where the step cancels the parameter), parameter and buffer alike."""
    import ml_dtypes
    half = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    rng = np.random.default_rng(8)
    p, g = (rng.standard_normal(300).astype(half) for _ in range(2))
    ours = nn.Parameter(lapis.tensor(p.astype(np.float32), device="cuda").to(getattr(lapis, dtype)))
    ours.grad = lapis.tensor(g.astype(np.float32), device="cuda").to(getattr(lapis, dtype))
    theirs = torch.nn.Parameter(torch.tensor(p.astype(np.float32)))
    theirs.grad = torch.tensor(g.astype(np.float32))
    opt_o = getattr(lapis.optim, kind)([ours], lr=0.05, **options)
    opt_t = getattr(torch.optim, kind)([theirs], lr=0.05, **options)
    with lapis.trace() as t:
        opt_o.step()
    opt_t.step()
    assert [e.args["kernel"] for e in t.select(3, "launch")][-1:] == [f"{kind.lower()}_kernel"]
    buffers = (o.state_dict()["state"][0]["momentum_buffer"] for o in (opt_o, opt_t))
    for got, want in ((ours, theirs), tuple(buffers)):
        want = want.detach().numpy().astype(half).astype(np.float32)
        ulp = np.abs(np.spacing(want)) * (2 ** 13 if dtype == "float16" else 2 ** 16)
        assert got.dtype == getattr(lapis, dtype)           # 1e-5: where p - lr * d cancels, float32's own error
        assert np.all(np.abs(got.detach().float().cpu().numpy() - want) <= np.maximum(ulp, 1e-5))


@pytest.mark.parametrize("options", [{}, {"momentum": 0.9, "weight_decay": 0.1}, {"maximize": True, "alpha": 0.9}])
def test_rmsprop_steps_many_parameters_a_few_to_a_launch_as_torch_does(options):
    """RMSprop on a GPU: float32 parameters in fused kernels, four of alike sizes to a launch (torch's foreach
    path launches five kernels a group; lapis's tensor ops took nine a parameter), following torch's updates."""
    launches = fused_steps("RMSprop", [5, 300, 1, 64, 0, 7, 2], 4, lr=0.01, **options)
    assert [e.args["kernel"] for e in launches] == ["rmsprop_kernel", "rmsprop_kernel"]
    assert slots(launches) == [[300, 64, 7, 5], [2, 1, 0, 0]]


@pytest.mark.parametrize("options", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
                                     {"momentum": 0.8, "dampening": 0.1, "maximize": True}])
def test_sgd_steps_many_parameters_a_few_to_a_launch_as_torch_does(options):
    """SGD on a GPU: float32 parameters in fused kernels, four of alike sizes to a launch, the momentum buffer
    starting from the first step's gradient as torch's does, following torch's updates."""
    launches = fused_steps("SGD", [5, 300, 1, 64, 0, 7, 2], 5, lr=0.1, **options)
    assert [e.args["kernel"] for e in launches] == ["sgd_kernel", "sgd_kernel"]
    assert slots(launches) == [[300, 64, 7, 5], [2, 1, 0, 0]]


SCHEDULES = [lambda lib, o: lib.optim.lr_scheduler.StepLR(o, 2, 0.5),
             lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, 5),
             lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, [4, 2], 0.3),
             lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, 0.9),
             lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (e + 2)),
             lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, 0.25, 1.0, 4)]


@pytest.mark.parametrize("make", SCHEDULES)
def test_schedulers_follow_torch(make):
    """Two groups' rates at construction and after each of eight steps, and the state a new schedule resumes from."""
    p = [[nn.Parameter(lapis.zeros(1))], [nn.Parameter(lapis.zeros(1))]]
    q = [[torch.nn.Parameter(torch.zeros(1))], [torch.nn.Parameter(torch.zeros(1))]]
    oo = lapis.optim.SGD([{"params": p[0]}, {"params": p[1], "lr": 0.1}], lr=1.0)
    ot = torch.optim.SGD([{"params": q[0]}, {"params": q[1], "lr": 0.1}], lr=1.0)
    so, st = make(lapis, oo), make(torch, ot)
    assert so.get_last_lr() == pytest.approx(st.get_last_lr())
    for _ in range(8):
        oo.step()
        ot.step()
        so.step()
        st.step()
        assert so.get_last_lr() == pytest.approx(st.get_last_lr())
    resumed = make(lapis, oo)
    resumed.load_state_dict(so.state_dict())
    resumed.step()
    st.step()
    assert resumed.get_last_lr() == pytest.approx(st.get_last_lr())


@pytest.mark.parametrize("kind,options", [
    ("SGD", {"total_steps": 20}),
    ("SGD", {"epochs": 3, "steps_per_epoch": 4, "anneal_strategy": "linear", "pct_start": 0.25}),
    ("Adam", {"total_steps": 15, "three_phase": True, "div_factor": 10.0, "final_div_factor": 100.0}),
    ("AdamW", {"total_steps": 9, "max_lr": [0.5, 0.05], "base_momentum": [0.8, 0.7], "max_momentum": 0.9}),
    ("SGD", {"total_steps": 7, "cycle_momentum": False, "three_phase": True, "anneal_strategy": "linear"})])
def test_one_cycle_lr_follows_torch_rates_and_momenta_over_a_whole_run(kind, options):
    """OneCycleLR's rate (and SGD's momentum or Adam's beta1, cycled the other way) for two groups at construction
    and after every step to the last, equal to torch's; the options torch has; one step too many is an error."""
    p = [[nn.Parameter(lapis.zeros(1))], [nn.Parameter(lapis.zeros(1))]]
    q = [[torch.nn.Parameter(torch.zeros(1))], [torch.nn.Parameter(torch.zeros(1))]]
    extra = {"momentum": 0.9} if kind == "SGD" else {}
    oo = getattr(lapis.optim, kind)([{"params": p[0]}, {"params": p[1], "lr": 0.1}], lr=1.0, **extra)
    ot = getattr(torch.optim, kind)([{"params": q[0]}, {"params": q[1], "lr": 0.1}], lr=1.0, **extra)
    options = {"max_lr": 1.0, **options}
    so = lapis.optim.lr_scheduler.OneCycleLR(oo, **options)
    st = torch.optim.lr_scheduler.OneCycleLR(ot, **options)
    momentum = "betas" if kind != "SGD" else "momentum"

    def agree():
        assert so.get_last_lr() == st.get_last_lr()
        assert [g[momentum] for g in oo.param_groups] == [tuple(g[momentum]) if kind != "SGD" else g[momentum]
                                                          for g in ot.param_groups]
    agree()
    for _ in range(st.total_steps - 1):
        oo.step()
        ot.step()
        so.step()
        st.step()
        agree()
    with pytest.raises(ValueError, match="Tried to step"):
        so.step()
        so.step()
    with pytest.raises(ValueError, match="total_steps OR"):
        lapis.optim.lr_scheduler.OneCycleLR(oo, max_lr=1.0, epochs=2)


@pytest.mark.parametrize("options", [{}, {"mode": "max", "threshold_mode": "abs", "threshold": 0.5, "cooldown": 1},
                                     {"factor": 0.5, "patience": 0, "min_lr": 0.2}])
def test_reduce_on_plateau_follows_torch(options):
    oo = lapis.optim.SGD([nn.Parameter(lapis.zeros(1))], lr=1.0)
    ot = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    so = lapis.optim.lr_scheduler.ReduceLROnPlateau(oo, patience=options.pop("patience", 2), **options)
    st = torch.optim.lr_scheduler.ReduceLROnPlateau(ot, patience=so.patience, **options)
    for metric in [5.0, 4.0, 4.0, 4.0, 4.0, 3.9999, 6.0, 6.2, 6.2, 6.2, 1.0, 1.0, 1.0, 1.0, 1.0]:
        so.step(metric)
        st.step(metric)
        assert so.get_last_lr() == pytest.approx(st.get_last_lr())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_an_optimizer_resumes_from_its_state_dict_and_from_torch_s(device, kind):
    """state_dict numbers the parameters as torch does; a fresh optimizer that loads it (ours, or torch's converted
    to lapis tensors) steps exactly as the original goes on stepping."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(shape).astype(np.float32) for shape in ((3, 2), (4,), (2,))]
    grads = [[rng.standard_normal(w.shape).astype(np.float32) for w in weights] for _ in range(4)]
    options = {"lr": 0.1, "momentum": 0.9} if kind == "SGD" else {"lr": 0.1}

    def run(lib, params, optimizer, steps):
        for g in steps:
            for p, grad in zip(params, g, strict=True):
                p.grad = lib.tensor(grad, device=device) if lib is lapis else torch.tensor(grad)
            optimizer.step()

    theirs = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
    ot = getattr(torch.optim, kind)([{"params": theirs[:2]}, {"params": theirs[2:], "lr": 0.05}], **options)
    run(torch, theirs, ot, grads[:2])
    for source in ("ours", "torch's"):
        ours = [nn.Parameter(lapis.tensor(w, device=device)) for w in weights]
        oo = getattr(lapis.optim, kind)([{"params": ours[:2]}, {"params": ours[2:], "lr": 0.05}], **options)
        run(lapis, ours, oo, grads[:2])
        state = oo.state_dict()
        assert sorted(state["state"]) == [0, 1, 2] and [g["params"] for g in state["param_groups"]] == [[0, 1], [2]]
        if source == "torch's":
            state = {"state": {k: {n: lapis.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v
                                   for n, v in s.items()} for k, s in ot.state_dict()["state"].items()},
                     "param_groups": ot.state_dict()["param_groups"]}
        resumed = [nn.Parameter(lapis.tensor(p.detach().cpu().numpy(), device=device)) for p in ours]
        fresh = getattr(lapis.optim, kind)([{"params": resumed[:2]}, {"params": resumed[2:]}], **options)
        fresh.load_state_dict(state)
        assert fresh.param_groups[1]["lr"] == 0.05
        run(lapis, resumed, fresh, grads[2:])
        run(lapis, ours, oo, grads[2:])
        for a, b in zip(resumed, ours, strict=True):
            close(a, b.detach().cpu())
    run(torch, theirs, ot, grads[2:])
    for a, b in zip(ours, theirs, strict=True):                     # and both as torch's
        close(a, b)
    # The state is keyed by the parameter, as torch's (programs read opt.state[p]["exp_avg"]); one without any
    # state reads as empty there too. A loaded state is keyed by the loading optimizer's parameters.
    entry = "momentum_buffer" if kind == "SGD" else "exp_avg"
    for lapis_params, lapis_opt in ((ours, oo), (resumed, fresh)):
        for a, b in zip(lapis_params, theirs, strict=True):
            close(lapis_opt.state[a][entry], ot.state[b][entry])
    assert oo.state[nn.Parameter(lapis.zeros(1))] == {} and ot.state[torch.nn.Parameter(torch.zeros(1))] == {}
    with pytest.raises(ValueError, match="different number of parameter groups"):
        fresh.load_state_dict({"state": {}, "param_groups": []})


def test_data_loader_batches_shuffles_and_drops():
    x, y = lapis.arange(10).float().reshape(10, 1), lapis.arange(10)
    batches = list(DataLoader(TensorDataset(x, y), batch_size=4))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    shuffled = [b[1].tolist() for b in DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, drop_last=True,
                                                  generator=3)]
    assert len(shuffled) == 2 and len(set(sum(shuffled, []))) == 8 and sum(shuffled, []) != list(range(8))
    assert len(DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)) == 2


@pytest.mark.slow
def test_digits_mlp_example_learns_on_cpu_and_cuda():
    import digits_mlp
    full = digits_mlp.train("cpu", quiet=True)                # the example's defaults: 97% or better
    assert full["accuracy"] >= 0.97
    short = digits_mlp.train("cuda", epochs=1, quiet=True)     # reduced: one epoch on the simulated GPU
    assert short["accuracy"] >= 0.7
    cpu_short = digits_mlp.train("cpu", epochs=1, quiet=True)
    assert abs(short["accuracy"] - cpu_short["accuracy"]) <= 0.02   # the same run, within float differences


@pytest.mark.slow
def test_char_transformer_example_learns_on_cpu_and_runs_the_same_on_cuda():
    import char_transformer
    full = char_transformer.train("cpu", quiet=True, sample_length=0)        # the example's defaults
    assert full["losses"][0] > full["chance"] - 0.2 and full["losses"][-1] < full["chance"] - 1.3
    # reduced: 3 steps of 4 x 16 characters, 4 sampled (at the example's 16 x 32, the hot runs the simulator
    # compiles to machine code in a test session's empty cache take most of a minute)
    reduced = dict(steps=3, batch_size=4, context=16, quiet=True, sample_length=4)
    short, cpu_short = char_transformer.train("cuda", **reduced), char_transformer.train("cpu", **reduced)
    assert np.allclose(short["losses"], cpu_short["losses"], atol=1e-3)
    assert len(short["after"]) == len("Shall ") + 4 and short["after"].startswith("Shall ")


@pytest.mark.slow
def test_examples_run_the_same_on_the_amd_profile():
    import char_transformer
    import digits_cnn
    # hip: the MI300X-like GPU, 64-lane waves through every kernel these models use
    for train, kwargs in ((char_transformer.train, dict(steps=2, batch_size=4, context=16, sample_length=0)),
                          (digits_cnn.train, dict(epochs=1, limit=128))):
        ours, reference = train("hip", quiet=True, **kwargs), train("cpu", quiet=True, **kwargs)
        assert np.allclose(ours["losses"], reference["losses"], atol=1e-3)


@pytest.mark.slow
def test_digits_cnn_example_learns_on_cpu_and_cuda():
    import digits_cnn
    assert digits_cnn.train("cpu", quiet=True)["accuracy"] >= 0.97     # the example's defaults
    short = digits_cnn.train("cuda", epochs=1, limit=256, quiet=True)  # reduced: 4 steps on the simulated GPU
    cpu_short = digits_cnn.train("cpu", epochs=1, limit=256, quiet=True)
    assert short["losses"][-1] < short["losses"][0] - 0.05
    assert np.allclose(short["losses"], cpu_short["losses"], atol=1e-3)   # the same run, within float differences
    assert abs(short["accuracy"] - cpu_short["accuracy"]) <= 0.02


@pytest.mark.parametrize("device", DEVICES)
def test_max_pooling_propagates_nan_and_routes_its_gradient_as_torch(device):
    """A window holding a NaN pools to NaN, whose gradient goes to that NaN (the GPU's kernel took the largest
    number, as IEEE's maximumNumber does, and gave no gradient)."""
    x = f32(1, 2, 4, 4)
    x[0, 0, 1, 2] = x[0, 1, 3, 3] = np.nan
    ours, theirs = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, want = lapis.nn.functional.max_pool2d(ours, 2), torch.nn.functional.max_pool2d(theirs, 2)
    y.sum().backward()
    want.sum().backward()
    np.testing.assert_array_equal(y.detach().cpu().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(ours.grad.cpu().numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_a_zero_stride_or_window_is_torch_s_error(device):
    x = lapis.zeros(1, 1, 4, 4, device=device)
    for call, words in [(lambda: lapis.nn.functional.conv2d(x, lapis.ones(1, 1, 1, 1, device=device), stride=0),
                         "non-positive stride"),
                        (lambda: lapis.nn.functional.max_pool2d(x, 2, 0), "stride should not be zero"),
                        (lambda: lapis.nn.functional.max_pool2d(x, 0), "stride should not be zero"),
                        (lambda: lapis.nn.functional.avg_pool2d(x, 2, 1, 2), "pad should be at most half")]:
        with pytest.raises(RuntimeError, match=words):
            call()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("conv", [dict(), dict(stride=2, padding=1), dict(padding=(1, 2), dilation=2, groups=2)])
def test_conv2d_and_pooling_match_torch(device, conv):
    ours = nn.Conv2d(4, 6, 3, **conv).to(device)
    theirs = torch.nn.Conv2d(4, 6, 3, **conv)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.detach().cpu().numpy()))
        theirs.bias.copy_(torch.tensor(ours.bias.detach().cpu().numpy()))
    x = f32(2, 4, 9, 8)
    xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    for pool_o, pool_t in ((nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
                           (nn.AvgPool2d(3, stride=1, padding=1), torch.nn.AvgPool2d(3, stride=1, padding=1))):
        yo, yt = pool_o(ours(xo).relu()), pool_t(theirs(xt).relu())
        close(yo, yt, 1e-4)
        w = f32(*yt.shape)
        (yo * lapis.tensor(w, device=device)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        close(xo.grad, xt.grad, 1e-4)
        close(ours.weight.grad, theirs.weight.grad, 1e-3)
        close(ours.bias.grad, theirs.bias.grad, 1e-3)
        xo.grad = xt.grad = ours.weight.grad = ours.bias.grad = theirs.weight.grad = theirs.bias.grad = None


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_trains_and_evaluates_like_torch(device):
    for ours, theirs, shape in ((nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3), (4, 3, 5, 5)),
                                (nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3), (6, 3))):
        ours.to(device)
        for _ in range(2):
            x = f32(*shape)
            xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
            yo, yt = ours(xo), theirs(xt)
            close(yo, yt, 1e-4)
            (yo * yo).sum().backward()
            (yt * yt).sum().backward()
            close(xo.grad, xt.grad, 1e-3)
            close(ours.weight.grad, theirs.weight.grad, 1e-3)       # accumulated over both steps
            close(ours.bias.grad, theirs.bias.grad, 1e-3)
        close(ours.running_mean, theirs.running_mean)
        close(ours.running_var, theirs.running_var)
        x = f32(*shape)
        close(ours.eval()(lapis.tensor(x, device=device)), theirs.eval()(torch.tensor(x)), 1e-4)


@pytest.mark.parametrize("device", DEVICES + ["hip"])               # hip: 64-lane waves shuffle too
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_scaled_dot_product_attention_matches_torch(device, mask):
    q, k, v = f32(2, 3, 5, 8), f32(2, 3, 7, 8), f32(2, 3, 7, 8)
    ours = [lapis.tensor(a, device=device, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    kwargs_o, kwargs_t = {}, {}
    if mask == "causal":
        kwargs_o = kwargs_t = {"is_causal": True}            # fused kernels, top-left aligned as torch's
    elif mask == "bool":
        m = rng.random((5, 7)) > 0.3
        m[:, 0] = True                                       # every query sees a key
        kwargs_o, kwargs_t = {"attn_mask": lapis.tensor(m, device=device)}, {"attn_mask": torch.tensor(m)}
    elif mask == "float":
        m = f32(5, 7)
        kwargs_o, kwargs_t = {"attn_mask": lapis.tensor(m, device=device)}, {"attn_mask": torch.tensor(m)}
    yo = nn.functional.scaled_dot_product_attention(*ours, **kwargs_o)
    yt = torch.nn.functional.scaled_dot_product_attention(*theirs, **kwargs_t)
    close(yo, yt, 1e-5)
    w = f32(*yt.shape)
    (yo * lapis.tensor(w, device=device)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        close(a.grad, b.grad, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["same", "packed", "broadcast"])
def test_scaled_dot_product_attention_on_shared_and_strided_operands_matches_torch(device, layout):
    """q, k and v as one tensor, as the heads of one packed projection (strided views of one memory, whose
    gradients are laid out alike), and broadcast over the batch (a stride of 0)."""
    def operands(m, x):
        if layout == "same":
            return x, x, x
        if layout == "broadcast":
            return x, x[:1].expand(2, 3, 6, 4), x[1:].expand(2, 3, 6, 4)
        return tuple(p.reshape(2, 6, 3, 4).transpose(1, 2) for p in x.chunk(3, -1))
    a = f32(2, 6, 36) if layout == "packed" else f32(2, 3, 6, 4)
    ours, theirs = lapis.tensor(a, device=device, requires_grad=True), torch.tensor(a, requires_grad=True)
    yo = nn.functional.scaled_dot_product_attention(*operands(lapis, ours), is_causal=True)
    yt = torch.nn.functional.scaled_dot_product_attention(*operands(torch, theirs), is_causal=True)
    close(yo, yt, 1e-5)
    w = f32(*yt.shape)
    (yo * lapis.tensor(w, device=device)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    close(ours.grad, theirs.grad, 1e-4)


@pytest.mark.parametrize("device,contiguous", [("cpu", True), ("cuda", False)])
def test_attention_output_is_laid_out_as_torchs_on_that_device(device, contiguous):
    # torch's cpu attention returns a contiguous output; its flash kernels a view of (batch, tokens, heads, dim)
    q = lapis.tensor(f32(2, 3, 5, 8), device=device)
    y = nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert y.is_contiguous() is contiguous and y.transpose(1, 2).is_contiguous() is not contiguous


def test_attention_reads_the_heads_in_place_and_merges_them_as_a_view():
    # The heads (4-D views of the packed projection) go to the fused kernels as they lie, the output and
    # gradients come back laid out (batch, tokens, heads, head dim), and the gradients of q, k and v lie side
    # by side as the projection's parts did: the only copies left spread the loss's one-element gradient.
    lapis.manual_seed(0)
    mha = nn.MultiheadAttention(32, 2, batch_first=True).to("cuda")
    x = lapis.randn(4, 16, 32, device="cuda", requires_grad=True)
    mask = lapis.ones(16, 16, dtype=lapis.bool, device="cuda").triu(1)
    with lapis.trace() as t:
        out, _ = mha(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)
        out.sum().backward()
    copies = [e.args["args"]["x"] for e in t.select(3, "launch") if e.args["kernel"] == "unary_kernel"]
    assert copies and all(x.startswith("float32[1] ") for x in copies), copies
    q, k, v = (w.detach().cpu().numpy() for w in mha.in_proj_weight.chunk(3))
    xs = x.detach().cpu().numpy()
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(xs @ w.T + b).view(4, 16, 2, 16).transpose(1, 2)
          for w, b in zip((q, k, v), mha.in_proj_bias.detach().cpu().numpy().reshape(3, 32), strict=True)),
        is_causal=True)
    merged = ref.transpose(1, 2).reshape(4, 16, 32).numpy() @ mha.out_proj.weight.detach().cpu().numpy().T
    assert np.allclose(out.detach().cpu().numpy(), merged + mha.out_proj.bias.detach().cpu().numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first,need_weights", [(True, False), (False, True)])
def test_multihead_attention_matches_torch(device, batch_first, need_weights):
    ours = nn.MultiheadAttention(16, 4, batch_first=batch_first).to(device)
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first)
    theirs.load_state_dict({k: torch.tensor(v.cpu().numpy()) for k, v in ours.state_dict().items()})
    x = f32(2, 6, 16) if batch_first else f32(6, 2, 16)
    xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    causal = np.triu(np.ones((6, 6), bool), 1)               # True: may not attend (torch's MHA convention)
    yo, wo = ours(xo, xo, xo, attn_mask=lapis.tensor(causal, device=device), need_weights=need_weights,
                  is_causal=True)
    yt, wt = theirs(xt, xt, xt, attn_mask=torch.tensor(causal), need_weights=need_weights, is_causal=True)
    close(yo, yt, 1e-5)
    assert (wo is None) == (wt is None)
    if wt is not None:
        close(wo, wt, 1e-5)
    (yo * yo).sum().backward()
    (yt * yt).sum().backward()
    close(xo.grad, xt.grad, 1e-4)
    close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad, 1e-4)
    close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad, 1e-4)
    padding = np.array([[False] * 5 + [True], [False] * 6])
    yo, _ = ours(xo, xo, xo, key_padding_mask=lapis.tensor(padding, device=device), need_weights=False)
    yt, _ = theirs(xt, xt, xt, key_padding_mask=torch.tensor(padding), need_weights=False)
    close(yo, yt, 1e-5)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        ours(xo, xo, xo, is_causal=True)


RECURRENT = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {})]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind, options", RECURRENT)
def test_recurrent_layers_match_torch_with_gradients(device, kind, options):
    """torch's gate order and parameter names: with torch's weights copied in, the outputs, final states and every
    gradient agree, for one layer, two batch-first layers and two bidirectional layers with a given initial state;
    an unbatched sequence too."""
    for layers, batch_first, bidirectional in ((1, False, False), (2, True, False), (2, False, True)):
        theirs = getattr(torch.nn, kind)(3, 5, layers, batch_first=batch_first, bidirectional=bidirectional, **options)
        ours = getattr(nn, kind)(3, 5, layers, batch_first=batch_first, bidirectional=bidirectional, **options)
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
        for name, p in theirs.named_parameters():
            assert tuple(getattr(ours, name).shape) == tuple(p.shape)
            getattr(ours, name).data = lapis.tensor(p.detach().numpy())
        ours.to(device)
        x = f32(4, 6, 3) if batch_first else f32(6, 4, 3)
        xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
        states = [f32(layers * (1 + bidirectional), 4, 5) for _ in range(2 if kind == "LSTM" else 1)]
        if bidirectional:                         # a given initial state
            ho = tuple(lapis.tensor(s, device=device) for s in states)
            ht = tuple(torch.tensor(s) for s in states)
            (yo, so), (yt, st) = ours(xo, ho if kind == "LSTM" else ho[0]), theirs(xt, ht if kind == "LSTM" else ht[0])
        else:
            (yo, so), (yt, st) = ours(xo), theirs(xt)
        so, st = (so, st) if kind == "LSTM" else ((so,), (st,))
        for a, b in ((yo, yt), *zip(so, st, strict=True)):
            assert a.shape == b.shape
            close(a, b)
        (yo.sum() + so[-1].sum()).backward()
        (yt.sum() + st[-1].sum()).backward()
        close(xo.grad, xt.grad)
        for name, p in theirs.named_parameters():
            close(getattr(ours, name).grad, p.grad)
    single = getattr(nn, kind)(3, 5, **options).to(device)
    out, state = single(lapis.tensor(f32(6, 3), device=device))                   # unbatched: (T, I)
    assert tuple(out.shape) == (6, 5)
    for s in (state if kind == "LSTM" else (state,)):
        assert tuple(s.shape) == (1, 5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind, options", RECURRENT)
def test_recurrent_cells_match_torch(device, kind, options):
    theirs, ours = getattr(torch.nn, kind + "Cell")(3, 4, **options), getattr(nn, kind + "Cell")(3, 4, **options)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for name, p in theirs.named_parameters():
        getattr(ours, name).data = lapis.tensor(p.detach().numpy())
    ours.to(device)
    x, h = f32(2, 3), f32(2, 4)
    hx = (h, f32(2, 4)) if kind == "LSTM" else h
    to_ours = (lambda v: tuple(lapis.tensor(a, device=device) for a in v)) if kind == "LSTM" else \
        (lambda v: lapis.tensor(v, device=device))
    to_theirs = (lambda v: tuple(torch.tensor(a) for a in v)) if kind == "LSTM" else torch.tensor
    for given in (None, hx):
        yo = ours(lapis.tensor(x, device=device), None if given is None else to_ours(given))
        yt = theirs(torch.tensor(x), None if given is None else to_theirs(given))
        for a, b in zip(*((yo, yt) if kind == "LSTM" else ((yo,), (yt,))), strict=True):
            assert a.shape == b.shape
            close(a, b)
    single = ours(lapis.tensor(x[0], device=device))                                 # unbatched: (I,)
    assert tuple((single[0] if kind == "LSTM" else single).shape) == (4,)


def test_recurrent_layers_refuse_what_torch_refuses_and_what_is_missing():
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 5, nonlinearity="sigmoid")
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(3, 5, proj_size=2)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")              # torch's, about its fast path
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", [(False, False, "relu"), (True, True, "gelu")])
def test_transformer_matches_torch_with_masks_and_gradients(device, batch_first, norm_first, activation):
    """nn.Transformer with torch's weights loaded through the state dict (the names agree): a causal float mask on
    the target (generate_square_subsequent_mask, as the word-language-model example passes it), a key padding mask
    on the source, outputs and every gradient."""
    options = dict(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=24, dropout=0.0,
                   activation=activation, batch_first=batch_first, norm_first=norm_first)
    theirs, ours = torch.nn.Transformer(**options), nn.Transformer(**options)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: lapis.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    ours.to(device)
    src, tgt = (f32(2, 5, 16), f32(2, 4, 16)) if batch_first else (f32(5, 2, 16), f32(4, 2, 16))
    padding = np.array([[False] * 4 + [True], [False] * 5])
    so, to = (lapis.tensor(v, device=device, requires_grad=True) for v in (src, tgt))
    st, tt = (torch.tensor(v, requires_grad=True) for v in (src, tgt))
    mo = nn.Transformer.generate_square_subsequent_mask(4, device=device)
    mt = torch.nn.Transformer.generate_square_subsequent_mask(4)
    close(mo, mt)
    yo = ours(so, to, tgt_mask=mo, src_key_padding_mask=lapis.tensor(padding, device=device),
              memory_key_padding_mask=lapis.tensor(padding, device=device))
    yt = theirs(st, tt, tgt_mask=mt, src_key_padding_mask=torch.tensor(padding),
                memory_key_padding_mask=torch.tensor(padding))
    assert yo.shape == yt.shape
    close(yo, yt, 1e-4)
    (yo * yo).sum().backward()
    (yt * yt).sum().backward()
    close(so.grad, st.grad, 1e-4)
    close(to.grad, tt.grad, 1e-4)
    for name, p in theirs.named_parameters():
        close(ours.get_parameter(name).grad, p.grad, 1e-4)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")              # torch's, about its fast path
@pytest.mark.parametrize("device", DEVICES)
def test_a_transformer_encoder_language_model_step_matches_torch(device):
    """The word-language-model shape: Embedding, TransformerEncoder over a causal mask (is_causal given, as torch
    detects it), Linear decoder; encoder layers are copies of one layer; eval mode turns their dropout off."""
    def build(lib):
        layer = lib.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.2)
        return lib.nn.ModuleDict({"embed": lib.nn.Embedding(11, 16), "encoder": lib.nn.TransformerEncoder(layer, 2),
                                  "decode": lib.nn.Linear(16, 11)})
    theirs, ours = build(torch), build(lapis)
    ours.load_state_dict({k: lapis.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    ours.to(device).eval()
    theirs.eval()
    assert ours["encoder"].layers[0] is not ours["encoder"].layers[1]
    tokens = np.random.default_rng(2).integers(0, 11, (6, 3))          # (T, N)
    mask_o = lapis.nn.Transformer.generate_square_subsequent_mask(6, device=device)
    mask_t = torch.nn.Transformer.generate_square_subsequent_mask(6)
    ho = ours["encoder"](ours["embed"](lapis.tensor(tokens, device=device)), mask_o, is_causal=True)
    ht = theirs["encoder"](theirs["embed"](torch.tensor(tokens)), mask_t, is_causal=True)
    lo = lapis.nn.functional.cross_entropy(ours["decode"](ho).reshape(-1, 11), lapis.tensor(tokens, device=device)
                                           .reshape(-1))
    lt = torch.nn.functional.cross_entropy(theirs["decode"](ht).reshape(-1, 11), torch.tensor(tokens).reshape(-1))
    close(lo, lt, 1e-5)
    lo.backward()
    lt.backward()
    for name, p in theirs.named_parameters():
        close(ours.get_parameter(name).grad, p.grad, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [dict(stride=2, padding=1), dict(stride=2, padding=1, output_padding=1),
                                     dict(stride=3, padding=0, dilation=2, output_padding=2, groups=2),
                                     dict(stride=1, padding=2, bias=False)])
def test_conv_transpose2d_matches_torch_with_gradients(device, options):
    theirs = torch.nn.ConvTranspose2d(4, 6, 3, **options)
    ours = nn.ConvTranspose2d(4, 6, 3, **options)
    assert tuple(ours.weight.shape) == tuple(theirs.weight.shape)
    ours.load_state_dict({k: lapis.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    ours.to(device)
    x = f32(2, 4, 5, 4)
    xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    assert yo.shape == yt.shape
    close(yo, yt, 1e-4)
    (yo * yo).sum().backward()
    (yt * yt).sum().backward()
    close(xo.grad, xt.grad, 1e-3)
    for name, p in theirs.named_parameters():
        close(ours.get_parameter(name).grad, p.grad, 1e-3)
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        nn.ConvTranspose2d(4, 6, 3, stride=1, output_padding=1)(lapis.tensor(x))


@pytest.mark.parametrize("device", DEVICES)
def test_a_dcgan_step_matches_torch(device):
    """DCGAN's shape, small: a generator of transposed convolutions, batch norm, ReLU and Tanh, a discriminator of
    convolutions, LeakyReLU(0.2) and Sigmoid, BCELoss on real and fake labels, weights initialized by the example's
    `m.weight.data.normal_(0, 0.02)` idiom, one Adam(betas=(0.5, 0.999)) step of each."""
    def build(lib):
        nn_ = lib.nn
        generator = nn_.Sequential(nn_.ConvTranspose2d(8, 16, 4, 1, 0, bias=False), nn_.BatchNorm2d(16), nn_.ReLU(),
                                   nn_.ConvTranspose2d(16, 1, 4, 2, 1, bias=False), nn_.Tanh())
        discriminator = nn_.Sequential(nn_.Conv2d(1, 16, 4, 2, 1, bias=False), nn_.LeakyReLU(0.2),
                                       nn_.Conv2d(16, 1, 4, 1, 0, bias=False), nn_.Sigmoid())
        return generator, discriminator
    (go, do), (gt, dt) = build(lapis), build(torch)
    lapis.manual_seed(0)
    for m in [*go.modules(), *do.modules()]:
        if type(m).__name__.startswith("Conv"):
            m.weight.data.normal_(0.0, 0.02)
    for ours, theirs in ((go, gt), (do, dt)):
        theirs.load_state_dict({k: torch.tensor(v.cpu().numpy()) for k, v in ours.state_dict().items()})
        ours.to(device)
    noise = f32(4, 8, 1, 1)
    real = np.tanh(f32(4, 1, 8, 8))
    results = []
    for lib, g, d, dev in ((lapis, go, do, device), (torch, gt, dt, "cpu")):
        as_tensor = (lambda v, dev=dev: lapis.tensor(v, device=dev)) if lib is lapis else torch.tensor
        criterion = lib.nn.BCELoss()
        opt_d = lib.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = lib.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
        ones, zeros = as_tensor(np.ones(4, np.float32)), as_tensor(np.zeros(4, np.float32))
        fake = g(as_tensor(noise))
        loss_d = criterion(d(as_tensor(real)).reshape(-1), ones) + criterion(d(fake.detach()).reshape(-1), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = criterion(d(fake).reshape(-1), ones)
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        results.append((fake, loss_d, loss_g, list(g.parameters()), list(d.parameters())))
    (fo, ldo, lgo, gpo, dpo), (ft, ldt, lgt, gpt, dpt) = results
    assert fo.shape == ft.shape == (4, 1, 8, 8)
    close(fo, ft, 1e-5)
    close(ldo, ldt, 1e-5)
    close(lgo, lgt, 1e-5)
    for a, b in zip(gpo + dpo, gpt + dpt, strict=True):
        close(a, b, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_a_float64_model_trains_as_torch_s(device, kind):
    """Module.double() casts the floating parameters and buffers (an integer buffer keeps its type); on cuda the
    float64 matmuls run dgemm (batched too) and Adam steps float64 parameters with tensor ops: three steps follow
    torch's float64 run to float64 precision."""
    def build(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.ReLU(), lib.nn.Linear(5, 2))
    ours, theirs = build(lapis), build(torch)
    ours.load_state_dict({k: lapis.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    ours.register_buffer("seen", lapis.tensor(7))         # (ReLU: float64 tanh on a GPU is float32-accurate yet)
    ours.double().to(device)
    theirs.double()
    assert ours[0].weight.dtype is lapis.float64 and ours.seen.dtype is lapis.int64
    x = np.random.default_rng(1).standard_normal((4, 2, 3))          # a batch of matrices: batched matmuls
    oo = getattr(lapis.optim, kind)(ours.parameters(), lr=0.05, weight_decay=0.1)
    ot = getattr(torch.optim, kind)(theirs.parameters(), lr=0.05, weight_decay=0.1)
    for _ in range(3):
        lo = (ours(lapis.tensor(x, device=device)) ** 2).sum()
        lt = (theirs(torch.tensor(x)) ** 2).sum()
        oo.zero_grad()
        ot.zero_grad()
        lo.backward()
        lt.backward()
        oo.step()
        ot.step()
    assert lo.dtype is lapis.float64
    np.testing.assert_allclose(lo.item(), lt.item(), rtol=1e-12)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-11, atol=1e-13)


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")          # torch's, about its kl_div
@pytest.mark.parametrize("device", DEVICES)
def test_adaptive_pooling_interpolation_and_kl_div_match_torch_with_gradients(device):
    """adaptive_avg_pool2d to sizes that divide and that do not (overlapping windows), interpolate by size and by
    scale factor in nearest, linear and bilinear modes (corners aligned or not), kl_div in each reduction: outputs
    and input gradients against torch's."""
    x = f32(2, 3, 7, 5)
    cases = [(lambda F, t: F.adaptive_avg_pool2d(t, (3, 2))), (lambda F, t: F.adaptive_avg_pool2d(t, 1)),
             (lambda F, t: F.adaptive_avg_pool2d(t, (7, None))),
             (lambda F, t: F.interpolate(t, size=(11, 4))), (lambda F, t: F.interpolate(t, scale_factor=2.5)),
             (lambda F, t: F.interpolate(t, size=(9, 13), mode="bilinear")),
             (lambda F, t: F.interpolate(t, scale_factor=(0.5, 1.7), mode="bilinear", align_corners=True)),
             (lambda F, t: F.interpolate(t[:, :, 0], size=12, mode="linear", align_corners=False))]
    for k, case in enumerate(cases):
        xo, xt = lapis.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
        yo, yt = case(lapis.nn.functional, xo), case(torch.nn.functional, xt)
        assert yo.shape == yt.shape, k
        close(yo, yt, 1e-5)
        w = f32(*yt.shape)
        (yo * lapis.tensor(w, device=device)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        close(xo.grad, xt.grad, 1e-5)
    log_p = np.log(np.random.default_rng(3).dirichlet(np.ones(5), 4)).astype(np.float32)
    target = np.random.default_rng(4).dirichlet(np.ones(5), 4).astype(np.float32)
    target[0, 2] = 0.0                                         # a zero target contributes 0
    for reduction in ("mean", "sum", "batchmean", "none"):
        for log_target in (False, True):
            t = np.log(np.maximum(target, 1e-12)) if log_target else target
            xo, xt = lapis.tensor(log_p, device=device, requires_grad=True), torch.tensor(log_p, requires_grad=True)
            lo = lapis.nn.KLDivLoss(reduction, log_target)(xo, lapis.tensor(t, device=device))
            lt = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)(xt, torch.tensor(t))
            close(lo, lt, 1e-6)
            lo.sum().backward()
            lt.sum().backward()
            close(xo.grad, xt.grad, 1e-6)
    up = lapis.nn.Upsample(scale_factor=2)(lapis.tensor(x, device=device))
    close(up, torch.nn.Upsample(scale_factor=2)(torch.tensor(x)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind, options", [("RMSprop", {}), ("RMSprop", {"momentum": 0.9, "centered": True,
                                                                         "weight_decay": 0.1}),
                                           ("Adagrad", {}), ("Adagrad", {"lr_decay": 0.1, "weight_decay": 0.1,
                                                                         "initial_accumulator_value": 0.5})])
def test_rmsprop_and_adagrad_step_as_torch_s(device, kind, options):
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    ours, theirs = nn.Parameter(lapis.tensor(w0, device=device)), torch.nn.Parameter(torch.tensor(w0))
    oo = getattr(lapis.optim, kind)([ours], lr=0.05, **options)
    ot = getattr(torch.optim, kind)([theirs], lr=0.05, **options)
    for _ in range(4):
        g = rng.standard_normal((3, 4)).astype(np.float32)
        ours.grad, theirs.grad = lapis.tensor(g, device=device), torch.tensor(g)
        oo.step()
        ot.step()
        close(ours, theirs, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_lbfgs_follows_torch_s_iterations(device):
    """time_sequence_prediction's use: LBFGS(lr=0.8) stepping a closure that zeroes the gradients, computes an MSE
    loss and backpropagates; three steps of up to five iterations each (the curvature history carried between them)
    give torch's losses and parameters."""
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    ours = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    ours.load_state_dict({k: lapis.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    ours.to(device)
    runs = []
    for lib, model, dev in ((lapis, ours, device), (torch, theirs, "cpu")):
        optimizer = lib.optim.LBFGS(model.parameters(), lr=0.8, max_iter=5)
        xs, ys = (lapis.tensor(v, device=dev) for v in (x, y)) if lib is lapis else (torch.tensor(x), torch.tensor(y))

        def closure(optimizer=optimizer, model=model, xs=xs, ys=ys, lib=lib):
            optimizer.zero_grad()
            loss = lib.nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            return loss
        runs.append([float(optimizer.step(closure).detach()) for _ in range(3)] + [float(closure().detach())])
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-3)
    assert runs[0][-1] < runs[0][0] * 0.8
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        close(a, b, 1e-3)
    with pytest.raises(NotImplementedError, match="strong_wolfe"):
        lapis.optim.LBFGS(ours.parameters(), line_search_fn="strong_wolfe")
