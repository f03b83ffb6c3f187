"""Layer 5: the device functions of the elementwise table (`elementwise.OPS`), one per row: what a GPU computes
for one element (or pair), in the kernel language; `lapis.libs.kernels` applies it over whole tensors. Each
computes in its operands' type (the table's dtype rule has cast them), and answers as torch does at the edges
(NaN, infinities, signed zeros), which `tests/test_op_table.py` checks row by row."""

import math

from lapis import cuda


@cuda.jit(device=True)
def neg(v):
    return -v


@cuda.jit(device=True)
def absolute(v):
    return abs(v)


@cuda.jit(device=True)
def exp(v):
    return math.exp(v)


@cuda.jit(device=True)
def log(v):
    return math.log(v)


@cuda.jit(device=True)
def sqrt(v):
    return math.sqrt(v)


@cuda.jit(device=True)
def rsqrt(v):
    return 1.0 / math.sqrt(v)


@cuda.jit(device=True)
def tanh(v):
    return math.tanh(v)


@cuda.jit(device=True)
def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


@cuda.jit(device=True)
def sin(v):
    return math.sin(v)


@cuda.jit(device=True)
def cos(v):
    return math.cos(v)


@cuda.jit(device=True)
def relu(v):
    return 0 if v < 0 else v           # NaN and -0 kept, as torch's; not v * 0 (NaN at -inf, -0 below 0)


@cuda.jit(device=True)
def erf(v):
    return math.erf(v)


@cuda.jit(device=True)
def add(x, y):
    return x + y


@cuda.jit(device=True)
def sub(x, y):
    return x - y


@cuda.jit(device=True)
def mul(x, y):
    return x * y


@cuda.jit(device=True)
def div(x, y):
    return x / y


@cuda.jit(device=True)
def remainder(x, y):
    return x % y                                # Python's: the divisor's sign, as torch.remainder


@cuda.jit(device=True)
def floor_divide(x, y):
    return x // y


@cuda.jit(device=True)
def power(x, y):
    r = x * x
    if y != 2:
        r = x ** y
    return r


@cuda.jit(device=True)
def maximum(x, y):
    return x if x > y or x != x else y          # a NaN in either wins, as in torch (max() would drop one)


@cuda.jit(device=True)
def minimum(x, y):
    return x if x < y or x != x else y


@cuda.jit(device=True)
def eq(x, y):
    return x == y


@cuda.jit(device=True)
def ne(x, y):
    return x != y


@cuda.jit(device=True)
def lt(x, y):
    return x < y


@cuda.jit(device=True)
def le(x, y):
    return x <= y


@cuda.jit(device=True)
def gt(x, y):
    return x > y


@cuda.jit(device=True)
def ge(x, y):
    return x >= y


@cuda.jit(device=True)
def floor(v):
    return math.floor(v)


@cuda.jit(device=True)
def ceil(v):
    return math.ceil(v)


@cuda.jit(device=True)
def trunc(v):
    return math.trunc(v)


@cuda.jit(device=True)
def round_half_even(v):
    """torch.round: to the nearest integer, a tie to the even one (x + 0.5 floored would round the float below
    0.5 up, where x + 0.5 rounds to 1; x - floor(x) is exact)."""
    r = math.floor(v)
    d = v - r
    if d > 0.5 or (d == 0.5 and r * 0.5 != math.floor(r * 0.5)):
        r = r + 1
    if r == 0 and v < 0:
        r = -r                                            # -0.5 rounds to -0, as torch's
    return r


@cuda.jit(device=True)
def sign(v):
    return 1 if v > 0 else -1 if v < 0 else 0          # NaN's sign is 0, as torch's


@cuda.jit(device=True)
def square(v):
    return v * v


@cuda.jit(device=True)
def log1p(v):
    return math.log1p(v)


@cuda.jit(device=True)
def expm1(v):
    return math.expm1(v)


@cuda.jit(device=True)
def isnan(v):
    return v != v


@cuda.jit(device=True)
def isinf(v):
    return abs(v) == math.inf


@cuda.jit(device=True)
def isfinite(v):
    return v == v and abs(v) != math.inf
