"""Layer 5: tensors on cpu/cuda/hip, matmul's rules and errors (torch's); the seed program runs from the README
(tests/test_readme.py)."""

import os
import tracemalloc

import numpy as np
import pytest
import torch

import lapis


def test_devices_follow_torch():
    assert repr(lapis.device("cuda")) == "device(type='cuda')"
    assert str(lapis.device("cuda", 0)) == "cuda:0" and lapis.device("hip:0").index == 0
    assert lapis.device("cpu") == "cpu"
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, hip device type at start of device string: tpu"):
        lapis.device("tpu")
    with pytest.raises(RuntimeError, match="already has an index"):
        lapis.device("cuda:0", 1)


def test_matmul_shapes_and_1d_rules_on_gpu_and_cpu():
    rng = np.random.default_rng(0)
    m, k, n = (rng.random(shape, dtype=np.float32) for shape in ((5, 3), 3, (3, 4)))
    for dev in ("cpu", "cuda", "hip"):
        M, v, N = (lapis.tensor(x, device=dev) for x in (m, k, n))
        out = M @ N
        assert out.shape == lapis.Size([5, 4]) and out.device.type == dev
        np.testing.assert_allclose(out.cpu().numpy(), m @ n, rtol=1e-5)
        np.testing.assert_allclose((M @ v).cpu().numpy(), m @ k, rtol=1e-5)
        np.testing.assert_allclose(lapis.matmul(v, N).cpu().numpy(), k @ n, rtol=1e-5)
        dot = v @ v
        assert dot.shape == lapis.Size([]) and abs(dot.item() - float(k @ k)) < 1e-5


def test_matmul_errors_match_torch():
    a, b = lapis.zeros(2, 3, device="cuda"), lapis.zeros(4, 5, device="cuda")
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        lapis.matmul(a, b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*cuda:0 and cpu"):
        lapis.matmul(a, lapis.zeros(3, 2))
    with pytest.raises(RuntimeError, match="same dtype"):
        lapis.matmul(lapis.zeros(2, 2, dtype=lapis.float64), lapis.zeros(2, 2))
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu()"):
        a.numpy()


def test_creation_and_moves():
    z = lapis.zeros(3, 4, device="hip")
    assert z.device == lapis.device("hip:0") and np.all(z.cpu().numpy() == 0)
    o = lapis.ones((2, 2), device="cuda")
    assert o.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    t = lapis.tensor([[1, 2], [3, 4]])
    assert t.dtype == lapis.int64 and t.shape == lapis.Size([2, 2])
    f = lapis.tensor([1.5, 2.5]).to("cuda")
    assert f.dtype == lapis.float32 and f.device.type == "cuda" and f.cpu().tolist() == [1.5, 2.5]
    assert "device='cuda:0'" in repr(f)
    lapis.manual_seed(5)
    first = lapis.randn(3).tolist()
    lapis.manual_seed(5)
    assert lapis.randn(3).tolist() == first
    x = lapis.tensor(np.arange(6, dtype=np.float64).reshape(2, 3))
    assert x.dtype == lapis.float64 and lapis.from_numpy(x.numpy()).shape == (2, 3)


def test_random_tensors_on_a_gpu_are_the_cpus_numbers_filled_a_chunk_at_a_time(monkeypatch):
    """randn and rand on cuda draw the generator's stream as the cpu device does, copied a chunk at a time (here
    7 values), so the host holds one chunk; a tensor the device cannot hold is refused by the device before the
    host draws anything (it once drew the whole tensor in float64 first, which a big one ran the host out of)."""
    from lapis.framework import creation
    monkeypatch.setattr(creation, "RANDOM_CHUNK", 7)
    for make in (lapis.randn, lapis.rand):
        lapis.manual_seed(11)
        want = make(5, 11).numpy()
        lapis.manual_seed(11)
        got = make(5, 11, device="cuda")
        assert got.shape == (5, 11) and np.array_equal(got.cpu().numpy(), want)
    with pytest.raises(lapis.cuda.OutOfMemoryError):
        lapis.randn(1 << 18, 1 << 18, device="cuda")          # 256 GiB of float32


def test_a_size_whose_bytes_overflow_is_refused_as_torch_refuses_it():
    """2^32 x 2^32 elements (2^66 bytes of float32) once got one element of storage; torch's error on every device."""
    huge = (1 << 32, 1 << 32)
    for device in ("cpu", "cuda"):
        for make, args in ((lapis.zeros, huge), (lapis.empty, huge), (lapis.randn, huge), (lapis.ones, (huge,)),
                           (lapis.randint, (0, 9, huge))):
            with pytest.raises(RuntimeError, match=r"Storage size calculation overflowed with sizes=\[4294967296, "
                                                   r"4294967296\]"):
                make(*args, device=device)
        with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
            lapis.arange(0, 1 << 64, device=device)


def test_a_gpu_tensor_too_big_for_the_device_is_refused_before_the_host_makes_its_values():
    """randint, randperm, eye, linspace and a float arange made their values on the host first (a 256 GiB array
    for a tensor the device could never hold); the tensor is allocated first now, and their values match the cpu
    device's."""
    torch_words = r"CUDA out of memory\. Tried to allocate \d+\.\d\d GiB"
    for make in (lambda: lapis.randint(0, 9, (1 << 18, 1 << 18), device="cuda"),
                 lambda: lapis.randperm(1 << 36, device="cuda"),
                 lambda: lapis.eye(1 << 18, device="cuda"),
                 lambda: lapis.linspace(0, 1, 1 << 36, device="cuda"),
                 lambda: lapis.arange(0.0, float(1 << 36), device="cuda")):
        tracemalloc.start()
        try:
            with pytest.raises(lapis.cuda.OutOfMemoryError, match=torch_words):
                make()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20
    for make in (lambda device: lapis.randint(3, 9, (4, 5), device=device),
                 lambda device: lapis.randperm(11, device=device),
                 lambda device: lapis.eye(3, 4, device=device),
                 lambda device: lapis.linspace(-1, 1, 7, device=device),
                 lambda device: lapis.arange(0.0, 1.0, 0.1, device=device)):
        lapis.manual_seed(5)
        want = make("cpu")
        lapis.manual_seed(5)
        got = make("cuda")
        assert got.shape == want.shape and got.dtype == want.dtype and got.tolist() == want.tolist()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_zeros_in_memory_new_from_the_driver_costs_the_host_nothing():
    """The driver hands out zeroed memory, so zeros in a block new from it skip the fill kernel, whose stores
    made the host back every page of the simulated VRAM (a 256 MiB tensor grew the process by 276 MB); zeros in a
    reused block are still filled."""
    import gc
    gc.collect()
    lapis.cuda.empty_cache()
    before = _rss()
    z = lapis.zeros(8192, 8192 + 7, device="cuda")         # 256 MiB, in a block new from the driver
    lapis.cuda.synchronize()
    assert _rss() - before < 32 << 20
    assert z[0, :4].tolist() == [0.0] * 4 and z[-1, -4:].tolist() == [0.0] * 4
    del z
    ones = lapis.ones(1 << 20, device="cuda")
    del ones
    reused = lapis.zeros(1 << 20, device="cuda")            # the ones' block, from the pool's cache
    assert reused.sum().item() == 0.0 and lapis.full((1 << 20,), -0.0, device="cuda").cpu().numpy()[0].tobytes() \
        == np.float32(-0.0).tobytes()


def test_a_0d_tensor_stays_0d_when_made_and_moved():
    t = lapis.tensor(2.0)
    assert t.shape == () and t.to("cuda").shape == () and t.to("cuda").cpu().shape == ()
    assert lapis.tensor(2.0, device="cuda").shape == () and lapis.tensor(2.0, device="cuda").item() == 2.0


def test_moves_with_dtype_and_torch_conventions():
    g = lapis.tensor([1.25, 2.5], device="cuda")
    h = g.to("cpu", dtype=lapis.float64)
    assert h.device.type == "cpu" and h.dtype == lapis.float64 and h.tolist() == [1.25, 2.5]
    assert lapis.tensor(g).device == g.device                       # a copy stays on its device
    assert lapis.float is lapis.float32 and lapis.int is lapis.int32 and lapis.long is lapis.int64
    with pytest.raises(RuntimeError, match="not implemented for 'int32'"):
        lapis.rand(3, dtype=lapis.int32)
    d = g.to(dtype=lapis.float64)                                  # a cast on the GPU, by a copy kernel
    assert d.device == g.device and d.dtype == lapis.float64 and d.tolist() == [1.25, 2.5]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_float_to_int_casts_out_of_range_follow_each_device_s_hardware_as_torch_s_do(dtype):
    """C leaves a float -> int cast of NaN, inf or an out-of-range value undefined, and so does torch: on the
    CPU it is x86's cvttss2si (the "integer indefinite", the type's minimum), on a GPU CUDA's cvt.rzi
    (saturation, NaN to 0). Each lapis device gives its hardware's answer; in range both truncate."""
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 1e20], np.float32)
    info = np.iinfo(dtype)
    on_cpu = lapis.tensor(x).to(getattr(lapis, dtype)).tolist()
    assert on_cpu == torch.tensor(x).to(getattr(torch, dtype)).tolist()
    saturated = [0, int(info.max), int(info.min)] + [max(int(info.min), min(int(info.max), int(v))) for v in x[3:]]
    assert lapis.tensor(x, device="cuda").to(getattr(lapis, dtype)).cpu().tolist() == saturated


def test_torch_cuda_names_work_on_lapis_cuda():
    import gc
    assert lapis.cuda.is_available() and lapis.cuda.device_count() >= 1 and lapis.cuda.current_device() == 0
    props = lapis.cuda.get_device_properties(0)
    assert props.multi_processor_count == 132 and (props.major, props.minor) == (9, 0) and props.warp_size == 32
    assert "H200" in lapis.cuda.get_device_name() and lapis.hip.get_device_properties().warp_size == 64
    lapis.cuda.synchronize()
    gc.collect()                                                # earlier tests' garbage, freed before counting
    before = lapis.cuda.memory_allocated()
    x = lapis.zeros(1 << 20, device="cuda")                     # 4 MiB: one large-pool block
    assert lapis.cuda.memory_allocated() - before == 4 << 20
    assert lapis.cuda.memory_reserved() >= lapis.cuda.memory_allocated()
    del x
    gc.collect()
    assert lapis.cuda.memory_allocated() == before
    # torch.cuda.Stream / Event: a new stream with its own queue, events timed in simulated device time
    s = lapis.cuda.Stream()
    assert s != lapis.cuda.current_stream() and s.query()
    start, end = lapis.cuda.Event(enable_timing=True), lapis.cuda.Event(enable_timing=True)
    start.record()
    y = lapis.ones(4096, device="cuda") * 2
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0 and y.sum().item() == 8192
    with pytest.raises(lapis.cuda.CudaError, match="timing=False"):
        lapis.cuda.Event().elapsed_time(end)


def test_dlpack_shares_cpu_memory_with_numpy_and_torch():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = lapis.from_dlpack(a)
    t[0, 0] = 100.0                                            # one memory: the write shows in numpy
    assert a[0, 0] == 100 and t.shape == (3, 4) and t.dtype == lapis.float32
    theirs = torch.arange(6.0).reshape(2, 3).t()               # a strided producer
    ours = lapis.from_dlpack(theirs)
    assert ours.stride() == (1, 3) and ours.tolist() == theirs.tolist()
    ours[0, 1] = -1.0
    assert theirs[0, 1].item() == -1.0
    view = lapis.arange(6.0).reshape(2, 3)[:, 1:]             # export: numpy and torch read the view in place
    n = np.from_dlpack(view)
    n[0, 0] = 42.0
    assert view[0, 0].item() == 42.0 and torch.from_dlpack(view).tolist() == view.tolist()
    assert view.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="cpu tensors"):
        lapis.ones(2, device="cuda").__dlpack__()
    with pytest.raises(RuntimeError, match="require gradient"):
        lapis.ones(2, requires_grad=True).__dlpack__()


def test_cuda_names_the_amd_gpu_when_it_is_the_only_one():
    import os
    import subprocess
    import sys
    code = ("import lapis; x = lapis.ones(3, device='cuda') * 2; lapis.accelerator.synchronize()\n"
            "with lapis.profiler.profile(): x + 1\n"
            "print(x.tolist(), x.device, x._storage.array.context.device.api_name, lapis.hip.get_device_name())\n"
            "try: lapis.cuda.synchronize()\nexcept lapis.cuda.CudaSupportError as e: print('raised:', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                         env={**os.environ, "LAPIS_GPUS": "mi300x"}).stdout
    assert out.startswith("[2.0, 2.0, 2.0] cuda:0 hip") and "MI300X" in out       # as a ROCm build of torch
    # The CUDA API sees no GPU: its synchronize says so instead of returning before the AMD GPU's work is done.
    assert "raised: cuda: no nvidia GPU" in out


def test_dtypes_stay_one_object_through_copies_and_pickles():
    import copy
    import pickle
    t = lapis.ones(3)
    assert copy.deepcopy(t).dtype is lapis.float32
    assert pickle.loads(pickle.dumps(t)).dtype is lapis.float32
    assert copy.deepcopy(lapis.bfloat16) is lapis.bfloat16 and copy.copy(lapis.bool) is lapis.bool
    model = lapis.nn.Linear(2, 2)
    copied = copy.deepcopy(model)
    assert (copied(lapis.ones(1, 2)) @ model.weight).dtype is lapis.float32     # matmul compares dtypes with `is`


def test_as_tensor_shares_the_memory_a_cuda_array_interface_describes():
    """torch.as_tensor of a numba (or CuPy) device array is a GPU tensor on the same memory, with its strides; a
    dtype or device it does not have makes a copy, and torch.tensor always copies."""
    from lapis import cuda

    @cuda.jit
    def negate(a):
        i, j = cuda.grid(2)
        if i < a.shape[0] and j < a.shape[1]:
            a[i, j] = -a[i, j]
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = cuda.to_device(host)
    shared, fortran = lapis.as_tensor(d), lapis.as_tensor(cuda.to_device(np.asfortranarray(host)))
    copied, halved, on_cpu = lapis.tensor(d, device="cuda"), lapis.as_tensor(d, dtype=lapis.float16), \
        lapis.as_tensor(d, device="cpu")
    assert (shared.device.type, shared.shape, shared.stride()) == ("cuda", (2, 3), (3, 1))
    assert fortran.stride() == (1, 2) and np.array_equal(fortran.cpu().numpy(), host)
    negate[(1, 1), (4, 4)](d)
    assert np.array_equal(shared.cpu().numpy(), -host)                  # the kernel's writes are the tensor's
    for copy in (copied, halved, on_cpu):
        assert np.array_equal(copy.cpu().numpy(), host)
    assert halved.dtype == lapis.float16 and on_cpu.device.type == "cpu"
    assert torch.as_tensor(host).stride() == lapis.as_tensor(host).stride()


def test_as_tensor_refuses_an_interface_to_memory_lapis_did_not_allocate():
    class Foreign:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x1000, False), "version": 3}
    with pytest.raises(TypeError, match="describes no lapis device memory"):
        lapis.as_tensor(Foreign())
