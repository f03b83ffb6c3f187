"""Layer 3: libdevice's float64 functions that build on `libdevice64`'s exp, log, tan and sqrt (NVIDIA's
`__nv_log2`, `__nv_log1p`, `__nv_expm1`, `__nv_sinh`, `__nv_cosh`, `__nv_tanh`, `__nv_asinh`, `__nv_acosh`,
`__nv_atanh`, `__nv_cbrt`, `__nv_hypot`, `__nv_atan`, `__nv_atan2`, `__nv_asin`, `__nv_acos`, `__nv_fmod`,
`__nv_exp2`, `__nv_erf`, `__nv_erfc`), computed in float64 to within a few ulps, with C's special values. The
textbook constructions, not libdevice's minimax polynomials:

- log1p and expm1 by Goldberg's and Kahan's corrections (u = 1 + x, then ln u times x / (u - 1); u = e^x, then
  (u - 1) times x / ln u), which cancel the rounding of u;
- sinh, cosh, tanh, asinh, acosh and atanh from those, as fdlibm arranges them;
- cbrt and atan by Newton's method (on y^3 = x, on tan y = x) from float32's answers: each step doubles the
  digits, so two take 1e-7 to an ulp; atan2, asin and acos from atan with C's quadrants and signed zeros;
- fmod exactly, as a long division in binary: every subtraction of y 2^k is exact (Sterbenz's lemma).

- tgamma and lgamma by Lanczos' approximation (g = 7, nine coefficients, as in Numerical Recipes and Boost),
  reflected below 1/2 through a float64 sin(pi x); float32's are these, rounded;
- exp2 as 2^n times e^(f ln 2) for the nearest integer n (the float32 argument keeps the MUFU's 2^x);
- erf by its Maclaurin series near 0, erfc (and erf beyond) as e^(-x^2) times erfcx(x), the scaled complementary
  error function, a polynomial fitted to it (see the constants below).
"""

import math

from numpy import float32, float64, int64

from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.libdevice import cbrt as cbrtf
from lapis.cuda.libdevice64 import (
    BIG,
    EXP_TERMS,
    LN2_HI,
    LN2_LO,
    SMALL,
    exp,
    exponent_split,
    log,
    pow2,
    sin,
    sqrt,
    tan,
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453                # ln 2, correctly rounded
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


@DeviceFunction
def exp2(x):
    """2^x: 2^n for the nearest integer n, exactly (in two steps, as exp scales), times 2^f = e^(f ln 2) for the
    exact rest f = x - n (|f| <= 1/2), by its Taylor series nested as 1 + f ln2 (1 + f ln2 / 2 (1 + ...)); exact at
    the integers, inf from 1024 on, 0 below -1075, NaN for NaN."""
    r = x
    if x >= 1024.0:
        r = math.inf
    elif x < -1075.0:
        r = 0.0
    elif x == x:
        n = math.floor(x + 0.5)
        f = x - n
        p = 0.0
        for k in range(EXP_TERMS - 1, 0, -1):
            p = (f * (LN2 / k)) * (1.0 + p)
        m = int64(n)
        half = m >> 1
        r = (1.0 + p) * pow2(half) * pow2(m - half)
    return r


# erf and erfc. Below ERF_SERIES, erf x is its Maclaurin series, (2 / sqrt(pi)) x sum (-x^2)^n / (n! (2n + 1)): the
# terms alternate and shrink over 5 times each, and the first one left out of ERF_TERMS is below 2e-19. Elsewhere
# erfc a (a = |x|) is e^(-a^2) erfcx(a), erfcx the scaled complementary error function, which falls smoothly from 1
# at 0 towards 1 / (a sqrt(pi)): (1 + 2a) erfcx(a) rises from 1 to 2 / sqrt(pi), and in y = (a - ERFCX_K) / (a +
# ERFCX_K), which maps [0, inf) onto [-1, 1), it is a polynomial of degree 24 to within 7e-18 (its Chebyshev series
# on [-1, 1], computed at 50 digits with mpmath, truncated and rewritten in powers of y; those coefficients sum to
# 1.8 in magnitude, so Horner's rule in float64 loses no digits to cancellation). e^(-a^2) takes a^2 as an exact
# sum hi + lo (Dekker's product: a split into two 26-bit halves, whose products are exact), lo going into the
# reduction of the exponent; where a^2 rounded once, the result would be off by up to a^2 2^-53 relatively (7e-14
# near 26).
TWO_OVER_SQRT_PI = 1.1283791670955126           # 2 / sqrt(pi), correctly rounded
ERF_SERIES, ERF_TERMS = 0.75, 15
ERF_ONE = 6.0                   # erfc x < 2.2e-17 from here: 1 - erfc x rounds to 1
ERFC_ZERO = 27.3                # erfc x < 2^-1075 (and e^(-x^2) is 0) from here: it rounds to 0
ERFCX_K = 3.0                   # y = 0 at a = 3: the map that took fewest terms (of 2 to 5)
SPLIT = 134217729.0             # 2^27 + 1: Veltkamp's splitting constant


@DeviceFunction
def square(a):
    """(hi, lo) with hi = a^2 rounded and hi + lo = a^2 exactly (for |a| below 2^996): Dekker's product of a with
    itself, a split into halves of 26 bits whose products are exact."""
    hi = a * a
    c = SPLIT * a
    ah = c - (c - a)
    al = a - ah
    return hi, ((ah * ah - hi) + 2.0 * ah * al) + al * al


@DeviceFunction
def erfcx(a):
    """e^(a^2) erfc a for a >= 0: (1 + 2a) erfcx(a) as a polynomial in y = (a - ERFCX_K) / (a + ERFCX_K), over
    1 + 2a."""
    y = (a - ERFCX_K) / (a + ERFCX_K)
    p = 0.0
    for c in (8.393734858690877e-10, 9.862533510345587e-10, -8.217595058711455e-09, -1.3312919661038687e-08,
              4.1064013667940355e-08, 1.0183620603842736e-07, -1.4047654315428462e-07, -6.166011460398726e-07,
              3.5576086684080595e-07, 3.472370944977168e-06, -7.308281468783614e-07, -2.0100542268525612e-05,
              4.949196649968345e-06, 0.0001250993424583729, -0.00010515971958448065, -0.0007798322696543306,
              0.0018886903449991718, 0.0025293918156939696, -0.02377051491717134, 0.0683080273440099,
              -0.11927366341538638, 0.1296451587027594, -0.0475622943534492, -0.13562110612458117,
              1.2530080582697296):
        p = p * y + c
    return p / (1.0 + 2.0 * a)


@DeviceFunction
def erfc_positive(a):
    """erfc a for 0 <= a < ERFC_ZERO: erfcx(a) e^(-a^2). With a^2 = hi + lo exactly, e^-(hi + lo) = 2^-n e^r for n
    the nearest integer to a^2 log2(e) and r = n ln 2 - hi - lo, |r| <= ln(2) / 2 (ln 2 in two parts: n LN2_HI and
    its difference from hi are exact); e^r by its Taylor series, nested; the product scaled by 2^-n in two exact
    steps, so it rounds once at most, where erfc is subnormal."""
    hi, lo = square(a)
    n = math.floor(hi * LOG2E + 0.5)
    r = (n * LN2_HI - hi) + (n * LN2_LO - lo)
    p = 0.0
    for k in range(EXP_TERMS - 1, 0, -1):
        p = (r * (1.0 / k)) * (1.0 + p)
    m = int64(n)
    half = m >> 1
    return erfcx(a) * (1.0 + p) * pow2(-half) * pow2(half - m)


@DeviceFunction
def erf(x):
    """The error function: its Maclaurin series below ERF_SERIES (nested, each term the last times
    -x^2 (2n - 1) / (n (2n + 1))), 1 - erfc |x| beyond, 1 from ERF_ONE on; the sign of x, +-0 and NaN as they are."""
    a = abs(x)
    r = 1.0
    if a < ERF_SERIES:
        z = a * a
        q = 0.0
        for n in range(ERF_TERMS, 0, -1):
            q = (z * ((1 - 2 * n) / (n * (2 * n + 1)))) * (1.0 + q)
        t = a * TWO_OVER_SQRT_PI
        r = t + t * q
    elif a < ERF_ONE:
        r = 1.0 - erfc_positive(a)
    return odd(x, r)


@DeviceFunction
def erfc(x):
    """The complementary error function, 1 - erf x: e^(-x^2) erfcx(x) for x >= 0 (0 from ERFC_ZERO on), and
    2 - erfc |x| below 0; NaN for NaN."""
    a = abs(x)
    r = 0.0
    if a < ERFC_ZERO:
        r = erfc_positive(a)
    if x < 0.0:
        r = 2.0 - r
    if x != x:
        r = x
    return r
