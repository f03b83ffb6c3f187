"""Layer 1, `lapis.driver`: the kernel driver (nvidia.ko / amdgpu+amdkfd of the stack).

Owns: the per-process device handle and its numbered commands, physical memory allocation
(buddy allocators for VRAM and for the host pages behind GTT), GPU page tables and VMIDs,
queue creation and doorbells, events and the interrupt handler, device management
(information, telemetry, the power limit) and recovery by GPU reset. It is the only package that
imports `lapis.hardware`; the runtime reaches the device only through it.
"""

from lapis.driver.buddy import OutOfMemoryError
from lapis.driver.events import WaitResult
from lapis.driver.kfd import DoorbellWindow, KfdProcess, open, system
from lapis.driver.kfd_ioctl import (
    AllocMemoryArgs,
    CreateEventArgs,
    CreateQueueArgs,
    DriverError,
    DriverOutOfMemory,
    EventArgs,
    GetClockCountersArgs,
    GetProcessAperturesArgs,
    GetVersionArgs,
    GpuArgs,
    Ioctl,
    MapMemoryArgs,
    MemFlags,
    MemoryHandleArgs,
    NodeProperties,
    QueueArgs,
    SetPowerLimitArgs,
    WaitEventsArgs,
)

__all__ = [
    "AllocMemoryArgs", "CreateEventArgs", "CreateQueueArgs", "DoorbellWindow", "DriverError", "DriverOutOfMemory",
    "EventArgs", "GetClockCountersArgs", "GetProcessAperturesArgs", "GetVersionArgs", "GpuArgs", "Ioctl",
    "KfdProcess", "MapMemoryArgs", "MemFlags", "MemoryHandleArgs", "NodeProperties", "OutOfMemoryError", "QueueArgs",
    "SetPowerLimitArgs", "WaitEventsArgs", "WaitResult", "open", "system"
]
