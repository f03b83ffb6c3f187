"""Layer 3: complex64 and complex128 in kernels (arrays, numbers, literals, arithmetic, cmath), each kernel against
numpy on the host, with numba's typing (checked against numba 0.68's) where lapis follows it, and numba's values at
infinities and NaNs (its cmath algorithms: CPython's) where they differ from numpy's."""

import cmath
import math

import numpy as np
import pytest

from lapis import cuda, hip
from lapis.cuda.compiler.frontend import kernarg_layout
from lapis.numba import complex64, complex128, int32, void

pytestmark = pytest.mark.filterwarnings("ignore::lapis.cuda.PerformanceWarning")    # host arrays, copied
APIS = pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
TYPES = pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
rng = np.random.default_rng(2024)


def eps(dtype) -> float:
    """The epsilon of a complex type's parts."""
    return float(np.finfo(dtype).eps)


def complex_array(re, im, dtype) -> np.ndarray:
    """The complex numbers re[k] + im[k] j, made part by part (re + 1j * im would make 0 * inf a NaN)."""
    z = np.empty(len(re), dtype)
    z.real, z.imag = re, im
    return z


def random_complex(n: int, dtype, low: float = -3, high: float = 3) -> np.ndarray:
    """n complex numbers whose parts have random signs and magnitudes 10^low .. 10^high."""
    return complex_array(*(rng.choice([-1, 1], n) * 10.0 ** rng.uniform(low, high, n) for _ in range(2)), dtype)


def assert_close(got, want, ulps: float, scale=None, dtype=None):
    """Each part of got within `ulps` of the epsilon of `dtype` (got's) times |want| (or `scale`) of want's; where
    want has an infinity or a NaN, the same there."""
    e = eps(dtype or got.dtype)
    scale = np.abs(want) if scale is None else scale
    for part in (np.real, np.imag):
        g, w = part(got).astype(np.float64), part(want).astype(np.float64)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        with np.errstate(invalid="ignore"):
            close = np.isfinite(w) & (np.abs(g - w) <= ulps * e * scale)
        bad = np.flatnonzero(~(same | close))
        assert bad.size == 0, [(complex(got[j]), complex(want[j])) for j in bad[:5]]


# -- the Mandelbrot set, as numba's and NVIDIA's tutorials compute it --------------------------------------------------
@cuda.jit(device=True)
def mandel(x, y, max_iters):
    c = complex(x, y)
    z = 0.0j
    for i in range(max_iters):
        z = z * z + c
        if (z.real * z.real + z.imag * z.imag) >= 4:
            return i
    return max_iters


@cuda.jit
def create_fractal(min_x, max_x, min_y, max_y, image, iters):
    height = image.shape[0]
    width = image.shape[1]
    pixel_size_x = (max_x - min_x) / width
    pixel_size_y = (max_y - min_y) / height
    start_x, start_y = cuda.grid(2)
    grid_x = cuda.gridDim.x * cuda.blockDim.x
    grid_y = cuda.gridDim.y * cuda.blockDim.y
    for x in range(start_x, width, grid_x):
        real = min_x + x * pixel_size_x
        for y in range(start_y, height, grid_y):
            imag = min_y + y * pixel_size_y
            image[y, x] = mandel(real, imag, iters)


def numpy_mandelbrot(c: np.ndarray, iters: int) -> np.ndarray:
    z = np.zeros_like(c)
    out = np.full(c.shape, iters, np.int64)
    alive = np.ones(c.shape, bool)
    for i in range(iters):
        z[alive] = z[alive] * z[alive] + c[alive]
        escaped = alive & (z.real * z.real + z.imag * z.imag >= 4)
        out[escaped] = i
        alive &= ~escaped
    return out


@APIS
def test_the_tutorial_mandelbrot_matches_numpy(api):
    height, width, iters = 48, 72, 40
    image = api.to_device(np.zeros((height, width), np.uint8))
    create_fractal[(2, 3), (16, 8)](-2.0, 1.0, -1.0, 1.0, image, iters)
    xs = -2.0 + np.arange(width) * (3.0 / width)
    ys = -1.0 + np.arange(height) * (2.0 / height)
    want = numpy_mandelbrot(xs[None, :] + 1j * ys[:, None], iters)
    assert np.array_equal(image.copy_to_host(), want)


@cuda.jit
def mandelbrot64(c, out, iters):
    i = cuda.grid(1)
    if i < c.size:
        z = np.complex64(0)
        n = iters
        k = 0
        while k < iters:
            z = z * z + c[i]
            if abs(z) > 2:
                n = k
                break
            k += 1
        out[i] = n


def test_a_complex64_mandelbrot_stays_in_complex64():
    c = (rng.uniform(-2, 1, 1024) + 1j * rng.uniform(-1.2, 1.2, 1024)).astype(np.complex64)
    out = cuda.device_array(c.size, np.int32)
    mandelbrot64[8, 128](cuda.to_device(c), out, 30)
    z, want, alive = np.zeros_like(c), np.full(c.size, 30), np.ones(c.size, bool)
    for k in range(30):
        z[alive] = z[alive] * z[alive] + c[alive]
        escaped = alive & (np.abs(z) > 2)
        want[escaped], alive = k, alive & ~escaped
    assert np.array_equal(out.copy_to_host(), want)
    assert "z: complex64" in mandelbrot64.inspect_types()


# -- arithmetic --------------------------------------------------------------------------------------------------------
@cuda.jit
def arithmetic(a, b, out, equal):
    i = cuda.grid(1)
    if i < a.size:
        x, y = a[i], b[i]
        out[i, 0] = x + y
        out[i, 1] = x - y
        out[i, 2] = x * y
        out[i, 3] = x / y
        out[i, 4] = -x
        out[i, 5] = x.conjugate()
        out[i, 6] = x ** 2
        out[i, 7] = x ** 3
        out[i, 8] = x ** -2
        out[i, 9] = +x
        equal[i, 0] = x == y
        equal[i, 1] = x != y
        equal[i, 2] = x == x


def edge_values(dtype) -> np.ndarray:
    """Complex numbers made of zeros, tiny, huge, infinite and NaN parts, every sign."""
    info = np.finfo(dtype)
    mags = np.array([0, info.tiny, info.tiny * 64, 1e-20, 1e-3, 1, 3, 1e15, 1e30, float(info.max) / 8, np.inf,
                     np.nan])
    return complex_array(*(rng.choice(mags, 300) * rng.choice([-1, 1], 300) for _ in range(2)), dtype)


@APIS
@TYPES
def test_arithmetic_matches_numpy_division_at_every_magnitude(api, dtype):
    """+ - conjugate, negation and == are exact; * (and z ** 2, which is z * z) within an ulp of |x||y| per part; / by
    Smith's algorithm within 2 ulps of numpy's at every magnitude (no part is squared, so 1e30 and 1e-30 divide in
    complex64), and numpy's infinities and NaNs for zero, infinite and NaN divisors; z ** 3 and z ** -2 within a few
    ulps."""
    a = np.concatenate([edge_values(dtype), random_complex(400, dtype, -15, 15), random_complex(300, dtype)])
    b = np.concatenate([edge_values(dtype), random_complex(400, dtype, -15, 15), random_complex(300, dtype)])
    b[:12] = [0, -0.0, complex(0, -0.0), complex(-0.0, -0.0), np.inf, -np.inf, complex(0, np.inf), np.nan,
              complex(np.nan, 1), 1e-30, 1e30, complex(1e30, 1e-30)]
    b[a.size // 2:a.size // 2 + 3] = a[a.size // 2:a.size // 2 + 3]        # equal pairs
    out, equal = api.device_array((a.size, 10), dtype), api.device_array((a.size, 3), np.bool_)
    arithmetic[(a.size + 127) // 128, 128](api.to_device(a), api.to_device(b), out, equal)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        for k, want in enumerate([a + b, a - b, None, None, -a, a.conj(), None, None, None, a]):
            if want is not None:
                assert np.array_equal(got[:, k], want, equal_nan=True), k
        assert_close(got[:, 2], a * b, 1, scale=np.abs(a) * np.abs(b))
        assert_close(got[:, 6], a * a, 1, scale=np.abs(a) ** 2)
        assert_close(got[:, 3], a / b, 2)
        finite = np.isfinite(a) & (np.abs(a) < 1e10) & (np.abs(a) > 1e-10)
        assert_close(got[finite, 7], a[finite] ** 3, 4)
        assert_close(got[finite, 8], a[finite] ** -2, 4)
        assert np.array_equal(equal.copy_to_host(), np.stack([a == b, a != b, a == a], 1))


@cuda.jit
def powers(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i, 0] = a[i] ** b[i]
        out[i, 1] = a[i] ** 0.5
        out[i, 2] = a[i] ** 0
        out[i, 3] = 2.0 ** a[i]


@pytest.mark.parametrize("dtype", [np.complex64, pytest.param(np.complex128, marks=pytest.mark.slow)])
def test_powers_with_any_exponent(dtype):
    """z ** w in polar form (numba's cpow: |z|^w e^(j w arg z)), z ** 0 is 1, a real base promoted."""
    a, b = random_complex(256, dtype, -1, 1), random_complex(256, dtype, -1, 0.3)
    out = np.zeros((a.size, 4), dtype)
    powers[2, 128](a, b, out)
    with np.errstate(all="ignore"):
        a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
        ulps = 64 if dtype == np.complex64 else 16      # float32's pow and exp lose digits with the exponent's size
        assert_close(out[:, 0], (a128 ** b128).astype(dtype), ulps)
        assert_close(out[:, 1], np.sqrt(a128).astype(dtype), 8)
        assert np.array_equal(out[:, 2], np.ones(a.size, dtype))
        assert_close(out[:, 3], (2.0 ** a128).astype(dtype), 16)


# -- numbers: arguments, literals, variables, promotion ----------------------------------------------------------------
@cuda.jit
def scaled(a, s, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] * s + s.conjugate()


@APIS
def test_complex_scalar_arguments(api):
    """numpy complex scalars keep their type, a Python complex is complex128 (numba's typeof), floats promote."""
    a = random_complex(64, np.complex64, -1, 1)
    for s, kind in [(np.complex64(2 - 1j), "complex64"), (2 - 1j, "complex128"), (np.complex128(3j), "complex128"),
                    (2.5, "float64"), (np.float32(-1.5), "float32")]:
        out = api.device_array(a.size, np.complex128)
        scaled[1, 64](api.to_device(a), s, out)
        computed_in = np.complex64 if kind in ("complex64", "float32") else np.complex128
        want = a.astype(computed_in) * computed_in(s) + computed_in(np.conj(s))
        assert_close(out.copy_to_host(), want, 2, scale=np.abs(a) * abs(s) + abs(s), dtype=computed_in)
        assert f"scaled(array(complex64, 1d, C), {kind}, array(complex128, 1d, C))" in scaled.inspect_types()


@cuda.jit
def after_an_int(n, s, t, out):
    s = s * 2                                   # a complex argument the kernel reassigns
    out[0] = n + s + t


def test_complex_arguments_pack_as_two_floats_after_an_int():
    """A complex64 argument after an int32 sits at offset 4 (aligned as a float), a complex128 on an 8-byte boundary."""
    out = np.zeros(1, np.complex128)
    after_an_int[1, 1](np.int32(7), np.complex64(1 + 2j), 3 - 4j, out)
    assert out[0] == 7 + (2 + 4j) + (3 - 4j)
    layout, size = kernarg_layout([int32, complex64, complex128])
    assert [e["offset"] for e in layout] == [0, 4, 16] and size == 32


@cuda.jit
def promotions(f32, f64, i32, c64, c128, out):
    a = f32 * c64
    b = f64 * c64
    c = i32 * c64
    d = c64 + c128
    e = complex(f32, f32)
    f = complex(i32, i32)
    g = 1j
    h = c64.real
    k = abs(c128)
    m = cmath.exp(f32)
    n = np.complex64(f64)
    p = c64 * 2j
    q = complex(c64)
    r = cmath.phase(c64)
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    out[5] = f
    out[6] = g
    out[7] = h
    out[8] = k
    out[9] = m
    out[10] = n
    out[11] = p
    out[12] = q
    out[13] = r


def test_promotion_follows_numba():
    """float32 with complex64 is complex64, float64 or an int32 with it complex128; complex(f32, f32) is complex64
    and complex(z) complex128; 1j alone is complex128; .real, abs and phase have the parts' type; cmath of a float32
    is complex64. (c64 * 2j stays complex64: lapis's literals are weak; numba's would be complex128.)"""
    args = (np.float32(1.5), 2.25, np.int32(3), np.complex64(1 - 2j), np.complex128(0.5 + 4j))
    out = np.zeros(14, np.complex128)
    promotions[1, 1](*args, out)
    f32, f64, i32, c64, c128 = args
    want = [f32 * c64, f64 * c64, i32 * c64, c64 + c128, complex(f32, f32), complex(i32, i32), 1j, c64.real,
            abs(c128), cmath.exp(f32), np.complex64(f64), c64 * 2j, complex(c64), cmath.phase(c64)]
    assert_close(out, np.array(want, np.complex128), 4, dtype=np.complex64)
    types = dict(line.strip().split(": ") for line in promotions.inspect_types().splitlines()[1:])
    assert {name: types[name] for name in "abcdefghkmnpqr"} == {
        "a": "complex64", "b": "complex128", "c": "complex128", "d": "complex128", "e": "complex64",
        "f": "complex128", "g": "complex128", "h": "float32", "k": "float64", "m": "complex64", "n": "complex64",
        "p": "complex64", "q": "complex128", "r": "float32"}


@cuda.jit(device=True)
def rotate(z, quarter_turns):
    if quarter_turns == 1:
        return z * 1j
    if quarter_turns == 2:
        return -z
    return z


@cuda.jit
def control_flow(a, out):
    i = cuda.grid(1)
    if i < a.size:
        z = a[i]
        acc = 0.0                               # a float variable that a complex widens
        if z.real > 0:
            acc = z
        else:
            acc = z.conjugate() * 2
        for w in (1j, 2.0):                     # a tuple of numbers, unrolled
            acc += w
        k = 0
        while abs(z) < 100.0 and k < 20:
            z = z * (1.5 + 0.5j)
            k += 1
        pair = (z, acc)
        out[i, 0] = pair[0]
        out[i, 1] = pair[1]
        out[i, 2] = rotate(a[i], i % 3)
        out[i, 3] = a[i] if i % 2 == 0 else 0j
        out[i, 4] = 1 if a[i] else 0
        out[i, 5] = np.exp(a[i]) - cmath.exp(a[i]) + np.abs(a[i]) + np.conj(a[i]) + np.real(a[i]) + np.imag(a[i])


def test_complex_variables_in_branches_loops_and_device_functions():
    a = random_complex(96, np.complex64, -1, 1)
    a[5] = 0
    out = np.zeros((a.size, 6), np.complex128)
    control_flow[1, 96](a, out)
    a128 = a.astype(np.complex128)
    z, k = a.copy(), np.zeros(a.size, int)                      # z stays complex64: 1.5 + 0.5j is weak
    for _ in range(20):
        grow = (np.abs(z) < 100) & (k < 20)
        z[grow] *= np.complex64(1.5 + 0.5j)
        k += grow
    acc = np.where(a.real > 0, a128, a128.conj() * 2) + 1j + 2.0
    rotated = np.where(np.arange(a.size) % 3 == 1, a128 * 1j, np.where(np.arange(a.size) % 3 == 2, -a128, a128))
    assert_close(out[:, 0], z, 2, dtype=np.complex64)
    assert_close(out[:, 1], acc, 4)
    assert np.array_equal(out[:, 2], rotated)
    assert np.array_equal(out[:, 3], np.where(np.arange(a.size) % 2 == 0, a128, 0))
    assert np.array_equal(out[:, 4], (a != 0).astype(np.complex128))
    assert_close(out[:, 5], np.abs(a128) + a128.conj() + a128.real + a128.imag, 4, dtype=np.complex64,
                 scale=3 * np.abs(a128))                         # computed in complex64: np.exp(z) is cmath's
    assert "acc: complex128" in control_flow.inspect_types()


# -- arrays ------------------------------------------------------------------------------------------------------------
@cuda.jit
def views_and_memories(m, out, n):
    i, j = cuda.grid(2)
    tile = cuda.shared.array((8, 8), np.complex128)
    regs = cuda.local.array(2, np.complex64)
    spill = cuda.local.array(4, np.complex64)
    if i < m.shape[0] and j < m.shape[1]:
        tile[i, j] = m[i, j]
        regs[0] = m[i, j]
        regs[1] = regs[0] * 2
        for k in range(n):                       # indexed at run time: in local memory
            spill[k] = m[i, j] * k
    cuda.syncthreads()
    if i < m.shape[0] and j < m.shape[1]:
        row = m[i]
        out[i, j] = tile[j % m.shape[0], i % m.shape[1]] + row[::-1][j] + regs[1] + spill[(i + j) % n]
        out[i, j] += m[1:, ::2][i % (m.shape[0] - 1), j // 2]


@APIS
def test_complex_arrays_views_shared_and_local_memory(api):
    m = random_complex(48, np.complex128, -1, 1).reshape(6, 8)
    out = api.device_array((6, 8), np.complex64)
    views_and_memories[1, (6, 8)](api.to_device(np.asfortranarray(m)), out, 4)
    i, j = np.indices(m.shape)
    terms = [m[j % 6, i % 8], m[i, 7 - j], m.astype(np.complex64) * np.complex64(2),
             (m * ((i + j) % 4)).astype(np.complex64), m[1:, ::2][i % 5, j // 2]]
    assert_close(out.copy_to_host(), sum(terms).astype(np.complex64), 8, scale=sum(np.abs(t) for t in terms))


@cuda.jit
def copy_scaled(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i] * 0.5


def test_host_arrays_device_arrays_and_elements():
    """Host complex arrays go to the device and back around a launch (numba's copies, with its warning); a device
    array's element comes back as a numpy complex scalar; a real array stored into a complex one gets 0j parts."""
    src = random_complex(10, np.complex64)
    dst = np.zeros(10, np.complex64)
    with pytest.warns(cuda.PerformanceWarning):
        copy_scaled[1, 32](src, dst)
    assert np.array_equal(dst, src * np.float32(0.5))
    d = cuda.device_array(10, dtype=np.complex128)
    copy_scaled[1, 32](cuda.to_device(np.arange(10, dtype=np.float32)), d)
    assert d[3] == 1.5 and isinstance(d[3], np.complex128)


@cuda.jit(void(complex64[:], complex64))
def typed(a, s):
    a[cuda.grid(1)] += s


@cuda.jit("void(c16[:, ::1], c16)")
def typed_string(a, s):
    a[cuda.grid(1), 0] = s


def test_typed_signatures_take_complex():
    a = cuda.to_device(np.ones(4, np.complex64))
    typed[1, 4](a, 2 + 1j)                       # a Python complex converted to the signature's complex64
    assert np.array_equal(a.copy_to_host(), np.full(4, 3 + 1j, np.complex64))
    b = cuda.to_device(np.zeros((4, 2), np.complex128))
    typed_string[1, 4](b, 5)
    assert np.array_equal(b.copy_to_host()[:, 0], np.full(4, 5, np.complex128))
    with pytest.raises(TypeError, match="no signature"):
        typed[1, 4](cuda.to_device(np.ones(4, np.float32)), 1j)


# -- cmath -------------------------------------------------------------------------------------------------------------
def cmath_kernel(fn):
    @cuda.jit
    def kernel(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = fn(a[i])
    return kernel


@cuda.jit(device=True)
def polar_as_complex(z):
    r, phi = cmath.polar(z)
    return complex(r, phi)


@cuda.jit(device=True)
def rect_of_parts(z):
    return cmath.rect(z.real, z.imag)


@cuda.jit(device=True)
def classify(z):
    return complex(cmath.isnan(z) + 2 * cmath.isinf(z), cmath.isfinite(z))


# name: (the kernel's function, numpy's, ulps of |result| for complex64, for complex128); float32's exp and its
# relatives lose digits as |x| grows (libdevice's expf), and log's real part near |z| = 1 is ln of a rounded |z|
CMATH = {
    "exp": (cmath.exp, np.exp, 16, 4), "log": (cmath.log, np.log, 4, 16), "log10": (cmath.log10, np.log10, 4, 16),
    "sqrt": (cmath.sqrt, np.sqrt, 2, 2), "sin": (cmath.sin, np.sin, 16, 4), "cos": (cmath.cos, np.cos, 16, 4),
    "tan": (cmath.tan, np.tan, 8, 8), "sinh": (cmath.sinh, np.sinh, 16, 4), "cosh": (cmath.cosh, np.cosh, 16, 4),
    "tanh": (cmath.tanh, np.tanh, 8, 8), "phase": (cmath.phase, np.angle, 2, 2), "abs": (abs, np.abs, 1, 2),
    "polar": (polar_as_complex, lambda z: np.abs(z) + 1j * np.angle(z), 2, 2),
    "rect": (rect_of_parts, lambda z: z.real * (np.cos(z.imag) + 1j * np.sin(z.imag)), 4, 4),
}
CHEAP = ["exp", "log", "sqrt", "abs", "phase", "polar", "rect"]      # complex128's float64 trigonometry compiles slowly


@pytest.mark.parametrize("dtype, name", [(np.complex64, n) for n in CMATH] + [(np.complex128, n) for n in CHEAP])
def test_cmath_functions_match_numpy(dtype, name):
    fn, numpy_fn, *ulps = CMATH[name]
    a = np.concatenate([random_complex(200, dtype, -3, 1), random_complex(56, dtype, -30, 30)])
    if name in ("exp", "sin", "cos", "sinh", "cosh", "tan", "tanh", "rect"):
        a = random_complex(256, dtype, -3, 1)           # where e^x does not overflow, nor sin y lose its digits
    out = np.zeros(a.size, dtype)
    cmath_kernel(fn)[2, 128](a, out)
    with np.errstate(all="ignore"):
        want = numpy_fn(a.astype(np.complex128)).astype(dtype)
    # ln |z| is ln of a rounded |z|: within ulps of 1 where |z| is near 1 and the logarithm near 0
    scale = np.maximum(np.abs(want), 1) if name in ("log", "log10") else None
    assert_close(out, want, ulps[dtype == np.complex128], scale=scale)


@pytest.mark.slow
@pytest.mark.parametrize("dtype, name", [(np.complex64, n) for n in ("asin", "acos", "atan", "asinh", "acosh",
                                                                     "atanh")] +
                         # complex128's float64 trigonometry compiles slowly (about a second a function): one of
                         # each family in the suite (the others share their code: cos and cosh sin's, acos asin's)
                         [(np.complex128, n) for n in ("sin", "tanh", "asinh")])
def test_more_cmath_functions_match_numpy(dtype, name):
    numpy_fn = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
                "atanh": np.arctanh}.get(name)
    fn, numpy_fn, ulps = (getattr(cmath, name), numpy_fn, 4) if numpy_fn else CMATH[name][:2] + (8,)
    a = random_complex(256, dtype, -3, 1)
    out = np.zeros(a.size, dtype)
    cmath_kernel(fn)[2, 128](a, out)
    assert_close(out, numpy_fn(a.astype(np.complex128)).astype(dtype), ulps)


INF, NAN, PI = math.inf, math.nan, math.pi
# (function, argument, numba's result): C99's values at zeros, infinities and NaNs, which numba's algorithms give
SPECIAL = [
    ("exp", complex(INF, 0.0), complex(INF, 0.0)), ("exp", complex(-INF, 1.0), complex(0.0, 0.0)),
    ("exp", complex(NAN, 0.0), complex(NAN, 0.0)), ("exp", complex(1.0, INF), complex(NAN, NAN)),
    ("sqrt", complex(-4.0, 0.0), complex(0.0, 2.0)), ("sqrt", complex(-4.0, -0.0), complex(0.0, -2.0)),
    ("sqrt", complex(-INF, 1.0), complex(0.0, INF)), ("sqrt", complex(1.0, INF), complex(INF, INF)),
    ("sqrt", complex(0.0, -0.0), complex(0.0, -0.0)),
    ("log", complex(0.0, 0.0), complex(-INF, 0.0)), ("log", complex(-1.0, 0.0), complex(0.0, PI)),
    ("log", complex(-1.0, -0.0), complex(0.0, -PI)), ("log", complex(INF, NAN), complex(INF, NAN)),
    ("phase", complex(-1.0, -0.0), -PI), ("abs", complex(INF, NAN), INF), ("abs", complex(3e-39, 4e-39), 5e-39),
    ("abs", complex(2e38, 2e38), 2e38 * math.sqrt(2)),
]


@TYPES
def test_cmath_at_infinities_nans_and_signed_zeros(dtype):
    fns = {"exp": cmath.exp, "sqrt": cmath.sqrt, "log": cmath.log, "phase": cmath.phase, "abs": abs}
    for name in fns:
        cases = [(z, w) for n, z, w in SPECIAL if n == name]
        a = np.array([z for z, _ in cases], dtype)
        out = np.zeros(a.size, dtype)
        cmath_kernel(fns[name])[1, 32](a, out)
        want = np.array([w for _, w in cases], np.complex128).astype(dtype)
        assert_close(out, want, 2)
        zeros = want == 0
        assert np.array_equal(np.signbit(out[zeros].real), np.signbit(want[zeros].real)), name
        assert np.array_equal(np.signbit(out[zeros].imag), np.signbit(want[zeros].imag)), name
    out = np.zeros(4, dtype)
    cmath_kernel(classify)[1, 4](np.array([1 + 1j, complex(NAN, 1), complex(1, -INF), complex(INF, NAN)], dtype), out)
    assert np.array_equal(out, np.array([1j, 1, 2, 3], dtype))        # isnan + 2 isinf, isfinite


# -- what numba refuses ------------------------------------------------------------------------------------------------
def complex_into_a_float_array(z, out, n):
    out[0] = z * 2


def complex_as_an_index(z, out, n):
    out[z] = 1.0


def complex_for_an_int(z, out, n):
    for i in range(z):
        out[i] = 1.0


def int_of_a_complex(z, out, n):
    out[0] = int(z)


def ordered_complex(z, out, n):
    if z < 1j:
        out[0] = 1.0


def math_of_a_complex(z, out, n):
    out[0] = math.sqrt(z)


def floor_division_of_a_complex(z, out, n):
    out[0] = (z // 2).real


REFUSED = [
    (complex_into_a_float_array, r"cannot use a complex128 value as an element of array 'out' of float32"),
    (complex_as_an_index, r"array index must be an integer, not a complex128 value"),
    (complex_for_an_int, r"range\(\) argument 1 \(start\) must be an integer, not a complex128 value"),
    (int_of_a_complex, r"int\(\) argument 1 \(x\) must be a number, not a complex128 value"),
    (ordered_complex, r"complex numbers have no order"),
    (math_of_a_complex, r"math\.sqrt\(\) argument 1 \(x\) must be a number, not a complex128 value"),
    (floor_division_of_a_complex, r"unsupported operator FloorDiv on complex numbers"),
]


@pytest.mark.parametrize("kernel, message", REFUSED, ids=[k.__name__ for k, _ in REFUSED])
def test_a_complex_where_a_real_number_is_needed_is_a_compile_error_at_its_line(kernel, message):
    with pytest.raises(cuda.CompileError, match=message) as e:
        cuda.jit(kernel)[1, 1](1 + 2j, cuda.device_array(4, np.float32), 4)
    line = kernel.__code__.co_firstlineno + 1
    assert e.value.filename == __file__ and e.value.line == line


def test_dtypes_and_names():
    """numba's names for the types, and complex dtypes as kernel types."""
    from lapis.numba import c8, c16, types
    assert c8 is complex64 is types.complex64 and c16 is complex128
    assert str(complex64[:, ::1]) == "array(complex64, 2d, C)" and complex128(1 + 2j) == np.complex128(1 + 2j)
