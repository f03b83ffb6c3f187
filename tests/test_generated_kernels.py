"""Layer 3: random arithmetic and control flow, compiled and run, against Python running the same code.

Hypothesis writes small kernel bodies (integer and float expressions, if/else, while loops
whose trip counts differ per lane, early exits); each is written to a module file (the
compiler reads kernels from source), compiled, run on 64 lanes, and compared with the same
function run by Python on each lane's inputs.
"""

import importlib.util
import itertools
import math
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lapis import cuda

_counter = itertools.count()
INT_OPS = ["+", "-", "*", "//", "%", "&", "|", "^"]
FLOAT_OPS = ["+", "-", "*"]


@st.composite
def int_expr(draw, depth=0):
    if depth > 2 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", "k", str(draw(st.integers(-9, 9)))]))
    op = draw(st.sampled_from(INT_OPS))
    left, right = draw(int_expr(depth + 1)), draw(int_expr(depth + 1))
    if op in ("//", "%"):                      # a divisor that is never zero
        right = f"({right}) % 7 + 1" if draw(st.booleans()) else str(draw(st.integers(1, 9)))
    if op in ("&", "|", "^"):
        return f"(({left}) {op} ({right}))"
    return f"min(max(({left}) {op} ({right}), -100000), 100000)"     # keep values small enough for float64


@st.composite
def float_expr(draw, depth=0):
    if depth > 2 or draw(st.booleans()):
        return draw(st.sampled_from(["x", "y", "float(a)", str(draw(st.floats(-4, 4, width=32)))]))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f"({draw(float_expr(depth + 1))} {draw(st.sampled_from(FLOAT_OPS))} {draw(float_expr(depth + 1))})"
    if kind == 1:
        return f"abs({draw(float_expr(depth + 1))})"
    if kind == 2:
        return f"min({draw(float_expr(depth + 1))}, {draw(float_expr(depth + 1))})"
    return f"({draw(float_expr(depth + 1))} if {draw(condition())} else {draw(float_expr(depth + 1))})"


@st.composite
def condition(draw):
    cmp = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    return f"({draw(st.sampled_from(['a', 'b', 'k']))} {cmp} {draw(st.integers(-5, 5))})"


@st.composite
def body(draw):
    """A function of (a, b, x, y) -> (int, float) with branches and a per-lane loop."""
    lines = ["k = a % 5", f"r = {draw(int_expr())}", f"f = {draw(float_expr())}"]
    lines += [f"if {draw(condition())}:", f"    r = r + ({draw(int_expr())})", "else:",
              f"    f = f * 0.5 + ({draw(float_expr())})"]
    lines += ["n = 0", "while n < k + b % 3:", "    r = (r * 3 + n) % 1009", "    n += 1"]
    if draw(st.booleans()):
        lines += [f"if {draw(condition())}:", "    return r, f"]
    lines += [f"f = f - {draw(float_expr())}", "return r, f"]
    return "\n".join(lines)


def load(source: str, tmp_path):
    path = tmp_path / f"generated_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body())
def test_generated_kernels_compute_what_python_computes(tmp_path, code):
    source = f'''
import math
from lapis import cuda


@cuda.jit(device=True)
def f(a, b, x, y):
{textwrap.indent(code, "    ")}


def py(a, b, x, y):
{textwrap.indent(code, "    ")}


@cuda.jit
def kernel(a, b, x, y, out_i, out_f):
    i = cuda.grid(1)
    r, g = f(a[i], b[i], x[i], y[i])
    out_i[i] = r
    out_f[i] = g
'''
    module = load(source, tmp_path)
    rng = np.random.default_rng(len(code))
    a, b = rng.integers(-20, 20, 64), rng.integers(0, 20, 64)
    x, y = rng.standard_normal(64), rng.standard_normal(64)
    out_i, out_f = cuda.device_array(64, np.int64), cuda.device_array(64, np.float64)
    module.kernel[1, 64](*(cuda.to_device(v) for v in (a, b, x, y)), out_i, out_f)
    expected = [module.py(int(a[j]), int(b[j]), float(x[j]), float(y[j])) for j in range(64)]
    got_i, got_f = out_i.copy_to_host(), out_f.copy_to_host()
    assert list(got_i) == [int(e[0]) for e in expected], code
    want_f = np.array([e[1] for e in expected])
    assert np.allclose(got_f, want_f, rtol=1e-12, atol=1e-12) or all(
        math.isclose(g, w, rel_tol=1e-12, abs_tol=1e-12) for g, w in zip(got_f, want_f, strict=True)), code
