"""Layer 3: CUDA C++ kernels, through NVIDIA's own compiler front end and lapis's PTX assembler.

    source --NVRTC (cuda.bindings.nvrtc)--> PTX --ptx_parse, ptx--> IR --compile_function--> code object

CuPy's raw-kernel interface over it:

    kernel = cuda.RawKernel(r'''
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }''', "saxpy")
    kernel((blocks,), (threads,), (np.float32(2), d_x, d_y, np.int32(n)))

Arguments are device arrays (their address, for a pointer parameter) and numbers, converted to the
parameter's PTX type as written in the kernel (a value the type cannot hold is refused, where CuPy
would pass its bits unchecked). NVRTC needs no GPU: the `nvidia-cuda-nvrtc` wheel carries it.
"""

import functools
import hashlib
import linecache
import math
import os

import numpy as np

from lapis import trace
from lapis.cuda.compiler import CompileError, cache, compile_function
from lapis.cuda.compiler import ptx as ptx_translate
from lapis.cuda.compiler.ptx_parse import Module, parse
from lapis.cuda.devicearray import DeviceNDArray
from lapis.cuda.dispatcher import _dim3
from lapis.cuda.errors import LaunchError
from lapis.cuda.printf_fifo import fifo_of
from lapis.runtime import CodeObject

api = None              # the programming interface whose contexts launch the kernels (lapis.cuda sets it)
# The kinds of argument-layout entry the launch supplies after the kernel's own arguments (ptx_function.py lays them
# out): the module's .global/.const buffer, and hidden pointers (the printf FIFO)
HIDDEN = ("globals", "hidden")

ARCHITECTURE = "compute_90"     # the PTX NVRTC writes for the simulated GPUs (Hopper's; lapis assembles it for both)
# A parameter's PTX type -> the numpy type its bytes are packed as
PARAM_DTYPES = {"u8": np.uint8, "s8": np.int8, "b8": np.uint8, "u16": np.uint16, "s16": np.int16, "b16": np.uint16,
                "u32": np.uint32, "s32": np.int32, "b32": np.uint32, "u64": np.uint64, "s64": np.int64,
                "b64": np.uint64, "f32": np.float32, "f64": np.float64}


class NvrtcError(CompileError):
    """NVRTC refused the source: the message is its log (file:line: error: ...)."""


def compile_to_ptx(source: str, name: str = "kernel.cu", options: tuple = (),
                   name_expressions: tuple = ()) -> tuple[str, dict[str, str]]:
    """PTX for CUDA C++ `source`, by NVRTC, and the lowered (mangled) name of each of `name_expressions` (C++
    expressions naming kernels, template instances included: "scale<float>"); raises NvrtcError with NVRTC's
    log."""
    from cuda.bindings import nvrtc  # imported when first used: the wheel is large to load
    options = (*tuple(options), *(f"-I{path}" for path in header_paths()))
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in options):
        options = (f"--gpu-architecture={ARCHITECTURE}", *options)
    key = cache.text_key("nvrtc", nvrtc.nvrtcVersion()[1:], _headers_digest(), source, name, options,
                         tuple(name_expressions))
    if (hit := cache.load(key)) is not None:
        return hit
    ptx, lowered = _nvrtc(nvrtc, source, name, options, name_expressions)
    cache.store(key, (ptx, lowered))
    return ptx, lowered


@functools.cache
def _headers_digest() -> str:
    """A hash of lapis's own C headers (NVRTC's and the wheels' are pinned with their versions)."""
    h = hashlib.sha256()
    folder = os.path.join(os.path.dirname(__file__), "include")
    for entry in sorted(os.listdir(folder)):
        with open(os.path.join(folder, entry), "rb") as f:
            h.update(entry.encode() + f.read())
    return h.hexdigest()


def _nvrtc(nvrtc, source: str, name: str, options: tuple, name_expressions: tuple) -> tuple[str, dict[str, str]]:
    err, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        for expression in name_expressions:
            _check(nvrtc, nvrtc.nvrtcAddNameExpression(program, expression.encode())[0], "nvrtcAddNameExpression")
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(program)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise NvrtcError(f"NVRTC could not compile {name}:\n{log.decode(errors='replace').rstrip(chr(0)).strip()}")
        err, size = nvrtc.nvrtcGetPTXSize(program)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        text = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetPTX(program, text)[0], "nvrtcGetPTX")
        lowered = {}
        for expression in name_expressions:
            err, mangled = nvrtc.nvrtcGetLoweredName(program, expression.encode())
            _check(nvrtc, err, "nvrtcGetLoweredName")
            lowered[expression] = mangled.decode()
        return text.decode().rstrip("\x00"), lowered
    finally:
        nvrtc.nvrtcDestroyProgram(program)


@functools.cache
def header_paths() -> tuple[str, ...]:
    """Where CUDA's headers are (cuda_fp16.h, cooperative_groups.h, mma.h; cuda::std and cub from CCCL): the
    nvidia-cuda-runtime and nvidia-cuda-cccl wheels' include folders, as nvcc finds its own without -I; and
    lapis's own <stdio.h>, <cstdint>, <cmath>, <cassert> and the like, which NVRTC does not ship (src/lapis/cuda/
    include: what a kernel uses of them, over CCCL's cuda::std)."""
    import nvidia  # the wheels' namespace package
    found = [os.path.join(os.path.dirname(__file__), "include")]      # lapis's stand-ins for the C library's
    for root in nvidia.__path__:
        for folder in sorted(os.listdir(root)):
            include = os.path.join(root, folder, "include")
            for path in (include, os.path.join(include, "cccl")):
                if os.path.isfile(os.path.join(path, "cuda_fp16.h")) or os.path.isdir(os.path.join(path, "cub")):
                    found.append(path)
    return tuple(found)


def _remember(name: str, text: str) -> None:
    """Keep `text` as file `name` for linecache (as Python does for code compiled from a string), where no file of
    that name holds it."""
    if not os.path.exists(name):
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcError(f"{what} failed: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")


class RawModule:
    """CuPy's RawModule: every kernel of a CUDA C++ source (`code`), or of PTX text (`ptx`), compiled once."""

    def __init__(self, code: str | None = None, *, options: tuple = (), name_expressions=(), ptx: str | None = None,
                 name: str = "kernel.cu"):
        if (code is None) == (ptx is None):
            raise TypeError("RawModule takes CUDA C++ source (code=) or PTX text (ptx=), one of them")
        self.code, self.options, self.name = code, tuple(options), name
        self.lowered: dict[str, str] = {}        # a name expression -> the kernel's mangled name
        if ptx is None:
            self.ptx, self.lowered = compile_to_ptx(code, name, self.options, tuple(name_expressions or ()))
        else:
            self.ptx = ptx
        # what errors and line tables call the PTX text, where no CUDA source line (-lineinfo) is known
        self.ptx_name = name if ptx is not None else name.rsplit(".", 1)[0] + ".ptx"
        self.module: Module = parse(self.ptx, self.ptx_name)
        _remember(self.ptx_name, self.ptx)        # a fault then quotes the line it names
        for path in self.module.files.values():
            if code is not None and os.path.basename(path) == os.path.basename(name):
                _remember(path, code)
        self._kernels: dict[str, RawKernel] = {}
        self.global_offsets, self._global_image = ptx_translate.globals_image(self.module, self.ptx_name)
        self._globals: dict[object, DeviceNDArray] = {}       # context -> the module's .global/.const buffer

    def code_object(self) -> bytes:
        """Every kernel of the module assembled into one lapis code object: the simulated GPU's cubin (what
        nvrtcGetCUBIN gives, and cuModuleLoadData takes). A kernel that uses module variables needs the module's
        buffer, which a code object does not carry: load its PTX instead."""
        kernels = []
        for name in self.module.entries:
            (kernel,) = CodeObject.from_bytes(self.get_function(name).compiled.code_object).kernels
            kernels.append(kernel)
        return CodeObject(kernels).to_bytes()

    def hidden_arguments(self, compiled, context) -> list[tuple[dict, DeviceNDArray]]:
        """A kernel's hidden arguments after its own on `context` (the `HIDDEN` entries of its argument layout), each
        with its value: the module's variables' buffer, or the printf FIFO."""
        return [(entry, self.globals_buffer(context) if entry["kind"] == "globals" else
                 fifo_of(context).argument(compiled, entry["name"]))
                for entry in compiled.arg_layout if entry["kind"] in HIDDEN]

    def launch_context(self, args: tuple, stream):
        """The context a launch of this module's kernels with `args` on `stream` runs in (and, with neither, where
        get_global looks): lapis.cuda's (lapis.hip's module checks the device's wave size too)."""
        return api.context_for(args, stream)

    def globals_buffer(self, context) -> DeviceNDArray:
        """The module's `.global` and `.const` variables on `context`'s device, initialised when first asked for
        (cuModuleLoad's job); every kernel of the module launched there reads and writes these."""
        if context not in self._globals:
            buffer = DeviceNDArray.allocate(context, max(len(self._global_image), 1), np.uint8)
            buffer.copy_to_device(np.frombuffer(self._global_image or bytes(1), np.uint8))
            self._globals[context] = buffer
        return self._globals[context]

    def get_global(self, name: str) -> DeviceNDArray:
        """A module variable (`__device__` or `__constant__`) as a device array of its bytes, on the current
        device (CuPy's get_global, whose memory pointer this is; `.view(dtype)` reads it as numbers)."""
        variable = next((v for v in self.module.variables if v.name == name and v.space in ("global", "const")),
                        None)
        if variable is None:
            known = ", ".join(self.global_offsets) or "none"
            raise KeyError(f"no __device__ or __constant__ variable {name!r} in the module (its variables: {known}; "
                           "a C++ name is the mangled one unless it is declared extern \"C\")")
        buffer = self.globals_buffer(self.launch_context((), None))
        return DeviceNDArray((variable.size,), (1,), np.uint8, buffer.context, buffer.memory,
                             ptr=buffer.ptr + self.global_offsets[name])

    def get_function(self, name: str) -> "RawKernel":
        """The kernel `name`: its name in the PTX, or one of the module's name expressions ("scale<float>")."""
        name = self.lowered.get(name, name)
        if name not in self._kernels:
            if name not in self.module.entries:
                known = ", ".join(sorted(self.module.entries)) or "none"
                raise KeyError(f"no kernel {name!r} in the module (its kernels: {known}; a C++ kernel's name is "
                               "its mangled one unless it is declared extern \"C\")")
            self._kernels[name] = RawKernel(None, name, module=self)
        return self._kernels[name]


class RawKernel:
    """CuPy's RawKernel: one `__global__` function `name` of CUDA C++ `code`, called as
    `kernel(grid, block, args, shared_mem=0, stream=None)`."""

    def __init__(self, code: str | None, name: str, options: tuple = (), *, module: RawModule | None = None):
        self.module = module if module is not None else RawModule(code, options=options, name_expressions=(name,))
        self.name = self.module.lowered.get(name, name)
        if self.name not in self.module.module.entries:
            self.module.get_function(self.name)      # raises, naming the module's kernels

    @property
    def ptx(self) -> str:
        return self.module.ptx

    @functools.cached_property
    def compiled(self):
        """The kernel through lapis's back end (a CompiledKernel, as a Python kernel's)."""
        key = cache.text_key("ptx", self.module.ptx, self.name, self.module.ptx_name)
        if (hit := cache.load(key)) is not None:
            return hit
        argtypes = tuple(p.type for p in self.module.module.entries[self.name].params)
        try:
            compiled = compile_function(ptx_translate.build_ir(self.module.module, self.name, self.module.ptx_name),
                                        argtypes)
        except CompileError as e:
            if "live predicates" not in str(e):
                raise
            # more conditions live at once than the ISA's seven predicates: keep PTX's in words, as ptxas does
            compiled = compile_function(ptx_translate.build_ir(self.module.module, self.name, self.module.ptx_name,
                                                               predicates_as_words=True), argtypes)
        cache.store(key, compiled)
        return compiled

    def inspect_asm(self) -> str:
        return self.compiled.listing()

    def resources(self) -> str:
        return self.compiled.resources()

    @property
    def num_regs(self) -> int:
        return self.compiled.registers

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None) -> None:
        grid, block = _dim3(grid, "the grid (blocks)"), _dim3(block, "the block (threads)")
        args = tuple(args)
        entry = self.module.module.entries[self.name]
        if len(args) != len(entry.params):
            raise TypeError(f"kernel {self.name!r} takes {len(entry.params)} arguments, got {len(args)}")
        if entry.maxntid is not None and math.prod(block) > math.prod(entry.maxntid):
            raise LaunchError(f"kernel {self.name!r} was compiled for at most {math.prod(entry.maxntid)} threads a "
                              f"block (__launch_bounds__, PTX's .maxntid), not {math.prod(block)} "
                              "(cudaErrorInvalidValue)")
        compiled = self.compiled
        context = self.module.launch_context(args, stream)
        hidden = [value for _, value in self.module.hidden_arguments(compiled, context)]
        kernargs = pack(compiled.arg_layout, (*args, *hidden), self.name)
        queue, index = context.launch(compiled, kernargs, grid, block, shared_mem, stream=stream)
        if trace.enabled():
            trace.emit(3, "launch", kernel=self.name, device=str(context.device), grid=grid, block=block,
                       registers=compiled.registers, shared_bytes=compiled.shared_bytes + shared_mem,
                       kernarg_bytes=len(kernargs), kernarg_hex=kernargs.hex(),
                       instructions=len(compiled.instructions), queue=queue, packet_index=index)


def pack(layout: list[dict], args: tuple, kernel: str) -> bytes:
    """The kernarg segment: each argument at its parameter's offset, as the parameter's PTX type."""
    size = max((e["offset"] + e["size"] for e in layout), default=0)
    out = bytearray(-(-size // 8) * 8)
    for i, (entry, value) in enumerate(zip(layout, args, strict=True)):
        dtype = PARAM_DTYPES.get(entry["dtype"])
        if hasattr(value, "__cuda_array_interface__"):        # a device array, a GPU tensor, ...: its address
            if entry["size"] != 8:
                raise LaunchError(f"kernel {kernel!r} argument {i} is a device array, but the parameter is "
                                  f".{entry['dtype']}, not a 64-bit pointer")
            raw = np.uint64(value.__cuda_array_interface__["data"][0]).tobytes()
        elif dtype is None or entry["size"] > np.dtype(dtype).itemsize:
            # a struct by value (`.param .align 8 .b8 p[16]`): its bytes, as a numpy structured scalar or array,
            # bytes, or a ctypes structure give them
            raw = bytes(value) if isinstance(value, bytes | bytearray) or hasattr(value, "_fields_") else \
                np.asarray(value).tobytes()
            if len(raw) != entry["size"]:
                raise LaunchError(f"kernel {kernel!r} argument {i}: {len(raw)} bytes for a {entry['size']}-byte "
                                  "parameter")
        else:
            raw = _number(value, dtype, i, kernel).tobytes()
        out[entry["offset"]:entry["offset"] + len(raw)] = raw
    return bytes(out)


def _number(value, dtype, index: int, kernel: str) -> np.generic:
    """A number as a parameter's type: an integer parameter takes any integer its bits can hold, signed or not
    (PTX declares an `int` parameter .u32), and no float."""
    if isinstance(value, np.ndarray) or not np.isscalar(value) and not isinstance(value, np.generic):
        raise LaunchError(f"kernel {kernel!r} argument {index} is a {type(value).__name__}; pass device arrays "
                          "and numbers")
    if np.issubdtype(dtype, np.integer):
        bits = np.dtype(dtype).itemsize * 8
        if isinstance(value, float | np.floating | complex | np.complexfloating) or \
                not -(1 << (bits - 1)) <= int(value) < 1 << bits:
            raise LaunchError(f"kernel {kernel!r} argument {index} ({value!r}) does not fit the parameter's "
                              f"{bits}-bit integer")
        return np.array(int(value) & ((1 << bits) - 1), np.uint64).astype(dtype)
    return np.array(value, dtype)
