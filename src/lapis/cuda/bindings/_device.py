"""Layer 3: the driver API's devices, contexts, memory, streams and events (see `driver`)."""

import numpy as np
from cuda.bindings import driver as _real

from lapis.cuda import _api
from lapis.cuda.bindings._core import (
    DriverError,
    R,
    _context,
    _current,
    _entry,
    _event,
    _forget,
    _make_current,
    _ordinal,
    _register,
    _size,
    _state,
    _stream,
)
from lapis.cuda.bindings._handles import (
    ContextRecord,
    CUcontext,
    CUdevice,
    CUdeviceptr,
    CUevent,
    CUstream,
    EventRecord,
    StreamRecord,
    new_value,
)
from lapis.cuda.bindings._params import as_address, host_view
from lapis.cuda.context import BLOCK_LIMITS, GRID_LIMITS, Event
from lapis.cuda.devicearray import Allocation, DeviceNDArray
from lapis.cuda.errors import CudaError

A = _real.CUdevice_attribute


def _properties(ordinal: int):
    return _api.context(ordinal).device.properties


def _bus_width(p) -> int:
    """Bits of the memory bus, from the bandwidth and the (double data rate) memory clock, in whole 1024-bit HBM
    stacks: lapis's profiles give the bandwidth, not the width."""
    bits = p.memory_bandwidth * 8 / (2 * p.memory_clock_mhz * 1e6)
    return max(1024, round(bits / 1024) * 1024)


# cuDeviceGetAttribute: each attribute lapis models, from the device's properties
_ATTRIBUTES = {
    A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: lambda p: p.max_threads_per_block,
    A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: lambda p: BLOCK_LIMITS[0],
    A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: lambda p: BLOCK_LIMITS[1],
    A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: lambda p: BLOCK_LIMITS[2],
    A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: lambda p: GRID_LIMITS[0],
    A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: lambda p: GRID_LIMITS[1],
    A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: lambda p: GRID_LIMITS[2],
    # without opting in (cuFuncSetAttribute), a block has 48 KiB of shared memory, as in CUDA
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: lambda p: min(48 * 1024, p.shared_per_block),
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: lambda p: p.shared_per_block,
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: lambda p: p.shared_per_unit,
    A.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: lambda p: p.shared_per_unit - p.shared_per_block,
    A.CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: lambda p: 64 * 1024,
    A.CU_DEVICE_ATTRIBUTE_WARP_SIZE: lambda p: p.warp_size,
    A.CU_DEVICE_ATTRIBUTE_MAX_PITCH: lambda p: 2**31 - 1,
    A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: lambda p: p.registers_per_unit,
    A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: lambda p: p.registers_per_unit,
    A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE: lambda p: round(p.clock_ghz * 1e6),              # kHz
    A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: lambda p: round(p.memory_clock_mhz * 1e3),  # kHz
    A.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: _bus_width,
    A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: lambda p: p.reported_l2_bytes,
    A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: lambda p: p.compute_units,
    A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: lambda p: p.max_threads_per_unit,
    A.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: lambda p: p.max_blocks_per_unit,
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: lambda p: p.compute_capability[0],
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: lambda p: p.compute_capability[1],
    A.CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: lambda p: 512,
    A.CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_INTEGRATED: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_ECC_ENABLED: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_TCC_DRIVER: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: lambda p: 0,
    A.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: lambda p: 1,
    A.CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: lambda p: 0,
}


# -- devices ----------------------------------------------------------------------------------------
@_entry(1)
def cuDeviceGet(ordinal):  # noqa: N802, N803 - cuda-python's names
    return CUdevice(_ordinal(ordinal))


@_entry(1)
def cuDeviceGetCount():  # noqa: N802
    return _api.device_count()


@_entry(1)
def cuDeviceGetName(length, dev):  # noqa: N802
    """The name, NUL-terminated, in a buffer of `length` bytes (as cuda-python gives it: strip at the NUL)."""
    length = _size(length, "length")
    name = _properties(_ordinal(dev)).marketing_name.encode()[:max(length - 1, 0)] + b"\0"
    return (name + b" " * length)[:length]


@_entry(1)
def cuDeviceGetAttribute(attrib, dev):  # noqa: N802
    if not isinstance(attrib, A):
        raise TypeError(f"Argument 'attrib' is not instance of type (expected {A})")
    p = _properties(_ordinal(dev))
    if attrib not in _ATTRIBUTES:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"lapis does not model {attrib.name}")
    return int(_ATTRIBUTES[attrib](p))


@_entry(1)
def cuDeviceTotalMem(dev):  # noqa: N802
    return _properties(_ordinal(dev)).memory_bytes


@_entry(2)
def cuDeviceComputeCapability(dev):  # noqa: N802
    return tuple(_properties(_ordinal(dev)).compute_capability)


# -- contexts ---------------------------------------------------------------------------------------
def _new_context(ordinal: int, primary: bool) -> ContextRecord:
    return _register(ContextRecord(CUcontext(new_value()), ordinal, _api.context(ordinal), primary=primary))


def _release(ctx: ContextRecord) -> None:
    """Free what was made in a context: its memory (after its work), streams and modules."""
    try:
        ctx.context.synchronize()
    except CudaError:           # a fault of its work goes with the context
        pass
    for allocation in list(ctx.allocations.values()):
        allocation.free()
    ctx.allocations.clear()
    for record in ctx.streams:
        if not record.destroyed:
            record.destroyed = True
            ctx.context.destroy_stream(record.stream)
        _forget(record)
    for module in ctx.modules:
        module.unloaded = True
        _forget(module)
        for function in module.functions.values():
            _forget(function)
    ctx.streams.clear()
    ctx.modules.clear()


@_entry(1)
def cuCtxCreate(ctxCreateParams, flags, dev=None):  # noqa: N802, N803
    """A new context on `dev`, made current (pushed) on the calling thread. It shares the device's lapis context
    (one a device) with every other; what is allocated, loaded or created in it goes with cuCtxDestroy. cuda-python
    12's form, cuCtxCreate(flags, dev), is accepted too."""
    if dev is None:
        flags, dev = ctxCreateParams, flags
    ctx = _new_context(_ordinal(dev), primary=False)
    _make_current(ctx, push=True)
    return ctx.handle


@_entry()
def cuCtxDestroy(ctx):  # noqa: N802
    record = _context(ctx)
    if record.primary:
        raise DriverError(R.CUDA_ERROR_INVALID_CONTEXT, "a primary context goes with cuDevicePrimaryCtxRelease, "
                          "not cuCtxDestroy")
    _release(record)
    record.destroyed = True
    _forget(record)
    stack = _state.thread.stack           # popped if current here (other threads' stacks skip it: see _current)
    while record in stack:
        stack.remove(record)


@_entry()
def cuCtxSynchronize():  # noqa: N802
    _current().context.synchronize()


@_entry(1)
def cuCtxGetCurrent():  # noqa: N802
    ctx = _current(required=False)
    return ctx.handle if ctx is not None else CUcontext(0)


@_entry()
def cuCtxSetCurrent(ctx):  # noqa: N802
    _make_current(None if ctx is None or as_address(ctx) == 0 else _context(ctx))


@_entry()
def cuCtxPushCurrent(ctx):  # noqa: N802
    _make_current(_context(ctx), push=True)


@_entry(1)
def cuCtxPopCurrent():  # noqa: N802
    stack = _state.thread.stack
    if not stack:
        raise DriverError(R.CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread")
    ctx = stack.pop()
    if stack and stack[-1] is not None:
        _api.select_device(stack[-1].ordinal)
    return ctx.handle if ctx is not None else CUcontext(0)


@_entry(1)
def cuCtxGetDevice():  # noqa: N802
    return CUdevice(_current().ordinal)


@_entry(1)
def cuDevicePrimaryCtxRetain(dev):  # noqa: N802
    """The device's primary context (one a device, the runtime API's), retained; not made current."""
    ordinal = _ordinal(dev)
    with _state.lock:
        ctx = _state.primary.get(ordinal)
        if ctx is None:
            ctx = _state.primary[ordinal] = _new_context(ordinal, primary=True)
        ctx.refcount += 1
        ctx.destroyed = False
    return ctx.handle


@_entry()
def cuDevicePrimaryCtxRelease(dev):  # noqa: N802
    ctx = _state.primary.get(_ordinal(dev))
    if ctx is None or ctx.refcount == 0:
        raise DriverError(R.CUDA_ERROR_INVALID_CONTEXT, f"device {int(dev)}'s primary context is not retained")
    ctx.refcount -= 1
    if ctx.refcount == 0:
        _release(ctx)


@_entry()
def cuDevicePrimaryCtxReset(dev):  # noqa: N802
    ctx = _state.primary.get(_ordinal(dev))
    if ctx is not None:
        _release(ctx)


# -- memory -----------------------------------------------------------------------------------------
def _device(pointer, nbytes: int):
    """(lapis context, address) of `nbytes` of device memory at a CUdeviceptr, an int or a device array."""
    if isinstance(pointer, DeviceNDArray):
        pointer = pointer.ptr
    address = as_address(pointer)
    if address is None:
        raise TypeError(f"Argument 'dstDevice' is not instance of type (expected <class 'int'>, CUdeviceptr), "
                        f"not {type(pointer).__name__}")
    try:
        return _api.device_range(address, nbytes)
    except ValueError as e:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, str(e)) from None


def _copy_stream(h_stream, context):
    """The lapis stream a copy in `context` goes on: None (its default stream) for 0, else the stream's."""
    if h_stream is None or as_address(h_stream) in (0, _real.CU_STREAM_LEGACY, _real.CU_STREAM_PER_THREAD):
        return None
    stream, ctx = _stream(h_stream)
    if ctx.context is not context:
        raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, f"{h_stream!r} is a stream of another device")
    return stream


@_entry(1)
def cuMemAlloc(bytesize):  # noqa: N802
    size = _size(bytesize, "bytesize")
    if size == 0:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes")
    ctx = _current()
    allocation = Allocation(ctx.context, ctx.context.allocate(size), size)
    ctx.allocations[allocation.va] = allocation
    return CUdeviceptr(allocation.va)


@_entry()
def cuMemFree(dptr):  # noqa: N802
    address = as_address(dptr)
    if address is None:
        raise TypeError("Argument 'dptr' is not instance of type (expected <class 'int'>, CUdeviceptr)")
    for ctx in [r for r in list(_state.objects.values()) if isinstance(r, ContextRecord)]:
        allocation = ctx.allocations.pop(address, None)
        if allocation is not None:
            allocation.free()
            return
    raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{address:#x} was not returned by cuMemAlloc, or was freed")


@_entry(2)
def cuMemGetInfo():  # noqa: N802
    return tuple(_current().context.get_memory_info())


def _pinned(bytesize) -> int:
    """Pinned host memory of the current context's device, as an address (cuda-python's int)."""
    size = _size(bytesize, "bytesize")
    array = _current().context.pinned_array(max(size, 1), np.uint8)
    address = array.ctypes.data
    _state.pinned[address] = array
    return address


@_entry(1)
def cuMemAllocHost(bytesize):  # noqa: N802
    return _pinned(bytesize)


@_entry(1)
def cuMemHostAlloc(bytesize, Flags):  # noqa: N802, N803
    """cuMemAllocHost's memory (the flags ask for what lapis's pinned memory always is)."""
    return _pinned(bytesize)


@_entry()
def cuMemFreeHost(p):  # noqa: N802
    if _state.pinned.pop(as_address(p) or 0, None) is None:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{p!r} was not returned by cuMemAllocHost")


def _htod(dst, src, count, h_stream) -> None:
    count = _size(count, "ByteCount")
    context, address = _device(dst, count)
    data = host_view(src, count, _state.pinned)
    if count:
        context.copy_to_device(address, data, _copy_stream(h_stream, context))


def _dtoh(dst, src, count, h_stream) -> None:
    count = _size(count, "ByteCount")
    context, address = _device(src, count)
    into = host_view(dst, count, _state.pinned)
    if count:
        context.copy_to_host(address, count, _copy_stream(h_stream, context), into)


def _dtod(dst, src, count, h_stream) -> None:
    count = _size(count, "ByteCount")
    context, to = _device(dst, count)
    source, address = _device(src, count)
    if source is not context:
        raise DriverError(R.CUDA_ERROR_NOT_SUPPORTED, "copies between devices are not supported: copy through the "
                          "host")
    if count:
        context.copy_on_device(to, address, count, _copy_stream(h_stream, context))


def _unified(dst, src, count, h_stream) -> None:
    """cuMemcpy: each side is device memory when it is an address in a live allocation."""
    def on_device(x):
        address = x.ptr if isinstance(x, DeviceNDArray) else as_address(x)
        return address is not None and _api.owner_of(address) is not None
    copy = {(True, False): _htod, (False, True): _dtoh, (True, True): _dtod}.get((on_device(dst), on_device(src)))
    if copy is None:
        count = _size(count, "ByteCount")
        host_view(dst, count, _state.pinned)[:] = host_view(src, count, _state.pinned)
    else:
        copy(dst, src, count, h_stream)


@_entry()
def cuMemcpyHtoD(dstDevice, srcHost, ByteCount):  # noqa: N802, N803
    _htod(dstDevice, srcHost, ByteCount, None)


@_entry()
def cuMemcpyHtoDAsync(dstDevice, srcHost, ByteCount, hStream):  # noqa: N802, N803
    """Ordered on the stream; lapis copies synchronously, so it has finished when it returns."""
    _htod(dstDevice, srcHost, ByteCount, hStream)


@_entry()
def cuMemcpyDtoH(dstHost, srcDevice, ByteCount):  # noqa: N802, N803
    _dtoh(dstHost, srcDevice, ByteCount, None)


@_entry()
def cuMemcpyDtoHAsync(dstHost, srcDevice, ByteCount, hStream):  # noqa: N802, N803
    _dtoh(dstHost, srcDevice, ByteCount, hStream)


@_entry()
def cuMemcpyDtoD(dstDevice, srcDevice, ByteCount):  # noqa: N802, N803
    _dtod(dstDevice, srcDevice, ByteCount, None)


@_entry()
def cuMemcpyDtoDAsync(dstDevice, srcDevice, ByteCount, hStream):  # noqa: N802, N803
    _dtod(dstDevice, srcDevice, ByteCount, hStream)


@_entry()
def cuMemcpy(dst, src, ByteCount):  # noqa: N802, N803
    _unified(dst, src, ByteCount, None)


@_entry()
def cuMemcpyAsync(dst, src, ByteCount, hStream):  # noqa: N802, N803
    _unified(dst, src, ByteCount, hStream)


def _memset(pointer, value, count, dtype, h_stream) -> None:
    count = _size(count, "N")
    itemsize = np.dtype(dtype).itemsize
    context, address = _device(pointer, count * itemsize)
    if address % itemsize:
        raise DriverError(R.CUDA_ERROR_INVALID_VALUE, f"{address:#x} is not aligned to {itemsize} bytes")
    context.fill(address, value, count, dtype, _copy_stream(h_stream, context))


@_entry()
def cuMemsetD8(dstDevice, uc, N):  # noqa: N802, N803
    _memset(dstDevice, uc, N, np.uint8, None)


@_entry()
def cuMemsetD8Async(dstDevice, uc, N, hStream):  # noqa: N802, N803
    _memset(dstDevice, uc, N, np.uint8, hStream)


@_entry()
def cuMemsetD16(dstDevice, us, N):  # noqa: N802, N803
    _memset(dstDevice, us, N, np.uint16, None)


@_entry()
def cuMemsetD16Async(dstDevice, us, N, hStream):  # noqa: N802, N803
    _memset(dstDevice, us, N, np.uint16, hStream)


@_entry()
def cuMemsetD32(dstDevice, ui, N):  # noqa: N802, N803
    _memset(dstDevice, ui, N, np.uint32, None)


@_entry()
def cuMemsetD32Async(dstDevice, ui, N, hStream):  # noqa: N802, N803
    _memset(dstDevice, ui, N, np.uint32, hStream)


# -- streams ----------------------------------------------------------------------------------------
@_entry(1)
def cuStreamCreate(Flags):  # noqa: N802, N803
    """A stream with its own AQL queue. CU_STREAM_NON_BLOCKING is accepted; lapis orders every stream after the
    legacy default stream as a blocking one is."""
    ctx = _current()
    record = _register(StreamRecord(CUstream(new_value()), ctx.context.create_stream(), ctx))
    ctx.streams.append(record)
    return record.handle


@_entry()
def cuStreamDestroy(hStream):  # noqa: N802, N803
    stream, ctx = _stream(hStream)
    record = _state.objects.get(as_address(hStream) or 0)
    if not isinstance(record, StreamRecord):
        raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, "the default stream cannot be destroyed")
    record.destroyed = True
    _forget(record)
    ctx.streams.remove(record)
    ctx.context.destroy_stream(stream)


@_entry()
def cuStreamSynchronize(hStream):  # noqa: N802, N803
    stream, ctx = _stream(hStream)
    ctx.context.synchronize_stream(stream)


@_entry()
def cuStreamQuery(hStream):  # noqa: N802, N803
    stream, ctx = _stream(hStream)
    if not ctx.context.stream_done(stream):
        raise DriverError(R.CUDA_ERROR_NOT_READY, "the stream has work in flight")


@_entry()
def cuStreamWaitEvent(hStream, hEvent, Flags=0):  # noqa: N802, N803
    """Later work on the stream waits for the event: lapis waits on the host (see Event.wait)."""
    stream, _ = _stream(hStream)
    _event(hEvent).event.wait(stream)


# -- events -----------------------------------------------------------------------------------------
@_entry(1)
def cuEventCreate(Flags):  # noqa: N802, N803
    ctx = _current()
    timing = not int(Flags) & int(_real.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    return _register(EventRecord(CUevent(new_value()), Event(_api, timing), ctx)).handle


@_entry()
def cuEventRecord(hEvent, hStream):  # noqa: N802, N803
    record = _event(hEvent)
    stream, _ = _stream(hStream)
    record.event.record(stream)


@_entry()
def cuEventSynchronize(hEvent):  # noqa: N802, N803
    _event(hEvent).event.synchronize()


@_entry()
def cuEventQuery(hEvent):  # noqa: N802, N803
    if not _event(hEvent).event.query():
        raise DriverError(R.CUDA_ERROR_NOT_READY, "the device has not reached the event")


@_entry(1)
def cuEventElapsedTime(hStart, hEnd):  # noqa: N802, N803
    """Milliseconds between two recorded events, in simulated device time; CUDA_ERROR_NOT_READY while either is
    pending, CUDA_ERROR_INVALID_HANDLE for one never recorded or made with CU_EVENT_DISABLE_TIMING."""
    events = [_event(hStart).event, _event(hEnd).event]
    for event in events:
        if not event.timing or event.context is None:
            raise DriverError(R.CUDA_ERROR_INVALID_HANDLE, f"{event!r} records no time (never recorded, or made "
                              "with CU_EVENT_DISABLE_TIMING)")
        if not event.query():
            raise DriverError(R.CUDA_ERROR_NOT_READY, f"{event!r} has not completed")
    return events[0].elapsed_time(events[1])


@_entry()
def cuEventDestroy(hEvent):  # noqa: N802, N803
    record = _event(hEvent)
    record.event.destroy()
    _forget(record)

