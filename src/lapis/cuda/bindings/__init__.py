"""Layer 3: cuda-python's bindings over lapis, so a program written against `from cuda.bindings import driver, nvrtc`
runs after its import becomes `from lapis.cuda.bindings import driver, nvrtc`.

`driver` is CUDA's driver API (cuInit, cuCtxCreate, cuModuleLoadData, cuLaunchKernel, ...) in cuda-python's
calling convention — every function returns a tuple whose first item is a `CUresult` — over lapis's contexts,
streams, events and memory, the same ones `lapis.cuda` and its runtime API use. `nvrtc` is NVIDIA's own runtime
compiler binding (`cuda.bindings.nvrtc`, which needs no GPU), re-exported. Like cuda-python's package, this one
imports its submodules only when asked for.
"""
