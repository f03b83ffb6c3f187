"""Layer 5: elementwise ops, one table.

Each elementwise op is one row of `OPS` (tinygrad's habit): its reference on the cpu device (numpy), its device
function (the kernel language, applied per element by `lapis.libs.kernels` on a GPU), its gradient (one function
per input), its dtype rule, and what backward needs of the call: its inputs, its output, or nothing. Everything else is
derived from the table: the autograd Function (`ExpBackward0` ...), `lapis.<op>`, `Tensor.<op>`, the in-place
`Tensor.<op>_`, Python's operators, and the tests, which walk the table. Adding an op is one row.

Operands broadcast (numpy's rule) and compute in torch's promoted dtype (operands are cast first, so an int32
tensor times 2.5 computes in float32); a Python number travels to a GPU kernel as an argument. Gradients of
broadcast operands come back in the output's shape; the autograd engine sums them to the operand's, as torch's
does. Also here: casts and moves (`to`), `where`, `clamp`, and the logical operators of bool tensors.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lapis import trace
from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function, is_grad_enabled
from lapis.framework.device import device
from lapis.framework.ops import inplace
from lapis.framework.ops.common import broadcast_shapes, check_devices, new, operand, shape_of
from lapis.framework.ops.scalar_functions import (
    absolute,
    add,
    ceil,
    cos,
    div,
    eq,
    erf,
    exp,
    expm1,
    float_floor_divide32,
    float_floor_divide64,
    float_fmod,
    float_remainder,
    float_trunc_divide32,
    float_trunc_divide64,
    floor,
    floor_divide,
    ge,
    gt,
    integer_fmod,
    integer_trunc_divide,
    isfinite,
    isinf,
    isnan,
    le,
    log,
    log1p,
    lt,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    power,
    relu,
    remainder,
    round_half_even,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    sub,
    tanh,
    trunc,
)
from lapis.framework.tensor_base import Storage, TensorBase, contiguous_strides


# -- dtype rules: (operands) -> (the dtype the op computes in, the dtype of its result) ------------------------
def promote(operands) -> tuple:
    dt = _dtype.result_type(*operands)
    return dt, dt


def to_float(operands) -> tuple:
    """Integer and bool operands compute in the default float dtype (torch's exp, sqrt, true division)."""
    dt = _dtype.result_type(*operands)
    dt = dt if dt.is_floating_point else _dtype.get_default_dtype()
    return dt, dt


def to_bool(operands) -> tuple:
    """Comparisons: compare in the promoted dtype, answer in bool."""
    return _dtype.result_type(*operands), _dtype.bool_


NOT_IMPLEMENTED = "torch::autograd::NotImplemented"        # torch's node of an op it has no derivative for


@dataclass(frozen=True)
class Op:
    """One elementwise op. `cpu` takes and returns numpy arrays; `gpu` is a device function of scalars; `grads`
    holds, per input, g -> that input's gradient, called as f(g, *inputs, out); None: not differentiable. `saves`
    says what forward keeps for them: "inputs" (numbers stay numbers; out is None), "output" (the inputs are None)
    or "nothing".
    `operators` are the Python operators it answers (a reflected one, __radd__, swaps its operands); `alpha`:
    it takes torch's `alpha` scale of its second operand; `node`: torch's name for its backward node where it is
    not the op's name capitalized (Log1PBackward0); `numbered`: torch numbers that name by which operands are
    tensors (PowBackward0 for tensor ** number, 1 for tensor ** tensor, 2 for number ** tensor); `check`: called
    with the operands and the dtype the op computes in before it runs, to refuse what torch refuses;
    `gpu_float`: the device functions of floating-point operands by dtype name, where they are not `gpu` (which
    is then the integers' and bool's): a float dtype it lacks runs on the cpu device only."""
    name: str
    cpu: Callable
    gpu: Callable
    grads: tuple | None
    rule: Callable = promote
    saves: str = "inputs"
    operators: tuple = ()
    alpha: bool = False
    node: str = ""
    numbered: bool = False
    check: Callable | None = None
    gpu_float: dict | None = None

    @property
    def arity(self) -> int:
        return self.gpu.arity

    def device_function(self, dt: np.dtype) -> Callable:
        """The device function a GPU applies to operands of numpy dtype dt."""
        dt = np.dtype(dt)
        if self.gpu_float is None or dt.kind in "biu":
            return self.gpu
        if dt.name not in self.gpu_float:
            raise NotImplementedError(f"{self.name} of {dt.name} tensors runs on the cpu device only for now")
        return self.gpu_float[dt.name]

    def node_name(self, operands) -> str:
        """torch's name of the backward node of a call (ExpBackward0)."""
        if self.node == NOT_IMPLEMENTED:
            return self.node
        number = 0
        if self.numbered:
            number = 1 if all(isinstance(x, TensorBase) for x in operands) else \
                2 if not isinstance(operands[0], TensorBase) else 0
        return f"{self.node or self.name.capitalize()}Backward{number}"


def _log(x):
    return x.log() if isinstance(x, TensorBase) else math.log(x)


def _share(a, b, g, wins):
    """The part of g an operand of maximum/minimum gets: all where it wins, half at a tie (as torch splits it),
    nothing elsewhere (selected, not multiplied by 0, so an infinite g gives 0 there, not NaN)."""
    return Where.apply(wins(a, b), g, Where.apply(a == b, g * 0.5, 0.0))


def _sign(x, g):
    return (x > 0).to(g.dtype) - (x < 0).to(g.dtype)


def _divisor_check(operands, dt) -> None:
    """Floor and truncating division, remainder and fmod as torch's: integers by zero raise (a GPU's answer would
    be unspecified; this waits for the divisor on a GPU); bool has none of them; floats divide by zero as IEEE 754
    says (inf and NaN)."""
    if dt is _dtype.bool_:
        raise NotImplementedError(f"floor and truncating division, remainder and fmod are not implemented for "
                                  f"'{dt.name}'")
    if dt.is_floating_point:
        return
    divisor = operands[1]
    zero = (divisor == 0).sum().item() > 0 if isinstance(divisor, TensorBase) else divisor == 0
    if zero:
        raise RuntimeError("ZeroDivisionError")


def _not_implemented(name: str) -> tuple:
    """The gradients of a binary op torch records a node for but has no derivative of (floor_divide): backward
    raises torch's error."""
    def grad(g, *_):
        raise RuntimeError(f"derivative for aten::{name} is not implemented")
    return grad, grad


def _float_remainder(a, b):
    """torch.remainder of floats: fmod (exact), plus b where that is nonzero and not of b's sign (numpy's remainder
    differs in a zero's sign: remainder(-4, 2) is -0 in torch, 0 in numpy)."""
    mod = np.fmod(a, b)
    return np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)


def _numpy_remainder(a, b):
    return np.remainder(a, b) if a.dtype.kind in "biu" else _float_remainder(a, b)


def _numpy_trunc_divide(a, b):
    """Division toward zero: C's for integers, trunc(a / b) for floats (torch's div_trunc)."""
    if a.dtype.kind not in "biu":
        return np.trunc(a / b)
    q = a // b
    return q + ((q * b != a) & ((a < 0) != (b < 0))).astype(q.dtype)


def _floats(f32, f64) -> dict:
    return {"float32": f32, "float64": f64}


def _zero(g, *_):
    """The gradient of a step function (floor, sign ...): zero everywhere, as torch's (an infinite g gives 0)."""
    return g.new_zeros(g.shape)


def _integral(fn: Callable) -> Callable:
    """numpy's rounding fn, leaving integers as they are (numpy's floor of an int array would be float)."""
    return lambda v: v.copy() if v.dtype.kind in "iub" else fn(v)


def _numpy_sign(v):
    with np.errstate(invalid="ignore"):
        return np.where(v != v, 0, np.sign(v)).astype(v.dtype)        # NaN's sign is 0, as torch's


def _numpy_pow(a, b):
    # x ** 2 exactly (x * x), as torch computes it; C's pow otherwise
    return np.where(b == 2, a * a, np.power(a, b))


# The table. Unary gradients are f(g, x, y) with x the input and y the output; binary ones f(g, a, b, y).
OPS = {op.name: op for op in (
    Op("neg", np.negative, neg, (lambda g, x, y: -g,), saves="nothing", operators=("__neg__",)),
    Op("abs", np.abs, absolute, (lambda g, x, y: g * _sign(x, g),), operators=("__abs__",)),
    Op("exp", np.exp, exp, (lambda g, x, y: g * y,), to_float, saves="output"),
    Op("log", np.log, log, (lambda g, x, y: g / x,), to_float),
    Op("sqrt", np.sqrt, sqrt, (lambda g, x, y: g / (2 * y),), to_float, saves="output"),
    Op("rsqrt", lambda v: 1 / np.sqrt(v), rsqrt, (lambda g, x, y: g * -0.5 * y * y * y,), to_float,
       saves="output"),
    Op("tanh", np.tanh, tanh, (lambda g, x, y: g * (1 - y * y),), to_float, saves="output"),
    Op("sigmoid", lambda v: 1 / (1 + np.exp(-v)), sigmoid, (lambda g, x, y: g * y * (1 - y),), to_float,
       saves="output"),
    Op("sin", np.sin, sin, (lambda g, x, y: g * x.cos(),), to_float),
    Op("cos", np.cos, cos, (lambda g, x, y: -g * x.sin(),), to_float),
    Op("relu", lambda v: np.where(v < 0, 0, v), relu, (lambda g, x, y: Where.apply(x > 0, g, 0.0),)),
    Op("erf", backend.erf, erf, (lambda g, x, y: g * (2 / math.sqrt(math.pi)) * (-(x * x)).exp(),), to_float),
    Op("log1p", np.log1p, log1p, (lambda g, x, y: g / (1 + x),), to_float, node="Log1P"),
    Op("expm1", np.expm1, expm1, (lambda g, x, y: g * (y + 1),), to_float, saves="output"),
    Op("square", lambda v: v * v, square, (lambda g, x, y: g * 2 * x,), node="Pow"),
    Op("floor", _integral(np.floor), floor, (_zero,), saves="nothing"),
    Op("ceil", _integral(np.ceil), ceil, (_zero,), saves="nothing"),
    Op("trunc", _integral(np.trunc), trunc, (_zero,), saves="nothing"),
    Op("round", np.round, round_half_even, (_zero,), saves="nothing"),
    Op("sign", _numpy_sign, sign, (_zero,), saves="nothing"),
    Op("isnan", np.isnan, isnan, None, to_bool),
    Op("isinf", np.isinf, isinf, None, to_bool),
    Op("isfinite", np.isfinite, isfinite, None, to_bool),
    Op("add", np.add, add, (lambda g, a, b, y: g, lambda g, a, b, y: g), saves="nothing",
       operators=("__add__", "__radd__"), alpha=True),
    Op("sub", np.subtract, sub, (lambda g, a, b, y: g, lambda g, a, b, y: -g), saves="nothing",
       operators=("__sub__", "__rsub__"), alpha=True),
    Op("mul", np.multiply, mul, (lambda g, a, b, y: g * b, lambda g, a, b, y: g * a),
       operators=("__mul__", "__rmul__")),
    Op("div", np.divide, div, (lambda g, a, b, y: g / b, lambda g, a, b, y: -g * a / (b * b)), to_float,
       operators=("__truediv__", "__rtruediv__")),
    Op("remainder", _numpy_remainder, remainder,
       (lambda g, a, b, y: g, lambda g, a, b, y: -g * RoundedDiv.apply(a, b, "floor")),
       operators=("__mod__", "__rmod__"), numbered=True, check=_divisor_check,
       gpu_float=_floats(float_remainder, float_remainder)),
    Op("fmod", np.fmod, integer_fmod, (lambda g, a, b, y: g, lambda g, a, b, y: -g * RoundedDiv.apply(a, b, "trunc")),
       numbered=True, check=_divisor_check, gpu_float=_floats(float_fmod, float_fmod)),
    Op("floor_divide", np.floor_divide, floor_divide, _not_implemented("floor_divide"), saves="nothing",
       operators=("__floordiv__", "__rfloordiv__"), node=NOT_IMPLEMENTED, check=_divisor_check,
       gpu_float=_floats(float_floor_divide32, float_floor_divide64)),
    Op("pow", _numpy_pow, power, (lambda g, a, b, y: g * b * a ** (b - 1), lambda g, a, b, y: g * a ** b * _log(a)),
       operators=("__pow__", "__rpow__"), numbered=True),
    Op("maximum", np.maximum, maximum, (lambda g, a, b, y: _share(a, b, g, lambda p, q: p > q),
                                        lambda g, a, b, y: _share(b, a, g, lambda p, q: p > q))),
    Op("minimum", np.minimum, minimum, (lambda g, a, b, y: _share(a, b, g, lambda p, q: p < q),
                                        lambda g, a, b, y: _share(b, a, g, lambda p, q: p < q))),
    Op("eq", np.equal, eq, None, to_bool, operators=("__eq__",)),
    Op("ne", np.not_equal, ne, None, to_bool, operators=("__ne__",)),
    Op("lt", np.less, lt, None, to_bool, operators=("__lt__",)),
    Op("le", np.less_equal, le, None, to_bool, operators=("__le__",)),
    Op("gt", np.greater, gt, None, to_bool, operators=("__gt__",)),
    Op("ge", np.greater_equal, ge, None, to_bool, operators=("__ge__",)),
)}


# torch.div(a, b, rounding_mode="trunc"): not a row of its own (torch has no such function), the Function below's
TRUNC_DIVIDE = Op("div_trunc", _numpy_trunc_divide, integer_trunc_divide, None, check=_divisor_check,
                  gpu_float=_floats(float_trunc_divide32, float_trunc_divide64))


def compute(op: Op, *operands, out=None) -> TensorBase:
    """op over broadcast operands, without autograd: the forward every row shares (and clamp's kernels)."""
    dev = check_devices(*operands)
    dt, out_dtype = op.rule(operands)
    if op.check is not None:
        op.check(operands, dt)
    if out is None:
        out = new(broadcast_shapes(*(shape_of(x) for x in operands)), out_dtype, dev)
    backend.pointwise(op, [operand(x, dt, dev) for x in operands], out._data)
    return out


class Pointwise(Function):
    """The autograd Function of one row (`op`): each row gets a subclass of its own name (Exp, Add, ...)."""

    op: Op

    @classmethod
    def forward(cls, ctx, *operands):
        out = compute(cls.op, *operands)
        if True in ctx.needs_input_grad:                  # only a recorded node has a name
            ctx.node_name = cls.op.node_name(operands)
        if cls.op.saves == "output":
            ctx.save_for_backward(out)
        elif cls.op.saves == "inputs":
            ctx.save_for_backward(*(x if isinstance(x, TensorBase) else None for x in operands))
            ctx.numbers = tuple(None if isinstance(x, TensorBase) else x for x in operands)
        return out

    @classmethod
    def backward(cls, ctx, g):
        saved = ctx.saved_tensors
        inputs, out = (None,) * len(cls.op.grads), None
        if cls.op.saves == "output":
            out = saved[0]
        elif cls.op.saves == "inputs":
            inputs = tuple(n if t is None else t for t, n in zip(saved, ctx.numbers, strict=True))
        return tuple(grad(g, *inputs, out) if needed else None
                     for grad, needed in zip(cls.op.grads, ctx.needs_input_grad, strict=True))


class RoundedDiv(Function):
    """torch.div with a rounding_mode: "floor" (floor_divide's kernels) or "trunc" (toward zero); the gradient is
    zero, as torch's (DivBackward2), where floor_divide itself has none."""
    node_name = "DivBackward2"

    @staticmethod
    def forward(ctx, a, b, rounding_mode: str):
        return compute(OPS["floor_divide"] if rounding_mode == "floor" else TRUNC_DIVIDE, a, b)

    @staticmethod
    def backward(ctx, g):
        return tuple(g.new_zeros(g.shape) if needed else None for needed in ctx.needs_input_grad[:2]) + (None,)


FUNCTIONS = {name: type(name.capitalize(), (Pointwise,), {"op": op, "__doc__": f"The {name} row's Function."})
             for name, op in OPS.items()}


def _cpu_array(x, dt: _dtype.dtype) -> np.ndarray:
    """An operand of the fast path in dtype dt: a cpu tensor's array (a cast copy if its dtype differs), or a
    number's 0-d array."""
    if isinstance(x, TensorBase):
        return x._data if x.dtype is dt else x._data.astype(dt.np)
    return np.array(x, dt.np)


def _plain_cpu(op: Op, a, b=None) -> TensorBase | None:
    """The call programs make most: cpu tensors (or a tensor and a number) with no gradient to record and no trace
    open, done without the general path (a Function, result tensors made ahead): numpy on their arrays in the
    dtype the op computes in, broadcasting as torch does. `b` is None for a unary op. None for any other call,
    and for anything numpy refuses or answers in another dtype, which takes the general path; the result is the
    same either way."""
    tensor = a if isinstance(a, TensorBase) else b
    if op.check or not isinstance(tensor, TensorBase) or tensor.device.type != "cpu" or trace.enabled():
        return None
    other = b if tensor is a and isinstance(b, TensorBase) else None
    if other is not None and other.device.type != "cpu":
        return None
    if (tensor.requires_grad or other is not None and other.requires_grad) and is_grad_enabled():
        return None
    unary = b is None and op.arity == 1
    dt, out_dt = op.rule((a,) if unary else (a, b))
    try:
        x = _cpu_array(a, dt)
        y = x if unary else _cpu_array(b, dt)
        with np.errstate(all="ignore"):
            value = op.cpu(x) if unary else op.cpu(x, y)
    except (TypeError, ValueError, OverflowError):   # numpy refuses (bool - bool): the general path says it torch's way
        return None
    if isinstance(value, np.generic):                # 0-d operands: numpy answers a scalar
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype != out_dt.np or value is x or value is y:
        return None
    return TensorBase._from_numpy(value, tensor.device)


def _public(op: Op) -> Callable:
    """lapis.<op>: the row's Function applied (with torch's alpha for add and sub)."""
    function = FUNCTIONS[op.name]
    if op.arity == 1:
        def unary(x):
            if not isinstance(x, TensorBase):
                raise TypeError(f"{op.name}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
            out = _plain_cpu(op, x)
            return function.apply(x) if out is None else out
        unary.__name__ = unary.__qualname__ = op.name
        return unary

    def binary(a, b, *, alpha=1):
        if alpha == 1 and (out := _plain_cpu(op, a, b)) is not None:
            return out
        if not isinstance(a, TensorBase) and not isinstance(b, TensorBase):
            raise TypeError(f"{op.name}(): expected a Tensor operand, got {type(a).__name__} and "
                            f"{type(b).__name__}")
        if alpha != 1:
            if not op.alpha:
                raise TypeError(f"{op.name}() got an unexpected keyword argument 'alpha'")
            b = FUNCTIONS["mul"].apply(b, alpha) if isinstance(b, TensorBase) else b * alpha
        return function.apply(a, b)
    binary.__name__ = binary.__qualname__ = op.name
    return binary


PUBLIC = {name: _public(op) for name, op in OPS.items()}


def _rounding(true_divide: Callable) -> Callable:
    """lapis.div with torch's rounding_mode: None (true division), "trunc" or "floor"."""
    def div(a, b, *, rounding_mode=None):
        if rounding_mode is None:
            return true_divide(a, b)
        if rounding_mode not in ("trunc", "floor"):
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                               f"'{rounding_mode}'")
        if not isinstance(a, TensorBase) and not isinstance(b, TensorBase):
            raise TypeError(f"div(): expected a Tensor operand, got {type(a).__name__} and {type(b).__name__}")
        return RoundedDiv.apply(a, b, rounding_mode)
    div.__name__ = div.__qualname__ = "div"
    return div


PUBLIC["div"] = _rounding(PUBLIC["div"])


AUGMENTED = {"__add__": "__iadd__", "__sub__": "__isub__", "__mul__": "__imul__", "__truediv__": "__itruediv__",
             "__pow__": "__ipow__", "__mod__": "__imod__", "__floordiv__": "__ifloordiv__"}   # x += y: in place


def _methods() -> dict:
    """Tensor's methods from the table: x.exp(), x.exp_() in place, and the Python operators (x += y in place)."""
    methods = {}
    for name, op in OPS.items():
        fn = PUBLIC[name]
        methods[name] = fn
        methods[name + "_"] = inplace.op(fn, op)
        for dunder in op.operators:
            methods[dunder] = (lambda f: lambda a, b: f(b, a))(fn) if dunder.startswith("__r") else fn
            if dunder in AUGMENTED:
                methods[AUGMENTED[dunder]] = inplace.augmented(methods[name + "_"], fn, AUGMENTED[dunder])
    true_div_, rounded_div_ = methods["div_"], inplace.op(PUBLIC["div"], OPS["floor_divide"])

    def div_(x, other, *, rounding_mode=None):
        """x.div_(y, rounding_mode=...): a rounded quotient keeps an integer x's dtype, as floor_divide_'s."""
        if rounding_mode is None:
            return true_div_(x, other)
        return rounded_div_(x, other, rounding_mode=rounding_mode)
    div_.__qualname__ = "div_"
    methods["div_"] = div_
    return methods


ElementwiseMethods = type("ElementwiseMethods", (), {"__doc__": "Tensor's methods made from OPS, one per row.",
                                                     **_methods()})


# -- casts and moves --------------------------------------------------------------------------------------
class ToCopy(Function):
    """x in another dtype or on another device (or a copy): `to`, `cpu`, `cuda`, `float`, `clone`."""
    node_name = "ToCopyBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dev: device, dt: _dtype.dtype, copy: bool):
        ctx.src = (x.device, x.dtype)
        if dev == x.device and dt is x.dtype and not copy:
            return x.detach()
        if dev == x.device and dt is x.dtype:
            ctx.node_name = "CloneBackward0"
        with trace.lazy_span(5, "to", lambda: dict(src=str(x.device), dst=str(dev), dtype=str(dt),
                                                   shape=list(x.shape))):
            if dev == x.device:                                    # a cast (or copy) where the data is
                out = new(x.shape, dt, dev)
                backend.copy(x._data, out._data)
                return out
            # pinned memory is uploaded from where it lies (the copy engine reads it directly, with no staging)
            host = x._data if x.is_pinned() and x.is_contiguous() else x._host()
            return TensorBase._from_numpy(host.astype(dt.np) if host.dtype != dt.np else host, dev)

    @staticmethod
    def backward(ctx, g):
        dev, dt = ctx.src
        return g.to(dev, dt), None, None, None


class PinMemory(Function):
    """A copy of a cpu tensor in page-locked host memory (torch's pin_memory): a buffer from the runtime's host
    pool, mapped for the GPU `dev`, which the copy engine then reads and writes directly (no staging buffer). The
    gradient passes through unchanged."""
    node_name = "PinMemoryBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, dev: device):
        n = x.numel()
        flat = dev.api.current_context(dev.index).pinned_array(max(n, 1), x.dtype.np)
        out = TensorBase.made_class(Storage(flat), x.shape, contiguous_strides(tuple(x.shape)), 0, x.device)
        if n:
            out._data[...] = x._data
        return out

    @staticmethod
    def backward(ctx, g):
        return g, None


# -- selection and bounds ---------------------------------------------------------------------------------
class Where(Function):
    node_name = "WhereBackward0"

    @staticmethod
    def forward(ctx, cond: TensorBase, a, b):
        dev = check_devices(cond, a, b)
        dt = _dtype.result_type(a, b)
        out = new(broadcast_shapes(cond.shape, shape_of(a), shape_of(b)), dt, dev)
        backend.where(operand(cond, _dtype.bool_, dev), operand(a, dt, dev), operand(b, dt, dev), out._data)
        ctx.save_for_backward(cond)
        return out

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        return (None, Where.apply(cond, g, 0.0) if ctx.needs_input_grad[1] else None,
                Where.apply(cond, 0.0, g) if ctx.needs_input_grad[2] else None)


def where(cond, a, b) -> TensorBase:
    return Where.apply(cond, a, b)


class Clamp(Function):
    """clamp(x, lo, hi) with number bounds: a maximum and a minimum kernel; the gradient passes where
    lo <= x <= hi, bounds included, as torch's does."""
    node_name = "ClampBackward1"

    @staticmethod
    def forward(ctx, x: TensorBase, lo, hi):
        out = x
        if lo is not None:
            out = compute(OPS["maximum"], out, lo)
        if hi is not None:
            out = compute(OPS["minimum"], out, hi)
        ctx.bounds = lo, hi
        ctx.save_for_backward(x)
        return out if out is not x else out.clone()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        inside = (x >= lo) if lo is not None else None
        if hi is not None:
            inside = (x <= hi) if inside is None else Where.apply(inside, x <= hi, False)
        return Where.apply(inside, g, 0.0), None, None


def clamp(x, min=None, max=None):  # noqa: A002 - torch's argument names
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if not isinstance(min, TensorBase) and not isinstance(max, TensorBase):
        return Clamp.apply(x, min, max)
    out = x
    if min is not None:
        out = where(out < min, out * 0 + min, out)
    if max is not None:
        out = where(out > max, out * 0 + max, out)
    return out


def clamp_(x, min=None, max=None):  # noqa: A002 - torch's argument names
    return inplace.write(x, clamp(x, min, max))


# -- logical operators ------------------------------------------------------------------------------------
def invert(x):
    """~x: logical not of a bool tensor, bitwise not (-x - 1) of an integer one."""
    if x.dtype == _dtype.bool_:
        return x == False  # noqa: E712 - an elementwise comparison, not a truth test
    if x.dtype.is_floating_point:
        raise TypeError(f"bitwise_not is only implemented on integer and Boolean-type tensors (got {x.dtype})")
    return -x - 1


def logical_not(x):
    return x == 0


def _logical(name: str, combine):
    # &, |, ^ of bool tensors (torch also has the bitwise integer forms; lapis has not)
    def op(a, b):
        operands = [t for t in (a, b) if isinstance(t, TensorBase)]
        if any(t.dtype != _dtype.bool_ for t in operands) or not all(isinstance(t, TensorBase | bool) for t in (a, b)):
            raise TypeError(f"{name} is implemented here for bool tensors (and Python bools) only")
        return combine(a, b) if isinstance(a, TensorBase) else combine(b, a)     # all three commute
    op.__name__ = name
    return op


bitwise_and = _logical("bitwise_and", lambda a, b: where(a, b, False))
bitwise_or = _logical("bitwise_or", lambda a, b: where(a, True, b))
bitwise_xor = _logical("bitwise_xor", lambda a, b: a != b)


def lerp(start: TensorBase, end, weight) -> TensorBase:
    """start + weight (end - start), computed as torch does: from the end for weights of 0.5 and up (end - (end -
    start)(1 - weight)), so a weight of 1 gives end exactly."""
    difference = end - start
    if isinstance(weight, TensorBase):
        return where(weight < 0.5, start + weight * difference, end - difference * (1 - weight))
    return start + weight * difference if weight < 0.5 else end - difference * (1 - weight)
