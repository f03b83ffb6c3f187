"""Layer 5: the device functions of the elementwise table (`elementwise.OPS`), one per row: what a GPU computes
for one element (or pair), in the kernel language; `lapis.libs.kernels` applies it over whole tensors. Each
computes in its operands' type (the table's dtype rule has cast them), and answers as torch does at the edges
(NaN, infinities, signed zeros), which `tests/test_op_table.py` checks row by row."""

import math

from lapis import cuda
from lapis.cuda import float32, float64


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


# -- floating-point floor and truncating division, remainder and fmod, as torch computes them -------------------
# Integer operands take `remainder` and `floor_divide` above (Python's // and %, torch's for integers); floats take
# these: C's fmod (exact) and, for a quotient, IEEE's correctly rounded division, which the results of torch's
# formulas depend on bit for bit: float64's x / y is (but for a subnormal quotient, which may be an ulp off), and a
# float32 quotient is float64's, rounded once: float32's own x / y can be an ulp off for subnormal operands.


@cuda.jit(device=True)
def quotient64(x, y):
    """x / y of float64s: the kernel language's division, IEEE's (its last step is a DFMA, which rounds once)."""
    return x / y


@cuda.jit(device=True)
def quotient32(x, y):
    """x / y of float32s, correctly rounded: the float64 quotient, itself correctly rounded, rounded to float32 (a
    second rounding that cannot move it: 53 bits are more than twice float32's 24, plus 2)."""
    return float32(float64(x) / float64(y))


@cuda.jit(device=True)
def float_remainder(x, y):
    """torch.remainder of floats: C's fmod, which is exact, moved to the divisor's side by adding the divisor when
    it is nonzero and of the other sign (so a zero keeps the dividend's sign: remainder(-4, 2) is -0)."""
    r = math.fmod(x, y)
    if r != 0 and (y < 0) != (r < 0):
        r = r + y
    return r


@cuda.jit(device=True)
def float_fmod(x, y):
    return math.fmod(x, y)


@cuda.jit(device=True)
def integer_fmod(x, y):
    """C's x % y (the dividend's sign) from Python's (the divisor's)."""
    r = x % y
    if r != 0 and (r < 0) != (x < 0):
        r = r - y
    return r


@cuda.jit(device=True)
def integer_trunc_divide(x, y):
    """C's x / y of integers (toward zero) from Python's x // y (toward minus infinity)."""
    q = x // y
    if q * y != x and (x < 0) != (y < 0):
        q = q + 1
    return q


def _float_divisions(quotient):
    """floor_divide and the truncating division of one float type, `quotient` its correctly rounded division."""
    @cuda.jit(device=True)
    def float_floor_divide(x, y):
        """torch's div_floor_floating: IEEE's x / y for y = 0; else (x - fmod(x, y)) / y, one less where the
        remainder's sign is not y's, floored and rounded up where that left more than a half (the quotient of a
        multiple of y can fall an ulp short of the integer), and a zero quotient signed as x / y."""
        q = x / y
        if y != 0:
            mod = math.fmod(x, y)
            d = quotient(x - mod, y)
            if mod != 0 and (y < 0) != (mod < 0):
                d = d - 1
            if d != 0:
                q = math.floor(d)
                if d - q > 0.5:
                    q = q + 1
            else:
                q = q * 0                             # copysign(0, x / y): x / y is finite here
        return q

    @cuda.jit(device=True)
    def float_trunc_divide(x, y):
        return math.trunc(quotient(x, y))
    return float_floor_divide, float_trunc_divide


float_floor_divide32, float_trunc_divide32 = _float_divisions(quotient32)
float_floor_divide64, float_trunc_divide64 = _float_divisions(quotient64)
