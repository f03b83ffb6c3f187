"""Layer 3: libdevice's float64 functions (NVIDIA's `__nv_sqrt`, `__nv_exp`, `__nv_log`, `__nv_sin`, ...), written
in the kernel language and computed in float64: what `calls.LIBDEVICE_FLOAT64` compiles a kernel's float64
`math.sqrt`, `exp`, `log`, `log10`, `pow`, `sin`, `cos` and `tan` to (the rest of float64 math is built on these,
in `libdevice64_derived.py`). Also the pieces float32's functions share with them: `LOG2E`, `pow2`, and
`pow_signs` (C's signs and exact cases of pow).
"""

import math

from numpy import float32, float64, int64

from lapis.cuda.compiler.device_function import DeviceFunction

LOG2E = 1.4426950408889634              # log2(e): e^x is 2^(x log2 e)


@DeviceFunction
def pow_signs(x, y, magnitude):
    """x^y from |x|^y (`magnitude`), with C's signs for a negative base (an odd integer exponent gives a negative
    result, an even one a positive one, a fractional one NaN) and for -0 (an odd exponent keeps its sign), and C's
    exact cases: x^0 is 1 for every x, 1^y is 1 for every y, (-1)^+-inf is 1."""
    integral = math.trunc(y) == y
    half = y * 0.5
    odd = integral and math.trunc(half) != half
    result = magnitude
    if x < 0.0:
        result = (-magnitude if odd else magnitude) if integral else math.nan
    elif x == 0.0 and odd and 1.0 / x < 0.0:          # -0: 1 / -0 is -inf
        result = -magnitude
    if y == 0.0 or x == 1.0 or (x == -1.0 and abs(y) == math.inf):
        result = 1.0
    return result



# -- float64: NVIDIA's __nv_sqrt, __nv_exp, __nv_log, in float64 arithmetic -------------------------------------
# The hardware's float64 pipe adds, multiplies and divides (within an ulp); these build on it, with the special
# function unit's float32 answer only as a first guess. Powers of two are built by multiplying exact constants, so
# scaling never rounds: the arguments are brought into float32's range (and the results back) by 2^+-60 steps.
BIG, SMALL = 2.0 ** 60, 2.0 ** -60
SQRT2, SQRT_HALF = math.sqrt(2.0), math.sqrt(0.5)
# ln 2 as a sum whose first part has few digits (Cephes: n * LN2_HI is exact for |n| < 2^11), for range reduction.
LN2_HI, LN2_LO = 6.93145751953125e-1, 1.42860682030941723212e-6
EXP_MAX, EXP_MIN = 709.782712893384, -745.1332191019412     # e^x overflows above, is 0 below
EXP_TERMS = 14                          # 1/k! for k < EXP_TERMS: |r| <= ln2/2 leaves a remainder below 1e-17
LOG_TERMS = 10                          # 2 s^2k/(2k+1), k <= LOG_TERMS: |s| <= 0.1716 leaves below 1e-17
LOG10_E = math.log10(math.e)


@DeviceFunction
def pow2(n):
    """2^n for an integer n, exact (an inf or 0 past float64's range), by multiplying exact powers of two."""
    r = 1.0
    base = 2.0
    if n < 0:
        base = 0.5
    e = abs(n)
    while e > 0:
        if e & 1:
            r = r * base
        base = base * base
        e = e >> 1
    return r


@DeviceFunction
def sqrt(x):
    """The square root in float64 (within an ulp): float32's MUFU answer refined by two Newton steps y = (y + x/y) / 2
    in float64, the argument scaled by 2^+-120 into float32's range; 0, a negative, inf and NaN as IEEE 754 says."""
    r = float64(math.sqrt(float32(x)))
    if x > 0.0 and x != math.inf:
        scale = 1.0
        while x > BIG:
            x = x * (SMALL * SMALL)
            scale = scale * BIG
        while x < SMALL:
            x = x * (BIG * BIG)
            scale = scale * SMALL
        y = float64(math.sqrt(float32(x)))
        y = (y + x / y) * 0.5
        y = (y + x / y) * 0.5
        r = y * scale
    return r


@DeviceFunction
def exp(x):
    """e^x in float64 (within a few ulps): x = n ln2 + r with |r| <= ln2 / 2 (ln 2 in two parts), e^r by its Taylor
    series, times 2^n; inf above EXP_MAX, 0 below EXP_MIN, NaN for NaN."""
    r = x
    if x > EXP_MAX:
        r = math.inf
    elif x < EXP_MIN:
        r = 0.0
    elif x == x:
        n = math.floor(x * LOG2E + 0.5)
        f = (x - n * LN2_HI) - n * LN2_LO
        term = 1.0
        total = 1.0
        for k in range(1, EXP_TERMS):
            term = term * f / k
            total = total + term
        m = int64(n)
        half = m >> 1                        # 2^m in two steps: 2^1024 alone would be inf, 2^-1075 alone 0
        r = total * pow2(half) * pow2(m - half)
    return r


@DeviceFunction
def exponent_split(x):
    """(m, e) with x = m 2^e exactly and m within 2^+-60 of 1, for a finite positive x: m near enough to 1 that
    float32's log2 of it is a first guess of its exponent (x scaled by exact 2^+-60 steps)."""
    e = int64(0)
    while x > BIG:
        x = x * SMALL
        e = e + 60
    while x < SMALL:
        x = x * BIG
        e = e - 60
    return x, e


@DeviceFunction
def log(x):
    """ln x in float64 (within an ulp): x = m 2^e with m in [sqrt(1/2), sqrt(2)) (e from float32's log2, m by
    exact scaling), ln m as fdlibm writes it, plus e ln 2 in two parts; -inf at 0, NaN below 0 and for NaN, inf at
    inf."""
    r = math.nan
    if x == 0.0:
        r = -math.inf
    elif x == math.inf:
        r = x
    elif x > 0.0:
        x, e = exponent_split(x)
        k = int64(math.floor(math.log2(float32(x)) + 0.5))
        m = x * pow2(-k)
        if m > SQRT2:
            m = m * 0.5
            k = k + 1
        if m < SQRT_HALF:
            m = m * 2.0
            k = k - 1
        # fdlibm's form of ln(1 + f) = 2 atanh(s), s = f / (2 + f): f - (f^2/2 - s (f^2/2 + R)), where
        # R = sum 2 s^2k / (2k + 1) is small, so f's digits pass through unrounded
        f = m - 1.0
        hfsq = 0.5 * f * f
        s = f / (2.0 + f)
        z = s * s
        big_r = 0.0
        for j in range(LOG_TERMS, 0, -1):
            big_r = (big_r + 2.0 / (2 * j + 1)) * z
        n = float64(e + k)
        r = n * LN2_HI - ((hfsq - (s * (hfsq + big_r) + n * LN2_LO)) - f)
    return r


@DeviceFunction
def log10(x):
    return log(x) * LOG10_E


@DeviceFunction
def pow(x, y):
    """x^y in float64: x, x * x, x * x * x or their reciprocals for an exponent of 1 to 3 in magnitude, else
    e^(y ln |x|) by the float64 functions above (within 2 |y ln x| + 4 ulps); powf's signs and exact cases."""
    n = abs(y)
    if n == 1.0:
        magnitude = abs(x)
    elif n == 2.0:
        magnitude = abs(x) * abs(x)
    elif n == 3.0:
        magnitude = abs(x) * abs(x) * abs(x)
    else:
        magnitude = exp(n * log(abs(x)))
    if y < 0.0 and n <= 3.0:
        magnitude = 1.0 / magnitude
    elif y < 0.0:
        magnitude = exp(y * log(abs(x)))
    return pow_signs(x, y, magnitude)


# sin and cos in float64, as fdlibm computes them (Sun's freely distributable libm, which glibc and CUDA's
# libdevice follow): x = n pi/2 + (y0 + y1), |y0 + y1| <= pi/4, with pi/2 in three 33-bit parts (each product
# n * part is exact while |n| < 2^20), then minimax polynomials for sin and cos on [-pi/4, pi/4] that take the
# remainder's tail y1 into account. Beyond 2^20 pi/2 that reduction loses digits (about 1e-9 at 1e7, 1e-6 at 1e10,
# 1e-4 at 1e12) and fdlibm turns to Payne and Hanek's, which is not here yet; from LARGE on the float32 functions
# answer, as they did for every float64 argument before (float32-accurate at best).
LARGE = 2.0 ** 40
INV_PIO2 = 6.36619772367581382433e-01
PIO2_1, PIO2_1T = 1.57079632673412561417e+00, 6.07710050650619224932e-11
PIO2_2, PIO2_2T = 6.07710050630396597660e-11, 2.02226624879595063154e-21
PIO2_3, PIO2_3T = 2.02226624871116645580e-21, 8.47842766036889956997e-32
S1, S2, S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
S4, S5, S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
C1, C2, C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
C4, C5, C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11


@DeviceFunction
def reduce_pio2(x):
    """(y0, y1, n mod 4) with x = n pi/2 + y0 + y1: fdlibm's reduction, all three of its steps (it stops early
    where the remainder keeps enough digits): each subtracts n times the next 33-bit part of pi/2 and keeps, in w,
    the rest of pi/2 times n with the rounding error of that subtraction."""
    n = math.floor(x * INV_PIO2 + 0.5)
    r = x - n * PIO2_1
    t = r
    r = t - n * PIO2_2
    w = n * PIO2_2T - ((t - r) - n * PIO2_2)
    t = r
    r = t - n * PIO2_3
    w = n * PIO2_3T - ((t - r) - n * PIO2_3)
    y0 = r - w
    return y0, (r - y0) - w, int64(n) & 3


@DeviceFunction
def sin_kernel(x, y):
    """sin(x + y) for |x + y| <= pi/4, y the tail of x."""
    z = x * x
    v = z * x
    r = S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)))
    return x - ((z * (0.5 * y - v * r) - y) - v * S1)


@DeviceFunction
def cos_kernel(x, y):
    """cos(x + y) for |x + y| <= pi/4, y the tail of x."""
    z = x * x
    r = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))))
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + (z * r - x * y))


@DeviceFunction
def sin(x):
    y0, y1, q = reduce_pio2(x)
    s, c = sin_kernel(y0, y1), cos_kernel(y0, y1)
    r = s if q == 0 else c if q == 1 else -s if q == 2 else -c
    return r if abs(x) < LARGE else float64(math.sin(float32(x))) + x * 0.0    # NaN at +-inf and NaN


@DeviceFunction
def cos(x):
    y0, y1, q = reduce_pio2(x)
    s, c = sin_kernel(y0, y1), cos_kernel(y0, y1)
    r = c if q == 0 else -s if q == 1 else -c if q == 2 else s
    return r if abs(x) < LARGE else float64(math.cos(float32(x))) + x * 0.0


@DeviceFunction
def tan(x):
    y0, y1, q = reduce_pio2(x)
    s, c = sin_kernel(y0, y1), cos_kernel(y0, y1)
    r = s / c if q == 0 or q == 2 else -c / s
    return r if abs(x) < LARGE else float64(math.tan(float32(x))) + x * 0.0
