"""Layer 0: the GPU memory-management unit: page-table format, page walks and a TLB.

Every access the device makes (a lane's load or store, a packet fetch, a copy) names a GPU
virtual address in the address space of a VMID. The MMU walks that VMID's page table, which
lives in VRAM where the driver wrote it, and yields the physical address and whether it is
in VRAM or in host system memory (reached over PCIe).

Format (x86-64-like): 48-bit virtual addresses, 4 KiB pages, four levels of 512 eight-byte
entries, each table exactly one page. Entry bits: 0 valid, 1 system (host memory, leaf
only), 2 writable, 3 executable, 12-51 physical address of the page or next-level table.

The TLB holds runs: spans of virtual pages that map to contiguous physical pages with the
same flags, so an instruction whose lanes all fall in one buffer is translated with one
min/max check and one addition, whatever its number of lanes. A miss walks every page of the
leaf tables it touches (512 pages, 2 MiB each), as a GPU's TLB fills a whole fragment of
contiguous pages from one walk, so neighbouring pages of a buffer share one run. The driver must call
`invalidate` after it changes a mapping, as a real driver flushes the TLB.

An address with any bit at or above bit 48 set is in no page table: it is unmapped, never an alias of the
address its low 48 bits name. A range is walked WALK_PAGES pages at a time, so a packet naming a terabyte
costs the host no more than a few megabytes before it faults.
"""

import threading
from dataclasses import dataclass, field

import numpy as np

from lapis.hardware.memory import PAGE_BYTES, PhysicalMemory

PAGE_SHIFT = 12
LEVELS = 4                  # level LEVELS - 1 is the root, level 0 holds the leaf entries
INDEX_BITS = 9              # virtual-address bits each level indexes
ENTRIES = 1 << INDEX_BITS   # 512 entries per table ...
ENTRY_BYTES = 8             # ... of 8 bytes: a table is one page
VA_BITS = 48
VPN_LIMIT = 1 << (VA_BITS - 12)    # virtual page numbers at or past this are unmapped
PTE_VALID, PTE_SYSTEM, PTE_WRITABLE, PTE_EXECUTABLE = 1, 2, 4, 8
ADDRESS_MASK = ((1 << 52) - 1) & ~(PAGE_BYTES - 1)
TLB_LEAVES = 256            # leaf tables (2 MiB of virtual addresses each) the TLB holds runs for
RECENT_PAGES = 256          # pages `Mmu.recent` holds before it starts over
LEAF_SHIFT = 12 + 9
WALK_PAGES = 1 << 16          # pages `translate_range` walks at a time (a few MiB of host arrays)


def level_shift(level: int) -> int:
    """The lowest virtual-address bit a level-`level` table indexes."""
    return PAGE_SHIFT + INDEX_BITS * level


def level_index(va: int, level: int) -> int:
    """Index into the level-`level` table for a virtual address."""
    return (va >> level_shift(level)) & (ENTRIES - 1)


def make_entry(pa: int, flags: int) -> int:
    return (pa & ADDRESS_MASK) | flags | PTE_VALID


class MemoryFault(Exception):
    """A device access the page table does not allow."""

    def __init__(self, va: int, write: bool, reason: str):
        super().__init__(f"{'write to' if write else 'read from'} {va:#x}: {reason}")
        self.va, self.write, self.reason = va, write, reason


@dataclass
class Run:
    va_start: int          # inclusive, page aligned
    va_end: int            # exclusive
    pa_start: int
    flags: int
    system: bool = field(init=False)      # in host memory (read on every access: kept, not derived)

    def __post_init__(self) -> None:
        self.system = bool(self.flags & PTE_SYSTEM)


class Mmu:
    def __init__(self, vram: PhysicalMemory):
        self.vram = vram
        self.roots: dict[int, int] = {}          # vmid -> physical address of its root table
        self.tlb: dict[int, dict[int, list[Run]]] = {}   # vmid -> leaf table index -> runs in that leaf
        # (vmid, page) -> the TLB's run that held the front end's last access on that page: a packet's fetches come
        # back to the same few pages, and a leaf holds many runs to search. Emptied whenever the TLB changes.
        self.recent: dict[tuple[int, int], Run] = {}
        self.walks = 0
        # The driver changes mappings on host threads while the command processor translates on
        # its own: a translation and an invalidation never interleave.
        self.lock = threading.RLock()

    def set_root(self, vmid: int, root_pa: int | None) -> None:
        with self.lock:
            if root_pa is None:
                self.roots.pop(vmid, None)
            else:
                self.roots[vmid] = root_pa
            self.invalidate(vmid)

    def invalidate(self, vmid: int) -> None:
        with self.lock:
            self.tlb.pop(vmid, None)
            self.recent.clear()

    # -- walks --------------------------------------------------------------------------------
    def _walk(self, vmid: int, vpns: np.ndarray) -> np.ndarray:
        """Leaf entries for an array of virtual page numbers (0 where unmapped)."""
        self.walks += len(vpns)
        root = self.roots.get(vmid)
        if root is None:
            return np.zeros(len(vpns), np.uint64)
        table = np.full(len(vpns), root, np.uint64)
        entry = np.zeros(len(vpns), np.uint64)
        valid = vpns < np.uint64(VPN_LIMIT)      # the tables index 48 bits: the bits above are not ignored
        for level in range(LEVELS - 1, -1, -1):
            index = (vpns >> np.uint64(INDEX_BITS * level)) & np.uint64(ENTRIES - 1)
            slot = (table + index * np.uint64(ENTRY_BYTES)) >> np.uint64(3)   # a uint64 word of VRAM
            entry = np.where(valid, self.vram.u64[np.where(valid, slot, 0).astype(np.int64)], 0).astype(np.uint64)
            valid &= (entry & np.uint64(PTE_VALID)) != 0
            table = entry & np.uint64(ADDRESS_MASK)
        return np.where(valid, entry, 0).astype(np.uint64)

    def _fill_around(self, vmid: int, vpn_lo: int, vpn_hi: int) -> None:
        """Walk the leaf tables holding pages vpn_lo..vpn_hi, all of their pages, into the TLB."""
        first, last = vpn_lo & ~(ENTRIES - 1), vpn_hi | (ENTRIES - 1)
        vpns = np.arange(first, last + 1, dtype=np.uint64)
        self._fill(vmid, vpns, self._walk(vmid, vpns))

    def _fill(self, vmid: int, vpns: np.ndarray, entries: np.ndarray) -> None:
        """Insert runs of consecutive valid pages into the TLB."""
        self.recent.clear()
        leaves = self.tlb.setdefault(vmid, {})
        pas = entries & np.uint64(ADDRESS_MASK)
        flags = entries & np.uint64(PAGE_BYTES - 1)
        breaks = np.flatnonzero((np.diff(vpns.astype(np.int64)) != 1) | (np.diff(pas.astype(np.int64)) != PAGE_BYTES)
                                | (np.diff(flags.astype(np.int64)) != 0)) + 1
        for chunk in np.split(np.arange(len(vpns)), breaks):
            first, last = chunk[0], chunk[-1]
            if not entries[first] & np.uint64(PTE_VALID):
                continue
            run = Run(int(vpns[first]) << PAGE_SHIFT, (int(vpns[last]) + 1) << PAGE_SHIFT, int(pas[first]),
                      int(flags[first]))
            for leaf in range(run.va_start >> LEAF_SHIFT, ((run.va_end - 1) >> LEAF_SHIFT) + 1):
                runs = leaves.pop(leaf, [])          # re-inserted last: the newest leaves are kept
                if run not in runs:
                    runs.insert(0, run)
                leaves[leaf] = runs
        while len(leaves) > TLB_LEAVES:
            del leaves[next(iter(leaves))]

    def _lookup_run(self, vmid: int, lo: int, hi: int) -> Run | None:
        for run in self.tlb.get(vmid, {}).get(lo >> LEAF_SHIFT, ()):
            if run.va_start <= lo and hi < run.va_end:
                return run
        return None

    # -- translation --------------------------------------------------------------------------
    def translate(self, vmid: int, va: np.ndarray, nbytes: int, write: bool
                  ) -> tuple[np.ndarray, np.ndarray | bool]:
        """Physical addresses for the byte addresses `va` (each accessing `nbytes`).

        Returns (pa, system): `system` is a bool when every lane is in the same aperture,
        else a per-lane mask. Raises MemoryFault for the first lane that may not access."""
        with self.lock:
            return self._translate(vmid, va, nbytes, write)

    def _translate(self, vmid: int, va: np.ndarray, nbytes: int, write: bool):
        lo, hi = int(va.min()), int(va.max()) + nbytes - 1
        run = self._lookup_run(vmid, lo, hi)
        if run is None:
            vpn_lo, vpn_hi = lo >> PAGE_SHIFT, hi >> PAGE_SHIFT
            if vpn_hi - vpn_lo < 4096:
                self._fill_around(vmid, vpn_lo, vpn_hi)
            else:
                vpns = np.unique(np.concatenate([va >> np.uint64(PAGE_SHIFT),
                                                 (va + np.uint64(nbytes - 1)) >> np.uint64(PAGE_SHIFT)]))
                self._fill(vmid, vpns, self._walk(vmid, vpns))
            run = self._lookup_run(vmid, lo, hi)
        if run is not None:
            if write and not run.flags & PTE_WRITABLE:
                raise MemoryFault(lo, write, "page is read-only")
            return va - np.uint64(run.va_start) + np.uint64(run.pa_start), run.system
        return self._translate_pages(vmid, va, nbytes, write)

    def _translate_pages(self, vmid: int, va: np.ndarray, nbytes: int, write: bool):
        """Slow path: lanes spread over several runs, or some unmapped."""
        for edge in (va, va + np.uint64(nbytes - 1)):
            vpn = edge >> np.uint64(PAGE_SHIFT)
            uniq, inverse = np.unique(vpn, return_inverse=True)
            entries = self._walk(vmid, uniq)
            bad = (entries & np.uint64(PTE_VALID)) == 0
            if write:
                bad |= (entries & np.uint64(PTE_WRITABLE)) == 0
            if bad.any():
                lane = int(np.flatnonzero(bad[inverse])[0])
                mapped = bool(entries[inverse[lane]] & np.uint64(PTE_VALID))
                raise MemoryFault(int(edge[lane]), write, "page is read-only" if mapped else "address is not mapped")
        vpn = va >> np.uint64(PAGE_SHIFT)
        uniq, inverse = np.unique(vpn, return_inverse=True)
        entries = self._walk(vmid, uniq)[inverse]
        pa = (entries & np.uint64(ADDRESS_MASK)) + (va & np.uint64(PAGE_BYTES - 1))
        system = (entries & np.uint64(PTE_SYSTEM)) != 0
        return pa, bool(system[0]) if system.all() or not system.any() else system

    def hit(self, vmid: int, va: int, size: int, write: bool, execute: bool = False) -> Run | None:
        """The TLB's run that holds all of [va, va+size) and allows the access, if it has one (no walk): the
        front end's common case, one piece (`translate_range` does the rest)."""
        needed = _NEEDED[write, execute]
        hi = va + size - 1
        page = (vmid, va >> PAGE_SHIFT)
        # Without the lock first: one dict read is atomic, and a run taken just before an invalidation empties
        # `recent` is one the caller would equally have used after the lock (it reads memory outside it).
        run = self.recent.get(page)
        if run is None or not (run.va_start <= va and hi < run.va_end):
            with self.lock:
                run = self._lookup_run(vmid, va, hi)
                if run is None:
                    return None
                if len(self.recent) >= RECENT_PAGES:
                    self.recent.clear()
                self.recent[page] = run
        return run if run.flags & needed == needed and size > 0 else None

    def translate_range(self, vmid: int, va: int, size: int, write: bool, execute: bool = False
                        ) -> list[tuple[bool, int, int]]:
        """(system, pa, length) pieces covering [va, va+size), for the front end and copy engine."""
        if size <= 0:
            return []
        needed = _needed(write, execute)
        with self.lock:
            run = self._lookup_run(vmid, va, va + size - 1)       # the TLB first, as the lanes' path does
            if run is None and size <= PAGE_BYTES:                 # a descriptor, code, arguments, a packet
                self._fill_around(vmid, va >> PAGE_SHIFT, (va + size - 1) >> PAGE_SHIFT)
                run = self._lookup_run(vmid, va, va + size - 1)
            if run is not None and run.flags & needed == needed:
                return [(run.system, run.pa_start + va - run.va_start, size)]
        pieces: list[tuple[bool, int, int]] = []
        last_vpn = (va + size - 1) >> PAGE_SHIFT
        for first_vpn in range(va >> PAGE_SHIFT, last_vpn + 1, WALK_PAGES):
            vpns = np.arange(first_vpn, min(first_vpn + WALK_PAGES, last_vpn + 1), dtype=np.uint64)
            with self.lock:
                entries = self._walk(vmid, vpns)
                self._add_pieces(pieces, vpns, entries, va, size, write, needed)    # a fault fills no runs
                self._fill(vmid, vpns, entries)
        return pieces

    @staticmethod
    def _add_pieces(pieces: list, vpns: np.ndarray, entries: np.ndarray, va: int, size: int, write: bool,
                    needed: int) -> None:
        """Append the pieces of [va, va+size) that pages `vpns` map (joining the last piece when it goes on
        where that one ends), or raise MemoryFault for the first page that does not allow the access."""
        bad = (entries & np.uint64(needed)) != needed
        if bad.any():
            first = np.flatnonzero(bad)[0]
            page = int(vpns[first]) << PAGE_SHIFT
            entry = int(entries[first])
            reason = ("address is not mapped" if not entry & PTE_VALID else
                      "page is read-only" if write else "page is not executable")
            raise MemoryFault(max(page, va), write, reason)
        pas = (entries & np.uint64(ADDRESS_MASK)).astype(np.int64)
        system = (entries & np.uint64(PTE_SYSTEM)) != 0
        breaks = np.flatnonzero((np.diff(pas) != PAGE_BYTES) | (np.diff(system) != 0)) + 1
        for chunk in np.split(np.arange(len(vpns)), breaks):
            first, last = int(chunk[0]), int(chunk[-1])
            start = max(va, int(vpns[first]) << PAGE_SHIFT)
            end = min(va + size, (int(vpns[last]) + 1) << PAGE_SHIFT)
            piece = (bool(system[first]), int(pas[first]) + (start & (PAGE_BYTES - 1)), end - start)
            if pieces and pieces[-1][0] == piece[0] and pieces[-1][1] + pieces[-1][2] == piece[1]:
                pieces[-1] = (piece[0], pieces[-1][1], pieces[-1][2] + piece[2])
            else:
                pieces.append(piece)


def _needed(write: bool, execute: bool) -> int:
    """The page-table bits an access needs: valid, and writable or executable when it writes or runs code."""
    return PTE_VALID | (PTE_WRITABLE if write else 0) | (PTE_EXECUTABLE if execute else 0)


_NEEDED = {(write, execute): _needed(write, execute) for write in (False, True) for execute in (False, True)}
