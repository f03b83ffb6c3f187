"""Layer 3: libdevice, the math library of the kernel language, written in the kernel language.

NVIDIA's libdevice is a library of device functions (`__nv_expf`, `__nv_erff`, ...) that nvcc
links into every kernel calling `expf` or `erff`; the hardware itself only has a few
approximations in its special function unit (MUFU). This module is the same for lapis: a kernel's
`math.exp(x)`, `math.erf(x)`, `x ** y` ... compile to a call of the function here that
`calls.py` names (`expf`, `erff`, `powf`, ...), inlined where it is called like any
`@cuda.jit(device=True)` function. What the hardware does in one instruction stays an
instruction: `math.sqrt`, `sin`, `cos`, `exp2`, `log2` (MUFU), the reciprocal `fast_rcp`
(MUFU.RCP), and `fabs`, `floor`, `ceil`, `trunc`.

The functions with NVIDIA's `f` suffix take and return float32: a kernel's half-precision argument is
converted to float32 for the call and the result converted back. `sqrt`, `exp`, `log`, `log10`, `pow`,
`sin`, `cos` and `tan` are float64 functions, computed in float64 (within a few ulps; pow within 2 |y ln x|
more; sin, cos and tan for |x| below 2^20 pi/2, losing digits beyond); the rest of math on float64 still goes
through the float32 functions and carries float32 accuracy (see docs/layer3-programming-interface.md).
"""

import math

from numpy import float32, float64, int32, int64, uint32

from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.compiler.intrinsics import (
    all_sync,
    atomic,
    ballot_sync,
    blockDim,
    fast_rcp,
    laneid,
    shared,
    shfl_sync,
    syncthreads,
    threadIdx,
)

LOG2E = 1.4426950408889634              # log2(e): e^x is 2^(x log2 e)
LN2 = 0.6931471805599453                # ln(2): ln x is log2(x) ln 2
LOG10_2 = math.log10(2)
# erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7): for x >= 0,
# erfc x = t (A1 + t (A2 + t (A3 + t (A4 + t A5)))) e^(-x^2), with t = 1 / (1 + P x).
P = 0.3275911
A1, A2, A3, A4, A5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429
# Near 0, Cephes' single-precision polynomials (S. L. Moshier): tanh x = x + x z (T1 + z (T2 + ...)) with z = x^2
# for |x| < 0.625, and erf x = x (E0 + z (E1 + ...)) for |x| < 1.
T1, T2, T3, T4, T5 = -3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2, -5.70498872745e-3
E0, E1, E2, E3 = 1.128379165726710, -3.761262582423300e-1, 1.128358514861418e-1, -2.685381193529856e-2
E4, E5, E6 = 5.188327685732524e-3, -8.010193625184903e-4, 7.853861353153693e-5
# atan, by Cephes' atanf: the argument reduced below tan(pi/8) (through pi/4 or pi/2), then an odd polynomial.
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950
PI, PI_2, PI_4 = math.pi, math.pi / 2, math.pi / 4
A_1, A_2, A_3, A_4 = -3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2


@DeviceFunction
def expf(x):
    return math.exp2(x * LOG2E)


@DeviceFunction
def logf(x):
    return math.log2(x) * LN2


@DeviceFunction
def log10f(x):
    return math.log2(x) * LOG10_2


@DeviceFunction
def log1pf(x):
    """ln(1 + x), as accurate near 0 as elsewhere: with u = 1 + x rounded, ln(u) x / (u - 1), in which the
    rounding of 1 + x cancels (Goldberg's correction), and x itself where 1 + x rounds to 1."""
    u = x + 1.0
    d = u - 1.0
    r = math.log2(u) * LN2
    if d == 0.0:
        r = x
    elif u != math.inf:
        r = r * (x / d)
    return r


@DeviceFunction
def expm1f(x):
    """e^x - 1, as accurate near 0 as elsewhere: with u = e^x rounded, (u - 1) x / ln(u), in which the
    rounding of e^x cancels (Kahan's correction), and x itself where e^x rounds to 1."""
    u = math.exp2(x * LOG2E)
    d = u - 1.0
    r = d
    if d == 0.0:
        r = x
    elif u != math.inf and d != -1.0:
        r = d * (x / (math.log2(u) * LN2))
    return r


@DeviceFunction
def sinhf(x):
    """(e^x - e^-x) / 2, with e^-x as the reciprocal of e^x; below 1 in magnitude, from e^|x| - 1 as
    (m + m / (m + 1)) / 2, which keeps x's digits that e^x - e^-x would cancel."""
    if abs(x) < 1.0:
        m = expm1f(abs(x))
        r = (m + m / (m + 1.0)) * 0.5
        if x < 0.0:
            r = -r
    else:
        e = math.exp2(x * LOG2E)
        r = e * 0.5 + fast_rcp(e) * -0.5
    return r


@DeviceFunction
def coshf(x):
    e = math.exp2(x * LOG2E)
    return e * 0.5 + fast_rcp(e) * 0.5


@DeviceFunction
def tanhf(x):
    """1 - 2 / (e^2x + 1): saturates to +-1 where e^2x overflows or vanishes, with no inf / inf; below 0.625 in
    magnitude, where that cancels x's digits, Cephes' odd polynomial (TANH_NEAR_0). Both are computed and one
    selected, without a branch: lanes on either side of 0.625 stay together (as CUDA's tanhf, branch-free)."""
    z = x * x
    near = (((((T5 * z + T4) * z + T3) * z + T2) * z + T1) * z) * x + x
    far = fast_rcp(math.exp2(x * (2 * LOG2E)) + 1.0) * -2.0 + 1.0
    return near if abs(x) < 0.625 else far


@DeviceFunction
def tanf(x):
    """sin x / cos x, from the special function unit's sine and cosine."""
    return math.sin(x) / math.cos(x)


@DeviceFunction
def atanf(x):
    """atan x by Cephes' atanf (A_1 ... A_4): |x| reduced below tan(pi/8) as -1/|x| plus pi/2 above tan(3pi/8),
    or (|x| - 1)/(|x| + 1) plus pi/4 above tan(pi/8); x's sign, -0 and NaN kept; +-inf gives +-pi/2."""
    a = abs(x)
    big, middle = a > TAN_3PI_8, a > TAN_PI_8
    if big:
        a = -1.0 / a
    elif middle:
        a = (a - 1.0) / (a + 1.0)
    z = a * a
    r = (((A_4 * z + A_3) * z + A_2) * z + A_1) * z * a + a          # float32 throughout: the constants are weak
    if big:
        r = r + PI_2
    elif middle:
        r = r + PI_4
    return -r if x < 0.0 else r if x > 0.0 else x


@DeviceFunction
def atan2f(y, x):
    """The angle of (x, y), C's atan2: atan(y / x) moved into the right quadrant by +-pi, with the signed zeros
    (atan2(-0, -1) is -pi, atan2(0, -0) is pi), infinities (atan2(inf, inf) is pi/4) and NaN of IEEE's rules."""
    negative_y = y < 0.0 or (y == 0.0 and 1.0 / y < 0.0)      # -0 counts as negative, as its sign bit says
    negative_x = x < 0.0 or (x == 0.0 and 1.0 / x < 0.0)
    r = atanf(abs(y) / abs(x))                 # first, so that r is of the arguments' type (the others are weak)
    if negative_x:
        r = PI - r
    if abs(x) == math.inf and abs(y) == math.inf:
        r = PI_4 * 3 if negative_x else PI_4
    elif x == 0.0 or abs(y) == math.inf:
        r = PI_2 if y != 0.0 else (PI if negative_x else 0.0)
    if y != y or x != x:
        r = x + y
    return -r if negative_y else r


@DeviceFunction
def erfc_abs(x):
    """erfc |x|, by Abramowitz and Stegun 7.1.26 (see the constants above)."""
    t = fast_rcp(abs(x) * P + 1.0)
    poly = (((A5 * t + A4) * t + A3) * t + A2) * t + A1
    return poly * t * math.exp2(x * x * -LOG2E)


@DeviceFunction
def erff(x):
    """1 - erfc |x| with x's sign; below 1 in magnitude, where that would leave an absolute error of 1.5e-7 (all
    of a small erf's digits), Cephes' x P(x^2) (ERF_NEAR_0). Both are computed and one selected, without a
    branch (as `tanhf`)."""
    z = x * x
    near = ((((((E6 * z + E5) * z + E4) * z + E3) * z + E2) * z + E1) * z + E0) * x
    e = 1.0 - erfc_abs(x)
    far = -e if x < 0.0 else e
    return near if abs(x) < 1.0 else far


@DeviceFunction
def erfcf(x):
    e = erfc_abs(x)
    return 2.0 - e if x < 0.0 else e


@DeviceFunction
def hypotf(x, y):
    """sqrt(x^2 + y^2), which overflows where x^2 or y^2 does (there is no scaling)."""
    return math.sqrt(y * y + x * x)


@DeviceFunction
def powf(x, y):
    """x^y as 2^(y log2 |x|), with C's signs and exact cases (`pow_signs`)."""
    return pow_signs(x, y, math.exp2(math.log2(abs(x)) * y))


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


@DeviceFunction
def asinf(x):
    """asin x as atan2(x, sqrt((1 - x)(1 + x))): NaN beyond [-1, 1] (the root of a negative)."""
    return atan2f(x, math.sqrt((1.0 - x) * (1.0 + x)))


@DeviceFunction
def acosf(x):
    """acos x as atan2(sqrt((1 - x)(1 + x)), x)."""
    return atan2f(math.sqrt((1.0 - x) * (1.0 + x)), x)


@DeviceFunction
def fmodf(x, y):
    """C's fmod, exactly: x - n y for n the quotient truncated, with x's sign (a zero result too); NaN for y = 0,
    an infinite x or a NaN, x for an infinite y. In float64, |x| loses the largest y 2^k not above it until it is
    below |y|: each subtraction is exact (Sterbenz), so no quotient, however large, is rounded."""
    a, b = abs(float64(x)), abs(float64(y))
    r = math.nan
    if b == math.inf and a != math.inf:
        r = a
    elif b > 0.0 and a != math.inf and a == a:
        while a >= b:
            t = b * pow2(int64(math.floor(log(a / b) * LOG2E)))
            if t > a:
                t = t * 0.5
            elif t * 2.0 <= a:
                t = t * 2.0
            a = a - t
        r = a
    if x < 0.0 or (x == 0.0 and 1.0 / x < 0.0):
        r = -r
    return float32(r)


# tgamma by Lanczos' approximation (g = 7, nine coefficients, as in Numerical Recipes and Boost), in float64
LANCZOS_G = 7.0
L0, L1, L2, L3 = 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313
L4, L5, L6 = -176.61502916214059, 12.507343278686905, -0.13857109526572012
L7, L8 = 9.9843695780195716e-6, 1.5056327351493116e-7
SQRT_2PI = math.sqrt(2 * math.pi)


@DeviceFunction
def lanczos_sum(z):
    """Lanczos' series at z = x - 1 (x >= 1/2): L0 + sum of Lk / (z + k)."""
    return (L0 + L1 / (z + 1.0) + L2 / (z + 2.0) + L3 / (z + 3.0) + L4 / (z + 4.0) + L5 / (z + 5.0)
            + L6 / (z + 6.0) + L7 / (z + 7.0) + L8 / (z + 8.0))


@DeviceFunction
def tgammaf(x):
    """Gamma(x) from Lanczos' approximation in float64 (reflected below 1/2: pi / (sin(pi x) Gamma(1 - x))), then
    rounded to float32: inf at 0 (with 0's sign) and past float32's range, NaN at the negative integers."""
    v = float64(x)
    r = math.nan
    if v == 0.0:
        r = math.inf if 1.0 / v > 0.0 else -math.inf
    elif v == math.inf:
        r = v
    elif v > 0.0 or math.floor(v) != v:
        w = v if v >= 0.5 else 1.0 - v
        z = w - 1.0
        t = z + LANCZOS_G + 0.5
        g = SQRT_2PI * exp((z + 0.5) * log(t) - t) * lanczos_sum(z)
        r = g if v >= 0.5 else PI / (sin_pi(v) * g)
    return float32(r)


@DeviceFunction
def sin_pi(v):
    """sin(pi v) from the nearest integer n: (-1)^n sin(pi (v - n)), whose argument is at most pi / 2, so the
    special function unit's sine keeps its digits near v's integers (the poles of Gamma's reflection)."""
    n = math.floor(v + 0.5)
    r = float64(math.sin(float32(PI * (v - n))))
    if n % 2.0 != 0.0:
        r = -r
    return r


@DeviceFunction
def lgammaf(x):
    """ln |Gamma(x)|, in float64 from Lanczos' approximation in logarithms (finite where Gamma itself overflows),
    reflected below 1/2; inf at 0 and at the negative integers, as C's."""
    v = float64(x)
    r = math.inf
    if v != v:
        r = v
    elif v != math.inf and (v > 0.0 or math.floor(v) != v):
        w = v if v >= 0.5 else 1.0 - v
        z = w - 1.0
        t = z + LANCZOS_G + 0.5
        r = (z + 0.5) * log(t) - t + log(SQRT_2PI * lanczos_sum(z))
        if v < 0.5:
            r = log(PI / abs(sin_pi(v))) - r
    return float32(r)


# -- numba.cuda's bit and warp intrinsics that CUDA's headers build from instructions (here: from the kernel
# language); exported by lapis.cuda under numba's names -----------------------------------------------------
@DeviceFunction
def popc(x):
    """The number of set bits of a 32- or 64-bit integer (numba's cuda.popc, CUDA's __popc), one bit at a time,
    over the bits of x's type: a one of that type shifted by 32 is 0 in 32 bits (shifts past the width give 0)."""
    n = 0
    one = (x ^ x) + 1
    bits = 64 if one << 32 != 0 else 32
    for k in range(bits):
        n += (x >> k) & 1
    return n


@DeviceFunction
def brev(x):
    """The 32 bits of x in reverse order (cuda.brev, __brev)."""
    r = uint32(0)
    v = uint32(x)
    for k in range(32):
        r = (r << uint32(1)) | ((v >> uint32(k)) & uint32(1))
    return r


@DeviceFunction
def clz(x):
    """The number of leading zero bits of x as 32 bits (cuda.clz, __clz): 32 for 0."""
    v = uint32(x)
    n = 32
    while v != uint32(0):
        v = v >> uint32(1)
        n -= 1
    return n


@DeviceFunction
def ffs(x):
    """The position of x's lowest set bit, counting from 1 (cuda.ffs, __ffs): 0 for 0."""
    v = uint32(x)
    n = 0
    if v != uint32(0):
        n = 1
        while v & uint32(1) == uint32(0):
            v = v >> uint32(1)
            n += 1
    return n


@DeviceFunction
def fma(a, b, c):
    """a b + c with one rounding (cuda.fma): the product of two float32s is exact in float64, so the float64 sum
    rounded to float32 is the fused result (but where that double rounding lands on a tie); float64 operands
    take the ISA's multiply-add."""
    return float32(float64(a) * float64(b) + float64(c))


@DeviceFunction
def selp(test, a, b):
    """a where test holds, else b (cuda.selp, PTX's selp): one select, no branch."""
    return a if test else b


@DeviceFunction
def cbrt(x):
    """The real cube root (cuda.cbrt): the special function unit's 2^(log2|x| / 3), refined by one Newton step,
    with x's sign; 0, inf and NaN as they are."""
    r = x
    if x != 0.0 and abs(x) != math.inf and x == x:
        a = abs(x)
        y = math.exp2(math.log2(a) / 3.0)
        y = y - (y * y * y - a) / (3.0 * y * y)
        r = -y if x < 0.0 else y
    return r


@DeviceFunction
def activemask():
    """The lanes of the warp running this call (cuda.activemask): a ballot of every active lane."""
    return ballot_sync(0xFFFFFFFF, True)


@DeviceFunction
def lanemask_lt():
    """The bits of the lanes below this one (cuda.lanemask_lt)."""
    return uint32((1 << laneid) - 1)


@DeviceFunction
def match_any_sync(mask, value):
    """The lanes of mask whose value equals this lane's (cuda.match_any_sync): one shuffle per lane."""
    same = uint32(0)
    for lane in range(32):
        if shfl_sync(mask, value, lane) == value and (mask >> lane) & 1:
            same |= uint32(1) << uint32(lane)
    return same


@DeviceFunction
def match_all_sync(mask, value):
    """(mask, True) when every lane of mask holds the same value, else (0, False) (cuda.match_all_sync)."""
    equal = all_sync(mask, shfl_sync(mask, value, ffs(mask) - 1) == value)
    return (uint32(mask) if equal else uint32(0)), equal


@DeviceFunction
def eq_sync(mask, predicate):
    """Whether the predicate is the same in every lane of mask (cuda.eq_sync)."""
    votes = ballot_sync(mask, predicate)
    return votes == uint32(0) or votes == uint32(mask)


@DeviceFunction
def syncthreads_count(predicate):
    """A barrier that also counts the block's threads whose predicate holds (cuda.syncthreads_count, CUDA's
    __syncthreads_count): a shared counter zeroed by thread 0, atomic adds between two barriers, read after, and
    a third barrier so that a next call's zeroing cannot overtake a slow reader."""
    counter = shared.array(1, int32)
    if threadIdx.x == 0 and threadIdx.y == 0 and threadIdx.z == 0:
        counter[0] = 0
    syncthreads()
    if predicate:
        atomic.add(counter, 0, 1)
    syncthreads()
    n = counter[0]
    syncthreads()
    return n


@DeviceFunction
def syncthreads_and(predicate):
    """A barrier returning 1 when the predicate holds in every thread of the block, else 0."""
    return 1 if syncthreads_count(predicate) == blockDim.x * blockDim.y * blockDim.z else 0


@DeviceFunction
def syncthreads_or(predicate):
    """A barrier returning 1 when the predicate holds in some thread of the block, else 0."""
    return 1 if syncthreads_count(predicate) > 0 else 0


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
        e = int64(0)
        while x > BIG:
            x = x * SMALL
            e = e + 60
        while x < SMALL:
            x = x * BIG
            e = e - 60
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
    return r if abs(x) < LARGE else float64(tanf(float32(x))) + x * 0.0


# -- atomics the ISA has no instruction for: compare-and-swap loops, as CUDA compiles them on GPUs without one --
def _cas_loop(update: str) -> DeviceFunction:
    """atomic.<update>(ary, index, value) as a compare-and-swap loop, returning the old value: `update` picks the
    new value from the old (a compile-time constant: the inlined loop keeps its branch only). inc is CUDA's
    atomicInc (0 once the old value reaches `value`, else one more), dec its atomicDec (`value` when the old value
    is 0 or above it, else one less)."""
    UPDATE = update

    def atomic_update(ary, index, value):
        old = ary[index]
        while True:
            if UPDATE == "and":
                new = old & value
            elif UPDATE == "or":
                new = old | value
            elif UPDATE == "xor":
                new = old ^ value
            elif UPDATE == "inc":
                new = 0 if old >= value else old + 1
            else:
                new = value if old == 0 or old > value else old - 1
            seen = atomic.cas(ary, index, old, new)
            if seen == old:
                return old
            old = seen
    return DeviceFunction(atomic_update)


ATOMIC_UPDATES = {update: _cas_loop(update) for update in ("and", "or", "xor", "inc", "dec")}
