"""lapis: the whole AI compute stack in Python, from a PyTorch-style framework down to a simulated GPU.

This package's top level is the framework's public face (PyTorch's place); the framework itself, Layer 5, is
`lapis.framework`:

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

from lapis import accelerator, amp, autograd, backends, distributed, distributions, nn, optim, profiler, trace, utils
from lapis.backends import get_float32_matmul_precision, set_float32_matmul_precision
from lapis.framework.amp import autocast
from lapis.framework.autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from lapis.framework.creation import (
    BoolTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    arange,
    as_tensor,
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
    randperm,
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
    result_type,
    set_default_dtype,
)
from lapis.framework.generator import Generator, manual_seed
from lapis.framework.ops.common import broadcast_shapes
from lapis.framework.ops.elementwise import PUBLIC as _ELEMENTWISE
from lapis.framework.ops.elementwise import clamp, lerp
from lapis.framework.ops.elementwise import clamp as clip
from lapis.framework.ops.indexing import (
    flip,
    gather,
    index_add,
    index_select,
    masked_fill,
    nonzero,
    repeat_interleave,
    roll,
    scatter_add,
    tril,
    triu,
)
from lapis.framework.ops.indexing import where_or_nonzero as where
from lapis.framework.ops.linalg import bmm, einsum, matmul, mm, outer
from lapis.framework.ops.nn import log_softmax, softmax
from lapis.framework.ops.reductions import (  # noqa: A004 - torch's names
    all,
    allclose,
    any,
    argmax,
    argmin,
    cumsum,
    equal,
    isclose,
    logsumexp,
    max,
    mean,
    min,
    norm,
    prod,
    std,
    sum,
    var,
)
from lapis.framework.ops.sorting import argsort, bincount, searchsorted, sort, topk, unique
from lapis.framework.ops.views import (
    cat,
    chunk,
    diagonal,
    flatten,
    meshgrid,
    split,
    squeeze,
    stack,
    unbind,
    unsqueeze,
)
from lapis.framework.ops.views import expand as broadcast_to
from lapis.framework.serialization import load, save
from lapis.framework.tensor import (
    Tensor,
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from lapis.framework.tensor_base import Size

bool = bool_  # noqa: A001 - torch.bool


def compile(model=None, **options):  # noqa: A001 - torch.compile
    """torch.compile's place: returns the model or function as it is (also as @compile(mode=...)); lapis compiles
    nothing more yet: its kernels are compiled when first launched."""
    return model if model is not None else (lambda m: m)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(x: Tensor) -> int:
    return x.numel()

__version__ = "0.1.0"

# lapis.exp, lapis.add, lapis.eq, ...: one function per row of the elementwise op table
globals().update(_ELEMENTWISE)

__all__ = [
    "Size", "Tensor", "arange", "argmax", "argmin", "as_tensor", "autograd", "bfloat16", "bmm", "bool",
    "broadcast_shapes", "cat", "chunk", "clamp", "device", "double", "dtype", "empty", "empty_like", "enable_grad",
    "eye", "float", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "full_like", "gather",
    "get_default_dtype", "half", "index_select", "int", "int32", "int64", "is_grad_enabled", "linspace", "load",
    "log_softmax", "logsumexp", "long", "manual_seed", "masked_fill", "matmul", "max", "mean", "min", "mm",
    "multinomial", "nn", "no_grad", "ones", "ones_like", "optim", "prod", "profiler", "promote_types", "rand",
    "rand_like", "randint", "randn", "randn_like", "result_type", "save", "scatter_add", "set_default_dtype",
    "softmax", "split", "stack", "std", "sum", "tensor", "trace", "tril", "triu", "utils", "var", "where", "zeros",
    "zeros_like"]
__all__ += list(_ELEMENTWISE)
__all__ += ["amp", "autocast", "distributed", "distributions", "lerp", "meshgrid", "outer", "repeat_interleave",
            "bincount", "searchsorted", "unique"]
__all__ += ["all", "allclose", "any", "broadcast_to", "clip", "equal", "flatten", "flip", "inference_mode", "is_tensor",
            "isclose", "cumsum", "norm", "numel", "roll", "set_grad_enabled", "squeeze", "unbind", "unsqueeze",
            "compile", "nonzero", "randperm", "Generator", "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor",
            "IntTensor", "BoolTensor", "argsort", "sort", "topk", "einsum", "backends",
            "get_float32_matmul_precision", "set_float32_matmul_precision"]
__all__ += ["accelerator", "index_add", "memory_format", "preserve_format", "contiguous_format", "channels_last",
            "channels_last_3d", "diagonal"]
