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

from lapis import autograd, trace
from lapis.framework.autograd import enable_grad, no_grad
from lapis.framework.creation import (
    arange,
    as_tensor,
    cat,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    multinomial,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    stack,
    tensor,
    zeros,
    zeros_like,
)
from lapis.framework.device import device
from lapis.framework.dtype import (  # noqa: A004 - torch.float is float32 and torch.int is int32, as here
    bfloat16,
    bool_,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int32,
    int64,
    long,
    promote_types,
    set_default_dtype,
)
from lapis.framework.methods import (  # noqa: A004 - torch's names
    add,
    argmax,
    argmin,
    chunk,
    clamp,
    div,
    gather,
    index_select,
    log_softmax,
    logsumexp,
    masked_fill,
    max,
    maximum,
    mean,
    min,
    minimum,
    mul,
    pow,
    prod,
    scatter_add,
    softmax,
    split,
    std,
    sub,
    sum,
    tril,
    triu,
    var,
)
from lapis.framework.ops import bmm, broadcast_shapes, matmul, mm, where
from lapis.framework.serialization import load, save
from lapis.framework.tensor import Size, Tensor, manual_seed

bool = bool_  # noqa: A001 - torch.bool
__version__ = "0.1.0"


def _unary(op):
    def f(x):
        return getattr(x, op)()
    f.__name__ = op
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid, sin, cos, abs, neg, relu = (  # noqa: A001
    _unary(op) for op in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "abs", "neg", "relu"))


def result_type(a, b):
    from lapis.framework.dtype import result_type as _result_type
    return _result_type([a, b])


__all__ = ["Size", "Tensor", "abs", "add", "arange", "argmax", "argmin", "as_tensor", "autograd", "bfloat16", "bool",
           "bmm", "broadcast_shapes", "cat", "clamp", "cos", "device", "div", "double", "dtype", "empty", "empty_like",
           "enable_grad", "exp", "eye", "float", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full",
           "full_like",
           "get_default_dtype", "half", "int", "int32", "int64", "linspace", "log", "log_softmax", "logsumexp",
           "long", "manual_seed", "matmul", "max", "maximum", "mean", "min", "minimum", "mul", "neg", "no_grad",
           "mm", "multinomial", "ones", "ones_like", "pow", "prod", "promote_types", "rand", "rand_like", "randint",
           "randn", "randn_like", "relu", "result_type", "rsqrt", "set_default_dtype", "sigmoid", "sin", "softmax",
           "sqrt", "stack", "std", "sub", "sum", "tanh", "tensor", "trace", "var", "where", "zeros", "zeros_like",
           "nn", "optim", "profiler", "utils", "chunk", "gather", "index_select", "masked_fill", "scatter_add",
           "split", "tril",
           "triu", "save", "load"]

from lapis import nn, optim, profiler, utils  # noqa: E402 - these build on the names above, as torch.nn does on torch
