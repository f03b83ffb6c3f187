"""Running translated code: the native scheduler runs a batch, and hands steps back to the binders.

`NativeRunner` belongs to one batch of resident blocks (`blocks.py`). It runs the batch through
the native scheduler (`native_scheduler.py`), which picks groups of lanes as the reference
scheduler does and runs them through the engine (`native.py`) on the batch's own arrays
(registers, predicates, shared and local memory, the exited lanes), physical memory and the
L2's arrays, counting as the scheduler counts. It stops where Python has work: an instruction
the binders run, one that would fault (its binder raises the reference's fault, naming the
same lane and address), a barrier under divergence, the watchdog, the end of the program; the
scheduler (`SimtCore._run_native`) runs that step on the running group (`current`) and resumes.
The engine counts into the kernel's counters; when a checker keeps the global writes
(`compare.py`), the runner records each store.

`LAPIS_SIM=reference` (read by `Gpu`) runs every instruction through the binders instead.
"""

import os
from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.binders import Mask
from lapis.hardware.simt.memory_access import MEMORY_BYTES
from lapis.hardware.simt.native_counters import TALLY, TALLY_SLOTS
from lapis.hardware.simt.native_mma import MMA_WORK
from lapis.hardware.simt.native_scheduler import STORED, execute_batch
from lapis.hardware.simt.registers import U64, padded_lanes
from lapis.hardware.simt.translate import Translation

if TYPE_CHECKING:
    from lapis.hardware.simt.blocks import ResidentBlocks


def _engine_threads() -> int:
    """The threads a fused run may be split among: LAPIS_SIM_THREADS, else one per core numba uses."""
    import numba
    wanted = os.environ.get("LAPIS_SIM_THREADS")
    return max(1, min(int(wanted), numba.config.NUMBA_NUM_THREADS) if wanted else numba.config.NUMBA_NUM_THREADS)


class NativeRunner:
    """Runs groups of one batch of blocks through the translated program."""

    # Threads for fused runs (`native_scheduler.run_parts`). A forked child runs on one: GNU OpenMP, numba's
    # threading layer here, cannot start threads in a child of a process that used it (as CUDA cannot run in a
    # forked child of a process that initialized it).
    threads = _engine_threads()
    # Instructions over lanes a fused run must run to be split: a parallel region's start and join cost about
    # as much as 2^15 of them on an idle host, but on two cores shared with the program's and the command
    # processor's threads a split of a small run (a one-block gemm's loop, called once per trip) waited for
    # the other core and made a tiny GPT's step 1.7x slower.
    parted_work = 1 << 18

    def __init__(self, blocks: "ResidentBlocks", translation: Translation):
        self.blocks, self.translation = blocks, translation
        b, core = blocks, blocks.core
        n = len(translation.translated)
        self.tally = np.zeros(TALLY_SLOTS, np.int64)
        self.lanes = (b.lane_in_warp, b.warp_base, b.warp_len, b.padded_lane, b.shared_base)
        self.caches = core.data_caches.native
        self.waiting = np.zeros(n + 1, np.int64)      # per pc, the lanes waiting there
        self.lane_pc = np.zeros(b.lanes, np.int64)    # per lane, the pc it waits at (-1: running or exited)
        # The running group's lanes (in padded storage: a fused run reads whole vectors of them).
        self.group = np.zeros(padded_lanes(b.lanes), bool)[:b.lanes]
        self.cur = np.zeros(2, np.int64)              # its lanes and warps
        self.acquire()

    def acquire(self) -> None:
        """Take working space from the simulator's caches, and the batch's current storage."""
        b, core = self.blocks, self.blocks.core
        caches, lanes = core.caches, b.lanes
        slots = max(1, len(self.translation.logged))
        self.log_va = caches.array("native log va", (slots, lanes), np.int64)
        self.log_active = caches.array("native log active", (slots, lanes), bool)
        # Padded as the rows are: a fused loop writes each vector's trips to row 0 whole. Row 3 is HMMA's work.
        self.scratch = caches.array("native scratch", (4, max(padded_lanes(lanes), MMA_WORK)), np.int64)
        self.laid = caches.array("native laid", (b.nblocks * b.warps_per_block * core.warp_size,), np.int64)
        self.guarded = caches.array("native guarded", (lanes,), bool)
        self.missed = caches.array("native missed", (lanes,), bool)
        self.memories = (b.shared_u32, b.shared_u8, b.local_u32, b.local_u8, core.vram.u32, core.vram.u8,
                         core.sysmem.u32, core.sysmem.u8, core.vram.u64)

    def run(self, pc: int, current: bool, budget: int) -> tuple[int, int, int]:
        """Run the batch (with `current`, the running group first, at pc) until Python has a step to
        run (see `native_scheduler.execute_batch`); returns (how it stopped, pc, instructions run)."""
        b, core, t = self.blocks, self.blocks.core, self.translation
        regs, d, c = b.registers, b.d, core.counters
        mmu = core.mmu
        self.tally.fill(0)
        logging = core.write_log is not None
        with mmu.lock:
            sizes = (d.shared_bytes, d.local_bytes, mmu.roots.get(d.vmid, -1), core.warp_size, b.threads_per_block,
                     b.warps_per_block, b.nblocks, logging, self.threads, self.parted_work)
            status, pc, steps = execute_batch(
                t.table, pc, current, len(t.translated), self.group, self.lane_pc, self.waiting, b.lane_warp,
                self.cur, budget, regs.R_rows, regs.P_rows, b.special, regs.cbank, core.counters.steps, self.memories,
                sizes, self.lanes, self.caches, self.scratch, self.laid, self.guarded, self.missed, self.log_va,
                self.log_active, self.tally, c.warp_instructions, c.thread_instructions, b.derived.version,
                b.derived.bump_rows, b.exited)
        counts = self.tally[:len(TALLY)].tolist()        # a list: numpy's any() costs more than the loop
        if any(counts):
            for name, value in zip(TALLY, counts, strict=True):
                if value:
                    setattr(c, name, getattr(c, name) + value)
        if status == STORED:
            self._record_store(pc - 1)
        return status, pc, steps

    def current(self) -> tuple[Mask, int, int]:
        """The running group: its mask (None for every lane), lanes and warps."""
        lanes, warps = self.cur.tolist()
        return (None if lanes == self.blocks.lanes else self.group.copy()), lanes, warps

    def begin(self) -> None:
        """Start a batch: every lane waits at pc 0."""
        self.lane_pc.fill(0)
        self.waiting.fill(0)
        self.waiting[0] = self.blocks.lanes

    def _record_store(self, pc: int) -> None:
        """Keep the physical addresses the store at pc wrote, for `compare.py`."""
        b = self.blocks
        slot = self.translation.log_of[pc]
        va = self.log_va[slot].view(U64)[self.log_active[slot]]
        if va.size:
            inst = b.d.program[pc]
            nbytes = 4 if inst.op == "ATOMG" else MEMORY_BYTES[inst.mod("w")]      # the engine runs 32-bit atomics
            pa, system = b.core.mmu.translate(b.d.vmid, va, nbytes, True)
            b.core.write_log.append((system, (pa.astype(np.int64)[:, None] + np.arange(nbytes)).ravel(), None))


def _one_thread_in_child() -> None:
    NativeRunner.threads = 1


os.register_at_fork(after_in_child=_one_thread_in_child)
