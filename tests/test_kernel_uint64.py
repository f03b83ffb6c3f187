"""Layer 3: uint64 in kernels (arrays, scalars, constants, arithmetic, conversions, atomics, print), each kernel
against numpy on the host, with numba's typing where it differs from numpy's (uint64 with int64 is int64 in an
operator, float64 where types merge)."""

import math

import numpy as np
import pytest

from lapis import cuda, hip, trace
from lapis.numba import u8, uint64, void

rng = np.random.default_rng(64)
U64 = np.uint64
EDGES = np.array([0, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**63 + 1,
                  2**63 + 2**10, 2**64 - 2**11, 2**64 - 2, 2**64 - 1], U64)
APIS = pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])


def values(n: int) -> np.ndarray:
    """n uint64s: the edges, then random ones over the whole range and below 2^32."""
    rest = n - EDGES.size
    return np.concatenate([EDGES, rng.integers(0, 2**64, rest - rest // 4, dtype=U64, endpoint=False),
                           rng.integers(0, 2**32, rest // 4, dtype=U64)])


@cuda.jit
def from_the_brief(a, b):
    i = cuda.grid(1)
    if i < a.size:
        b[i] = a[i] * np.uint64(3) + (a[i] >> np.uint64(60))


@APIS
def test_a_uint64_kernel_on_host_and_device_arrays(api):
    a = np.array([1, 2**63 + 5, 2**64 - 1, 12345678901234567890], U64)
    with np.errstate(over="ignore"):
        want = a * U64(3) + (a >> U64(60))
    b = np.zeros_like(a)
    with pytest.warns(cuda.PerformanceWarning):
        from_the_brief[1, 32](a, b)                   # host arrays: copied there and back
    assert b.dtype == U64 and np.array_equal(b, want)
    d = api.device_array(a.size, dtype=np.uint64)
    from_the_brief[1, 32](api.to_device(a), d)
    assert np.array_equal(d.copy_to_host(), want)


@cuda.jit
def arithmetic(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        x, y = a[i], b[i]
        out[i, 0] = x + y
        out[i, 1] = x - y
        out[i, 2] = x * y
        out[i, 3] = x // y
        out[i, 4] = x % y
        out[i, 5] = -x
        out[i, 6] = x & y
        out[i, 7] = x | y
        out[i, 8] = x ^ y
        out[i, 9] = ~x
        out[i, 10] = min(x, y)
        out[i, 11] = max(x, y)
        out[i, 12] = abs(x)
        out[i, 13] = x // 10
        out[i, 14] = x % 1000
        out[i, 15] = x % 2**40                        # a mask wider than an immediate
        out[i, 16] = x // 2**33


@APIS
def test_arithmetic_wraps_and_divides_unsigned(api):
    """+ - * wrap modulo 2^64, // and % divide unsigned over the whole range (divisors from 2^63 up too, and
    operands within 32 bits, the short path), and a zero divisor gives 0 and 0, as numba's kernels."""
    a = values(512)
    b = np.concatenate([rng.permutation(a)[:448], EDGES, rng.integers(1, 100, 46, dtype=U64)])
    b[::37] = 0
    out = api.device_array((a.size, 17), np.uint64)
    arithmetic[(a.size + 127) // 128, 128](api.to_device(a), api.to_device(b), out)
    got = out.copy_to_host()
    with np.errstate(over="ignore", divide="ignore"):
        want = [a + b, a - b, a * b, a // b, a % b, U64(0) - a, a & b, a | b, a ^ b, ~a, np.minimum(a, b),
                np.maximum(a, b), a, a // U64(10), a % U64(1000), a % U64(2**40), a // U64(2**33)]
    for k, w in enumerate(want):
        assert np.array_equal(got[:, k], w), k
    assert (got[b == 0, 3] == 0).all() and (got[b == 0, 4] == 0).all()


@cuda.jit
def division(a, b, q, r):
    i = cuda.grid(1)
    if i < a.size:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]


def test_a_division_within_32_bits_takes_the_short_path():
    def instructions(a, b):
        q, r = cuda.device_array_like(a), cuda.device_array_like(a)
        with trace() as t:
            division[1, 64](cuda.to_device(a), cuda.to_device(b), q, r)
            cuda.synchronize()
        assert np.array_equal(q.copy_to_host(), a // b) and np.array_equal(r.copy_to_host(), a % b)
        return t.select(0, "kernel")[0].args["thread_instructions"]
    a, b = rng.integers(0, 2**32, 64, dtype=U64), rng.integers(1, 2**32, 64, dtype=U64)
    assert instructions(a, b) < 0.5 * instructions(a + U64(2**63), b)


@cuda.jit
def comparisons(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        x, y = a[i], b[i]
        out[i, 0] = x < y
        out[i, 1] = x <= y
        out[i, 2] = x > y
        out[i, 3] = x >= y
        out[i, 4] = x == y
        out[i, 5] = x != y
        out[i, 6] = x > 9223372036854775808       # a literal from 2^63 up is a uint64
        out[i, 7] = x < -1                        # an unsigned value is never below a negative literal
        out[i, 8] = x >= -5
        out[i, 9] = 1 if x else 0


@APIS
def test_comparisons_are_unsigned(api):
    a = values(256)
    b = np.concatenate([rng.permutation(a)[:128], a[128:]])
    out = api.device_array((a.size, 10), np.bool_)
    comparisons[2, 128](api.to_device(a), api.to_device(b), out)
    got = out.copy_to_host()
    want = [a < b, a <= b, a > b, a >= b, a == b, a != b, a > U64(2**63), np.zeros(a.size, bool),
            np.ones(a.size, bool), a != 0]
    for k, w in enumerate(want):
        assert np.array_equal(got[:, k], w), k


@cuda.jit
def shifts(a, s, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i, 0] = a[i] >> s[i]                  # logical: zeros come in from the top
        out[i, 1] = a[i] << s[i]
        out[i, 2] = a[i] >> 1
        out[i, 3] = (a[i] << np.uint64(7)) | (a[i] >> np.uint64(57))


def test_shifts_are_logical():
    a = values(256)
    s = rng.integers(0, 64, a.size, dtype=U64)
    out = cuda.device_array((a.size, 4), np.uint64)
    shifts[2, 128](cuda.to_device(a), cuda.to_device(s), out)
    got = out.copy_to_host()
    assert np.array_equal(got[:, 0], a >> s) and np.array_equal(got[:, 1], a << s)
    assert np.array_equal(got[:, 2], a >> U64(1)) and np.array_equal(got[:, 3], (a << U64(7)) | (a >> U64(57)))


def to_float32(x: int) -> np.float32:
    """x rounded once to float32 (to nearest, ties to even): numpy's own cast goes through float64 on some hosts."""
    shift = x.bit_length() - 24
    if shift <= 0:
        return np.float32(x)
    q, r = divmod(x, 1 << shift)
    if r > 1 << (shift - 1) or r == 1 << (shift - 1) and q & 1:
        q += 1
    return np.float32(q * 2.0**shift)


@cuda.jit
def to_floats(a, f64, f32, f16):
    i = cuda.grid(1)
    if i < a.size:
        f64[i] = a[i]
        f32[i] = np.float32(a[i])
        f16[i] = np.float16(a[i] >> 50)


@APIS
def test_uint64_to_float_rounds_once_above_2_to_the_63(api):
    """Ties at 2^63 + 2^10 and 2^64 - 2^10 go to even, 2^64 - 1 rounds up to 2^64: one rounding of the exact
    value, as numpy's and numba's."""
    a = np.concatenate([values(256), U64(2**63) + rng.integers(0, 2**12, 64, dtype=U64),
                        U64(2**64 - 2**12) + rng.integers(0, 2**12, 64, dtype=U64),
                        np.array([2**63 + 2**39, 2**63 + 2**40, 2**63 + 3 * 2**39, 2**64 - 2**39], U64)])
    f64, f32, f16 = (api.device_array(a.size, t) for t in (np.float64, np.float32, np.float16))
    to_floats[(a.size + 127) // 128, 128](api.to_device(a), f64, f32, f16)
    assert np.array_equal(f64.copy_to_host(), np.array([float(int(x)) for x in a]))
    assert np.array_equal(f32.copy_to_host(), np.array([to_float32(int(x)) for x in a], np.float32))
    assert np.array_equal(f16.copy_to_host(), (a >> U64(50)).astype(np.float16))


@cuda.jit
def from_floats(f64, f32, out):
    i = cuda.grid(1)
    if i < f64.size:
        out[i, 0] = np.uint64(f64[i])
        out[i, 1] = np.uint64(f32[i])
        out[i, 2] = uint64(f64[i] * 0.5)


def truncated(x: float) -> int:
    """float -> uint64 as the kernel converts: truncated, 2^64 and above saturate at 2^64 - 1, NaN is 0, and a
    negative value wraps as its int64 (numpy's cast on x86 hosts)."""
    if math.isnan(x):
        return 0
    if x >= 2.0**64:
        return 2**64 - 1
    return math.trunc(x) & (2**64 - 1)


def test_float_to_uint64_is_exact_above_2_to_the_63():
    f64 = np.concatenate([values(192).astype(np.float64), rng.uniform(0, 2**64, 48), rng.uniform(0, 100, 8),
                          [2.0**63, 2.0**64 - 2048, 2.0**64, 1e30, np.inf, np.nan, -1.0, -2.5]])
    f32 = f64.astype(np.float32)
    out = cuda.device_array((f64.size, 3), np.uint64)
    from_floats[(f64.size + 127) // 128, 128](cuda.to_device(f64), cuda.to_device(f32), out)
    got = out.copy_to_host()
    assert got[:, 0].tolist() == [truncated(x) for x in f64]
    assert got[:, 1].tolist() == [truncated(float(x)) for x in f32]
    assert got[:, 2].tolist() == [truncated(x * 0.5) for x in f64]


@cuda.jit
def integer_casts(a, i32, u32, i64, out, back):
    i = cuda.grid(1)
    if i < a.size:
        out[i, 0] = np.int32(a[i])
        out[i, 1] = np.uint32(a[i])
        out[i, 2] = np.int64(a[i])
        out[i, 3] = a[i] != 0
        back[i, 0] = np.uint64(i32[i])            # sign-extended, as numpy's cast
        back[i, 1] = np.uint64(u32[i])            # zero-extended
        back[i, 2] = np.uint64(i64[i])
        back[i, 3] = np.uint64(a[i] > 5)


def test_casts_between_uint64_and_the_other_integers():
    a = values(128)
    i32 = rng.integers(-2**31, 2**31, a.size).astype(np.int32)
    u32 = rng.integers(0, 2**32, a.size).astype(np.uint32)
    i64 = rng.integers(-2**63, 2**63, a.size, dtype=np.int64)
    out, back = cuda.device_array((a.size, 4), np.int64), cuda.device_array((a.size, 4), np.uint64)
    integer_casts[1, 128](*(cuda.to_device(x) for x in (a, i32, u32, i64)), out, back)
    got, gback = out.copy_to_host(), back.copy_to_host()
    assert np.array_equal(got[:, 0], a.astype(np.int32)) and np.array_equal(got[:, 1], a.astype(np.uint32))
    assert np.array_equal(got[:, 2], a.view(np.int64)) and np.array_equal(got[:, 3], a != 0)
    assert np.array_equal(gback[:, 0], i32.astype(U64)) and np.array_equal(gback[:, 1], u32.astype(U64))
    assert np.array_equal(gback[:, 2], i64.view(U64)) and np.array_equal(gback[:, 3], a > 5)


@cuda.jit
def numba_typing(u, i, w, ints, floats):
    s = u + i                 # int64: numba's operator typing (numpy's would be float64)
    t = u + w                 # uint64
    m = min(u, i)             # float64: numba merges uint64 and int64 as numpy does
    x = u
    if i > 0:
        x = i                 # x: float64
    ints[0] = s
    ints[1] = t
    ints[2] = u // -2         # a negative literal is an int64: the division is int64's
    ints[3] = int(u)          # int() keeps a uint64
    ints[4] = u + 1           # a literal takes the other operand's type (lapis's weak literals)
    ints[5] = u == i          # compared as float64, as numba: 2^63 + 1 and 2^63 - 1 are one float64
    floats[0] = m
    floats[1] = x


def test_mixed_signedness_follows_numba():
    ints, floats = cuda.device_array(6, np.int64), cuda.device_array(2, np.float64)
    numba_typing[1, 1](U64(2**63 + 1), np.int64(2**63 - 1), np.uint32(5), ints, floats)
    got = ints.copy_to_host()
    as_int64 = 2**63 + 1 - 2**64                          # u's bits as an int64
    assert got.tolist() == [as_int64 + 2**63 - 1, as_int64 + 5, as_int64 // -2, as_int64, as_int64 + 1, 1]
    assert floats.copy_to_host().tolist() == [2.0**63, 2.0**63]
    (compiled,) = numba_typing.overloads.values()
    types = {name: str(t) for name, t in compiled.variable_types.items()}
    assert types == {"s": "int64", "t": "uint64", "m": "float64", "x": "float64"}


@cuda.jit
def fill(out, v, n):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = v - i + n


def test_uint64_scalar_arguments():
    out = cuda.device_array(8, np.uint64)
    fill[1, 32](out, U64(2**64 - 1), U64(0))
    assert out.copy_to_host().tolist() == [2**64 - 1 - k for k in range(8)]
    fill[1, 32](out, 2**63 + 10, 0)                   # a Python int from 2^63 up is a uint64, as numba types it
    assert out.copy_to_host().tolist() == [2**63 + 10 - k for k in range(8)]
    assert [str(t) for t in list(fill.overloads)[1]][1] == "uint64"


def test_typed_signatures_take_uint64():
    @cuda.jit("void(uint64[:], uint64, u8)")
    def by_string(out, v, n):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = v + n * i

    @cuda.jit(void(uint64[:, ::1], u8))
    def by_objects(out, v):
        i, j = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = v ^ (i * out.shape[1] + j)

    out = cuda.device_array(5, np.uint64)
    by_string[1, 32](out, 2**64 - 5, 1)               # numbers converted to the signature's uint64
    assert out.copy_to_host().tolist() == [2**64 - 5 + k for k in range(5)]
    grid = cuda.device_array((3, 4), np.uint64)
    by_objects[(1, 1), (8, 8)](grid, U64(2**63))
    assert grid.copy_to_host().ravel().tolist() == [2**63 + k for k in range(12)]


@cuda.jit
def two_dimensional(a, out):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        x = a[i, j]
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        out[i, j] = x


@APIS
def test_n_dimensional_arrays_in_either_layout(api):
    a = values(96).reshape(8, 12)
    with np.errstate(over="ignore"):
        x = a ^ (a >> U64(30))
        x = x * U64(0xBF58476D1CE4E5B9)
        want = x ^ (x >> U64(27))
    for host in (a, np.asfortranarray(a)):
        out = api.device_array(a.shape, np.uint64)
        two_dimensional[(1, 2), (8, 8)](api.to_device(host), out)
        assert np.array_equal(out.copy_to_host(), want)


@cuda.jit
def in_shared_and_local_memory(a, idx, out):
    s = cuda.shared.array(64, np.uint64)
    local = cuda.local.array(3, np.uint64)
    t = cuda.threadIdx.x
    s[t] = a[t]
    cuda.syncthreads()
    for k in range(3):
        local[k] = s[(t + k) % 64]
    out[t, 0] = local[0] + local[1] + local[2]
    out[t, 1] = a[idx[t]]                          # a uint64 index
    out[t, 2] = cuda.shfl_down_sync(0xFFFFFFFF, a[t], 1)


def test_shared_and_local_arrays_indices_and_shuffles():
    a, idx = values(64), rng.integers(0, 64, 64, dtype=U64)
    out = cuda.device_array((64, 3), np.uint64)
    in_shared_and_local_memory[1, 64](cuda.to_device(a), cuda.to_device(idx), out)
    got = out.copy_to_host()
    with np.errstate(over="ignore"):
        assert np.array_equal(got[:, 0], a + np.roll(a, -1) + np.roll(a, -2))
    assert np.array_equal(got[:, 1], a[idx])
    lane = np.arange(64) % 32
    assert np.array_equal(got[:, 2], np.where(lane < 31, np.roll(a, -1), a))


@cuda.jit
def loops(n, out):
    total = np.uint64(0)
    for k in range(n):
        total += np.uint64(k)
    out[0] = total
    down = 0
    for j in range(n - 1, -1, -1):                 # an int64 counter, as numba's: it reaches -1 and stops
        down += j
    out[1] = down


def test_loops_over_a_uint64_count():
    out = cuda.device_array(2, np.uint64)
    loops[1, 1](U64(10), out)
    assert out.copy_to_host().tolist() == [45, 45]


@cuda.jit
def atomics(a, v):
    i = cuda.grid(1)
    cuda.atomic.add(a, 0, v[i])
    cuda.atomic.max(a, 1, v[i])
    cuda.atomic.min(a, 2, v[i])
    cuda.atomic.xor(a, 3, v[i])
    cuda.atomic.or_(a, 4, v[i])
    cuda.atomic.and_(a, 5, v[i])
    cuda.atomic.sub(a, 6, v[i])
    cuda.atomic.inc(a, 7, np.uint64(2**63))
    cuda.atomic.dec(a, 8, np.uint64(2**63))
    if i < 32:                                   # one warp: its lanes succeed in lane order, 0 -> 1 -> ... -> 32
        cuda.atomic.cas(a, 9, np.uint64(i), np.uint64(i + 1))
    cuda.atomic.exch(a, 10 + i % 2, v[i])


@APIS
def test_atomics_on_uint64_arrays(api):
    """add, sub, exch and cas are ATOMG.U64 (64-bit words), max and min its unsigned ones; and_, or_, xor, inc and
    dec are compare-and-swap loops on the 64-bit cas."""
    v = values(64)
    a = np.array([0, 0, 2**64 - 1, 0, 0, 2**64 - 1, 0, 0, 0, 0, 0, 0], U64)
    d = api.to_device(a)
    atomics[2, 32](d, api.to_device(v))
    with np.errstate(over="ignore"):
        total = np.add.reduce(v, dtype=U64)
        want = [total, v.max(), v.min(), np.bitwise_xor.reduce(v), np.bitwise_or.reduce(v),
                np.bitwise_and.reduce(v), U64(0) - total, 64, 2**63 - 63, 32]     # dec: 0 wraps to 2^63
    got = d.copy_to_host()
    assert got[:10].tolist() == [int(w) for w in want]
    assert got[10] in v[::2] and got[11] in v[1::2]


@cuda.jit
def shared_atomics(v, out):
    s = cuda.shared.array(3, np.uint64)
    t = cuda.threadIdx.x
    if t == 0:
        s[0], s[1], s[2] = np.uint64(0), np.uint64(2**64 - 1), np.uint64(0)
    cuda.syncthreads()
    out[t, 0] = cuda.atomic.add(s, 0, v[t])
    cuda.atomic.min(s, 1, v[t])
    cuda.atomic.max(s, 2, v[t])
    cuda.syncthreads()
    if t == 0:
        out[32, 0], out[32, 1], out[32, 2] = s[0], s[1], s[2]


def test_atomics_on_shared_uint64_arrays_return_the_old_values():
    v = values(32)
    out = cuda.device_array((33, 3), np.uint64)
    shared_atomics[1, 32](cuda.to_device(v), out)
    got = out.copy_to_host()
    with np.errstate(over="ignore"):
        running = np.cumsum(v, dtype=U64)
    assert np.array_equal(got[:32, 0], running - v)            # one warp: its lanes apply in lane order
    assert got[32].tolist() == [int(running[-1]), int(v.min()), int(v.max())]


@cuda.jit
def print_uint64(a):
    print("max", a[0], np.uint64(2**63), a[1])


def test_print_of_a_uint64_is_unsigned(capsys):
    print_uint64[1, 1](cuda.to_device(np.array([2**64 - 1, 7], U64)))
    cuda.synchronize()
    assert capsys.readouterr().out == f"max {2**64 - 1} {2**63} 7\n"


SPLITMIX = 0x9E3779B97F4A7C15


@cuda.jit
def splitmix64(seeds, out):
    i = cuda.grid(1)
    if i < seeds.size:
        z = seeds[i] + SPLITMIX                         # a global int from 2^63 up: a uint64 constant
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        out[i] = z ^ (z >> 31)


def test_splitmix64_is_numpys():
    seeds = values(200)
    out = cuda.device_array_like(seeds)
    splitmix64[2, 128](cuda.to_device(seeds), out)
    with np.errstate(over="ignore"):
        z = seeds + U64(SPLITMIX)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    assert np.array_equal(out.copy_to_host(), z ^ (z >> U64(31)))
    (compiled,) = splitmix64.overloads.values()
    assert str(compiled.variable_types["z"]) == "uint64"
