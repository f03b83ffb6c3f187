"""Shared fixtures: a bare simulated GPU with a mapped address space, for hardware-level tests."""

import struct

import numpy as np
import pytest

from lapis import abi, isa
from lapis.driver.address_space import AddressSpace
from lapis.driver.buddy import BuddyAllocator
from lapis.hardware import PTE_SYSTEM, PTE_WRITABLE, Gpu, PhysicalMemory, get_profile
from lapis.hardware.perf import occupancy
from lapis.hardware.simt import Dispatch

VMID = 1


class Bench:
    """One GPU with page tables for VMID 1, and helpers to map memory and run assembled programs."""

    def __init__(self, profile: str = "h200"):
        self.sysmem = PhysicalMemory(1 << 32, "test system memory")
        self.gpu = Gpu(0, get_profile(profile), self.sysmem)
        self.vram = BuddyAllocator(0, 1 << 32, "test VRAM")
        self.host = BuddyAllocator(0, 1 << 32, "test host memory")
        self.space = AddressSpace(self.gpu, self.vram, VMID)
        self.next_va = 0x7F00_0000_0000

    def buffer(self, data: np.ndarray, system: bool = False) -> int:
        """Map a copy of `data` at a fresh GPU address; returns the address."""
        size = max(data.nbytes, 1)
        pa = (self.host if system else self.vram).alloc(size)
        va = self.next_va
        self.next_va += (size + 0x20000) // 0x10000 * 0x10000
        self.space.map(va, pa, size, PTE_WRITABLE | (PTE_SYSTEM if system else 0))
        (self.sysmem if system else self.gpu.vram).write(pa, data.tobytes())
        self._pa = getattr(self, "_pa", {})
        self._pa[va] = (pa, system)
        return va

    def read(self, va: int, like: np.ndarray) -> np.ndarray:
        pa, system = self._pa[va]
        raw = (self.sysmem if system else self.gpu.vram).read(pa, like.nbytes)
        return np.frombuffer(raw, like.dtype).reshape(like.shape)

    def run(self, source, grid=(1, 1, 1), block=(32, 1, 1), args: bytes = b"", shared: int = 0,
            registers: int = 32, watchdog: int = 100_000):
        program = isa.assemble(source) if isinstance(source, str) else source
        cbank = np.zeros(abi.CBANK_BYTES // 4, np.uint32)
        cbank[0:3], cbank[3:6] = block, grid
        cbank[abi.CBANK_WARP_SIZE // 4] = self.gpu.profile.warp_size
        words = np.frombuffer(args + bytes(-len(args) % 4), np.uint32)
        cbank[abi.KERNARG_CBANK_OFFSET // 4:abi.KERNARG_CBANK_OFFSET // 4 + len(words)] = words
        d = Dispatch(program, tuple(block), tuple(grid), registers, shared, cbank, VMID, watchdog)
        occ = occupancy(self.gpu.profile, block[0] * block[1] * block[2], registers, shared)
        return self.gpu.simt.run(d, occ.resident_blocks)


def pointers(*values) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


@pytest.fixture
def bench():
    return Bench()


@pytest.fixture
def bench64():
    return Bench("mi300x")
