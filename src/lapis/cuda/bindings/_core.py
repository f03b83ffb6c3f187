"""Layer 3: what the driver API's calls share: the CUresult a failure is reported as, the driver's state (its
handle table, the threads' context stacks), the call wrapper, and the look-ups of handles and arguments."""

import functools
import threading

import numpy as np
from cuda.bindings import driver as _real

from lapis import trace
from lapis.cuda import _api
from lapis.cuda.bindings._handles import ContextRecord, EventRecord, FunctionRecord, ModuleRecord, StreamRecord
from lapis.cuda.bindings._params import BadValue, as_address
from lapis.cuda.context import Stream
from lapis.cuda.errors import (
    CudaError,
    failure,
)

CUresult = _real.CUresult
R = CUresult


class DriverError(CudaError):
    """A driver call refused; `code` is the CUresult it returns."""

    def __init__(self, code: CUresult, message: str):
        super().__init__(message)
        self.code = code


def error_code(exc: Exception) -> CUresult:
    """The CUresult a failure is reported as."""
    if isinstance(exc, DriverError):
        return exc.code
    if isinstance(exc, BadValue):
        return R.CUDA_ERROR_INVALID_VALUE
    return FAILURE_CODES[failure(exc)]


FAILURE_CODES = {    # errors.failure's kinds -> the driver's codes
    "illegal_address": R.CUDA_ERROR_ILLEGAL_ADDRESS, "assert": R.CUDA_ERROR_ASSERT,
    "launch_timeout": R.CUDA_ERROR_LAUNCH_TIMEOUT, "launch_failed": R.CUDA_ERROR_LAUNCH_FAILED,
    "out_of_memory": R.CUDA_ERROR_OUT_OF_MEMORY, "launch_out_of_resources": R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
    "invalid_configuration": R.CUDA_ERROR_INVALID_VALUE, "invalid_handle": R.CUDA_ERROR_INVALID_HANDLE,
    "invalid_device": R.CUDA_ERROR_INVALID_DEVICE, "unknown": R.CUDA_ERROR_UNKNOWN}


class _State(threading.local):
    stack: list                                # the calling thread's context stack (its top is current)

    def __init__(self):
        self.stack = []


class _Driver:
    def __init__(self):
        self.initialized = False
        self.lock = threading.RLock()
        self.objects: dict[int, object] = {}   # handle value -> its record
        self.primary: dict[int, ContextRecord] = {}
        self.pinned: dict[int, np.ndarray] = {}    # cuMemAllocHost blocks by address
        self.thread = _State()


_state = _Driver()


def _entry(outputs: int = 0, init: bool = True):
    """Make a function a driver call: (CUresult, *results); a failure becomes its code, with None per result."""
    def wrap(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            try:
                if init and not _state.initialized:
                    raise DriverError(R.CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called")
                result = function(*args, **kwargs)
            except (CudaError, BadValue) as e:
                code = error_code(e)
                if code != R.CUDA_ERROR_NOT_READY:
                    trace.emit(3, "api_error", function=function.__name__, code=int(code), error=code.name,
                               message=str(e))
                return (code,) + (None,) * outputs
            return (R.CUDA_SUCCESS,) + ((result,) if outputs == 1 else tuple(result) if outputs else ())
        return call
    return wrap


# -- handles ----------------------------------------------------------------------------------------
def _record(handle, kind, code: CUresult, what: str):
    value = as_address(handle) if handle is not None else 0
    if value is None:
        raise TypeError(f"Argument '{what}' is not instance of type (expected <class 'int'>, {what})")
    record = _state.objects.get(value)
    if not isinstance(record, kind):
        raise DriverError(code, f"{handle!r} is not a live {what}")
    return record


def _register(record):
    with _state.lock:
        _state.objects[int(record.handle)] = record
    return record


def _forget(record) -> None:
    with _state.lock:
        _state.objects.pop(int(record.handle), None)


def _current(required: bool = True) -> ContextRecord | None:
    stack = _state.thread.stack
    ctx = stack[-1] if stack else None
    if ctx is not None and ctx.destroyed:
        ctx = None
    if ctx is None and required:
        raise DriverError(R.CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread (cuCtxCreate, or "
                          "cuDevicePrimaryCtxRetain and cuCtxSetCurrent)")
    return ctx


def _make_current(ctx: ContextRecord | None, push: bool = False) -> None:
    stack = _state.thread.stack
    if push or not stack:
        stack.append(ctx)
    else:
        stack[-1] = ctx
    if ctx is not None:
        _api.select_device(ctx.ordinal)        # the runtime API and lapis.cuda follow the current context


def _context(handle) -> ContextRecord:
    ctx = _record(handle, ContextRecord, R.CUDA_ERROR_INVALID_CONTEXT, "CUcontext")
    if ctx.destroyed:
        raise DriverError(R.CUDA_ERROR_INVALID_CONTEXT, f"{handle!r} was destroyed")
    return ctx


def _ordinal(dev) -> int:
    value = as_address(dev)
    if value is None:
        raise TypeError(f"Argument 'dev' is not instance of type (expected <class 'int'>, CUdevice), not {type(dev)}")
    count = _api.device_count()
    if count == 0:
        raise DriverError(R.CUDA_ERROR_NO_DEVICE, "no NVIDIA-profile GPU is simulated (LAPIS_GPUS)")
    if not 0 <= value < count:
        raise DriverError(R.CUDA_ERROR_INVALID_DEVICE, f"device {value} does not exist: {count} present")
    return value


def _stream(handle, ctx: ContextRecord | None = None) -> tuple[Stream, ContextRecord]:
    """A stream handle's lapis Stream and context: 0 (or CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is the default
    stream of `ctx`, else of the current context."""
    value = as_address(handle) if handle is not None else 0
    if value in (0, _real.CU_STREAM_LEGACY, _real.CU_STREAM_PER_THREAD):
        ctx = ctx or _current()
        return Stream(ctx.context), ctx
    record = _record(handle, StreamRecord, R.CUDA_ERROR_INVALID_HANDLE, "CUstream")
    if record.destroyed or record.ctx.destroyed:
        raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, f"{handle!r} was destroyed")
    return record.stream, record.ctx


def _function(handle) -> FunctionRecord:
    record = _record(handle, FunctionRecord, R.CUDA_ERROR_INVALID_HANDLE, "CUfunction")
    if record.module.unloaded or record.module.ctx.destroyed:
        raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, f"{handle!r}'s module was unloaded")
    return record


def _module(handle) -> ModuleRecord:
    record = _record(handle, ModuleRecord, R.CUDA_ERROR_INVALID_HANDLE, "CUmodule")
    if record.unloaded or record.ctx.destroyed:
        raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, f"{handle!r} was unloaded")
    return record


def _event(handle) -> EventRecord:
    return _record(handle, EventRecord, R.CUDA_ERROR_INVALID_HANDLE, "CUevent")


def _size(value, what: str) -> int:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"Argument '{what}' must be an integer, not {type(value).__name__}")
    if value < 0:
        raise OverflowError(f"can't convert negative value to size_t ({what})")
    return int(value)


def _name(name) -> str:
    if isinstance(name, bytes | bytearray):
        return bytes(name).split(b"\0")[0].decode()
    if isinstance(name, str):
        return name
    raise TypeError(f"Argument 'name' must be bytes, not {type(name).__name__}")
