"""Layer 5: tensor dtypes (lapis.float32, ...) and PyTorch's rules for inferring and promoting them."""

import builtins

import ml_dtypes
import numpy as np


class dtype:  # noqa: N801 - the name torch users write
    def __init__(self, name: str, np_dtype, category: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.category = category           # bool 0 < integer 1 < floating 2, torch's promotion categories

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    def __repr__(self) -> str:
        return f"lapis.{self.name}"

    # One object per dtype, as torch's: copies and pickles of tensors keep comparing with `is`.
    def __copy__(self) -> "dtype":
        return self

    def __deepcopy__(self, memo) -> "dtype":
        return self

    def __reduce__(self):
        return from_numpy, (self.np,)


float32 = dtype("float32", np.float32, 2)
float64 = dtype("float64", np.float64, 2)
float16 = dtype("float16", np.float16, 2)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, 2)
int32 = dtype("int32", np.int32, 1)
int64 = dtype("int64", np.int64, 1)
bool_ = dtype("bool", np.bool_, 0)
float, double, half, int, long = float32, float64, float16, int32, int64  # noqa: A001 - torch's aliases
_BY_NUMPY = {d.np: d for d in (float32, float64, float16, bfloat16, int32, int64, bool_)}
_default = [float32]


def from_numpy(np_dtype) -> dtype:
    try:
        return _BY_NUMPY[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(np_dtype)} has no lapis equivalent") from None


def get_default_dtype() -> dtype:
    return _default[0]


def set_default_dtype(d: dtype) -> None:
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, not {d}")
    _default[0] = d


def promote_types(a: dtype, b: dtype) -> dtype:
    """torch.promote_types: the higher category wins; within one, the wider; float16 with bfloat16 is float32."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.itemsize >= b.itemsize else b


_BOOLS, _INTEGERS, _FLOATS = (builtins.bool, np.bool_), (builtins.int, np.integer), (builtins.float, np.floating)


def scalar_dtype(value) -> dtype:
    """The dtype a Python number takes when it is an operand (a 'wrapped number')."""
    if isinstance(value, _BOOLS):
        return bool_
    if isinstance(value, _INTEGERS):
        return int64
    if isinstance(value, _FLOATS):
        return _default[0]
    raise TypeError(f"expected a number, got {type(value).__name__}")


def result_type(*operands) -> dtype:
    """torch.result_type(tensor, other), over any number of tensors and Python numbers: dimensioned tensors
    decide, then 0-d tensors, then numbers, a later group only when its category is higher (an int32 tensor
    + 2.5 is float32, a float16 tensor + 2.5 stays float16)."""
    first = getattr(operands[0], "dtype", None) if operands else None
    if isinstance(first, dtype):           # the common case, dimensioned tensors of one dtype, without a generator
        for x in operands:
            if getattr(x, "dtype", None) is not first or not getattr(x, "ndim", 0):
                break
        else:
            return first
    groups: list[list[dtype]] = [[], [], []]
    for x in operands:
        if hasattr(x, "dtype") and hasattr(x, "ndim"):
            groups[0 if x.ndim else 1].append(x.dtype)
        else:
            groups[2].append(scalar_dtype(x))
    result = None
    for dts in groups:
        if dts:
            d = dts[0]
            for other in dts[1:]:
                d = promote_types(d, other)
            if result is None or d.category > result.category:
                result = d
    return result
