"""lapis.cuda.bindings.driver: cuda-python's driver API over lapis, run as cuda-python's own programs run."""

import ctypes

import numpy as np
import pytest

from lapis import cuda
from lapis.cuda.bindings import driver, nvrtc

R = driver.CUresult
OK = R.CUDA_SUCCESS

SAXPY = b"""\
extern "C" __global__
void saxpy(float a, float *x, float *y, float *out, size_t n)
{
  size_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid < n) {
    out[tid] = a * x[tid] + y[tid];
  }
}
"""

MORE = r"""
__constant__ float table[4] = {1.5f, 2.5f, -3.0f, 8.0f};
__device__ int counter;
struct Pair { float scale; int offset; };

extern "C" __global__ void lookup(float *out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = table[i % 4];
  if (i == 0) atomicAdd(&counter, 1);
}
extern "C" __global__ void poke(int *p, long long index) { p[index] = 7; }
extern "C" __global__ void affine(Pair pair, const int *in, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (int)(pair.scale * in[i]) + pair.offset;
}
extern "C" __global__ void stage(float *out) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
"""


def check(result):
    """The results of a driver call that must succeed (cuda-python's examples' ASSERT_DRV)."""
    err, *rest = result
    assert err == OK, f"{err!r}: {driver.cuGetErrorString(err)[1]}"
    return rest[0] if len(rest) == 1 else tuple(rest) if rest else None


def ptx_of(source: bytes, name: bytes = b"kernel.cu") -> bytes:
    """NVRTC's PTX, as cuda-python's documentation compiles it."""
    err, prog = nvrtc.nvrtcCreateProgram(source, name, 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    opts = [b"--fmad=false", b"--gpu-architecture=compute_90"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    ptx = b" " * size
    (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    nvrtc.nvrtcDestroyProgram(prog)
    return ptx


@pytest.fixture(scope="module")
def context():
    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(0))
    ctx = check(driver.cuCtxCreate(None, 0, device))
    yield ctx
    check(driver.cuCtxDestroy(ctx))


@pytest.fixture(scope="module")
def more(context):
    return check(driver.cuModuleLoadData(ptx_of(MORE.encode(), b"more.cu")))


def test_saxpy_as_cuda_pythons_example(context):
    ptx = ptx_of(SAXPY, b"saxpy.cu")
    # the documentation's example passes the PTX's address: np.char.array(ptx).ctypes.data
    module = check(driver.cuModuleLoadData(np.char.array(ptx).ctypes.data))
    kernel = check(driver.cuModuleGetFunction(module, b"saxpy"))

    threads, blocks = 128, 4
    a = np.array([2.0], dtype=np.float32)
    n = np.array(threads * blocks, dtype=np.uint32)
    buffer_size = n * a.itemsize
    rng = np.random.default_rng(1)
    h_x = rng.random(int(n)).astype(np.float32)
    h_y = rng.random(int(n)).astype(np.float32)
    h_out = np.zeros(int(n), np.float32)

    d_x_class = check(driver.cuMemAlloc(buffer_size))
    d_y_class = check(driver.cuMemAlloc(buffer_size))
    d_out_class = check(driver.cuMemAlloc(buffer_size))
    stream = check(driver.cuStreamCreate(0))
    check(driver.cuMemcpyHtoDAsync(d_x_class, h_x.ctypes.data, buffer_size, stream))
    check(driver.cuMemcpyHtoDAsync(d_y_class, h_y.ctypes.data, buffer_size, stream))

    d_x = np.array([int(d_x_class)], dtype=np.uint64)
    d_y = np.array([int(d_y_class)], dtype=np.uint64)
    d_out = np.array([int(d_out_class)], dtype=np.uint64)
    args = [a, d_x, d_y, d_out, n]
    args = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream, args.ctypes.data, 0))
    check(driver.cuMemcpyDtoHAsync(h_out.ctypes.data, d_out_class, buffer_size, stream))
    check(driver.cuStreamSynchronize(stream))
    np.testing.assert_allclose(h_out, a[0] * h_x + h_y, rtol=1e-6)

    # the (values, types) form, with a numpy array as host memory and the default stream
    h_out[:] = 0
    check(driver.cuMemsetD32(d_out_class, 0, int(n)))
    params = ((np.float32(3.0), d_x_class, d_y_class, d_out_class, int(n)),
              (ctypes.c_float, None, None, None, ctypes.c_size_t))
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, 0, params, 0))
    check(driver.cuCtxSynchronize())
    check(driver.cuMemcpyDtoH(h_out, d_out_class, buffer_size))
    np.testing.assert_allclose(h_out, 3 * h_x + h_y, rtol=1e-6)

    for d in (d_x_class, d_y_class, d_out_class):
        check(driver.cuMemFree(d))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    assert driver.cuModuleGetFunction(module, b"saxpy")[0] == R.CUDA_ERROR_INVALID_HANDLE
    assert driver.cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, 0, None, 0) == (R.CUDA_ERROR_INVALID_HANDLE,)


def test_extra_buffer_and_struct_parameter(context, more):
    affine = check(driver.cuModuleGetFunction(more, "affine"))
    n = 100
    values = np.arange(n, dtype=np.int32)
    d_in, d_out = check(driver.cuMemAlloc(values.nbytes)), check(driver.cuMemAlloc(values.nbytes))
    check(driver.cuMemcpyHtoD(d_in, values, values.nbytes))

    class Pair(ctypes.Structure):
        _fields_ = [("scale", ctypes.c_float), ("offset", ctypes.c_int)]

    params = ((Pair(2.0, -5), d_in, d_out, n), (None, None, None, ctypes.c_int))
    check(driver.cuLaunchKernel(affine, 1, 1, 1, 128, 1, 1, 0, 0, params, 0))
    out = np.zeros(n, np.int32)
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    np.testing.assert_array_equal(out, 2 * values - 5)

    # extra: the parameters packed in one buffer, at the offsets the kernel's PTX gives them
    packed = np.zeros(32, np.uint8)
    packed[0:8] = np.frombuffer(bytes(Pair(3.0, 1)), np.uint8)
    packed[8:16] = np.frombuffer(np.uint64(int(d_in)).tobytes(), np.uint8)
    packed[16:24] = np.frombuffer(np.uint64(int(d_out)).tobytes(), np.uint8)
    packed[24:28] = np.frombuffer(np.int32(n).tobytes(), np.uint8)
    size = np.array([packed.nbytes], np.uint64)
    extra = np.array([driver.CU_LAUNCH_PARAM_BUFFER_POINTER, packed.ctypes.data, driver.CU_LAUNCH_PARAM_BUFFER_SIZE,
                      size.ctypes.data, driver.CU_LAUNCH_PARAM_END], np.uint64)
    check(driver.cuLaunchKernel(affine, 1, 1, 1, 128, 1, 1, 0, 0, None, extra.ctypes.data))
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    np.testing.assert_array_equal(out, 3 * values + 1)
    # kernelParams and extra together are refused
    assert driver.cuLaunchKernel(affine, 1, 1, 1, 128, 1, 1, 0, 0, params, extra.ctypes.data)[0] == \
        R.CUDA_ERROR_INVALID_VALUE


def test_module_globals(context, more):
    dptr, size = check(driver.cuModuleGetGlobal(more, b"table"))
    assert size == 16
    host = np.zeros(4, np.float32)
    check(driver.cuMemcpyDtoH(host, dptr, size))
    np.testing.assert_array_equal(host, [1.5, 2.5, -3.0, 8.0])
    # a kernel reads the __constant__ table, and what the host writes into it
    check(driver.cuMemcpyHtoD(dptr, np.array([4, 3, 2, 1], np.float32), size))
    lookup = check(driver.cuModuleGetFunction(more, b"lookup"))
    d_out = check(driver.cuMemAlloc(8 * 4))
    check(driver.cuLaunchKernel(lookup, 1, 1, 1, 8, 1, 1, 0, 0, ((d_out, 8), (None, ctypes.c_int)), 0))
    out = np.zeros(8, np.float32)
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    np.testing.assert_array_equal(out, [4, 3, 2, 1, 4, 3, 2, 1])
    counter, size = check(driver.cuModuleGetGlobal(more, b"counter"))
    value = np.zeros(1, np.int32)
    check(driver.cuMemcpyDtoH(value, counter, 4))
    assert size == 4 and value[0] == 1
    assert driver.cuModuleGetGlobal(more, b"missing") == (R.CUDA_ERROR_NOT_FOUND, None, None)


def test_dynamic_shared_memory_needs_opting_in(context, more):
    stage = check(driver.cuModuleGetFunction(more, b"stage"))
    d_out = check(driver.cuMemAlloc(256 * 4))
    params = ((d_out,), (None,))
    check(driver.cuLaunchKernel(stage, 1, 1, 1, 256, 1, 1, 256 * 4, 0, params, 0))
    out = np.zeros(256, np.float32)
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    np.testing.assert_array_equal(out, np.arange(255, -1, -1))
    big = 64 * 1024
    assert driver.cuLaunchKernel(stage, 1, 1, 1, 256, 1, 1, big, 0, params, 0) == (R.CUDA_ERROR_INVALID_VALUE,)
    check(driver.cuFuncSetAttribute(stage, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    big))
    check(driver.cuLaunchKernel(stage, 1, 1, 1, 256, 1, 1, big, 0, params, 0))
    check(driver.cuCtxSynchronize())


def test_function_attributes_and_occupancy(context, more):
    lookup = check(driver.cuModuleGetFunction(more, b"lookup"))
    compiled = cuda.RawModule(code=MORE).get_function("lookup").compiled
    FA = driver.CUfunction_attribute
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_NUM_REGS, lookup)) == compiled.registers
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, lookup)) == compiled.shared_bytes
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, lookup)) == compiled.local_bytes
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, lookup)) == 1024
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, lookup)) == 16
    assert check(driver.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_BINARY_VERSION, lookup)) == 90
    stage = check(driver.cuModuleGetFunction(more, b"stage"))
    props = cuda.get_current_device().properties
    for block, dynamic in ((128, 0), (256, 4096), (1024, 100 * 1024)):
        expected = cuda.occupancy.max_active_blocks_per_multiprocessor(
            props, block, compiled.registers if block == 128 else
            cuda.RawModule(code=MORE).get_function("stage").compiled.registers, dynamic)
        f = lookup if block == 128 else stage
        assert check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, block, dynamic)) == expected
    assert check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(lookup, 64, 0)) > 0


def test_device_attributes_match_lapis(context):
    device = check(driver.cuDeviceGet(0))
    props = cuda.get_device_properties(0)
    A = driver.CUdevice_attribute

    def attribute(name):
        return check(driver.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + name), device))

    assert (attribute("COMPUTE_CAPABILITY_MAJOR"), attribute("COMPUTE_CAPABILITY_MINOR")) == (props.major, props.minor)
    assert attribute("MULTIPROCESSOR_COUNT") == props.multi_processor_count
    assert attribute("WARP_SIZE") == props.warp_size == 32
    assert attribute("MAX_THREADS_PER_BLOCK") == cuda.get_current_device().MAX_THREADS_PER_BLOCK
    assert attribute("MAX_THREADS_PER_MULTIPROCESSOR") == props.max_threads_per_multi_processor
    assert attribute("MAX_SHARED_MEMORY_PER_BLOCK") == 48 * 1024
    assert attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") == props.shared_memory_per_block
    assert attribute("MAX_REGISTERS_PER_MULTIPROCESSOR") == props.regs_per_multiprocessor
    assert attribute("L2_CACHE_SIZE") == props.L2_cache_size
    runtime = cuda.cudaGetDeviceProperties(0)[1]
    assert attribute("CLOCK_RATE") == runtime.clockRate > 0
    assert attribute("MEMORY_CLOCK_RATE") == runtime.memoryClockRate > 0
    assert attribute("GLOBAL_MEMORY_BUS_WIDTH") % 1024 == 0
    assert check(driver.cuDeviceTotalMem(device)) == props.total_memory
    name = check(driver.cuDeviceGetName(256, device))
    assert len(name) == 256 and name.split(b"\0")[0].decode() == props.name
    assert check(driver.cuDeviceGetCount()) == cuda.device_count()
    assert check(driver.cuDriverGetVersion()) == driver.CUDA_VERSION
    assert driver.cuDeviceGet(cuda.device_count()) == (R.CUDA_ERROR_INVALID_DEVICE, None)


def test_errors_have_codes_and_words(context, more):
    assert driver.cuModuleGetFunction(more, b"nonexistent") == (R.CUDA_ERROR_NOT_FOUND, None)
    assert driver.cuGetErrorName(R.CUDA_ERROR_INVALID_VALUE) == (OK, b"CUDA_ERROR_INVALID_VALUE")
    assert driver.cuGetErrorString(R.CUDA_ERROR_ILLEGAL_ADDRESS) == (OK, b"an illegal memory access was encountered")
    assert driver.cuGetErrorString(123456)[0] == R.CUDA_ERROR_INVALID_VALUE
    # handles never made, or destroyed
    assert driver.cuStreamSynchronize(driver.CUstream(0xDEAD0)) == (R.CUDA_ERROR_INVALID_HANDLE,)
    stream = check(driver.cuStreamCreate(0))
    check(driver.cuStreamDestroy(stream))
    assert driver.cuStreamSynchronize(stream) == (R.CUDA_ERROR_INVALID_HANDLE,)
    event = check(driver.cuEventCreate(0))
    check(driver.cuEventDestroy(event))
    assert driver.cuEventRecord(event, 0) == (R.CUDA_ERROR_INVALID_HANDLE,)
    assert driver.cuModuleGetFunction(driver.CUmodule(12345), b"f") == (R.CUDA_ERROR_INVALID_HANDLE, None)
    with pytest.raises(TypeError):          # as cuda-python refuses an argument of the wrong type
        driver.cuStreamSynchronize("stream")
    # memory
    assert driver.cuMemAlloc(0) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert driver.cuMemAlloc(1 << 50) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    assert driver.cuMemFree(driver.CUdeviceptr(0x1234)) == (R.CUDA_ERROR_INVALID_VALUE,)
    d = check(driver.cuMemAlloc(64))
    assert driver.cuMemcpyHtoD(d, np.zeros(32, np.float32), 128) == (R.CUDA_ERROR_INVALID_VALUE,)   # overruns d
    check(driver.cuMemFree(d))
    assert driver.cuMemFree(d) == (R.CUDA_ERROR_INVALID_VALUE,)
    # launches
    poke = check(driver.cuModuleGetFunction(more, b"poke"))
    assert driver.cuLaunchKernel(poke, 1, 1, 1, 2048, 1, 1, 0, 0, None, 0) == (R.CUDA_ERROR_INVALID_VALUE,)


def test_kernel_fault_is_reported_at_synchronize(context, more):
    poke = check(driver.cuModuleGetFunction(more, b"poke"))
    d = check(driver.cuMemAlloc(16))
    stream = check(driver.cuStreamCreate(0))
    index = np.array([1 << 40], np.int64)
    pointer = np.array([int(d)], np.uint64)
    args = np.array([pointer.ctypes.data, index.ctypes.data], np.uint64)
    assert driver.cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, stream, args.ctypes.data, 0) == (OK,)
    assert driver.cuStreamSynchronize(stream) == (R.CUDA_ERROR_ILLEGAL_ADDRESS,)
    # the stream works again afterwards (lapis does not keep CUDA's sticky error)
    index[0] = 2
    check(driver.cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, stream, args, 0))      # a buffer holding the pointers
    check(driver.cuStreamSynchronize(stream))
    out = np.zeros(4, np.int32)
    check(driver.cuMemcpyDtoH(out, d, 16))
    assert out[2] == 7
    check(driver.cuStreamDestroy(stream))


def test_bad_modules(context):
    assert driver.cuModuleLoadData(b"this is not a module") == (R.CUDA_ERROR_INVALID_IMAGE, None)
    assert driver.cuModuleLoadData(b"\x7fELF\x02\x01\x01" + bytes(64)) == (R.CUDA_ERROR_INVALID_IMAGE, None)
    bad = (".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry broken(.param .u64 p)\n{\n"
           "  .reg .b64 %rd<2>;\n  frobnicate.u64 %rd1, %rd0;\n  ret;\n}\n")
    assert driver.cuModuleLoadData(bad) == (R.CUDA_ERROR_INVALID_PTX, None)
    good = ptx_of(SAXPY).decode().rstrip("\0")
    module = check(driver.cuModuleLoadData(good))                     # PTX as a str also loads
    assert isinstance(check(driver.cuModuleGetFunction(module, "saxpy")), driver.CUfunction)
    check(driver.cuModuleUnload(module))


def test_lapis_code_object_loads(context):
    compiled = cuda.RawModule(code=SAXPY.decode()).get_function("saxpy").compiled
    module = check(driver.cuModuleLoadData(compiled.code_object))
    kernel = check(driver.cuModuleGetFunction(module, b"saxpy"))
    assert check(driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, kernel)) == \
        compiled.registers
    n = 300
    x, y = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    d_x, d_y, d_out = (check(driver.cuMemAlloc(x.nbytes)) for _ in range(3))
    check(driver.cuMemcpyHtoD(d_x, x, x.nbytes))
    check(driver.cuMemcpyHtoD(d_y, y, y.nbytes))
    params = ((np.float32(-2), d_x, d_y, d_out, n), (ctypes.c_float, None, None, None, ctypes.c_size_t))
    check(driver.cuLaunchKernel(kernel, 3, 1, 1, 128, 1, 1, 0, 0, params, 0))
    out = np.zeros(n, np.float32)
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    np.testing.assert_allclose(out, -2 * x + y)
    assert driver.cuModuleGetGlobal(module, b"table") == (R.CUDA_ERROR_NOT_FOUND, None, None)
    check(driver.cuModuleUnload(module))


def test_events_time_device_work(context, more):
    lookup = check(driver.cuModuleGetFunction(more, b"lookup"))
    d_out = check(driver.cuMemAlloc(1024 * 4))
    start, end = check(driver.cuEventCreate(0)), check(driver.cuEventCreate(0))
    stream = check(driver.cuStreamCreate(0))
    check(driver.cuEventRecord(start, stream))
    for _ in range(3):
        check(driver.cuLaunchKernel(lookup, 1, 1, 1, 1024, 1, 1, 0, stream, ((d_out, 1024), (None, ctypes.c_int)), 0))
    check(driver.cuEventRecord(end, stream))
    check(driver.cuEventSynchronize(end))
    assert check(driver.cuEventQuery(end)) is None
    ms = check(driver.cuEventElapsedTime(start, end))
    assert isinstance(ms, float) and ms > 0
    untimed = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    check(driver.cuEventRecord(untimed, stream))
    check(driver.cuEventSynchronize(untimed))
    assert driver.cuEventElapsedTime(start, untimed) == (R.CUDA_ERROR_INVALID_HANDLE, None)
    for e in (start, end, untimed):
        check(driver.cuEventDestroy(e))
    check(driver.cuStreamDestroy(stream))


def test_memory_host_pinned_and_memset(context):
    n = 1000
    d = check(driver.cuMemAlloc(n * 4))
    check(driver.cuMemsetD32(d, 0x3F800000, n))             # 1.0f
    pinned = check(driver.cuMemAllocHost(n * 4))
    check(driver.cuMemcpyDtoH(pinned, d, n * 4))
    view = np.ctypeslib.as_array((ctypes.c_float * n).from_address(pinned))
    np.testing.assert_array_equal(view, np.ones(n, np.float32))
    check(driver.cuMemsetD8(driver.CUdeviceptr(int(d) + 4), 0, 4))   # handles do pointer arithmetic through int()
    e = check(driver.cuMemAlloc(n * 4))
    check(driver.cuMemcpyDtoD(e, d, n * 4))
    out = np.zeros(n, np.float32)
    check(driver.cuMemcpy(out.ctypes.data, e, n * 4))
    assert out[1] == 0 and out[0] == out[2] == 1
    assert driver.cuMemsetD32(driver.CUdeviceptr(int(d) + 2), 0, 1) == (R.CUDA_ERROR_INVALID_VALUE,)   # unaligned
    free, total = check(driver.cuMemGetInfo())
    assert 0 < free <= total
    check(driver.cuMemFreeHost(pinned))
    assert driver.cuMemFreeHost(pinned) == (R.CUDA_ERROR_INVALID_VALUE,)
    for p in (d, e):
        check(driver.cuMemFree(p))


def test_contexts(context):
    assert check(driver.cuCtxGetCurrent()) == context
    device = check(driver.cuDeviceGet(0))
    primary = check(driver.cuDevicePrimaryCtxRetain(device))
    assert primary != context and int(primary) != 0
    check(driver.cuCtxPushCurrent(primary))
    assert check(driver.cuCtxGetCurrent()) == primary
    d = check(driver.cuMemAlloc(64))
    assert check(driver.cuCtxPopCurrent()) == primary
    assert check(driver.cuCtxGetCurrent()) == context
    check(driver.cuDevicePrimaryCtxRelease(device))            # frees what was allocated in it
    assert driver.cuMemFree(d) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert int(check(driver.cuCtxGetDevice())) == 0
    # a context made and destroyed
    other = check(driver.cuCtxCreate(None, 0, device))
    check(driver.cuCtxDestroy(other))
    assert driver.cuCtxSetCurrent(other) == (R.CUDA_ERROR_INVALID_CONTEXT,)
    assert check(driver.cuCtxGetCurrent()) == context


def test_not_initialized(monkeypatch):
    monkeypatch.setattr(driver._state, "initialized", False)
    assert driver.cuDeviceGet(0) == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    assert driver.cuMemAlloc(16) == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    assert driver.cuDriverGetVersion() == (OK, driver.CUDA_VERSION)       # no cuInit needed


def test_nvrtc_s_cubin_is_the_lapis_code_object_and_loads(context):
    """Compiled for a real architecture (sm_90), a program's cubin is the simulated GPU's: the lapis code object
    its PTX assembles into, which cuModuleLoadData loads and runs as a cubin."""
    err, prog = nvrtc.nvrtcCreateProgram(SAXPY, b"saxpy.cu", 0, [], [])
    opts = [b"--gpu-architecture=sm_90"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts) == (nvrtc.nvrtcResult.NVRTC_SUCCESS,)
    err, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    assert nvrtc.nvrtcGetCUBIN(prog, cubin) == (nvrtc.nvrtcResult.NVRTC_SUCCESS,)
    nvrtc.nvrtcDestroyProgram(prog)
    assert cubin.startswith(b"\x7fELF")
    module = check(driver.cuModuleLoadData(cubin))
    kernel = check(driver.cuModuleGetFunction(module, b"saxpy"))
    n = 100
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    buffers = [check(driver.cuMemAlloc(4 * n)) for _ in range(3)]
    for buffer, host in zip(buffers, (x, y), strict=False):
        check(driver.cuMemcpyHtoD(buffer, host.ctypes.data, 4 * n))
    values = [np.array([2.0], np.float32), *(np.array([int(b)], np.uint64) for b in buffers), np.array([n], np.uint64)]
    params = np.array([v.ctypes.data for v in values], np.uint64)
    check(driver.cuLaunchKernel(kernel, 1, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    out = np.empty(n, np.float32)
    check(driver.cuMemcpyDtoH(out.ctypes.data, buffers[2], 4 * n))
    assert np.array_equal(out, 2 * x + y)
    for buffer in buffers:
        check(driver.cuMemFree(buffer))
    check(driver.cuModuleUnload(module))


def test_a_kernel_that_prints_launches_through_the_driver(context, capsys):
    """printf's FIFO is a hidden argument after the kernel's own: cuLaunchKernel supplies it, as RawKernel does
    (it once read it from kernelParams, one pointer past the user's arguments)."""
    module = check(driver.cuModuleLoadData(ptx_of(b'extern "C" __global__ void hello(int n) '
                                                  b'{ printf("%d of %d\\n", threadIdx.x, n); }')))
    kernel = check(driver.cuModuleGetFunction(module, b"hello"))
    n = np.array([2], np.int32)
    params = np.array([n.ctypes.data], np.uint64)
    check(driver.cuLaunchKernel(kernel, 1, 1, 1, 2, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    assert capsys.readouterr().out == "0 of 2\n1 of 2\n"
    check(driver.cuModuleUnload(module))
