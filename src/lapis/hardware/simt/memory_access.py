"""Memory and atomics: global, shared and local loads and stores, atomics, and what they count.

What an SM's load/store unit does with its memory paths:
- Global memory (LDG, STG, ATOMG): a 64-bit address per lane, checked for alignment and
  translated by the MMU (`mmu.py`), in VRAM or, over PCIe, in host memory. The coalescer's
  work is counted: the distinct 32-byte sectors each warp touches are the requests that the
  data caches (`caches.py`: L1, L2 slices, far level) turn into hits at each level, DRAM reads
  and dirty evictions (DRAM writes); accesses to host memory count as PCIe bytes instead.
- Shared memory (LDS, STS, ATOMS): each block's slice of one array, bounds- and
  alignment-checked, with the banks' cycles counted (`shared_wavefronts`: 32 banks of 4
  bytes; lanes of a warp that hit one bank at different words take a wavefront each).
- Local memory (LDL, STL): each thread's private words (register spills, local arrays),
  interleaved so that a warp's access to one address is contiguous.
- Atomics apply in lane order for lanes that hit one address (`atomics.py`).

Memory is sequentially consistent: each instruction completes before the next, so MEMBAR
has nothing to order. Unmasked shared accesses through an address register that was not
written since its last use reuse the register's word indices and bank-conflict count
(`DerivedValues` in `simulator_caches.py`).
"""

import numpy as np

from lapis.hardware import atomics
from lapis.hardware.caches import SECTOR_BITS, SECTOR_MASK, shared_wavefronts
from lapis.hardware.mmu import MemoryFault
from lapis.hardware.simt.binders import Executor, Mask, binds
from lapis.hardware.simt.blocks import ResidentBlocks
from lapis.hardware.simt.registers import I32, I64, U32, U64
from lapis.isa import RZ, Instruction
from lapis.isa.opcodes import ATOM_WIDE, MEM_BYTES

MEMORY_BYTES = MEM_BYTES         # by width modifier (the ISA's table)


# -- moving values between registers and memory ------------------------------------------------
def _gather(words: np.ndarray, octets: np.ndarray, word: np.ndarray, byte: np.ndarray | None, width: str,
            stride: int = 1) -> list[np.ndarray]:
    """Load `width` from word arrays: register values (one per 32 bits) for the given word indices.

    `byte` is the byte within the word for sub-word widths; a lane's later words sit `stride` apart.
    """
    nbytes = MEMORY_BYTES[width]
    if nbytes >= 4:
        return [words[word + i * stride] if i else words[word] for i in range(nbytes // 4)]
    at = word * 4 + byte
    raw = octets[at].astype(U32)
    if nbytes == 2:
        raw |= octets[at + 1].astype(U32) << U32(8)
    if width.startswith("S"):
        raw = (raw.view(I32) << (32 - 8 * nbytes) >> (32 - 8 * nbytes)).view(U32)
    return [raw]


def _scatter(words: np.ndarray, octets: np.ndarray, word: np.ndarray, byte: np.ndarray | None, width: str,
             values: list[np.ndarray], stride: int = 1) -> None:
    """Store register values (one per 32 bits) of `width` at the given word indices; see `_gather`."""
    nbytes = MEMORY_BYTES[width]
    if nbytes >= 4:
        for i, v in enumerate(values):
            words[word + i * stride if i else word] = v
        return
    at = word * 4 + byte
    octets[at] = (values[0] & U32(0xFF)).astype(np.uint8)
    if nbytes == 2:
        octets[at + 1] = (values[0] >> U32(8) & U32(0xFF)).astype(np.uint8)


def _data_rows(blocks: ResidentBlocks, inst: Instruction, load: bool) -> list[np.ndarray]:
    """A load's destination rows (from Rd) or a store's source rows (from Rc): one per 32 bits of the width."""
    regs = blocks.registers
    words = max(1, MEMORY_BYTES[inst.mod("w")] // 4)
    if load:
        return [regs.R[regs.dest(inst.rd + i if inst.rd != RZ else RZ)] for i in range(words)]
    return [regs.R[regs.row(inst.rc + i if inst.rc != RZ else RZ)] for i in range(words)]


def _put(dsts: list[np.ndarray], values: list[np.ndarray], mask: Mask) -> None:
    """Write values of the active lanes only (a load's result) into rows of all lanes."""
    for dst, v in zip(dsts, values, strict=True):
        if mask is None:
            dst[...] = v
        else:
            dst[mask] = v


def _transfer(load: bool, words: np.ndarray, octets: np.ndarray, word: np.ndarray, byte: np.ndarray, width: str,
              rows: list[np.ndarray], mask: Mask, stride: int = 1) -> None:
    """Load memory into the rows, or store the rows into memory, at the active lanes' word indices."""
    if load:
        _put(rows, _gather(words, octets, word, byte, width, stride), mask)
    else:
        _scatter(words, octets, word, byte, width, rows if mask is None else [row[mask] for row in rows], stride)


# -- global memory -----------------------------------------------------------------------------
def _global_access(blocks: ResidentBlocks, pc: int, inst: Instruction, mask: Mask, nbytes: int, write: bool,
                   atomic: bool = False):
    """Translate the active lanes' addresses and count the traffic; returns (physical addresses, memory)."""
    base = blocks.registers.pair(inst.ra)
    if isinstance(base, np.generic):
        base = np.full(blocks.lanes, base)
    off = inst.simm
    va = base + U64(off) if off >= 0 else base - U64(-off)
    if mask is not None:
        va = va[mask]
    if va.size == 0:
        return None
    misaligned = (va & U64(nbytes - 1)) != 0 if nbytes > 1 else None
    if misaligned is not None and misaligned.any():
        raise blocks.fault(pc, f"misaligned {nbytes}-byte access", int(va[np.flatnonzero(misaligned)[0]]))
    core = blocks.core
    try:
        pa, system = core.mmu.translate(blocks.d.vmid, va, nbytes, write)
    except MemoryFault as e:
        raise blocks.fault(pc, f"illegal memory access: {e.reason}" + (" (write)" if write else " (read)"),
                           e.va) from None
    if not isinstance(system, bool):
        raise blocks.fault(pc, "one instruction touched both device and host memory", int(va[0]))
    if write and core.write_log is not None:              # a checker keeps the writes (`compare.py`)
        at = (pa.astype(np.int64)[:, None] + np.arange(nbytes)).ravel()
        core.write_log.append((system, at, (core.sysmem if system else core.vram).u8[at]))
    c = core.counters
    c.global_bytes += va.size * nbytes
    if atomic:
        c.atomic_lanes += va.size
    sector = pa.astype(U64) >> U64(5)
    # The distinct sectors of each warp: (warp, sector) keys, sorted only when lanes do not already
    # ask in address order (a warp whose lanes run down columns), then one per run of equal keys.
    warp = blocks.padded_lane if mask is None else blocks.padded_lane[mask]
    key = (warp // core.warp_size).astype(U64) << U64(SECTOR_BITS) | sector
    if (key[1:] < key[:-1]).any():
        key = np.sort(key)
    starts = np.ones(key.size, bool)
    np.not_equal(key[1:], key[:-1], out=starts[1:])
    key = key[starts]
    c.global_sectors += key.size
    if system:
        c.pcie_bytes += va.size * nbytes
    else:
        l1_hits, l2_misses, far_misses, dirtied = core.data_caches.access(key & U64(SECTOR_MASK),
                                                                          key >> U64(SECTOR_BITS), write)
        c.l1_hits += l1_hits
        c.l2_misses += l2_misses
        c.far_misses += far_misses
        if not write or atomic:              # a store overwrites whole words: nothing to fetch
            c.dram_read_bytes += far_misses * 32
        c.dram_write_bytes += dirtied * 32
    return pa.astype(I64), core.sysmem if system else core.vram


@binds("LDG", "STG")
def global_load_store(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    load, width = inst.op == "LDG", inst.mod("w")
    nbytes, rows = MEMORY_BYTES[width], _data_rows(blocks, inst, load)

    def execute(mask: Mask) -> None:
        got = _global_access(blocks, pc, inst, mask, nbytes, not load)
        if got is not None:
            pa, mem = got
            _transfer(load, mem.u32, mem.u8, pa >> 2, pa & 3, width, rows, mask)
    return execute


# -- shared memory -----------------------------------------------------------------------------
def _shared_index(blocks: ResidentBlocks, pc: int, inst: Instruction, row: int, mask: Mask, nbytes: int):
    """Word index into the batch's shared memory, and byte within the word, of each active lane
    (the address is in row `row`)."""
    d = blocks.d
    addr = blocks.registers.R[row]
    off = inst.simm
    a = addr if mask is None else addr[mask]
    if a.size == 0:
        return None
    lo, hi = int(a.min()) + off, int(a.max()) + off
    if lo < 0 or hi + nbytes > d.shared_bytes:
        bad = lo if lo < 0 else hi
        raise blocks.fault(pc, f"shared memory access outside the block's {d.shared_bytes} bytes", bad)
    if nbytes > 1 and ((a + U32(off & 0xFFFFFFFF)) & U32(nbytes - 1)).any():
        raise blocks.fault(pc, f"misaligned {nbytes}-byte shared memory access", lo)
    blocks.core.counters.shared_bytes += a.size * nbytes
    byte = a.astype(I64) + off
    local_word = byte >> 2
    _count_banks(blocks, local_word, mask, nbytes)
    base = blocks.shared_base if mask is None else blocks.shared_base[mask]
    return base + local_word, byte & 3


def _warp_layout(blocks: ResidentBlocks, values: np.ndarray, mask: Mask) -> np.ndarray:
    """Per-lane values (of the active lanes) as (warps, warp size), -1 where no active lane is."""
    ws = blocks.core.warp_size
    if mask is None and blocks.warp_aligned:
        return values.reshape(-1, ws)
    laid = np.full(blocks.nblocks * blocks.warps_per_block * ws, -1, I64)
    laid[blocks.padded_lane if mask is None else blocks.padded_lane[mask]] = values
    return laid.reshape(-1, ws)


def _count_banks(blocks: ResidentBlocks, local_word: np.ndarray, mask: Mask, nbytes: int) -> None:
    wavefronts, ideal = shared_wavefronts(_warp_layout(blocks, local_word, mask), max(1, nbytes // 4))
    c = blocks.core.counters
    c.shared_wavefronts += wavefronts
    c.shared_ideal_wavefronts += ideal


def _shared_words(blocks: ResidentBlocks, row: int) -> tuple:
    """(version, per-lane word index into the batch's shared memory, min, max, low four address bits of
    any lane) of address register row `row`."""
    derived = blocks.derived
    version = derived.version[row]
    entry = derived.get(("shared words", row), version)
    if entry is None:
        a = blocks.registers.R[row]
        entry = (blocks.shared_base + (a >> U32(2)).astype(I64), int(a.min()), int(a.max()),
                 int(np.bitwise_or.reduce(a & U32(15))))
        derived.put(("shared words", row), version, entry)
    return (version, *entry)


def _banks_of(blocks: ResidentBlocks, row: int, version: int, words: np.ndarray, per_lane: int) -> tuple[int, int]:
    """Bank-conflict wavefronts of an unmasked access of `per_lane` words through address register `row`.

    Measured on the batch's first block and scaled to all its blocks: every block runs the
    same code, and a shared address that depends on the block is rare (the masked accesses of
    the slow path are measured on every lane). Shifting every lane's address by
    one amount permutes the banks and keeps the conflicts, so a register that advanced
    uniformly (a pointer stepping through a tile) reuses the count.
    """
    derived, ws = blocks.derived, blocks.core.warp_size
    key = ("banks", row, per_lane)
    cached = derived.latest(key)          # (version, (first block's words, counts))
    if cached is not None and cached[0] == version:
        return cached[1][1]
    first = words[:blocks.warps_per_block * ws if blocks.warp_aligned else blocks.threads_per_block]
    if cached is not None:
        earlier, counts = cached[1]
        delta = first - earlier
        if delta.min() == delta.max() and delta[0] % per_lane == 0:
            derived.put(key, version, (first, counts))
            return counts
    if blocks.warp_aligned:
        wavefronts, ideal = shared_wavefronts(first.reshape(-1, ws), per_lane)
    else:
        laid = np.full(blocks.warps_per_block * ws, -1, I64)
        laid[:blocks.threads_per_block] = first
        wavefronts, ideal = shared_wavefronts(laid.reshape(-1, ws), per_lane)
    counts = (wavefronts * blocks.nblocks, ideal * blocks.nblocks)
    derived.put(key, version, (first, counts))
    return counts


def _shared_fast(blocks: ResidentBlocks, inst: Instruction, row: int, nbytes: int):
    """The word index array and first word for an unmasked, aligned access of 4, 8 or 16 bytes
    through address row `row`, or None to take the slow path."""
    off = inst.simm
    if inst.ra == RZ or nbytes < 4 or off % nbytes:
        return None
    version, words, lo, hi, low_bits = _shared_words(blocks, row)
    if low_bits & (nbytes - 1) or lo + off < 0 or hi + off + nbytes > blocks.d.shared_bytes:
        return None
    c = blocks.core.counters
    c.shared_bytes += blocks.lanes * nbytes
    wavefronts, ideal = _banks_of(blocks, row, version, words, nbytes // 4)
    c.shared_wavefronts += wavefronts
    c.shared_ideal_wavefronts += ideal
    return words, off >> 2


@binds("LDS", "STS")
def shared_load_store(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    load, width = inst.op == "LDS", inst.mod("w")
    nbytes, rows = MEMORY_BYTES[width], _data_rows(blocks, inst, load)
    shared, address = blocks.shared_u32, blocks.registers.row(inst.ra)

    def execute(mask: Mask) -> None:
        if mask is None:
            fast = _shared_fast(blocks, inst, address, nbytes)
            if fast is not None:                                        # bounds checked there
                words, first = fast
                for k, row in enumerate(rows):
                    if load:
                        np.take(shared[first + k:], words, out=row, mode="clip")
                    else:
                        shared[first + k:][words] = row
                return
        at = _shared_index(blocks, pc, inst, address, mask, nbytes)
        if at is not None:
            _transfer(load, shared, blocks.shared_u8, *at, width, rows, mask)
    return execute


# -- local memory ------------------------------------------------------------------------------
def _local_index(blocks: ResidentBlocks, pc: int, inst: Instruction, mask: Mask, nbytes: int):
    """Word index into the batch's local memory, and byte within the word, of each active lane."""
    regs, d = blocks.registers, blocks.d
    addr = regs.R[regs.row(inst.ra)]
    a = (addr if mask is None else addr[mask]).astype(I64) + inst.simm
    if a.size == 0:
        return None
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi + nbytes > d.local_bytes:
        raise blocks.fault(pc, f"local memory access outside the thread's {d.local_bytes} bytes",
                           lo if lo < 0 else hi)
    if nbytes > 1 and (a & (nbytes - 1)).any():
        raise blocks.fault(pc, f"misaligned {nbytes}-byte local memory access", lo)
    blocks.core.counters.local_bytes += a.size * nbytes
    lanes = blocks.lane_ids if mask is None else blocks.lane_ids[mask]
    return (a >> 2) * blocks.lanes + lanes, a & 3


@binds("LDL", "STL")
def local_load_store(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    load, width = inst.op == "LDL", inst.mod("w")
    nbytes, rows = MEMORY_BYTES[width], _data_rows(blocks, inst, load)

    def execute(mask: Mask) -> None:
        at = _local_index(blocks, pc, inst, mask, nbytes)
        if at is not None:
            _transfer(load, blocks.local_u32, blocks.local_u8, *at, width, rows, mask, blocks.lanes)
    return execute


# -- atomics -----------------------------------------------------------------------------------
def _atomic(blocks: ResidentBlocks, inst: Instruction, memory: np.ndarray, index: np.ndarray, mask: Mask) -> None:
    """Apply the instruction's atomic at `index` of `memory` for the active lanes; old values to Rd."""
    regs = blocks.registers
    op, t = inst.mod("op"), inst.mod("t")
    wide = t in ATOM_WIDE

    def operand(r):
        value = regs.pair(r) if wide else regs.R[regs.row(r)]
        value = np.broadcast_to(value, blocks.lanes)
        return value if mask is None else value[mask]
    value = operand(inst.rc)
    new = operand(inst.rc + (2 if wide else 1)) if op == "CAS" and inst.rc != RZ else None
    if op == "CAS" and new is None:
        new = np.zeros_like(value)
    old = atomics.apply(memory, index, np.ascontiguousarray(value), op, t, new)
    if inst.rd == RZ:
        return
    if wide:
        _put([regs.R[regs.dest(inst.rd)], regs.R[regs.dest(inst.rd + 1)]],
             [(old & U64(0xFFFFFFFF)).astype(U32), (old >> U64(32)).astype(U32)], mask)
    else:
        _put([regs.R[regs.dest(inst.rd)]], [old], mask)


@binds("ATOMG")
def atomg(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    nbytes = 8 if inst.mod("t") in ATOM_WIDE else 4

    def execute(mask: Mask) -> None:
        got = _global_access(blocks, pc, inst, mask, nbytes, True, atomic=True)
        if got is not None:
            pa, mem = got
            memory = mem.u64 if nbytes == 8 else mem.u32
            _atomic(blocks, inst, memory, pa >> (3 if nbytes == 8 else 2), mask)
    return execute


@binds("ATOMS")
def atoms(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    nbytes, address = 8 if inst.mod("t") in ATOM_WIDE else 4, blocks.registers.row(inst.ra)

    def execute(mask: Mask) -> None:
        at = _shared_index(blocks, pc, inst, address, mask, nbytes)
        if at is not None:
            blocks.core.counters.atomic_lanes += at[0].size
            if nbytes == 8:
                _atomic(blocks, inst, blocks.shared_u64, at[0] >> 1, mask)
            else:
                _atomic(blocks, inst, blocks.shared_u32, at[0], mask)
    return execute


@binds("MEMBAR")
def membar(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return lambda mask: None          # memory here is sequentially consistent: nothing to order
