"""Layer 1: the driver's command interface, as amdkfd's uapi header kfd_ioctl.h.

What a process and the driver agree on: the command numbers (`Ioctl`), the memory flags,
and the layout of each command's arguments and result. The driver's table of handlers
(`lapis.driver.kfd.AMDKFD_IOCTLS`) names, for each command, which of these it takes.
"""

from dataclasses import dataclass
from enum import IntEnum, IntFlag

from lapis.driver.events import WaitResult

KFD_VERSION = (1, 14)


class Ioctl(IntEnum):
    """Command numbers, as in amdkfd's kfd_ioctl.h."""
    GET_VERSION = 0x01
    CREATE_QUEUE = 0x02
    DESTROY_QUEUE = 0x03
    GET_CLOCK_COUNTERS = 0x05
    GET_PROCESS_APERTURES = 0x06
    CREATE_EVENT = 0x08
    DESTROY_EVENT = 0x09
    SET_EVENT = 0x0A
    RESET_EVENT = 0x0B
    WAIT_EVENTS = 0x0C
    ALLOC_MEMORY_OF_GPU = 0x16
    FREE_MEMORY_OF_GPU = 0x17
    MAP_MEMORY_TO_GPU = 0x18
    UNMAP_MEMORY_FROM_GPU = 0x19
    QUEUE_STATUS = 0x80          # lapis: a queue's state and, after a fault, what went wrong
    # Management (what amdgpu exposes through sysfs/hwmon and nvidia-smi through NVML).
    GET_DEVICE_INFO = 0x81
    GET_TELEMETRY = 0x82
    SET_POWER_LIMIT = 0x83
    RESET_GPU = 0x84


class MemFlags(IntFlag):
    VRAM = 1 << 0
    GTT = 1 << 1
    # lapis: the runtime's own memory (signals, rings, kernel arguments, staging, code), placed in the internal
    # window of the address space, out of reach of a kernel's stray stores past the user's arrays
    INTERNAL = 1 << 16
    UNCACHED = 1 << 25
    COHERENT = 1 << 26
    EXECUTABLE = 1 << 30
    WRITABLE = 1 << 31


class DriverError(Exception):
    """A command the driver refused; the message says why."""


class DriverOutOfMemory(DriverError, MemoryError):
    pass


@dataclass(frozen=True)
class NodeProperties:
    """One GPU of the topology, what amdkfd publishes under /sys/class/kfd/kfd/topology/nodes/N: the profile's
    figures a runtime and the programming interfaces above it report (not the performance model's)."""
    gpu_id: int
    profile: str                   # the simulated profile, "h200" or "mi300x"
    marketing_name: str
    vendor: str                    # "nvidia" or "amd"
    compute_capability: tuple[int, int]
    compute_units: int             # SMs or CUs
    warp_size: int
    clock_ghz: float
    memory_clock_mhz: float
    max_threads_per_block: int
    max_threads_per_unit: int
    shared_per_block: int          # bytes
    shared_per_unit: int           # bytes
    registers_per_unit: int        # 32-bit registers
    register_allocation_unit: int  # registers a warp is given at a time
    max_registers_per_thread: int
    max_local_per_thread: int      # bytes of local (private) memory
    max_blocks_per_unit: int
    memory_bytes: int
    l1_bytes: int                  # the L1 data cache of a unit (on Hopper before shared memory's carve-out)
    l2_bytes: int                  # all slices together
    l2_slices: int                 # the H200's partitions, the MI300X's XCDs: a unit sees l2_bytes / l2_slices
    far_cache_bytes: int           # the level behind the slices (the far partition, the Infinity Cache), or 0
    fp32_tflops: float
    matrix_tflops: float
    memory_bandwidth: float        # bytes per second
    l2_bandwidth: float            # bytes per second

    @property
    def reported_l2_bytes(self) -> int:
        """The L2's size as the vendor's runtime reports it: NVIDIA's whole L2 (cudaDeviceProp.l2CacheSize is 60 MiB on
        an H200, 50 MB on an H100 SXM), AMD's one XCD's (hipDeviceProp_t.l2CacheSize and rocminfo give the MI300X's
        4 MB)."""
        return self.l2_bytes // self.l2_slices if self.vendor == "amd" else self.l2_bytes


# -- command arguments and results ---------------------------------------------------------------
@dataclass
class GetVersionArgs:
    pass


@dataclass
class GetVersionResult:
    major: int
    minor: int


@dataclass
class GetProcessAperturesArgs:
    pass


@dataclass
class Aperture:
    gpu_id: int
    gpuvm_base: int
    gpuvm_limit: int


@dataclass
class AllocMemoryArgs:
    gpu_id: int
    size: int
    flags: MemFlags


@dataclass
class AllocMemoryResult:
    handle: int
    va_addr: int
    size: int


@dataclass
class MemoryHandleArgs:
    handle: int


@dataclass
class MapMemoryArgs:
    handle: int
    gpu_ids: list[int] | None = None      # None: the GPU the memory was allocated on


@dataclass
class CreateQueueArgs:
    gpu_id: int
    queue_type: str                 # "compute" (AQL) or "copy"
    ring_base_address: int          # GPU VA of the ring (in memory the process allocated)
    ring_size: int                  # bytes, a power of two multiple of 64
    read_pointer_address: int       # GPU VA of the u64 read index the device updates
    error_event_id: int | None = None   # an event the driver sets when the queue stops on an error


@dataclass
class CreateQueueResult:
    queue_id: int
    doorbell_offset: int


@dataclass
class QueueArgs:
    queue_id: int


@dataclass
class QueueStatusResult:
    state: str
    error: dict | None


@dataclass
class CreateEventArgs:
    auto_reset: bool = True


@dataclass
class CreateEventResult:
    event_id: int
    mailbox_address: int            # GPU VA a signal names to have this event set on completion


@dataclass
class EventArgs:
    event_id: int


@dataclass
class WaitEventsArgs:
    event_ids: list[int]
    wait_for_all: bool = False
    timeout_ms: int | None = None


@dataclass
class WaitEventsResult:
    wait_result: WaitResult


@dataclass
class GetClockCountersArgs:
    gpu_id: int


@dataclass
class GpuArgs:
    gpu_id: int


@dataclass
class DeviceInfo:
    gpu_id: int
    name: str                       # e.g. "gpu0:h200"
    marketing_name: str
    profile: str
    vendor: str
    memory_total: int
    power_limit_min_watts: float
    power_limit_max_watts: float
    temperature_limit_c: float
    resets: int


@dataclass
class ProcessMemory:
    pid: int
    memory_bytes: int               # VRAM the process holds on the GPU


@dataclass
class TelemetryResult:
    gpu_id: int
    power_watts: float
    power_limit_watts: float
    temperature_c: float
    sm_clock_mhz: float
    memory_clock_mhz: float
    memory_used: int
    memory_total: int
    utilisation: float              # 0..1 over the last second
    energy_joules: float
    throttle_reasons: tuple[str, ...]
    processes: list[ProcessMemory]


@dataclass
class SetPowerLimitArgs:
    gpu_id: int
    watts: float


@dataclass
class ClockCounters:
    gpu_clock_counter: int          # simulated device nanoseconds
    cpu_clock_counter: int
    system_clock_counter: int
    system_clock_freq: int
