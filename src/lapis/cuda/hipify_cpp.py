"""Layer 3: hipify for CUDA C++ source (`.cu`, `.cuh`, ...): rewrite its CUDA spellings into HIP's, as hipify-perl does.

What it rewrites, never inside comments, string or character literals:

- includes: `<cuda_runtime.h>`, `<cuda.h>`, `<cuda_runtime_api.h>` -> `<hip/hip_runtime.h>`;
  `<cuda_fp16.h>` -> `<hip/hip_fp16.h>`; `<cooperative_groups.h>` -> `<hip/hip_cooperative_groups.h>`;
  `<curand_kernel.h>` -> `<hiprand/hiprand_kernel.h>`, and so on (`INCLUDES`);
- the runtime API: every name in `runtime_api.HIPIFY_TABLE` (cudaMalloc -> hipMalloc,
  cudaMemcpyHostToDevice -> hipMemcpyHostToDevice, cudaError_t -> hipError_t, ...) and the further
  C++ names in `CPP_NAMES` (cudaMallocManaged, cudaStreamCreateWithFlags, cudaDevAttr..., __CUDACC__);
- kernel launches: `kernel<<<grid, block, shared, stream>>>(args)` ->
  `hipLaunchKernelGGL(kernel, dim3(grid), dim3(block), shared, stream, args)` (shared and stream 0 when
  left out; a template instance's name goes in `HIP_KERNEL_NAME(...)`).

Any other identifier starting `cuda` followed by a capital is left as it is, with a warning (hipify-perl
reports the names it cannot convert the same way). Device code needs no rewriting: `threadIdx`,
`__syncthreads`, `__shfl_down_sync`, `atomicAdd` and `extern __shared__` are HIP's spellings too.
"""

import re
from collections import Counter

from lapis.cuda.hipify_result import Result
from lapis.cuda.runtime_api import HIPIFY_TABLE

SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hxx", ".inl")   # read as C/C++ source

# hipify-perl's kinds of reference, in its order (the ones this rewriter can count)
KINDS = ["error", "init", "version", "device", "context", "module", "memory", "addressing", "stream", "event",
         "execution", "occupancy", "thread", "complex", "library", "device_library", "device_function", "include",
         "include_cuda_main_header", "type", "literal", "numeric_literal", "define", "extern_shared",
         "kernel_launch"]

# header -> (HIP header, kind)
INCLUDES = {
    "cuda_runtime.h": ("hip/hip_runtime.h", "include_cuda_main_header"),
    "cuda.h": ("hip/hip_runtime.h", "include_cuda_main_header"),
    "cuda_runtime_api.h": ("hip/hip_runtime_api.h", "include"),
    "device_launch_parameters.h": ("hip/hip_runtime.h", "include"),
    "cuda_fp16.h": ("hip/hip_fp16.h", "include"),
    "cuda_bf16.h": ("hip/hip_bf16.h", "include"),
    "cooperative_groups.h": ("hip/hip_cooperative_groups.h", "include"),
    "curand.h": ("hiprand/hiprand.h", "include"),
    "curand_kernel.h": ("hiprand/hiprand_kernel.h", "include"),
    "cublas_v2.h": ("hipblas/hipblas.h", "include"),
    "cublas.h": ("hipblas/hipblas.h", "include"),
    "cub/cub.cuh": ("hipcub/hipcub.hpp", "include"),
}

# C++ names beyond the runtime API lapis implements (HIPIFY_TABLE): CUDA name -> (HIP name, kind)
CPP_NAMES = {
    **{name: ("hip" + name[4:], "memory") for name in [
        "cudaMallocManaged", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaHostRegister",
        "cudaHostUnregister", "cudaHostGetDevicePointer", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync",
        "cudaMemcpyPeer", "cudaMemcpyPeerAsync", "cudaMallocPitch", "cudaMallocAsync", "cudaFreeAsync",
        "cudaMemPrefetchAsync", "cudaMemAdvise", "cudaHostAllocDefault", "cudaHostAllocMapped",
        "cudaHostAllocPortable", "cudaMemAttachGlobal", "cudaGetSymbolAddress"]},
    **{name: ("hip" + name[4:], "stream") for name in [
        "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamNonBlocking", "cudaStreamDefault",
        "cudaStreamAddCallback", "cudaStreamPerThread", "cudaStreamLegacy"]},
    **{name: ("hip" + name[4:], "event") for name in [
        "cudaEventCreateWithFlags", "cudaEventDefault", "cudaEventBlockingSync", "cudaEventDisableTiming"]},
    **{name: ("hip" + name[4:], "device") for name in [
        "cudaDeviceReset", "cudaDeviceGetAttribute", "cudaDeviceSetCacheConfig", "cudaDeviceCanAccessPeer",
        "cudaDeviceEnablePeerAccess", "cudaDeviceDisablePeerAccess", "cudaSetDeviceFlags", "cudaChooseDevice",
        "cudaDeviceGetLimit", "cudaDeviceSetLimit"]},
    **{name: ("hip" + name[4:], "execution") for name in [
        "cudaLaunchCooperativeKernel", "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cudaFuncSetCacheConfig",
        "cudaFuncAttributes", "cudaFuncAttributeMaxDynamicSharedMemorySize", "cudaFuncCachePreferShared",
        "cudaFuncCachePreferL1", "cudaFuncCachePreferNone"]},
    **{name: ("hip" + name[4:], "occupancy") for name in [
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxPotentialBlockSize"]},
    # error codes the runtime API's table (HIPIFY_TABLE) does not have; its own are counted as it counts them
    **{name: ("hip" + name[4:], "numeric_literal") for name in [
        "cudaErrorInvalidDevicePointer", "cudaErrorNotSupported", "cudaErrorInvalidSymbol"]},
    **{name: ("hip" + name[4:], "version") for name in ["cudaDriverGetVersion", "cudaRuntimeGetVersion"]},
    "cudaThreadSynchronize": ("hipDeviceSynchronize", "thread"),
    **{name: ("hip" + name[4:], "type") for name in [
        "cudaPointerAttributes", "cudaFuncCache", "cudaLimit", "cudaStreamCallback_t", "cudaDeviceAttr",
        "cudaMemoryType", "cudaMemoryTypeHost", "cudaMemoryTypeDevice", "cudaMemoryTypeManaged"]},
    **{f"cudaDevAttr{a}": (f"hipDeviceAttribute{a}", "numeric_literal") for a in [
        "MaxThreadsPerBlock", "MaxBlockDimX", "MaxBlockDimY", "MaxBlockDimZ", "MaxGridDimX", "MaxGridDimY",
        "MaxGridDimZ", "MaxSharedMemoryPerBlock", "WarpSize", "MultiProcessorCount", "ClockRate",
        "MemoryClockRate", "ComputeCapabilityMajor", "ComputeCapabilityMinor", "L2CacheSize",
        "MaxThreadsPerMultiProcessor", "MaxRegistersPerBlock", "CooperativeLaunch", "ConcurrentManagedAccess"]},
    "__CUDACC__": ("__HIPCC__", "define"),
    "__CUDA_ARCH__": ("__HIP_DEVICE_COMPILE__", "define"),
    "CUDART_VERSION": ("HIP_VERSION", "define"),
    "curandState": ("hiprandState", "device_library"),
    "curandState_t": ("hiprandState_t", "device_library"),
    "curand_init": ("hiprand_init", "device_library"),
    "curand_uniform": ("hiprand_uniform", "device_library"),
    "curand_normal": ("hiprand_normal", "device_library"),
    "curand": ("hiprand", "device_library"),
}
NAMES = {**{name: entry for name, entry in HIPIFY_TABLE.items() if name != "CudaError"}, **CPP_NAMES}

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_INCLUDE = re.compile(r"#\s*include\s*([<\"])([^>\"\n]+)[>\"]")


def is_cpp(filename: str) -> bool:
    """Whether `filename` is read as C/C++ source (by its suffix)."""
    return filename.lower().endswith(SUFFIXES)


def _mask(source: str) -> str:
    """`source` with every comment and string or character literal blanked (newlines kept), so that searches
    over it find only code, at the same offsets as in the source. An include's header name stays."""
    out, i, n = list(source), 0, len(source)

    def blank(start, end):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c == "#":
            match = _INCLUDE.match(source, i)
            i = match.end() if match else i + 1
        elif c == "R" and source.startswith('R"', i) and (i == 0 or not (source[i - 1].isalnum() or
                                                                        source[i - 1] == "_")):
            delimiter = source[i + 2:source.find("(", i + 2)]
            end = source.find(f"){delimiter}\"", i + 2)
            end = n if end < 0 else end + len(delimiter) + 2
            blank(i, end)
            i = end
        elif c == '"' or c == "'" and not (i > 0 and source[i - 1].isalnum()):      # 1'000: a digit separator
            k = i + 1
            while k < n and source[k] != c and source[k] != "\n":
                k += 2 if source[k] == "\\" else 1
            blank(i, min(k + 1, n))
            i = k + 1
        else:
            i += 1
    return "".join(out)


def _closing(masked: str, start: int, opening: str, closing: str) -> int:
    """The index of the bracket closing the one at `start`, counting nested ones; -1 when there is none."""
    depth = 0
    for k in range(start, len(masked)):
        if masked[k] == opening:
            depth += 1
        elif masked[k] == closing:
            depth -= 1
            if depth == 0:
                return k
    return -1


def _split(masked: str, start: int, end: int) -> list[tuple[int, int]]:
    """The spans of the top-level comma-separated parts of masked[start:end]."""
    parts, depth, first = [], 0, start
    for k in range(start, end):
        c = masked[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((first, k))
            first = k + 1
    parts.append((first, end))
    return parts


def _kernel_name(masked: str, end: int) -> int:
    """Where the kernel expression ending just before `end` (a name, `ns::name`, `name<T, 4>`) starts."""
    k = end
    if k > 0 and masked[k - 1] == ">":          # a template instance: back over its balanced <...>
        depth = 0
        while k > 0:
            k -= 1
            depth += {">": 1, "<": -1}.get(masked[k], 0)
            if depth == 0:
                break
    while k > 0 and (masked[k - 1].isalnum() or masked[k - 1] in "_:"):
        k -= 1
    return k


def _dim3(expression: str) -> str:
    """`dim3(expression)`, unless it is one dim3(...) already."""
    if expression.startswith("dim3(") and _closing(_mask(expression), 4, "(", ")") == len(expression) - 1:
        return expression
    return f"dim3({expression})"


class _Rewriter:
    def __init__(self, source: str, filename: str):
        self.source, self.filename = source, filename
        self.masked = _mask(source)
        self.edits: list[tuple[int, int, str]] = []         # (start, end, text)
        self.counts: Counter = Counter()
        self.warnings: list[str] = []

    def line(self, offset: int) -> int:
        return self.source.count("\n", 0, offset) + 1

    def warn(self, offset: int, message: str) -> None:
        self.warnings.append(f"{self.filename}:{self.line(offset)}: {message}")

    def rewrite(self) -> Result:
        self.launches()
        self.includes()
        self.names()
        text = self.source
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return Result(text, self.counts, self.warnings, KINDS)

    def includes(self) -> None:
        for match in _INCLUDE.finditer(self.masked):
            header = match.group(2).strip()
            if header in INCLUDES:
                new, kind = INCLUDES[header]
                self.edits.append((match.start(2), match.end(2), new))
                self.counts[kind] += 1

    def names(self) -> None:
        includes = [(m.start(2), m.end(2)) for m in _INCLUDE.finditer(self.masked)]
        for match in _IDENTIFIER.finditer(self.masked):
            start, name = match.start(), match.group()
            if any(a <= start < b for a, b in includes):
                continue
            if name in NAMES:
                new, kind = NAMES[name]
                self.edits.append((start, match.end(), new))
                self.counts[kind] += 1
            elif re.match(r"cuda[A-Z]", name):
                self.warn(start, f"{name} has no HIP name known to lapis hipify; left as it is")

    def launches(self) -> list[tuple[int, int]]:
        """Rewrite every `kernel<<<...>>>(args)`; the spans of the rewritten launches."""
        masked, spans = self.masked, []
        for match in re.finditer(r"<<<", masked):
            open_ = match.start()
            close = masked.find(">>>", open_ + 3)
            if close < 0:
                self.warn(open_, "a kernel launch <<< without >>>; left as it is")
                continue
            name_end = open_
            while name_end > 0 and masked[name_end - 1].isspace():
                name_end -= 1
            name_start = _kernel_name(masked, name_end)
            paren = close + 3
            while paren < len(masked) and masked[paren].isspace():
                paren += 1
            end = _closing(masked, paren, "(", ")") if paren < len(masked) and masked[paren] == "(" else -1
            if name_start == name_end or end < 0:
                self.warn(open_, "a kernel launch it cannot read (kernel<<<grid, block>>>(args) expected); left "
                          "as it is")
                continue
            name = self.source[name_start:name_end].strip()
            if "<" in name:
                name = f"HIP_KERNEL_NAME({name})"
            config = [self.source[a:b].strip() for a, b in _split(masked, open_ + 3, close)]
            if not 2 <= len(config) <= 4:
                self.warn(open_, f"a kernel launch with {len(config)} configuration values (2 to 4: grid, block, "
                          "shared bytes, stream); left as it is")
                continue
            grid, block, shared, stream = (*config, "0", "0")[:4]
            args = self.source[paren + 1:end].strip()
            text = f"hipLaunchKernelGGL({name}, {_dim3(grid)}, {_dim3(block)}, {shared}, {stream}" + \
                   (f", {args})" if args else ")")
            # names inside the launch are rewritten with it (the configuration's cudaStream_t, say)
            text = self._rename(text)
            self.edits.append((name_start, end + 1, text))
            spans.append((name_start, end + 1))
            self.counts["kernel_launch"] += 1
        # the identifiers of a rewritten launch are no longer the source's
        for a, b in spans:
            masked = masked[:a] + re.sub(r"[^\n]", " ", masked[a:b]) + masked[b:]
        self.masked = masked
        return spans

    def _rename(self, text: str) -> str:
        masked = _mask(text)
        out, last = [], 0
        for match in _IDENTIFIER.finditer(masked):
            if match.group() in NAMES:
                new, kind = NAMES[match.group()]
                out += [text[last:match.start()], new]
                last = match.end()
                self.counts[kind] += 1
        return "".join(out) + text[last:]


def hipify_cpp(source: str, filename: str = "<source>") -> Result:
    """CUDA C++ `source` with its CUDA spellings turned into HIP's, the counts by kind, and warnings."""
    return _Rewriter(source, filename).rewrite()
