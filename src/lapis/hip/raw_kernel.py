"""Layer 3: HIP C++ kernels, through NVRTC and lapis's PTX assembler (`lapis.hip.RawKernel`, `RawModule`).

HIP C++ is compiled as CUDA C++ is (`lapis.cuda.raw_kernel`), with lapis's own `hip/hip_runtime.h`
(`include/hip/` beside this file) on the include path: it maps HIP's names onto CUDA's, as HIP's NVIDIA
platform header does (hipThreadIdx_x, HIP_DYNAMIC_SHARED, __shfl_down, ...), and makes `warpSize` the
wave size of the GPU the kernels are for, a compile-time constant as hipcc makes it per --offload-arch:

    kernel = hip.RawKernel(r'''
    #include <hip/hip_runtime.h>
    extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
        int i = hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
        if (i < n) c[i] = a[i] + b[i];
    }''', "vadd")
    kernel((blocks,), (threads,), (d_a, d_b, d_c, np.int32(n)))

A module is compiled for one wave size: by default its API's current device's (lapis.hip: mi300x, 64);
`api=lapis.cuda` compiles and launches it for the NVIDIA-profile GPUs (32), and `warp_size=` fixes it.
A launch on a device of another wave size is refused, since the kernel's warpSize arithmetic would be wrong.
"""

import os

from lapis.cuda import raw_kernel as _cuda
from lapis.cuda.errors import LaunchError

api = None              # lapis.hip's programming interface, the default one (lapis.hip sets it)
INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")   # hip/hip_runtime.h, hip/hip_fp16.h


def include_path() -> str:
    """The folder holding lapis's hip/hip_runtime.h (give it to NVRTC as -I to compile HIP C++ by hand)."""
    return INCLUDE


def hip_options(warp_size: int) -> tuple[str, ...]:
    """The NVRTC options that compile HIP C++ for a GPU whose wave is `warp_size` lanes."""
    if warp_size not in (32, 64):
        raise ValueError(f"a wave of {warp_size} lanes: lapis's GPUs have 32 (h200) or 64 (mi300x)")
    return (f"-I{INCLUDE}", f"-D__LAPIS_WARP_SIZE__={warp_size}")


def _resolve_api(which):
    """The Api object of `which`: None (lapis.hip's), an Api, or the module lapis.cuda / lapis.hip."""
    return api if which is None else getattr(which, "_api", which)


class RawModule(_cuda.RawModule):
    """CuPy's RawModule for HIP C++ (`code`) or PTX (`ptx`): every kernel compiled once, for one wave size,
    launched through `api` (lapis.hip's by default)."""

    def __init__(self, code: str | None = None, *, options: tuple = (), name_expressions=(), ptx: str | None = None,
                 name: str = "kernel.hip", warp_size: int | None = None, api=None):
        self.api = _resolve_api(api)
        if warp_size is None and code is not None:
            warp_size = self.api.get_current_device().WARP_SIZE
        self.warp_size = warp_size            # None: PTX given, launched on any device
        extra = hip_options(warp_size) if code is not None else ()
        super().__init__(code, options=(*extra, *tuple(options)), name_expressions=name_expressions, ptx=ptx,
                         name=name)

    def launch_context(self, args: tuple, stream):
        """The context on this module's API, refused where the device's wave is not the one compiled in."""
        context = self.api.context_for(args, stream)
        wave = context.device.WARP_SIZE
        if self.warp_size is not None and wave != self.warp_size:
            raise LaunchError(f"this module was compiled for a {self.warp_size}-lane wave (warpSize "
                              f"{self.warp_size}), but {context.device} ({context.device.profile}) runs {wave}-lane "
                              f"waves; compile it for that device (RawModule(..., warp_size={wave}) or api= the "
                              "device's API)")
        return context


class RawKernel(_cuda.RawKernel):
    """CuPy's RawKernel for HIP C++: the `__global__` function `name` of `code`, called as
    `kernel(grid, block, args, shared_mem=0, stream=None)` (hipModuleLaunchKernel's grid, block, arguments,
    dynamic shared bytes and stream)."""

    def __init__(self, code: str | None, name: str, options: tuple = (), *, module: RawModule | None = None,
                 warp_size: int | None = None, api=None):
        if module is None:
            module = RawModule(code, options=options, name_expressions=(name,), warp_size=warp_size, api=api)
        super().__init__(None, name, module=module)
