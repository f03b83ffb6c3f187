"""Layer 3: a device context (CUDA's primary context): one GPU agent and what the API keeps for it.

It holds the runtime agent, a compute queue (the default stream's), the loaded code
objects, a kernarg arena, and the launches in flight. Launches are asynchronous: a launch
writes its packet and returns; `synchronize()` (and every copy back to the host) waits for
the completion signals. A kernel fault is reported there as a KernelFault naming the
kernel, instruction and address; the context then replaces its stopped queue, so the next
launch runs.
"""

import struct
import threading
from dataclasses import dataclass

from lapis import abi, runtime, trace
from lapis.cuda.errors import CudaError, KernelFault

KERNARG_SLOT = abi.MAX_KERNARG_BYTES
KERNARG_SLOTS = 256


@dataclass
class Launch:
    kernel: str
    signal: runtime.Signal
    kernarg_slot: int
    executable: runtime.Executable


class Device:
    """What numba's cuda.get_current_device() returns: a GPU and its properties."""

    def __init__(self, ordinal: int, agent: runtime.Agent, api_name: str):
        self.id, self.agent, self.api_name = ordinal, agent, api_name
        p = agent.properties
        self.name = p["marketing_name"]
        self.compute_capability = tuple(p["compute_capability"])
        self.MULTIPROCESSOR_COUNT = p["compute_units"]
        self.WARP_SIZE = p["warp_size"]
        self.MAX_THREADS_PER_BLOCK = p["max_threads_per_block"]
        self.MAX_SHARED_MEMORY_PER_BLOCK = p["shared_per_block"]
        self.total_memory = p["memory_bytes"]
        self.profile = p["name"]

    def __str__(self) -> str:
        return f"{self.api_name}:{self.id}"

    def __repr__(self) -> str:
        return f"<{self.api_name} device {self.id} '{self.name}'>"


class Context:
    def __init__(self, device: Device):
        self.device = device
        self.agent = device.agent
        self.rt = runtime.init()
        self.queue = self.rt.create_queue(self.agent, 1024)
        self.kernargs = self.rt.kernarg_pool(self.agent).allocate(KERNARG_SLOT * KERNARG_SLOTS)
        self.free_slots = list(range(KERNARG_SLOTS - 1, -1, -1))
        self.loaded: dict[int, tuple[object, runtime.Executable]] = {}
        self.in_flight: list[Launch] = []
        self.lock = threading.RLock()

    # -- memory -------------------------------------------------------------------------------
    def allocate(self, size: int):
        try:
            return self.rt.device_pool(self.agent).allocate(size)
        except runtime.OutOfMemory as e:
            raise CudaError(f"out of memory on {self.device}: {e}") from None

    def free(self, buffer) -> None:
        try:
            if not buffer.freed:
                buffer.free()
        except Exception:    # noqa: BLE001 - at interpreter exit the driver may already be gone
            pass

    def copy_to_device(self, dst: int, data) -> None:
        self.synchronize()
        self.rt.copy_to_device(self.agent, dst, data)

    def copy_to_host(self, src: int, size: int):
        return self.rt.copy_to_host(self.agent, src, size)

    # -- code ---------------------------------------------------------------------------------
    def load(self, compiled) -> runtime.KernelSymbol:
        """The kernel's symbol in this context, loading its code object the first time."""
        entry = self.loaded.get(id(compiled))
        if entry is None or entry[0] is not compiled:
            exe = runtime.Executable(self.rt)
            exe.load_code_object(self.agent, compiled.code_object)
            exe.freeze()
            entry = self.loaded[id(compiled)] = (compiled, exe)
        return entry[1].get_symbol(compiled.name)

    def launch(self, compiled, kernargs: bytes, grid: tuple, block: tuple, dynamic_shared: int) -> None:
        with self.lock:
            self.raise_completed_faults()
            symbol = self.load(compiled)
            if not self.free_slots:
                self.synchronize()
            slot = self.free_slots.pop()
            va = self.kernargs.va + slot * KERNARG_SLOT
            self.kernargs.host[slot * KERNARG_SLOT:slot * KERNARG_SLOT + len(kernargs)] = memoryview(kernargs)
            signal = self.rt.create_signal(1)
            dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
            packet = abi.KernelDispatchPacket(
                header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH, barrier=True), setup=dims,
                workgroup_size_x=block[0], workgroup_size_y=block[1], workgroup_size_z=block[2],
                grid_size_x=grid[0] * block[0], grid_size_y=grid[1] * block[1], grid_size_z=grid[2] * block[2],
                group_segment_size=symbol.group_segment_size + dynamic_shared, kernel_object=symbol.kernel_object,
                kernarg_address=va, completion_signal=signal.handle)
            self.in_flight.append(Launch(compiled.name, signal, slot, self.loaded[id(compiled)][1]))
            self.queue.submit(packet)

    # -- completion ---------------------------------------------------------------------------
    def _retire(self, launch: Launch, value: int) -> None:
        self.in_flight.remove(launch)
        launch.signal.destroy()
        self.free_slots.append(launch.kernarg_slot)
        if value < 0:
            self._raise_fault(launch)

    def raise_completed_faults(self) -> None:
        """Report a fault from a launch that already finished (errors surface at the next call)."""
        for launch in list(self.in_flight):
            value = launch.signal.load()
            if value <= 0:
                self._retire(launch, value)

    def synchronize(self) -> None:
        with self.lock:
            with trace.span(3, "synchronize", device=str(self.device), launches=len(self.in_flight)):
                while self.in_flight:
                    launch = self.in_flight[0]
                    self._retire(launch, launch.signal.wait(runtime.Condition.LT, 1))

    def _raise_fault(self, launch: Launch) -> None:
        _, detail = self.queue.status()
        detail = detail or {}
        for other in list(self.in_flight):      # later packets on the stopped queue never run
            self.in_flight.remove(other)
            other.signal.destroy()
            self.free_slots.append(other.kernarg_slot)
        self.queue.destroy()
        self.queue = self.rt.create_queue(self.agent, 1024)
        reason = detail.get("fault") or detail.get("reason", "the kernel failed")
        where = ""
        if detail.get("instruction"):
            where = f" at instruction /*{detail['pc']:04x}*/ {detail['instruction']}"
        address = detail.get("address")
        raise KernelFault(f"kernel {launch.kernel!r} faulted on {self.device}: {reason}"
                          + (f" at address {address:#x}" if address is not None else "") + where,
                          launch.kernel, detail.get("pc"), detail.get("instruction"), address)


class Stream:
    """A stream: launches and copies on it run in order. Each context has one, its default
    stream (the legacy default stream of CUDA); its queue's barrier bit keeps the order."""

    def __init__(self, context: Context):
        self.context = context

    def synchronize(self) -> None:
        self.context.synchronize()

    def __repr__(self) -> str:
        return f"<Stream default on {self.context.device}>"


def pack_kernargs(layout: list[dict], values: list) -> bytes:
    """The kernarg segment: each argument at its layout offset (arrays as pointer, shape, strides)."""
    size = max((e["offset"] + e["size"] for e in layout), default=0)
    out = bytearray(-(-size // 8) * 8)
    for entry, value in zip(layout, values, strict=True):
        off = entry["offset"]
        if entry["kind"] == "array":
            itemsize = value.dtype.itemsize
            strides = [s // itemsize for s in value.strides]
            struct.pack_into(f"<Q{value.ndim}q{value.ndim}q", out, off, value.ptr, *value.shape, *strides)
        else:
            fmt = {"int32": "<i", "uint32": "<I", "int64": "<q", "float32": "<f", "float64": "<d", "bool": "<I"}
            v = value.item() if hasattr(value, "item") else value
            struct.pack_into(fmt[entry["dtype"]], out, off, int(v) if entry["dtype"] == "bool" else v)
    return bytes(out)
