"""Layer 3: a device context (CUDA's primary context): one GPU agent and what the API keeps for it.

It holds the runtime agent, the streams (each with an AQL queue of its own; the default
stream's is made with the context), the loaded code objects, a kernarg arena the streams
share, the work in flight on each stream, and the device memory handed out. Launches are
asynchronous: a launch writes its packet and returns; synchronizing (a stream, an event,
the whole context, or a copy) waits for completion signals. A kernel fault is reported
there as a KernelFault naming the kernel, instruction, address and source line; the context then
replaces that stream's stopped queue, so the next launch on it runs.
"""

import asyncio
import linecache
import math
import operator
import re
import struct
import threading
import weakref
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from lapis import abi, runtime, trace
from lapis.cuda.compiler import types as T
from lapis.cuda.errors import (
    CudaError,
    InvalidHandleError,
    KernelFault,
    LaunchError,
    LaunchOutOfResources,
    OutOfMemoryError,
)
from lapis.cuda.memory_pool import MemoryPool
from lapis.runtime import line_table

KERNARG_SLOT = abi.MAX_KERNARG_BYTES
FILL_BYTES = 64 << 20     # the filled host buffer a memset uploads, as often as it takes
KERNARG_SLOTS = 256
# Completion signals a context keeps for reuse: as many as launches it can have in flight, so a
# synchronize's worth of retired ones serves the next batch of launches (pending and spare together
# never hold more than were in flight at once).
SPARE_SIGNALS = KERNARG_SLOTS
QUEUE_PACKETS = 1024

MemoryInfo = namedtuple("MemoryInfo", ["free", "total"])


@dataclass(eq=False)
class Work:
    """A packet on a stream's queue that the host has not yet seen complete: a kernel launch, or
    the barrier packet of an event record (`kernel` None)."""
    signal: runtime.Signal
    kernel: str | None = None
    kernarg_slot: int | None = None
    executable: runtime.Executable | None = None
    status: str = "queued"          # then "done", or "failed" (it faulted, or never ran behind a fault)
    assertions: dict | None = None  # the kernel's: trap number -> the assertion in its source
    end_ns: int | None = None       # an event record's: the device clock when the device reached it


class StreamState:
    """What a context keeps for one stream: its AQL queue and its work not yet seen complete."""

    def __init__(self, queue: runtime.AqlQueue, default: bool):
        self.queue, self.default = queue, default
        self.pending: list[Work] = []
        self.released = False       # destroyed or collected: the queue goes once nothing is pending
        self.callbacks: list[threading.Thread] = []     # threads of host callbacks added to it (add_callback)


class PinnedHostMemory:
    """Page-locked host memory (a buffer from the runtime's host pool, mapped for the GPU), exposed
    to numpy through the array interface. Every numpy view of it keeps it alive; the buffer goes
    back to the pool when the last is collected. Copies between it and the device need no staging."""

    def __init__(self, context: "Context", nbytes: int):
        try:
            self.buffer = context.rt.host_pool(context.agent).allocate(max(nbytes, 1))
        except runtime.OutOfMemory as e:
            raise OutOfMemoryError(f"cannot allocate {nbytes} bytes of pinned host memory: {e}") from None
        self.context, self.agent, self.va = context, context.agent, self.buffer.va
        view = self.buffer.host[:max(nbytes, 1)]
        self.__array_interface__ = view.__array_interface__
        self.ptr = self.__array_interface__["data"][0]
        weakref.finalize(self, context.free, self.buffer)


class Device:
    """What numba's cuda.get_current_device() returns: a GPU and its properties."""

    def __init__(self, ordinal: int, agent: runtime.Agent, api_name: str):
        self.id, self.agent, self.api_name = ordinal, agent, api_name
        p = agent.properties
        self.name = p.marketing_name
        self.compute_capability = tuple(p.compute_capability)
        self.MULTIPROCESSOR_COUNT = p.compute_units
        self.WARP_SIZE = p.warp_size
        self.MAX_THREADS_PER_BLOCK = p.max_threads_per_block
        self.MAX_SHARED_MEMORY_PER_BLOCK = p.shared_per_block
        self.MAX_BLOCKS_PER_MULTIPROCESSOR = p.max_blocks_per_unit
        self.COOPERATIVE_LAUNCH = 1             # kernels that sync their grid (cuda.cg) may be launched
        self.properties = p                     # the driver's topology entry (what the occupancy calculator reads)
        self.total_memory = p.memory_bytes
        self.profile = p.profile

    def __str__(self) -> str:
        return f"{self.api_name}:{self.id}"

    def __repr__(self) -> str:
        return f"<{self.api_name} device {self.id} '{self.name}'>"


class Context:
    def __init__(self, device: Device):
        self.device = device
        self.agent = device.agent
        self.rt = runtime.init()
        self.default_state = StreamState(self.rt.create_queue(self.agent, QUEUE_PACKETS), default=True)
        self.streams: list[StreamState] = [self.default_state]
        self.stopped_queues: list[runtime.AqlQueue] = []    # replaced after a fault, destroyed once idle
        self.kernargs = self.rt.kernarg_pool(self.agent).allocate(KERNARG_SLOT * KERNARG_SLOTS)
        self.free_slots = list(range(KERNARG_SLOTS - 1, -1, -1))
        self.launches = 0                                   # kernels queued so far (`lapis.utils.benchmark` reads it)
        # Completed signals, re-armed for the next launch or event record (as HIP's queue tracker reuses
        # its ring of signals): a fresh one costs the driver an event, created and later destroyed.
        self.spare_signals: list[runtime.Signal] = []
        self.loaded: dict[int, tuple[object, runtime.Executable]] = {}
        self.allocations: dict[int, weakref.ref] = {}       # by address; `Allocation`s register themselves
        self.pool = MemoryPool(self)                        # device memory, cached by size class
        self.printf = None                                  # its printf FIFO (printf_fifo.py), once a kernel prints
        self.grid_barrier = None                            # its grid barrier's word, once a kernel syncs its grid
        self.grid_barrier_dirty = False                     # ... to be zeroed before its next use
        self.lock = threading.RLock()

    # -- memory -------------------------------------------------------------------------------
    def allocate(self, size: int):
        """Device memory from the context's stream-ordered pool (cached blocks first)."""
        try:
            return self.pool.allocate(size)
        except runtime.OutOfMemory as e:
            raise OutOfMemoryError(f"out of memory on {self.device}: {e}") from None

    def free(self, buffer) -> None:
        """Give back the memory of a collected array: into the pool's cache, with no driver call (the
        garbage collector runs this on whatever thread it interrupts, the device's own included)."""
        self.pool.release(buffer)

    def free_now(self, buffer) -> None:
        """Free to the driver at once, after the device's work (cudaFree synchronizes too); a fault that
        surfaces while waiting is raised after the memory is freed."""
        with self.lock:
            try:
                self.synchronize()
            finally:
                if not buffer.freed:
                    self.pool.forget(buffer)
                    buffer.free()

    def find_allocation(self, address: int):
        """The live `Allocation` holding a device address, or None."""
        for ref in list(self.allocations.values()):
            allocation = ref()
            if allocation is not None and allocation.va <= address < allocation.va + allocation.size:
                return allocation
        return None

    def get_memory_info(self) -> MemoryInfo:
        """(free, total) bytes of the device's memory, as numba's Context.get_memory_info and cudaMemGetInfo."""
        return MemoryInfo(*self.rt.memory_info(self.agent))

    def pinned_array(self, shape, dtype, order: str = "C") -> np.ndarray:
        """An uninitialised numpy array in pinned host memory (numba's cuda.pinned_array)."""
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        shape = tuple(operator.index(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"negative dimensions are not allowed: {shape}")      # numpy's words
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize        # exact: np.prod's int64 wraps a huge shape to a few bytes
        return np.asarray(PinnedHostMemory(self, nbytes))[:nbytes].view(dtype).reshape(shape, order=order)

    def _pinned_va(self, ary: np.ndarray) -> int | None:
        """The GPU address of a flat contiguous array in pinned memory this GPU reaches, else None."""
        owner = ary
        while isinstance(owner, np.ndarray):
            owner = owner.base
        if not (isinstance(owner, PinnedHostMemory) and owner.agent is self.agent and ary.ndim == 1
                and ary.flags.c_contiguous):
            return None
        return owner.va + (ary.__array_interface__["data"][0] - owner.ptr)

    def before_copy(self, stream) -> None:
        """Order a copy after the work it must follow. Copies are synchronous, so a copy on a stream
        waits for that stream (and, as the legacy default stream demands, the default stream, or for
        the default stream every stream); a later launch on it then follows the finished copy."""
        with self.lock:
            state = self.stream_state(stream)
            self._order_before(state)
            self._drain(state)
            self._reap()
            self._print()

    def copy_to_device(self, dst: int, data: np.ndarray, stream=None) -> None:
        """Copy a flat host array to a device address, after the stream's earlier work."""
        self.before_copy(stream)
        src = self._pinned_va(data)
        if src is None:
            self.rt.copy_to_device(self.agent, dst, data)
        else:
            self.rt.copy_on_device(self.agent, dst, src, data.nbytes, kind="host_to_device")

    def fill(self, dst: int, value: int, count: int, dtype, stream=None) -> None:
        """Set `count` elements of `dtype` from a device address to `value` (its low bits), after the stream's
        earlier work: a filled host buffer uploaded, FILL_BYTES at a time at most (cudaMemset, cuMemsetD8/16/32:
        there is no fill packet)."""
        itemsize = np.dtype(dtype).itemsize
        total = count * itemsize
        filled = np.full(min(total, FILL_BYTES) // itemsize, int(value) & ((1 << (8 * itemsize)) - 1),
                         dtype).view(np.uint8)
        for offset in range(0, total, FILL_BYTES):
            self.copy_to_device(dst + offset, filled[:total - offset], stream)

    def copy_to_host(self, src: int, size: int, stream=None, into: np.ndarray | None = None) -> np.ndarray:
        """Copy device bytes to the host, after the stream's earlier work: into `into` (a flat uint8
        array; straight from the copy engine if it is pinned) or a new array."""
        self.before_copy(stream)
        dst = None if into is None else self._pinned_va(into)
        if dst is not None:
            self.rt.copy_on_device(self.agent, dst, src, size, kind="device_to_host")
            return into
        raw = self.rt.copy_to_host(self.agent, src, size)
        if into is None:
            return raw
        into[:] = raw
        return into

    def copy_on_device(self, dst: int, src: int, size: int, stream=None) -> None:
        self.before_copy(stream)
        self.rt.copy_on_device(self.agent, dst, src, size)

    # -- code ---------------------------------------------------------------------------------
    def load(self, compiled) -> runtime.KernelSymbol:
        """The kernel's symbol in this context, loading its code object the first time."""
        entry = self.loaded.get(id(compiled))
        if entry is None or entry[0] is not compiled:
            exe = runtime.Executable(self.rt)
            try:
                exe.load_code_object(self.agent, compiled.code_object)
            except runtime.CodeObjectError as e:      # the compiler's code: only this device's limits refuse it
                exe.destroy()
                raise LaunchOutOfResources(f"too many resources requested for launch of kernel {compiled.name!r} on "
                                           f"{self.device}: {e}") from None
            exe.freeze()
            if compiled.local_bytes:
                self._check_local_memory(compiled, exe)
            entry = self.loaded[id(compiled)] = (compiled, exe)
        return entry[1].get_symbol(compiled.name)

    def _check_local_memory(self, compiled, exe: runtime.Executable) -> None:
        """Refuse a kernel whose local memory the device cannot hold. CUDA sets local memory aside for every thread
        the device can run at once (the kernel's bytes per thread x threads per SM x SMs) when it loads a kernel that
        needs more than it has, and the launch fails with cudaErrorMemoryAllocation when the device's memory cannot
        hold that; lapis checks the same figure against the free memory, counting the blocks this context's pool
        keeps cached (it would give them back), and sets nothing aside."""
        p = self.device.properties
        needed = compiled.local_bytes * p.max_threads_per_unit * p.compute_units
        stats = self.pool.stats
        free = self.get_memory_info()[0] + stats["reserved_bytes"] - stats["allocated_bytes"]
        if needed > free:
            exe.destroy()
            raise OutOfMemoryError(f"out of memory on {self.device}: kernel {compiled.name!r} needs "
                                   f"{compiled.local_bytes} bytes of local memory per thread, {needed} bytes for the "
                                   f"{p.max_threads_per_unit} threads of each of the {p.compute_units} SMs, and {free} "
                                   "bytes are free")

    # -- streams ------------------------------------------------------------------------------
    def create_stream(self) -> "Stream":
        """A new stream with its own queue; the queue goes when the stream is destroyed or collected
        and its work is done."""
        state = StreamState(self.rt.create_queue(self.agent, QUEUE_PACKETS), default=False)
        with self.lock:
            self.streams.append(state)
        stream = Stream(self, state)
        # Only a flag: a finalizer may run inside any call that holds the lock, mid-way through it.
        weakref.finalize(stream, setattr, state, "released", True)
        return stream

    def destroy_stream(self, stream) -> None:
        """Release a stream (cudaStreamDestroy): its queued work still runs, then its queue goes."""
        with self.lock:
            state = self.stream_state(stream)
            if state.default:
                raise InvalidHandleError(f"the default stream of {self.device} cannot be destroyed")
            state.released = True
            self.raise_completed_faults(state)
            self._reap()

    def stream_state(self, stream) -> StreamState:
        """The state behind a launch's or copy's `stream` argument: a Stream of this context, or
        0/None for the default stream."""
        if stream is None or (isinstance(stream, int) and not isinstance(stream, bool) and stream == 0):
            return self.default_state
        if not isinstance(stream, Stream):
            raise TypeError(f"a stream must be a Stream or 0 (the default stream), not {type(stream).__name__}")
        if stream.context is not self:
            raise InvalidHandleError(f"{stream!r} belongs to {stream.context.device}, not {self.device}")
        if stream.state.released:
            raise InvalidHandleError(f"{stream!r} was destroyed")
        return stream.state

    def _order_before(self, state: StreamState) -> None:
        """Work about to go on `state` follows what CUDA's legacy default stream demands: on the
        default stream, every other stream's earlier work; on another stream, the default stream's.
        The host waits for that work, where CUDA would have the device wait."""
        for other in [s for s in self.streams if s is not state] if state.default else [self.default_state]:
            self._drain(other)

    def _reap(self) -> None:
        """Destroy the queues of released streams and those stopped by a fault once no stream has work
        in flight: the driver frees a queue's ring only when the GPU is idle for this process, so doing
        it earlier would make the host wait for every stream. Launches never reap, so they never wait."""
        if any(s.pending for s in self.streams):
            return
        for state in [s for s in self.streams if s.released]:
            self.streams.remove(state)
            self.stopped_queues.append(state.queue)
        while self.stopped_queues:
            self.stopped_queues.pop().destroy()

    # -- launches and event records -----------------------------------------------------------
    def launch(self, compiled, kernargs: bytes, grid: tuple, block: tuple, dynamic_shared: int,
               stream=None, cooperative: bool = False) -> tuple[int, int]:
        """Queue a kernel on `stream` (a Stream of this context; None or 0: the default stream), `cooperative`ly
        (every block resident at once) if asked; returns the queue id and packet index, which the device's kernel
        event reports too."""
        if (grid, block, dynamic_shared) not in _GOOD_GEOMETRIES:
            _check_geometry(grid, block, dynamic_shared)
        with self.lock:
            state = self.stream_state(stream)
            self.raise_completed_faults(state)
            self._revive(state)
            self._order_before(state)
            symbol = self.load(compiled)
            if not self.free_slots:
                self._free_a_slot(state)
            slot = self.free_slots.pop()
            va = self.kernargs.va + slot * KERNARG_SLOT
            self.kernargs.host[slot * KERNARG_SLOT:slot * KERNARG_SLOT + len(kernargs)] = memoryview(kernargs)
            signal = self._signal()
            dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
            packet = abi.KernelDispatchPacket(
                header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH, barrier=True),
                setup=dims | (abi.SETUP_COOPERATIVE if cooperative else 0),
                workgroup_size_x=block[0], workgroup_size_y=block[1], workgroup_size_z=block[2],
                grid_size_x=grid[0] * block[0], grid_size_y=grid[1] * block[1], grid_size_z=grid[2] * block[2],
                group_segment_size=symbol.group_segment_size + dynamic_shared, kernel_object=symbol.kernel_object,
                kernarg_address=va, completion_signal=signal.handle)
            work = Work(signal, compiled.name, slot, self.loaded[id(compiled)][1],
                        assertions=compiled.assertions or None)
            state.pending.append(work)
            try:
                index = state.queue.submit(packet)
            except BaseException:         # nothing was queued: no one may wait for it, and its slot is free again
                state.pending.remove(work)
                self.free_slots.append(slot)
                self._spare(signal)
                raise
            self.launches += 1
            return state.queue.queue_id, index

    def _free_a_slot(self, state: StreamState) -> None:
        """Wait for the oldest work, this stream's first, until a kernel-argument slot is free. A fault from this
        stream is raised; another stream's stays with it (its slot is freed when that stream reports it)."""
        for other in [state, *(s for s in self.streams if s is not state)]:
            while other.pending and not self.free_slots:
                work = other.pending[0]
                value = work.signal.wait(runtime.Condition.LT, 1)
                if value < 0 and other is not state:
                    break
                self._retire(other, work, value)
            if self.free_slots:
                return
        raise CudaError(f"every kernel-argument slot of {self.device} is held by work that failed on other streams: "
                        "synchronize to see their faults")

    def record_event(self, stream) -> tuple[StreamState, Work]:
        """Queue an event's marker on `stream`: a barrier-AND packet with no dependencies, whose
        completion signal the device stamps with its clock when it gets there."""
        with self.lock:
            state = self.stream_state(stream)
            self.raise_completed_faults(state)
            self._revive(state)
            self._order_before(state)
            work = Work(self._signal())
            state.pending.append(work)
            state.queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND, barrier=True),
                                                 completion_signal=work.signal.handle))
            return state, work

    def stream_marker(self, stream) -> runtime.Signal:
        """A barrier packet queued on `stream` with a completion signal of its own (not one the context recycles):
        it reaches 0 once the work queued on the stream before it is done. The caller waits on it (and
        destroys it); no synchronize waits for it."""
        with self.lock:
            state = self.stream_state(stream)
            self.raise_completed_faults(state)
            self._revive(state)
            self._order_before(state)
            signal = self.rt.create_signal(1)
            state.queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND, barrier=True),
                                                 completion_signal=signal.handle))
            return signal

    def _revive(self, state: StreamState) -> None:
        """A queue stopped with nothing of ours pending (a GPU reset while the stream was idle; pending
        work would have surfaced as a fault above) gets a fresh queue, so the stream keeps working."""
        if not state.pending and state.queue.status()[0] != "active":
            self.stopped_queues.append(state.queue)
            state.queue = self.rt.create_queue(self.agent, QUEUE_PACKETS)

    def _signal(self) -> runtime.Signal:
        """A completion signal at 1: a spare one re-armed, or a new one."""
        if self.spare_signals:
            signal = self.spare_signals.pop()
            signal.store(1)
            return signal
        return self.rt.create_signal(1)

    def _spare(self, signal: runtime.Signal) -> None:
        """Keep a signal whose packet is done (or will never run) for reuse, or destroy it. Its driver
        event may still be set from the completion nobody waited for: a wait on it after re-arming
        wakes once, finds the value still 1 and sleeps again."""
        if len(self.spare_signals) < SPARE_SIGNALS:
            self.spare_signals.append(signal)
        else:
            signal.destroy()

    # -- completion ---------------------------------------------------------------------------
    def _retire(self, state: StreamState, work: Work, value: int) -> None:
        state.pending.remove(work)
        if work.kernel is None and value == 0:
            work.end_ns = work.signal.timestamps()[1]
        self._spare(work.signal)
        if work.kernarg_slot is not None:
            self.free_slots.append(work.kernarg_slot)
        work.status = "done" if value == 0 else "failed"
        if value < 0:
            self._raise_fault(state, work)

    def raise_completed_faults(self, only: StreamState | None = None) -> None:
        """Retire the work every stream has finished, reporting a fault from it (errors surface at the next call).
        With `only` (the stream a call works on), a fault belongs to its own stream: another stream's finished
        work is retired up to its failed packet, which waits for a call on that stream or a synchronize."""
        with self.lock:
            for state in list(self.streams):
                while state.pending and (value := state.pending[0].signal.load()) <= 0:
                    if value < 0 and only is not None and state is not only:
                        break
                    self._retire(state, state.pending[0], value)

    def _drain(self, state: StreamState, upto: Work | None = None) -> None:
        """Wait for a stream's work in order, up to and including `upto` (all of it if None)."""
        while state.pending and (upto is None or upto.status == "queued"):
            work = state.pending[0]
            self._retire(state, work, work.signal.wait(runtime.Condition.LT, 1))

    def synchronize(self) -> None:
        """Wait for every stream's work."""
        with self.lock:
            with trace.span(3, "synchronize", device=str(self.device),
                            launches=sum(len(s.pending) for s in self.streams)):
                for state in list(self.streams):
                    self._drain(state)
            self._reap()
            self._print()
            states = list(self.streams)
        self._await_callbacks(states)

    def synchronize_stream(self, stream) -> None:
        """Wait for one stream's work only."""
        with self.lock:
            state = self.stream_state(stream)
            with trace.span(3, "stream_synchronize", device=str(self.device), queue=state.queue.queue_id,
                            launches=len(state.pending)):
                self._drain(state)
            self._reap()
            self._print()
        self._await_callbacks([state])

    def _print(self) -> None:
        """Print what kernels printed, once no stream has work left that could still be printing."""
        if self.printf is not None and not any(s.pending for s in self.streams):
            self.printf.flush()

    def _await_callbacks(self, states: list[StreamState]) -> None:
        """Wait (outside the lock: a callback may copy or launch) until the host callbacks added to these streams
        have returned: CUDA orders a stream's callbacks with its work, so a synchronize waits for them too; but not
        for the caller's own callback, and not past CALLBACK_WAIT_S."""
        me = threading.current_thread()
        for state in states:
            for thread in list(state.callbacks):
                if thread is not me:
                    thread.join(CALLBACK_WAIT_S)
                    if thread.is_alive():
                        raise CudaError(f"a host callback added to a stream of {self.device} has not returned after "
                                        f"{CALLBACK_WAIT_S:.0f} s")
            with self.lock:          # add_callback on another thread extends the same list
                state.callbacks = [t for t in state.callbacks if t.is_alive()]

    def stream_done(self, stream) -> bool:
        """Whether a stream has finished all its work (cudaStreamQuery), without waiting."""
        with self.lock:
            state = self.stream_state(stream)
            self.raise_completed_faults(state)
            return not state.pending

    def wait_for(self, state: StreamState, work: Work) -> None:
        """Wait until the device has passed `work` on its stream."""
        with self.lock:
            self._drain(state, upto=work)
            self._reap()

    def _raise_fault(self, state: StreamState, work: Work) -> None:
        _, detail = state.queue.status()
        detail = detail or {}
        for other in list(state.pending):      # later packets on the stopped queue never run
            state.pending.remove(other)
            other.status = "failed"
            other.signal.destroy()           # not reused: the stopped queue's packet still names it
            if other.kernarg_slot is not None:
                self.free_slots.append(other.kernarg_slot)
        self.stopped_queues.append(state.queue)
        state.queue = self.rt.create_queue(self.agent, QUEUE_PACKETS)
        self.grid_barrier_dirty = True          # the failed kernel may have left a grid barrier half-counted
        reason = detail.get("fault") or detail.get("reason", "the kernel failed")
        trap = re.fullmatch(r"device-side assert triggered \(trap (\d+)\)", reason)
        named = trap and work.assertions and int(trap[1]) in work.assertions
        if named:
            reason += f": assertion failed at {work.assertions[int(trap[1])]}"
        where = ""
        if detail.get("instruction"):
            where = f" at instruction /*{detail['pc']:04x}*/ {detail['instruction']}"
            if not named:                        # an assertion's message names its line already
                where += _statement_at(work, detail["pc"])
        address = detail.get("address")
        what = f"kernel {work.kernel!r}" if work.kernel else "an event record"
        raise KernelFault(f"{what} faulted on {self.device}: {reason}"
                          + (f" at address {address:#x}" if address is not None else "") + where,
                          work.kernel or "", detail.get("pc"), detail.get("instruction"), address)


def _statement_at(work: Work, pc: int) -> str:
    """The kernel statement the instruction at `pc` was compiled from, as " at file:line: source", by its code
    object's line table (compute-sanitizer names it so); "" where the code object has none."""
    symbol = work.executable.symbols.get(work.kernel) if work.executable else None
    found = symbol and line_table.lookup(symbol.metadata, pc)
    if not found:
        return ""
    file, line = found
    text = linecache.getline(file, line).split("  #")[0].strip()
    return f" at {file}:{line}" + (f": {text}" if text else "")


CALLBACK_WAIT_S = 60.0      # how long a synchronize waits for a stream's host callbacks to return
LAUNCH_FAILURE = 719        # cudaErrorLaunchFailure: the status a callback gets when the stream's work failed


class Stream:
    """A stream: launches, copies and event records on it happen in order. `Stream(context)` is the
    context's default stream (CUDA's legacy default stream); `cuda.stream()` makes another, with an
    AQL queue of its own, so its launches may interleave with other streams' on the device."""

    def __init__(self, context: Context, state: StreamState | None = None):
        self.context = context
        self.state = context.default_state if state is None else state

    @property
    def queue(self) -> runtime.AqlQueue:
        """The runtime queue the stream's packets go to (a new one after a kernel faulted on it)."""
        return self.state.queue

    def synchronize(self) -> None:
        self.context.synchronize_stream(self)

    def query(self) -> bool:
        """Whether the stream has finished all its work."""
        return self.context.stream_done(self)

    def add_callback(self, callback, arg=None) -> None:
        """numba's Stream.add_callback (cudaStreamAddCallback): `callback(stream, status, arg)` runs on a thread
        of its own once the work queued on the stream so far is done; status is 0, or
        cudaErrorLaunchFailure's code (719) when that work failed and the stream's queue stopped. A synchronize
        of the stream (or the device) returns after the callbacks added before it have returned."""
        signal, state = self.context.stream_marker(self), self.state

        def wait_then_call() -> None:
            try:      # a queue that stops fails the packets left in it, this marker too: the wait ends either way
                value = signal.wait(runtime.Condition.LT, 1)
            finally:
                signal.destroy()
            callback(self, 0 if value == 0 else LAUNCH_FAILURE, arg)
        thread = threading.Thread(target=wait_then_call, name="stream callback", daemon=True)
        with self.context.lock:      # a synchronize on another thread prunes the same list
            state.callbacks = [t for t in state.callbacks if t.is_alive()] + [thread]
        thread.start()

    def async_done(self):
        """numba's Stream.async_done: an asyncio future of the running loop that resolves to this stream once
        the work queued on it so far is done (with a CudaError if that work failed)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def resolve(stream, status, _arg) -> None:
            outcome = (future.set_result, stream) if status == 0 else \
                (future.set_exception, CudaError(f"work on {stream!r} failed (status {status})"))
            loop.call_soon_threadsafe(lambda: None if future.done() else outcome[0](outcome[1]))
        self.add_callback(resolve)
        return future

    @contextmanager
    def auto_synchronize(self):
        """`with stream.auto_synchronize():` synchronizes the stream when the block ends."""
        yield self
        self.synchronize()

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.state is self.state

    def __hash__(self) -> int:
        return id(self.state)

    def __repr__(self) -> str:
        if self.state.default:
            return f"<Stream default on {self.context.device}>"
        return f"<Stream queue {self.state.queue.queue_id} on {self.context.device}>"


class Event:
    """A point in a stream (numba's cuda.event, cudaEvent_t). `record` queues a barrier packet on the
    stream; the device stamps its completion signal with the device clock when it gets there, so
    `elapsed_time` is exact simulated device time, in milliseconds as CUDA reports it."""

    def __init__(self, api, timing: bool = True):
        self.api, self.timing = api, timing
        self.context: Context | None = None
        self._state: StreamState | None = None
        self._work: Work | None = None
        self.destroyed = False

    def _check_alive(self) -> None:
        if self.destroyed:
            raise InvalidHandleError(f"{self!r} was destroyed")

    def record(self, stream=0) -> None:
        self._check_alive()
        context = self.api.context_for((), stream)
        self._state, self._work = context.record_event(stream)
        self.context = context

    def synchronize(self) -> None:
        """Wait until the device has reached the event (at once if it was never recorded)."""
        self._check_alive()
        if self._work is None:
            return
        self.context.wait_for(self._state, self._work)
        self._check_reached()

    def query(self) -> bool:
        """Whether the device has reached the event (True if it was never recorded), without waiting."""
        self._check_alive()
        if self._work is None:
            return True
        self.context.raise_completed_faults()
        self._check_reached()
        return self._work.status == "done"

    def _check_reached(self) -> None:
        if self._work.status == "failed":
            raise CudaError(f"{self!r} never completed: a kernel before it on its stream faulted")

    def wait(self, stream=0) -> None:
        """Make later work on `stream` wait for this event. The host waits for the event (so
        nothing queued afterwards can pass it), where CUDA would make the device wait."""
        self._check_alive()
        self.api.context_for((), stream).stream_state(stream)
        self.synchronize()

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds of device time from this event to `end`, waiting for both."""
        for event in (self, end):
            event._check_alive()
            if not event.timing:
                raise CudaError(f"{event!r} was created with timing=False; it records no time")
            if event._work is None:
                raise InvalidHandleError(f"{event!r} has not been recorded")
        if self.context is not end.context:
            raise InvalidHandleError(f"events on different devices ({self.context.device}, {end.context.device}) "
                                     "have no common clock")
        self.synchronize()
        end.synchronize()
        return (end._work.end_ns - self._work.end_ns) / 1e6

    def destroy(self) -> None:
        """Forget the event (cudaEventDestroy); a marker still queued completes harmlessly."""
        self.destroyed = True

    def __repr__(self) -> str:
        where = f" on {self.context.device}" if self.context else ""
        return f"<Event {id(self):#x}{where}>"


_SCALAR_FORMATS = {"int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "float32": "f", "float64": "d",
                   "bool": "I", "float16": "H", "bfloat16": "H", "complex64": "2f", "complex128": "2d",
                   "int8": "i", "int16": "i", "uint8": "I", "uint16": "I"}     # small integers widened to a word
_PACKERS: dict[int, tuple] = {}       # id(layout) -> (layout, struct, plan): made at a kernel's first launch
# How pack_kernargs writes an argument: a 1-D array, an array of more dimensions, a half, a bool, a complex (its
# real and imaginary parts), another number.
_VECTOR, _ARRAY, _HALF, _BOOL, _COMPLEX, _NUMBER = range(6)


GRID_LIMITS = (2**31 - 1, 65535, 65535)     # CUDA's most blocks along x, y and z
BLOCK_LIMITS = (1024, 1024, 64)              # ... and threads


_GOOD_GEOMETRIES: set[tuple] = set()        # launch shapes already checked (a training loop repeats a few)


def _check_geometry(grid: tuple, block: tuple, dynamic_shared: int) -> None:
    """A launch's shape as CUDA checks it (cudaErrorInvalidConfiguration), before anything is queued: a dispatch
    packet holds each dimension's thread count in 32 bits, so a grid past those limits could not even be written."""
    for what, dims, limits in (("grid", grid, GRID_LIMITS), ("block", block, BLOCK_LIMITS)):
        if len(dims) != 3 or not all(isinstance(d, int | np.integer) and 1 <= d <= most
                                     for d, most in zip(dims, limits, strict=True)):
            raise LaunchError(f"invalid configuration argument: the {what} {tuple(dims)} must have 1 to "
                              f"{limits} along x, y and z")
    if not isinstance(dynamic_shared, int | np.integer) or dynamic_shared < 0:
        raise LaunchError(f"invalid configuration argument: dynamic shared memory of {dynamic_shared} bytes")
    for axis, blocks, threads in zip("xyz", grid, block, strict=True):
        if blocks * threads >= 2**32:          # as HIP's limit: the AQL packet's grid size is 32 bits per axis
            raise LaunchError(f"invalid configuration argument: {blocks} blocks of {threads} threads along {axis} "
                              "exceed the 2^32 - 1 threads a dispatch packet holds per dimension")
    if len(_GOOD_GEOMETRIES) >= 4096:
        _GOOD_GEOMETRIES.clear()
    _GOOD_GEOMETRIES.add((tuple(grid), tuple(block), dynamic_shared))


def _packer(layout: list[dict], values: list) -> tuple[struct.Struct, list[tuple[int, int, str]]]:
    """One struct for a kernel's whole segment (gaps as pad bytes), and the plan: each argument's index, how
    it is written and its dtype, in offset order."""
    kept = _PACKERS.get(id(layout))
    if kept is not None and kept[0] is layout:
        return kept[1], kept[2]
    order = sorted(range(len(layout)), key=lambda i: layout[i]["offset"])
    fmt, at, plan = "<", 0, []
    for i in order:
        entry, value = layout[i], values[i]
        dtype = entry.get("dtype")
        if entry["kind"] == "array":
            field, how = f"Q{value.ndim}q{value.ndim}q", _VECTOR if value.ndim == 1 else _ARRAY
        else:
            field = _SCALAR_FORMATS[dtype]
            how = _HALF if dtype in ("float16", "bfloat16") else _BOOL if dtype == "bool" else \
                _COMPLEX if dtype.startswith("complex") else _NUMBER
        plan.append((i, how, dtype))
        fmt += "x" * (entry["offset"] - at) + field
        at = entry["offset"] + struct.calcsize("<" + field)
    size = max((e["offset"] + e["size"] for e in layout), default=0)
    packer = struct.Struct(fmt + "x" * (-(-size // 8) * 8 - at))
    _PACKERS[id(layout)] = (layout, packer, plan)
    return packer, plan


def pack_kernargs(layout: list[dict], values: list) -> bytes:
    """The kernarg segment: each argument at its layout offset (arrays as pointer, shape, strides)."""
    packer, plan = _packer(layout, values)
    fields = []
    for i, how, dtype in plan:
        value = values[i]
        if how == _VECTOR:
            fields += (value.ptr, value.shape[0], value.strides[0] // value.dtype.itemsize)
        elif how == _ARRAY:
            itemsize = value.dtype.itemsize
            fields += (value.ptr, *value.shape, *[s // itemsize for s in value.strides])
        elif how == _HALF:                                       # a half: its 16 bits
            fields.append(int(np.asarray(value, T.scalar_of(dtype).dtype).view(np.uint16)))
        elif how == _COMPLEX:
            fields += (value.real, value.imag)
        else:
            v = value.item() if hasattr(value, "item") else value
            fields.append(int(v) if how == _BOOL else v)
    return packer.pack(*fields)
