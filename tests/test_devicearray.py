"""Layer 3 device arrays: numba's reshape, ravel and view, checked against numpy's answers."""

import numpy as np
import pytest

from lapis import cuda

X = np.arange(24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(2, 12), (3, -1), (24,), (2, 3, 4), (-1, 2, 2)])
def test_reshape_of_a_contiguous_array_reads_as_numpys(order, shape):
    host = np.asarray(X, order=order)
    d = cuda.to_device(host)
    r = d.reshape(*shape, order=order)
    want = host.reshape(shape, order=order)
    assert r.shape == want.shape and r.strides == want.strides
    assert np.array_equal(r.copy_to_host(), want)
    assert d.reshape(shape, order=order).shape == want.shape               # a tuple works too
    assert np.array_equal(d.reshape(*shape, order="A").copy_to_host(), host.reshape(shape, order="A"))


def test_reshape_and_ravel_are_views_of_the_same_memory():
    d = cuda.to_device(X)
    flat, grid = d.ravel(), d.reshape(2, 12)
    assert flat.memory is d.memory and flat.ptr == d.ptr and flat.shape == (24,) and flat.layout == "C"
    d.copy_to_device(-X)                                                    # write through the original ...
    assert np.array_equal(flat.copy_to_host(), -X.ravel())                 # ... the views see it
    assert np.array_equal(grid.copy_to_host(), -X.reshape(2, 12))
    fortran = cuda.to_device(np.asfortranarray(X))
    assert np.array_equal(fortran.ravel(order="F").copy_to_host(), X.ravel(order="F"))
    assert np.array_equal(fortran.ravel(order="A").copy_to_host(), np.asfortranarray(X).ravel(order="A"))


def test_what_would_need_a_copy_raises_as_numba():
    d = cuda.to_device(X)
    strided = d[:, ::2]
    with pytest.raises(NotImplementedError, match="requires copying"):
        strided.reshape(6, 2)
    with pytest.raises(NotImplementedError, match="requires copying"):
        strided.ravel()
    with pytest.raises(NotImplementedError, match="requires copying"):
        cuda.to_device(np.asfortranarray(X)).ravel()                       # C order of an F array
    with pytest.raises(NotImplementedError):
        d[::2].ravel()
    same = strided.reshape(4, 3)                                            # the same shape: a view, no copy
    assert same.shape == (4, 3) and same.strides == strided.strides and same.ptr == strided.ptr
    with pytest.raises(ValueError, match="one unknown"):
        d.reshape(-1, -1)
    with pytest.raises(ValueError, match="cannot reshape"):
        d.reshape(5, 5)
    with pytest.raises(ValueError, match="order"):
        d.ravel(order="K")


@pytest.mark.parametrize("dtype", [np.uint32, np.uint8, np.float16, np.float64, np.int16])
def test_view_reinterprets_the_bytes_as_numpy_does(dtype):
    d = cuda.to_device(X)
    v = d.view(dtype)
    want = X.view(dtype)
    assert v.shape == want.shape and v.strides == want.strides and v.dtype == want.dtype
    assert np.array_equal(v.copy_to_host(), want) and v.ptr == d.ptr


def test_view_rules():
    d = cuda.to_device(X)
    odd = d[:, :3]                                                          # 12 bytes per row, not C-contiguous
    same, want = odd.view(np.int32), X[:, :3].view(np.int32)               # the same item size: any strides
    assert (same.shape, same.strides, same.dtype) == (want.shape, want.strides, want.dtype)
    with pytest.raises(ValueError, match="C-contiguous"):
        odd.view(np.float64)
    with pytest.raises(ValueError, match="evenly divide"):
        cuda.to_device(np.zeros(3, np.float32)).view(np.float64)
    halves = cuda.to_device(np.zeros(6, np.float16)).view(np.uint32)
    assert halves.shape == (3,) and halves.strides == (4,)


def test_an_integer_for_every_dimension_gives_the_element_on_the_host_as_numba():
    # numba's d[i] copies the element back as a numpy scalar, so `d[2] == 2.0` and print(d[0]) read as numbers;
    # any slice keeps a view
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    d = cuda.to_device(x)
    assert type(d[1, 2]) is np.int32 and d[1, 2] == 6 and d[-1, -1] == 11
    assert isinstance(d[1], cuda.DeviceNDArray) and d[1].shape == (4,)
    assert d[1][3] == 7 and d[:, 2][0] == 2
    with pytest.raises(IndexError, match="out of bounds"):
        d[3, 0]


def test_device_array_like_takes_a_device_array_too():
    for host in (np.ones((3, 4), np.float32), np.asfortranarray(np.ones((3, 4), np.float64))):
        like = cuda.device_array_like(cuda.to_device(host))
        assert like.shape == host.shape and like.dtype == host.dtype
        assert like.is_f_contiguous() == host.flags.f_contiguous and like.is_c_contiguous() == host.flags.c_contiguous


def test_transpose_and_T_are_views_with_permuted_strides():
    x = np.arange(24.0).reshape(2, 3, 4)
    d = cuda.to_device(x)
    assert np.array_equal(d.T.copy_to_host(), x.T) and d.T.strides == x.T.strides
    for axes in ((1, 0, 2), (0, -1, 1)):               # neither C nor F: a view numba would not copy back either
        view = d.transpose(axes)
        assert (view.shape, view.strides) == (x.transpose(axes).shape, x.transpose(axes).strides)
    assert d.T.ptr == d.ptr
    with pytest.raises(ValueError, match="not a permutation"):
        d.transpose((0, 0, 1))


class Described:
    """Another library's device array: only its CUDA Array Interface."""

    def __init__(self, **desc):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, **desc}


@cuda.jit
def _double(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2


@cuda.jit
def _mark(a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        a[i, j] = i * 10 + j


def test_a_kernel_takes_a_gpu_tensor_as_the_array_it_describes():
    """numba launches a kernel on any object with a CUDA Array Interface (a torch tensor): its memory, in place,
    with its strides."""
    import lapis
    t = lapis.arange(6, dtype=lapis.float32, device="cuda")
    _double[1, 32](t)
    assert np.array_equal(t.cpu().numpy(), np.arange(6, dtype=np.float32) * 2)
    m = lapis.zeros(3, 4, device="cuda").t()                       # (4, 3), strides (1, 4) elements: not contiguous
    _mark[(1, 1), (8, 8)](m)
    want = np.add.outer(np.arange(4) * 10, np.arange(3)).astype(np.float32)
    assert np.array_equal(m.cpu().numpy(), want)
    assert np.array_equal(m.t().contiguous().cpu().numpy(), want.T)   # the base's memory holds the transpose


def test_as_cuda_array_is_a_view_of_the_described_memory():
    import lapis
    full = lapis.arange(12, dtype=lapis.float32, device="cuda").reshape(3, 4)
    m = full[:, 1:]
    v = cuda.as_cuda_array(m)
    assert cuda.is_cuda_array(m) and cuda.is_cuda_array(v) and not cuda.is_cuda_array(np.ones(2))
    assert (v.shape, v.strides, v.dtype) == ((3, 3), (16, 4), np.float32)
    _mark[(1, 1), (8, 8)](v)                                       # written through the view: the tensor's
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    want[:, 1:] = np.add.outer(np.arange(3) * 10, np.arange(3))
    assert np.array_equal(full.cpu().numpy(), want)
    d = cuda.to_device(np.arange(8, dtype=np.int32))
    back = cuda.from_cuda_array_interface(d.__cuda_array_interface__)
    _double[1, 32](back)
    assert np.array_equal(d.copy_to_host(), np.arange(8, dtype=np.int32) * 2)     # the same memory, no copy


def test_what_describes_no_lapis_memory_is_refused():
    d = cuda.to_device(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="doesn't implement the cuda array interface"):
        cuda.as_cuda_array(np.ones(3))
    with pytest.raises(ValueError, match="not in device memory allocated through lapis.cuda"):
        cuda.as_cuda_array(Described(shape=(4,), typestr="<f4", data=(0x1000, False)))
    with pytest.raises(ValueError, match="reaches past its allocation"):
        cuda.as_cuda_array(Described(shape=(4096,), typestr="<f4", data=(d.ptr, False)))
    with pytest.raises(NotImplementedError, match="Masked"):
        cuda.as_cuda_array(Described(shape=(4,), typestr="<f4", data=(d.ptr, False), mask=d))
    with pytest.raises(TypeError, match="not supported"):
        _double[1, 32](object())                                   # neither a device array nor a number
