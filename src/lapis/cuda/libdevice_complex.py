"""Layer 3: the complex functions of the kernel language (numba's `cmath` in kernels, complex division and powers),
written in the kernel language on a complex number's two parts.

The compiler keeps a complex number as its real and imaginary parts (`compiler/complex_values.py`) and inlines
these functions with float32 parts for a complex64 and float64 parts for a complex128, so each computes in its
component type on the float math of libdevice (`math.exp` of a float32 part is `libdevice.expf`, of a float64 part
`libdevice64.exp`). Each returns the result's parts as a tuple. The algorithms are numba's (its cmathimpl.py,
numbers.py and cuda/mathimpl.py), which follow CPython's cmathmodule.c and numpy's npy_math_complex.c, with C99's
values at infinities and NaNs. Literals are weak (they take the parts' type), so a function whose constants must be
typed takes a `one` argument of the parts' type (1.0).

Each function's first assignment to a variable, and its first `return`, computes from the arguments, so the
variables (and the results) have the parts' type: a weak literal assigned later keeps that type.
"""

import math

from lapis.cuda.compiler.device_function import DeviceFunction

LN_4 = math.log(4.0)
LN_10 = math.log(10.0)
HALF_PI = math.pi / 2
FLT_MAX = 3.4028234663852886e38
FLT_MIN = 1.1754943508222875e-38
LARGE = FLT_MAX / 4                     # numba's threshold for the inverse functions' large-argument formulas
ATANH_LARGE = math.sqrt(FLT_MAX / 4)
ATANH_SMALL = math.sqrt(FLT_MIN)


@DeviceFunction
def copysign(x, s):
    """|x| with the sign of s (a zero's sign read through 1 / s, which is -inf for -0; a NaN counts as positive)."""
    a = abs(x)
    return -a if s < 0.0 or (s == 0.0 and 1.0 / s < 0.0) else a


@DeviceFunction
def div(ar, ai, br, bi):
    """(ar + ai j) / (br + bi j) by Smith's algorithm (CPython's _Py_c_quot, which numba compiles): top and bottom
    divided by the divisor's larger part, so no part is squared and nothing overflows or underflows on the way.
    A zero divisor gives numpy's answer, each part of the dividend divided by +0 (numba's raises
    ZeroDivisionError, which a kernel cannot); a NaN in the divisor gives NaN + NaN j."""
    abr = abs(br)
    abi = abs(bi)
    if abr >= abi:
        if abr == 0.0:
            return ar / abr, ai / abr
        ratio = bi / br
        denom = br + bi * ratio
        return (ar + ai * ratio) / denom, (ai - ar * ratio) / denom
    if abi >= abr:
        ratio = br / bi
        denom = br * ratio + bi
        return (ar * ratio + ai) / denom, (ai * ratio - ar) / denom
    nan = abr + abi                     # one of them is a NaN
    return nan, nan


@DeviceFunction
def power(ar, ai, br, bi):
    """(ar + ai j) ** (br + bi j) in polar form (CPython's _Py_c_pow, numba's cuda cpow): |a|^b e^(j b arg a);
    a ** 0 is 1. (Integer constant exponents are multiplied out instead: complex_values.power.)"""
    vabs = math.hypot(ar, ai)
    length = math.pow(vabs, br)
    at = math.atan2(ai, ar)
    phase = at * br
    if bi != 0.0:
        length = length / math.exp(at * bi)
        phase = phase + bi * math.log(vabs)
    re = length * math.cos(phase)
    im = length * math.sin(phase)
    if br == 0.0 and bi == 0.0:
        re = 1.0
        im = 0.0
    return re, im


# -- classification ---------------------------------------------------------------------------------------------
@DeviceFunction
def isnan(x, y):
    return math.isnan(x) | math.isnan(y)


@DeviceFunction
def isinf(x, y):
    return math.isinf(x) | math.isinf(y)


@DeviceFunction
def isfinite(x, y):
    return math.isfinite(x) & math.isfinite(y)


# -- powers and logarithms --------------------------------------------------------------------------------------
@DeviceFunction
def exp(x, y):
    """cmath.exp(x + y j) = e^x (cos y + j sin y), with C99's values where x or y is not finite (numba's exp_impl)."""
    if math.isfinite(x):
        if math.isfinite(y):
            r = math.exp(x)
            return r * math.cos(y), r * math.sin(y)
        return y - y, y - y                         # NaN + NaN j
    if math.isnan(x):
        if y != 0.0:
            return x, x
        return x, y
    if x > 0.0:                                     # +inf
        if math.isfinite(y):
            re = math.cos(y)
            im = math.sin(y)
            if re != 0.0:                           # keep a zero a zero: exp(inf + 0j) is inf + 0j
                re = re * x
            if im != 0.0:
                im = im * x
            return re, im
        return x, y - y
    r = math.exp(x)                                 # -inf: 0, times cos y and sin y for their signs
    if math.isfinite(y):
        return r * math.cos(y), r * math.sin(y)
    return r, r


@DeviceFunction
def log(x, y):
    """cmath.log(x + y j) = ln |z| + j arg z (numba's log_impl)."""
    return math.log(math.hypot(x, y)), math.atan2(y, x)


@DeviceFunction
def log10(x, y):
    """cmath.log10(z) = ln z / ln 10, part by part (numba's, which keeps infinities right)."""
    re, im = log(x, y)
    return re / LN_10, im / LN_10


@DeviceFunction
def sqrt(a, b, big):
    """cmath.sqrt(a + b j): numpy's algorithm (npy_csqrt, Algorithm 312 of CACM), with both parts scaled by 1/4 from
    `big` (the parts' largest value / (1 + sqrt 2)) up so that the hypotenuse cannot overflow (numba's)."""
    if a == 0.0 and b == 0.0:
        return abs(b), b
    if math.isinf(b):
        return abs(b), b
    if math.isnan(a):
        return a, a
    if math.isinf(a):
        if a < 0.0:
            return abs(b - b), copysign(a, b)
        return a, copysign(b - b, b)
    scale = abs(a) >= big or abs(b) >= big
    if scale:
        a = a * 0.25
        b = b * 0.25
    if a >= 0.0:
        t = math.sqrt((a + math.hypot(a, b)) * 0.5)
        real = t
        imag = b / (2.0 * t)
    else:
        t = math.sqrt((-a + math.hypot(a, b)) * 0.5)
        real = abs(b) / (2.0 * t)
        imag = copysign(t, b)
    if scale:
        real = real * 2.0
    return real, imag


# -- trigonometric and hyperbolic functions -----------------------------------------------------------------------
@DeviceFunction
def cosh(x, y):
    """cmath.cosh(x + y j) = cosh x cos y + j sinh x sin y (numba's, C99's values at x = +-inf)."""
    if math.isinf(x):
        real = abs(x)
        imag = y
        if not math.isnan(y) and y != 0.0:
            real = copysign(x, math.cos(y))
            imag = copysign(x, math.sin(y))
        if x < 0.0:
            imag = -imag
        return real, imag
    return math.cos(y) * math.cosh(x), math.sin(y) * math.sinh(x)


@DeviceFunction
def sinh(x, y):
    """cmath.sinh(x + y j) = sinh x cos y + j cosh x sin y (numba's, C99's values at x = +-inf)."""
    if math.isinf(x):
        real = x
        imag = y
        if not math.isnan(y):
            real = math.cos(y)
            imag = math.sin(y)
            if real != 0.0:
                real = real * x
            if imag != 0.0:
                imag = imag * abs(x)
        return real, imag
    return math.cos(y) * math.sinh(x), math.sin(y) * math.cosh(x)


@DeviceFunction
def tanh(x, y, one):
    """cmath.tanh(x + y j): CPython's algorithm (c_tanh), as numba's, from tanh x, tan y and 1 / cosh x."""
    if math.isinf(x):
        real = copysign(one, x)
        imag = copysign(one - one, math.sin(2.0 * y))
        if math.isinf(y):
            imag = one - one
        return real, imag
    tx = math.tanh(x)
    ty = math.tan(y)
    cx = one / math.cosh(x)
    txty = tx * ty
    denom = one + txty * txty
    return tx * (one + ty * ty) / denom, ((ty / denom) * cx) * cx


@DeviceFunction
def cos(x, y):
    """cmath.cos(z) = cosh(j z)."""
    return cosh(-y, x)


@DeviceFunction
def sin(x, y):
    """cmath.sin(z) = -j sinh(j z)."""
    re, im = sinh(-y, x)
    return im, -re


@DeviceFunction
def tan(x, y, one):
    """cmath.tan(z) = -j tanh(j z)."""
    re, im = tanh(-y, x, one)
    return im, -re


# -- inverse functions (CPython's algorithms, as numba's) ------------------------------------------------------------
@DeviceFunction
def acos(x, y, one, big):
    """cmath.acos(x + y j) (c_acos): from the roots of 1 - z and 1 + z; from ln |z| beyond `big`."""
    if abs(x) > LARGE or abs(y) > LARGE:
        real = math.atan2(abs(y), x)
        imag = copysign(math.log(math.hypot(x * 0.5, y * 0.5)) + LN_4, -y)
    else:
        s1r, s1i = sqrt(one - x, -y, big)
        s2r, s2i = sqrt(one + x, y, big)
        real = 2.0 * math.atan2(s1r, s2r)
        imag = math.asinh(s2r * s1i - s2i * s1r)
    return real, imag


@DeviceFunction
def acosh(x, y, one, big):
    """cmath.acosh(x + y j) (c_acosh): from the roots of z - 1 and z + 1; from ln |z| beyond `big`."""
    if abs(x) > LARGE or abs(y) > LARGE:
        real = math.log(math.hypot(x * 0.5, y * 0.5)) + LN_4
        imag = math.atan2(y, x)
    else:
        s1r, s1i = sqrt(x - one, y, big)
        s2r, s2i = sqrt(x + one, y, big)
        real = math.asinh(s1r * s2r + s1i * s2i)
        imag = 2.0 * math.atan2(s1i, s2r)
    return real, imag


@DeviceFunction
def asinh(x, y, one, big):
    """cmath.asinh(x + y j) (c_asinh): from the roots of 1 + j z and 1 - j z; from ln |z| beyond `big`."""
    if abs(x) > LARGE or abs(y) > LARGE:
        real = copysign(math.log(math.hypot(x * 0.5, y * 0.5)) + LN_4, x)
        imag = math.atan2(y, abs(x))
    else:
        s1r, s1i = sqrt(one + y, -x, big)
        s2r, s2i = sqrt(one - y, x, big)
        real = math.asinh(s1r * s2i - s2r * s1i)
        imag = math.atan2(y, s1r * s2r - s1i * s2i)
    return real, imag


@DeviceFunction
def asin(x, y, one, big):
    """cmath.asin(z) = -j asinh(j z)."""
    re, im = asinh(-y, x, one, big)
    return im, -re


@DeviceFunction
def atanh(x, y, one):
    """cmath.atanh(x + y j) (c_atanh), on x >= 0 (atanh(-z) = -atanh(z))."""
    sign = -one if x < 0.0 else one         # a factor, not a condition: predicates are few
    x = x * sign
    y = y * sign
    ay = abs(y)
    sqay = ay * ay
    zr1 = one - x
    real = math.log1p(4.0 * x / (zr1 * zr1 + sqay)) * 0.25
    imag = -math.atan2(-2.0 * y, zr1 * (one + x) - sqay) * 0.5
    if math.isnan(x) or x > ATANH_LARGE or ay > ATANH_LARGE:
        if math.isinf(y):
            real = copysign(one - one, x)
        elif math.isinf(x):
            real = one - one
        else:
            h = math.hypot(x * 0.5, y * 0.5)
            real = x / 4.0 / h / h
        imag = -copysign(one * HALF_PI, -y)
    elif x == 1.0 and ay < ATANH_SMALL:
        if ay == 0.0:
            real = math.inf
            imag = y
        else:
            real = -math.log(math.sqrt(ay) / math.sqrt(math.hypot(ay, 2.0)))
            imag = copysign(math.atan2(2.0, -ay) / 2.0, y)
    if math.isnan(y):
        imag = y
    return real * sign, imag * sign


@DeviceFunction
def atan(x, y, one):
    """cmath.atan(z) = -j atanh(j z) (with numba's odd case: an infinite x and a NaN y)."""
    re, im = atanh(-y, x, one)
    if math.isinf(x) and math.isnan(y):
        return im, re
    return im, -re


# -- conversions --------------------------------------------------------------------------------------------------
@DeviceFunction
def absolute(x, y):
    """abs(x + y j): the hypotenuse, without overflow or underflow (libdevice's hypot)."""
    return math.hypot(x, y)


@DeviceFunction
def phase(x, y):
    """cmath.phase(x + y j): the argument, in [-pi, pi], C's atan2 with its signed zeros."""
    return math.atan2(y, x)


@DeviceFunction
def polar(x, y):
    """cmath.polar(x + y j): (abs, phase)."""
    return math.hypot(x, y), math.atan2(y, x)


@DeviceFunction
def rect(r, phi):
    """cmath.rect(r, phi) = r (cos phi + j sin phi), with numba's values where phi is not finite or r is infinite
    (a zero part of cos phi, sin phi stays a zero, of the product's sign)."""
    re = math.cos(phi)
    im = math.sin(phi)
    if re == 0.0 and math.isinf(r):
        re = re / r
    else:
        re = re * r
    if im == 0.0 and math.isinf(r):
        im = im / r
    else:
        im = im * r
    if not math.isfinite(phi):
        if r == 0.0:
            re = abs(r)
            im = r - r
        elif math.isinf(r):
            re = r
            im = phi
    return re, im
