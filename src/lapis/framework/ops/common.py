"""Layer 5: what every op family needs: devices agreeing, torch's broadcasting, operands in a computation dtype,
and dimension arguments."""

import builtins

import numpy as np

from lapis.framework import dtype as _dtype
from lapis.framework.device import device
from lapis.framework.tensor_base import TensorBase, wrap_dim


def check_devices(*tensors) -> device:
    """The one device the tensors among the arguments are on (a 0-d cpu tensor may join any device, as in torch)."""
    devs = []
    for t in tensors:
        if isinstance(t, TensorBase) and (t.ndim or t.device.type != "cpu") and t.device not in devs:
            devs.append(t.device)
    if len(devs) > 1:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{devs[0]} and {devs[1]}!")
    if devs:
        return devs[0]
    return next((t.device for t in tensors if isinstance(t, TensorBase)), device("cpu"))


def broadcast_shapes(*shapes) -> tuple:
    """torch.broadcast_shapes: numpy's rule, with torch's error."""
    if shapes and all(s == shapes[0] for s in shapes):
        return tuple(shapes[0])
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s):
            k = ndim - len(s) + i
            if n != 1 and out[k] not in (1, n):
                raise RuntimeError(f"The size of tensor a ({out[k]}) must match the size of tensor b ({n}) at "
                                   f"non-singleton dimension {k}")
            if n != 1:
                out[k] = n
    return tuple(out)


def shape_of(x) -> tuple:
    """A tensor's shape; a number's, ()."""
    return tuple(x.shape) if isinstance(x, TensorBase) else ()


def operand(x, dt: _dtype.dtype, dev: device):
    """A backend array of x in dtype dt on dev: a cast copy when the dtype differs, a 0-d array for a number."""
    if isinstance(x, TensorBase):
        if x.device != dev:                # a 0-d cpu tensor meets a GPU tensor: move it, as torch does
            x = x.to(dev)
        return x._data if x.dtype is dt else x.to(dt)._data
    value = np.array(x, dt.np)
    return value if dev.type == "cpu" else value[()]          # a GPU kernel takes a number as an argument


def new(shape, dt: _dtype.dtype, dev: device) -> TensorBase:
    """An uninitialised result tensor."""
    return TensorBase._empty(tuple(shape), dt, dev)


def dims(dim, ndim: int) -> list:
    """A dim argument (None for all, an int or a sequence) as sorted non-negative dimensions."""
    if dim is None:
        return list(range(ndim))
    chosen = [dim] if isinstance(dim, builtins.int) else list(dim)
    return sorted({wrap_dim(d, ndim) for d in chosen})
