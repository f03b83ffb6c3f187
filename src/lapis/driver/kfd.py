"""Layer 1: the kernel driver behind /dev/kfd, modelled on amdkfd.

`open()` gives a process a handle (`KfdProcess`), as opening /dev/kfd does; the process
then issues numbered commands (`Ioctl`) with structured arguments and results, whose layouts
`kfd_ioctl.py` holds. One table, `AMDKFD_IOCTLS` at the end of this file, maps each command
to its handler and the arguments it takes, as amdkfd's amdkfd_ioctls[] does. A process
has its own GPU virtual address space on each GPU (a VMID and page tables), its own
memory, queues and events; the driver is the only code that touches the hardware.

The per-launch path does not come through here: after CREATE_QUEUE the process writes
packets into its ring (host memory it mapped) and rings the doorbell through the doorbell
window it mapped. The driver is the control plane: memory, queues, events, faults.
"""

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lapis import trace
from lapis.driver import sysfs
from lapis.driver.address_space import GPUVM_BASE, GPUVM_LIMIT, AddressSpace, VirtualRanges
from lapis.driver.buddy import BuddyAllocator, OutOfMemoryError
from lapis.driver.events import EventTable, WaitResult
from lapis.driver.kfd_ioctl import (
    KFD_VERSION,
    AllocMemoryArgs,
    AllocMemoryResult,
    Aperture,
    ClockCounters,
    CreateEventArgs,
    CreateEventResult,
    CreateQueueArgs,
    CreateQueueResult,
    DeviceInfo,
    DriverError,
    DriverOutOfMemory,
    EventArgs,
    GetClockCountersArgs,
    GetProcessAperturesArgs,
    GetVersionArgs,
    GetVersionResult,
    GpuArgs,
    Ioctl,
    MapMemoryArgs,
    MemFlags,
    MemoryHandleArgs,
    NodeProperties,
    ProcessMemory,
    QueueArgs,
    QueueStatusResult,
    SetPowerLimitArgs,
    TelemetryResult,
    WaitEventsArgs,
    WaitEventsResult,
)
from lapis.hardware import (
    PAGE_BYTES,
    PTE_EXECUTABLE,
    PTE_SYSTEM,
    PTE_WRITABLE,
    Gpu,
    HardwareQueue,
    Interrupt,
    Platform,
)

DEFAULT_GPUS = "h200,mi300x"
MAX_VMIDS = 16
EVENT_SLOTS = 4096
IDLE_TIMEOUT_S = 60.0      # how long unmapping memory waits for the process's queued work to finish


# -- driver state --------------------------------------------------------------------------------
@dataclass
class BufferObject:
    handle: int
    gpu_id: int
    flags: MemFlags
    pa: int
    size: int
    va: int
    mapped_gpus: set[int] = field(default_factory=set)


@dataclass
class QueueRecord:
    queue_id: int
    gpu_id: int
    doorbell: int
    state: str = "active"
    error: dict | None = None
    error_event_id: int | None = None


@dataclass
class GpuNode:
    """Per-GPU driver state: the device, its VRAM allocator, VMIDs and doorbells."""
    gpu: Gpu
    vram: BuddyAllocator
    free_vmids: list[int]
    next_doorbell: int = 0
    owners: dict[int, "KfdProcess"] = field(default_factory=dict)   # vmid -> process
    resets: int = 0


class DoorbellWindow:
    """A process's mapping of one queue's doorbell: a 64-bit write rings it over PCIe."""

    def __init__(self, gpu: Gpu, doorbell: int):
        self._gpu, self.doorbell = gpu, doorbell

    def write(self, value: int) -> None:
        if trace.enabled():
            trace.emit(1, "doorbell", doorbell=self.doorbell, value=value, device=self._gpu.name)
        self._gpu.ring_doorbell(self.doorbell, value)


class KfdSystem:
    """The loaded driver: the platform's GPUs and the host memory allocator behind GTT."""

    def __init__(self, profile_names: list[str]):
        self.platform = Platform(profile_names)
        self.nodes = [GpuNode(g, BuddyAllocator(0, g.profile.memory_bytes, f"{g.name} VRAM"),
                              list(range(1, MAX_VMIDS))) for g in self.platform.gpus]
        self.gtt = BuddyAllocator(0, self.platform.sysmem.size, "system memory (GTT)")
        self.lock = threading.RLock()
        self._next_pid = 1
        for node in self.nodes:
            node.gpu.set_interrupt_handler(lambda entry, node=node: self._interrupt(node, entry))
        self.publisher = sysfs.start(self)      # device state for monitors in other processes (lapis smi)

    def topology(self) -> list[NodeProperties]:
        """What /sys/class/kfd/kfd/topology/nodes would tell: each GPU's properties."""
        names = {f.name for f in dataclasses.fields(NodeProperties)} - {"gpu_id", "profile"}
        return [NodeProperties(gpu_id=i, profile=n.gpu.profile.name,
                               **{k: getattr(n.gpu.profile, k) for k in names}) for i, n in enumerate(self.nodes)]

    def open(self, admin: bool = False) -> "KfdProcess":
        """A process's handle on the driver; `admin` is what CAP_SYS_ADMIN is on Linux: a reset of a GPU, which
        stops every process's work on it, needs it."""
        with self.lock:
            pid = self._next_pid
            self._next_pid += 1
        return KfdProcess(self, pid, admin)

    def telemetry(self, gpu_id: int) -> TelemetryResult:
        """A GPU's power, thermals, clocks, memory and each client's VRAM (GET_TELEMETRY; sysfs publishes it)."""
        node = self.nodes[gpu_id]
        t = node.gpu.power.telemetry()
        processes = []
        with self.lock:           # sysfs's thread reads the buffer tables while commands change them
            for process in {id(p): p for p in node.owners.values()}.values():
                held = sum(bo.size for bo in process.buffers.values()
                           if bo.gpu_id == gpu_id and bo.flags & MemFlags.VRAM)
                processes.append(ProcessMemory(process.pid, held))
        return TelemetryResult(gpu_id, t.power_watts, t.power_limit_watts, t.temperature_c, t.sm_clock_mhz,
                               t.memory_clock_mhz, node.vram.used, node.gpu.profile.memory_bytes, t.utilisation,
                               t.energy_joules, t.throttle_reasons, sorted(processes, key=lambda m: m.pid))

    def _interrupt(self, node: GpuNode, entry: Interrupt) -> None:
        if trace.enabled():
            trace.emit(1, "interrupt", device=node.gpu.name, source=entry.source, vmid=entry.vmid,
                       queue=entry.queue_id, event_id=entry.event_id)
        if entry.source == "fatal":
            # Recover on a thread of the driver's own: the interrupt arrives on the device's.
            threading.Thread(target=self.reset, args=(node, entry.detail.get("reason", "fatal device error")),
                             name=f"{node.gpu.name} reset", daemon=True).start()
            return
        process = node.owners.get(entry.vmid)
        if process is None:
            return
        if entry.source == "signal":
            process.events.set(entry.event_id)
        elif entry.source == "queue_error":
            record = process.queues.get(entry.queue_id)
            if record is not None:
                record.state, record.error = "error", dict(entry.detail)
                if record.error_event_id is not None:
                    process.events.set(record.error_event_id)
            trace.emit(1, "fault", process=process.pid, queue=entry.queue_id, **entry.detail)
            process.events.fail()

    def reset(self, node: GpuNode, reason: str) -> None:
        """Reset a GPU (amdgpu's GPU recovery): every queue on it stops, in every process.

        The processes keep their memory and page tables; each of their queues on the GPU goes to
        the "reset" state with the reason, its error event is set, and the packets still queued
        complete with -1, so every waiter wakes to a clear error instead of hanging. New queues
        may be created afterwards."""
        with self.lock:
            node.resets += 1
            trace.emit(1, "gpu_reset", device=node.gpu.name, reason=reason, resets=node.resets)
            node.gpu.reset()
            for process in list(node.owners.values()):
                for record in process.queues.values():
                    if record.gpu_id == self.nodes.index(node) and record.state != "reset":
                        record.state = "reset"
                        record.error = {"reason": f"the GPU was reset: {reason}"}
                        if record.error_event_id is not None:
                            process.events.set(record.error_event_id)
                process.events.fail()


class KfdProcess:
    """One process's open handle on the driver."""

    def __init__(self, system: KfdSystem, pid: int, admin: bool = False):
        self.system, self.pid, self.admin = system, pid, admin
        self.spaces: dict[int, AddressSpace] = {}
        self.buffers: dict[int, BufferObject] = {}
        self.queues: dict[int, QueueRecord] = {}
        self._next_handle = 1
        self._next_queue = 1
        self.closed = False
        self.ranges = VirtualRanges()
        # The event page: host memory any GPU of the process may write event ids into.
        self._event_page_pa = system.gtt.alloc(EVENT_SLOTS * 8)
        self.events = EventTable(self.ranges.reserve(EVENT_SLOTS * 8, internal=True), EVENT_SLOTS)

    # -- dispatch of numbered commands ---------------------------------------------------------
    def ioctl(self, cmd: Ioctl, args):
        """Run a command: its row in `AMDKFD_IOCTLS` names the handler and the arguments it takes."""
        if self.closed:
            raise DriverError("the driver handle is closed")
        command = AMDKFD_IOCTLS.get(cmd)
        if command is None:
            raise DriverError(f"unknown command {cmd:#x}")
        name = Ioctl(cmd).name
        # As amdkfd refuses an argument whose size is not the one the command number encodes.
        if not isinstance(args, command.args):
            raise DriverError(f"{name} takes {command.args.__name__}, not {type(args).__name__}")
        with self.system.lock:
            if not trace.enabled():              # the summaries (dataclasses.asdict) only for a trace
                return command.handler(self, args)
            with trace.span(1, name, **_summary(args)) as extra:
                result = command.handler(self, args)
                if result is not None:
                    extra.update(_summary(result))
                return result

    def _node(self, gpu_id: int) -> GpuNode:
        if not 0 <= gpu_id < len(self.system.nodes):
            raise DriverError(f"no GPU with id {gpu_id}")
        return self.system.nodes[gpu_id]

    def _space(self, gpu_id: int) -> AddressSpace:
        """The process's address space on a GPU, created (with a VMID) on first use."""
        space = self.spaces.get(gpu_id)
        if space is None:
            node = self._node(gpu_id)
            if not node.free_vmids:
                raise DriverError(f"{node.gpu.name}: all {MAX_VMIDS - 1} VMIDs are in use by other processes")
            vmid = node.free_vmids.pop(0)
            space = AddressSpace(node.gpu, node.vram, vmid)
            node.owners[vmid] = self
            self.spaces[gpu_id] = space
            space.map(self.events.mailbox_base_va, self._event_page_pa, EVENT_SLOTS * 8, PTE_SYSTEM | PTE_WRITABLE)
        return space

    def _get_version(self, args: GetVersionArgs) -> GetVersionResult:
        return GetVersionResult(*KFD_VERSION)

    def _get_process_apertures(self, args: GetProcessAperturesArgs) -> list[Aperture]:
        return [Aperture(i, GPUVM_BASE, GPUVM_LIMIT) for i in range(len(self.system.nodes))]

    # -- management ----------------------------------------------------------------------------
    def _get_device_info(self, args: GpuArgs) -> DeviceInfo:
        node = self._node(args.gpu_id)
        p, power = node.gpu.profile, node.gpu.power
        return DeviceInfo(args.gpu_id, node.gpu.name, p.marketing_name, p.name, p.vendor, p.memory_bytes,
                          power.min_power_limit, p.tdp_watts, p.temperature_limit_c, node.resets)

    def _get_telemetry(self, args: GpuArgs) -> TelemetryResult:
        self._node(args.gpu_id)
        return self.system.telemetry(args.gpu_id)

    def _set_power_limit(self, args: SetPowerLimitArgs) -> None:
        try:
            self._node(args.gpu_id).gpu.power.set_power_limit(args.watts)
        except ValueError as e:
            raise DriverError(str(e)) from None

    def _reset_gpu(self, args: GpuArgs) -> None:
        node = self._node(args.gpu_id)
        if not self.admin:             # amdgpu's recovery and nvidia-smi -r are root's: a reset stops every process
            raise DriverError("RESET_GPU: operation not permitted (EPERM): a reset stops every process's work on "
                              "the GPU and needs a privileged handle (driver.system().open(admin=True))")
        self.system.reset(node, "reset requested")

    def _get_clock_counters(self, args: GetClockCountersArgs) -> ClockCounters:
        gpu = self._node(args.gpu_id).gpu
        now = time.monotonic_ns()
        return ClockCounters(int(gpu.clock.now_ns), now, now, 10**9)

    # -- memory ----------------------------------------------------------------------------
    def _alloc_memory_of_gpu(self, args: AllocMemoryArgs) -> AllocMemoryResult:
        flags = MemFlags(args.flags)
        if bool(flags & MemFlags.VRAM) == bool(flags & MemFlags.GTT):
            raise DriverError("ALLOC_MEMORY_OF_GPU needs exactly one of VRAM and GTT")
        node = self._node(args.gpu_id)
        self._space(args.gpu_id)
        size = -(-args.size // PAGE_BYTES) * PAGE_BYTES
        allocator = node.vram if flags & MemFlags.VRAM else self.system.gtt
        try:
            pa = allocator.alloc(size)
        except OutOfMemoryError as e:
            raise DriverOutOfMemory(str(e)) from None
        va = self.ranges.reserve(size, internal=bool(flags & MemFlags.INTERNAL))
        handle = self._next_handle
        self._next_handle += 1
        self.buffers[handle] = BufferObject(handle, args.gpu_id, flags, pa, size, va)
        return AllocMemoryResult(handle, va, size)

    def _buffer(self, handle: int) -> BufferObject:
        bo = self.buffers.get(handle)
        if bo is None:
            raise DriverError(f"memory handle {handle} does not exist (already freed?)")
        return bo

    def _map_memory_to_gpu(self, args: MapMemoryArgs) -> None:
        bo = self._buffer(args.handle)
        gpu_ids = [bo.gpu_id] if args.gpu_ids is None else args.gpu_ids
        if bo.flags & MemFlags.VRAM and set(gpu_ids) - {bo.gpu_id}:
            raise DriverError("VRAM can only be mapped to the GPU it lives on (peer access is not modelled)")
        flags = (PTE_WRITABLE if bo.flags & MemFlags.WRITABLE else 0) | \
                (PTE_EXECUTABLE if bo.flags & MemFlags.EXECUTABLE else 0) | \
                (PTE_SYSTEM if bo.flags & MemFlags.GTT else 0)
        for gpu_id in gpu_ids:
            if gpu_id not in bo.mapped_gpus:
                self._space(gpu_id).map(bo.va, bo.pa, bo.size, flags)
                bo.mapped_gpus.add(gpu_id)

    def _unmap_memory_from_gpu(self, args: MapMemoryArgs) -> None:
        bo = self._buffer(args.handle)
        for gpu_id in sorted(bo.mapped_gpus if args.gpu_ids is None else set(args.gpu_ids) & bo.mapped_gpus):
            self._wait_idle(gpu_id, f"unmapping memory handle {bo.handle}")
            self.spaces[gpu_id].unmap(bo.va, bo.size)
            bo.mapped_gpus.discard(gpu_id)

    def _wait_idle(self, gpu_id: int, why: str) -> None:
        """Wait until the process's queued work on a GPU has finished (as freeing a buffer object
        waits on its fences in amdgpu): memory a queued kernel uses is never pulled from under it."""
        cp, vmid = self._node(gpu_id).gpu.cp, self.spaces[gpu_id].vmid
        if cp.idle(vmid):
            return
        self.system.lock.release()        # other processes' commands go on meanwhile
        try:
            idle = cp.wait_idle(vmid, IDLE_TIMEOUT_S)
        finally:
            self.system.lock.acquire()
        if not idle:
            raise DriverError(f"{why}: the memory may be in use by work still queued on "
                              f"{self._node(gpu_id).gpu.name} that did not finish within {IDLE_TIMEOUT_S:.0f} s "
                              "(a barrier packet waiting on a signal nobody sets?)")

    def _free_memory_of_gpu(self, args: MemoryHandleArgs) -> None:
        bo = self._buffer(args.handle)
        self._unmap_memory_from_gpu(MapMemoryArgs(args.handle, None))
        node = self._node(bo.gpu_id)
        if bo.flags & MemFlags.VRAM:
            node.vram.free_block(bo.pa)
            node.gpu.vram.release(bo.pa, bo.size)
        else:
            self.system.gtt.free_block(bo.pa)
            self.system.platform.sysmem.release(bo.pa, bo.size)
        self.ranges.release(bo.va, bo.size)
        del self.buffers[args.handle]

    def mmap(self, handle: int) -> np.ndarray:
        """Map a GTT buffer into the process's CPU view: a uint8 array over its host pages."""
        bo = self._buffer(handle)
        if not bo.flags & MemFlags.GTT:
            raise DriverError("only GTT (host) memory can be mapped for the CPU; copy VRAM with the copy engine")
        return self.system.platform.sysmem.view(bo.pa, bo.size)

    def mmap_doorbell(self, queue_id: int) -> DoorbellWindow:
        record = self.queues.get(queue_id)
        if record is None:
            raise DriverError(f"queue {queue_id} does not exist")
        return DoorbellWindow(self._node(record.gpu_id).gpu, record.doorbell)

    # -- queues ------------------------------------------------------------------------------
    def _create_queue(self, args: CreateQueueArgs) -> CreateQueueResult:
        node = self._node(args.gpu_id)
        space = self._space(args.gpu_id)
        packets = args.ring_size // 64
        if args.ring_size % 64 or packets & (packets - 1) or packets < 1:
            raise DriverError(f"ring size {args.ring_size} is not a power-of-two number of 64-byte packets")
        if args.queue_type not in ("compute", "copy"):
            raise DriverError(f"unknown queue type {args.queue_type!r}")
        queue_id = self._next_queue
        self._next_queue += 1
        doorbell = node.next_doorbell
        node.next_doorbell += 1
        node.gpu.map_queue(HardwareQueue(queue_id=(self.pid << 16) | queue_id, vmid=space.vmid,
                                         kind=args.queue_type, ring_va=args.ring_base_address,
                                         ring_packets=packets, read_index_va=args.read_pointer_address,
                                         doorbell=doorbell))
        self.queues[(self.pid << 16) | queue_id] = QueueRecord((self.pid << 16) | queue_id, args.gpu_id, doorbell,
                                                               error_event_id=args.error_event_id)
        return CreateQueueResult((self.pid << 16) | queue_id, doorbell)

    def _destroy_queue(self, args: QueueArgs) -> None:
        record = self.queues.pop(args.queue_id, None)
        if record is None:
            raise DriverError(f"queue {args.queue_id} does not exist")
        self._node(record.gpu_id).gpu.unmap_queue(args.queue_id)

    def _queue_status(self, args: QueueArgs) -> QueueStatusResult:
        record = self.queues.get(args.queue_id)
        if record is None:
            raise DriverError(f"queue {args.queue_id} does not exist")
        return QueueStatusResult(record.state, record.error)

    # -- events ------------------------------------------------------------------------------
    def _create_event(self, args: CreateEventArgs) -> CreateEventResult:
        event = self.events.create(args.auto_reset)
        return CreateEventResult(event.event_id, event.mailbox_va)

    def _destroy_event(self, args: EventArgs) -> None:
        self.events.destroy(args.event_id)

    def _set_event(self, args: EventArgs) -> None:
        self.events.set(args.event_id)

    def _reset_event(self, args: EventArgs) -> None:
        self.events.reset(args.event_id)

    def _wait_events(self, args: WaitEventsArgs) -> WaitEventsResult:
        timeout = None if args.timeout_ms is None else args.timeout_ms / 1000
        # Waiting must not hold the driver lock, or the interrupt that ends the wait could not run.
        self.system.lock.release()
        try:
            for gpu_id, space in list(self.spaces.items()):      # the device's work, on the waiting thread
                self._node(gpu_id).gpu.cp.run_ready(space.vmid)
            return WaitEventsResult(self.events.wait(args.event_ids, args.wait_for_all, timeout))
        finally:
            self.system.lock.acquire()

    def close(self) -> None:
        """Release everything the process holds, as closing /dev/kfd does."""
        if self.closed:
            return
        with self.system.lock:
            for queue_id in list(self.queues):
                self._destroy_queue(QueueArgs(queue_id))
            for handle in list(self.buffers):
                self._free_memory_of_gpu(MemoryHandleArgs(handle))
            for gpu_id, space in self.spaces.items():
                node = self._node(gpu_id)
                space.destroy()
                node.owners.pop(space.vmid, None)
                node.free_vmids.append(space.vmid)
            self.spaces.clear()
            self.system.gtt.free_block(self._event_page_pa)
            self.system.platform.sysmem.release(self._event_page_pa, EVENT_SLOTS * 8)
            self.closed = True


@dataclass(frozen=True)
class IoctlDef:
    """One row of the command table, as amdkfd's AMDKFD_IOCTL_DEF: the handler and its argument layout."""
    handler: Callable[[KfdProcess, Any], Any]
    args: type


# Every command the driver takes, in one place (amdkfd's amdkfd_ioctls[] in kfd_chardev.c). A handler
# runs under the driver lock; WAIT_EVENTS, and FREE and UNMAP waiting for the GPU, release it while they sleep.
AMDKFD_IOCTLS: dict[Ioctl, IoctlDef] = {
    Ioctl.GET_VERSION: IoctlDef(KfdProcess._get_version, GetVersionArgs),
    Ioctl.CREATE_QUEUE: IoctlDef(KfdProcess._create_queue, CreateQueueArgs),
    Ioctl.DESTROY_QUEUE: IoctlDef(KfdProcess._destroy_queue, QueueArgs),
    Ioctl.GET_CLOCK_COUNTERS: IoctlDef(KfdProcess._get_clock_counters, GetClockCountersArgs),
    Ioctl.GET_PROCESS_APERTURES: IoctlDef(KfdProcess._get_process_apertures, GetProcessAperturesArgs),
    Ioctl.CREATE_EVENT: IoctlDef(KfdProcess._create_event, CreateEventArgs),
    Ioctl.DESTROY_EVENT: IoctlDef(KfdProcess._destroy_event, EventArgs),
    Ioctl.SET_EVENT: IoctlDef(KfdProcess._set_event, EventArgs),
    Ioctl.RESET_EVENT: IoctlDef(KfdProcess._reset_event, EventArgs),
    Ioctl.WAIT_EVENTS: IoctlDef(KfdProcess._wait_events, WaitEventsArgs),
    Ioctl.ALLOC_MEMORY_OF_GPU: IoctlDef(KfdProcess._alloc_memory_of_gpu, AllocMemoryArgs),
    Ioctl.FREE_MEMORY_OF_GPU: IoctlDef(KfdProcess._free_memory_of_gpu, MemoryHandleArgs),
    Ioctl.MAP_MEMORY_TO_GPU: IoctlDef(KfdProcess._map_memory_to_gpu, MapMemoryArgs),
    Ioctl.UNMAP_MEMORY_FROM_GPU: IoctlDef(KfdProcess._unmap_memory_from_gpu, MapMemoryArgs),
    Ioctl.QUEUE_STATUS: IoctlDef(KfdProcess._queue_status, QueueArgs),
    Ioctl.GET_DEVICE_INFO: IoctlDef(KfdProcess._get_device_info, GpuArgs),
    Ioctl.GET_TELEMETRY: IoctlDef(KfdProcess._get_telemetry, GpuArgs),
    Ioctl.SET_POWER_LIMIT: IoctlDef(KfdProcess._set_power_limit, SetPowerLimitArgs),
    Ioctl.RESET_GPU: IoctlDef(KfdProcess._reset_gpu, GpuArgs),
}


def _summary(obj) -> dict:
    if isinstance(obj, list):
        return {"items": len(obj)}
    if dataclasses.is_dataclass(obj):
        return {k: (v.name if isinstance(v, WaitResult | MemFlags) else v)
                for k, v in dataclasses.asdict(obj).items()}
    return {}


_system: KfdSystem | None = None
_system_lock = threading.Lock()


def system() -> KfdSystem:
    """The loaded driver, created on first use with the GPUs named in $LAPIS_GPUS."""
    global _system
    with _system_lock:
        if _system is None:
            names = [n.strip() for n in os.environ.get("LAPIS_GPUS", DEFAULT_GPUS).split(",") if n.strip()]
            _system = KfdSystem(names)
        return _system


def open(admin: bool = False) -> KfdProcess:  # noqa: A001 - the name mirrors open("/dev/kfd")
    return system().open(admin)
