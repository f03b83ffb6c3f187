"""Layer 5: tensor dtypes (lapis.float32, ...) and PyTorch's rules for inferring them."""

import numpy as np


class dtype:  # noqa: N801 - the name torch users write
    def __init__(self, name: str, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_floating_point(self) -> bool:
        return self.np.kind == "f"

    def __repr__(self) -> str:
        return f"lapis.{self.name}"


float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
float16 = dtype("float16", np.float16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
bool_ = dtype("bool", np.bool_)
float, double, half, int, long = float32, float64, float16, int32, int64  # noqa: A001 - torch's aliases
_BY_NUMPY = {d.np: d for d in (float32, float64, float16, int32, int64, bool_)}


def from_numpy(np_dtype) -> dtype:
    try:
        return _BY_NUMPY[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(np_dtype)} has no lapis equivalent") from None
