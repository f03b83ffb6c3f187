"""Layer 3, `lapis.hip`: the HIP spelling of the programming interface, for AMD-profile GPUs.

One implementation with `lapis.cuda` (as HIP mirrors the CUDA runtime name for name); this
namespace lists the AMD-like devices (the mi300x profile, wavefront 64). Kernels use the
same language: `@hip.jit`, `hip.grid(1)`, `hip.shared.array(...)`. The HIP runtime API's
names (`hip.hipMalloc`, `hip.hipMemcpy`, `hip.hipLaunchKernelGGL`, ...) are generated from
the CUDA ones by one table (`lapis.cuda.runtime_api.HIPIFY_TABLE`).
"""

from lapis.cuda import (
    CompileError,
    CudaError,
    CudaSupportError,
    Device,
    DeviceNDArray,
    DevicePointer,
    InvalidHandleError,
    KernelFault,
    LaunchError,
    OutOfMemoryError,
    activemask,
    all_sync,
    any_sync,
    atomic,
    ballot_sync,
    bfloat16,
    blockDim,
    blockIdx,
    boolean,
    brev,
    cbrt,
    cg,
    clz,
    const,
    eq_sync,
    ffs,
    float16,
    float32,
    float64,
    fma,
    fp16,
    grid,
    gridDim,
    gridsize,
    int32,
    int64,
    laneid,
    lanemask_lt,
    local,
    match_all_sync,
    match_any_sync,
    mma,
    popc,
    selp,
    shared,
    shfl_down_sync,
    shfl_sync,
    shfl_up_sync,
    shfl_xor_sync,
    syncthreads,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
    syncwarp,
    threadfence,
    threadfence_block,
    threadfence_system,
    threadIdx,
    uint32,
    warpsize,
)
from lapis.cuda.api import Api, DeviceList
from lapis.cuda.raw_kernel import NvrtcError
from lapis.cuda.reduction import Reduce as _Reduce
from lapis.cuda.runtime_api import RuntimeApi
from lapis.hip import raw_kernel  # HIP C++ kernels: NVRTC with lapis's hip/hip_runtime.h, launched on these GPUs
from lapis.hip.raw_kernel import RawKernel, RawModule

HipError = CudaError
_api = Api("hip", "amd")
raw_kernel.api = _api                           # HIP C++ kernels launch on these GPUs by default
jit = _api.jit
to_device = _api.to_device
device_array = _api.device_array
device_array_like = _api.device_array_like
is_cuda_array, as_cuda_array = _api.is_cuda_array, _api.as_cuda_array
from_cuda_array_interface = _api.from_cuda_array_interface
synchronize = _api.synchronize
select_device = _api.select_device
get_current_device = _api.get_current_device
is_available = _api.is_available
device_count = _api.device_count
current_context = _api.current_context
default_stream = _api.default_stream
stream = _api.stream
event = _api.event
event_elapsed_time = _api.event_elapsed_time
pinned_array = _api.pinned_array
mapped_array, managed_array = _api.mapped_array, _api.managed_array
pinned_array_like, mapped_array_like = _api.pinned_array_like, _api.mapped_array_like
list_devices, detect = _api.list_devices, _api.detect
gpus = DeviceList(_api)
memory_allocated, max_memory_allocated = _api.memory_allocated, _api.max_memory_allocated
memory_reserved, memory_stats, memory_summary = _api.memory_reserved, _api.memory_stats, _api.memory_summary
empty_cache = _api.empty_cache
current_device, set_device, get_device_name = _api.current_device, _api.set_device, _api.get_device_name
Stream, Event, current_stream = _api.Stream, _api.Event, _api.current_stream   # torch.cuda's constructors
get_device_properties = _api.get_device_properties


class Reduce(_Reduce):
    __doc__ = _Reduce.__doc__
    api = _api


reduce = Reduce
_runtime_api = RuntimeApi(_api, "hip")
globals().update(_runtime_api.namespace())      # hipMalloc, hipSuccess, ...: the CUDA names through one table

__all__ = [
    "activemask", "brev", "cbrt", "clz", "eq_sync", "ffs", "fma", "lanemask_lt", "match_all_sync", "match_any_sync",
    "popc", "selp", "syncthreads_and", "syncthreads_count", "syncthreads_or",
    "all_sync", "any_sync", "atomic", "ballot_sync", "cg", "mma", "bfloat16", "const", "float16", "shfl_down_sync",
    "shfl_sync",
    "shfl_up_sync", "shfl_xor_sync", "syncwarp", "threadfence", "threadfence_block", "threadfence_system",
    "CompileError", "CudaError", "DeviceNDArray", "HipError", "KernelFault", "LaunchError", "blockDim", "blockIdx",
    "boolean", "device_array", "device_array_like", "current_context", "default_stream", "device_count",
    "float32", "float64", "get_current_device", "grid", "gridDim", "gridsize", "int32", "int64", "is_available",
    "jit", "laneid", "local", "select_device", "shared", "synchronize", "syncthreads", "threadIdx", "uint32",
    "warpsize",
    "CudaSupportError", "Device", "DevicePointer", "Event", "InvalidHandleError", "OutOfMemoryError", "Stream",
    "event", "event_elapsed_time", "pinned_array", "mapped_array", "managed_array", "pinned_array_like",
    "mapped_array_like",
    "list_devices", "detect", "gpus", "stream", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "memory_stats", "memory_summary", "empty_cache", "current_device", "set_device",
    "current_stream", "get_device_name", "get_device_properties", "Reduce", "reduce", "fp16",
    "NvrtcError", "RawKernel", "RawModule", "raw_kernel",
    *_runtime_api.namespace(),
    "is_cuda_array", "as_cuda_array", "from_cuda_array_interface",
]
