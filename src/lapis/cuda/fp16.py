"""Layer 3: `cuda.fp16`, numba.cuda's half-precision intrinsics (CUDA's `__hadd`, `__hfma`, `hexp`, ...).

    @cuda.jit
    def axpy(a, x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = cuda.fp16.hfma(a, x[i], y[i])

Each is a device function on float16 values that returns float16 (the comparisons a bool), computed as the
kernel language computes half precision: in float32, rounded back to float16 once. float32 has more than twice
float16's precision and two bits (24 >= 2 * 11 + 2), so rounding an exact result to float32 and then to float16
gives the correctly rounded float16 result: `hadd`, `hsub`, `hmul`, `hdiv`, `hsqrt` and `hfma` (whose product of
two halves is exact in float32, so a b + c rounds once to float32) are correctly rounded, as CUDA's are. The
transcendental ones (`hexp`, `hlog`, `hsin`, ...) carry libdevice's float32 accuracy, rounded to float16.
`hmax` and `hmin` return the other operand when one is NaN, as CUDA's `__hmax` and `__hmin` do.
"""

import math

from numpy import float16, float32

from lapis.cuda.compiler.device_function import DeviceFunction


@DeviceFunction
def hadd(a, b):
    return float16(float32(a) + float32(b))


@DeviceFunction
def hsub(a, b):
    return float16(float32(a) - float32(b))


@DeviceFunction
def hmul(a, b):
    return float16(float32(a) * float32(b))


@DeviceFunction
def hdiv(a, b):
    return float16(float32(a) / float32(b))


@DeviceFunction
def hfma(a, b, c):
    return float16(float32(a) * float32(b) + float32(c))


@DeviceFunction
def hneg(a):
    return float16(-float32(a))


@DeviceFunction
def habs(a):
    return float16(abs(float32(a)))


@DeviceFunction
def hsqrt(a):
    return float16(math.sqrt(float32(a)))


@DeviceFunction
def hrsqrt(a):
    return float16(1.0 / math.sqrt(float32(a)))


@DeviceFunction
def hrcp(a):
    return float16(1.0 / float32(a))


@DeviceFunction
def hexp(a):
    return float16(math.exp(float32(a)))


@DeviceFunction
def hexp2(a):
    return float16(math.exp2(float32(a)))


@DeviceFunction
def hexp10(a):
    return float16(math.pow(float32(10.0), float32(a)))


@DeviceFunction
def hlog(a):
    return float16(math.log(float32(a)))


@DeviceFunction
def hlog2(a):
    return float16(math.log2(float32(a)))


@DeviceFunction
def hlog10(a):
    return float16(math.log10(float32(a)))


@DeviceFunction
def hsin(a):
    return float16(math.sin(float32(a)))


@DeviceFunction
def hcos(a):
    return float16(math.cos(float32(a)))


@DeviceFunction
def hfloor(a):
    return float16(math.floor(float32(a)))


@DeviceFunction
def hceil(a):
    return float16(math.ceil(float32(a)))


@DeviceFunction
def htrunc(a):
    return float16(math.trunc(float32(a)))


@DeviceFunction
def hmax(a, b):
    return float16(max(float32(a), float32(b)))


@DeviceFunction
def hmin(a, b):
    return float16(min(float32(a), float32(b)))


@DeviceFunction
def heq(a, b):
    return float32(a) == float32(b)


@DeviceFunction
def hne(a, b):
    return float32(a) != float32(b)


@DeviceFunction
def hgt(a, b):
    return float32(a) > float32(b)


@DeviceFunction
def hge(a, b):
    return float32(a) >= float32(b)


@DeviceFunction
def hlt(a, b):
    return float32(a) < float32(b)


@DeviceFunction
def hle(a, b):
    return float32(a) <= float32(b)
