"""Layer 1: a process's GPU virtual addresses: the ranges it holds and, per GPU, its page tables.

Virtual ranges (`VirtualRanges`) are process-wide, as in KFD: a buffer has the same GPU
address on every GPU it is mapped to. They are handed out from the GPUVM aperture with an
unmapped guard gap after each, so running off the end of a buffer faults instead of
landing in the next one. Memory the runtime keeps for itself (`MemFlags.INTERNAL`: signals,
queue rings, kernel arguments, staging, code, the event page) comes from a window at the
top of the aperture, the user's from the bottom: a kernel's stray store, even megabytes or
gigabytes past an array, reaches unmapped addresses or the user's own memory, never the
words the host waits on. Each GPU the process uses gets an `AddressSpace`: a VMID and page
tables that live in VRAM (pages from the VRAM allocator), in the format the MMU walks
(`lapis.hardware.mmu`); the driver writes them through the PCIe BAR and flushes the TLB
after changing a mapping.
"""

import numpy as np

from lapis.driver.buddy import BuddyAllocator
from lapis.hardware import PAGE_BYTES, Gpu, make_entry
from lapis.hardware.mmu import ENTRIES, ENTRY_BYTES, LEVELS, level_index, level_shift

GPUVM_BASE = 0x7F00_0000_0000
GPUVM_LIMIT = 0x7FFF_FFFF_F000
# The internal window: the top 64 GiB of the 1 TiB aperture. Below it the user's 960 GiB, handed out from the bottom:
# an int32 index of 8-byte elements reaches 16 GiB, so it strays into the window from no array of a process that
# holds less than 944 GiB.
INTERNAL_BASE = 0x7FF0_0000_0000
VA_ALIGN = 64 * 1024
GUARD_BYTES = 64 * 1024


class VirtualRanges:
    """Free virtual ranges of the user's window and of the internal window, each (start, length), by start."""

    def __init__(self):
        self.free_ranges: list[tuple[int, int]] = [(GPUVM_BASE, INTERNAL_BASE - GPUVM_BASE)]
        self.internal_free_ranges: list[tuple[int, int]] = [(INTERNAL_BASE, GPUVM_LIMIT - INTERNAL_BASE)]

    def reserve(self, size: int, internal: bool = False) -> int:
        need = -(-size // VA_ALIGN) * VA_ALIGN + GUARD_BYTES
        ranges = self.internal_free_ranges if internal else self.free_ranges
        for i, (start, length) in enumerate(ranges):
            if length >= need:
                ranges[i] = (start + need, length - need)
                return start
        window = "internal" if internal else "user"
        raise MemoryError(f"GPU virtual address space exhausted reserving {size} bytes in the {window} window")

    def release(self, va: int, size: int) -> None:
        need = -(-size // VA_ALIGN) * VA_ALIGN + GUARD_BYTES
        ranges = self.internal_free_ranges if va >= INTERNAL_BASE else self.free_ranges
        ranges.append((va, need))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for start, length in ranges:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((start, length))
        ranges[:] = merged


class AddressSpace:
    def __init__(self, gpu: Gpu, vram: BuddyAllocator, vmid: int):
        self.gpu, self.vram, self.vmid = gpu, vram, vmid
        self.tables: dict[tuple[int, int], int] = {}     # (level, va prefix) -> table physical address
        self.root = self._new_table()
        self.tables[(LEVELS - 1, 0)] = self.root
        gpu.set_page_table_root(vmid, self.root)

    def _new_table(self) -> int:
        pa = self.vram.alloc(PAGE_BYTES)
        self.gpu.bar_write(pa, bytes(PAGE_BYTES))
        return pa

    def _leaf_table(self, va: int) -> int:
        """The level-0 table covering `va`, creating the path to it."""
        table = self.root
        for level in range(LEVELS - 1, 0, -1):
            key = (level - 1, va >> level_shift(level))
            child = self.tables.get(key)
            if child is None:
                child = self._new_table()
                self.tables[key] = child
                entry = make_entry(child, 0).to_bytes(ENTRY_BYTES, "little")
                self.gpu.bar_write(table + ENTRY_BYTES * level_index(va, level), entry)
            table = child
        return table

    def map(self, va: int, pa: int, size: int, flags: int) -> None:
        """Map [va, va+size) to physical [pa, pa+size) with PTE `flags`, one BAR write per leaf table."""
        pages = -(-size // PAGE_BYTES)
        self._write_leaves(va, pages, lambda i: (np.arange(i[0], i[1], dtype=np.uint64) * np.uint64(PAGE_BYTES)
                                                 + np.uint64(pa)) | np.uint64(make_entry(0, flags)))

    def unmap(self, va: int, size: int) -> None:
        pages = -(-size // PAGE_BYTES)
        self._write_leaves(va, pages, lambda i: np.zeros(i[1] - i[0], np.uint64))
        self.gpu.invalidate_tlb(self.vmid)

    def _write_leaves(self, va: int, pages: int, entries) -> None:
        done = 0
        while done < pages:
            page_va = va + done * PAGE_BYTES
            index = level_index(page_va, 0)
            count = min(ENTRIES - index, pages - done)
            table = self._leaf_table(page_va)
            self.gpu.bar_write(table + ENTRY_BYTES * index, entries((done, done + count)).tobytes())
            done += count

    def destroy(self) -> None:
        self.gpu.set_page_table_root(self.vmid, None)
        for pa in self.tables.values():
            self.vram.free_block(pa)
            self.gpu.vram.release(pa, PAGE_BYTES)
        self.tables.clear()
