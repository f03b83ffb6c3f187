"""Layer 3: libdevice's float64 functions that build on `libdevice64`'s exp, log, tan and sqrt (NVIDIA's
`__nv_log2`, `__nv_log1p`, `__nv_expm1`, `__nv_sinh`, `__nv_cosh`, `__nv_tanh`, `__nv_asinh`, `__nv_acosh`,
`__nv_atanh`, `__nv_cbrt`, `__nv_hypot`, `__nv_atan`, `__nv_atan2`, `__nv_asin`, `__nv_acos`, `__nv_fmod`),
computed in float64 to within a few ulps, with C's special values. The textbook constructions, not libdevice's
minimax polynomials:

- log1p and expm1 by Goldberg's and Kahan's corrections (u = 1 + x, then ln u times x / (u - 1); u = e^x, then
  (u - 1) times x / ln u), which cancel the rounding of u;
- sinh, cosh, tanh, asinh, acosh and atanh from those, as fdlibm arranges them;
- cbrt and atan by Newton's method (on y^3 = x, on tan y = x) from float32's answers: each step doubles the
  digits, so two take 1e-7 to an ulp; atan2, asin and acos from atan with C's quadrants and signed zeros;
- fmod exactly, as a long division in binary: every subtraction of y 2^k is exact (Sterbenz's lemma).

- tgamma and lgamma by Lanczos' approximation (g = 7, nine coefficients, as in Numerical Recipes and Boost),
  reflected below 1/2 through a float64 sin(pi x); float32's are these, rounded.

erf and erfc of a float64 still go through float32 (`libdevice.py`).
"""

import math

from numpy import float32, float64, int64

from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.libdevice import cbrt as cbrtf
from lapis.cuda.libdevice64 import BIG, LN2_HI, LN2_LO, SMALL, exp, exponent_split, log, pow2, sin, sqrt, tan

LOG2E = 1.4426950408889634
PIO2_HI, PIO2_LO = 1.57079632679489655800e+00, 6.12323399573676603587e-17     # pi/2 in two parts (fdlibm)
PI_HI, PI_LO = 3.14159265358979311600e+00, 1.22464679914735317723e-16
TANH_ONE = 22.0                 # tanh(x) rounds to +-1 from here
EXP_HALF_MAX = 709.0            # e^x overflows just above; sinh and cosh take e^(x/2) twice beyond
HUGE_ROOT = 2.0 ** 28           # x^2 + 1 is x^2 from here (asinh, acosh)
CBRT_BIG, CBRT_SMALL = 2.0 ** 20, 2.0 ** -20      # the cube roots of libdevice64's BIG and SMALL
PI = math.pi
LANCZOS_G = 7.0
L0, L1, L2, L3 = 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313
L4, L5, L6 = -176.61502916214059, 12.507343278686905, -0.13857109526572012
L7, L8 = 9.9843695780195716e-6, 1.5056327351493116e-7
SQRT_2PI = math.sqrt(2 * math.pi)


@DeviceFunction
def odd(x, r):
    """An odd function's value at x from its value r at |x|: -r below 0, x itself at +-0 and NaN."""
    if x == 0.0 or x != x:
        r = x
    return -r if x < 0.0 else r


@DeviceFunction
def log2(x):
    """log2 x: the exponent e of x = m 2^e exactly, plus log(m) log2(e), so powers of two come out exact."""
    r = log(x) * LOG2E
    if x > 0.0 and x != math.inf:
        m, e = exponent_split(x)
        k = int64(math.floor(math.log2(float32(m)) + 0.5))
        r = float64(e + k) + log(m * pow2(-k)) * LOG2E
    return r


@DeviceFunction
def log1p(x):
    """ln(1 + x), Goldberg's way: u = 1 + x rounds, and ln(u) x / (u - 1) cancels that rounding."""
    u = 1.0 + x
    r = x
    if u == math.inf or u != u:
        r = u                                       # inf, or NaN
    elif u != 1.0:
        r = log(u) * (x / (u - 1.0))
    return r


@DeviceFunction
def expm1(x):
    """e^x - 1, Kahan's way: u = e^x rounds, and (u - 1) x / ln u cancels that rounding."""
    u = exp(x)
    r = x
    if u == math.inf or u != u:
        r = u
    elif u - 1.0 == -1.0:
        r = -1.0
    elif u != 1.0:
        r = (u - 1.0) * (x / log(u))
    return r


@DeviceFunction
def sinh(x):
    """(e^x - e^-x) / 2 from expm1 below 1 (no cancellation), e^|x| above, e^(|x|/2) twice near overflow."""
    a = abs(x)
    if a < 1.0:
        e = expm1(a)
        r = 0.5 * (e + e / (e + 1.0))
    elif a < EXP_HALF_MAX:
        e = exp(a)
        r = 0.5 * (e - 1.0 / e)
    else:
        h = exp(0.5 * a)
        r = (0.5 * h) * h
    return odd(x, r)


@DeviceFunction
def cosh(x):
    a = abs(x)
    if a < EXP_HALF_MAX:
        e = exp(a)
        r = 0.5 * (e + 1.0 / e)
    else:
        h = exp(0.5 * a)
        r = (0.5 * h) * h
    return r


@DeviceFunction
def tanh(x):
    """e / (e + 2) with e = expm1(2|x|): no cancellation near 0; +-1 from TANH_ONE on."""
    a = abs(x)
    r = 1.0
    if a < TANH_ONE:
        e = expm1(2.0 * a)
        r = e / (e + 2.0)
    return odd(x, r)


@DeviceFunction
def asinh(x):
    """ln(|x| + sqrt(x^2 + 1)), as log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) below 2, the sign of x."""
    a = abs(x)
    if a >= HUGE_ROOT:
        r = log(a) + (LN2_HI + LN2_LO)
    elif a > 2.0:
        r = log(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a))
    else:
        r = log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)))
    return odd(x, r)


@DeviceFunction
def acosh(x):
    """ln(x + sqrt(x^2 - 1)), as log1p(t + sqrt(2t + t^2)) with t = x - 1 below 2; NaN below 1."""
    r = math.nan
    if x >= HUGE_ROOT:
        r = log(x) + (LN2_HI + LN2_LO)
    elif x > 2.0:
        r = log(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0)))
    elif x >= 1.0:
        t = x - 1.0
        r = log1p(t + sqrt(2.0 * t + t * t))
    return r


@DeviceFunction
def atanh(x):
    """log1p(2|x| / (1 - |x|)) / 2, the sign of x: +-inf at +-1, NaN beyond."""
    a = abs(x)
    r = math.nan
    if a < 0.5:
        r = 0.5 * log1p(2.0 * a + 2.0 * a * a / (1.0 - a))
    elif a < 1.0:
        r = 0.5 * log1p(2.0 * a / (1.0 - a))
    elif a == 1.0:
        r = math.inf
    return odd(x, r)


@DeviceFunction
def hypot(x, y):
    """sqrt(x^2 + y^2) without overflow: the larger magnitude times sqrt(1 + r^2); inf if either is inf (even
    with a NaN, as C says), NaN if either is NaN."""
    a = abs(x) if abs(x) >= abs(y) else abs(y)
    b = abs(y) if abs(x) >= abs(y) else abs(x)
    r = a + b                                       # NaN for a NaN
    if a == math.inf or b == math.inf:
        r = math.inf
    elif a > 0.0 and r == r:
        q = b / a
        r = a * sqrt(1.0 + q * q)
    return r


@DeviceFunction
def atan_reduced(a):
    """atan a for 0 <= a <= 1: float32's atan refined by two Newton steps on tan(y) = a."""
    y = float64(math.atan(float32(a)))
    t = tan(y)
    y = y - (t - a) / (1.0 + t * t)
    t = tan(y)
    return y - (t - a) / (1.0 + t * t)


@DeviceFunction
def atan(x):
    """atan x: atan |x| up to 1, pi/2 - atan(1/|x|) beyond (pi/2 in two parts), the sign of x."""
    a = abs(x)
    if a <= 1.0:
        r = atan_reduced(a)
    else:
        r = (PIO2_HI - atan_reduced(1.0 / a)) + PIO2_LO
    return odd(x, r)


@DeviceFunction
def atan2(y, x):
    """The angle of (x, y), C's atan2: the quadrant from the signs (of zeros too: 1 / -0 is -inf), +-pi/4 and
    +-3pi/4 where both are infinite, NaN if either is NaN."""
    ax, ay = abs(x), abs(y)
    negative_x = x < 0.0 or (x == 0.0 and 1.0 / x < 0.0)
    if ax == math.inf and ay == math.inf:
        r = 0.5 * PIO2_HI
        if negative_x:
            r = 3.0 * r
    elif ax == math.inf or ay == 0.0:
        r = (PI_HI + PI_LO) if negative_x else 0.0
    elif ay == math.inf or ax == 0.0:
        r = PIO2_HI + PIO2_LO
    else:
        r = atan(ay / ax)
        if negative_x:
            r = (PI_HI - r) + PI_LO
    if x != x or y != y:
        r = x + y
    elif y < 0.0 or (y == 0.0 and 1.0 / y < 0.0):
        r = -r
    return r


@DeviceFunction
def asin(x):
    """atan2(x, sqrt((1 - x)(1 + x))): the product keeps its digits near +-1; NaN beyond."""
    return atan2(x, sqrt((1.0 - x) * (1.0 + x)))


@DeviceFunction
def acos(x):
    return atan2(sqrt((1.0 - x) * (1.0 + x)), x)


@DeviceFunction
def fmod(x, y):
    """x - n y with n = trunc(x / y), exactly (C's fmod): |y| doubled up to |x|, then subtracted wherever it fits
    and halved back down, each subtraction exact; the sign of x; NaN for y = 0, x infinite or a NaN."""
    ax, ay = abs(x), abs(y)
    r = x
    if y == 0.0 or ax == math.inf or x != x or y != y:
        r = math.nan
    elif ax >= ay:
        t = ay
        while t + t <= ax:                          # t + t is inf (and not <= ax) past float64's range
            t = t + t
        while t >= ay:
            if ax >= t:
                ax = ax - t
            t = t * 0.5
        r = -ax if x < 0.0 else ax
    return r


@DeviceFunction
def cbrt(x):
    """The real cube root: float32's, of |x| scaled by 2^+-60 into float32's range, refined by two Newton steps
    y - (y^3 - a) / 3y^2, scaled back by 2^-+20; the sign of x; 0, inf and NaN as they are."""
    a = abs(x)
    r = x
    if a > 0.0 and a != math.inf:
        scale = 1.0
        while a > BIG:
            a = a * SMALL
            scale = scale * CBRT_BIG
        while a < SMALL:
            a = a * BIG
            scale = scale * CBRT_SMALL
        y = float64(cbrtf(float32(a)))
        y = y - (y * y * y - a) / (3.0 * y * y)
        y = y - (y * y * y - a) / (3.0 * y * y)
        r = -(y * scale) if x < 0.0 else y * scale
    return r


@DeviceFunction
def lanczos_sum(z):
    """Lanczos' series at z = x - 1 (x >= 1/2): L0 + sum of Lk / (z + k)."""
    return (L0 + L1 / (z + 1.0) + L2 / (z + 2.0) + L3 / (z + 3.0) + L4 / (z + 4.0) + L5 / (z + 5.0)
            + L6 / (z + 6.0) + L7 / (z + 7.0) + L8 / (z + 8.0))


@DeviceFunction
def sin_pi(v):
    """sin(pi v) from the nearest integer n: (-1)^n sin(pi (v - n)), v - n exact and at most 1/2 in magnitude."""
    n = math.floor(v + 0.5)
    r = sin(PI * (v - n))
    return -r if n % 2.0 != 0.0 else r


@DeviceFunction
def gamma(x):
    """Gamma(x): Lanczos' sum times sqrt(2 pi) t^(z + 1/2) e^-t (z = x - 1, t = z + g + 1/2), reflected below 1/2 as
    pi / (sin(pi x) Gamma(1 - x)); +-inf at +-0, NaN at the negative integers and -inf, inf past 171.6."""
    r = math.nan
    if x == 0.0:
        r = math.inf if 1.0 / x > 0.0 else -math.inf
    elif x == math.inf:
        r = x
    elif x > 0.0 or math.floor(x) != x:
        w = x if x >= 0.5 else 1.0 - x
        z = w - 1.0
        t = z + LANCZOS_G + 0.5
        g = SQRT_2PI * exp((z + 0.5) * log(t) - t) * lanczos_sum(z)
        r = g if x >= 0.5 else PI / (sin_pi(x) * g)
    return r


@DeviceFunction
def lgamma(x):
    """ln |Gamma(x)| from Lanczos' approximation in logarithms (finite where Gamma overflows), reflected below
    1/2; inf at 0, at the negative integers and at +-inf, NaN for NaN."""
    r = math.inf
    if x != x:
        r = x
    elif x != math.inf and x != -math.inf and (x > 0.0 or math.floor(x) != x):
        w = x if x >= 0.5 else 1.0 - x
        z = w - 1.0
        t = z + LANCZOS_G + 0.5
        r = (z + 0.5) * log(t) - t + log(SQRT_2PI * lanczos_sum(z))
        if x < 0.5:
            r = log(PI / abs(sin_pi(x))) - r
    return r
