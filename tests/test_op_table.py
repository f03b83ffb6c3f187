"""Layer 5: the elementwise op table, walked row by row. Every row must be reachable as lapis.<op>, Tensor.<op>,
the in-place Tensor.<op>_ and its Python operators, and match PyTorch's forward, backward and in-place results on
`cpu` and `cuda`. A new row is tested here without a line of test code."""

import math
import operator

import numpy as np
import pytest
import torch

import lapis
from lapis.framework.ops.elementwise import FUNCTIONS, OPS, _plain_cpu

rng = np.random.default_rng(11)
DEVICES = ["cpu", "cuda"]


def _inputs(op, positive: bool) -> list[np.ndarray]:
    """Float32 operands that broadcast, (3, 1, 4) and (5, 1); positive ones for ops with a restricted domain."""
    low, high = (0.5, 2.0) if positive else (-2.0, 2.0)
    shapes = [(3, 1, 4), (5, 1)][:op.arity]
    return [rng.uniform(low, high, s).astype(np.float32) for s in shapes]


def _domain(op) -> list[list[np.ndarray]]:
    """Positive operands always; mixed-sign ones too where torch's result is finite on them."""
    cases = [_inputs(op, positive=True)]
    mixed = _inputs(op, positive=False)
    want = getattr(torch, op.name)(*(torch.tensor(a) for a in mixed))
    if torch.isfinite(want.to(torch.float64)).all():
        cases.append(mixed)
    return cases


def _check(got, want) -> None:
    assert tuple(got.shape) == tuple(want.shape)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.detach().cpu().numpy().astype(np.float64),
                               want.detach().numpy().astype(np.float64), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_row_matches_torch_forward_and_backward(name, device):
    op = OPS[name]
    assert callable(getattr(lapis, name)) and name in lapis.__all__
    assert callable(getattr(lapis.Tensor, name)) and callable(getattr(lapis.Tensor, name + "_"))
    for arrays in _domain(op):
        ours = [lapis.tensor(a, device=device, requires_grad=op.grads is not None) for a in arrays]
        theirs = [torch.tensor(a, requires_grad=op.grads is not None) for a in arrays]
        for got, want in ((getattr(lapis, name)(*ours), getattr(torch, name)(*theirs)),
                          (getattr(ours[0], name)(*ours[1:]), getattr(theirs[0], name)(*theirs[1:]))):
            _check(got, want)
        if op.grads is None:
            assert not got.requires_grad and got.grad_fn is None
            continue
        assert got.grad_fn.name() == want.grad_fn.name()
        weight = rng.standard_normal(tuple(want.shape)).astype(np.float32)
        try:
            (want * torch.tensor(weight)).sum().backward()
        except RuntimeError as error:              # no derivative (floor_divide): ours raises torch's error
            with pytest.raises(RuntimeError, match=str(error)):
                (got * lapis.tensor(weight, device=device)).sum().backward()
            continue
        (got * lapis.tensor(weight, device=device)).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            _check(o.grad, t.grad)
            o.grad = None


EDGES = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, -1.0, 1.0, -3.5, 3.5, 1e-39, -1e-39, -1e30, 1e30], np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(name for name, op in OPS.items() if op.arity == 1))
def test_every_unary_row_answers_as_torch_at_the_edges(name, device):
    """Infinities, NaN, signed zeros, subnormals and huge values: the same values as torch, NaN where torch's is
    NaN, and a zero's sign where torch's result is a zero (relu(-inf) was NaN on cuda: -inf * 0; tanh(-0) +0)."""
    got = getattr(lapis, name)(lapis.tensor(EDGES, device=device)).cpu().numpy()
    want = getattr(torch, name)(torch.tensor(EDGES)).numpy()
    assert got.dtype == want.dtype
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=0, equal_nan=True)
    zeros = (g == 0) & (w == 0)
    np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]), err_msg=f"{name}: a zero's sign")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_row_in_place_matches_torch(name, device):
    op = OPS[name]
    arrays = _domain(op)[-1]
    x = rng.uniform(0.5, 2.0, (5, 4)).astype(np.float32) if op.arity == 2 else arrays[0].reshape(3, 4)
    others = [rng.uniform(0.5, 2.0, (4,)).astype(np.float32)] if op.arity == 2 else []
    ours = lapis.tensor(x, device=device)
    theirs = torch.tensor(x)
    returned = getattr(ours, name + "_")(*(lapis.tensor(o, device=device) for o in others))
    if hasattr(theirs, name + "_"):
        getattr(theirs, name + "_")(*(torch.tensor(o) for o in others))
    else:                                      # torch has no maximum_: its out-of-place result, in x's dtype
        theirs = getattr(torch, name)(theirs, *(torch.tensor(o) for o in others)).to(theirs.dtype)
    assert returned is ours
    _check(ours, theirs)


@pytest.mark.parametrize("name", sorted(name for name, op in OPS.items() if op.operators))
def test_every_operator_of_a_row(name):
    a, b = (rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32) for _ in range(2))
    for dunder in OPS[name].operators:
        if OPS[name].arity == 1:
            _check(getattr(lapis.tensor(a), dunder)(), getattr(torch.tensor(a), dunder)())
            continue
        _check(getattr(lapis.tensor(a), dunder)(lapis.tensor(b)), getattr(torch.tensor(a), dunder)(torch.tensor(b)))
        _check(getattr(lapis.tensor(a), dunder)(1.5), getattr(torch.tensor(a), dunder)(1.5))


def test_rows_follow_torch_dtype_rules_on_integers():
    i = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for name, op in OPS.items():
        args = [i] * op.arity
        want = getattr(torch, name)(*(torch.tensor(a) for a in args))
        got = getattr(lapis, name)(*(lapis.tensor(a) for a in args))
        _check(got, want)


def test_alpha_scales_the_second_operand_where_torch_takes_it():
    a, b = lapis.tensor([1.0, 2.0]), lapis.tensor([3.0, 5.0])
    assert lapis.add(a, b, alpha=2).tolist() == [7.0, 12.0] and lapis.sub(a, b, alpha=0.5).tolist() == [-0.5, -0.5]
    assert a.clone().add_(b, alpha=-1).tolist() == [-2.0, -3.0]
    with pytest.raises(TypeError, match="alpha"):
        lapis.mul(a, b, alpha=2)
    assert operator.pow(lapis.tensor([3.0]), 2).tolist() == [9.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_row_propagates_nan_as_torch(name, device):
    op = OPS[name]
    arrays = _inputs(op, positive=True)
    for k in range(op.arity):                          # a NaN in each operand in turn
        with_nan = [a.copy() for a in arrays]
        with_nan[k].flat[0] = np.nan
        got = getattr(lapis, name)(*(lapis.tensor(a, device=device) for a in with_nan))
        want = getattr(torch, name)(*(torch.tensor(a) for a in with_nan))
        _check(got, want)                               # NaN where torch has NaN (assert_allclose: equal_nan)


def test_rows_refuse_what_torch_refuses():
    with pytest.raises(TypeError, match=r"exp\(\): argument 'input' \(position 1\) must be Tensor, not float"):
        lapis.exp(3.0)
    with pytest.raises(TypeError, match="expected a Tensor operand"):
        lapis.add(2, 3)
    assert (2 + lapis.tensor([1.0])).tolist() == [3.0]           # a reflected operator still takes the number
    with pytest.raises(TypeError, match=r"exp_\(\) takes 0 operand"):
        lapis.ones(2).exp_(1)
    with pytest.raises(TypeError, match=r"add_\(\) takes 1 operand"):
        lapis.ones(2).add_()


# (a, b) of the given dtype: one shape, broadcasting, a number either side, a 0-d tensor, two dtypes
PLAIN_OPERANDS = {
    "same": lambda v, dt: (lapis.tensor(v[0].astype(dt)), lapis.tensor(v[1].astype(dt))),
    "broadcast": lambda v, dt: (lapis.tensor(v[0].astype(dt)), lapis.tensor(v[1][:1, :, :1].astype(dt))),
    "number": lambda v, dt: (lapis.tensor(v[0].astype(dt)), 2.5),
    "reflected": lambda v, dt: (-3, lapis.tensor(v[1].astype(dt))),
    "0-d": lambda v, dt: (lapis.tensor(v[0].astype(dt)), lapis.tensor(v[1][0, 0, 0].astype(np.float64))),
    "mixed": lambda v, dt: (lapis.tensor(v[0].astype(dt)), lapis.tensor(v[1].astype(np.int64 if dt is np.float32
                                                                                   else np.float32))),
}


@pytest.mark.parametrize("operands", PLAIN_OPERANDS)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("name", [name for name, op in OPS.items() if op.arity == 2])
def test_the_plain_cpu_path_gives_the_general_paths_result(name, dt, operands):
    """A cpu call with no gradient to record takes `_plain_cpu` (numpy on the arrays, no Function); it must give
    exactly what the general path gives, dtype and shape included, or decline. Float32 add, the tiny op, and
    broadcasting add and multiply by a number must take it."""
    values = rng.uniform(-3, 3, (2, 2, 2, 5)) * (rng.random((2, 2, 2, 5)) < 0.8)       # zeros too: division
    a, b = PLAIN_OPERANDS[operands](values, dt)
    fast = _plain_cpu(OPS[name], a, b)
    try:
        general = FUNCTIONS[name].apply(a, b)
    except (RuntimeError, TypeError, ValueError):                    # what the row refuses, the fast path declines
        assert fast is None
        return
    if fast is not None:
        assert fast.dtype == general.dtype and fast.shape == general.shape and not fast.requires_grad
        np.testing.assert_array_equal(fast.numpy(), general.numpy())
    if name in ("add", "mul") and dt is np.float32 and operands in ("same", "broadcast", "number"):
        assert fast is not None
    tensor = a if isinstance(a, lapis.Tensor) else b
    if tensor.dtype.is_floating_point:
        tensor.requires_grad_()
        assert _plain_cpu(OPS[name], a, b) is None                 # a gradient to record: the Function's path
        with lapis.no_grad():
            assert (_plain_cpu(OPS[name], a, b) is None) == (fast is None)


@pytest.mark.parametrize("shape", [(2, 5), ()])
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("name", [name for name, op in OPS.items() if op.arity == 1])
def test_the_plain_cpu_path_of_a_unary_row_gives_the_general_paths_result(name, dt, shape):
    """The same for each unary row (exp, relu, ...), 0-d tensors too (numpy answers those with a scalar)."""
    x = lapis.tensor((rng.uniform(-3, 3, shape) * (rng.random(shape) < 0.8)).astype(dt))
    fast = _plain_cpu(OPS[name], x)
    try:
        general = FUNCTIONS[name].apply(x)
    except (RuntimeError, TypeError, ValueError):
        assert fast is None
        return
    if fast is not None:
        assert fast.dtype == general.dtype and fast.shape == general.shape and not fast.requires_grad
        np.testing.assert_array_equal(fast.numpy(), general.numpy())
    if name == "exp" and dt is np.float32:
        assert fast is not None
    if x.dtype.is_floating_point:
        assert _plain_cpu(OPS[name], x.requires_grad_()) is None


def test_the_plain_cpu_path_declines_a_gpu_operand():
    a, b = lapis.ones(3), lapis.ones(3, device="cuda")
    assert _plain_cpu(OPS["add"], a, b) is None and _plain_cpu(OPS["add"], 2.0, b) is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_integer_floor_division_and_remainder_match_torch(device, dt):
    """Python's rounding (toward minus infinity; the remainder takes the divisor's sign), by tensors and numbers
    either side, in place; by zero, torch's ZeroDivisionError instead of a GPU's unspecified value."""
    a_np = np.arange(-7, 8, dtype=dt)
    b_np = np.array([3, -3, 2, -2, 5], dt)[np.arange(15) % 5]
    a, b = lapis.tensor(a_np, device=device), lapis.tensor(b_np, device=device)
    ta, tb = torch.tensor(a_np), torch.tensor(b_np)
    for got, want in ((a % b, ta % tb), (a // b, ta // tb), (a % 4, ta % 4), (a // -4, ta // -4),
                      (9 % b, 9 % tb), (-9 // b, -9 // tb), (lapis.remainder(a, b), torch.remainder(ta, tb)),
                      (lapis.fmod(a, b), torch.fmod(ta, tb)), (a.fmod(-4), ta.fmod(-4)),
                      (lapis.div(a, b, rounding_mode="trunc"), torch.div(ta, tb, rounding_mode="trunc")),
                      (a.div(-4, rounding_mode="floor"), ta.div(-4, rounding_mode="floor")),
                      (a.div(2.5, rounding_mode="trunc"), ta.div(2.5, rounding_mode="trunc"))):
        _check(got, want)
    before = a
    a %= 3
    ta %= 3
    assert a is before
    _check(a, ta)
    assert a.div_(-2, rounding_mode="trunc") is before
    _check(a, ta.div_(-2, rounding_mode="trunc"))
    for divide in (lambda: a // 0, lambda: a % lapis.zeros_like(a), lambda: 5 // a.clamp(0, 1),
                   lambda: lapis.fmod(a, 0), lambda: a.div(0, rounding_mode="trunc"), lambda: a.__ifloordiv__(0)):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            divide()


# Floats where torch's division rounding shows: signed zeros, infinities, NaN, subnormals, quotients that
# overflow, that round, and that fall just short of an integer
DIVISION_EDGES = [-math.inf, math.inf, math.nan, -0.0, 0.0, 1.0, -1.0, 2.0, -2.0, 3.5, -7.5, 0.1, -0.3, 0.7,
                  1e-39, -1e-39, 1e-45, 1e-30, -1e30, 3e38, 16777217.0]
WIDE_EDGES = [5e-324, 1e-300, -1e300, 1.7976931348623157e308]       # float64 only
DIVISIONS = {"remainder": torch.remainder, "fmod": torch.fmod, "floor_divide": torch.floor_divide,
             "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
             "floor": lambda a, b: torch.div(a, b, rounding_mode="floor")}


def _torch_elementwise(fn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """torch's results one element at a time: its scalar loop, whose formulas (C's fmod, IEEE's division) its
    CUDA kernels share; its vectorized cpu loop (Sleef's fmod) gives NaN where a / b overflows."""
    return np.array([fn(torch.tensor([x]), torch.tensor([y])).item() for x, y in zip(a, b, strict=True)], a.dtype)


def _bitwise_equal(got: np.ndarray, want: np.ndarray) -> None:
    bits = np.uint32 if got.dtype == np.float32 else np.uint64
    bad = (got.view(bits) != want.view(bits)) & ~(np.isnan(got) & np.isnan(want))
    assert not bad.any(), f"{bad.sum()} differ, such as {got[bad][:4]} for torch's {want[bad][:4]}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_float_division_and_remainder_match_torch_bit_for_bit(device, dt):
    """remainder, fmod, floor_divide and div's two rounding modes of floats over every pair of edge values,
    bit for bit with torch's (a zero's sign, inf and NaN by zero, quotients past the float range, huge ones
    that rounding decides): on a GPU as kernels, computing as torch's formulas do with IEEE's division."""
    values = np.array(DIVISION_EDGES + (WIDE_EDGES if dt is np.float64 else []), dt)
    a_np, b_np = (v.ravel() for v in np.meshgrid(values, values, indexing="ij"))
    a, b = lapis.tensor(a_np, device=device), lapis.tensor(b_np, device=device)
    ours = {"remainder": a % b, "fmod": lapis.fmod(a, b), "floor_divide": a // b,
            "trunc": lapis.div(a, b, rounding_mode="trunc"), "floor": a.div(b, rounding_mode="floor")}
    for name, got in ours.items():
        assert got.dtype == a.dtype and got.device == a.device
        _bitwise_equal(got.cpu().numpy(), _torch_elementwise(DIVISIONS[name], a_np, b_np))


@pytest.mark.parametrize("device", DEVICES)
def test_float_division_by_numbers_in_place_and_its_gradients_match_torch(device):
    """A number either side and in-place forms; remainder's and fmod's gradients (the divisor's is -g times the
    floored or truncated quotient); div's rounded quotient has a zero gradient (DivBackward2); floor_divide
    records a node whose backward raises, as torch's."""
    x_np = np.array([-7.5, 7.5, -0.0, 3.0, 1e30, -2.5], np.float32)
    y_np = np.array([2.0, -2.0, 3.0, -0.75, 0.3, 1.5], np.float32)
    x, tx = lapis.tensor(x_np, device=device), torch.tensor(x_np)
    for got, want in ((x % 2.5, tx % 2.5), (-7 % x, -7 % tx), (x // -0.75, tx // -0.75), (7.5 // x, 7.5 // tx),
                      (lapis.fmod(x, -2.0), torch.fmod(tx, -2.0)), (x.div(0.0, rounding_mode="floor"),
                                                                     tx.div(0.0, rounding_mode="floor"))):
        _bitwise_equal(got.cpu().numpy(), want.numpy())
    ours, theirs = x.clone(), tx.clone()
    ours %= -1.5
    ours //= 0.5
    ours.div_(0.75, rounding_mode="trunc")
    theirs %= -1.5
    theirs //= 0.5
    theirs.div_(0.75, rounding_mode="trunc")
    _bitwise_equal(ours.cpu().numpy(), theirs.numpy())
    for name in ("remainder", "fmod", "div_trunc", "div_floor"):
        a, b = (lapis.tensor(v, device=device, requires_grad=True) for v in (x_np, y_np))
        ta, tb = (torch.tensor(v, requires_grad=True) for v in (x_np, y_np))
        got = getattr(lapis, name)(a, b) if name in OPS else lapis.div(a, b, rounding_mode=name[4:])
        want = DIVISIONS[name.removeprefix("div_")](ta, tb)
        assert got.grad_fn.name() == want.grad_fn.name()
        weight = np.arange(1.0, 7.0, dtype=np.float32)
        (got * lapis.tensor(weight, device=device)).sum().backward()
        (want * torch.tensor(weight)).sum().backward()
        _check(a.grad, ta.grad)
        _check(b.grad, tb.grad)
    floored = lapis.tensor(x_np, device=device, requires_grad=True) // 2
    assert repr(floored).endswith("grad_fn=<NotImplemented>)")
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        floored.sum().backward()


def test_rounding_modes_and_dtypes_refused_as_torch():
    x = lapis.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="rounding_mode to be one of None, 'trunc', or 'floor' but found 'round'"):
        lapis.div(x, 2, rounding_mode="round")
    flags = lapis.tensor([True, False])
    for divide in (lambda: flags % flags, lambda: lapis.fmod(flags, flags), lambda: flags // flags,
                   lambda: flags.div(flags, rounding_mode="trunc")):
        with pytest.raises(NotImplementedError, match="not implemented for 'bool'"):
            divide()
    assert lapis.div(x, 4).tolist() == [0.25, 0.5] and lapis.div(x, 4, rounding_mode=None).tolist() == [0.25, 0.5]
    with pytest.raises(NotImplementedError, match="float16 tensors runs on the cpu device only"):
        lapis.tensor([1.0], dtype=lapis.float16, device="cuda") % 0.5
