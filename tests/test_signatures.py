"""numba's typed kernels: @cuda.jit("void(float32[:], ...)") compiles at the decorator and fits its launches."""

import numpy as np
import pytest

import lapis.numba as nb
from lapis import cuda
from lapis.cuda import CompileError
from lapis.numba import float32, int32, njit, types, void


def test_a_typed_kernel_compiles_at_the_decorator_and_converts_a_python_float_to_float32():
    @cuda.jit("void(float32[:], float32[:], float32)")
    def scale(x, out, a):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = x[i] * a

    assert len(scale.overloads) == 1                 # before any launch
    x = np.random.default_rng(2).random(1000).astype(np.float32)
    out = cuda.device_array_like(x)
    scale[4, 256](cuda.to_device(x), out, 0.1)       # a Python float: float32 in the kernel, as numba passes it
    assert np.array_equal(out.copy_to_host(), x * np.float32(0.1))
    assert len(scale.overloads) == 1
    with pytest.raises(TypeError, match="no signature of kernel 'scale' fits"):
        scale[4, 256](cuda.to_device(x.astype(np.float64)), out, 0.1)


def test_a_compile_error_shows_at_the_decorator():
    with pytest.raises(CompileError, match="not_defined"):
        @cuda.jit("void(int32[:])")
        def broken(x):
            x[0] = not_defined                       # noqa: F821


def test_several_signatures_contiguity_and_bad_ones():
    @cuda.jit(["void(int32[:, ::1], int32)", "void(float32[:, :], float32)"])
    def fill(x, value):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            x[i, j] = value

    ints, floats = cuda.device_array((4, 4), np.int32), cuda.device_array((4, 4), np.float32, order="F")
    fill[(1, 1), (4, 4)](ints, 7)
    fill[(1, 1), (4, 4)](floats, 2)                  # an int for a float32: converted
    assert (ints.copy_to_host() == 7).all() and (floats.copy_to_host() == 2.0).all()
    with pytest.raises(TypeError, match="no signature"):
        fill[(1, 1), (4, 4)](cuda.device_array((4, 4), np.int32, order="F"), 1)   # [:, ::1] wants C order
    with pytest.raises(TypeError, match="no signature"):
        fill[(1, 1), (4, 4)](ints, 1.5)             # a float for an int32 does not fit
    for bad in ("float32(float32[:])", "void(float32[:, 1])", "void(object[:])", nb.float32(nb.float32[:])):
        with pytest.raises(TypeError, match="kernel signature"):
            cuda.jit(bad)(lambda x: None)


@njit
def clamp(x, low, high):
    """A CPU-jitted helper, as numba programs write them: the host calls it, kernels inline it."""
    return min(max(x, low), high)


def test_numbas_type_objects_spell_the_same_signatures():
    """The import surface of numba programs: lapis.numba's cuda, float32, int32, void and types, with signatures as
    objects, as a tuple of argument types, and a CPU @njit function a kernel calls."""
    @cuda.jit(void(float32[:], float32[::1], int32))
    def clamped(x, out, n):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, n, stride):                 # a grid-stride loop
            out[i] = clamp(x[i], float32(-1), float32(1))

    x = np.random.default_rng(4).standard_normal(3000).astype(np.float32)
    out = cuda.device_array_like(x)
    clamped[4, 128](cuda.to_device(x), out, x.size)
    assert len(clamped.overloads) == 1
    assert np.array_equal(out.copy_to_host(), np.clip(x, -1, 1)) and clamp(5, 0, 3) == 3

    @cuda.jit((types.Array(types.float32, 2, "C"), types.float32))
    def fill(a, value):
        i, j = cuda.grid(2)
        if i < a.shape[0] and j < a.shape[1]:
            a[i, j] = value
    c = cuda.device_array((3, 5), np.float32)
    fill[(1, 1), (4, 8)](c, 2.5)
    assert (c.copy_to_host() == 2.5).all()
    with pytest.raises(TypeError, match="no signature"):
        fill[(1, 1), (4, 8)](cuda.device_array((3, 5), np.float32, order="F"), 2.5)

    assert (float32[:, ::1], float32[::1, :], int32[::1]) == (
        types.Array(float32, 2, "C"), types.Array(float32, 2, "F"), types.Array(int32, 1, "C"))
    assert float32(1.5) == np.float32(1.5) and type(float32(1.5)) is np.float32
    assert str(void(float32[:], int32)) == "void(array(float32, 1d, A), int32)"
    with pytest.raises(TypeError, match="':' or '::1'"):
        float32[1:3]
    with pytest.raises(TypeError, match="first or last dimension"):
        float32[:, ::1, :]


def test_specialize_compiles_for_the_arguments_given_and_takes_only_their_types():
    @cuda.jit
    def scale(x, a):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= a

    x = cuda.to_device(np.ones(8, np.float32))
    special = scale.specialize(x, np.float32(2))
    assert len(special.overloads) == 1 and not scale.overloads
    special[1, 8](x, 3.0)                               # a Python float: converted to the specialized float32
    assert (x.copy_to_host() == 3).all()
    with pytest.raises(TypeError, match="no signature"):
        special[1, 8](cuda.to_device(np.ones(8)), 3.0)


def test_numba_s_other_type_names_and_a_signature_without_a_return_type():
    """numba reads "(float64[::1], intp)" as a void signature, and names float64 double and int64 intp."""
    from lapis.numba import double, float_, intp, uintp

    assert (double, float_, intp, uintp) == (nb.float64, nb.float32, nb.int64, nb.uint64)

    @cuda.jit("(float64[::1], intp)")
    def ramp(a, n):
        i = cuda.grid(1)
        if i < n:
            a[i] = i * 2.0

    @cuda.jit([(double[:], intp), "void(i1[:], u2)"])
    def first(a, n):
        a[0] = n

    a = cuda.to_device(np.zeros(5))
    ramp[1, 8](a, 5)
    first[1, 1](a, 7)
    assert a.copy_to_host().tolist() == [7.0, 2.0, 4.0, 6.0, 8.0]
