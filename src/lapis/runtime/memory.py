"""Layer 2: memory pools and the buffers allocated from them (hsa_amd_memory_pool_*).

Each GPU agent has three pools, as ROCr reports them:
  - "device": the GPU's VRAM, coarse-grained; not reachable by the CPU (copy through the
    copy engine).
  - "host": fine-grained system memory (GTT), mapped for the CPU and the GPU alike.
  - "kernarg": host memory for kernel arguments (GTT), read by the command processor.
A `Buffer` has one GPU virtual address, valid on every GPU it is made accessible to.
The runtime's own memory (`internal`: signals, queue rings, staging; every kernarg and
executable buffer) gets its address from the driver's internal window, far from the user's
allocations, so a kernel's stray store past an array cannot land in what the host waits on.
"""

from dataclasses import dataclass

import numpy as np

from lapis import driver, trace
from lapis.runtime.errors import HsaError, OutOfMemory


@dataclass
class Buffer:
    """Memory from a pool: its GPU virtual address, size, and a CPU view if host-visible."""
    va: int
    size: int
    pool: "MemoryPool"
    handle: int
    host: np.ndarray | None = None
    freed: bool = False

    def free(self) -> None:
        self.pool.free(self)


class MemoryPool:
    def __init__(self, runtime, agent, kind: str):
        self.runtime, self.agent, self.kind = runtime, agent, kind

    @property
    def flags(self) -> driver.MemFlags:
        f = driver.MemFlags.WRITABLE
        if self.kind == "device":
            return f | driver.MemFlags.VRAM
        return f | driver.MemFlags.GTT | driver.MemFlags.COHERENT

    def allocate(self, size: int, executable: bool = False, internal: bool = False) -> Buffer:
        """`internal`: memory the runtime keeps for itself, out of the reach of the user's kernels' stray stores.
        Kernel arguments and code always are."""
        kfd = self.runtime.kfd
        flags = self.flags | (driver.MemFlags.EXECUTABLE if executable else 0)
        if internal or executable or self.kind == "kernarg":
            flags |= driver.MemFlags.INTERNAL
        try:
            r = kfd.ioctl(driver.Ioctl.ALLOC_MEMORY_OF_GPU, driver.AllocMemoryArgs(self.agent.gpu_id, size, flags))
        except driver.DriverOutOfMemory as e:
            raise OutOfMemory(f"{self.agent.name}: cannot allocate {size} bytes from the {self.kind} pool: {e}") \
                from None
        kfd.ioctl(driver.Ioctl.MAP_MEMORY_TO_GPU, driver.MapMemoryArgs(r.handle))
        host = kfd.mmap(r.handle) if self.kind != "device" else None
        trace.emit(2, "memory_pool_allocate", pool=self.kind, agent=self.agent.name, bytes=size, va=r.va_addr)
        return Buffer(r.va_addr, size, self, r.handle, host)

    def allow_access(self, buffer: Buffer, agents: list) -> None:
        """Make a host buffer reachable from more GPUs (hsa_amd_agents_allow_access)."""
        self.runtime.kfd.ioctl(driver.Ioctl.MAP_MEMORY_TO_GPU,
                               driver.MapMemoryArgs(buffer.handle, [a.gpu_id for a in agents]))

    def free(self, buffer: Buffer) -> None:
        if buffer.freed:
            raise HsaError(f"buffer at {buffer.va:#x} was already freed")
        buffer.freed = True
        buffer.host = None
        self.runtime.kfd.ioctl(driver.Ioctl.FREE_MEMORY_OF_GPU, driver.MemoryHandleArgs(buffer.handle))
