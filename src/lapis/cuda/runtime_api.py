"""Layer 3: the CUDA runtime API's spelling of the host API (`cudaMalloc`, `cudaMemcpy`, ...) and HIP's.

One implementation, `RuntimeApi`, bound to an `Api` (so `lapis.cuda`'s sees the NVIDIA-profile
GPUs and `lapis.hip`'s the AMD-profile ones), over the same contexts, streams, events and
memory as the numba-style names.

The calling convention is cuda-python's (`from cuda import cudart`): every function returns a
tuple whose first item is the error code, followed by its results, or None for each result
when it failed: `err, ptr = cudaMalloc(n)`, `err, = cudaFree(ptr)`. A failure is also kept as
the calling thread's last error, which `cudaGetLastError` returns once and resets. Nothing
raises for a runtime error; a compile error in a kernel still raises `CompileError`, as it is
a build error in CUDA C, not a runtime one.

The HIP names come from the CUDA ones by one rule, "cuda" -> "hip", with the exceptions HIP
itself makes (`HIP_EXCEPTIONS`); `HIPIFY_TABLE` is that mapping with a kind per name, which
`lapis hipify` uses to rewrite programs.
"""

import functools
import threading
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from lapis import trace
from lapis.cuda.context import Event, Stream
from lapis.cuda.devicearray import Allocation, DeviceNDArray
from lapis.cuda.dispatcher import Dispatcher
from lapis.cuda.errors import (
    CudaError,
    failure,
)

# (CUDA name, code, cudaGetErrorString's text): the codes lapis returns, with CUDA's numbers (HIP uses the same).
ERRORS = [
    ("cudaSuccess", 0, "no error"),
    ("cudaErrorInvalidValue", 1, "invalid argument"),
    ("cudaErrorMemoryAllocation", 2, "out of memory"),
    ("cudaErrorInvalidConfiguration", 9, "invalid configuration argument"),
    ("cudaErrorInvalidMemcpyDirection", 21, "invalid copy direction for memcpy"),
    ("cudaErrorNoDevice", 100, "no CUDA-capable device is detected"),
    ("cudaErrorInvalidDevice", 101, "invalid device ordinal"),
    ("cudaErrorInvalidResourceHandle", 400, "invalid resource handle"),
    ("cudaErrorNotReady", 600, "device not ready"),
    ("cudaErrorIllegalAddress", 700, "an illegal memory access was encountered"),
    ("cudaErrorLaunchOutOfResources", 701, "too many resources requested for launch"),
    ("cudaErrorLaunchTimeout", 702, "the launch timed out and was terminated"),
    ("cudaErrorLaunchFailure", 719, "unspecified launch failure"),
    ("cudaErrorUnknown", 999, "unknown error"),
]
MEMCPY_KINDS = [("cudaMemcpyHostToHost", 0), ("cudaMemcpyHostToDevice", 1), ("cudaMemcpyDeviceToHost", 2),
                ("cudaMemcpyDeviceToDevice", 3), ("cudaMemcpyDefault", 4)]

# The functions RuntimeApi implements, by hipify-perl's kind of name.
FUNCTIONS = {
    "memory": ["cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
               "cudaMemGetInfo"],
    "stream": ["cudaStreamCreate", "cudaStreamDestroy", "cudaStreamSynchronize", "cudaStreamQuery",
               "cudaStreamWaitEvent"],
    "event": ["cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize", "cudaEventQuery", "cudaEventElapsedTime",
              "cudaEventDestroy"],
    "device": ["cudaDeviceSynchronize", "cudaGetDeviceCount", "cudaSetDevice", "cudaGetDevice",
               "cudaGetDeviceProperties"],
    "error": ["cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString", "cudaGetErrorName"],
    "execution": ["cudaLaunchKernel"],
}
TYPES = ["cudaError_t", "cudaMemcpyKind", "cudaStream_t", "cudaEvent_t", "cudaDeviceProp"]

# Where HIP does not just say "hip" for "cuda"; CudaError is lapis's exception (lapis.hip.HipError).
HIP_EXCEPTIONS = {"cudaErrorMemoryAllocation": "hipErrorOutOfMemory", "cudaErrorInvalidResourceHandle":
                  "hipErrorInvalidHandle", "cudaDeviceProp": "hipDeviceProp_t", "CudaError": "HipError"}


def hip_name(cuda_name: str) -> str:
    if cuda_name in HIP_EXCEPTIONS:
        return HIP_EXCEPTIONS[cuda_name]
    if not cuda_name.startswith("cuda"):
        raise ValueError(f"{cuda_name!r} is not a CUDA runtime-API name")
    return "hip" + cuda_name[4:]


# Every CUDA name lapis knows a HIP name for: {CUDA name: (HIP name, kind)}; kinds as hipify-perl counts them.
HIPIFY_TABLE: dict[str, tuple[str, str]] = {
    **{name: (hip_name(name), kind) for kind, names in FUNCTIONS.items() for name in names},
    **{name: (hip_name(name), "type") for name in [*TYPES, "CudaError"]},
    **{name: (hip_name(name), "numeric_literal") for name, *_ in ERRORS + MEMCPY_KINDS},
}

cudaError_t = IntEnum("cudaError_t", [(name, code) for name, code, _ in ERRORS])
hipError_t = IntEnum("hipError_t", [(hip_name(name), code) for name, code, _ in ERRORS])
cudaMemcpyKind = IntEnum("cudaMemcpyKind", MEMCPY_KINDS)
hipMemcpyKind = IntEnum("hipMemcpyKind", [(hip_name(name), value) for name, value in MEMCPY_KINDS])
_MESSAGES = {code: text for _, code, text in ERRORS}
_HOST_TO_HOST, _HOST_TO_DEVICE, _DEVICE_TO_HOST, _DEVICE_TO_DEVICE, _DEFAULT = range(5)


class ApiError(CudaError):
    """A runtime-API call refused (its arguments, or a state CUDA reports with a code); `code` is the
    cudaError_t value it returns."""

    def __init__(self, code: cudaError_t, message: str):
        super().__init__(message)
        self.code = code


def error_code(exc: CudaError) -> cudaError_t:
    """The cudaError_t a failure is reported as."""
    if isinstance(exc, ApiError):
        return exc.code
    return FAILURE_CODES[failure(exc)]


FAILURE_CODES = {    # errors.failure's kinds -> the runtime's codes (a device assert: an unspecified launch failure)
    "illegal_address": cudaError_t.cudaErrorIllegalAddress, "assert": cudaError_t.cudaErrorLaunchFailure,
    "launch_timeout": cudaError_t.cudaErrorLaunchTimeout, "launch_failed": cudaError_t.cudaErrorLaunchFailure,
    "out_of_memory": cudaError_t.cudaErrorMemoryAllocation,
    "launch_out_of_resources": cudaError_t.cudaErrorLaunchOutOfResources,
    "invalid_configuration": cudaError_t.cudaErrorInvalidConfiguration,
    "invalid_handle": cudaError_t.cudaErrorInvalidResourceHandle,
    "invalid_device": cudaError_t.cudaErrorInvalidDevice, "unknown": cudaError_t.cudaErrorUnknown}


class DevicePointer(int):
    """A device address from cudaMalloc: an int, as cuda-python gives, that also knows its allocation.
    Arithmetic keeps it a pointer (`p + 16`); `as_array` views it as a 1-D device array for a kernel."""

    def __new__(cls, address: int, allocation: Allocation | None = None, context=None):
        pointer = super().__new__(cls, address)
        pointer.allocation, pointer.context = allocation, context
        return pointer

    def __add__(self, offset):
        return DevicePointer(int(self) + int(offset), self.allocation, self.context)

    __radd__ = __add__

    def __sub__(self, other):
        if isinstance(other, DevicePointer):
            return int(self) - int(other)
        return DevicePointer(int(self) - int(other), self.allocation, self.context)

    def as_array(self, dtype, count: int | None = None) -> DeviceNDArray:
        """`count` elements of `dtype` from here (by default, as many as fit in the allocation): what
        a kernel parameter `float* p` is in CUDA C, as the array a numba-style kernel takes."""
        dtype = np.dtype(dtype)
        if self.allocation is None or self.allocation.freed:
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{self!r} points at no live allocation")
        left = self.allocation.va + self.allocation.size - int(self)
        count = left // dtype.itemsize if count is None else int(count)
        if not 0 <= count * dtype.itemsize <= left:
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{count} x {dtype} from {self!r} overruns its "
                           f"allocation of {self.allocation.size} bytes at {self.allocation.va:#x}")
        return DeviceNDArray((count,), (dtype.itemsize,), dtype, self.context, self.allocation, int(self))

    def __repr__(self) -> str:
        return f"DevicePointer({int(self):#x})"


@dataclass
class DeviceProp:
    """cudaGetDeviceProperties' struct (cudaDeviceProp, hipDeviceProp_t), the fields lapis models."""
    name: str
    totalGlobalMem: int
    sharedMemPerBlock: int
    regsPerMultiprocessor: int
    warpSize: int
    maxThreadsPerBlock: int
    maxThreadsPerMultiProcessor: int
    clockRate: int                  # kHz
    memoryClockRate: int            # kHz
    multiProcessorCount: int
    l2CacheSize: int
    sharedMemPerMultiprocessor: int
    major: int
    minor: int


def _entry(outputs: int = 0):
    """Make a RuntimeApi method a runtime-API function: (code, *results); a CudaError becomes its code,
    kept as the thread's last error, with None for each result. cudaErrorNotReady is an answer, not
    an error, and is not kept (as in CUDA)."""
    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            try:
                result = method(self, *args, **kwargs)
            except CudaError as e:
                code = error_code(e)
                if code != cudaError_t.cudaErrorNotReady:
                    self._last.code = code
                    trace.emit(3, "api_error", function=self._name(method.__name__), code=int(code),
                               error=self.errors(code).name, message=str(e))
                return (self.errors(code),) + (None,) * outputs
            return (self.success,) + ((result,) if outputs == 1 else tuple(result) if outputs else ())
        return call
    return wrap


def _size(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{what} must be a non-negative integer, not {value!r}")
    return int(value)


def _host_bytes(ary, count: int, writable: bool) -> np.ndarray:
    """The first `count` bytes of a host numpy array, as a flat uint8 view of its memory."""
    if not isinstance(ary, np.ndarray):
        raise ApiError(cudaError_t.cudaErrorInvalidValue, f"host memory must be a numpy array, not "
                       f"{type(ary).__name__}")
    if not ary.flags.c_contiguous or (writable and not ary.flags.writeable):
        raise ApiError(cudaError_t.cudaErrorInvalidValue, "host memory must be a C-contiguous"
                       + (" writable" if writable else "") + " numpy array")
    if count > ary.nbytes:
        raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{count} bytes overrun the host array of {ary.nbytes}")
    return ary.reshape(-1).view(np.uint8)[:count]


class _LastError(threading.local):
    code = cudaError_t.cudaSuccess


class RuntimeApi:
    """The runtime-API functions over one `Api`, in CUDA's spelling (flavor "cuda") or HIP's ("hip")."""

    def __init__(self, api, flavor: str = "cuda"):
        if flavor not in ("cuda", "hip"):
            raise ValueError(f"flavor must be 'cuda' or 'hip', not {flavor!r}")
        self.api, self.flavor = api, flavor
        self.errors = cudaError_t if flavor == "cuda" else hipError_t
        self.success = self.errors(0)
        self._last = _LastError()
        self._malloced: dict[int, Allocation] = {}      # what cudaFree may free, by address
        self._lock = threading.Lock()

    def _name(self, cuda_name: str) -> str:
        return cuda_name if self.flavor == "cuda" else hip_name(cuda_name)

    def namespace(self) -> dict:
        """The public names in this flavor: functions, types, error codes, memcpy kinds."""
        names = {self._name(n): getattr(self, n) for names in FUNCTIONS.values() for n in names}
        kinds = cudaMemcpyKind if self.flavor == "cuda" else hipMemcpyKind
        names.update({self._name("cudaError_t"): self.errors, self._name("cudaMemcpyKind"): kinds,
                      self._name("cudaStream_t"): Stream, self._name("cudaEvent_t"): Event,
                      self._name("cudaDeviceProp"): DeviceProp})
        names.update({member.name: member for member in (*self.errors, *kinds)})
        if self.flavor == "hip":
            names["hipLaunchKernelGGL"] = self.hipLaunchKernelGGL
        return names

    # -- device memory addresses --------------------------------------------------------------
    def _device(self, address, count: int):
        """(context, address) of `count` bytes of device memory at a DevicePointer, int or DeviceNDArray."""
        if isinstance(address, DeviceNDArray):
            address = address.ptr
        if isinstance(address, bool) or not isinstance(address, int | np.integer):
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"a device address must be a pointer from "
                           f"{self._name('cudaMalloc')} or a device array, not {type(address).__name__}")
        try:
            return self.api.device_range(int(address), count)
        except ValueError as e:
            raise ApiError(cudaError_t.cudaErrorInvalidValue, str(e)) from None

    @staticmethod
    def _is_device(obj) -> bool:
        return isinstance(obj, DeviceNDArray | int | np.integer) and not isinstance(obj, bool)

    # -- memory -------------------------------------------------------------------------------
    @_entry(1)
    def cudaMalloc(self, size) -> DevicePointer:
        size = _size(size, "size")
        if size == 0:
            return DevicePointer(0)
        context = self.api.context()
        allocation = Allocation(context, context.allocate(size), size)
        with self._lock:
            self._malloced[allocation.va] = allocation
        return DevicePointer(allocation.va, allocation, context)

    @_entry()
    def cudaFree(self, pointer) -> None:
        if pointer is None or pointer == 0:
            return          # freeing NULL does nothing, as in C
        if isinstance(pointer, bool) or not isinstance(pointer, int | np.integer):
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{pointer!r} is not a device pointer")
        with self._lock:
            allocation = self._malloced.pop(int(pointer), None)
        if allocation is None:
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{int(pointer):#x} was not returned by "
                           f"{self._name('cudaMalloc')}, or was freed already")
        allocation.free()

    @_entry(2)
    def cudaMemGetInfo(self) -> tuple[int, int]:
        return self.api.context().get_memory_info()

    def _memcpy(self, dst, src, count, kind, stream) -> None:
        count = _size(count, "count")
        try:
            kind = _DEFAULT if isinstance(kind, bool) else int(kind)
        except (TypeError, ValueError):
            kind = -1
        if kind not in range(5):
            raise ApiError(cudaError_t.cudaErrorInvalidMemcpyDirection, f"{kind!r} is not a memcpy kind")
        if kind == _DEFAULT:        # unified addressing: the kind follows from where each side lives
            kind = {(True, False): _HOST_TO_DEVICE, (False, True): _DEVICE_TO_HOST,        # (dst, src) on the device
                    (True, True): _DEVICE_TO_DEVICE}.get((self._is_device(dst), self._is_device(src)), _HOST_TO_HOST)
        if kind == _HOST_TO_HOST:
            _host_bytes(dst, count, writable=True)[:] = _host_bytes(src, count, writable=False)
        elif kind == _HOST_TO_DEVICE:
            context, address = self._device(dst, count)
            data = _host_bytes(src, count, writable=False)
            if count:
                context.copy_to_device(address, data, self._stream(stream))
        elif kind == _DEVICE_TO_HOST:
            context, address = self._device(src, count)
            into = _host_bytes(dst, count, writable=True)
            if count:
                context.copy_to_host(address, count, self._stream(stream), into)
        else:
            context, to = self._device(dst, count)
            source_context, address = self._device(src, count)
            if source_context is not context:
                raise ApiError(cudaError_t.cudaErrorInvalidValue, "copies between devices (peer copies) are not "
                               "supported: copy through the host")
            if count:
                context.copy_on_device(to, address, count, self._stream(stream))

    @staticmethod
    def _stream(stream):
        """A stream argument: a Stream, or 0/None for the default stream (the context refuses a
        destroyed stream, or one of another device, as an invalid handle)."""
        if not (stream is None or isinstance(stream, Stream) or (type(stream) is int and stream == 0)):
            raise ApiError(cudaError_t.cudaErrorInvalidResourceHandle, f"{stream!r} is not a stream")
        return stream

    @_entry()
    def cudaMemcpy(self, dst, src, count, kind) -> None:
        self._memcpy(dst, src, count, kind, None)

    @_entry()
    def cudaMemcpyAsync(self, dst, src, count, kind, stream=0) -> None:
        """Ordered after the stream's earlier work; lapis copies synchronously, so it has finished on return."""
        self._memcpy(dst, src, count, kind, stream)

    def _memset(self, pointer, value, count, stream) -> None:
        count = _size(count, "count")
        context, address = self._device(pointer, count)
        context.fill(address, value, count, np.uint8, self._stream(stream))

    @_entry()
    def cudaMemset(self, pointer, value, count) -> None:
        """Set `count` bytes to the low byte of `value`: lapis uploads a filled host buffer (no fill packet), 64 MiB
        at a time at most."""
        self._memset(pointer, value, count, None)

    @_entry()
    def cudaMemsetAsync(self, pointer, value, count, stream=0) -> None:
        self._memset(pointer, value, count, stream)

    # -- streams ------------------------------------------------------------------------------
    def _stream_context(self, stream):
        return self.api.context_for((), self._stream(stream))

    @_entry(1)
    def cudaStreamCreate(self) -> Stream:
        return self.api.stream()

    @_entry()
    def cudaStreamDestroy(self, stream) -> None:
        if not isinstance(stream, Stream):
            raise ApiError(cudaError_t.cudaErrorInvalidResourceHandle, f"{stream!r} is not a stream")
        stream.context.destroy_stream(stream)

    @_entry()
    def cudaStreamSynchronize(self, stream) -> None:
        self._stream_context(stream).synchronize_stream(stream)

    @_entry()
    def cudaStreamQuery(self, stream) -> None:
        if not self._stream_context(stream).stream_done(stream):
            raise ApiError(cudaError_t.cudaErrorNotReady, "the stream has work in flight")

    @_entry()
    def cudaStreamWaitEvent(self, stream, event, flags: int = 0) -> None:
        """Later work on `stream` waits for `event`: lapis waits on the host (see Event.wait)."""
        self._event(event).wait(self._stream(stream))

    # -- events -------------------------------------------------------------------------------
    @staticmethod
    def _event(event) -> Event:
        if not isinstance(event, Event):
            raise ApiError(cudaError_t.cudaErrorInvalidResourceHandle, f"{event!r} is not an event")
        return event

    @_entry(1)
    def cudaEventCreate(self) -> Event:
        return self.api.event(timing=True)

    @_entry()
    def cudaEventRecord(self, event, stream=0) -> None:
        self._event(event).record(self._stream(stream))

    @_entry()
    def cudaEventSynchronize(self, event) -> None:
        self._event(event).synchronize()

    @_entry()
    def cudaEventQuery(self, event) -> None:
        if not self._event(event).query():
            raise ApiError(cudaError_t.cudaErrorNotReady, "the device has not reached the event yet")

    @_entry(1)
    def cudaEventElapsedTime(self, start, end) -> float:
        """Milliseconds between two completed events; cudaErrorNotReady if either is still pending."""
        for event in (self._event(start), self._event(end)):
            if event.context is not None and not event.query():
                raise ApiError(cudaError_t.cudaErrorNotReady, f"{event!r} has not completed")
        return start.elapsed_time(end)

    @_entry()
    def cudaEventDestroy(self, event) -> None:
        self._event(event).destroy()

    # -- devices ------------------------------------------------------------------------------
    def _ordinal(self, device) -> int:
        count = self.api.device_count()
        if count == 0:
            raise ApiError(cudaError_t.cudaErrorNoDevice, f"no {self.api.vendor} GPU is simulated (LAPIS_GPUS)")
        if isinstance(device, bool) or not isinstance(device, int | np.integer) or not 0 <= device < count:
            raise ApiError(cudaError_t.cudaErrorInvalidDevice, f"device {device!r} does not exist: "
                           f"{count} present")
        return int(device)

    @_entry()
    def cudaDeviceSynchronize(self) -> None:
        self.api.context().synchronize()

    @_entry(1)
    def cudaGetDeviceCount(self) -> int:
        self._ordinal(0)
        return self.api.device_count()

    @_entry()
    def cudaSetDevice(self, device) -> None:
        self.api.select_device(self._ordinal(device))

    @_entry(1)
    def cudaGetDevice(self) -> int:
        return self.api.get_current_device().id

    @_entry(1)
    def cudaGetDeviceProperties(self, device) -> DeviceProp:
        p = self.api.context(self._ordinal(device)).agent.properties
        major, minor = p.compute_capability
        return DeviceProp(
            name=p.marketing_name, totalGlobalMem=p.memory_bytes, sharedMemPerBlock=p.shared_per_block,
            regsPerMultiprocessor=p.registers_per_unit, warpSize=p.warp_size,
            maxThreadsPerBlock=p.max_threads_per_block, maxThreadsPerMultiProcessor=p.max_threads_per_unit,
            clockRate=round(p.clock_ghz * 1e6), memoryClockRate=round(p.memory_clock_mhz * 1e3),
            multiProcessorCount=p.compute_units, l2CacheSize=p.reported_l2_bytes,
            sharedMemPerMultiprocessor=p.shared_per_unit, major=major, minor=minor)

    # -- errors -------------------------------------------------------------------------------
    def cudaGetLastError(self) -> tuple:
        """The calling thread's last error, reset to success."""
        code, self._last.code = self._last.code, cudaError_t.cudaSuccess
        return (self.errors(code),)

    def cudaPeekAtLastError(self) -> tuple:
        return (self.errors(self._last.code),)

    def cudaGetErrorString(self, error) -> tuple:
        text = _MESSAGES.get(int(error), "unrecognized error code")
        return self.success, text if self.flavor == "cuda" else text.replace("CUDA", "ROCm")

    def cudaGetErrorName(self, error) -> tuple:
        try:
            return self.success, self.errors(int(error)).name
        except ValueError:
            return self.success, "unrecognized error code"

    # -- launches -----------------------------------------------------------------------------
    @_entry()
    def cudaLaunchKernel(self, kernel, grid, block, args=(), shared_bytes: int = 0, stream=0) -> None:
        """Launch a `@jit` kernel: `args` is the tuple of its arguments (device arrays, numbers; a
        DevicePointer for an array parameter goes as `ptr.as_array(dtype, count)`)."""
        if not isinstance(kernel, Dispatcher):
            raise ApiError(cudaError_t.cudaErrorInvalidValue, f"{kernel!r} is not a kernel (a @jit function)")
        for i, a in enumerate(args):
            if isinstance(a, DevicePointer):
                raise ApiError(cudaError_t.cudaErrorInvalidValue, f"argument {i} is a bare pointer; a kernel takes "
                               "arrays: pass ptr.as_array(dtype, count)")
        try:
            kernel[grid, block, self._stream(stream), _size(shared_bytes, "shared_bytes")](*args)
        except TypeError as e:      # the arguments do not fit the kernel
            raise ApiError(cudaError_t.cudaErrorInvalidValue, str(e)) from None

    def hipLaunchKernelGGL(self, kernel, grid, block, shared_bytes, stream, *args) -> None:
        """HIP's launch macro, in its argument order. Like `kernel<<<...>>>` it returns nothing: check
        hipGetLastError()."""
        self.cudaLaunchKernel(kernel, grid, block, args, shared_bytes, stream)
