"""Layer 1: the buddy allocator, per-process memory and page tables, events, commands."""

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lapis import driver
from lapis.driver import AllocMemoryArgs, Ioctl, MapMemoryArgs, MemFlags, MemoryHandleArgs
from lapis.driver.buddy import BuddyAllocator, OutOfMemoryError
from lapis.driver.kfd import AMDKFD_IOCTLS
from lapis.driver.kfd_ioctl import KFD_VERSION
from lapis.hardware import PAGE_BYTES


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40 * PAGE_BYTES)), max_size=60))
def test_buddy_allocations_never_overlap_and_merge_back(ops):
    heap = BuddyAllocator(0, 256 * PAGE_BYTES, "test")
    live = {}
    for do_free, size in ops:
        if do_free and live:
            addr = sorted(live)[size % len(live)]
            heap.free_block(addr)
            del live[addr]
            continue
        try:
            addr = heap.alloc(size)
        except OutOfMemoryError:
            continue
        assert addr % PAGE_BYTES == 0
        live[addr] = -(-size // PAGE_BYTES) * PAGE_BYTES
        assert heap.allocation_size(addr) == live[addr]          # trimmed: no power-of-two rounding
    spans = sorted((a, a + s) for a, s in live.items())
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:], strict=False))
    assert heap.used == sum(live.values())
    for addr in list(live):
        heap.free_block(addr)
    assert heap.used == 0 and heap.free_blocks.get(8) == {0}      # fully merged into one 256-page block


def test_out_of_memory_and_double_free_are_clear_errors():
    heap = BuddyAllocator(0, 8 * PAGE_BYTES, "tiny VRAM")
    heap.alloc(6 * PAGE_BYTES)
    with pytest.raises(OutOfMemoryError, match="tiny VRAM: out of memory allocating"):
        heap.alloc(4 * PAGE_BYTES)
    addr = heap.alloc(PAGE_BYTES)
    heap.free_block(addr)
    with pytest.raises(ValueError, match="double free"):
        heap.free_block(addr)


def test_commands_are_numbered_like_kfd():
    assert Ioctl.GET_VERSION == 0x01 and Ioctl.WAIT_EVENTS == 0x0C and Ioctl.ALLOC_MEMORY_OF_GPU == 0x16
    p = driver.open()
    try:
        v = p.ioctl(Ioctl.GET_VERSION, driver.GetVersionArgs())
        assert (v.major, v.minor) >= (1, 0)
        apertures = p.ioctl(Ioctl.GET_PROCESS_APERTURES, driver.GetProcessAperturesArgs())
        assert len(apertures) == len(driver.system().nodes) and apertures[0].gpuvm_base < apertures[0].gpuvm_limit
        with pytest.raises(driver.DriverError, match="no GPU with id 99"):
            p.ioctl(Ioctl.ALLOC_MEMORY_OF_GPU, AllocMemoryArgs(99, 4096, MemFlags.VRAM))
        with pytest.raises(driver.DriverError, match="exactly one of VRAM and GTT"):
            p.ioctl(Ioctl.ALLOC_MEMORY_OF_GPU, AllocMemoryArgs(0, 4096, MemFlags.VRAM | MemFlags.GTT))
    finally:
        p.close()


def test_every_command_has_one_row_in_the_ioctl_table_and_it_checks_the_arguments():
    assert set(AMDKFD_IOCTLS) == set(Ioctl)
    p = driver.open()
    try:
        with pytest.raises(driver.DriverError, match="ALLOC_MEMORY_OF_GPU takes AllocMemoryArgs, not GpuArgs"):
            p.ioctl(Ioctl.ALLOC_MEMORY_OF_GPU, driver.GpuArgs(0))
        with pytest.raises(driver.DriverError, match="GET_VERSION takes GetVersionArgs, not NoneType"):
            p.ioctl(Ioctl.GET_VERSION, None)
        with pytest.raises(driver.DriverError, match="unknown command 0x7f"):
            p.ioctl(0x7F, driver.GetVersionArgs())
        assert p.ioctl(0x01, driver.GetVersionArgs()).major == KFD_VERSION[0]     # a bare number works too
    finally:
        p.close()


def test_memory_is_accounted_mapped_and_released():
    p = driver.open()
    node = driver.system().nodes[0]
    used = node.vram.used
    r = p.ioctl(Ioctl.ALLOC_MEMORY_OF_GPU, AllocMemoryArgs(0, 10_000, MemFlags.VRAM | MemFlags.WRITABLE))
    assert r.size == 3 * PAGE_BYTES and node.vram.used >= used + r.size
    p.ioctl(Ioctl.MAP_MEMORY_TO_GPU, MapMemoryArgs(r.handle))
    mmu, vmid = node.gpu.mmu, p.spaces[0].vmid
    assert mmu.translate_range(vmid, r.va_addr, r.size, write=True)[0][2] == r.size
    p.ioctl(Ioctl.FREE_MEMORY_OF_GPU, MemoryHandleArgs(r.handle))
    with pytest.raises(Exception, match="not mapped"):
        mmu.translate_range(vmid, r.va_addr, 4, write=False)
    with pytest.raises(driver.DriverError, match="does not exist"):
        p.ioctl(Ioctl.FREE_MEMORY_OF_GPU, MemoryHandleArgs(r.handle))
    p.close()
    assert node.vram.used == used


def test_processes_have_separate_address_spaces():
    a, b = driver.open(), driver.open()
    try:
        ra = a.ioctl(Ioctl.ALLOC_MEMORY_OF_GPU, AllocMemoryArgs(0, 4096, MemFlags.VRAM | MemFlags.WRITABLE))
        a.ioctl(Ioctl.MAP_MEMORY_TO_GPU, MapMemoryArgs(ra.handle))
        b.ioctl(Ioctl.CREATE_EVENT, driver.CreateEventArgs())
        b._space(0)
        mmu = driver.system().nodes[0].gpu.mmu
        assert a.spaces[0].vmid != b.spaces[0].vmid
        mmu.translate_range(a.spaces[0].vmid, ra.va_addr, 4096, write=True)
        with pytest.raises(Exception, match="not mapped"):
            mmu.translate_range(b.spaces[0].vmid, ra.va_addr, 4096, write=False)
    finally:
        a.close()
        b.close()


def test_events_wake_waiters_and_time_out():
    p = driver.open()
    try:
        e = p.ioctl(Ioctl.CREATE_EVENT, driver.CreateEventArgs(auto_reset=True)).event_id
        start = time.monotonic()
        r = p.ioctl(Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([e], timeout_ms=50))
        assert r.wait_result == driver.WaitResult.TIMEOUT and time.monotonic() - start >= 0.045
        threading.Timer(0.05, lambda: p.ioctl(Ioctl.SET_EVENT, driver.EventArgs(e))).start()
        r = p.ioctl(Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([e], timeout_ms=5000))
        assert r.wait_result == driver.WaitResult.COMPLETE
        r = p.ioctl(Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([e], timeout_ms=10))    # auto-reset
        assert r.wait_result == driver.WaitResult.TIMEOUT
        p.ioctl(Ioctl.DESTROY_EVENT, driver.EventArgs(e))
        with pytest.raises(KeyError, match="do not exist"):
            p.ioctl(Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([e], timeout_ms=10))
    finally:
        p.close()


def test_closed_handle_refuses_commands():
    p = driver.open()
    p.close()
    with pytest.raises(driver.DriverError, match="closed"):
        p.ioctl(Ioctl.GET_VERSION, driver.GetVersionArgs())
