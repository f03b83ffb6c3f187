"""Layer 0, `lapis.hardware`: the simulated GPU (the H200 / MI300X silicon of the stack).

Owns: device profiles, physical memories (sparse), the MMU and its page-table format, the
PCIe link, the command processor that consumes AQL packets from user-mode queues, the copy
engine, the SIMT cores that execute lapis ISA machine code, and the performance model.
Only the driver (Layer 1) imports this package.
"""

from lapis.hardware.command_processor import HardwareQueue, Interrupt
from lapis.hardware.gpu import Gpu, Platform
from lapis.hardware.memory import PAGE_BYTES, PhysicalMemory
from lapis.hardware.mmu import PTE_EXECUTABLE, PTE_SYSTEM, PTE_VALID, PTE_WRITABLE, make_entry
from lapis.hardware.profiles import PROFILES, DeviceProfile, get_profile

__all__ = ["PAGE_BYTES", "PROFILES", "PTE_EXECUTABLE", "PTE_SYSTEM", "PTE_VALID", "PTE_WRITABLE", "DeviceProfile",
           "Gpu", "HardwareQueue", "Interrupt", "PhysicalMemory", "Platform", "get_profile", "make_entry"]
