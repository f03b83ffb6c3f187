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
converted to float32 for the call and the result converted back. float64's `sqrt`, `exp`, `log`, `log10`, `pow`,
`sin`, `cos` and `tan` are float64 functions in `libdevice64.py`, computed in float64 (within a few ulps; pow
within 2 |y ln x| more; sin, cos and tan for |x| below 2^20 pi/2, losing digits beyond); the rest of math on
float64 is built on those in `libdevice64_derived.py` (log2, log1p, expm1, the hyperbolic functions and their
inverses, cbrt, atan, atan2, asin, acos, hypot, fmod, gamma, lgamma, exp2, erf, erfc), so no float64 math goes
through float32 (see docs/layer3-programming-interface.md).
"""

import math

from numpy import float32, float64, int32, uint32, uint64

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
from lapis.cuda.libdevice64 import LOG2E, pow_signs  # float64's, which some float32 ones use

LN2 = 0.6931471805599453                # ln(2): ln x is log2(x) ln 2
LOG10_2 = math.log10(2)
# erfc a (a = |x|) as e^(-a^2) erfcx(a), erfcx the scaled complementary error function (as float64's erfc in
# libdevice64_derived.py): (1 + 2a) erfcx(a) rises smoothly from 1 to 2 / sqrt(pi), and in y = (a - 2) / (a + 2) it is
# F0 + y (F1 + y (F2 + ...)) to within 2e-8 up to ERFCF_ZERO (Chebyshev's interpolation on that stretch of y,
# computed at 50 digits with mpmath and rewritten in powers of y). e^(-a^2) is 2^-(n + f), with a^2 log2(e) = n + f
# (n an integer, |f| <= 1/2) computed in float64: in float32 the product's rounding alone would cost 1e-5 near 10.
F0, F1, F2, F3 = 1.2769783880678627, -0.09276399307024008, -0.16603108025094307, 0.16405558724790958
F4, F5, F6 = -0.05420768652062406, -0.008061872734149681, 0.008642424213068092
F7, F8, F9 = 0.001320734003771549, -0.0012407702068514298, -0.000409181789036338
ERFCF_ZERO = 10.1               # erfc x < 2^-150 from here: it rounds to 0 in float32
# erf needs erfc's absolute accuracy only (erf rounds to +-1 once erfc is below 2^-25): for it, Abramowitz and
# Stegun 7.1.26, erfc x = t (A1 + t (A2 + t (A3 + t (A4 + t A5)))) e^(-x^2) with t = 1 / (1 + P x), absolute error
# below 1.5e-7, five terms where the polynomial above takes ten (GELU calls erf in every transformer's MLP).
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
    near = x if z == 0 else near           # +-0 (and x^2 below the smallest float) is its own tanh: -0 + 0 is +0
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
    # (constants assigned one by one: a conditional expression of two literals would be a float64, and widen r)
    if abs(x) == math.inf and abs(y) == math.inf:
        r = PI_4
        if negative_x:
            r = PI_4 * 3
    elif x == 0.0 or abs(y) == math.inf:
        r = PI_2
        if y == 0.0:
            r = 0.0
            if negative_x:
                r = PI
    if y != y or x != x:
        r = x + y
    return -r if negative_y else r


@DeviceFunction
def erfcx_scaled(a):
    """erfcx(a) = e^(a^2) erfc a for a >= 0, from its polynomial in y = (a - 2) / (a + 2) (see the constants above);
    its two quotients are MUFU reciprocals (an ulp or so costs nothing here)."""
    y = (a - 2.0) * fast_rcp(a + 2.0)
    p = ((((((((F9 * y + F8) * y + F7) * y + F6) * y + F5) * y + F4) * y + F3) * y + F2) * y + F1) * y + F0
    return p * fast_rcp(a * 2.0 + 1.0)


@DeviceFunction
def erfc_abs(x):
    """erfc |x| to float32's relative accuracy down its tail: 2^-f erfcx(|x|), then times 2^-n (exact, so the result
    rounds once, where it is subnormal); 0 from ERFCF_ZERO on (and at +-inf), NaN for NaN."""
    a = abs(x)
    t = float64(a) * float64(a) * LOG2E
    n = math.floor(t + 0.5)
    e = math.exp2(-float32(t - n)) * erfcx_scaled(a) * math.exp2(float32(-n))
    return 0.0 if a > ERFCF_ZERO else e


@DeviceFunction
def erff(x):
    """1 - erfc |x| with x's sign; below 1 in magnitude, where that difference would cancel a small erf's digits,
    Cephes' x P(x^2) (E0 to E6). Both are computed and one selected, without a branch (as `tanhf`). Here erfc |x|
    needs only absolute accuracy: Abramowitz and Stegun's (see the constants above), e^(-x^2) one MUFU.EX2."""
    z = x * x
    near = ((((((E6 * z + E5) * z + E4) * z + E3) * z + E2) * z + E1) * z + E0) * x
    t = fast_rcp(abs(x) * P + 1.0)
    e = 1.0 - (((((A5 * t + A4) * t + A3) * t + A2) * t + A1) * t) * math.exp2(z * -LOG2E)
    far = -e if x < 0.0 else e
    return near if abs(x) < 1.0 else far


@DeviceFunction
def erfcf(x):
    e = erfc_abs(x)
    return 2.0 - e if x < 0.0 else e


@DeviceFunction
def powf(x, y):
    """x^y as 2^(y log2 |x|), with C's signs and exact cases (`pow_signs`)."""
    return pow_signs(x, y, math.exp2(math.log2(abs(x)) * y))


@DeviceFunction
def asinf(x):
    """asin x as atan2(x, sqrt((1 - x)(1 + x))): NaN beyond [-1, 1] (the root of a negative)."""
    return atan2f(x, math.sqrt((1.0 - x) * (1.0 + x)))


@DeviceFunction
def acosf(x):
    """acos x as atan2(sqrt((1 - x)(1 + x)), x)."""
    return atan2f(math.sqrt((1.0 - x) * (1.0 + x)), x)


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


# brev, clz and ffs of 32- and 64-bit integers (numba's cuda.brev, clz, ffs; CUDA's __brev/__brevll, __clz/__clzll,
# __ffs/__ffsll): one source for both widths; calls.py picks the functions of the argument's width.
def _bit_functions(unsigned, width: int) -> tuple[DeviceFunction, DeviceFunction, DeviceFunction]:
    """brev, clz and ffs of x taken as `width` bits (`unsigned` is uint32 or uint64): its bits reversed (unsigned),
    its leading zero bits (`width` for 0), the position of its lowest set bit from 1 (0 for 0)."""
    U, WIDTH = unsigned, width

    def brev(x):
        r = U(0)
        v = U(x)
        for k in range(WIDTH):
            r = (r << U(1)) | ((v >> U(k)) & U(1))
        return r

    def clz(x):
        v = U(x)
        n = WIDTH
        while v != U(0):
            v = v >> U(1)
            n -= 1
        return n

    def ffs(x):
        v = U(x)
        n = 0
        if v != U(0):
            n = 1
            while v & U(1) == U(0):
                v = v >> U(1)
                n += 1
        return n
    return DeviceFunction(brev), DeviceFunction(clz), DeviceFunction(ffs)


brev32, clz32, ffs32 = _bit_functions(uint32, 32)
brev64, clz64, ffs64 = _bit_functions(uint64, 64)


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
    """The active lanes of mask whose value equals this lane's (cuda.match_any_sync): one shuffle per lane (a lane
    past the block's last thread, or exited, is not active: its shuffle would read this lane's own value)."""
    same = uint32(0)
    active = activemask()
    for lane in range(32):
        if shfl_sync(mask, value, lane) == value and (mask >> lane) & (active >> lane) & 1:
            same |= uint32(1) << uint32(lane)
    return same


@DeviceFunction
def match_all_sync(mask, value):
    """(the active lanes of mask, True) when they all hold the same value, else (0, False) (cuda.match_all_sync)."""
    lanes = uint32(mask) & activemask()
    equal = all_sync(mask, shfl_sync(mask, value, ffs32(lanes) - 1) == value)
    return (lanes if equal else uint32(0)), equal


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


# -- atomics the ISA cannot do in one instruction: compare-and-swap loops, as CUDA compiles them on GPUs without one --
def _cas_loop(update: str) -> DeviceFunction:
    """atomic.<update>(ary, index, value) of int64 as a compare-and-swap loop, returning the old value (the ISA's
    64-bit INC and DEC compare unsigned): `update` picks the new value from the old (a compile-time constant: the
    inlined loop keeps its branch only). inc is CUDA's atomicInc (0 once the old value reaches `value`, else one
    more), dec its atomicDec (`value` when the old value is 0 or above it, else one less)."""
    UPDATE = update

    def atomic_update(ary, index, value):
        old = ary[index]
        while True:
            if UPDATE == "inc":
                new = 0 if old >= value else old + 1
            else:
                new = value if old == 0 or old > value else old - 1
            seen = atomic.cas(ary, index, old, new)
            if seen == old:
                return old
            old = seen
    return DeviceFunction(atomic_update)


ATOMIC_UPDATES = {update: _cas_loop(update) for update in ("inc", "dec")}      # of int64 (the ISA's are unsigned)
