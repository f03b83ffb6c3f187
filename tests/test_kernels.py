"""Layer 3: a suite of numba.cuda-style kernels, compiled and run, against numpy references."""

import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lapis import cuda, trace
from lapis.cuda.compiler.codegen import _parallel_moves

rng = np.random.default_rng(11)


@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def test_saxpy():
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = cuda.device_array(n, np.float32)
    saxpy[(n + 255) // 256, 256](np.float32(2.5), cuda.to_device(x), cuda.to_device(y), out)
    # a * x[i] + y[i] compiles to one FFMA, rounded once: the exact value, rounded to float32
    assert np.array_equal(out.copy_to_host(), (2.5 * x.astype(np.float64) + y).astype(np.float32))


@cuda.jit
def sum_shared_tree(x, partial):
    s = cuda.shared.array(256, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    stride = 128
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]


@cuda.jit
def sum_warp_shuffle(x, out):
    i = cuda.grid(1)
    v = x[i] if i < x.size else 0.0
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


@cuda.jit
def sum_atomics(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


def test_reductions_three_ways():
    n = 5000
    x = rng.random(n).astype(np.float32)
    d_x = cuda.to_device(x)
    blocks = (n + 255) // 256
    partial = cuda.device_array(blocks, np.float32)
    sum_shared_tree[blocks, 256](d_x, partial)
    shuffled, atomic = cuda.to_device(np.zeros(1, np.float32)), cuda.to_device(np.zeros(1, np.float32))
    sum_warp_shuffle[blocks, 256](d_x, shuffled)
    sum_atomics[blocks, 256](d_x, atomic)
    expected = x.astype(np.float64).sum()
    assert partial.copy_to_host().sum() == pytest.approx(expected, rel=1e-5)
    assert shuffled.copy_to_host()[0] == pytest.approx(expected, rel=1e-5)
    assert atomic.copy_to_host()[0] == pytest.approx(expected, rel=1e-5)


@cuda.jit
def inclusive_scan(x, out):
    s = cuda.shared.array(512, np.int32)             # two buffers of 256: read one, write the other
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncthreads()
    src = 0
    offset = 1
    while offset < 256:
        dst = 256 - src
        v = s[src + t]
        if t >= offset:
            v += s[src + t - offset]
        s[dst + t] = v
        cuda.syncthreads()
        src = dst
        offset *= 2
    out[t] = s[src + t]


def test_prefix_scan():
    x = rng.integers(0, 100, 256).astype(np.int32)
    out = cuda.device_array(256, np.int32)
    inclusive_scan[1, 256](cuda.to_device(x), out)
    assert np.array_equal(out.copy_to_host(), np.cumsum(x))


TILE = 16


@cuda.jit
def transpose(a, out):
    tile = cuda.shared.array((TILE, TILE + 1), np.float32)       # +1: no bank conflicts on the column read
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    if y < a.shape[0] and x < a.shape[1]:
        tile[ty, tx] = a[y, x]
    cuda.syncthreads()
    ox = cuda.blockIdx.y * TILE + tx
    oy = cuda.blockIdx.x * TILE + ty
    if oy < out.shape[0] and ox < out.shape[1]:
        out[oy, ox] = tile[tx, ty]


def test_transpose_through_shared_memory_on_a_2d_grid():
    a = rng.standard_normal((40, 70)).astype(np.float32)
    out = cuda.device_array((70, 40), np.float32)
    transpose[((70 + 15) // 16, (40 + 15) // 16), (16, 16)](cuda.to_device(a), out)
    assert np.array_equal(out.copy_to_host(), a.T)


@cuda.jit
def histogram(data, bins):
    local = cuda.shared.array(16, np.int32)
    t = cuda.threadIdx.x
    if t < 16:
        local[t] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < data.size:
        cuda.atomic.add(local, data[i] % 16, 1)
    cuda.syncthreads()
    if t < 16:
        cuda.atomic.add(bins, t, local[t])


def test_histogram_with_shared_and_global_atomics():
    data = rng.integers(0, 1000, 3000).astype(np.int32)
    bins = cuda.to_device(np.zeros(16, np.int32))
    histogram[12, 256](cuda.to_device(data), bins)
    assert np.array_equal(bins.copy_to_host(), np.bincount(data % 16, minlength=16))


@cuda.jit
def tiled_matmul(a, b, c):
    sa = cuda.shared.array((TILE, TILE), np.float32)
    sb = cuda.shared.array((TILE, TILE), np.float32)
    col, row = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = 0.0
    for k0 in range(0, a.shape[1], TILE):
        sa[ty, tx] = a[row, k0 + tx] if row < a.shape[0] and k0 + tx < a.shape[1] else 0.0
        sb[ty, tx] = b[k0 + ty, col] if k0 + ty < b.shape[0] and col < b.shape[1] else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


def test_tiled_matmul_and_its_compile_cache():
    a = rng.standard_normal((50, 37)).astype(np.float32)
    b = rng.standard_normal((37, 45)).astype(np.float32)
    c = cuda.device_array((50, 45), np.float32)
    with trace() as t:
        tiled_matmul[(3, 4), (16, 16)](cuda.to_device(a), cuda.to_device(b), c)
        cuda.synchronize()
    assert np.allclose(c.copy_to_host(), a @ b, rtol=1e-4, atol=1e-4)
    assert not t.first(3, "compile").args["cached"]
    again = cuda.jit(tiled_matmul.py_func)                        # a fresh dispatcher, as in a new process
    with trace() as t:
        again[(3, 4), (16, 16)](cuda.to_device(a), cuda.to_device(b), c)
    assert t.first(3, "compile").args["cached"]


@cuda.jit
def softmax_rows(x, out):
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    s = cuda.shared.array(128, np.float32)
    n = x.shape[1]
    m = -math.inf
    for j in range(t, n, 128):
        m = max(m, x[row, j])
    s[t] = m
    cuda.syncthreads()
    stride = 64
    while stride > 0:
        if t < stride:
            s[t] = max(s[t], s[t + stride])
        cuda.syncthreads()
        stride //= 2
    m = s[0]
    cuda.syncthreads()
    total = 0.0
    for j in range(t, n, 128):
        total += math.exp(x[row, j] - m)
    s[t] = total
    cuda.syncthreads()
    stride = 64
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    for j in range(t, n, 128):
        out[row, j] = math.exp(x[row, j] - m) / s[0]


def test_softmax_rows():
    x = (rng.standard_normal((6, 300)) * 4).astype(np.float32)
    out = cuda.device_array_like(x)
    softmax_rows[6, 128](cuda.to_device(x), out)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    assert np.allclose(out.copy_to_host(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@cuda.jit
def stencil(x, out):
    halo = cuda.shared.array(0, np.float32)            # dynamic: blockDim.x + 2 elements
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.size
    halo[t + 1] = x[i] if i < n else 0.0
    if t == 0:
        halo[0] = x[i - 1] if i > 0 else 0.0
    if t == cuda.blockDim.x - 1:
        halo[t + 2] = x[i + 1] if i + 1 < n else 0.0
    cuda.syncthreads()
    if i < n:
        out[i] = 0.25 * halo[t] + 0.5 * halo[t + 1] + 0.25 * halo[t + 2]


def test_stencil_with_dynamic_shared_memory():
    x = rng.standard_normal(1000).astype(np.float32)
    out = cuda.device_array_like(x)
    stencil[4, 256, 0, (256 + 2) * 4](cuda.to_device(x), out)
    padded = np.concatenate([[0], x, [0]])
    assert np.allclose(out.copy_to_host(), 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:], atol=1e-6)


@cuda.jit
def index_3d(out):
    x, y, z = cuda.grid(3)
    nx, ny, nz = cuda.gridsize(3)
    if x < out.shape[2] and y < out.shape[1] and z < out.shape[0]:
        out[z, y, x] = x + 10 * y + 100 * z + 1000 * (nx * ny * nz > 0)


def test_3d_grids():
    out = cuda.device_array((3, 5, 7), np.int32)
    index_3d[(2, 2, 3), (4, 4, 1)](out)
    z, y, x = np.indices((3, 5, 7))
    assert np.array_equal(out.copy_to_host(), x + 10 * y + 100 * z + 1000)


@cuda.jit(device=True)
def collatz_steps(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@cuda.jit
def collatz(start, out):
    i = cuda.grid(1)
    if i < start.size:
        out[i] = collatz_steps(start[i])


def test_divergence_heavy_loops_in_a_device_function():
    start = rng.integers(1, 3000, 500).astype(np.int64)
    out = cuda.device_array(500, np.int64)
    collatz[2, 256](cuda.to_device(start), out)

    def steps(n):
        k = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            k += 1
        return k
    assert list(out.copy_to_host()) == [steps(int(n)) for n in start]


@cuda.jit
def sort_small_rows(x, out):
    i = cuda.grid(1)
    buf = cuda.local.array(8, np.float32)
    if i < x.shape[0]:
        n = x.shape[1]
        for k in range(n):
            buf[k] = x[i, k]
        for a in range(1, n):                         # insertion sort: run-time indices, local memory
            v = buf[a]
            b = a - 1
            while b >= 0 and buf[b] > v:
                buf[b + 1] = buf[b]
                b -= 1
            buf[b + 1] = v
        for k in range(n):
            out[i, k] = buf[k]


def test_local_arrays_indexed_at_run_time_live_in_local_memory():
    x = rng.standard_normal((64, 8)).astype(np.float32)
    out = cuda.device_array_like(x)
    sort_small_rows[1, 64](cuda.to_device(x), out)
    assert np.array_equal(out.copy_to_host(), np.sort(x, axis=1))
    assert "32 bytes lmem" in sort_small_rows.resources()


@cuda.jit
def int_division(a, b, q, r):
    i = cuda.grid(1)
    if i < a.size:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_division_follows_python(dtype):
    """Random operands over the type's whole range, exact multiples and their neighbours (where a
    quotient estimated in floating point falls just short of an integer), and the type's extremes."""
    info = np.iinfo(dtype)
    g = np.random.default_rng(3)
    b = np.concatenate([g.integers(1, 5000, 300), g.integers(1, info.max, 300, endpoint=True)])
    multiples = [min(max(int(q) * int(d) + int(e), info.min), info.max)        # q b - 1, q b, q b + 1
                 for q, d, e in zip(g.integers(0, 2**16, 600), b, g.integers(-1, 2, 600), strict=True)]
    a = np.concatenate([g.integers(info.min, info.max, 600, endpoint=True), np.array(multiples, np.int64)])
    b = np.concatenate([b, b])
    if info.min:
        b[::2] *= -1
        a[1::4] *= -1
    edges = np.array([info.min, info.min + 1, -1, 1, 2, info.max - 1, info.max], np.int64)
    edges = edges[(edges >= info.min) & (edges <= info.max)]
    a = np.concatenate([a, np.repeat(edges, len(edges))]).astype(dtype)
    b = np.concatenate([b, np.tile(edges, len(edges))]).astype(dtype)
    keep = (b != 0) & ~((a == info.min) & (b == -1) if info.min else False)
    a, b = a[keep], b[keep]
    q, r = cuda.device_array_like(a), cuda.device_array_like(a)
    int_division[(a.size + 255) // 256, 256](cuda.to_device(a), cuda.to_device(b), q, r)
    assert np.array_equal(q.copy_to_host(), a // b) and np.array_equal(r.copy_to_host(), a % b)


def test_a_64_bit_division_of_operands_within_32_bits_takes_the_short_path():
    def instructions(a, b):
        q, r = cuda.device_array_like(a), cuda.device_array_like(a)
        with trace() as t:
            int_division[1, 64](cuda.to_device(a), cuda.to_device(b), q, r)
            cuda.synchronize()
        assert np.array_equal(q.copy_to_host(), a // b) and np.array_equal(r.copy_to_host(), a % b)
        return t.select(0, "kernel")[0].args["thread_instructions"]
    g = np.random.default_rng(4)
    a, b = g.integers(0, 2**31, 64), g.integers(1, 2**20, 64)
    assert instructions(a, b) < 0.5 * instructions(a + 2**40, b)        # the full division costs 3x more


def test_int32_division_of_the_minimum_by_minus_one_wraps():
    a, b = np.array([-2**31], np.int32), np.array([-1], np.int32)
    q, r = cuda.device_array_like(a), cuda.device_array_like(a)
    int_division[1, 32](cuda.to_device(a), cuda.to_device(b), q, r)
    assert q.copy_to_host()[0] == -2**31 and r.copy_to_host()[0] == 0       # 2^31 wraps, as int32 adds do


def test_64_bit_division_is_exact_past_2_to_the_53():
    """Numerators beyond float64's 53 bits (rounded in the quotient's estimate) still divide exactly,
    by small and large divisors of either sign."""
    g = np.random.default_rng(5)
    a = np.concatenate([g.integers(-2**63 + 1, 2**63 - 1, 192), g.integers(-2**20, 2**20, 64)])
    b = np.concatenate([g.integers(1, 100, 64), -g.integers(1, 2**20, 64), g.integers(-2**62, 2**62, 128)])
    b[b == 0] = 3
    q, r = cuda.device_array_like(a), cuda.device_array_like(a)
    int_division[1, 256](cuda.to_device(a), cuda.to_device(b), q, r)
    assert np.array_equal(q.copy_to_host(), a // b) and np.array_equal(r.copy_to_host(), a % b)


@cuda.jit
def true_division(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] / b[i]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_division_follows_ieee_at_zero_and_infinity(dtype):
    # a divisor of +-0 or +-inf, or an infinite dividend: IEEE's +-inf, +-0 and NaN exactly, signs included
    # (a Newton step after the reciprocal would make every one of them NaN); ordinary quotients within an ulp
    specials = [1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3.5]
    n = len(specials) ** 2
    a = np.array([x for x in specials for _ in specials] + list(rng.uniform(-9, 9, 64)), dtype)
    b = np.array(specials * len(specials) + list(rng.uniform(0.5, 9, 64)), dtype)
    out = cuda.device_array_like(a)
    true_division[1, 256](cuda.to_device(a), cuda.to_device(b), out)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        want = a / b
    np.testing.assert_array_equal(got[:n], want[:n])
    numbers = ~np.isnan(want[:n])                               # a NaN's sign bit means nothing
    assert np.array_equal(np.signbit(got[:n][numbers]), np.signbit(want[:n][numbers]))
    np.testing.assert_allclose(got[n:], want[n:], rtol=np.finfo(dtype).eps, atol=0)


@cuda.jit
def votes_and_ballots(x, out):
    i = cuda.grid(1)
    positive = x[i] > 0
    out[i, 0] = cuda.ballot_sync(0xFFFFFFFF, positive)
    out[i, 1] = cuda.any_sync(0xFFFFFFFF, positive)
    out[i, 2] = cuda.all_sync(0xFFFFFFFF, positive)
    out[i, 3] = cuda.shfl_sync(0xFFFFFFFF, x[i], 5)
    out[i, 4] = cuda.shfl_up_sync(0xFFFFFFFF, x[i], 1)


def test_warp_votes_and_shuffles():
    x = rng.integers(-3, 10, 64).astype(np.int32)
    x[32:] = np.abs(x[32:]) + 1                           # the second warp is all positive
    out = cuda.device_array((64, 5), np.int64)
    votes_and_ballots[1, 64](cuda.to_device(x), out)
    got = out.copy_to_host()
    for w in range(2):
        lanes = x[32 * w:32 * w + 32]
        rows = got[32 * w:32 * w + 32]
        assert (rows[:, 0] == sum(1 << k for k in range(32) if lanes[k] > 0)).all()
        assert (rows[:, 1] == (lanes > 0).any()).all() and (rows[:, 2] == (lanes > 0).all()).all()
        assert (rows[:, 3] == lanes[5]).all()
        assert list(rows[:, 4]) == [lanes[0], *lanes[:31]]


@cuda.jit
def special_math(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i, 0] = math.erf(v)
        out[i, 1] = math.tanh(v)
        out[i, 2] = math.hypot(v, 1.5)
        out[i, 3] = math.log10(abs(v) + 1)


def test_math_functions():
    x = np.linspace(-3, 3, 100).astype(np.float32)
    out = cuda.device_array((100, 4), np.float32)
    special_math[1, 128](cuda.to_device(x), out)
    got = out.copy_to_host()
    erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.allclose(got[:, 0], erf, atol=3e-7)
    assert np.allclose(got[:, 1], np.tanh(x), atol=1e-6)
    assert np.allclose(got[:, 2], np.hypot(x, 1.5), rtol=1e-6)
    assert np.allclose(got[:, 3], np.log10(np.abs(x) + 1), rtol=1e-6, atol=1e-7)


def test_device_function_errors_name_the_file_and_line():
    @cuda.jit(device=True)
    def bad(x):
        return x.nope

    @cuda.jit
    def uses_bad(out):
        out[0] = bad(1.0)

    with pytest.raises(cuda.CompileError, match=r"test_kernels.py:\d+: .*has no attribute 'nope'"):
        uses_bad[1, 1](cuda.device_array(1, np.float32))


@cuda.jit
def loop_work(x, out, scale, n):
    i = cuda.grid(1)
    acc = 0.0
    for k in range(n):
        w = scale * 3.0 + 1.0                          # invariant: computed once, before the loop
        acc += x[(k * 4 + i) % x.size] * w              # k * 4: an induction variable stepping by 4
    out[i] = acc


def test_invariant_code_leaves_loops_and_multiplies_become_adds():
    x = rng.standard_normal(64).astype(np.float32)
    out = cuda.device_array(16, np.float32)
    loop_work[1, 16](cuda.to_device(x), out, np.float32(0.5), 10)
    idx = (np.arange(10)[None, :] * 4 + np.arange(16)[:, None]) % 64
    assert np.allclose(out.copy_to_host(), (x[idx] * 2.5).sum(axis=1), rtol=1e-5)
    ir_text = loop_work.inspect_ir()
    loop = ir_text[ir_text.index("\nfor"):ir_text.index("\nendfor")]
    before = ir_text[:ir_text.index("\nfor")]
    multiplies = [line for line in loop.splitlines() if "= mul" in line]
    assert len(multiplies) == 1 and "float32 = mul" in multiplies[0]      # only x[...] * w is left
    assert "float32 = mul" in before and "float32 = add" in before        # w, before the loop


@cuda.jit
def butterfly_sum(x, out, lanes):
    i = cuda.grid(1)
    v = x[i]
    off = lanes // 2
    while off > 0:
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        off //= 2
    out[i] = v


def test_a_loop_runs_its_test_at_the_bottom_with_no_copies():
    x = rng.standard_normal(64).astype(np.float32)
    out = cuda.device_array(64, np.float32)
    butterfly_sum[2, 32](cuda.to_device(x), out, 32)
    assert np.allclose(out.copy_to_host(), np.repeat(x.reshape(2, 32).sum(axis=1), 32), rtol=1e-5)
    lines = [line.split("*/", 1)[1].split(";")[0].strip() for line in butterfly_sum.inspect_asm().splitlines()
             if line.strip().startswith("/*0")]
    shfl = next(k for k, line in enumerate(lines) if line.startswith("SHFL"))
    back = next(k for k in range(shfl, len(lines)) if "BRA" in lines[k])
    start = int(lines[back].split()[-1], 16) // 16
    assert lines[back].startswith("@P") and start <= shfl            # the test at the bottom branches back
    trip = lines[start:back + 1]
    assert sum("BRA" in line for line in trip) == 1                  # one branch a trip
    assert not any(line.startswith("MOV") for line in trip)          # v and off updated in place


@cuda.jit
def register_pressure(x, out):
    i = cuda.grid(1)
    buf = cuda.local.array(300, np.float32)          # constant indices: 300 values in registers at once
    for a in range(20):
        for b in range(15):
            buf[a * 15 + b] = x[i] * (a * 15 + b) + 1.0
    acc = 0.0
    for a in range(20):
        for b in range(15):
            acc = acc * 0.5 + buf[299 - (a * 15 + b)]
    out[i] = acc


@pytest.mark.slow
def test_more_live_values_than_registers_spill_to_local_memory():
    x = rng.random(64).astype(np.float32)
    out = cuda.device_array_like(x)
    register_pressure[1, 64](cuda.to_device(x), out)
    buf = x[:, None] * np.arange(300, dtype=np.float32)[None, :] + np.float32(1.0)
    acc = np.zeros(64)
    for k in range(300):
        acc = acc * 0.5 + buf[:, 299 - k]
    assert np.allclose(out.copy_to_host(), acc, rtol=1e-5)
    report = register_pressure.resources()
    assert "Used 25" in report and "bytes of spill slots" in report and " 0 bytes of spill" not in report


@cuda.jit
def half_arithmetic(a, b, out, mixed):
    i = cuda.grid(1)
    if i < a.size:
        x, y = a[i], b[i]
        out[i, 0] = x + y
        out[i, 1] = x * y - y
        out[i, 2] = x / y
        out[i, 3] = max(x, y)
        out[i, 4] = math.sqrt(abs(x))
        mixed[i] = x * 2.0 + 1.0 if x < y else x          # half stays half; stored as float32


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_float16_and_bfloat16_round_like_the_format(dtype):
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    a, b = (rng.random(100) * 4 + 0.5).astype(dt), (rng.random(100) * 4 + 0.5).astype(dt)
    out, mixed = cuda.device_array((100, 5), dt), cuda.device_array(100, np.float32)
    half_arithmetic[1, 128](cuda.to_device(a), cuda.to_device(b), out, mixed)
    x, y = a.astype(np.float32), b.astype(np.float32)
    expected = [x + y, (x * y).astype(dt).astype(np.float32) - y, x / y, np.maximum(x, y), np.sqrt(x)]
    got = out.copy_to_host()
    for k, e in enumerate(expected):
        assert np.array_equal(got[:, k].view(np.uint16), e.astype(dt).view(np.uint16)), k
    assert np.array_equal(mixed.copy_to_host(), np.where(x < y, (x * 2 + 1).astype(dt).astype(np.float32), x))


COEFFICIENTS = np.array([0.25, 0.5, 0.25], np.float32)
OFFSETS = np.arange(12, dtype=np.int32).reshape(3, 4) * 10


@cuda.jit
def smooth_with_constants(x, out):
    c = cuda.const.array_like(COEFFICIENTS)
    table = cuda.const.array_like(OFFSETS)
    i = cuda.grid(1)
    if 0 < i < x.size - 1:
        out[i] = c[0] * x[i - 1] + c[1] * x[i] + c[2] * x[i + 1] + table[i % 3, i % 4]


def test_constant_arrays_are_baked_in_and_copied_once():
    x = rng.random(50).astype(np.float32)
    out = cuda.to_device(np.zeros(50, np.float32))
    for _ in range(2):
        smooth_with_constants[1, 64](cuda.to_device(x), out)
    i = np.arange(1, 49)
    expected = 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1] + OFFSETS[i % 3, i % 4]
    assert np.allclose(out.copy_to_host()[1:49], expected)
    assert len(smooth_with_constants._const_copies) == 2          # one device copy per array, reused


@cuda.jit
def two_half_scalars(out, a, b):
    out[0] = a
    out[1] = b


def test_half_precision_scalar_arguments():
    out = cuda.device_array(2, np.float16)
    two_half_scalars[1, 1](out, np.float16(1.5), np.float16(-2.25))
    assert list(out.copy_to_host()) == [1.5, -2.25]


@cuda.jit
def double_2d(a, out):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j] * 2


def test_slices_and_fortran_order_device_arrays():
    x = np.arange(60, dtype=np.float32).reshape(6, 10)
    view = cuda.to_device(x)[1:5, ::3]                       # a view: strides (40, 12) bytes, no copy
    assert view.shape == (4, 4) and view.layout == "A"
    out = cuda.device_array(view.shape, np.float32)
    double_2d[(1, 1), (8, 8)](view, out)
    assert np.array_equal(out.copy_to_host(), x[1:5, ::3] * 2)
    fortran = cuda.to_device(np.asfortranarray(x))
    out = cuda.device_array(x.shape, np.float32)
    double_2d[(1, 2), (8, 8)](fortran, out)
    assert fortran.layout == "F" and np.array_equal(out.copy_to_host(), x * 2)
    assert np.array_equal(cuda.to_device(x)[-1].copy_to_host(), x[-1])


@cuda.jit
def one_mma(a_words, b_words, out):
    sa = cuda.shared.array(128, np.uint32)
    sb = cuda.shared.array(64, np.uint32)
    lane = cuda.threadIdx.x
    for r in range(4):
        sa[lane * 4 + r] = a_words[lane * 4 + r]
    for r in range(2):
        sb[lane * 2 + r] = b_words[lane * 2 + r]
    cuda.syncthreads()
    a = cuda.mma.load(sa, lane * 4, 4)                 # one 128-bit shared load: this lane's A fragment
    b = cuda.mma.load(sb, lane * 2, 2)
    c = cuda.mma.mma_sync(a, b, cuda.mma.zeros(), cuda.bfloat16)
    c = cuda.mma.mma_sync(a, b, c, cuda.bfloat16)         # twice: D = 2 A B
    for r in range(4):
        out[lane * 4 + r] = cuda.mma.get(c, r)


def test_matrix_fragments_and_hmma_from_the_kernel_language():
    import ml_dtypes
    a = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    ab, bb = a.view(np.uint16).astype(np.uint32), b.view(np.uint16).astype(np.uint32)
    aw, bw = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32)
    for lane in range(32):                                  # PTX's mma.m16n8k16 fragment layout
        g, t = lane // 4, lane % 4
        for i in range(4):
            row, col = g + 8 * (i % 2), 2 * t + 8 * (i // 2)
            aw[lane, i] = ab[row, col] | ab[row, col + 1] << 16
        for j in range(2):
            bw[lane, j] = bb[2 * t + 8 * j, g] | bb[2 * t + 8 * j + 1, g] << 16
    out = cuda.device_array(128, np.float32)
    one_mma[1, 32](cuda.to_device(aw.ravel()), cuda.to_device(bw.ravel()), out)
    d = out.copy_to_host().reshape(32, 4)
    got = np.zeros((16, 8), np.float32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            got[g + 8 * (i // 2), 2 * t + i % 2] = d[lane, i]
    assert np.allclose(got, 2 * (a.astype(np.float32) @ b.astype(np.float32)), atol=1e-4)
    assert one_mma.inspect_asm().count("HMMA.16816.BF16") == 2 and "LDS.128" in one_mma.inspect_asm()


@cuda.jit
def reverse_quads(x, out, first):
    """Each thread reads four floats of x at once (a 128-bit load, as CUDA C++ reads a float4) and writes them
    reversed."""
    i = cuda.grid(1)
    quad = cuda.mma.load(x, first + 4 * i, 4)
    for q in range(4):
        out[4 * i + 3 - q] = cuda.mma.get(quad, q)


def test_four_floats_of_a_global_array_in_one_load():
    x = rng.standard_normal(260).astype(np.float32)
    out = cuda.device_array(256, np.float32)
    reverse_quads[2, 32](cuda.to_device(x), out, 4)
    assert np.array_equal(out.copy_to_host(), x[4:].reshape(-1, 4)[:, ::-1].ravel())
    assert "LDG.E.128" in reverse_quads.inspect_asm()
    reverse_quads[2, 32](cuda.to_device(x), out, 2)     # 8 bytes past a 16-byte boundary
    with pytest.raises(cuda.KernelFault, match="misaligned 16-byte access"):
        cuda.synchronize()


@cuda.jit
def reverse_warp_quads(x, out):
    """Each lane's four floats, through shared memory with 128-bit stores and loads, to the mirrored lane."""
    s = cuda.shared.array(128, np.float32)
    i = cuda.threadIdx.x
    cuda.mma.store(s, 4 * i, cuda.mma.load(x, 4 * i, 4))
    cuda.syncthreads()
    cuda.mma.store(out, 4 * i, cuda.mma.load(s, 4 * (31 - i), 4))


def test_fragments_stored_whole_to_shared_and_global_memory():
    x = rng.standard_normal(128).astype(np.float32)
    out = cuda.device_array(128, np.float32)
    reverse_warp_quads[1, 32](cuda.to_device(x), out)
    assert np.array_equal(out.copy_to_host().reshape(32, 4), x.reshape(32, 4)[::-1])
    asm = reverse_warp_quads.inspect_asm()
    assert "STS.128" in asm and "STG.E.128" in asm

    @cuda.jit
    def mismatched(words):
        cuda.mma.store(words, 0, cuda.mma.zeros())
    with pytest.raises(cuda.CompileError, match="f32x4 fragment to a float32 array"):
        mismatched[1, 1](cuda.device_array(4, np.uint32))


@cuda.jit
def rotate_quads(x, out):
    """Each lane loads four floats, then packs them back rotated, one of them twice and one computed, for a
    128-bit store: the pack's words come from registers of the loaded quad itself (moves that cross)."""
    i = cuda.grid(1)
    q = cuda.mma.load(x, 4 * i, 4)
    a, b, c, d = cuda.mma.get(q, 0), cuda.mma.get(q, 1), cuda.mma.get(q, 2), cuda.mma.get(q, 3)
    cuda.mma.store(out, 4 * i, cuda.mma.pack(d, a, b, c))
    cuda.mma.store(out, 4 * i + 128, cuda.mma.pack(b, b, a * 2, 1))


def test_four_values_packed_for_a_128_bit_store():
    x = rng.standard_normal(128).astype(np.float32)
    out = cuda.device_array(256, np.float32)
    rotate_quads[1, 32](cuda.to_device(x), out)
    q = x.reshape(32, 4)
    got = out.copy_to_host().reshape(2, 32, 4)
    assert np.array_equal(got[0], q[:, [3, 0, 1, 2]])
    assert np.array_equal(got[1], np.stack([q[:, 1], q[:, 1], q[:, 0] * 2, np.ones(32, np.float32)], 1))
    assert rotate_quads.inspect_asm().count("STG.E.128") == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=4, max_size=4), st.permutations(range(8)))
def test_parallel_moves_give_every_destination_its_sources_old_value(sources, order):
    """Four moves into distinct registers from any registers (crossing, in cycles, one source read twice), as
    codegen places a packed quad: run in sequence, the MOVs and XORs leave what moving all at once would."""
    dests = order[:4]
    regs = list(range(100, 108))                 # register r holds 100 + r
    for inst in _parallel_moves(list(zip(dests, sources, strict=True)), {}):
        b = regs[inst.b.index]
        regs[inst.rd] = b if inst.op == "MOV" else regs[inst.ra] ^ b
    assert [regs[d] for d in dests] == [100 + s for s in sources]
    assert all(regs[r] == 100 + r for r in range(8) if r not in dests)     # no other register is touched


def test_a_kernel_of_no_arguments_launches_and_launches_again():
    """numba launches a kernel that takes nothing (its work is its side effects); the second launch finds
    the compiled kernel the first made."""
    @cuda.jit
    def no_arguments():
        s = cuda.shared.array(4, np.float32)
        s[cuda.threadIdx.x] = 1.0
        cuda.syncthreads()
    with trace() as t:
        no_arguments[1, 4]()
        no_arguments[2, 4]()
        cuda.synchronize()
    assert [tuple(k.args["grid"]) for k in t.select(0, "kernel")] == [(1, 1, 1), (2, 1, 1)]
    assert len(no_arguments.overloads) == 1


@cuda.jit
def print_each(values, n):
    i = cuda.grid(1)
    if i < n:
        print("thread", i, "has", values[i], i % 2 == 0)
    if i == 0:
        print(-3, 2.5)


def test_print_in_a_kernel_comes_out_at_the_next_synchronize_in_order(capsys):
    """numba's print() in a kernel: CUDA's printf FIFO, printed at the next synchronization (not at the launch),
    one line per call in the order the calls took their place (lane order here), ints as %lld, floats as %f."""
    values = cuda.to_device(np.array([0.5, -1.25, 3.0, 7.0], np.float32))
    print_each[2, 4](values, 3)
    assert capsys.readouterr().out == ""
    cuda.synchronize()
    assert capsys.readouterr().out == ("thread 0 has 0.500000 True\nthread 1 has -1.250000 False\n"
                                       "thread 2 has 3.000000 True\n-3 2.500000\n")
    cuda.synchronize()
    assert capsys.readouterr().out == ""                  # printed once


def test_print_past_the_fifo_s_end_is_lost_with_a_warning(capsys):
    """A FIFO of 1 MiB (131,072 words, the first the count): a call that does not fit writes nothing (as CUDA's),
    nor do the calls after it, and the host says how much was lost."""
    n = 40_000                                 # 40,000 calls of four words: 32,767 fit after the count
    print_each[(n + 255) // 256, 256](cuda.to_device(np.zeros(n, np.float32)), n)
    with pytest.warns(RuntimeWarning, match="words of output were lost"):
        cuda.synchronize()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 131_071 // 4
    assert lines[0] == "thread 0 has 0.000000 True" and lines[-1] == "thread 32766 has 0.000000 True"


def test_print_in_a_kernel_takes_numbers_and_string_literals():
    @cuda.jit
    def keywords(x):
        print(x[0], sep=",")

    @cuda.jit
    def array(x):
        print(x)
    for kernel in (keywords, array):
        with pytest.raises(cuda.CompileError, match="print"):
            kernel[1, 1](cuda.to_device(np.zeros(2, np.float32)))


@cuda.jit
def lambdas(x, out):
    i = cuda.grid(1)
    scale = 3.0
    affine = lambda v: v * scale + 1.0                   # noqa: E731  (the idiom under test)
    larger = lambda a, b: a if a > b else b             # noqa: E731
    if i < x.size:
        scale = 2.0                                     # read when called, as a closure reads it
        out[i] = larger(affine(x[i]), 0.0)


def test_a_lambda_in_a_kernel_is_inlined_where_it_is_called():
    """numba inlines a lambda a kernel defines; its free names are read where it is called (Python's late
    binding), its parameters do not touch the kernel's names."""
    x = np.array([1.0, -2.0, 0.5, -0.1], np.float32)
    out = cuda.device_array(4, np.float32)
    lambdas[1, 4](cuda.to_device(x), out)
    assert np.array_equal(out.copy_to_host(), np.maximum(x * 2 + 1, 0))

    @cuda.jit
    def wrong_count(out):
        twice = lambda v: 2 * v                         # noqa: E731
        out[0] = twice(1, 2)
    with pytest.raises(cuda.CompileError, match="takes 1 arguments by position, got 2"):
        wrong_count[1, 1](out)


def make_slicer(step):
    @cuda.jit
    def slicer(a, lo, hi, out):
        view = a[lo:hi:step]
        out[0] = view.size
        for k in range(len(view)):
            out[1 + k] = view[k]
    return slicer


@pytest.mark.parametrize("step", [1, 2, -1, -3])
def test_a_slice_of_an_array_in_a_kernel_is_numpy_s_view(step):
    """a[lo:hi:step] in a kernel, bounds known only at run time (negative ones count from the end, those past
    either end clip), as numpy slices: the same length and elements, nothing copied."""
    a = np.arange(10, dtype=np.float32) * 1.5
    d_a, out = cuda.to_device(a), cuda.device_array(12, np.float32)
    slicer = make_slicer(step)
    for lo, hi in [(0, 10), (2, 7), (-3, 10), (-20, 4), (7, 2), (3, 30), (-1, -8), (9, -11), (5, 5)]:
        slicer[1, 1](d_a, lo, hi, out)
        got = out.copy_to_host()
        want = a[lo:hi:step]
        assert got[0] == want.size and np.array_equal(got[1:1 + want.size], want), (lo, hi, step)


@cuda.jit
def rows_and_columns(m, out):
    r = cuda.threadIdx.x
    row, column, corner = m[r, :], m[:, r], m[1:, 2:]
    out[r, 0] = row[3] + row.size * 100
    out[r, 1] = column[1] + column.shape[0] * 100
    out[r, 2] = corner[1, r % 2] + corner.shape[0] * 100 + corner.shape[1] * 1000
    out[r, 3] = m[r][1:][0]                        # a view of a view


def test_rows_columns_and_blocks_of_a_matrix_are_views_in_a_kernel():
    m = np.arange(20, dtype=np.float32).reshape(4, 5)
    out = cuda.device_array((3, 4), np.float32)
    rows_and_columns[1, 3](cuda.to_device(m), out)
    want = [[m[r, 3] + 500, m[1, r] + 400, m[1:, 2:][1, r % 2] + 300 + 3000, m[r, 1]] for r in range(3)]
    assert np.array_equal(out.copy_to_host(), np.array(want, np.float32))
    with pytest.raises(cuda.CompileError, match="step must be a constant integer"):
        make_slicer(cuda.float32(1.5))[1, 1](cuda.to_device(m[0]), 0, 2, out[0])


def test_a_real_numba_jit_function_is_inlined_where_a_kernel_calls_it():
    """A function decorated with numba's own @njit (a numba CPUDispatcher), called from a kernel: numba compiles
    it for the GPU there, lapis inlines its Python function; the host still calls numba's compiled one."""
    import numba

    @numba.njit
    def scaled_plus_one(x, y):
        return x * y + 1.0

    @cuda.jit
    def calls_numba(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = scaled_plus_one(a[i], 2.0)
    a = np.arange(4, dtype=np.float32)
    out = cuda.device_array(4, np.float32)
    calls_numba[1, 4](cuda.to_device(a), out)
    assert np.array_equal(out.copy_to_host(), a * 2 + 1) and scaled_plus_one(3.0, 2.0) == 7.0


@cuda.jit
def divide_and_fuse(a, b, c, quotient, fused):
    i = cuda.grid(1)
    if i < a.size:
        quotient[i] = a[i] / b[i]
        fused[i] = a[i] * b[i] + c[i]            # contracted to one FFMA


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_is_correctly_rounded_and_ffma_and_dfma_round_once(dtype):
    """IEEE's division (numba's, div.rn) of float32 and float64: the quotient rounded once, as numpy's; it rests on an
    FFMA (DFMA) that rounds once (the hardware's fused multiply-add: `numerics.fma` in the reference, the host's in
    the engine), whose exact residual corrects the reciprocal's quotient. Operands of every magnitude (normal
    quotients) and of cancelling sums."""
    from lapis.hardware.numerics import fma
    near = np.random.default_rng(7)
    n = 4096
    a = (near.standard_normal(n) * 10.0 ** near.uniform(-30, 30, n)).astype(dtype)
    b = (near.standard_normal(n) * 10.0 ** near.uniform(-30, 30, n)).astype(dtype)
    with np.errstate(over="ignore"):              # products past float32's range cancel against inf
        c = np.where(near.random(n) < 0.5, -(a.astype(np.float64) * b), near.standard_normal(n)).astype(dtype)
    quotient, fused = cuda.device_array(n, dtype), cuda.device_array(n, dtype)
    divide_and_fuse[n // 256, 256](cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), quotient, fused)
    with np.errstate(all="ignore"):
        assert np.array_equal(quotient.copy_to_host(), a / b)
        assert np.array_equal(fused.copy_to_host(), fma(a, b, c))
        separately = (a * b + c) != fma(a, b, c)
    assert separately.sum() > 100                 # rounding twice would have differed here


@cuda.jit
def float_to_int64(x, out, out32):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = np.int64(x[i])
        out32[i] = np.int32(x[i])


def test_float_to_int_conversions_saturate_at_both_ends_and_take_nan_to_zero():
    """As PTX's cvt.rzi.s64.f64 and .s32: truncation toward zero, saturation to the type's range, NaN to 0. The top
    of int64's range, 2^63 - 1, is no float64; a clamp to it rounded up to 2^63, which wrapped to -2^63."""
    x = np.array([1e19, 2.0**63, 2.0**63 - 1024, -1e19, -2.0**63, np.inf, -np.inf, np.nan, -2.5, 2.5, 3e9, -3e9])
    out, out32 = cuda.device_array(x.size, np.int64), cuda.device_array(x.size, np.int32)
    float_to_int64[1, 32](cuda.to_device(x), out, out32)
    top, bottom = 2**63 - 1, -2**63
    assert out.copy_to_host().tolist() == [top, top, 2**63 - 1024, bottom, bottom, top, bottom, 0, -2, 2,
                                           3_000_000_000, -3_000_000_000]
    assert out32.copy_to_host().tolist() == [2**31 - 1, 2**31 - 1, 2**31 - 1, -2**31, -2**31, 2**31 - 1, -2**31,
                                             0, -2, 2, 2**31 - 1, -2**31]


@cuda.jit
def divide_and_take_the_remainder(a, b, q, r):
    i = cuda.grid(1)
    if i < a.size:
        q[i], r[i] = a[i] // b[i], a[i] % b[i]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_an_integer_zero_divisor_gives_zero_quotient_and_remainder(dtype):
    """numba's kernels (its numpy error model) and numpy give 0 and 0; the division's arithmetic left a % 0 = a."""
    a = np.array([7, 9, 0, 5, 12, 100], dtype)
    b = np.array([0, 0, 0, 0, 5, 7], dtype)
    q, r = cuda.device_array(6, dtype), cuda.device_array(6, dtype)
    divide_and_take_the_remainder[1, 32](cuda.to_device(a), cuda.to_device(b), q, r)
    with np.errstate(divide="ignore"):
        assert q.copy_to_host().tolist() == (a // b).tolist() == [0, 0, 0, 0, 2, 14]
        assert r.copy_to_host().tolist() == (a % b).tolist() == [0, 0, 0, 0, 2, 2]


@cuda.jit
def literal_too_big_for_int32(out, flags):
    i = cuda.grid(1)                               # int32
    if i < out.size:
        out[i] = i + 2**34                         # int64, as numba types the literal: it once wrapped to i
        flags[i] = 1 if i < 2**40 and i > -2**35 else 0


@cuda.jit
def store_far_past(a):
    a[cuda.grid(1) + 2**34] = 1                    # 64 GiB past the array


def test_an_int_literal_an_int32_cannot_hold_makes_the_expression_int64():
    out, flags = cuda.device_array(32, np.int64), cuda.device_array(32, np.int32)
    literal_too_big_for_int32[1, 32](out, flags)
    assert out.copy_to_host().tolist() == [i + 2**34 for i in range(32)]
    assert flags.copy_to_host().tolist() == [1] * 32


def test_an_address_offset_beyond_32_bits_is_not_cut_to_its_low_bits():
    """An element offset of 2^36 bytes once lost its high bits (the instruction's offset is 32 bits) and stored
    into a[i]; it must reach the address it names, here an unmapped one."""
    a = cuda.to_device(np.zeros(32, np.int32))
    with pytest.raises(cuda.KernelFault, match="not mapped"):
        store_far_past[1, 32](a)
        cuda.synchronize()
    assert not a.copy_to_host().any()


@cuda.jit
def atomic_nan_extremes(res, v):
    i = cuda.grid(1)
    if i < v.size:
        cuda.atomic.nanmax(res, 0, v[i])
        cuda.atomic.nanmin(res, 1, v[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_atomic_nanmax_and_nanmin_treat_a_nan_as_missing(dtype):
    """numba's atomic.nanmax/nanmin: a NaN in memory or in a value loses (numpy's nanmax/nanmin)."""
    v = np.array([3, -2, 7, 5], dtype)
    res = np.array([0, 0], dtype)
    if np.dtype(dtype).kind == "f":
        v = np.array([3, np.nan, 7, -2], dtype)
        res = np.array([np.nan, np.nan], dtype)
    d = cuda.to_device(res)
    atomic_nan_extremes[1, 32](d, cuda.to_device(v))
    want = [np.nanmax(np.append(v, res[0])), np.nanmin(np.append(v, res[1]))]
    assert d.copy_to_host().tolist() == [float(w) if np.dtype(dtype).kind == "f" else int(w) for w in want]


@cuda.jit
def shuffle_from_an_argument(out, lane, delta):
    i = cuda.grid(1)
    out[i, 0] = cuda.shfl_sync(0xFFFFFFFF, i, lane)
    out[i, 1] = cuda.shfl_down_sync(0xFFFFFFFF, i, delta)


def test_a_shuffle_s_lane_may_be_a_kernel_argument():
    """A 32-bit argument is read from the constant bank, which SHFL's operand B cannot be (it was an IsaError)."""
    out = cuda.device_array((32, 2), np.int32)
    shuffle_from_an_argument[1, 32](out, np.int32(4), np.int32(3))
    got = out.copy_to_host()
    assert got[:, 0].tolist() == [4] * 32
    assert got[:, 1].tolist() == [i + 3 if i + 3 < 32 else i for i in range(32)]


SHARED_TILE = 4, 8                                 # a module constant, as numba's examples size shared tiles


def tile_kernels():
    rows = 3

    @cuda.jit
    def sized_by_names(out):
        n = 100
        local_shape = (2, 5)
        a = cuda.shared.array(SHARED_TILE, np.float32)  # a global tuple
        b = cuda.shared.array(n, np.int32)              # a local constant
        c = cuda.local.array(local_shape, np.int32)     # a local tuple
        d = cuda.local.array((rows, 2), np.float64)     # a closure constant in a tuple
        out[0], out[1], out[2], out[3] = a.size, b.size, c.size, d.size
        out[4], out[5] = a.shape[1], d.shape[0]
    return sized_by_names


def test_array_shapes_may_be_named_constants():
    out = cuda.device_array(6, np.int64)
    tile_kernels()[1, 1](out)
    assert out.copy_to_host().tolist() == [32, 100, 10, 6, 8, 3]


@cuda.jit
def twice_in_place(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2


def test_an_array_of_the_other_byte_order_is_refused_not_misread():
    """numba refuses it ('Unsupported array dtype: >f4'); a kernel read its bytes as this machine's floats."""
    with pytest.raises(TypeError, match="byte order"):
        twice_in_place[1, 32](cuda.to_device(np.arange(8, dtype=">f4")))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.uint16])
def test_an_8_or_16_bit_integer_argument_arrives_whole(dtype):
    """numba types np.int8(-3) as int8 and a signature may name int8: such an argument takes a word of its own,
    widened (it was a KeyError while packing the arguments)."""
    @cuda.jit(f"void(int64[:], {np.dtype(dtype).name})")
    def store(out, v):
        out[0] = v
        out[1] = v + 1

    value = np.iinfo(dtype).min if np.dtype(dtype).kind == "i" else np.iinfo(dtype).max
    out = cuda.device_array(2, np.int64)
    store[1, 1](out, dtype(value))
    assert out.copy_to_host().tolist() == [int(value), int(value) + 1]


PRICES = np.array([10.0, 25.0, 5.0], np.float64)          # numba freezes a global host array into the kernel
DEVICE_PRICES = cuda.to_device(np.array([1.0, 2.0, 3.0], np.float32))    # ... and captures a device one by reference


@cuda.jit
def priced(quantities, totals, device_totals):
    i = cuda.grid(1)
    if i < totals.size:
        totals[i] = quantities[i] * PRICES[i]
        device_totals[i] = DEVICE_PRICES[i] * 2


def test_global_arrays_are_frozen_on_the_host_and_captured_on_the_device():
    """As numba's globals example: a global numpy array is a constant of the compiled kernel (changing it later
    changes nothing); a global device array is read where it is, so writing it between launches is seen."""
    q = cuda.to_device(np.array([1.0, 2.0, 3.0]))
    totals, device_totals = cuda.device_array(3), cuda.device_array(3, np.float32)
    priced[1, 32](q, totals, device_totals)
    assert totals.copy_to_host().tolist() == [10.0, 50.0, 15.0] and device_totals.copy_to_host().tolist() == [2, 4, 6]
    PRICES[:] = 0
    DEVICE_PRICES[:] = [5.0, 6.0, 7.0]                     # DeviceNDArray.__setitem__ copies from the host
    DEVICE_PRICES[0] = 4.0
    priced[1, 32](q, totals, device_totals)
    assert totals.copy_to_host().tolist() == [10.0, 50.0, 15.0]               # frozen when it compiled
    assert device_totals.copy_to_host().tolist() == [8.0, 12.0, 14.0]         # read at the launch
    module, kept = sys.modules[__name__], DEVICE_PRICES
    module.DEVICE_PRICES = cuda.to_device(np.ones(7, np.float32))
    try:                                   # its shape was compiled in: another one is refused, not misread
        with pytest.raises(cuda.LaunchError, match="DEVICE_PRICES"):
            priced[1, 32](q, totals, device_totals)
    finally:
        module.DEVICE_PRICES = kept


@cuda.jit
def _from_the_end(a, m, out):
    s = cuda.shared.array(8, np.float32)
    t = cuda.local.array(4, np.float32)
    for j in range(8):
        s[j] = j + 100
    t[0] = 1
    t[-1] = 2                                   # a local array indexed by constants alone: held in registers
    v = a[2:5]
    out[0], out[1], out[2], out[3] = a[-1], a[-4], m[1, -1], m[-1, -2]
    out[4], out[5], out[6] = v[-1], s[-1], t[3] + t[-4]
    out[-1] = 7


def test_a_constant_negative_index_counts_from_the_end_as_numba_does():
    """numba wraps a negative index by the dimension's extent: a[-1] is the last element, of a global array (its
    extent read at run time), a view, a shared or a local array, loaded or stored."""
    a = np.arange(10, dtype=np.float32)
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = cuda.device_array(8, np.float32)
    _from_the_end[1, 1](cuda.to_device(a), cuda.to_device(m), out)
    want = [a[-1], a[-4], m[1, -1], m[-1, -2], a[2:5][-1], 107, 3, 7]
    assert out.copy_to_host().tolist() == want
