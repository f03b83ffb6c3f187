"""Layer 1: a buddy allocator for physical memory (VRAM, or the host pages behind GTT).

Blocks are powers of two pages, naturally aligned; freeing a block merges it with its buddy
when both are free, so fragmentation heals. An allocation is contiguous: it takes the
smallest block that holds it and hands the unused tail back at once (as drm_buddy trims),
so a 3-page request costs 3 pages, not 4.
"""

from lapis.hardware import PAGE_BYTES


class OutOfMemoryError(MemoryError):
    pass


class BuddyAllocator:
    def __init__(self, base: int, size: int, name: str, page: int = PAGE_BYTES):
        self.base, self.size, self.name, self.page = base, size // page * page, name, page
        self.free_blocks: dict[int, set[int]] = {}
        self.allocations: dict[int, list[tuple[int, int]]] = {}   # address -> [(block address, order)]
        self.used = 0
        addr, end = base, base + self.size
        while addr < end:    # carve the range into maximal aligned blocks
            order = 0
            while ((addr - base) % (page << (order + 1)) == 0) and addr + (page << (order + 1)) <= end:
                order += 1
            self.free_blocks.setdefault(order, set()).add(addr)
            addr += page << order

    @property
    def free(self) -> int:
        return self.size - self.used

    def _take(self, order: int) -> int:
        for o in sorted(k for k, v in self.free_blocks.items() if k >= order and v):
            addr = min(self.free_blocks[o])
            self.free_blocks[o].remove(addr)
            while o > order:     # split, keeping the low half
                o -= 1
                self.free_blocks.setdefault(o, set()).add(addr + (self.page << o))
            return addr
        raise OutOfMemoryError(f"{self.name}: out of memory allocating {self.page << order} bytes "
                               f"({self.free} of {self.size} bytes free, no contiguous block large enough)")

    def _give(self, addr: int, order: int) -> None:
        while True:
            buddy = self.base + ((addr - self.base) ^ (self.page << order))
            peers = self.free_blocks.get(order)
            if peers is None or buddy not in peers or buddy + (self.page << order) > self.base + self.size:
                break
            peers.remove(buddy)
            addr = min(addr, buddy)
            order += 1
        self.free_blocks.setdefault(order, set()).add(addr)

    def alloc(self, size: int) -> int:
        if size <= 0:
            raise ValueError(f"{self.name}: allocation size must be positive, got {size}")
        pages = -(-size // self.page)
        order = (pages - 1).bit_length()
        addr = self._take(order)
        kept, cursor, remaining = [], addr, pages
        for o in range(order, -1, -1):   # keep a prefix of descending power-of-two blocks
            if remaining >= 1 << o:
                kept.append((cursor, o))
                cursor += self.page << o
                remaining -= 1 << o
        tail_end = addr + (self.page << order)
        while cursor < tail_end:          # return the rest as aligned blocks
            o = 0
            while (cursor - self.base) % (self.page << (o + 1)) == 0 and cursor + (self.page << (o + 1)) <= tail_end:
                o += 1
            self._give(cursor, o)
            cursor += self.page << o
        self.allocations[addr] = kept
        self.used += pages * self.page
        return addr

    def free_block(self, addr: int) -> None:
        blocks = self.allocations.pop(addr, None)
        if blocks is None:
            raise ValueError(f"{self.name}: {addr:#x} is not an allocation (double free?)")
        for block, order in blocks:
            self.used -= self.page << order
            self._give(block, order)

    def allocation_size(self, addr: int) -> int:
        return sum(self.page << o for _, o in self.allocations[addr])
