"""lapis: the whole AI compute stack in Python, from a PyTorch-style framework down to a simulated GPU.

This top-level package is Layer 5, the framework (PyTorch's place):

    import lapis
    device = lapis.device('cuda')
    A = lapis.randn(1024, 1024, device=device)
    B = lapis.randn(1024, 1024, device=device)
    C = lapis.matmul(A, B)           # -> lapis.libs.blas -> lapis.cuda -> lapis.runtime
                                     #    -> lapis.driver -> lapis.hardware, and back

The layers below are packages of their own: `lapis.libs` (4), `lapis.cuda` / `lapis.hip` (3),
`lapis.runtime` (2), `lapis.driver` (1), `lapis.hardware` (0). `lapis.trace` records what
every layer did: `with lapis.trace() as t: ...`.
"""

from lapis import trace
from lapis._device import device
from lapis._dtype import (  # noqa: A004 - torch.float is float32 and torch.int is int32, as here
    bool_,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    half,
    int,
    int32,
    int64,
    long,
)
from lapis._tensor import Size, Tensor, from_numpy, full, manual_seed, matmul, ones, rand, randn, tensor, zeros

bool = bool_  # noqa: A001 - torch.bool
__version__ = "0.1.0"

__all__ = ["Size", "Tensor", "bool", "device", "double", "dtype", "float", "float16", "float32", "float64",
           "from_numpy", "full", "half", "int", "int32", "int64", "long", "manual_seed", "matmul", "ones", "rand",
           "randn", "tensor", "trace", "zeros"]
