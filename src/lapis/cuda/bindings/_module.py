"""Layer 3: the driver API's modules, functions and launches (see `driver`).

A module is PTX text (as NVRTC writes it), given to lapis's PTX assembler through `lapis.cuda.RawModule`; every
kernel in it is assembled when it loads, as CUDA JIT-compiles a PTX module at cuModuleLoadData. A launch copies
each parameter's bytes, as the kernel's PTX declares its size, to the parameter's offset in the kernel-argument
segment, and queues the kernel on the stream's AQL queue. A lapis code object (the ELF `CompiledKernel.code_object`
lapis's compiler writes) loads too, its kernels launched as its metadata lays out their arguments.
"""

import re
import struct
from types import SimpleNamespace

import numpy as np
from cuda.bindings import driver as _real

from lapis import trace
from lapis.cuda.bindings._core import (
    DriverError,
    R,
    _current,
    _entry,
    _function,
    _module,
    _name,
    _register,
    _size,
    _stream,
)
from lapis.cuda.bindings._handles import CUdeviceptr, CUfunction, CUmodule, FunctionRecord, ModuleRecord, new_value
from lapis.cuda.bindings._params import parameter_bytes, read_string
from lapis.cuda.compiler import CompileError
from lapis.cuda.occupancy import max_active_blocks_per_multiprocessor
from lapis.cuda.raw_kernel import HIDDEN, RawModule
from lapis.runtime.code_object import CodeObjectError, LoadedImage

F = _real.CUfunction_attribute
DEFAULT_DYNAMIC_SHARED = 48 * 1024      # dynamic shared memory a kernel may use before cuFuncSetAttribute opts in
_ELF, _FATBIN = b"\x7fELF", (0xBA55ED50).to_bytes(4, "little")


# -- modules ----------------------------------------------------------------------------------------
class CodeObjectKernel:
    """A kernel of a lapis code object (the ELF lapis's compiler writes, `CompiledKernel.code_object`), launched as
    its metadata lays out its arguments."""

    def __init__(self, image: bytes, meta: dict):
        self.name = meta["name"]
        self.compiled = SimpleNamespace(
            name=self.name, code_object=image, arg_layout=list(meta["args"]), registers=meta.get("registers", 0),
            shared_bytes=meta.get("shared_bytes", 0), local_bytes=meta.get("local_bytes", 0), assertions=None,
            instructions=())


class CodeObjectModule:
    """A module of lapis code objects: kernels only (no module variables)."""
    ptx = ""

    def __init__(self, image: bytes):
        try:
            kernels = LoadedImage.parse(image).metadata["kernels"]
            self.kernels = {meta["name"]: CodeObjectKernel(image, meta) for meta in kernels}
        except (CodeObjectError, ValueError, KeyError, IndexError, TypeError, struct.error) as e:
            raise DriverError(R.CUDA_ERROR_INVALID_IMAGE, f"not a lapis code object (a cubin's SASS is not "
                              f"something lapis runs: load PTX): {e}") from None
        for kernel in self.kernels.values():
            if any(a.get("kind") in HIDDEN for a in kernel.compiled.arg_layout):
                raise DriverError(R.CUDA_ERROR_INVALID_IMAGE, f"kernel {kernel.name!r} of the code object uses module "
                                  "variables or printf, which a code object does not carry: load its PTX")


def _kernels(raw) -> list[str]:
    return sorted(raw.kernels if isinstance(raw, CodeObjectModule) else raw.module.entries)


def _load(image: bytes) -> CUmodule:
    if image.startswith(_FATBIN):
        raise DriverError(R.CUDA_ERROR_INVALID_IMAGE, "a fatbin holds SASS, which lapis cannot run: load the PTX "
                          "(NVRTC's nvrtcGetPTX, or nvcc --ptx)")
    ctx = _current()
    if image.startswith(_ELF):
        raw = CodeObjectModule(image)
        record = _register(ModuleRecord(CUmodule(new_value()), raw, ctx))
        ctx.modules.append(record)
        return record.handle
    text = image.split(b"\0")[0].decode("utf-8", errors="replace")
    if not re.search(r"^\s*\.(version|target)\b", text, re.M):
        raise DriverError(R.CUDA_ERROR_INVALID_IMAGE, "the image is neither PTX text nor a code object")
    try:
        raw = RawModule(ptx=text, name=f"module_{len(ctx.modules)}.ptx")
        for name in raw.module.entries:          # assembled now, as CUDA JIT-compiles a PTX module when it loads
            _ = raw.get_function(name).compiled
    except (CompileError, NotImplementedError, ValueError, KeyError) as e:
        raise DriverError(R.CUDA_ERROR_INVALID_PTX, f"lapis's PTX assembler refused the module: {e}") from None
    record = _register(ModuleRecord(CUmodule(new_value()), raw, ctx))
    ctx.modules.append(record)
    return record.handle


@_entry(1)
def cuModuleLoadData(image):  # noqa: N802
    """A module from PTX text: bytes (NUL-terminated or not), a str, or the address of NUL-terminated text (as
    cuda-python's example passes `np.char.array(ptx).ctypes.data`)."""
    return _load(read_string(image))


@_entry(1)
def cuModuleLoadDataEx(image, numOptions, options, optionValues):  # noqa: N802, N803
    """cuModuleLoadData; the JIT options are accepted and ignored (lapis's assembler has none)."""
    return _load(read_string(image))


@_entry(1)
def cuModuleLoad(fname):  # noqa: N802
    try:
        with open(_name(fname), "rb") as f:
            image = f.read()
    except OSError as e:
        raise DriverError(R.CUDA_ERROR_FILE_NOT_FOUND, str(e)) from None
    return _load(image)


@_entry()
def cuModuleUnload(hmod):  # noqa: N802
    record = _module(hmod)
    record.unloaded = True
    record.ctx.modules.remove(record)


@_entry(1)
def cuModuleGetFunction(hmod, name):  # noqa: N802
    record = _module(hmod)
    name = _name(name)
    if name not in record.functions:
        if name not in _kernels(record.raw):
            raise DriverError(R.CUDA_ERROR_NOT_FOUND, f"no kernel {name!r} in the module (its kernels: "
                              f"{', '.join(_kernels(record.raw)) or 'none'})")
        raw = record.raw
        kernel = raw.kernels[name] if isinstance(raw, CodeObjectModule) else raw.get_function(name)
        function = FunctionRecord(CUfunction(new_value()), kernel, record)
        record.functions[name] = _register(function)
    return record.functions[name].handle


@_entry(2)
def cuModuleGetGlobal(hmod, name):  # noqa: N802
    """(dptr, bytesize) of a `__device__` or `__constant__` variable, in the module's memory on its device."""
    record = _module(hmod)
    name = _name(name)
    variables = [] if isinstance(record.raw, CodeObjectModule) else record.raw.module.variables
    variable = next((v for v in variables if v.name == name and v.space in ("global", "const")), None)
    if variable is None:
        raise DriverError(R.CUDA_ERROR_NOT_FOUND, f"no __device__ or __constant__ variable {name!r} in the module")
    buffer = record.raw.globals_buffer(record.ctx.context)
    return CUdeviceptr(buffer.ptr + record.raw.global_offsets[name]), variable.size


# -- functions --------------------------------------------------------------------------------------
def _limits(function: FunctionRecord) -> tuple[int, int]:
    """(the most dynamic shared memory a launch may ask for, the most threads a block may have)."""
    compiled, p = function.kernel.compiled, function.module.ctx.context.device.properties
    most = function.max_dynamic_shared
    if most is None:
        most = max(0, min(DEFAULT_DYNAMIC_SHARED, p.shared_per_block) - compiled.shared_bytes)
    threads = 0         # the largest whole-warp block that fits a multiprocessor (fewer fit as blocks grow)
    for block in range(p.max_threads_per_block // p.warp_size * p.warp_size, 0, -p.warp_size):
        if max_active_blocks_per_multiprocessor(p, block, compiled.registers, compiled.shared_bytes):
            threads = block
            break
    entry = None if isinstance(function.kernel, CodeObjectKernel) else \
        function.kernel.module.module.entries[function.kernel.name]
    if entry is not None and entry.maxntid:
        threads = min(threads, int(np.prod(entry.maxntid)))
    return most, threads


def _ptx_version(raw) -> int:
    m = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", raw.ptx, re.M)
    return int(m[1]) * 10 + int(m[2]) if m else 0


@_entry(1)
def cuFuncGetAttribute(attrib, hfunc):  # noqa: N802
    if not isinstance(attrib, F):
        raise TypeError(f"Argument 'attrib' is not instance of type (expected {F})")
    function = _function(hfunc)
    compiled = function.kernel.compiled
    dynamic, threads = _limits(function)
    p = function.module.ctx.context.device.properties
    raw = function.module.raw
    values = {
        F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: threads,
        F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: compiled.shared_bytes,
        F.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: 0 if isinstance(raw, CodeObjectModule) else
        sum(v.size for v in raw.module.variables if v.space == "const"),
        F.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: compiled.local_bytes,
        F.CU_FUNC_ATTRIBUTE_NUM_REGS: compiled.registers,
        F.CU_FUNC_ATTRIBUTE_PTX_VERSION: _ptx_version(raw),
        F.CU_FUNC_ATTRIBUTE_BINARY_VERSION: p.compute_capability[0] * 10 + p.compute_capability[1],
        F.CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: 0,
        F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: dynamic,
        F.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: -1,
    }
    if attrib not in values:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"lapis does not model {attrib.name}")
    return int(values[attrib])


@_entry()
def cuFuncSetAttribute(hfunc, attrib, value):  # noqa: N802
    """CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES opts a kernel in to more dynamic shared memory (up to the
    device's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN less its static shared memory); the carveout is
    accepted and ignored; other attributes are read-only."""
    function = _function(hfunc)
    if attrib == F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        p = function.module.ctx.context.device.properties
        most = p.shared_per_block - function.kernel.compiled.shared_bytes
        if not 0 <= int(value) <= most:
            raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{value} bytes of dynamic shared memory: at most {most}")
        function.max_dynamic_shared = int(value)
    elif attrib != F.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{attrib!r} cannot be set")


@_entry(1)
def cuFuncGetName(hfunc):  # noqa: N802
    return _function(hfunc).kernel.name.encode()


@_entry(1)
def cuOccupancyMaxActiveBlocksPerMultiprocessor(func, blockSize, dynamicSMemSize):  # noqa: N802, N803
    function = _function(func)
    compiled, p = function.kernel.compiled, function.module.ctx.context.device.properties
    return max_active_blocks_per_multiprocessor(p, _size(blockSize, "blockSize"), compiled.registers,
                                                compiled.shared_bytes + _size(dynamicSMemSize, "dynamicSMemSize"))


@_entry(2)
def cuOccupancyMaxPotentialBlockSize(func, blockSizeToDynamicSMemSize, dynamicSMemSize,  # noqa: N802, N803
                                     blockSizeLimit):  # noqa: N803
    """(the fewest blocks that fill the device, the block size with the most threads resident): by the occupancy
    calculator, trying every whole number of warps; `blockSizeToDynamicSMemSize` may be a Python callable."""
    function = _function(func)
    compiled, p = function.kernel.compiled, function.module.ctx.context.device.properties
    limit = _size(blockSizeLimit, "blockSizeLimit") or p.max_threads_per_block
    best = (0, 0)
    for block in range(p.warp_size, min(limit, p.max_threads_per_block) + 1, p.warp_size):
        dynamic = blockSizeToDynamicSMemSize(block) if callable(blockSizeToDynamicSMemSize) else dynamicSMemSize
        blocks = max_active_blocks_per_multiprocessor(p, block, compiled.registers, compiled.shared_bytes + dynamic)
        if blocks * block >= best[0] * best[1] and blocks:
            best = (blocks, block)
    return best[0] * p.compute_units, best[1]


# -- launches ---------------------------------------------------------------------------------------
@_entry()
def cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,  # noqa: N802, N803
                   sharedMemBytes, hStream, kernelParams, extra):  # noqa: N803
    """Queue the kernel on the stream (0: the current context's default stream). `kernelParams` is the address of
    an array of pointers to each parameter's value (or a buffer holding that array), or cuda-python's
    `(values, types)` tuple; or `extra` gives the parameters packed in one buffer."""
    function = _function(f)
    kernel = function.kernel
    compiled = kernel.compiled
    stream, ctx = _stream(hStream, function.module.ctx)
    context = ctx.context
    grid = tuple(_size(d, "gridDim") for d in (gridDimX, gridDimY, gridDimZ))
    block = tuple(_size(d, "blockDim") for d in (blockDimX, blockDimY, blockDimZ))
    shared = _size(sharedMemBytes, "sharedMemBytes")
    most_dynamic, most_threads = _limits(function)
    if shared > most_dynamic:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{shared} bytes of dynamic shared memory: the kernel may use "
                          f"{most_dynamic} (more with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_"
                          "BYTES))")
    threads = block[0] * block[1] * block[2]
    if most_threads and threads > most_threads and threads <= context.device.properties.max_threads_per_block:
        raise DriverError(R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, f"{threads} threads of {compiled.registers} "
                          f"registers each do not fit a multiprocessor (at most {most_threads})")
    layout = [e for e in compiled.arg_layout if e.get("kind") not in HIDDEN]
    values = parameter_bytes(kernelParams, extra, layout)
    size = max((e["offset"] + e["size"] for e in compiled.arg_layout), default=0)
    kernargs = bytearray(-(-size // 8) * 8)
    for entry, raw in zip(layout, values, strict=True):
        kernargs[entry["offset"]:entry["offset"] + entry["size"]] = raw
    if not isinstance(kernel, CodeObjectKernel):    # the module's variables' buffer, the printf FIFO, on this device
        for entry, value in kernel.module.hidden_arguments(compiled, context):
            kernargs[entry["offset"]:entry["offset"] + 8] = np.uint64(value.ptr).tobytes()
    queue, index = context.launch(compiled, bytes(kernargs), grid, block, shared, stream=stream)
    if trace.enabled():
        trace.emit(3, "launch", kernel=kernel.name, device=str(context.device), grid=grid, block=block,
                   registers=compiled.registers, shared_bytes=compiled.shared_bytes + shared,
                   kernarg_bytes=len(kernargs), kernarg_hex=bytes(kernargs).hex(),
                   instructions=len(compiled.instructions), queue=queue, packet_index=index)
