"""Shared fixtures: a bare simulated GPU with a mapped address space, for hardware-level tests."""

import os
import struct
import tempfile
from contextlib import contextmanager

import numpy as np
import pytest

from lapis import abi, driver, isa
from lapis.driver.address_space import AddressSpace
from lapis.driver.buddy import BuddyAllocator
from lapis.hardware import PTE_SYSTEM, PTE_WRITABLE, Gpu, PhysicalMemory, get_profile
from lapis.hardware.perf import model_time, occupancy
from lapis.hardware.simt import Dispatch

VMID = 1

# The suite compiles into a cache of its own: nothing from an earlier run (or the user's) is reused.
os.environ["LAPIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="lapis-test-cache-")


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

    def reserve(self, nbytes: int) -> int:
        """Map `nbytes` of zeroed VRAM without writing it (no host memory until touched)."""
        pa = self.vram.alloc(nbytes)
        va = self.next_va
        self.next_va += (nbytes + 0x20000) // 0x10000 * 0x10000
        self.space.map(va, pa, nbytes, PTE_WRITABLE)
        self._pa = getattr(self, "_pa", {})
        self._pa[va] = (pa, False)
        return va

    def read(self, va: int, like: np.ndarray) -> np.ndarray:
        pa, system = self._pa[va]
        raw = (self.sysmem if system else self.gpu.vram).read(pa, like.nbytes)
        return np.frombuffer(raw, like.dtype).reshape(like.shape)

    def run(self, source, grid=(1, 1, 1), block=(32, 1, 1), args: bytes = b"", shared: int = 0,
            registers: int = 32, watchdog: int = 100_000, local: int = 0):
        program = self.assembled(source) if isinstance(source, str) else source
        cbank = np.zeros(abi.CBANK_BYTES // 4, np.uint32)
        cbank[0:3], cbank[3:6] = block, grid
        cbank[abi.CBANK_WARP_SIZE // 4] = self.gpu.profile.warp_size
        words = np.frombuffer(args + bytes(-len(args) % 4), np.uint32)
        cbank[abi.KERNARG_CBANK_OFFSET // 4:abi.KERNARG_CBANK_OFFSET // 4 + len(words)] = words
        d = Dispatch(program, tuple(block), tuple(grid), registers, shared, cbank, VMID, watchdog, local)
        occ = occupancy(self.gpu.profile, block[0] * block[1] * block[2], registers, shared)
        self.last = (program, occ)
        return self.gpu.simt.run(d, occ.resident_blocks)

    def assembled(self, source: str) -> list:
        """The program of `source`, assembled once: a second launch of it runs the same code object, as a
        real program's would (its batch and translation are kept, its hot runs fused)."""
        self._programs = getattr(self, "_programs", {})
        if source not in self._programs:
            self._programs[source] = isa.assemble(source)
        return self._programs[source]

    def timing(self, counters):
        """The performance model's verdict on the last run."""
        program, occ = self.last
        return model_time(self.gpu.profile, counters, occ, program)

    def lanes(self, body: str, inputs: np.ndarray, n_out: int, block: int = 32, **kw) -> np.ndarray:
        """Run `body` with each lane's row of `inputs` (uint32 words) in R8, R9, ... and return
        each lane's R40, R41, ... (n_out words). R0 holds the global thread index."""
        inputs = np.ascontiguousarray(inputs, np.uint32).reshape(len(inputs), -1)
        n, n_in = inputs.shape
        out = np.zeros((n, n_out), np.uint32)
        src, dst = self.buffer(inputs), self.buffer(out)
        loads = "".join(f"LDG.E R{8 + i}, [R2.64+{4 * i:#x}] ;\n" for i in range(n_in))
        stores = "".join(f"STG.E [R4.64+{4 * i:#x}], R{40 + i} ;\n" for i in range(n_out))
        program = f"""
            S2R R0, SR_TID.X ; S2R R1, SR_CTAID.X ; IMAD R0, R1, c[0x0][0x0], R0 ;
            LDC.64 R2, c[0x0][0x160] ; IMAD.WIDE R2, R0, {4 * n_in:#x}, R2 ;
            LDC.64 R4, c[0x0][0x168] ; IMAD.WIDE R4, R0, {4 * n_out:#x}, R4 ;
            {loads}{body}
            {stores}EXIT ;"""
        self.run(program.replace(" ; ", " ;\n"), grid=(n // block, 1, 1), block=(block, 1, 1),
                 args=pointers(src, dst), registers=kw.pop("registers", 96), **kw)
        return self.read(dst, out)


@contextmanager
def launch_blocking(on: bool = True):
    """Within the block, every GPU of the loaded driver runs packets on the thread that rings the
    doorbell (what LAPIS_LAUNCH_BLOCKING=1 sets when the driver loads), or, with `on` False, on
    its command processor's own thread."""
    processors = [node.gpu.cp for node in driver.system().nodes]
    before = [cp.launch_blocking for cp in processors]
    for cp in processors:
        cp.launch_blocking = on
    try:
        yield
    finally:
        for cp, was in zip(processors, before, strict=True):
            cp.launch_blocking = was


def pointers(*values) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


@pytest.fixture
def bench():
    return Bench()


@pytest.fixture
def bench64():
    return Bench("mi300x")


@pytest.fixture
def teaching():
    return Bench("teaching")


def pytest_collection_finish(session):
    """Start the in-suite compare run now if it was selected, so that it runs beside the rest of the suite."""
    import compare_run
    if not session.config.option.collectonly and any(item.nodeid == compare_run.TEST_ID for item in session.items):
        compare_run.started = compare_run.CompareRun()


def pytest_sessionfinish(session):
    import compare_run
    if compare_run.started is not None:           # stopped early (-x, ^C): the child goes too
        compare_run.started.stop()
