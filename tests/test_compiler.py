"""Layer 3: numba.cuda-style kernels compiled to the lapis ISA, run on the simulated GPU,
checked against numpy; and the errors a kernel author sees."""

import dataclasses
import linecache
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lapis import cuda, hip
from lapis.runtime import CodeObject, line_table

rng = np.random.default_rng(7)


@cuda.jit
def vecadd(a, b, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[i] + b[i]


@cuda.jit
def saxpy(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]


def test_vector_add_with_a_partial_last_block():
    n = 1000
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    d_out = cuda.device_array(n, np.float32)
    vecadd[(n + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), d_out, n)
    assert np.array_equal(d_out.copy_to_host(), a + b)


def test_python_scalars_follow_numba_typing():
    x, y = rng.random(300, dtype=np.float32), rng.random(300, dtype=np.float32)
    d_out = cuda.device_array_like(x)
    saxpy[3, 128](2.5, cuda.to_device(x), cuda.to_device(y), d_out)         # alpha: float64, as numba types it
    assert ("float64" in saxpy.inspect_types()) and "array(float32, 1d, C)" in saxpy.inspect_types()
    np.testing.assert_allclose(d_out.copy_to_host(), (2.5 * x.astype(np.float64) + y).astype(np.float32), rtol=1e-6)
    saxpy[3, 128](np.float32(2.5), cuda.to_device(x), cuda.to_device(y), d_out)
    np.testing.assert_allclose(d_out.copy_to_host(), np.float32(2.5) * x + y, rtol=1e-6)
    assert len(saxpy.overloads) == 2


TPB = 16


@cuda.jit
def fast_matmul(A, B, C):
    sA = cuda.shared.array(shape=(TPB, TPB), dtype=cuda.float32)
    sB = cuda.shared.array(shape=(TPB, TPB), dtype=cuda.float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bpg = cuda.gridDim.x
    tmp = cuda.float32(0.0)
    for i in range(bpg):
        sA[ty, tx] = 0
        sB[ty, tx] = 0
        if y < A.shape[0] and (tx + i * TPB) < A.shape[1]:
            sA[ty, tx] = A[y, tx + i * TPB]
        if x < B.shape[1] and (ty + i * TPB) < B.shape[0]:
            sB[ty, tx] = B[ty + i * TPB, x]
        cuda.syncthreads()
        for j in range(TPB):
            tmp += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = tmp


def test_numba_shared_memory_matmul_example():
    n = 48
    A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    C = cuda.device_array((n, n), np.float32)
    fast_matmul[(n // TPB, n // TPB), (TPB, TPB)](cuda.to_device(A), cuda.to_device(B), C)
    np.testing.assert_allclose(C.copy_to_host(), A @ B, rtol=1e-5)
    asm = fast_matmul.inspect_asm()
    assert "BAR.SYNC" in asm and "LDS" in asm and "STS" in asm and "FFMA" in asm


@cuda.jit
def control_flow(x, out):
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    total = 0
    k = 0
    while k < v:                       # a different trip count per thread
        if k % 2 == 0:
            k += 1
            continue
        total += k
        if total > 40:
            break
        k += 1
    if v < 3:
        total = -1
    elif v < 6:
        total = total * 10
    out[i] = total if v != 7 else 700


def test_divergent_loops_break_continue_and_early_return():
    x = rng.integers(0, 20, 200).astype(np.int32)
    out = cuda.device_array(256, np.int64)
    control_flow[2, 128](cuda.to_device(x), out)

    def ref(v):
        total, k = 0, 0
        while k < v:
            if k % 2 == 0:
                k += 1
                continue
            total += k
            if total > 40:
                break
            k += 1
        if v < 3:
            total = -1
        elif v < 6:
            total *= 10
        return total if v != 7 else 700
    assert np.array_equal(out.copy_to_host()[:200], [ref(v) for v in x])


@cuda.jit
def math_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i, 0] = math.sqrt(v)
        out[i, 1] = math.exp(-v)
        out[i, 2] = math.log(v)
        out[i, 3] = math.sin(v) + math.cos(v)
        out[i, 4] = v / 3.0
        out[i, 5] = math.floor(v * 2.5) + math.ceil(-v)
        out[i, 6] = abs(-v) + max(v, 2.0) - min(v, 1.0)
        out[i, 7] = math.tanh(v - 1.0)


def test_math_functions_and_division():
    x = np.linspace(0.1, 4.0, 96).astype(np.float32)
    out = cuda.device_array((96, 8), np.float32)
    math_kernel[1, 96](cuda.to_device(x), out)
    got = out.copy_to_host()
    expect = np.stack([np.sqrt(x), np.exp(-x), np.log(x), np.sin(x) + np.cos(x), x / np.float32(3),
                       np.floor(x * 2.5) + np.ceil(-x), x + np.maximum(x, 2) - np.minimum(x, 1), np.tanh(x - 1)], 1)
    np.testing.assert_allclose(got, expect, rtol=2e-6, atol=2e-6)
    # Division is a reciprocal and a Newton step: correctly rounded with a fused FFMA; the simulator
    # rounds FFMA's product separately, which can leave the last bit off.
    assert np.all(np.abs(got[:, 4].view(np.int32) - (x / np.float32(3)).view(np.int32)) <= 1)


@cuda.jit
def quotient_and_remainder(out, w):
    i = cuda.grid(1) - 64
    out[i + 64] = (i // w) * 100 + i % w


def test_a_quotient_and_remainder_of_the_same_operands_share_one_division():
    out = cuda.device_array(128, np.int64)
    quotient_and_remainder[1, 128](out, np.int64(7))
    xs = np.arange(-64, 64)
    assert np.array_equal(out.copy_to_host(), xs // 7 * 100 + xs % 7)        # Python's floor semantics
    # one division: a floored quotient and, for 64-bit operands, the remainder's
    assert quotient_and_remainder.inspect_asm().count("FRND.FLOOR.F64") == 2


@cuda.jit
def wide_types(a, b, out_i, out_f):
    i = cuda.grid(1)
    if i < a.size:
        big = a[i] * 3000000000 + 7           # int64
        out_i[i] = big // 4 - big % 8
        out_f[i] = b[i] / 7.0 + float(a[i])    # float64


def test_int64_and_float64_arithmetic():
    a = rng.integers(-1000, 1000, 64).astype(np.int64)
    b = rng.random(64)
    oi, of = cuda.device_array(64, np.int64), cuda.device_array(64, np.float64)
    wide_types[1, 64](cuda.to_device(a), cuda.to_device(b), oi, of)
    big = a * 3000000000 + 7
    assert np.array_equal(oi.copy_to_host(), big // 4 - big % 8)
    np.testing.assert_allclose(of.copy_to_host(), b / 7.0 + a, rtol=1e-15)


@cuda.jit
def grid2d(out):
    x, y = cuda.grid(2)
    w, h = cuda.gridsize(2)
    if x < out.shape[1] and y < out.shape[0]:
        out[y, x] = y * w + x + h * 0


def test_2d_grid_and_fortran_order():
    out = cuda.device_array((20, 30), np.int32)
    grid2d[(4, 3), (8, 8)](out)
    assert np.array_equal(out.copy_to_host(), np.arange(20)[:, None] * 32 + np.arange(30))
    f = cuda.device_array((20, 30), np.int32, order="F")
    grid2d[(4, 3), (8, 8)](f)
    assert np.array_equal(f.copy_to_host(), np.arange(20)[:, None] * 32 + np.arange(30))


@cuda.jit
def local_registers(x, out):
    i = cuda.grid(1)
    acc = cuda.local.array(4, cuda.float32)
    for k in range(4):
        acc[k] = x[i] * k
    s = cuda.float32(0)
    for k in range(4):
        s += acc[k]
    out[i] = s


def test_local_arrays_with_constant_indices_live_in_registers():
    x = rng.random(64, dtype=np.float32)
    out = cuda.device_array_like(x)
    local_registers[1, 64](cuda.to_device(x), out)
    np.testing.assert_allclose(out.copy_to_host(), 6 * x, rtol=1e-6)
    assert "lmem" in local_registers.resources() and "0 bytes lmem" in local_registers.resources()


def test_same_kernel_runs_on_the_amd_profile():
    kernel = hip.jit(vecadd.py_func)
    a = np.arange(200, dtype=np.float32)
    out = hip.device_array(200, np.float32)
    kernel[4, 64](hip.to_device(a), hip.to_device(a), out, 200)
    assert np.array_equal(out.copy_to_host(), 2 * a)
    assert out.device.WARP_SIZE == 64 and "mi300x" in out.device.profile


# -- hypothesis: expressions compiled and run, compared with Python evaluating the same code -------
OPS = ["+", "-", "*"]


@st.composite
def expressions(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["x", "y", "z", str(draw(st.integers(-9, 9)))]))
    op = draw(st.sampled_from(OPS + ["min", "max", "cmp"]))
    left, right = draw(expressions(depth=depth - 1)), draw(expressions(depth=depth - 1))
    if op in ("min", "max"):
        return f"{op}({left}, {right})"
    if op == "cmp":
        return f"({left} if {left} < {right} else {right} - 1)"
    return f"({left} {op} {right})"


@settings(max_examples=12, deadline=None)
@given(expressions())
def test_generated_integer_expressions_match_python(expr):
    source = f"def gen(a, b, c, out):\n    i = cuda.grid(1)\n    x, y, z = a[i], b[i], c[i]\n    out[i] = {expr}\n"
    filename = f"<generated {abs(hash(expr))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)   # so inspect finds it
    namespace = {"cuda": cuda}
    exec(compile(source, filename, "exec"), namespace)     # noqa: S102 - test-generated kernel source
    inputs = [rng.integers(-50, 50, 32).astype(np.int64) for _ in range(3)]
    out = cuda.device_array(32, np.int64)
    cuda.jit(namespace["gen"])[1, 32](*(cuda.to_device(v) for v in inputs), out)
    expected = [eval(expr, {"min": min, "max": max}, dict(zip("xyz", map(int, vals), strict=True)))
                for vals in zip(*inputs, strict=True)]
    assert out.copy_to_host().tolist() == expected


# -- errors ---------------------------------------------------------------------------------------
def make_scaler(op):
    def scale(x):
        i = cuda.grid(1)
        if op == "double":
            x[i] = x[i] * 2
        elif op != "negate":
            x[i] = 0
        else:
            x[i] = -x[i]
    return cuda.jit(scale)


def test_string_constants_choose_code_at_compile_time():
    host = np.arange(32, dtype=np.float32)
    for op, want in (("double", host * 2), ("negate", -host), ("zero", 0 * host)):
        x = cuda.to_device(host)
        kernel = make_scaler(op)
        kernel[1, 32](x)
        assert np.array_equal(x.copy_to_host(), want)
        assert ("LDG" in kernel.inspect_asm()) == (op != "zero")     # the other branches were never emitted

    @cuda.jit
    def orders_strings(x):
        if "a" < "b":
            x[0] = 1

    with pytest.raises(cuda.CompileError, match="compare them with == or !="):
        orders_strings[1, 1](cuda.device_array(1, np.float32))


def make_scale(factor):
    FACTOR = factor

    def scale(v):
        return v * FACTOR
    return cuda.jit(scale, device=True)


def test_device_functions_see_their_closure_and_compile_as_if_written_out():
    double, triple = make_scale(2.0), make_scale(3.0)

    @cuda.jit
    def called(x):
        i = cuda.grid(1)
        x[i] = double(x[i]) + triple(x[i])

    @cuda.jit
    def written_out(x):
        i = cuda.grid(1)
        x[i] = x[i] * 2.0 + x[i] * 3.0

    for kernel in (called, written_out):
        x = cuda.to_device(np.arange(32, dtype=np.float32))
        kernel[1, 32](x)
        assert np.array_equal(x.copy_to_host(), 5 * np.arange(32, dtype=np.float32))
    # A body that returns at its end joins the caller's block: the same IR and code as written out.
    assert called.inspect_ir().replace("called", "written_out") == written_out.inspect_ir()
    ops = [[i.op for i in k.instructions] for k in (*called.overloads.values(), *written_out.overloads.values())]
    assert ops[0] == ops[1] and "FFMA" in ops[0]              # x*2 + x*3 contracted across the calls


@cuda.jit(device=True)
def shifted_or_scaled(shift, factor, v):
    if shift:
        return v + factor
    return v * factor


@cuda.jit
def scaled_by_a_tenth(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = shifted_or_scaled(False, 0.1, x[i])


def test_a_constant_argument_that_a_device_function_only_reads_is_a_constant_there():
    """`if shift:` with shift a constant argument is decided as the kernel compiles (no compare, no branch but the
    bounds test), as a template argument would be; the literal 0.1 stays a float64, as numba types an argument,
    so x * 0.1 is a float64 product."""
    x = np.array([3.0, 7.0], np.float32)
    out = cuda.device_array(2, np.float64)
    scaled_by_a_tenth[1, 32](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x.astype(np.float64) * 0.1)
    assert [i.op for k in scaled_by_a_tenth.overloads.values() for i in k.instructions].count("BRA") == 1


SLOT = 3


@cuda.jit(device=True)
def put_at_thread(buf, value):
    buf[cuda.threadIdx.x] = value               # a store whose index reads a global name (numba's idiom)


def test_names_a_store_target_reads_are_not_taken_for_names_it_binds():
    # `buf[cuda.threadIdx.x] = v` reads `cuda`; `out[SLOT] = v` reads SLOT: neither binds them (they once came out
    # renamed or undefined when inlined)
    @cuda.jit
    def store(out):
        out[SLOT] = 1.0
        put_at_thread(out, 2.0)

    d = cuda.to_device(np.zeros(8, np.float32))
    store[1, 2](d)
    assert np.array_equal(d.copy_to_host(), np.array([2, 2, 0, 1, 0, 0, 0, 0], np.float32))


def make_combination(fa, fb, fc):
    def combine(x):
        i = cuda.grid(1)
        x[i] = fa(x[i]) * 100 + fb(x[i]) * 10 + fc(x[i])
    return cuda.jit(combine)


def test_the_compile_cache_tells_apart_which_device_function_each_name_means():
    # same kernel source and names, the same set of device functions, bound differently: two entries
    double, triple = make_scale(2.0), make_scale(3.0)
    for fa, fb, fc, want in ((double, triple, triple, 233.0), (triple, double, triple, 323.0)):
        x = cuda.to_device(np.ones(32, np.float32))
        make_combination(fa, fb, fc)[1, 32](x)
        assert np.all(x.copy_to_host() == want)


def make_applier(fn):
    def apply(x):
        i = cuda.grid(1)
        x[i] = fn(x[i])
    return cuda.jit(apply)


def test_the_compile_cache_tells_apart_which_function_a_closure_means():
    host = np.linspace(0.5, 2, 32, dtype=np.float32)
    for fn, want in ((math.exp, np.exp), (math.log, np.log), (abs, np.abs)):
        x = cuda.to_device(host)
        make_applier(fn)[1, 32](x)
        np.testing.assert_allclose(x.copy_to_host(), want(host), rtol=1e-5)


def test_unsupported_construct_names_file_and_line():
    def uses_try(out):
        i = cuda.grid(1)
        try:
            out[i] = 1
        except Exception:
            pass

    kernel = cuda.jit(uses_try)
    with pytest.raises(cuda.CompileError) as e:
        kernel[1, 32](cuda.device_array(32, np.int32))
    line = uses_try.__code__.co_firstlineno + 2
    assert f"test_compiler.py:{line}:" in str(e.value) and "'try' statement" in str(e.value)
    assert "uses_try" in str(e.value)


def test_host_arrays_are_copied_to_the_device_and_back_with_numbas_warning():
    """numba's implicit copies: a host array goes to the device for the launch and back after it (a writeable
    one), the launch waits for the kernel, and a PerformanceWarning says so; device arrays stay as they are."""
    a, b = np.arange(32, dtype=np.float32), np.full(32, 2.0, np.float32)
    b.flags.writeable = False                              # read-only: not copied back (it could not be)
    out = np.zeros(32, np.float32)
    with pytest.warns(cuda.PerformanceWarning, match="'vecadd' are copied to the device and back"):
        vecadd[1, 32](a, b, out, 32)
    assert np.array_equal(out, a + 2.0) and np.array_equal(a, np.arange(32, dtype=np.float32))
    on_device = cuda.device_array(32, np.float32)
    column = np.zeros((32, 2), np.float32)[:, 0]           # not contiguous: written back through the view
    with pytest.warns(cuda.PerformanceWarning):
        vecadd[1, 32](cuda.to_device(a), np.ones(64, np.float32)[::2], on_device, 32)
        vecadd[1, 32](a, a, column, 32)
    assert np.array_equal(on_device.copy_to_host(), a + 1.0) and np.array_equal(column, 2 * a)


def test_bad_launches_are_clear_errors():
    with pytest.raises(cuda.LaunchError, match="threads per block exceeds"):
        vecadd[1, 2048](*(cuda.device_array(4, np.float32) for _ in range(3)), 4)
    with pytest.raises(cuda.LaunchError, match="with a configuration"):
        vecadd(1, 2, 3, 4)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        vecadd[1, 32](cuda.device_array(4, np.float32))


def test_out_of_bounds_write_faults_with_kernel_instruction_and_address_then_recovers():
    @cuda.jit
    def scatter(out, offset):
        i = cuda.grid(1)
        out[i + offset] = 1.0

    out = cuda.device_array(64, np.float32)
    scatter[1, 64](out, 10_000_000)
    with pytest.raises(cuda.KernelFault) as e:
        cuda.synchronize()
    err = e.value
    assert err.kernel == "scatter" and "STG" in err.instruction and err.pc is not None
    assert err.address == out.ptr + 4 * 10_000_000
    assert "scatter" in str(err) and f"{err.address:#x}" in str(err) and "not mapped" in str(err)
    scatter[1, 64](out, 0)                                   # the next launch runs
    assert np.all(out.copy_to_host() == 1.0)


def _line_of(mark: str) -> int:
    """The line of this file marked `# line: mark`."""
    (line,) = [n for n, text in enumerate(linecache.getlines(__file__), 1) if text.rstrip().endswith(f"# line: {mark}")]
    return line


@cuda.jit(device=True)
def store_one(a, i):
    a[i] = 1                                       # line: the device function's store


@cuda.jit
def stores_around_a_fault(a, offset, device_offset):
    i = cuda.grid(1)
    a[i] = 2                                       # line: the first store
    a[i + offset] = 1                              # line: the kernel's store
    store_one(a, i + device_offset)
    a[i] = 3                                       # line: the last store


def test_a_fault_names_the_file_and_line_of_the_statement_from_the_code_objects_line_table():
    """As compute-sanitizer with -lineinfo: the fault names the statement beside the instruction and address (an
    inlined device function's own line where the fault is in it) with its text; the listing says which lines its
    instructions came from."""
    a = cuda.to_device(np.zeros(32, np.int32))
    far = 1 << 40                                  # past anything mapped, whatever other tests' pools hold
    for offsets, mark, text in (((far, 0), "the kernel's store", "a[i + offset] = 1"),
                                ((0, far), "the device function's store", "a[i] = 1")):
        stores_around_a_fault[1, 32](a, *offsets)
        with pytest.raises(cuda.KernelFault, match="not mapped") as e:
            cuda.synchronize()
        assert str(e.value).endswith(f"{e.value.instruction} at {__file__}:{_line_of(mark)}: {text}")
        assert "STG" in e.value.instruction
    listing = stores_around_a_fault.inspect_asm()
    for mark in ("the first store", "the kernel's store", "the device function's store", "the last store"):
        assert f"// {__file__}:{_line_of(mark)}\n" in listing


def test_the_line_table_round_trips_through_code_object_bytes_and_one_without_it_still_loads_and_runs():
    stores_around_a_fault[1, 32](cuda.to_device(np.zeros(32, np.int32)), 0, 0)
    (compiled,) = stores_around_a_fault.overloads.values()
    (kernel,) = CodeObject.from_bytes(compiled.code_object).kernels
    lines = line_table.sources(kernel.metadata, len(compiled.instructions))
    assert {(__file__, _line_of("the kernel's store")), (__file__, _line_of("the last store"))} <= set(lines)
    assert len(kernel.metadata["lines"]["rows"]) < len(compiled.instructions) / 2   # runs of pcs, not every pc
    assert CodeObject.from_bytes(CodeObject([kernel]).to_bytes()).kernels[0].metadata["lines"] == \
        kernel.metadata["lines"]
    del kernel.metadata["lines"]                                # as a code object written before line tables
    old = CodeObject([kernel]).to_bytes()
    (reloaded,) = CodeObject.from_bytes(old).kernels
    assert line_table.sources(reloaded.metadata, 2) == [None, None] and line_table.lookup(reloaded.metadata, 0) is None
    without_table = cuda.jit(stores_around_a_fault.py_func)    # launches the old code object
    without_table.overloads[compiled.argtypes] = dataclasses.replace(compiled, code_object=old)
    without_table[1, 32](cuda.to_device(np.zeros(32, np.int32)), 1 << 40, 0)
    with pytest.raises(cuda.KernelFault, match=r"not mapped .* at instruction /\*\w+\*/ STG\.E [^;]*;$"):
        cuda.synchronize()
    assert "// " not in without_table.inspect_asm()


def test_ieee_specials_flow_without_warnings(recwarn):
    @cuda.jit
    def specials(x, out):
        i = cuda.grid(1)
        out[i] = (x[i] / 0.0 - x[i] / 0.0) + math.sqrt(-x[i])

    out = cuda.device_array(32, np.float32)
    specials[1, 32](cuda.to_device(np.ones(32, np.float32)), out)
    assert np.all(np.isnan(out.copy_to_host()))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_overflowing_quotient_is_infinite_and_negation_keeps_zeros_signs(dtype):
    """1e30 / 1e-30 is inf, as IEEE 754 says (the division's Newton step had made it inf - inf = NaN), and -x of
    +0 is -0 in both widths (float64's had been -x + 0, which is +0)."""
    @cuda.jit
    def divide_and_negate(a, b, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i, 0] = a[i] / b[i]
            out[i, 1] = -a[i]

    big = 1e300 if dtype == np.float64 else 1e30
    a = np.array([big, -big, 0.0, -0.0, 6.0, 1.0], dtype)
    b = np.array([1 / big, 1 / big, 2.0, 2.0, 3.0, 0.0], dtype)
    out = cuda.device_array((6, 2), dtype)
    divide_and_negate[1, 32](cuda.to_device(a), cuda.to_device(b), out)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        want = np.stack([a / b, -a], axis=1)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


# Each kernel misuses one call on the line after its `def`; x is float32[4], out float32[4].
def abs_of_two(x, out):
    out[0] = abs(x[0], x[1])


def grid_without_ndim(x, out):
    out[0] = cuda.grid()


def grid_of_four(x, out):
    out[0] = cuda.grid(4)


def shuffle_without_lane(x, out):
    out[0] = cuda.shfl_sync(0xFFFFFFFF, x[0])


def exp_of_an_array(x, out):
    out[0] = math.exp(x)


def misspelt_intrinsic(x, out):
    out[0] = cuda.gird(1)


def host_function_in_a_kernel(x, out):
    out[0] = cuda.to_device(x)


def cast_of_two(x, out):
    out[0] = cuda.float32(x[0], x[1])


def cas_on_floats(x, out):
    out[0] = cuda.atomic.cas(out, 0, x[0], x[1])


def keyword_to_abs(x, out):
    out[0] = abs(x=x[0])


def misspelt_keyword(x, out):
    out[0] = cuda.local.array(shap=4, dtype=cuda.float32)[0]


def range_of_four(x, out):
    for i in range(0, 4, 1, 1):
        out[i] = x[i]


def range_of_a_float(x, out):
    for i in range(x[0]):
        out[i] = 1


MISUSED_CALLS = [
    (abs_of_two, r"abs\(\) takes 1 argument \(x\), got 2"),
    (grid_without_ndim, r"cuda\.grid\(\) takes 1 argument \(ndim\), got 0"),
    (grid_of_four, r"cuda\.grid\(\) argument 1 \(ndim\) must be a constant 1, 2 or 3, not constant 4"),
    (shuffle_without_lane, r"cuda\.shfl_sync\(\) takes 3 arguments \(mask, value, src_lane\), got 2"),
    (exp_of_an_array, r"math\.exp\(\) argument 1 \(x\) must be a number, not array 'x'"),
    (misspelt_intrinsic, r"lapis\.cuda has no attribute 'gird'"),
    (host_function_in_a_kernel, r"call to to_device is not supported in kernels"),
    (cast_of_two, r"float32\(\) takes 1 argument \(x\), got 2"),
    (cas_on_floats, r"cuda\.atomic\.cas\(\) argument 1 \(array\) must be a global or shared array of int32, "
                    r"uint32, int64, uint64, not array 'out'"),
    (keyword_to_abs, r"abs\(\) takes no keyword arguments"),
    (misspelt_keyword, r"cuda\.local\.array\(\) got an unexpected keyword argument 'shap'"),
    (range_of_four, r"range\(\) takes 1 to 3 arguments \(start, stop, step\), got 4"),
    (range_of_a_float, r"range\(\) argument 1 \(start\) must be an integer, not a float32 value"),
]


@pytest.mark.parametrize("kernel, message", MISUSED_CALLS, ids=[k.__name__ for k, _ in MISUSED_CALLS])
def test_a_misused_call_is_a_compile_error_at_its_line(kernel, message):
    with pytest.raises(cuda.CompileError, match=message) as e:
        cuda.jit(kernel)[1, 1](cuda.to_device(np.ones(4, np.float32)), cuda.device_array(4, np.float32))
    line = kernel.__code__.co_firstlineno + 1
    assert e.value.filename == __file__ and e.value.line == line and e.value.kernel == kernel.__name__
    assert str(e.value).startswith(f"{__file__}:{line}: ")


def test_every_callable_intrinsic_has_an_entry_in_the_table_of_calls():
    from lapis.cuda.compiler import calls
    from lapis.cuda.compiler import intrinsics as K

    def callables(namespace):
        for value in vars(namespace).values():
            if isinstance(value, K._Namespace):
                yield from callables(value)
            elif isinstance(value, K.Intrinsic) and not isinstance(value, K.Dim3) \
                    and value not in (K.laneid, K.warpsize):        # values a kernel reads, not calls
                yield value
    found = list(callables(K))
    assert len(found) > 20 and all(calls.lookup(i) is not None for i in found), \
        [i.name for i in found if calls.lookup(i) is None]
    assert all(calls.lookup(i).name == i.name for i in found)


def test_constant_math_python_refuses_is_computed_on_the_device():
    @cuda.jit
    def specials(out):
        out[0] = math.log(0.0)
        out[1] = math.sqrt(-1.0)
        out[2] = math.exp(1000.0)
        out[3] = (-8.0) ** 0.5
        out[4] = 0.0 ** -1.0

    out = cuda.device_array(5, np.float32)
    specials[1, 1](out)
    got = out.copy_to_host()
    assert got[0] == -np.inf and np.isnan(got[1]) and got[2] == np.inf and np.isnan(got[3]) and got[4] == np.inf


def choose_in_branches(x, out):
    if x[0] > 0:
        a = x
    else:
        a = out
    out[0] = a[1]


def rebind_in_a_branch(x, out):
    a = x
    if x[0] > 0:
        a = out
    out[1] = a[0]


def swap_in_a_loop(x, out):
    src, dst = x, out
    for i in range(cuda.grid(1)):
        dst[i] = src[i]
        src, dst = dst, src


RUN_TIME_ARRAYS = [
    (choose_in_branches, 5, r"'a' names array 'x' on one side and array 'out' on the other after the branch at line "),
    (rebind_in_a_branch, 3, r"'a' names array 'x' \(line \d+\) and is bound to another one inside a branch or loop"),
    (swap_in_a_loop, 4, r"'src' names array 'x' \(line \d+\) and is bound to another one inside a branch or loop"),
]


@pytest.mark.parametrize("kernel, offset, message", RUN_TIME_ARRAYS, ids=[k.__name__ for k, _, _ in RUN_TIME_ARRAYS])
def test_an_array_chosen_at_run_time_is_a_compile_error(kernel, offset, message):
    # arrays are bound when the kernel compiles: a name that a run-time branch or loop would point at another
    # array used to keep the last one walked, and read or wrote the wrong array
    with pytest.raises(cuda.CompileError, match=message) as e:
        cuda.jit(kernel)[1, 1](cuda.to_device(np.ones(4, np.float32)), cuda.device_array(4, np.float32))
    assert e.value.line == kernel.__code__.co_firstlineno + offset


def test_arrays_chosen_at_compile_time_or_inside_each_branch_stay_right():
    @cuda.jit(device=True)
    def bump(n, a):
        for i in range(n):
            a[i] += 1.0

    @cuda.jit
    def per_slot(n0, a0, n1, a1):
        pair = (a0, a1)                         # a tuple of arrays, indexed by constants
        first = pair[0]
        if cuda.blockIdx.x == 0:
            bump(n0, first)
        else:
            bump(n1, pair[1])

    a0, a1 = cuda.to_device(np.zeros(5, np.float32)), cuda.to_device(np.zeros(3, np.float32))
    per_slot[2, 1](np.int64(5), a0, np.int64(2), a1)
    np.testing.assert_array_equal(a0.copy_to_host(), np.ones(5, np.float32))
    np.testing.assert_array_equal(a1.copy_to_host(), np.array([1, 1, 0], np.float32))


@cuda.jit(device=True)
def _checked_double(v):
    assert v < 100.0                                 # no message: the source line says it
    return v * 2


def test_a_failed_assertion_stops_the_kernel_and_names_itself_like_a_device_side_assert():
    """assert in a kernel or a device function: lanes that pass branch over a BPT.TRAP; one that fails stops the
    kernel, and the fault names the assertion's file, line and source. A true one costs a compare and a branch."""
    @cuda.jit
    def double_positive(x, out):
        i = cuda.grid(1)
        if i < x.size:
            assert x[i] >= 0, "negative input"
            out[i] = _checked_double(x[i])

    x = np.array([1.0, 2.0, 3.0], np.float32)
    out = cuda.device_array(3, np.float32)
    double_positive[1, 32](cuda.to_device(x), out)
    assert out.copy_to_host().tolist() == [2.0, 4.0, 6.0]
    listing = double_positive.inspect_asm()
    assert listing.count("BPT.TRAP") == 2 and "@!P" not in listing.split("BPT.TRAP")[0].splitlines()[-1]
    line = next(n for n, text in enumerate(linecache.getlines(__file__), 1) if '"negative input"' in text)
    for bad, where in ((-1.0, f'{__file__}:{line}: assert x[i] >= 0, "negative input"'),
                       (500.0, "assert v < 100.0")):
        x[1] = bad
        double_positive[1, 32](cuda.to_device(x), out)
        with pytest.raises(cuda.KernelFault, match="device-side assert triggered") as e:
            cuda.synchronize()
        assert where in str(e.value) and e.value.kernel == "double_positive" and "BPT.TRAP" in e.value.instruction
    x[1] = 2.0
    double_positive[1, 32](cuda.to_device(x), out)          # the stream goes on
    assert out.copy_to_host().tolist() == [2.0, 4.0, 6.0]


def test_an_assertion_false_at_compile_time_traps_and_a_message_must_be_a_literal():
    @cuda.jit
    def never(out):
        assert False, "unreachable"  # noqa: B011 - a kernel's assertion, compiled whatever -O says
        out[0] = 1

    out = cuda.device_array(1, np.int32)
    never[1, 1](out)
    with pytest.raises(cuda.KernelFault, match="unreachable"):
        cuda.synchronize()

    @cuda.jit
    def computed(out):
        assert out[0] == 0, "value " + "text"

    with pytest.raises(cuda.CompileError, match="string literal"):
        computed[1, 1](out)


def test_range_with_a_run_time_step_and_len_as_numba_kernels_use_them():
    """The grid-stride loop (range(start, n, cuda.gridsize(1))), steps of either sign and empty ranges as Python's;
    a zero step stops the kernel (Python raises ValueError); len() of an array is its first dimension."""
    @cuda.jit
    def stepped(out, start, stop, step):
        if cuda.grid(1) == 0:
            n = 0
            for i in range(start, stop, step):
                out[n] = i
                n += 1
            out[out.shape[0] - 1] = n

    @cuda.jit
    def grid_stride(x, out):
        for i in range(cuda.grid(1), len(x), cuda.gridsize(1)):
            out[i] = x[i] * 2 + len((1, 2, 3))

    out = cuda.device_array(64, np.int64)
    for start, stop, step in ((0, 10, 3), (10, 0, -3), (5, 5, 2), (0, 10, -1), (-3, 4, 2), (7, -8, -5)):
        stepped[1, 32](out, start, stop, step)
        got = out.copy_to_host()
        want = list(range(start, stop, step))
        assert got[-1] == len(want) and got[:len(want)].tolist() == want
    stepped[1, 32](out, 0, 10, 0)
    with pytest.raises(cuda.KernelFault, match="range.. arg 3 must not be zero"):
        cuda.synchronize()
    x = np.arange(1000, dtype=np.float32)
    result = cuda.device_array(1000, np.float32)
    grid_stride[2, 64](cuda.to_device(x), result)         # 128 threads, about 8 elements each
    assert np.array_equal(result.copy_to_host(), x * 2 + 3)


def test_a_kernel_made_by_exec_compiles_when_linecache_holds_its_text_and_says_how_when_not():
    text = "def twice(x, out):\n    i = cuda.grid(1)\n    if i < x.size:\n        out[i] = 2 * x[i]\n"
    namespace = {"cuda": cuda}
    exec(compile(text, "<no file>", "exec"), namespace)
    with pytest.raises(cuda.CompileError, match="linecache"):
        cuda.jit(namespace["twice"])[1, 32](cuda.device_array(4, np.float32), cuda.device_array(4, np.float32))
    name = "<generated kernel: twice>"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    exec(compile(text, name, "exec"), namespace)
    out = cuda.device_array(4, np.float32)
    cuda.jit(namespace["twice"])[1, 32](cuda.to_device(np.arange(4, dtype=np.float32)), out)
    assert out.copy_to_host().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_tuple_of_numbers_rebound_in_a_branch_or_a_loop_is_a_value():
    """numba's tuples are values: rebound in one arm of an if (it had come out as (0, 0) on the other path), swapped,
    or carried round a loop; a tuple bound once stays a constant (a shared array's shape); its length is fixed."""
    @cuda.jit
    def branches(flag, out):
        t = (1, 2)
        if flag[0] > 0:
            t = (3, 4)
        a, b = 1.5, 2.5
        if flag[0] > 0:
            a, b = b, a
        out[0], out[1], out[2], out[3] = t[0], t[1], a, b

    @cuda.jit
    def fibonacci(n, out):
        pair = (1, 2)
        for i in range(n):
            out[i] = pair[0]
            pair = (pair[1], pair[0] + pair[1])

    @cuda.jit
    def shaped(out):
        shape = (4, 8)
        buf = cuda.shared.array(shape, np.float32)
        buf[3, 7] = 2.0
        out[0] = buf[3, 7] + len(shape)

    out = cuda.device_array(8, np.float64)
    for flag, want in ((0, [1, 2, 1.5, 2.5]), (1, [3, 4, 2.5, 1.5])):
        branches[1, 1](cuda.to_device(np.array([flag])), out)
        assert out.copy_to_host()[:4].tolist() == want
    fibonacci[1, 1](6, out)
    assert out.copy_to_host()[:6].tolist() == [1, 2, 3, 5, 8, 13]
    shaped[1, 1](out)
    assert out.copy_to_host()[0] == 4.0

    @cuda.jit
    def longer(flag, out):
        t = (1, 2)
        if flag[0] > 0:
            t = (1, 2, 3)
        out[0] = t[0]
    with pytest.raises(cuda.CompileError, match="tuple of 2 and is bound to one of 3"):
        longer[1, 1](cuda.to_device(np.array([1])), out)


def test_forall_asarray_flags_and_pinned_as_numba_spells_them():
    @cuda.jit
    def increment(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    d = cuda.to_device(np.zeros(1000, np.float32))
    increment.forall(1000)(d)                              # at least 1000 threads, in blocks of 128
    increment.forall(1000, tpb=64)(d)
    assert np.array_equal(np.asarray(d), np.full(1000, 2.0, np.float32))      # a copy on the host
    assert np.asarray(d, dtype=np.float64).dtype == np.float64
    assert d.flags["C_CONTIGUOUS"] and d.flags["F_CONTIGUOUS"] and not d[::2].flags["C_CONTIGUOUS"]
    host = np.ones(8, np.float32)
    with cuda.pinned(host):
        small = cuda.to_device(host)
    assert np.array_equal(small.copy_to_host(), host)
    with pytest.raises(cuda.LaunchError, match="tasks >= 0"):
        increment.forall(-1)


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint64, np.int64])
def test_the_bitwise_and_wrapping_atomics_numba_has(dtype):
    """and_, or_, xor, inc, dec (one ATOMG each; inc and dec of int64 a compare-and-swap loop, as the ISA's 64-bit
    ones compare unsigned) and compare_and_swap on element 0: every lane's update lands, whatever the order."""
    @cuda.jit
    def update(a, bits, counters, flag):
        i = cuda.grid(1)
        if i < a.size:
            cuda.atomic.or_(bits, 0, a[i])
            cuda.atomic.and_(bits, 1, ~(1 << (i % 31)))
            cuda.atomic.xor(bits, 2, a[i])
            cuda.atomic.inc(counters, 0, 9)
            cuda.atomic.dec(counters, 1, 5)
            cuda.atomic.compare_and_swap(flag, 0, i + 1)

    a = rng.integers(0, 1 << 20, 200).astype(dtype)
    ones = -1 if np.issubdtype(dtype, np.signedinteger) else np.iinfo(dtype).max
    bits = cuda.to_device(np.array([0, ones, 0], dtype))
    counters, flag = cuda.to_device(np.zeros(2, dtype)), cuda.to_device(np.zeros(1, dtype))
    update[4, 64](cuda.to_device(a), bits, counters, flag)
    mask = np.array(ones, dtype)
    for i in range(200):
        mask &= ~np.array(1 << (i % 31), dtype)
    increments, decrements = 0, 0
    for _ in range(200):
        increments = 0 if increments >= 9 else increments + 1
        decrements = 5 if decrements == 0 or decrements > 5 else decrements - 1
    assert bits.copy_to_host().tolist() == [np.bitwise_or.reduce(a), mask, np.bitwise_xor.reduce(a)]
    assert counters.copy_to_host().tolist() == [increments, decrements] and flag.copy_to_host()[0] != 0


def test_float64_atomics_on_global_and_shared_memory():
    """atomic.add/sub/max/min/exch on float64 arrays (ATOMG.F64 and ATOMS.F64), as numba's on sm_60 and later: every
    lane's update lands, max and min return the value each lane saw, and a block's shared partial sums add up."""
    @cuda.jit
    def update(x, totals, extremes, seen, swapped):
        i = cuda.grid(1)
        partial = cuda.shared.array(1, np.float64)
        if cuda.threadIdx.x == 0:
            partial[0] = 0.0
        cuda.syncthreads()
        if i < x.size:
            cuda.atomic.add(totals, 0, x[i])
            cuda.atomic.sub(totals, 1, x[i])
            cuda.atomic.add(partial, 0, x[i])
            seen[i] = cuda.atomic.max(extremes, 0, x[i])
            cuda.atomic.min(extremes, 1, x[i])
            cuda.atomic.exch(swapped, i % 3, x[i])
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            cuda.atomic.add(totals, 2, partial[0])

    x = rng.standard_normal(300) * 1e3
    totals, extremes = cuda.to_device(np.zeros(3)), cuda.to_device(np.array([-np.inf, np.inf]))
    seen, swapped = cuda.device_array(300, np.float64), cuda.to_device(np.zeros(3))
    update[3, 128](cuda.to_device(x), totals, extremes, seen, swapped)
    t = totals.copy_to_host()
    assert np.allclose(t, [x.sum(), -x.sum(), x.sum()], rtol=1e-12, atol=1e-9)
    assert extremes.copy_to_host().tolist() == [x.max(), x.min()]
    got = seen.copy_to_host()                          # in lane order: each lane sees the running maximum before it
    assert np.array_equal(got, np.maximum.accumulate(np.r_[-np.inf, x[:-1]]))
    assert set(swapped.copy_to_host()) <= set(x)
    assert "ATOMG.ADD.F64" in update.inspect_asm() and "ATOMS.ADD.F64" in update.inspect_asm()


def test_a_row_of_an_array_is_an_array_as_numbas_a_of_i():
    """A[i] of a 2-D A is its row, a view: A[i][j] as A[i, j], len() and .shape of it, and atomics, local and shared
    arrays the same way."""
    @cuda.jit
    def rows(A, B, out, sums):
        i = cuda.grid(1)
        if i < A.shape[0]:
            row = A[i]
            acc = 0.0
            for j in range(len(row)):
                acc += row[j] * B[i][j]
                out[i][j] = row[j] + 1
            cuda.atomic.add(sums[i % 2], 0, acc)
            scratch = cuda.local.array((2, 3), np.float32)
            scratch[1][2] = acc
            tile = cuda.shared.array((4, 5), np.float32)
            tile[i % 4][1] = 2.0
            out[i, 0] = scratch[1][2] + tile[i % 4][1] + row.shape[0]

    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = rng.uniform(0, 1, (4, 3)).astype(np.float32)
    out, sums = cuda.device_array((4, 3), np.float32), cuda.to_device(np.zeros((2, 1), np.float32))
    rows[1, 8](cuda.to_device(a), cuda.to_device(b), out, sums)
    dots = (a * b).sum(1)
    want = a + 1
    want[:, 0] = dots + 2 + 3
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-6)
    np.testing.assert_allclose(sums.copy_to_host().ravel(), [dots[0::2].sum(), dots[1::2].sum()], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_small_integer_arrays_load_their_values_and_store_wrapped(dtype):
    """uint8 images and int16 samples: an element loads as its value (computing as numba's, which widens it), a
    store keeps its low bytes (numpy's wrapping cast), in global and shared memory; np.uint8(x) in a kernel and a
    numpy small-integer scalar argument are values too; a local array of them is refused, saying so."""
    @cuda.jit
    def shift(a, out, wide, delta):
        i = cuda.grid(1)
        tile = cuda.shared.array(64, dtype)
        if i < a.size:
            tile[i] = a[i] * 3 + delta
            out[i] = tile[i]
            wide[i, 0] = a[i] - 1
            wide[i, 1] = dtype(a[i] * 1000)

    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 5, info.max // 2, info.max], dtype)
    out, wide = cuda.device_array(5, dtype), cuda.device_array((5, 2), np.int64)
    shift[1, 64](cuda.to_device(a), out, wide, dtype(7))
    as_int = a.astype(np.int64)
    assert out.copy_to_host().tolist() == (as_int * 3 + 7).astype(dtype).tolist()
    assert wide.copy_to_host().tolist() == np.stack([as_int - 1, (as_int * 1000).astype(dtype)], 1).tolist()

    @cuda.jit
    def local_bytes(out):
        scratch = cuda.local.array(4, dtype)
        scratch[0] = 1
        out[0] = scratch[0]
    with pytest.raises(cuda.CompileError, match="local arrays of .* are not supported"):
        local_bytes[1, 1](out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_abs_of_negative_zero_is_positive_zero_in_every_float_type(dtype):
    """abs(-0.0) is +0.0 (IEEE 754's abs clears the sign), so -abs(x) is -0.0: float64's abs once kept -0's sign,
    which made (-0.0) ** 3 come out +0.0."""
    @cuda.jit
    def signs(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i, 0] = abs(x[i])
            out[i, 1] = -abs(x[i])
            out[i, 2] = math.fabs(x[i])
            out[i, 3] = x[i] ** 3
    x = np.array([-0.0, 0.0, -2.5, np.inf, -np.inf], dtype)
    out = cuda.device_array((x.size, 4), dtype)
    signs[1, 32](cuda.to_device(x), out)
    got = out.copy_to_host()
    want = np.stack([np.abs(x), -np.abs(x), np.abs(x), x ** 3], axis=1)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_is_correctly_rounded_at_every_magnitude(dtype):
    """a / b equals numpy's (IEEE's correctly rounded quotient, as CUDA's div.rn) bit for bit, signs of zero
    included, over magnitudes from subnormals to the largest finite numbers and IEEE's special cases. The cases
    that once failed: a divisor beyond float32's range (its reciprocal gave 0 or inf: 1e-6 / 1e-40 gave inf), a
    subnormal dividend or a quotient near the smallest normal (float32's Newton residual was subnormal: 1 ulp off
    in 7% of them), and a float64 quotient that is subnormal (rounded twice: ties broken to even, 1 ulp off in 5%
    of them)."""
    @cuda.jit
    def divide(a, b, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = a[i] / b[i]
    info = np.finfo(dtype)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    rng = np.random.default_rng(4)
    n = 3000
    decades = int(np.log10(info.max))
    magnitudes = 10.0 ** rng.integers(-decades - 6, decades, (2, n))
    wide = [(rng.standard_normal(n) * magnitudes[i]).astype(dtype) for i in range(2)]
    subnormal = rng.integers(1, 2 ** info.nmant, n, dtype=np.uint64).astype(bits).view(dtype)
    ordinary = rng.uniform(0.1, 10, n).astype(dtype)
    near_tiny = (rng.uniform(1, 1000, n) * float(info.tiny)).astype(dtype)
    smallest = float(np.nextafter(dtype(0), dtype(1)))
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, smallest, float(info.tiny) / 8, float(info.max) / 2, 1.0, -3.0]
    a = np.concatenate([wide[0], subnormal, ordinary, near_tiny, np.repeat(specials, len(specials)),
                        [1e-6, 1.0, 3.0, 5.0]]).astype(dtype)
    b = np.concatenate([wide[1], ordinary, subnormal, -rng.uniform(1, 1000, n), np.tile(specials, len(specials)),
                        [1e-40, 3e38, 1e-30, 1e-44]]).astype(dtype)
    out = cuda.device_array(a.size, dtype)
    divide[(a.size + 255) // 256, 256](cuda.to_device(a), cuda.to_device(b), out)
    got = out.copy_to_host()
    with np.errstate(all="ignore"):
        want = a / b
    number = ~np.isnan(want)
    assert np.array_equal(np.isnan(got), ~number)
    assert np.array_equal(got[number].view(bits), want[number].view(bits))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_atomic_inc_and_dec_of_signed_integers_compare_signed(dtype):
    """ATOMG.INC/.DEC of int32 compare as int32 and int64's loop as int64: a negative count goes up and down,
    where an unsigned comparison would wrap it at once."""
    @cuda.jit
    def step(counters):
        cuda.atomic.inc(counters, 0, 9)
        cuda.atomic.dec(counters, 1, 5)
    counters = cuda.to_device(np.array([-3, -3], dtype))
    step[1, 5](counters)
    assert counters.copy_to_host().tolist() == [2, -8]         # -3 + 5; dec: -3 > 5 is false, -3 != 0: -4, ... -8
