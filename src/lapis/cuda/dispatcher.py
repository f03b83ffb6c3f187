"""Layer 3: `@cuda.jit` and the dispatcher behind a kernel launch.

    @cuda.jit
    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    axpy[blocks, threads](2.0, d_x, d_y, d_out)            # or [blocks, threads, stream, shared_bytes]

As in numba, compilation is lazy and per argument types: the first launch with new types
compiles (Python -> lapis ISA, see `lapis.cuda.compiler`), later ones reuse the result.
Argument types follow numba: a device array types as array(dtype, ndim, layout), a Python
int as int64 (uint64 from 2^63 up), a Python float as float64, a Python complex as complex128, a numpy scalar as
its dtype. A host numpy array is
copied to the device for the launch and back after it (the launch then waits for the kernel),
with numba's warning about the copies.
"""

import functools
import sys
import warnings

import numpy as np

from lapis import abi, trace
from lapis.cuda import occupancy
from lapis.cuda import signatures as signatures_
from lapis.cuda.compiler import CompiledKernel, compile_kernel
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.frontend import CAPTURED
from lapis.cuda.context import pack_kernargs
from lapis.cuda.cooperative_groups import BARRIER_WORD
from lapis.cuda.devicearray import DeviceNDArray, MappedNDArray
from lapis.cuda.errors import LaunchError
from lapis.cuda.printf_fifo import fifo_of

_ARRAY_TYPES: dict[tuple, T.ArrayType] = {}       # (dtype, ndim, layout) -> its type: launches see few


_NUMPY_SCALAR_TYPES: dict[type, object] = {}     # a numpy scalar type -> its argument type (launches see few)


def _scalar_type(value, index: int, name: str):
    kind = _NUMPY_SCALAR_TYPES.get(type(value))
    if kind is not None:                    # np.int64(n), np.float32(x): a library's every launch passes some
        return kind
    if isinstance(value, bool | np.bool_):
        return T.boolean
    if isinstance(value, int):
        return T.uint64 if value >= 2**63 else T.int64       # numba's typeof: an int only uint64 holds
    if isinstance(value, float):
        return T.float64
    if isinstance(value, complex):
        return T.complex128
    if isinstance(value, np.generic):
        t = T.scalar_of(value.dtype)
        t = T.int32 if t in T.STORAGE else t              # a small integer's value, as an array element's load
        _NUMPY_SCALAR_TYPES[type(value)] = t
        return t
    raise TypeError(f"kernel argument {index} ({name!r}) of type {type(value).__name__} is not supported "
                    "(pass device arrays and numbers)")


def _array_type(value: DeviceNDArray) -> T.ArrayType:
    kind = value._kind                 # every launch asks: the array keeps its answer (it never changes)
    if kind is None:
        kind = value._kind = _array_type_of(value.dtype, len(value.shape), value.layout)
    return kind


def _array_type_of(dtype: np.dtype, ndim: int, layout: str) -> T.ArrayType:
    key = (dtype, ndim, layout)
    kind = _ARRAY_TYPES.get(key)
    if kind is None:
        kind = _ARRAY_TYPES[key] = T.ArrayType(T.element_of(dtype), ndim, layout)
    return kind


def _argtype(value, index: int, name: str, context):
    """A launch argument's type, checking that a device array lives in the launch's context."""
    if isinstance(value, DeviceNDArray):
        if value.context is not context:
            raise LaunchError(f"kernel argument {index} ({name!r}) lives on {value.device}, but the launch is on "
                              f"{context.device}")
        return _array_type(value)
    return _scalar_type(value, index, name)


def _foreign_array(value) -> bool:
    """Whether a launch argument is another library's device array: not lapis's own, but with a CUDA Array
    Interface (a GPU tensor)."""
    return not isinstance(value, DeviceNDArray) and hasattr(value, "__cuda_array_interface__")


def _dim3(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int | np.integer) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int | np.integer) and d >= 1 for d in dims):
        raise LaunchError(f"{what} must be a positive int or a tuple of 1 to 3 positive ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


LAUNCH_CONFIGS_KEPT = 64   # configurations of plain ints a dispatcher keeps (a kernel launched over many sizes)
FORALL_THREADS = 128        # forall's block when not told: 4 warps, a usual elementwise block


class PerformanceWarning(UserWarning):
    """Work lapis did that costs time the program did not ask for (numba's NumbaPerformanceWarning)."""


class Dispatcher:
    def __init__(self, pyfunc, api, signatures: list[str] | None = None):
        self.py_func = pyfunc
        self.__name__ = pyfunc.__name__
        self.__doc__ = pyfunc.__doc__
        self.api = api
        self.overloads: dict[tuple, CompiledKernel] = {}
        self._last: tuple = (None, None)       # the last (argument types, compiled kernel) a launch asked for
        code = pyfunc.__code__
        self._arg_names = code.co_varnames[:code.co_argcount]
        self._const_copies: dict[tuple, DeviceNDArray] = {}     # (context, data) -> its copy on the device
        self._configs: dict[tuple, LaunchConfiguration] = {}   # (blocks, threads) -> its configuration
        # numba's typed form, @jit("void(float32[:], ...)"): compiled now, and launches fit their arguments to it
        self.signatures = [signatures_.parse(sig) for sig in signatures or ()]
        for argtypes in self.signatures:
            if len(argtypes) != len(self._arg_names):
                raise TypeError(f"kernel {self.__name__!r} takes {len(self._arg_names)} arguments; its signature "
                                f"gives {len(argtypes)}")
            self.compile(argtypes)

    def __repr__(self) -> str:
        return f"<lapis kernel {self.__name__}>"

    def __getitem__(self, config) -> "LaunchConfiguration":
        plain = type(config) is tuple and len(config) == 2 and type(config[0]) is int and type(config[1]) is int
        kept = self._configs.get(config) if plain else None
        if kept is not None:                    # kernel[blocks, threads] of ints: a library's every launch
            return kept
        config = config if isinstance(config, tuple) else (config,)
        if not 2 <= len(config) <= 4:
            raise LaunchError("launch as kernel[blocks, threads] or kernel[blocks, threads, stream, shared_bytes]")
        grid, block = _dim3(config[0], "the grid (blocks)"), _dim3(config[1], "the block (threads)")
        stream = config[2] if len(config) > 2 else 0
        shared = int(config[3]) if len(config) > 3 else 0
        launch = LaunchConfiguration(self, grid, block, stream, shared)
        if plain:
            if len(self._configs) >= LAUNCH_CONFIGS_KEPT:
                self._configs.clear()
            self._configs[config] = launch
        return launch

    def __call__(self, *args):
        raise LaunchError(f"launch kernel {self.__name__!r} with a configuration: "
                          f"{self.__name__}[blocks, threads](...)")

    def forall(self, ntasks: int, tpb: int = 0, stream=0, sharedmem: int = 0) -> "LaunchConfiguration":
        """numba's kernel.forall(n): a configuration of at least n threads, tpb a block (FORALL_THREADS when 0)."""
        if ntasks < 0:
            raise LaunchError(f"forall() takes a number of tasks >= 0, not {ntasks}")
        tpb = int(tpb) or FORALL_THREADS
        return self[max(1, -(-int(ntasks) // tpb)), tpb, stream, sharedmem]

    def specialize(self, *args) -> "Dispatcher":
        """numba's kernel.specialize(*args): a kernel compiled now for these arguments' types and taking only
        arguments of them (device arrays by dtype, dimensions and layout; host arrays as their device copies
        would be; numbers by type)."""
        argtypes = tuple(_array_type(a) if isinstance(a, DeviceNDArray)
                         else _array_type_of(a.dtype, a.ndim, "C" if a.flags.c_contiguous else
                                             "F" if a.flags.f_contiguous else "A") if isinstance(a, np.ndarray)
                         else _scalar_type(a, i, name) for i, (a, name) in enumerate(zip(args, self._arg_names,
                                                                                          strict=False)))
        return Dispatcher(self.py_func, self.api, [argtypes])

    def compile(self, argtypes: tuple) -> CompiledKernel:
        last_types, compiled = self._last
        if argtypes == last_types:          # the types are interned: the same objects compare without hashing
            return compiled
        compiled = self.overloads.get(argtypes)
        if compiled is None:
            compiled = self.overloads[argtypes] = compile_kernel(self.py_func, argtypes)
            # numba's overloads[signature].max_cooperative_grid_blocks(blockdim): the device is this API's
            compiled.max_cooperative_grid_blocks = functools.partial(self._cooperative_limit, compiled)
        self._last = (argtypes, compiled)
        return compiled

    def _compiled(self) -> list[CompiledKernel]:
        if not self.overloads:
            raise RuntimeError(f"kernel {self.__name__!r} has not been compiled yet: launch it once first "
                               "(compilation is lazy, per argument types)")
        return list(self.overloads.values())

    def inspect_ir(self) -> str:
        """The typed SSA IR of each compiled signature, after optimization."""
        return "\n\n".join(k.ir for k in self._compiled())

    def inspect_asm(self) -> str:
        """The machine code of each compiled signature, as cuobjdump lists it."""
        return "\n\n".join(k.listing() for k in self._compiled())

    def inspect_types(self) -> str:
        """Each compiled signature and the type the compiler gave every variable."""
        out = []
        for k in self._compiled():
            out.append(f"{self.__name__}({', '.join(map(str, k.argtypes))})")
            out += [f"    {name}: {t}" for name, t in k.variable_types.items()]
        return "\n".join(out)

    def resources(self) -> str:
        """Registers, shared and local memory per signature, as ptxas -v reports them."""
        return "\n".join(k.resources() for k in self._compiled())

    def launch(self, args: tuple, grid, block, stream, shared: int) -> None:
        names = self._arg_names
        if len(args) != len(names):
            raise TypeError(f"kernel {self.__name__!r} takes {len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)}")
        if any(isinstance(a, np.ndarray) for a in args):
            self._launch_with_host_arrays(args, grid, block, stream, shared)
            return
        context = self.api.context_for(args, stream)
        try:
            argtypes = tuple([a._kind or _array_type(a) if type(a) is DeviceNDArray and a.context is context
                              else _argtype(a, i, names[i], context) for i, a in enumerate(args)])
        except TypeError:
            if not any(_foreign_array(a) for a in args):
                raise
            # numba takes any object with a CUDA Array Interface (a GPU tensor) as the device array it describes
            self.launch(tuple(self.api.as_cuda_array(a) if _foreign_array(a) else a for a in args), grid, block,
                        stream, shared)
            return
        if self.signatures:
            args, argtypes = self._fitted(args, argtypes)
        threads = block[0] * block[1] * block[2]
        device = context.device
        if threads > device.MAX_THREADS_PER_BLOCK:
            raise LaunchError(f"{threads} threads per block exceeds the limit of {device.MAX_THREADS_PER_BLOCK} "
                              f"on {device.name}")
        compiled = self.compile(argtypes)
        if compiled.shared_bytes + shared > device.MAX_SHARED_MEMORY_PER_BLOCK:
            raise LaunchError(f"kernel {self.__name__!r} needs {compiled.shared_bytes + shared} bytes of shared "
                              f"memory per block; {device.name} has {device.MAX_SHARED_MEMORY_PER_BLOCK}")
        if compiled.cooperative:
            self._check_cooperative(device, compiled, grid, threads, shared)
        hidden = [self._hidden(context, compiled, entry["name"]) for entry in compiled.arg_layout[len(args):]]
        kernargs = pack_kernargs(compiled.arg_layout, list(args) + hidden)
        if len(kernargs) > abi.MAX_KERNARG_BYTES:
            raise LaunchError(f"kernel {self.__name__!r} takes {len(kernargs)} bytes of arguments; the limit is "
                              f"{abi.MAX_KERNARG_BYTES}")
        queue, index = context.launch(compiled, kernargs, grid, block, shared, stream=stream,
                                      cooperative=compiled.cooperative)
        if trace.enabled():
            trace.emit(3, "launch", kernel=self.__name__, device=str(device), grid=grid, block=block,
                       registers=compiled.registers, shared_bytes=compiled.shared_bytes + shared,
                       args={n: (f"{a.dtype}{list(a.shape)} @ {a.ptr:#x}" if isinstance(a, DeviceNDArray) else a)
                             for n, a in zip(names, args, strict=True)},
                       kernarg_bytes=len(kernargs), kernarg_hex=kernargs.hex(),
                       instructions=len(compiled.instructions), queue=queue, packet_index=index)


    def _check_cooperative(self, device, compiled: CompiledKernel, grid: tuple, threads: int, shared: int) -> None:
        """A kernel that syncs its grid runs only if every block is resident at once (numba launches it
        cooperatively, and CUDA refuses a larger grid with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)."""
        limit = occupancy.max_cooperative_grid_blocks(device.properties, threads, compiled.registers,
                                                      compiled.shared_bytes + shared)
        blocks = grid[0] * grid[1] * grid[2]
        if blocks > limit:
            raise LaunchError(f"cooperative launch too large (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE): kernel "
                              f"{self.__name__!r} syncs its grid, so all {blocks} blocks must be resident at once, "
                              f"and {device.name} holds at most {limit} blocks of {threads} threads at once "
                              "(see max_cooperative_grid_blocks)")

    def max_cooperative_grid_blocks(self, blockdim, dynsmemsize: int = 0) -> int:
        """The most blocks of `blockdim` threads (and `dynsmemsize` bytes of dynamic shared memory) a cooperative
        launch of this kernel may have on the current device (numba's _Kernel.max_cooperative_grid_blocks); the
        kernel's last compiled signature decides its registers and shared memory."""
        return self._cooperative_limit(self._last[1] or self._compiled()[-1], blockdim, dynsmemsize)

    def _cooperative_limit(self, compiled: CompiledKernel, blockdim, dynsmemsize: int = 0) -> int:
        block = _dim3(blockdim, "the block (threads)")
        device = self.api.get_current_device()
        return occupancy.max_cooperative_grid_blocks(device.properties, block[0] * block[1] * block[2],
                                                     compiled.registers, compiled.shared_bytes + dynsmemsize)

    def _fitted(self, args: tuple, argtypes: tuple) -> tuple[tuple, tuple]:
        """The arguments as the first declared signature they fit takes them, and that signature (numba's
        matching of a typed kernel's launch)."""
        for signature in self.signatures:
            fitted = signatures_.fit(signature, args)
            if fitted is not None:
                return fitted, signature
        raise TypeError(f"no signature of kernel {self.__name__!r} fits arguments ({', '.join(map(str, argtypes))}); "
                        f"it has ({'), ('.join(', '.join(map(str, sig)) for sig in self.signatures)})")

    def _launch_with_host_arrays(self, args: tuple, grid, block, stream, shared: int) -> None:
        """numba's implicit copies: each host numpy array goes to the launch's device before it and, if
        writeable, comes back after it, so this launch returns once the kernel has run. A mapped array
        (`cuda.mapped_array`) is the GPU's already: it goes as its device view, with no copy."""
        args = tuple(a.device_view() if isinstance(a, MappedNDArray) else a for a in args)
        if not any(isinstance(a, np.ndarray) for a in args):
            self.launch(args, grid, block, stream, shared)
            return
        warnings.warn(f"host array(s) passed to kernel {self.__name__!r} are copied to the device and back, "
                      "and the launch waits for the kernel: copy them once with cuda.to_device instead",
                      PerformanceWarning, stacklevel=4)
        context = self.api.context_for(args, stream)
        moved = list(args)
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
                moved[i] = DeviceNDArray.allocate(context, a.shape, a.dtype, order)
                moved[i].copy_to_device(np.asarray(a, order=order), stream)
        self.launch(tuple(moved), grid, block, stream, shared)
        for a, d in zip(args, moved, strict=True):
            if isinstance(a, np.ndarray) and a.flags.writeable:
                a[...] = d.copy_to_host(stream=stream)

    def _hidden(self, context, compiled: CompiledKernel, name: str) -> DeviceNDArray:
        """The value of a hidden argument after the kernel's own: a constant array's copy, the grid barrier's word,
        or the printf FIFO."""
        if name.startswith("$const"):
            return self._const_copy(context, compiled.const_arrays[int(name[len("$const"):])])
        if name == BARRIER_WORD:
            return _grid_barrier(context)
        if name.startswith(CAPTURED):
            return _captured(context, compiled, name)
        return fifo_of(context).argument(compiled, name)

    def _const_copy(self, context, data: np.ndarray) -> DeviceNDArray:
        """A cuda.const.array_like array on the device: copied once per context, then reused."""
        key = (id(context), id(data))
        copy = self._const_copies.get(key)
        if copy is None:
            copy = self._const_copies[key] = DeviceNDArray.allocate(context, data.shape, data.dtype, "C")
            copy.copy_to_device(data)
        return copy


def _captured(context, compiled: CompiledKernel, name: str) -> DeviceNDArray:
    """The global device array a kernel reads (`Frontend.captured_device_array`), as it is now: numba captures it by
    reference, so writes to it between launches reach the kernel; it must still be on the launch's device with the
    dtype and shape the kernel compiled for."""
    module, _, global_name = name[len(CAPTURED):].partition(":")
    array = vars(sys.modules[module]).get(global_name)
    entry = next(e for e in compiled.arg_layout if e.get("name") == name)
    if not isinstance(array, DeviceNDArray) or array.context is not context or str(array.dtype) != entry["dtype"] \
            or list(array.shape) != entry["shape"]:
        raise LaunchError(f"global device array {global_name!r} of {module} is no longer the {entry['dtype']} array "
                          f"of shape {tuple(entry['shape'])} on {context.device} kernel {compiled.name!r} compiled "
                          "for")
    return array


def _grid_barrier(context) -> DeviceNDArray:
    """The word in which kernels syncing their grid count arrivals (`cooperative_groups.py`): one per context, as
    dispatches run one at a time; zeroed when made, and again after a fault, which may have stopped a kernel
    part-way through a barrier."""
    with context.lock:
        context.raise_completed_faults()
        if context.grid_barrier is None:
            context.grid_barrier, context.grid_barrier_dirty = DeviceNDArray.allocate(context, 1, np.uint32), True
        if context.grid_barrier_dirty:
            context.grid_barrier.copy_to_device(np.zeros(1, np.uint32))
            context.grid_barrier_dirty = False
        return context.grid_barrier


class LaunchConfiguration:
    def __init__(self, dispatcher: Dispatcher, grid, block, stream, shared: int):
        self.dispatcher, self.grid, self.block, self.stream, self.shared = dispatcher, grid, block, stream, shared

    def __call__(self, *args) -> None:
        self.dispatcher.launch(args, self.grid, self.block, self.stream, self.shared)
