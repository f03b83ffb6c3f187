"""Layer 3: CUDA's driver API in cuda-python's spelling (`cuda.bindings.driver`), over lapis's contexts, streams,
events, memory and AQL queues (the same ones `lapis.cuda` and its runtime API use).

    from lapis.cuda.bindings import driver, nvrtc      # was: from cuda.bindings import driver, nvrtc

    err, = driver.cuInit(0)
    err, dev = driver.cuDeviceGet(0)
    err, ctx = driver.cuCtxCreate(None, 0, dev)
    err, module = driver.cuModuleLoadData(ptx)           # PTX text, as NVRTC writes it
    err, kernel = driver.cuModuleGetFunction(module, b"saxpy")
    err, = driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream, args.ctypes.data, 0)

Every function returns a tuple whose first item is a `CUresult` (cuda-python's own enum, as are every other enum
here: `CUdevice_attribute`, `CUfunction_attribute`, ...), followed by its results, or None for each when it failed.
Nothing raises for a driver error; an argument of a type cuda-python refuses raises TypeError, as there. The
handles (CUdevice, CUcontext, CUdeviceptr, CUmodule, CUfunction, CUstream, CUevent) are numbers, as cuda-python's.

What lapis models: PTX modules (assembled by lapis's PTX assembler when loaded: a module lapis cannot assemble is
CUDA_ERROR_INVALID_PTX; lapis's own code objects load too, while a cubin or fatbin, which holds SASS, is
CUDA_ERROR_INVALID_IMAGE); every CUcontext of a
device shares that device's one lapis context (so memory from cuMemAlloc is the runtime API's and `lapis.cuda`'s
too), while cuCtxDestroy frees what was made in it; copies are synchronous, so an Async copy has finished when it
returns; a kernel's fault is reported at the next call that waits for its stream (CUDA_ERROR_ILLEGAL_ADDRESS for
a bad address), but does not poison the context as CUDA's sticky errors do.
"""

from cuda.bindings import driver as _real

from lapis.cuda import _api
from lapis.cuda.bindings._core import DriverError, R, _entry, _state
from lapis.cuda.bindings._device import (  # noqa: F401 - the driver's functions
    cuCtxCreate,
    cuCtxDestroy,
    cuCtxGetCurrent,
    cuCtxGetDevice,
    cuCtxPopCurrent,
    cuCtxPushCurrent,
    cuCtxSetCurrent,
    cuCtxSynchronize,
    cuDeviceComputeCapability,
    cuDeviceGet,
    cuDeviceGetAttribute,
    cuDeviceGetCount,
    cuDeviceGetName,
    cuDevicePrimaryCtxRelease,
    cuDevicePrimaryCtxReset,
    cuDevicePrimaryCtxRetain,
    cuDeviceTotalMem,
    cuEventCreate,
    cuEventDestroy,
    cuEventElapsedTime,
    cuEventQuery,
    cuEventRecord,
    cuEventSynchronize,
    cuMemAlloc,
    cuMemAllocHost,
    cuMemcpy,
    cuMemcpyAsync,
    cuMemcpyDtoD,
    cuMemcpyDtoDAsync,
    cuMemcpyDtoH,
    cuMemcpyDtoHAsync,
    cuMemcpyHtoD,
    cuMemcpyHtoDAsync,
    cuMemFree,
    cuMemFreeHost,
    cuMemGetInfo,
    cuMemHostAlloc,
    cuMemsetD8,
    cuMemsetD8Async,
    cuMemsetD16,
    cuMemsetD16Async,
    cuMemsetD32,
    cuMemsetD32Async,
    cuStreamCreate,
    cuStreamDestroy,
    cuStreamQuery,
    cuStreamSynchronize,
    cuStreamWaitEvent,
)
from lapis.cuda.bindings._handles import (  # noqa: F401 - the handle types are the module's names
    CUcontext,
    CUdevice,
    CUdevice_v1,
    CUdeviceptr,
    CUdeviceptr_v2,
    CUevent,
    CUfunction,
    CUkernel,
    CUmodule,
    CUstream,
)
from lapis.cuda.bindings._module import (  # noqa: F401 - the driver's functions
    cuFuncGetAttribute,
    cuFuncGetName,
    cuFuncSetAttribute,
    cuLaunchKernel,
    cuModuleGetFunction,
    cuModuleGetGlobal,
    cuModuleLoad,
    cuModuleLoadData,
    cuModuleLoadDataEx,
    cuModuleUnload,
    cuOccupancyMaxActiveBlocksPerMultiprocessor,
    cuOccupancyMaxPotentialBlockSize,
)


def _is_enum(value) -> bool:
    return isinstance(value, type) and any(c.__name__ == "FastEnum" for c in value.__mro__[1:])


# cuda-python's enums (CUresult, CUdevice_attribute, ...) and constants (CU_STREAM_LEGACY, ...), themselves
globals().update({name: value for name, value in vars(_real).items() if not name.startswith("_") and
                  (_is_enum(value) or name.isupper() and isinstance(value, int))})
CUresult, CUdevice_attribute = _real.CUresult, _real.CUdevice_attribute
CUfunction_attribute = _real.CUfunction_attribute
CUDA_VERSION = _real.CUDA_VERSION

# cuGetErrorString's words for the codes lapis returns (the driver's own); any other code's are made from its name.
_MESSAGES = {
    R.CUDA_SUCCESS: "no error", R.CUDA_ERROR_INVALID_VALUE: "invalid argument",
    R.CUDA_ERROR_OUT_OF_MEMORY: "out of memory", R.CUDA_ERROR_NOT_INITIALIZED: "initialization error",
    R.CUDA_ERROR_DEINITIALIZED: "driver shutting down", R.CUDA_ERROR_NO_DEVICE: "no CUDA-capable device is detected",
    R.CUDA_ERROR_INVALID_DEVICE: "invalid device ordinal", R.CUDA_ERROR_INVALID_IMAGE: "device kernel image is invalid",
    R.CUDA_ERROR_INVALID_CONTEXT: "invalid device context",
    R.CUDA_ERROR_NO_BINARY_FOR_GPU: "no kernel image is available for execution on the device",
    R.CUDA_ERROR_INVALID_PTX: "a PTX JIT compilation failed",
    R.CUDA_ERROR_FILE_NOT_FOUND: "file not found", R.CUDA_ERROR_INVALID_HANDLE: "invalid resource handle",
    R.CUDA_ERROR_NOT_FOUND: "named symbol not found", R.CUDA_ERROR_NOT_READY: "device not ready",
    R.CUDA_ERROR_ILLEGAL_ADDRESS: "an illegal memory access was encountered",
    R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: "too many resources requested for launch",
    R.CUDA_ERROR_LAUNCH_TIMEOUT: "the launch timed out and was terminated",
    R.CUDA_ERROR_ASSERT: "device-side assert triggered", R.CUDA_ERROR_LAUNCH_FAILED: "unspecified launch failure",
    R.CUDA_ERROR_NOT_SUPPORTED: "operation not supported", R.CUDA_ERROR_UNKNOWN: "unknown error",
}


# -- initialisation, versions, errors -----------------------------------------------------------------
@_entry(init=False)
def cuInit(Flags):  # noqa: N802, N803 - cuda-python's names
    if Flags != 0:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, "cuInit's Flags must be 0")
    if _api.device_count() == 0:
        raise DriverError(R.CUDA_ERROR_NO_DEVICE, "no NVIDIA-profile GPU is simulated (LAPIS_GPUS)")
    _state.initialized = True


@_entry(1, init=False)
def cuDriverGetVersion():  # noqa: N802
    return CUDA_VERSION


def cuGetErrorName(error):  # noqa: N802
    try:
        code = CUresult(int(error))
    except ValueError:
        return R.CUDA_ERROR_INVALID_VALUE, None
    return R.CUDA_SUCCESS, code.name.encode()


def cuGetErrorString(error):  # noqa: N802
    try:
        code = CUresult(int(error))
    except ValueError:
        return R.CUDA_ERROR_INVALID_VALUE, None
    text = _MESSAGES.get(code) or code.name.removeprefix("CUDA_ERROR_").replace("_", " ").lower()
    return R.CUDA_SUCCESS, text.encode()


__all__ = [name for name in globals() if name.startswith(("cu", "CU"))] + ["DriverError"]
