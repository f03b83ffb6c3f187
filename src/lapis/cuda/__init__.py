"""Layer 3, `lapis.cuda`: the programming interface, numba.cuda's API and the CUDA runtime's model.

Owns the kernel language (these intrinsics), its compiler (`lapis.cuda.compiler`), and the
host API: devices and contexts, device arrays, launches. It reaches the GPU only through
the runtime (`lapis.runtime`). `lapis.hip` is the same implementation for AMD-profile GPUs.

    from lapis import cuda

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    d_out = cuda.device_array_like(a)
    add[(n + 255) // 256, 256](cuda.to_device(a), cuda.to_device(b), d_out)
    out = d_out.copy_to_host()

The CUDA runtime API's names are here too (`cuda.cudaMalloc`, `cuda.cudaMemcpy`, ...), in
cuda-python's convention: `err, ptr = cuda.cudaMalloc(nbytes)` (see `runtime_api`).
"""

import types

import ml_dtypes
import numpy as np

from lapis.cuda import (
    fp16,  # numba's cuda.fp16 namespace (half-precision intrinsics)
    random,  # numba's cuda.random (xoroshiro128+ generators)
    raw_kernel,  # CuPy's raw kernels: CUDA C++ through NVRTC and lapis's PTX assembler
    ufunc,  # numba's @vectorize(target='cuda')
)
from lapis.cuda.api import Api, DeviceList
from lapis.cuda.compiler import CompileError
from lapis.cuda.compiler.intrinsics import (
    all_sync,
    any_sync,
    atomic,
    ballot_sync,
    blockDim,
    blockIdx,
    brev,
    cg,
    clz,
    const,
    ffs,
    fma,
    grid,
    gridDim,
    gridsize,
    laneid,
    local,
    mma,
    shared,
    shfl_down_sync,
    shfl_sync,
    shfl_up_sync,
    shfl_xor_sync,
    syncthreads,
    syncwarp,
    threadfence,
    threadfence_block,
    threadfence_system,
    threadIdx,
    warpsize,
)
from lapis.cuda.context import Device
from lapis.cuda.devicearray import DeviceNDArray
from lapis.cuda.dispatcher import PerformanceWarning
from lapis.cuda.errors import (
    CudaError,
    CudaSupportError,
    InvalidHandleError,
    KernelFault,
    LaunchError,
    LaunchOutOfResources,
    OutOfMemoryError,
)
from lapis.cuda.libdevice import (  # numba.cuda's bit and warp functions, built from instructions in libdevice
    activemask,
    cbrt,
    eq_sync,
    lanemask_lt,
    match_all_sync,
    match_any_sync,
    popc,
    selp,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
)
from lapis.cuda.reduction import Reduce as _Reduce
from lapis.cuda.runtime_api import DevicePointer, RuntimeApi

_api = Api("cuda", "nvidia")
random.api = _api                                # cuda.random's states go to this API's devices
ufunc.api = _api                                 # and vectorize's kernels run on them
raw_kernel.api = _api                            # and CUDA C++ kernels
RawKernel, RawModule, NvrtcError = raw_kernel.RawKernel, raw_kernel.RawModule, raw_kernel.NvrtcError
vectorize = ufunc.vectorize
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
detect = _api.detect
device_count = _api.device_count
current_context = _api.current_context
default_stream = _api.default_stream
stream = _api.stream
event = _api.event
event_elapsed_time = _api.event_elapsed_time
pinned_array, pinned = _api.pinned_array, _api.pinned
mapped_array, managed_array = _api.mapped_array, _api.managed_array
pinned_array_like, mapped_array_like = _api.pinned_array_like, _api.mapped_array_like
list_devices = _api.list_devices
gpus = DeviceList(_api)                         # numba's cuda.gpus: len(cuda.gpus), with cuda.gpus[1]: ...
memory_allocated, max_memory_allocated = _api.memory_allocated, _api.max_memory_allocated
memory_reserved, memory_stats, memory_summary = _api.memory_reserved, _api.memory_stats, _api.memory_summary
empty_cache = _api.empty_cache
current_device, set_device, get_device_name = _api.current_device, _api.set_device, _api.get_device_name
get_device_properties = _api.get_device_properties
Stream, Event, current_stream = _api.Stream, _api.Event, _api.current_stream   # torch.cuda's constructors


class Reduce(_Reduce):
    __doc__ = _Reduce.__doc__
    api = _api


reduce = Reduce                                 # numba's spelling: @cuda.reduce, cuda.reduce(lambda a, b: a + b)
_runtime_api = RuntimeApi(_api, "cuda")
globals().update(_runtime_api.namespace())      # cudaMalloc, cudaSuccess, ...: names from runtime_api's table

# torch.cuda's seeding. The generator device tensors are drawn from is the framework's (Layer 5, which draws them
# on the host): it registers itself here, so this layer seeds it without importing it.
_seed_hooks: list = []


def manual_seed(seed: int) -> None:
    """torch.cuda.manual_seed: seed the generator random device tensors come from (the framework's, which its
    cpu tensors share: lapis draws both on the host)."""
    for hook in _seed_hooks:
        hook(int(seed))


manual_seed_all = manual_seed


# torch.cuda.amp's names (GradScaler, autocast) are the framework's (Layer 5, `lapis.amp`), which fills this
# namespace in when it is imported, as it fills in the seed hooks.
amp = types.SimpleNamespace()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 runs on the device: it does on every profile (the matrix unit takes it)."""
    return is_available()


int32, int64, uint32 = np.int32, np.int64, np.uint32
float16, float32, float64 = np.float16, np.float32, np.float64
bfloat16 = ml_dtypes.bfloat16
boolean = np.bool_

__all__ = [
    "RawKernel", "RawModule", "NvrtcError",
    "all_sync", "any_sync", "atomic", "ballot_sync", "cg", "mma", "bfloat16", "const", "float16", "shfl_down_sync",
    "shfl_sync",
    "shfl_up_sync", "shfl_xor_sync", "syncwarp", "threadfence", "threadfence_block", "threadfence_system",
    "Api", "CompileError", "CudaError", "CudaSupportError", "Device", "DeviceNDArray", "KernelFault", "LaunchError",
    "LaunchOutOfResources", "Stream", "blockDim", "blockIdx", "boolean", "device_array", "device_array_like",
    "current_context", "default_stream", "device_count", "detect", "float32", "float64", "get_current_device", "grid",
    "gridDim", "gridsize", "int32", "int64", "is_available", "jit", "laneid", "local", "select_device", "shared",
    "synchronize", "syncthreads", "threadIdx", "to_device", "uint32", "warpsize",
    "DevicePointer", "Event", "InvalidHandleError", "OutOfMemoryError", "event", "event_elapsed_time",
    "pinned_array", "mapped_array", "managed_array",
    "pinned_array_like", "mapped_array_like", "list_devices", "gpus", "selp",
    "pinned", "stream", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "memory_stats", "memory_summary", "empty_cache", "current_device", "set_device",
    "current_stream",
    "get_device_name", "get_device_properties", "PerformanceWarning", "manual_seed", "manual_seed_all",
    "is_bf16_supported", "amp", "popc", "brev", "clz", "ffs", "fma", "cbrt", "activemask", "lanemask_lt",
    "eq_sync", "match_any_sync", "match_all_sync", "syncthreads_count", "syncthreads_and",
    "syncthreads_or", "Reduce", "reduce", "fp16", "random", "vectorize", *_runtime_api.namespace(),
    "is_cuda_array", "as_cuda_array", "from_cuda_array_interface",
]
