"""Running translated code: the scheduler hands a group of lanes to the native engine.

`NativeRunner` belongs to one batch of resident blocks (`blocks.py`). When a group of lanes
reaches a translated instruction (`translate.py`), the scheduler asks the runner to take it
along (`path`): the engine (`native.py`) runs it on the batch's own arrays (registers,
predicates, shared and local memory, the exited lanes), physical memory and the L2's arrays,
through translated instructions and through branches, exits and barriers the whole group takes
alike, counting as the scheduler counts, and stops where the scheduler has work: an
instruction the binders run, a branch or exit that splits the group, a barrier under
divergence, an instruction that would fault (its binder raises the reference's fault, naming
the same lane and address), the watchdog, another group to merge with or to let run first.
The runner adds the memory counters to the kernel's, and `flush` the per-instruction counts;
when a checker keeps the global writes (`compare.py`) it records each store.

`LAPIS_SIM=reference` (read by `Gpu`) runs every instruction through the binders instead.
"""

from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.binders import Mask
from lapis.hardware.simt.memory_access import MEMORY_BYTES
from lapis.hardware.simt.native import STORED, execute_path
from lapis.hardware.simt.native_counters import TALLY
from lapis.hardware.simt.registers import U64
from lapis.hardware.simt.translate import Translation

if TYPE_CHECKING:
    from lapis.hardware.simt.blocks import ResidentBlocks


class NativeRunner:
    """Runs groups of one batch of blocks through the translated program."""

    def __init__(self, blocks: "ResidentBlocks", translation: Translation):
        self.blocks, self.translation = blocks, translation
        b, core = blocks, blocks.core
        n = len(translation.translated)
        self.tally = np.zeros(len(TALLY), np.int64)
        self.all_lanes = np.ones(b.lanes, bool)
        self.lanes = (b.lane_in_warp, b.warp_base, b.warp_len.astype(np.int64), b.padded_lane, b.shared_base)
        self.l2 = (core.l2.tags, core.l2.writer, core.l2.dirty)
        self.waiting = np.zeros(n + 1, bool)          # pcs where other groups wait
        self.warp_counts = np.zeros(n, np.int64)      # what the engine issued since the last `flush`
        self.thread_counts = np.zeros(n, np.int64)
        self.acquire()

    def acquire(self) -> None:
        """Take working space from the simulator's caches, and the batch's current storage."""
        b, core = self.blocks, self.blocks.core
        caches, lanes = core.caches, b.lanes
        slots = max(1, len(self.translation.logged))
        self.log_va = caches.array("native log va", (slots, lanes), np.int64)
        self.log_active = caches.array("native log active", (slots, lanes), bool)
        self.scratch = caches.array("native scratch", (3, lanes), np.int64)
        self.laid = caches.array("native laid", (b.nblocks * b.warps_per_block * core.warp_size,), np.int64)
        self.guarded = caches.array("native guarded", (lanes,), bool)
        self.missed = caches.array("native missed", (lanes,), bool)
        self.memories = (b.shared_u32, b.shared_u8, b.local_u32, b.local_u8, core.vram.u32, core.vram.u8,
                         core.sysmem.u32, core.sysmem.u8, core.vram.u64)

    def path(self, pc: int, mask: Mask, lanes: int, warps: int, groups: dict, budget: int) -> tuple[int, int, int]:
        """Run the group of `mask` from pc for as long as the scheduler would keep it together (see
        `native.execute_path`); returns (how it stopped, pc, instructions completed)."""
        b, core, t = self.blocks, self.blocks.core, self.translation
        regs, d = b.registers, b.d
        mmu = core.mmu
        if groups:
            self.waiting[:] = False
            self.waiting[list(groups)] = True
        self.tally.fill(0)
        logging = core.write_log is not None
        with mmu.lock:
            sizes = (d.shared_bytes, d.local_bytes, mmu.roots.get(d.vmid, -1), core.warp_size, b.threads_per_block,
                     b.warps_per_block, b.nblocks, logging)
            status, pc, steps = execute_path(
                t.table, pc, len(t.translated), self.all_lanes if mask is None else mask, mask is None, not groups,
                self.waiting, lanes, warps, budget, regs.R, regs.P, b.special, regs.cbank, core.counters.steps,
                self.memories, sizes, self.lanes, self.l2, self.scratch, self.laid, self.guarded, self.missed,
                self.log_va, self.log_active, self.tally, self.warp_counts, self.thread_counts, b.derived.version,
                b.derived.bump_rows, b.exited)
        if self.tally.any():
            c = core.counters
            for name, value in zip(TALLY, self.tally.tolist(), strict=True):
                if value:
                    setattr(c, name, getattr(c, name) + value)
        if status == STORED:
            self._record_store(pc - 1)
        return status, pc, steps

    def begin(self) -> None:
        """Start a batch: nothing issued yet (a batch that faulted never flushed what it had)."""
        self.warp_counts.fill(0)
        self.thread_counts.fill(0)

    def flush(self) -> None:
        """Add what the engine issued to the kernel's per-instruction counts."""
        c = self.blocks.core.counters
        for pc in np.flatnonzero(self.warp_counts).tolist():
            c.warp_instructions[pc] += int(self.warp_counts[pc])
            c.thread_instructions[pc] += int(self.thread_counts[pc])
        self.begin()

    def _record_store(self, pc: int) -> None:
        """Keep the physical addresses the store at pc wrote, for `compare.py`."""
        b = self.blocks
        slot = self.translation.log_of[pc]
        va = self.log_va[slot].view(U64)[self.log_active[slot]]
        if va.size:
            nbytes = MEMORY_BYTES[b.d.program[pc].mod("w")]
            pa, system = b.core.mmu.translate(b.d.vmid, va, nbytes, True)
            b.core.write_log.append((system, (pa.astype(np.int64)[:, None] + np.arange(nbytes)).ravel(), None))
