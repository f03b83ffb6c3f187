"""Layer 3: cuda-python's NVRTC binding (`cuda.bindings.nvrtc`), re-exported: NVIDIA's runtime compiler needs no
GPU, so lapis uses the real one. Its PTX goes to `lapis.cuda.bindings.driver.cuModuleLoadData`.

Two additions: `nvrtcCompileProgram` also searches the CUDA headers of the nvidia-cuda-runtime and nvidia-cuda-cccl
wheels (cuda_fp16.h, cooperative_groups.h, cuda::std, cub), as nvcc finds its own without -I and as
`lapis.cuda.RawModule` compiles; and a program compiled for a real architecture (`-arch=sm_90`) gives, through
`nvrtcGetCUBINSize`/`nvrtcGetCUBIN`, the simulated GPU's cubin: the lapis code object its PTX assembles into
(NVRTC itself is asked for the PTX of the matching virtual architecture, compute_90), which
`driver.cuModuleLoadData` loads as a real cubin is loaded.
"""

import ctypes
import functools
import re

from cuda.bindings import nvrtc as _nvrtc
from cuda.bindings.nvrtc import *  # noqa: F403 - the binding's every name
from cuda.bindings.nvrtc import nvrtcResult


def nvrtcCompileProgram(prog, numOptions, options):  # noqa: N802, N803 - cuda-python's names
    """cuda.bindings.nvrtc.nvrtcCompileProgram, with the CUDA headers' folders added as -I options, and a real
    architecture (sm_XX) asked for as its virtual one (compute_XX), whose PTX lapis assembles."""
    from lapis.cuda.raw_kernel import header_paths
    options = [re.sub(rb"\bsm_(\d+)", rb"compute_\1", bytes(o)) for o in list(options or ())[:numOptions]]
    options += [f"-I{path}".encode() for path in header_paths()]
    return _nvrtc.nvrtcCompileProgram(prog, len(options), options)


def nvrtcGetCUBINSize(prog):  # noqa: N802 - cuda-python's name
    """The size of the simulated GPU's cubin of a compiled program (its lapis code object)."""
    err, cubin = _cubin(prog)
    return err, len(cubin) if cubin is not None else None


def nvrtcGetCUBIN(prog, cubin):  # noqa: N802 - cuda-python's name
    """The simulated GPU's cubin (the lapis code object of the program's PTX), into `cubin`, a bytes buffer of
    nvrtcGetCUBINSize's size, as cuda-python fills it."""
    err, image = _cubin(prog)
    if image is None:
        return (err,)
    if len(cubin) < len(image):
        return (nvrtcResult.NVRTC_ERROR_INVALID_INPUT,)
    ctypes.memmove(cubin, image, len(image))          # cuda-python writes into the caller's bytes object
    return (nvrtcResult.NVRTC_SUCCESS,)


def _cubin(prog) -> tuple:
    from lapis.cuda.compiler import CompileError
    err, size = _nvrtc.nvrtcGetPTXSize(prog)
    if err != nvrtcResult.NVRTC_SUCCESS:
        return err, None
    ptx = b" " * size
    (err,) = _nvrtc.nvrtcGetPTX(prog, ptx)
    if err != nvrtcResult.NVRTC_SUCCESS:
        return err, None
    try:
        return nvrtcResult.NVRTC_SUCCESS, _assembled(ptx.decode().rstrip("\x00"))
    except CompileError:
        return nvrtcResult.NVRTC_ERROR_COMPILATION, None


@functools.lru_cache(maxsize=8)
def _assembled(ptx: str) -> bytes:
    """The code object of a program's PTX, kept: nvrtcGetCUBINSize and nvrtcGetCUBIN each ask for it."""
    from lapis.cuda.raw_kernel import RawModule
    return RawModule(ptx=ptx, name="program.ptx").code_object()
