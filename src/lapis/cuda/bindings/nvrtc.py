"""Layer 3: cuda-python's NVRTC binding (`cuda.bindings.nvrtc`), re-exported: NVIDIA's runtime compiler needs no
GPU, so lapis uses the real one. Its PTX goes to `lapis.cuda.bindings.driver.cuModuleLoadData`.

One addition: `nvrtcCompileProgram` also searches the CUDA headers of the nvidia-cuda-runtime and nvidia-cuda-cccl
wheels (cuda_fp16.h, cooperative_groups.h, cuda::std, cub), as nvcc finds its own without -I and as
`lapis.cuda.RawModule` compiles.
"""

from cuda.bindings import nvrtc as _nvrtc
from cuda.bindings.nvrtc import *  # noqa: F403 - the binding's every name


def nvrtcCompileProgram(prog, numOptions, options):  # noqa: N802, N803 - cuda-python's names
    """cuda.bindings.nvrtc.nvrtcCompileProgram, with the CUDA headers' folders added as -I options."""
    from lapis.cuda.raw_kernel import header_paths
    options = list(options or ())[:numOptions]
    options += [f"-I{path}".encode() for path in header_paths()]
    return _nvrtc.nvrtcCompileProgram(prog, len(options), options)
