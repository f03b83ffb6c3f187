"""Layer 4, DNN: dropout (cudnnDropoutForward/Backward). The mask comes from a counter-based hash of
(seed, element index): the same seed gives the same mask on any device and launch shape."""

import numpy as np

from lapis import cuda, trace
from lapis.libs.dnn.descriptors import DnnError
from lapis.libs.dnn.handle import THREADS, Handle, _blocks, _flat


@cuda.jit(device=True)
def uniform(seed, i):
    # A counter-based generator: a few rounds of an integer hash (splitmix-like) of (seed, i), in [0, 1).
    z = (seed * 2654435761 + i * 40503 + 12345) % 2147483648
    for _ in range(3):
        z = (z * 1103515245 + 12345) % 2147483648
        z = (z ^ (z // 65536)) % 2147483648
    return z / 2147483648.0


def dropout_kernel(n, p, seed, backward, x, mask, y):
    i = cuda.grid(1)
    while i < n:
        if not backward:
            mask[i] = uniform(seed, i) >= p
        y[i] = x[i] / (1.0 - p) if mask[i] else x[i] * 0
        i += cuda.gridsize(1)


def dropout_forward(handle: Handle, p: float, seed: int, x, y, mask) -> None:
    """y = x * mask / (1 - p), mask drawn with probability 1 - p from (seed, index) (cudnnDropoutForward);
    mask is a bool device array kept for the backward pass."""
    if not 0 <= p < 1:
        raise DnnError(f"dropout probability must be in [0, 1), not {p}")
    fx, fy, fm = _flat(x, "x"), _flat(y, "y", x.size), _flat(mask, "mask", x.size, np.bool_)
    with trace.span(4, "dropout_forward", p=p, seed=seed, elements=x.size):
        if x.size:
            handle.kernel(dropout_kernel)[_blocks(x.size), THREADS, handle.stream](
                np.int64(x.size), np.float32(p), np.int64(seed), False, fx, fm, fy)


def dropout_backward(handle: Handle, p: float, dy, mask, dx) -> None:
    """dx = dy * mask / (1 - p) (cudnnDropoutBackward)."""
    fdy, fdx, fm = _flat(dy, "dy"), _flat(dx, "dx", dy.size), _flat(mask, "mask", dy.size, np.bool_)
    with trace.span(4, "dropout_backward", p=p, elements=dy.size):
        if dy.size:
            handle.kernel(dropout_kernel)[_blocks(dy.size), THREADS, handle.stream](
                np.int64(dy.size), np.float32(p), np.int64(0), True, fdy, fm, fdx)
