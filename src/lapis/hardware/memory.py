"""Layer 0: physical memory, sparse: a 141 GB device must not take 141 GB of host RAM.

`PhysicalMemory` is a flat byte array addressed by physical address. It is an anonymous
mapping reserved without backing (MAP_NORESERVE), so the host gives it pages only when they
are first written; `release` hands pages back when the driver frees memory. The device's
VRAM and the host's system RAM (reached by the device over PCIe) are one each.
"""

import mmap

import numpy as np

PAGE_BYTES = 4096
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)   # Linux's value; Python 3.11 lacks the name


class PhysicalMemoryError(RuntimeError):
    pass


class PhysicalMemory:
    def __init__(self, size: int, name: str):
        self.name = name
        self.size = size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        try:
            self._map = mmap.mmap(-1, size, flags=flags)
        except OSError as e:
            raise PhysicalMemoryError(
                f"cannot reserve {size / 2**30:.0f} GiB of address space for {name}: {e}. "
                "lapis maps device memory sparsely and needs the host to allow overcommit "
                "(vm.overcommit_memory 0 or 1)") from e
        self.u8 = np.frombuffer(self._map, dtype=np.uint8)
        self.u32 = self.u8[: size // 4 * 4].view(np.uint32)
        self.u64 = self.u8[: size // 8 * 8].view(np.uint64)

    def check(self, pa: int, size: int) -> None:
        if pa < 0 or pa + size > self.size:
            raise PhysicalMemoryError(f"{self.name}: physical range {pa:#x}+{size:#x} is outside {self.size:#x}")

    # read and write test the range inline, calling `check` only to raise: the command processor reads and writes
    # eight times per packet.
    def read(self, pa: int, size: int) -> bytes:
        if pa < 0 or pa + size > self.size:
            self.check(pa, size)
        return self._map[pa:pa + size]              # a slice of the mapping: a tenth of numpy's cost

    def write(self, pa: int, data: bytes | np.ndarray) -> None:
        if type(data) is bytes or isinstance(data, bytearray):
            if pa < 0 or pa + len(data) > self.size:
                self.check(pa, len(data))
            self._map[pa:pa + len(data)] = data
            return
        buf = data.view(np.uint8).ravel()
        self.check(pa, buf.size)
        self.u8[pa:pa + buf.size] = buf

    def view(self, pa: int, size: int) -> np.ndarray:
        """A uint8 view of a physical range (how a CPU mapping of it is modelled)."""
        self.check(pa, size)
        return self.u8[pa:pa + size]

    def release(self, pa: int, size: int) -> None:
        """Zero a range and give whole pages inside it back to the host."""
        self.check(pa, size)
        first = -(-pa // mmap.PAGESIZE) * mmap.PAGESIZE
        last = (pa + size) // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)
            self.u8[pa:first] = 0
            self.u8[last:pa + size] = 0
        else:
            self.u8[pa:pa + size] = 0
