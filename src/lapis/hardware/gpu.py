"""Layer 0: one simulated GPU and the platform (host memory plus GPUs on PCIe) it sits in.

`Gpu` is what the driver sees of the device: a register interface for the control plane
(page-table roots per VMID, TLB invalidation, queue descriptors), doorbells, a window onto
VRAM through the PCIe BAR, and an interrupt line. Inside, it holds the memories, the MMU,
the command processor, the copy engine and the SIMT compute units. Every crossing between
host and device goes through its `PcieLink`.
"""

import math
import os

from lapis.hardware.command_processor import CommandProcessor, HardwareQueue, Interrupt
from lapis.hardware.copy_engine import CopyEngine
from lapis.hardware.memory import PhysicalMemory
from lapis.hardware.mmu import Mmu
from lapis.hardware.pcie import TO_DEVICE, TO_HOST, DeviceClock, PcieLink
from lapis.hardware.power import PowerModel
from lapis.hardware.profiles import DeviceProfile, GiB, get_profile
from lapis.hardware.simt import SimtCore

DEFAULT_WATCHDOG_STEPS = 1_000_000
# The longest one kernel may run, in host seconds, before the command processor stops it and faults its queue
# (LAPIS_KERNEL_TIMEOUT_S; 0: no limit). amdgpu gives a compute job 60 s before its timeout handler stops it
# (lockup_timeout). The simulator runs a kernel thousands of times slower than the device it models, so a display
# driver's 2 s (Windows' TDR) would stop real work; the slowest kernels of the tests take about a second.
DEFAULT_KERNEL_TIMEOUT_S = 60.0
# LAPIS_SIM=reference and compare run every instruction through numpy, from 5 to some tens of times slower.
REFERENCE_TIMEOUT_FACTOR = 10
HOST_MEMORY_BYTES = 512 * GiB


class Gpu:
    def __init__(self, index: int, profile: DeviceProfile, sysmem: PhysicalMemory):
        self.index = index
        self.profile = profile
        self.sysmem = sysmem
        self.clock = DeviceClock()
        self.pcie = PcieLink(profile.pcie_bandwidth, profile.pcie_latency_ns, self.clock, self.name)
        self.vram = PhysicalMemory(profile.memory_bytes, f"{self.name} VRAM")
        self.mmu = Mmu(self.vram)
        # LAPIS_SIM_CACHES=0 runs the SIMT core without the caches it keeps only for speed, to check them.
        caches = os.environ.get("LAPIS_SIM_CACHES", "1") != "0"
        # LAPIS_SIM=reference runs every instruction through the numpy executor, none translated;
        # LAPIS_SIM=compare runs every dispatch both ways and checks that they agree (for tests).
        sim = os.environ.get("LAPIS_SIM", "translated")
        if sim not in ("translated", "reference", "compare"):
            raise ValueError(f"LAPIS_SIM={sim!r}: expected translated, reference or compare")
        self.simt = SimtCore(profile, self.mmu, self.vram, sysmem, caches=caches, translated=sim != "reference",
                             compare=sim == "compare")
        # LAPIS_FUSE_AFTER=N compiles a run of arithmetic (`simt/fused.py`) once threads have run it N times
        # (`never`: none); LAPIS_SIM=compare compiles every run that has run, so that its check covers them.
        fuse_after = os.environ.get("LAPIS_FUSE_AFTER", "1" if sim == "compare" else str(SimtCore.FUSE_AFTER))
        if fuse_after.strip().lower() == "never":
            self.simt.fuse_after = None
        elif fuse_after.strip().isdigit():
            self.simt.fuse_after = int(fuse_after)
        else:
            raise ValueError(f"LAPIS_FUSE_AFTER={fuse_after!r}: expected a number of times or never")
        # As CUDA_LAUNCH_BLOCKING: the command processor runs packets on the thread that rings a doorbell.
        self.cp = CommandProcessor(self, launch_blocking=os.environ.get("LAPIS_LAUNCH_BLOCKING", "0") not in ("", "0"))
        self.copy_engine = CopyEngine(self)
        self.power = PowerModel(profile)
        self.watchdog_steps = int(os.environ.get("LAPIS_WATCHDOG_STEPS", DEFAULT_WATCHDOG_STEPS))
        default_timeout_s = DEFAULT_KERNEL_TIMEOUT_S * (1 if sim == "translated" else REFERENCE_TIMEOUT_FACTOR)
        self.kernel_timeout_s = kernel_timeout_s(os.environ.get("LAPIS_KERNEL_TIMEOUT_S", str(default_timeout_s)))
        self._interrupt_handler = None

    @property
    def name(self) -> str:
        return f"gpu{self.index}:{self.profile.name}"

    # -- register interface used by the driver (each write is an MMIO write over PCIe) --------
    def _mmio(self, what: str, nbytes: int = 8) -> None:
        self.pcie.transfer(TO_DEVICE, nbytes, what)

    def set_interrupt_handler(self, handler) -> None:
        self._interrupt_handler = handler

    def set_page_table_root(self, vmid: int, root_pa: int | None) -> None:
        self._mmio(f"VM_CONTEXT{vmid}_PAGE_TABLE_BASE")
        self.mmu.set_root(vmid, root_pa)

    def invalidate_tlb(self, vmid: int) -> None:
        self._mmio(f"VM_INVALIDATE_ENG0 vmid {vmid}", 4)
        self.mmu.invalidate(vmid)

    def map_queue(self, queue: HardwareQueue) -> None:
        self._mmio(f"HQD_MAP queue {queue.queue_id}", 64)
        self.cp.map_queue(queue)

    def unmap_queue(self, queue_id: int) -> None:
        self._mmio(f"HQD_UNMAP queue {queue_id}", 4)
        self.cp.unmap_queue(queue_id)

    def reset(self) -> None:
        """A full device reset (the driver's recovery after a fatal error): the command processor
        forgets its queues, failing the packets still in them, and caches and clocks start over."""
        self._mmio("GRBM_SOFT_RESET", 4)
        self.cp.reset()
        self.simt.data_caches.flush()
        self.power.reset()

    def ring_doorbell(self, doorbell: int, value: int) -> None:
        """A 64-bit write to the doorbell aperture of BAR2: wakes the queue's packet processor (with
        launch blocking, runs the queue's packets before it returns)."""
        self._mmio("doorbell write")              # the driver's trace names the doorbell and value
        self.cp.doorbell(doorbell, value)

    def bar_write(self, pa: int, data: bytes) -> None:
        """Host write into VRAM through the BAR (how the driver writes page tables)."""
        self.pcie.transfer(TO_DEVICE, len(data), "BAR write to VRAM")
        self.vram.write(pa, data)

    # -- device side ----------------------------------------------------------------------------
    def memory(self, system: bool) -> PhysicalMemory:
        return self.sysmem if system else self.vram

    def read_virtual(self, vmid: int, va: int, size: int, what: str, execute: bool = False) -> bytes:
        """A device-initiated read through the MMU (a packet, a descriptor, code, kernel arguments)."""
        run = self.mmu.hit(vmid, va, size, False, execute)
        if run is not None:                                   # one piece, in the TLB: no walk, no list
            return self._read(run.system, run.pa_start + va - run.va_start, size, what)
        return b"".join(self._read(system, pa, length, what)
                        for system, pa, length in self.mmu.translate_range(vmid, va, size, False, execute))

    def write_virtual(self, vmid: int, va: int, data: bytes, what: str) -> None:
        run = self.mmu.hit(vmid, va, len(data), True)
        if run is not None:                                   # one piece, in the TLB: no walk, no list
            self._write(run.system, run.pa_start + va - run.va_start, data, what)
            return
        offset = 0
        for system, pa, length in self.mmu.translate_range(vmid, va, len(data), True):
            self._write(system, pa, data[offset:offset + length], what)
            offset += length

    def _read(self, system: bool, pa: int, length: int, what: str) -> bytes:
        """One piece of a device-initiated read: from VRAM, or from host memory over PCIe."""
        if system:
            self.pcie.transfer(TO_DEVICE, length, what)
            return self.sysmem.read(pa, length)
        return self.vram.read(pa, length)

    def _write(self, system: bool, pa: int, data: bytes, what: str) -> None:
        if system:
            self.pcie.transfer(TO_HOST, len(data), what)
            self.sysmem.write(pa, data)
        else:
            self.vram.write(pa, data)

    def post_interrupt(self, entry: Interrupt) -> None:
        self.pcie.transfer(TO_HOST, 4, f"MSI interrupt ({entry.source})")
        if self._interrupt_handler is not None:
            self._interrupt_handler(entry)


class Platform:
    """The simulated machine: host system memory and the GPUs on its PCIe bus."""

    def __init__(self, profile_names: list[str], host_memory_bytes: int = HOST_MEMORY_BYTES):
        self.sysmem = PhysicalMemory(host_memory_bytes, "system memory")
        self.gpus = [Gpu(i, get_profile(name), self.sysmem) for i, name in enumerate(profile_names)]


def kernel_timeout_s(text: str) -> float:
    """A per-kernel time limit as LAPIS_KERNEL_TIMEOUT_S gives it: seconds, 0 for none."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:
        raise ValueError(f"LAPIS_KERNEL_TIMEOUT_S={text!r}: expected a number of seconds (0: no limit)")
    return seconds or math.inf
