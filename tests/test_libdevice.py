"""Layer 3: libdevice, the kernel language's math library written in the kernel language, and the
math functions the hardware does in one instruction, against numpy and Python's math over many
inputs: zeros of both signs, infinities, NaN, tiny and huge values."""

import math

import mpmath
import numpy as np
import pytest

from lapis import cuda
from lapis.cuda import libdevice, libdevice64, libdevice64_derived
from lapis.cuda.compiler import cache, calls

rng = np.random.default_rng(11)
EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 1e-30, -1e-30, 1e-7, 0.5, 1.0, -1.0,
                  2.0, 3.0, -3.0, 10.0, 88.0, -88.0, -104.0, 1e10, -1e10, 1e30, 3e38, -3e38], np.float32)
X = np.concatenate([EDGES, rng.uniform(-10, 10, 300), rng.uniform(-100, 100, 100),
                    np.exp(rng.uniform(-80, 80, 100)) * rng.choice([-1, 1], 100)]).astype(np.float32)
Y = np.concatenate([EDGES[::-1], rng.uniform(-10, 10, 300), np.round(rng.uniform(-20, 20, 100)),
                    rng.uniform(-3, 3, 100)]).astype(np.float32)

TINY = 3e-45              # float32's subnormal spacing, twice: relative accuracy down to the smallest numbers
# name: (the function, numpy's, rtol, atol), with what each formula costs in float32 (see libdevice.py); the
# functions that are x plus a little near 0 (log1p, expm1, tanh, sinh, erf) keep x's digits there
UNARY = {
    "sqrt": (math.sqrt, np.sqrt, 1e-6, 0), "exp": (math.exp, np.exp, 1e-5, 1e-38),
    "log": (math.log, np.log, 1e-6, 1e-7), "sin": (math.sin, np.sin, 1e-6, 1e-7),
    "cos": (math.cos, np.cos, 1e-6, 1e-7), "fabs": (math.fabs, np.abs, 0, 0),
    "floor": (math.floor, np.floor, 0, 0), "ceil": (math.ceil, np.ceil, 0, 0), "trunc": (math.trunc, np.trunc, 0, 0),
    "tanh": (math.tanh, np.tanh, 1e-6, TINY), "exp2": (math.exp2, np.exp2, 1e-6, 1e-38),
    "log2": (math.log2, np.log2, 1e-6, 1e-7), "log10": (math.log10, np.log10, 1e-6, 1e-7),
    "log1p": (math.log1p, np.log1p, 1e-6, TINY), "expm1": (math.expm1, np.expm1, 1e-5, TINY),
    "sinh": (math.sinh, np.sinh, 1e-5, TINY), "cosh": (math.cosh, np.cosh, 1e-5, 1e-7),
    "erf": (math.erf, np.vectorize(math.erf), 1e-6, TINY), "atan": (math.atan, np.arctan, 1e-6, TINY),
    "tan": (math.tan, np.tan, 1e-5, 1e-6), "erfc": (math.erfc, np.vectorize(math.erfc), 1e-6, TINY),
}


def elementwise(fn):
    """A kernel writing fn(x[i]) for each element."""
    def apply(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = fn(x[i])
    return cuda.jit(apply)


@cuda.jit
def binary(x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = x[i] ** y[i]
        out[i, 1] = math.pow(x[i], y[i])
        out[i, 2] = math.hypot(x[i], y[i])
        out[i, 3] = math.atan2(x[i], y[i])


def run(fn, x):
    out = cuda.device_array(x.size, x.dtype)
    elementwise(fn)[(x.size + 127) // 128, 128](cuda.to_device(x), out)
    return out.copy_to_host()


def reference(fn, *args):
    """fn in float64, rounded to the arguments' type."""
    with np.errstate(all="ignore"):
        return fn(*(a.astype(np.float64) for a in args)).astype(args[0].dtype)


def assert_close(got, want, rtol, atol, where, x=X):
    ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True) | (got == want)
    bad = np.flatnonzero(~ok)
    assert not bad.size, f"{where}: {[(float(x[k]), float(got[k]), float(want[k])) for k in bad[:5]]}"


@pytest.mark.parametrize("name", UNARY)
def test_each_math_function_matches_numpy_in_float32(name):
    fn, numpy_fn, rtol, atol = UNARY[name]
    got = run(fn, X)
    want = reference(numpy_fn, X)
    keep = np.ones(X.size, bool)
    if name in ("sinh", "cosh"):
        keep = np.abs(X) < 88.7          # e^x itself overflows float32 before sinh and cosh do
    assert_close(got[keep], want[keep], rtol, atol, name, X[keep])


def test_float64_and_half_arguments_are_computed_in_float32():
    """...but for float64's own functions (`calls.LIBDEVICE_FLOAT64`, tested below)."""
    x = np.concatenate([rng.uniform(-10, 10, 200), EDGES[np.isfinite(EDGES) & (np.abs(EDGES) < 6e4)]])
    x = x.astype(np.float32).astype(np.float64)          # the same numbers in each type
    for name, (fn, numpy_fn, rtol, atol) in UNARY.items():
        got64, got32 = run(fn, x.astype(np.float64)), run(fn, x.astype(np.float32))
        if name not in calls.LIBDEVICE_FLOAT64:
            assert np.array_equal(got64, got32.astype(np.float64), equal_nan=True), name  # float32's, widened
        want = reference(numpy_fn, x.astype(np.float16))
        assert_close(run(fn, x.astype(np.float16)), want, max(rtol, 2e-3), max(atol, 2e-3), f"{name} in float16", x)


X64 = np.concatenate([np.abs(rng.standard_normal(1000)) * 10.0 ** rng.integers(-300, 300, 1000),
                      rng.uniform(-750, 720, 1000), rng.uniform(-2, 2, 300),
                      [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 1.7e308, 1.0, 709.78, 709.79,
                       -745.1, -745.2, 0.5, 2.0, 1 + 2 ** -52, 1 - 2 ** -53]])
# name: (the function, numpy's (for IEEE's special values), mpmath's, its ulps at most, measured over X64 and the
# test's extra points)
FLOAT64 = {"sqrt": (math.sqrt, np.sqrt, mpmath.sqrt, 1), "exp": (math.exp, np.exp, mpmath.exp, 3),
           "log": (math.log, np.log, mpmath.log, 1), "log10": (math.log10, np.log10, mpmath.log10, 1),
           # libdevice64_derived.py
           "log2": (math.log2, np.log2, lambda v: mpmath.log(v, 2), 1),
           "log1p": (math.log1p, np.log1p, mpmath.log1p, 2), "expm1": (math.expm1, np.expm1, mpmath.expm1, 3),
           "sinh": (math.sinh, np.sinh, mpmath.sinh, 5), "cosh": (math.cosh, np.cosh, mpmath.cosh, 5),
           "tanh": (math.tanh, np.tanh, mpmath.tanh, 4), "asinh": (math.asinh, np.arcsinh, mpmath.asinh, 2),
           "acosh": (math.acosh, np.arccosh, mpmath.acosh, 2), "atanh": (math.atanh, np.arctanh, mpmath.atanh, 2),
           "cbrt": (math.cbrt, np.cbrt, lambda v: mpmath.sign(v) * mpmath.cbrt(abs(v)), 1),     # the real root
           "atan": (math.atan, np.arctan, mpmath.atan, 2),
           "asin": (math.asin, np.arcsin, mpmath.asin, 2), "acos": (math.acos, np.arccos, mpmath.acos, 3),
           "exp2": (math.exp2, np.exp2, lambda v: mpmath.power(2, v), 1)}


def correctly_rounded(numpy_fn, mp_fn, x: np.ndarray) -> np.ndarray:
    """numpy_fn(x) where that is not finite or is zero (IEEE 754's special values, overflow and underflow), elsewhere
    mp_fn's value to 60 digits rounded once to float64: numpy's, the host libm's, were up to 3 ulps off on some
    hosts (cbrt at 4.83e-30, log10 at 0.587), so a test against them passed or failed with the machine."""
    with np.errstate(all="ignore"):
        want = numpy_fn(x)
    with mpmath.workdps(60):
        for k in np.flatnonzero(np.isfinite(want) & (want != 0)):
            want[k] = float(mp_fn(mpmath.mpf(float(x[k]))))
    return want


BINARY_64 = {"hypot", "atan2", "fmod"}
GAMMA_64 = {"gamma", "lgamma"}                        # relative bounds of their own (test_float64_gamma_...)
ERF_64 = {"erf", "erfc"}                              # over ranges of their own (test_float64_erf_...)


TRIG = {"sin", "cos", "tan"}


@pytest.mark.parametrize("name", sorted(set(calls.LIBDEVICE_FLOAT64) - {"pow"} - TRIG - BINARY_64 - GAMMA_64 - ERF_64))
def test_float64_functions_are_accurate_in_float64(name):
    """Each float64 function of one argument computed in float64 (sqrt, exp, log, log10, and those built on them):
    within FLOAT64's ulps of the correctly rounded value over magnitudes from subnormals to 1e308 (exp over its
    whole finite range and past it) and across (-3, 3), IEEE 754's special values exact (0, -0, negatives,
    infinities, NaN, overflow to inf and underflow to 0)."""
    fn, numpy_fn, mp_fn, most = FLOAT64[name]
    near = np.random.default_rng(64)
    x = np.concatenate([X64, near.uniform(-1, 1, 500), near.uniform(1, 3, 200), 10.0 ** near.uniform(-20, 0, 300)])
    got = run(fn, x)
    want = correctly_rounded(numpy_fn, mp_fn, x)
    exact = (got == want) | (np.isnan(got) & np.isnan(want))
    inexact = ~exact
    assert np.isfinite(want[inexact]).all() and (want[inexact] != 0).all(), x[inexact & ~np.isfinite(want)]
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    ulps = np.abs(got[inexact] - want[inexact]) / np.spacing(np.abs(want[inexact]))
    assert ulps.max(initial=0) <= most, x[inexact][np.argmax(ulps)]
    assert run(fn, np.float32(X64[1500:1600])).dtype == np.float32         # float32 keeps its own functions


@pytest.mark.parametrize("name", sorted(TRIG))
def test_float64_sin_cos_and_tan_are_accurate_in_float64(name):
    """float64 sin and cos within an ulp of numpy's, tan within two, for |x| below 2^20 pi/2 (fdlibm's reduction
    by pi/2 in three parts): near multiples of pi/2, where the reduction cancels most digits, from 1e-300 up,
    with the sign of zero kept and NaN at infinities and NaN; beyond, digits go (1e-9 at 1e7, and from 2^40 the
    float32 functions answer, as `libdevice64.LARGE` says)."""
    fn, numpy_fn, _, _ = UNARY[name]
    near = np.pi / 2 * rng.integers(-600000, 600000, 400) + rng.uniform(-1e-9, 1e-9, 400)
    x = np.concatenate([rng.uniform(-10, 10, 1000), rng.uniform(-1.6e6, 1.6e6, 1000), near,
                        10.0 ** rng.uniform(-300, 0, 200), [0.0, -0.0, np.pi, -np.pi / 2, 5e-324]])
    got, want = run(fn, x), numpy_fn(x)
    ulps = np.abs(got - want) / np.spacing(np.abs(want))
    assert ulps.max() <= (2 if name == "tan" else 1), x[np.argmax(ulps)]
    assert np.array_equal(np.signbit(got[x == 0]), np.signbit(x[x == 0]) if name != "cos" else [False, False])
    assert np.isnan(run(fn, np.array([np.inf, -np.inf, np.nan]))).all()
    far = rng.uniform(1e7, 1e10, 200)
    want = numpy_fn(far)                                # an error in the argument, times the slope (tan's 1 + tan^2)
    assert (np.abs(run(fn, far) - want) / (1 + want * want)).max() < 1e-6


BINARY_64_ULPS = {"hypot": 2, "atan2": 3, "fmod": 0}     # fmod is exact


@cuda.jit
def binary_64(x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = math.hypot(x[i], y[i])
        out[i, 1] = math.atan2(x[i], y[i])
        out[i, 2] = math.fmod(x[i], y[i])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hypot_atan2_and_fmod_keep_their_type_s_accuracy_and_c_s_special_values(dtype):
    """float64 hypot, atan2 and fmod computed in float64 (`libdevice64_derived.py`), within BINARY_64_ULPS of
    numpy's (fmod exact, as a long division), and float32's within an ulp or two; both over magnitudes from 1e-300
    (1e-38) to 1e300 (1e38), where hypot must not overflow, and over every pair of C's special values (signed
    zeros, infinities, NaN), which must come out as numpy's, signs of zeros included."""
    near = np.random.default_rng(2)
    big = 300 if dtype == np.float64 else 37
    sizes = 10.0 ** near.uniform(-big, big, (2, 400)) * near.choice([-1, 1], (2, 400))
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -3.0, np.inf, -np.inf, np.nan, 1e-30, 1e30])
    x = np.concatenate([near.uniform(-5, 5, 400), sizes[0], np.repeat(special, special.size)]).astype(dtype)
    y = np.concatenate([near.uniform(-5, 5, 400), sizes[1], np.tile(special, special.size)]).astype(dtype)
    out = cuda.device_array((x.size, 3), dtype)
    binary_64[(x.size + 127) // 128, 128](cuda.to_device(x), cuda.to_device(y), out)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        wants = [np.hypot(x, y), np.arctan2(x, y), np.fmod(x, y)]
    for k, (name, want) in enumerate(zip(BINARY_64_ULPS, wants, strict=True)):
        g = got[:, k]
        exact = (g == want) & (np.signbit(g) == np.signbit(want)) | (np.isnan(g) & np.isnan(want))
        assert np.isfinite(want[~exact]).all() and (want[~exact] != 0).all(), (name, x[~exact][:3], y[~exact][:3])
        ulps = np.abs(g[~exact] - want[~exact]) / np.spacing(np.abs(want[~exact]))
        most = BINARY_64_ULPS[name] if dtype == np.float64 else 2
        assert ulps.max(initial=0) <= most, (name, x[~exact][np.argmax(ulps)], y[~exact][np.argmax(ulps)])


def test_float64_pow_is_accurate_in_float64_with_c_signs():
    """x ** y of float64s within 2 |y ln x| + 4 ulps of numpy's (exactly rounded products for |y| up to 3), with powf's
    signs for negative bases and -0 and C's exact cases."""
    x = np.concatenate([np.abs(rng.standard_normal(400)) * 10.0 ** rng.integers(-20, 20, 400),
                        -np.abs(rng.standard_normal(100)), [-2.0, -2.0, -0.5, -0.0, -0.0, 0.0, np.nan, 1.0, -1.0]])
    y = np.concatenate([rng.uniform(-8, 8, 300), rng.choice([1.0, 2.0, 3.0, -1.0, -2.0, 0.5], 100),
                        np.round(rng.uniform(-6, 6, 100)), [3.0, 2.0, -3.0, -3.0, 3.0, 0.0, 0.0, np.nan, np.inf]])
    out = cuda.device_array((x.size, 4), np.float64)
    binary[(x.size + 127) // 128, 128](cuda.to_device(x), cuda.to_device(y), out)
    got = out.copy_to_host()[:, 0]
    with np.errstate(all="ignore"):
        want = np.power(x, y)
        allowed = 2 * np.abs(y * np.log(np.abs(x))) + 4
    exact = (got == want) | (np.isnan(got) & np.isnan(want))
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    inexact = ~exact
    assert np.isfinite(want[inexact]).all()
    ulps = np.abs(got[inexact] - want[inexact]) / np.spacing(np.abs(want[inexact]))
    assert (ulps <= allowed[inexact]).all(), (x[inexact][ulps > allowed[inexact]], y[inexact][ulps > allowed[inexact]])
    small = np.isin(np.abs(y), [1.0, 2.0, 3.0]) & np.isfinite(want) & (want != 0)
    assert np.max(np.abs(got[small] - want[small]) / np.spacing(np.abs(want[small]))) <= 1


def test_pow_matches_numpy_with_c_signs_for_negative_bases():
    signs = [(-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0), (-0.5, -3.0, -8.0), (-np.inf, 3.0, -np.inf), (-2.0, 0.5, np.nan),
             (-8.0, 1 / 3, np.nan), (0.0, 0.0, 1.0), (np.nan, 0.0, 1.0), (np.inf, -0.0, 1.0), (1.0, np.nan, 1.0),
             (-1.0, np.inf, 1.0), (1.0, -np.inf, 1.0), (-0.0, -3.0, -np.inf), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0),
             (-0.0, 0.5, 0.0)]      # C's exact cases and -0's sign
    x = np.concatenate([X, [s[0] for s in signs]]).astype(np.float32)
    y = np.concatenate([Y, [s[1] for s in signs]]).astype(np.float32)
    out = cuda.device_array((x.size, 4), np.float32)
    binary[(x.size + 127) // 128, 128](cuda.to_device(x), cuda.to_device(y), out)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[-len(signs):, 0], [s[2] for s in signs])
    assert np.array_equal(np.signbit(got[-len(signs):, 0]), np.signbit([s[2] for s in signs]))
    want = reference(np.power, x, y)
    assert (x < 0).sum() > 100 and np.isnan(want).sum() > 50
    assert_close(got[:, 0], want, 2e-5, 1e-38, "x ** y", x)
    assert np.array_equal(got[:, 0], got[:, 1], equal_nan=True)              # math.pow is **
    small = (np.abs(x) < 1e18) & (np.abs(y) < 1e18)                        # hypot does not scale: x^2 overflows
    assert_close(got[small, 2], reference(np.hypot, x, y)[small], 1e-6, 0, "hypot", x[small])
    want = reference(np.arctan2, x, y)                      # the quadrants, the signed zeros, the infinities
    assert_close(got[:, 3], want, 1e-6, TINY, "atan2", x)
    assert np.array_equal(np.signbit(got[want == 0, 3]), np.signbit(want[want == 0]))


def test_a_library_call_compiles_into_the_callers_block():
    @cuda.jit
    def around_calls(x, y, out):
        i = cuda.grid(1)
        v = y[i]
        out[i] = x[i] * v + math.exp(v) + math.exp(v)

    x, y = rng.uniform(-2, 2, 32).astype(np.float32), rng.uniform(-2, 2, 32).astype(np.float32)
    out = cuda.device_array(32, np.float32)
    around_calls[1, 32](cuda.to_device(x), cuda.to_device(y), out)
    np.testing.assert_allclose(out.copy_to_host(), x * y + 2 * np.exp(y), rtol=2e-6)
    asm = around_calls.inspect_asm()
    assert asm.count("MUFU.EX2") == 1 and "FFMA" in asm          # one e^y for both calls; x*y + e^y fused
    assert "return" not in around_calls.inspect_ir()             # no block for a return to jump to


def test_every_library_function_the_compiler_calls_is_in_libdevice():
    functions = {v for v in vars(libdevice).values() if hasattr(v, "py_func")}
    functions64 = {v for module in (libdevice64, libdevice64_derived) for v in vars(module).values()
                   if hasattr(v, "py_func")}
    assert set(calls.LIBDEVICE.values()) <= functions and set(calls.LIBDEVICE_FLOAT64.values()) <= functions64
    assert not calls.LIBDEVICE.keys() & (calls.SPECIAL_FUNCTION_UNIT | calls.EXACT)


def test_the_compile_cache_key_covers_every_library_compiled_into_kernels():
    """The calls table compiles device functions into kernels that never name them (math.erf is libdevice's erff,
    g.sync() cooperative groups' barrier), so the cache key's digest of what a kernel reaches misses them: every
    module of those functions, and of the functions they call, must be among the compiler's sources (an edit to
    libdevice64_derived.py once left kernels compiled from the old text in the cache)."""
    import sys
    import types
    from pathlib import Path

    from lapis.cuda.compiler.device_function import DeviceFunction
    libraries = {m for m in vars(calls).values()
                 if isinstance(m, types.ModuleType) and any(isinstance(v, DeviceFunction) for v in vars(m).values())}
    libraries |= {sys.modules[v.py_func.__module__] for m in list(libraries) for v in vars(m).values()
                  if isinstance(v, DeviceFunction)}
    files = {Path(m.__file__).resolve() for m in libraries}
    assert {Path(m.__file__).resolve() for m in (libdevice, libdevice64, libdevice64_derived)} <= files
    assert files <= set(cache.compiler_sources())


@cuda.jit
def inverse_trig_fmod_gamma(x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = math.asin(x[i])
        out[i, 1] = math.acos(x[i])
        out[i, 2] = math.fmod(x[i], y[i])
        out[i, 3] = math.gamma(x[i])
        out[i, 4] = math.lgamma(x[i])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")            # numpy's, for the special cases
def test_asin_acos_fmod_gamma_and_lgamma_match_c_s():
    """asin and acos (NaN beyond [-1, 1]), fmod exactly (quotients up to 1e30 / 3 included, x's sign, C's special
    cases), gamma and lgamma by Lanczos in float64 (reflected below 1/2, accurate next to the poles) against
    numpy and scipy, and C's values at the poles: gamma(+-0) = +-inf, gamma(-2) = NaN, lgamma there = inf."""
    special = pytest.importorskip("scipy.special")
    x = np.concatenate([rng.uniform(-1.2, 1.2, 200), rng.uniform(-30, 40, 300), [1e30, -7.5, 1e-30, -0.00025],
                        [0.0, -0.0, -2.0, np.inf, np.nan, -4.0, 5.0, 7.0]]).astype(np.float32)
    y = np.concatenate([rng.uniform(-5, 5, 500), [3.0, 2.0, 1e-30, 1.0],
                        [1.0, 1.0, 1.0, 2.0, 1.0, 2.0, 0.0, np.inf]]).astype(np.float32)
    out = cuda.device_array((x.size, 5), np.float32)
    inverse_trig_fmod_gamma[(x.size + 127) // 128, 128](cuda.to_device(x), cuda.to_device(y), out)
    got = out.copy_to_host()
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    finite = x.size - 8
    with np.errstate(all="ignore"):
        want = [np.arcsin(x64), np.arccos(x64), np.fmod(x64, y64), special.gamma(x64), special.gammaln(x64)]
    for k, name in enumerate(["asin", "acos", "fmod", "gamma", "lgamma"]):
        w = want[k][:finite].astype(np.float32)
        if name == "fmod":
            assert np.array_equal(got[:, 2], np.fmod(x, y), equal_nan=True)               # exact, everywhere
            numbers = ~np.isnan(got[:, 2])
            assert np.array_equal(np.signbit(got[numbers, 2]), np.signbit(np.fmod(x, y)[numbers]))
        else:
            assert_close(got[:finite, k], w, 2e-6, 1e-6, name, x[:finite])
    poles = got[finite:finite + 3]
    assert poles[0, 3] == np.inf and poles[1, 3] == -np.inf and np.isnan(poles[2, 3])
    assert (poles[:, 4] == np.inf).all()
    assert np.isnan(got[finite + 3, 3]) or got[finite + 3, 3] == np.inf     # gamma(inf)


@cuda.jit
def gamma_64(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = math.gamma(x[i])
        out[i, 1] = math.lgamma(x[i])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float64_gamma_and_lgamma_are_computed_in_float64():
    """float64 gamma and lgamma by Lanczos in float64 (`libdevice64_derived.py`) against scipy over their whole
    range, from -170 to past gamma's overflow at 171.6: gamma within 5e-13 (measured 2.7e-13: the exponent's
    rounding grows with x), lgamma within 1e-13 or, next to its zeros at 1 and 2, 1e-14 absolute; C's values at
    the poles and infinities (lgamma(-inf) is inf, as C's)."""
    special = pytest.importorskip("scipy.special")
    near = np.random.default_rng(5)
    x = np.concatenate([near.uniform(-170, 172, 600), near.uniform(-3, 5, 600), [1 + 1e-10, 2 - 1e-9, 171.5]])
    poles = np.array([0.0, -0.0, -3.0, np.inf, -np.inf, np.nan, 171.7])
    out = cuda.device_array((x.size + poles.size, 2), np.float64)
    gamma_64[(x.size + poles.size + 127) // 128, 128](cuda.to_device(np.concatenate([x, poles])), out)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got[:x.size, 0], special.gamma(x), rtol=5e-13, atol=0)
        np.testing.assert_allclose(got[:x.size, 1], special.gammaln(x), rtol=1e-13, atol=1e-14)
    ends = got[x.size:]
    assert ends[0, 0] == np.inf and ends[1, 0] == -np.inf and np.isnan(ends[2, 0]) and ends[3, 0] == np.inf
    assert np.isnan(ends[4, 0]) and np.isnan(ends[5, 0]) and ends[6, 0] == np.inf
    assert (ends[[0, 1, 2, 3, 4], 1] == np.inf).all() and np.isnan(ends[5, 1])


@cuda.jit
def erf_erfc_exp2(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = math.erf(x[i])
        out[i, 1] = math.erfc(x[i])
        out[i, 2] = math.exp2(x[i])


def erf_erfc_exp2_of(x):
    out = cuda.device_array((x.size, 3), x.dtype)
    erf_erfc_exp2[(x.size + 127) // 128, 128](cuda.to_device(x), out)
    return out.copy_to_host()


def test_float64_erf_and_erfc_are_accurate_in_float64():
    """float64 erf and erfc computed in float64 (`libdevice64_derived.py`: erf's Maclaurin series near 0, else
    e^(-x^2) erfcx(x)), against Python's math (itself within an ulp or two): erf within 2 ulps and erfc within 5
    (measured against mpmath: 1 and 3), so within 1e-15 relatively, over (-1, 1), (-6, 6) and erfc's whole tail
    down to its underflow near 26.55 (and on through the subnormals, in their ulps, to 0 from 27.3), from 1e-320
    up; negative arguments (erfc(-x) = 2 - erfc(x)), the series' edge, +-0, +-inf and NaN as C has them."""
    near = np.random.default_rng(15)
    edges = [0.75, np.nextafter(0.75, 0), 6.0, np.nextafter(6.0, 0), 26.5, 26.55, 26.6, 27.2, 27.3, 1e-310, 5e-324,
             1e300, 1.7e308]
    x = np.concatenate([near.uniform(-1, 1, 2000), near.uniform(-6, 6, 2000), near.uniform(-27.3, 27.3, 2000),
                        near.uniform(25, 27.3, 500), 10.0 ** near.uniform(-320, 0, 500) * near.choice([-1, 1], 500),
                        edges, np.negative(edges)])
    got = erf_erfc_exp2_of(x)
    for k, fn, most in ((0, math.erf, 2), (1, math.erfc, 5)):
        want = np.array([fn(v) for v in x])
        ulps = np.abs(got[:, k] - want) / np.spacing(np.abs(want))     # a subnormal's ulp is 5e-324
        assert ulps.max() <= most, (fn.__name__, x[np.argmax(ulps)], ulps.max())
        normal = np.abs(want) >= np.finfo(np.float64).tiny
        assert (np.abs(got[normal, k] - want[normal]) <= 1e-15 * np.abs(want[normal])).all()
    tail = (x > 26.55) & (x < 27.2)
    assert (got[tail, 1] > 0).all() and (got[x >= 27.3, 1] == 0).all() and (got[x <= -6, 1] == 2).all()
    assert np.array_equal(got[x < 0, 0], -erf_erfc_exp2_of(-x[x < 0])[:, 0])            # erf is odd, exactly
    special = erf_erfc_exp2_of(np.array([0.0, -0.0, np.inf, -np.inf, np.nan]))
    assert special[:4, :2].tolist() == [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 2.0]]
    assert np.signbit(special[:2, 0]).tolist() == [False, True] and np.isnan(special[4]).all()
    assert erf_erfc_exp2_of(np.float32(x[:200])).dtype == np.float32          # float32 keeps its own functions


def test_float32_erf_and_erfc_are_relatively_accurate_down_to_underflow():
    """float32 erf and erfc (`libdevice.py`) within 1e-6 of math's, relatively, across (-10.2, 10.2): erfc too in
    its tail, down to its underflow near 10.05 (its subnormal results within 2e-45 more), and erf for tiny
    arguments (measured: 1.7e-7 and 3.6e-7)."""
    near = np.random.default_rng(16)
    x = np.concatenate([near.uniform(-10.2, 10.2, 4000), near.uniform(3, 10.2, 2000),
                        10.0 ** near.uniform(-45, 0, 500) * near.choice([-1, 1], 500)]).astype(np.float32)
    got = erf_erfc_exp2_of(x).astype(np.float64)
    for k, fn in ((0, math.erf), (1, math.erfc)):
        want = np.array([fn(v) for v in x.astype(np.float64)])
        assert_close(got[:, k], want, 1e-6, 2e-45, fn.__name__, x)


def test_float64_exp2_is_accurate_in_float64_and_float32_exp2_in_float32():
    """math.exp2 of a float64 in float64 (`libdevice64_derived.exp2`), within an ulp of numpy's over its whole
    range, subnormal results included, exact at the integers, inf from 1024 and 0 below -1075; of a float32, the
    special function unit's 2^x (MUFU.EX2), within a float32 ulp of numpy's."""
    near = np.random.default_rng(17)
    ints = np.arange(-1080.0, 1030.0)
    x = np.concatenate([near.uniform(-1080, 1030, 3000), near.uniform(-1, 1, 1000), near.uniform(-1076, -1020, 500),
                        ints, [1023.9999999999999, -1074.5, np.nextafter(-1074.5, 0), -1075.0, 1e-300, -0.0,
                               np.inf, -np.inf, np.nan]])
    got = erf_erfc_exp2_of(x)[:, 2]
    with np.errstate(over="ignore"):
        want = np.exp2(x)
    exact = (got == want) | (np.isnan(got) & np.isnan(want))
    assert np.isfinite(want[~exact]).all() and (want[~exact] != 0).all()
    ulps = np.abs(got[~exact] - want[~exact]) / np.spacing(np.abs(want[~exact]))
    assert ulps.max(initial=0) <= 1, x[~exact][np.argmax(ulps)]
    assert exact[np.isin(x, ints)].all() and exact[-9:].all()        # the integers, the edges and specials
    x32 = np.concatenate([near.uniform(-150, 128, 2000), near.uniform(-1, 1, 500)]).astype(np.float32)
    got32 = erf_erfc_exp2_of(x32)[:, 2]
    with np.errstate(over="ignore"):
        want32 = np.exp2(x32.astype(np.float64)).astype(np.float32)
    assert got32.dtype == np.float32
    assert (np.abs(got32 - want32) <= np.spacing(np.abs(want32))).all()


@cuda.jit
def bit_and_warp_functions(x, f, out, fout):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = cuda.popc(x[i])
        out[i, 1] = cuda.brev(x[i])
        out[i, 2] = cuda.clz(x[i])
        out[i, 3] = cuda.ffs(x[i])
        out[i, 4] = cuda.activemask()
        out[i, 5] = cuda.lanemask_lt()
        out[i, 6] = cuda.match_any_sync(0xFFFFFFFF, x[i] % 4)
        mask, equal = cuda.match_all_sync(0xFFFFFFFF, x[i] % 4)
        out[i, 7] = mask
        same_mask, same = cuda.match_all_sync(0xFFFFFFFF, 7)
        out[i, 8] = same_mask if same else 1
        out[i, 9] = 1 if cuda.eq_sync(0xFFFFFFFF, x[i] < 2**31) else 0
        out[i, 10] = 1 if cuda.eq_sync(0xFFFFFFFF, x[i] % 2 == 0) else 0
        fout[i, 0] = cuda.fma(f[i], f[i], -1.0)
        fout[i, 1] = cuda.cbrt(f[i])


def test_numba_bit_and_warp_functions():
    """popc, brev, clz, ffs against Python's bit arithmetic; activemask, lanemask_lt, match_any_sync,
    match_all_sync and eq_sync over two warps; fma with one rounding (the float64 result of float32 operands,
    rounded once); cbrt within 2 ulps of numpy's."""
    x = rng.integers(0, 2**31 - 1, 64).astype(np.uint32)
    x[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    f = (rng.standard_normal(64) * 10).astype(np.float32)
    f[:3] = [0.0, -8.0, 27.0]
    out, fout = cuda.device_array((64, 11), np.int64), cuda.device_array((64, 2), np.float32)
    bit_and_warp_functions[1, 64](cuda.to_device(x), cuda.to_device(f), out, fout)
    got, fgot = out.copy_to_host(), fout.copy_to_host()
    values = [int(v) for v in x]
    assert got[:, 0].tolist() == [bin(v).count("1") for v in values]
    assert got[:, 1].tolist() == [int(f"{v:032b}"[::-1], 2) for v in values]
    assert got[:, 2].tolist() == [32 - v.bit_length() for v in values]
    assert got[:, 3].tolist() == [(v & -v).bit_length() for v in values]
    assert (got[:, 4] == 0xFFFFFFFF).all() and got[:, 5].tolist() == [(1 << (i % 32)) - 1 for i in range(64)]
    key = x % 4
    assert got[:, 6].tolist() == [sum(1 << lane for lane in range(32) if key[i // 32 * 32 + lane] == key[i])
                                  for i in range(64)]
    assert (got[:, 7] == 0).all() and (got[:, 8] == 0xFFFFFFFF).all()
    assert got[:32, 9].tolist() == [0] * 32 and got[32:, 9].tolist() == [1] * 32   # 0xFFFFFFFF is in warp 0
    assert (got[:, 10] == 0).all()
    assert np.array_equal(fgot[:, 0], (f.astype(np.float64) ** 2 - 1).astype(np.float32))
    want = np.cbrt(f)
    assert (np.abs(fgot[:, 1] - want) <= 2 * np.spacing(np.abs(want))).all() and fgot[1, 1] == -2.0


@cuda.jit
def fused_multiply_adds(a, b, c, out, out32):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = cuda.fma(a[i], b[i], c[i]) + 0.0 * (a[i] * b[i])      # its product also used on its own
        out32[i] = cuda.fma(np.float32(a[i]), np.float32(b[i]), np.float32(c[i]))


def test_cuda_fma_rounds_once_in_float64_and_float32():
    """cuda.fma is one DFMA (FFMA) in the arguments' type: a b + c exactly, then rounded once (it rounded float64
    operands to float32 once, and an a * b + c the optimiser shares a product of is not contracted)."""
    from fractions import Fraction
    a = rng.standard_normal(256) * 3
    b = rng.standard_normal(256) * 3
    c = -(a * b) * (1 + rng.standard_normal(256) * 1e-9)     # cancellation: the product's low bits decide
    a[:2], b[:2], c[:2] = [0.1, 1 + 2**-30], [0.3, 1 - 2**-30], [0.7, -1.0]
    out, out32 = cuda.device_array(256, np.float64), cuda.device_array(256, np.float32)
    fused_multiply_adds[1, 256](cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), out, out32)
    exact = [Fraction(x) * Fraction(y) + Fraction(z) for x, y, z in zip(a, b, c, strict=True)]
    assert out.copy_to_host().tolist() == [float(e) for e in exact]
    f32 = [np.float32(v) for v in (a, b, c)]
    exact32 = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) for x, y, z in zip(*f32, strict=True)]
    want32 = [np.float32(float(e)) for e in exact32]        # float64 then float32: a tie between them is unlikely
    assert out32.copy_to_host().tolist() == [float(w) for w in want32]


@cuda.jit
def block_votes(x, out):
    i = cuda.grid(1)
    out[i, 0] = cuda.syncthreads_count(x[i] > 0)
    out[i, 1] = cuda.syncthreads_and(x[i] > -100)
    out[i, 2] = cuda.syncthreads_or(x[i] > 100)
    out[i, 3] = cuda.syncthreads_count(x[i] < 0)                 # a second count in the same kernel


def test_syncthreads_count_and_or_vote_over_each_block():
    x = rng.standard_normal(192).astype(np.float32)
    x[70] = 200.0                                                # only the second block of 64 has a value above 100
    out = cuda.device_array((192, 4), np.int32)
    block_votes[3, 64](cuda.to_device(x), out)
    got = out.copy_to_host()
    for b in range(3):
        block = x[b * 64:(b + 1) * 64]
        assert (got[b * 64:(b + 1) * 64] == [(block > 0).sum(), 1, int(b == 1), (block < 0).sum()]).all()


@cuda.jit
def popc_of_each_width(a32, a64, out):
    i = cuda.grid(1)
    if i < a32.size:
        out[i, 0] = cuda.popc(a32[i])
        out[i, 1] = cuda.popc(a64[i])


def test_popc_counts_the_bits_of_its_argument_s_type():
    """A negative int64 has 64 bits to count, the same value as int32 32 (popc once chose the width by the value,
    so popc of an int64 -1 was 32)."""
    a32 = np.array([-1, 5, -2, 0], np.int32)
    a64 = np.array([-1, 5, -2, 1 << 40], np.int64)
    out = cuda.device_array((4, 2), np.int64)
    popc_of_each_width[1, 32](cuda.to_device(a32), cuda.to_device(a64), out)
    assert out.copy_to_host().T.tolist() == [[32, 2, 31, 0], [64, 2, 63, 1]]


@cuda.jit
def half_intrinsics(a, b, c, out, flags):
    i = cuda.grid(1)
    if i < a.size:
        x, y, z = a[i], b[i], c[i]
        out[0, i], out[1, i], out[2, i] = cuda.fp16.hadd(x, y), cuda.fp16.hsub(x, y), cuda.fp16.hmul(x, y)
        out[3, i], out[4, i], out[5, i] = cuda.fp16.hdiv(x, y), cuda.fp16.hfma(x, y, z), cuda.fp16.hneg(x)
        out[6, i], out[7, i], out[8, i] = cuda.fp16.habs(x), cuda.fp16.hsqrt(z), cuda.fp16.hmax(x, y)
        out[9, i], out[10, i], out[11, i] = cuda.fp16.hmin(x, y), cuda.fp16.hfloor(x), cuda.fp16.hceil(x)
        out[12, i], out[13, i], out[14, i] = cuda.fp16.hexp(x), cuda.fp16.hlog(z), cuda.fp16.hsin(x)
        out[15, i], out[16, i] = cuda.fp16.hrcp(y), cuda.fp16.hrsqrt(z)
        flags[0, i], flags[1, i], flags[2, i] = cuda.fp16.hlt(x, y), cuda.fp16.heq(x, y), cuda.fp16.hge(x, y)


def test_half_precision_intrinsics_round_as_float16_does():
    # + - * / fma sqrt through float32 are correctly rounded halves (24 >= 2 * 11 + 2 bits), so they equal numpy's
    # float16 arithmetic bit for bit, specials included; the transcendental ones are within a half's ulp or two.
    rng = np.random.default_rng(11)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -6e-8, 65504, 1.0, 0.5], np.float16)
    a, b = (np.concatenate([rng.standard_normal(990).astype(np.float16) * 8, specials]) for _ in range(2))
    b = b[::-1].copy()
    c = np.abs(rng.standard_normal(1000).astype(np.float16) * 8) + np.float16(0.01)
    out, flags = cuda.device_array((17, 1000), np.float16), cuda.device_array((3, 1000), np.bool_)
    half_intrinsics[4, 256](cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), out, flags)
    got, flagged = out.copy_to_host(), flags.copy_to_host()
    wide = [x.astype(np.float64) for x in (a, b, c)]
    with np.errstate(all="ignore"):
        exact = [a + b, a - b, a * b, a / b, (wide[0] * wide[1] + wide[2]).astype(np.float16), -a, np.abs(a),
                 np.sqrt(c), np.fmax(a, b), np.fmin(a, b), np.floor(a), np.ceil(a)]
        close = [np.exp(wide[0]), np.log(wide[2]), np.sin(wide[0]), 1 / wide[1], 1 / np.sqrt(wide[2])]
    for row, want in enumerate(exact):
        assert np.array_equal(got[row].view(np.uint16)[~np.isnan(want)], want.view(np.uint16)[~np.isnan(want)]), row
        assert np.array_equal(np.isnan(got[row]), np.isnan(want)), row
    for row, want in enumerate(close, start=len(exact)):
        with np.errstate(over="ignore"):                  # exp of the large ones is inf in a half, as in ours
            half = want.astype(np.float16)
        np.testing.assert_allclose(got[row].astype(np.float64), half.astype(np.float64), rtol=2e-3, atol=1e-7)
    assert np.array_equal(flagged, np.array([a < b, a == b, a >= b]))


@cuda.jit
def numpy_and_math(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i, 0], out[i, 1] = np.arctan2(v, 0.75), math.atan2(v, 0.75)
        out[i, 2], out[i, 3] = np.hypot(v, 0.75), math.hypot(v, 0.75)
        out[i, 4], out[i, 5] = np.fmod(v, 0.75), math.fmod(v, 0.75)
        out[i, 6], out[i, 7] = np.isnan(v), math.isnan(v)
        out[i, 8], out[i, 9] = np.isinf(v), math.isinf(v)
        out[i, 10], out[i, 11] = np.isfinite(v), math.isfinite(v)


def test_numpy_ufuncs_on_numbers_compile_as_math_s_functions():
    """np.sin(x[i]), np.arctan2(y, x), np.isnan(v), ... on numbers in a kernel, as numba compiles them: the same
    bits as math's function of the same meaning, in float32 and float64."""
    for np_fn, name in calls.NUMPY_UNARY.items():               # the table means what it says (on the host) ...
        assert np_fn(0.3 + (name == "acosh")) == pytest.approx(getattr(math, name)(0.3 + (name == "acosh"))), name
    for np_fn, name in calls.NUMPY_BINARY.items():
        assert np_fn(-1.3, 0.75) == pytest.approx(getattr(math, name)(-1.3, 0.75)), name
    for dtype in (np.float32, np.float64):                      # ... and compiles to math's code
        x = np.concatenate([X[::7], [np.nan, np.inf, -0.0]]).astype(dtype)
        for np_fn in (np.sin, np.arctanh, np.floor):
            name = calls.NUMPY_UNARY[np_fn]
            assert np.array_equal(run(np_fn, x), run(getattr(math, name), x), equal_nan=True), name
        out = cuda.device_array((x.size, 12), dtype)
        numpy_and_math[1, x.size](cuda.to_device(x), out)
        both = out.copy_to_host()
        assert np.array_equal(both[:, 0::2], both[:, 1::2], equal_nan=True)


@cuda.jit
def bits_of_64_bit_integers(x, out, uout):
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = cuda.clz(x[i])
        out[i, 1] = cuda.ffs(x[i])
        out[i, 2] = cuda.popc(x[i])
        uout[i] = cuda.brev(x[i])


def test_brev_clz_and_ffs_of_64_bit_integers_use_all_64_bits():
    """As CUDA's __brevll, __clzll and __ffsll (numba picks them by the argument's width); they were computed on
    the low 32 bits: clz(1 << 40) gave 32."""
    values = [0, 1, 1 << 40, -1, -(1 << 63) + 8, 0x0123456789ABCDEF, 1 << 31]
    x = np.array(values, np.int64)
    out, uout = cuda.device_array((len(values), 3), np.int64), cuda.device_array(len(values), np.uint64)
    bits_of_64_bit_integers[1, 32](cuda.to_device(x), out, uout)
    u = [v % 2**64 for v in values]
    assert out.copy_to_host().tolist() == [[64 - v.bit_length(), (v & -v).bit_length(), bin(v).count("1")] for v in u]
    assert uout.copy_to_host().tolist() == [int(f"{v:064b}"[::-1], 2) for v in u]


@cuda.jit
def matches_in_a_short_block(x, any_out, all_out):
    i = cuda.grid(1)
    any_out[i] = cuda.match_any_sync(0xFFFFFFFF, x[i])
    mask, _ = cuda.match_all_sync(0xFFFFFFFF, 7)
    all_out[i] = mask


def test_match_any_and_all_name_only_lanes_that_exist():
    """A block of 10 threads: the warp's other 22 lanes are not active, so no mask names them (they did)."""
    x = np.array([1, 2, 1, 2, 1, 2, 1, 2, 1, 2], np.int32)
    any_out, all_out = cuda.device_array(10, np.int64), cuda.device_array(10, np.int64)
    matches_in_a_short_block[1, 10](cuda.to_device(x), any_out, all_out)
    assert any_out.copy_to_host().tolist() == [0x155 if v == 1 else 0x2AA for v in x]
    assert all_out.copy_to_host().tolist() == [0x3FF] * 10


@cuda.jit
def rounded_powered_and_turned(x, r, r32, d, p):
    i = cuda.grid(1)
    if i < x.size:
        r[i] = round(x[i])
        r32[i] = round(np.float32(x[i]))
        d[i, 0] = math.degrees(x[i])
        d[i, 1] = math.radians(x[i])
        p[i] = pow(x[i], 3)


def test_round_pow_degrees_and_radians_are_python_s():
    """round(x) is Python's (ties to even, an int), degrees and radians CPython's one multiplication, so each
    equals Python's exactly; pow is the ** operator, whose small integer exponent multiplies out, as numba's does."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 3.7, -3.7, 1e10 + 0.5, 123.456, -0.0])
    r, r32 = cuda.device_array(x.size, np.int64), cuda.device_array(x.size, np.int64)
    d, p = cuda.device_array((x.size, 2)), cuda.device_array(x.size)
    rounded_powered_and_turned[1, 32](cuda.to_device(x), r, r32, d, p)
    assert r.copy_to_host().tolist() == [round(v) for v in x]
    assert r32.copy_to_host().tolist() == [round(float(np.float32(v))) for v in x]
    assert d.copy_to_host().tolist() == [[math.degrees(v), math.radians(v)] for v in x]
    assert p.copy_to_host().tolist() == [v * v * v for v in x]
