"""Running translated code: a batch of blocks hands runs of its program to the native engine.

`NativeRunner` belongs to one batch of resident blocks (`blocks.py`). The scheduler asks it to
run instructions pc..stop-1 for a group's lanes when the translation (`translate.py`) says they
form a run; the runner calls the engine (`native.py`) on the batch's own arrays (registers,
predicates, shared and local memory), physical memory and the L2's arrays, then does what the
reference executor would have done besides computing values and counting (which the engine
does, `native_counters.py`):

- adds the run's memory counters to the kernel's;
- advances the versions of the registers the run wrote, which values derived from registers
  (`simulator_caches.DerivedValues`) are checked against;
- if the engine stopped before an instruction that faults, runs that instruction through its
  binder, which raises the reference's fault, naming the same lane and address;
- when a checker keeps the global writes (`compare.py`), records the run's stores.

`LAPIS_SIM=reference` (read by `Gpu`) runs every instruction through the binders instead.
"""

from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.binders import Mask, bind
from lapis.hardware.simt.memory_access import MEMORY_BYTES
from lapis.hardware.simt.native import DONE, execute_run
from lapis.hardware.simt.native_counters import TALLY
from lapis.hardware.simt.registers import U64
from lapis.hardware.simt.translate import Translation

if TYPE_CHECKING:
    from lapis.hardware.simt.blocks import ResidentBlocks


class NativeRunner:
    """Runs the translated runs of a program for one batch of blocks."""

    def __init__(self, blocks: "ResidentBlocks", translation: Translation):
        self.blocks, self.translation = blocks, translation
        b, core = blocks, blocks.core
        self.tally = np.zeros(len(TALLY), np.int64)
        self.all_lanes = np.ones(b.lanes, bool)
        # Per run (by its first pc): the register rows it writes that derived values depend on, and
        # whether it holds a memory instruction (else it counts nothing).
        bumps, logged = b.derived.bumps, set(translation.logged)
        self.run_bumps = {pc: tuple(r for q in range(pc, end) for r in bumps[q])
                          for pc, end in enumerate(translation.run_end) if end > pc}
        self.run_counts = {pc: any(q in logged for q in range(pc, end))
                           for pc, end in enumerate(translation.run_end) if end > pc}
        self.lanes = (b.lane_in_warp, b.warp_base, b.warp_len.astype(np.int64), b.padded_lane, b.shared_base)
        self.l2 = (core.l2.tags, core.l2.writer, core.l2.dirty)
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

    def run(self, start: int, stop: int, mask: Mask) -> None:
        """Execute instructions start..stop-1 for the lanes of `mask`, with the reference's effects."""
        b, core, t = self.blocks, self.blocks.core, self.translation
        regs, d = b.registers, b.d
        mmu = core.mmu
        counts = self.run_counts[start]
        if counts:
            self.tally.fill(0)
        with mmu.lock:
            sizes = (d.shared_bytes, d.local_bytes, mmu.roots.get(d.vmid, -1), core.warp_size, b.threads_per_block,
                     b.warps_per_block, b.nblocks, core.write_log is not None)
            status, reached = execute_run(
                t.table, start, stop, self.all_lanes if mask is None else mask, mask is None, regs.R, regs.P,
                b.special, regs.cbank, core.counters.steps, self.memories, sizes, self.lanes, self.l2,
                self.scratch, self.laid, self.guarded, self.missed, self.log_va, self.log_active, self.tally)
        if counts:
            c = core.counters
            for name, value in zip(TALLY, self.tally.tolist(), strict=True):
                if value:
                    setattr(c, name, getattr(c, name) + value)
        version = b.derived.version
        if reached == stop:
            for r in self.run_bumps[start]:
                version[r] += 1
        else:
            for pc in range(start, reached):
                for r in b.derived.bumps[pc]:
                    version[r] += 1
        if core.write_log is not None:
            self._record_writes(start, reached)
        if status != DONE:
            bind(b, reached)(mask)              # raises the reference's fault
            raise AssertionError(f"the native engine stopped at {d.program[reached]}, which did not fault")

    def _record_writes(self, start: int, stop: int) -> None:
        """Keep the physical addresses the run's global stores wrote, for `compare.py`."""
        b = self.blocks
        for pc in range(start, stop):
            inst = b.d.program[pc]
            if inst.op != "STG":
                continue
            slot = self.translation.log_of[pc]
            va = self.log_va[slot].view(U64)[self.log_active[slot]]
            if va.size:
                nbytes = MEMORY_BYTES[inst.mod("w")]
                pa, system = b.core.mmu.translate(b.d.vmid, va, nbytes, True)
                b.core.write_log.append((system, (pa.astype(np.int64)[:, None] + np.arange(nbytes)).ravel(), None))
