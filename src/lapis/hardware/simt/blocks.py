"""The state of a batch of resident thread blocks: their lanes, warps, registers and on-chip memories.

On a GPU, the block scheduler places as many blocks on the compute units as their
registers, shared memory and thread slots allow, and those blocks run side by side. The
simulator runs such a batch as one set of arrays: every thread of every block is a lane,
each register a row over all lanes (`registers.py`), each block's shared memory a slice of
one array, each thread's local memory an interleaved column of another. This module lays
the lanes out: which block and warp each lane belongs to, where each warp starts (warps of
the profile's width, the last one of a block possibly partial), and the special registers
(thread and block indices, lane, warp and unit ids) that S2R reads.
"""

from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.binders import Executor
from lapis.hardware.simt.launch import Dispatch, KernelFault
from lapis.hardware.simt.registers import U32, U64, RegisterFile, padded_lanes
from lapis.hardware.simt.simulator_caches import DerivedValues
from lapis.isa import INSTRUCTION_BYTES, format_instruction
from lapis.isa import SpecialRegister as SR
from lapis.isa.dataflow import read_before_written

if TYPE_CHECKING:
    from lapis.hardware.simt.scheduler import SimtCore
    from lapis.hardware.simt.translated import NativeRunner


def _unset_rows(program: list) -> tuple[int, ...]:
    """The registers a launch of `program` must zero (`RegisterFile.reset`), as row numbers."""
    return tuple(sorted(read_before_written(program)))


class LaneLayout:
    """Where each lane of a batch of `nblocks` blocks of shape `block` sits (its block, warp and
    thread indices): it depends on the shape alone, so batches of different programs share it."""

    def __init__(self, warp_size: int, block: tuple[int, int, int], nblocks: int):
        self.nblocks = nblocks
        tpb = self.threads_per_block = block[0] * block[1] * block[2]
        L = self.lanes = nblocks * tpb
        ws = warp_size
        self.warps_per_block = -(-tpb // ws)
        self.warp_aligned = tpb % ws == 0
        self.lane_ids = np.arange(L, dtype=np.int64)
        t = np.tile(np.arange(tpb, dtype=np.int64), nblocks)           # the thread's index in its block
        self.lane_block = np.repeat(np.arange(nblocks, dtype=np.int64), tpb)
        # Warps: lane `lane_in_warp` of a warp of `warp_len` lanes whose lane 0 is lane `warp_base`.
        self.lane_in_warp = t % ws
        self.warp_base = self.lane_ids - self.lane_in_warp
        self.warp_len = np.minimum(ws, tpb - t // ws * ws)
        self.warp_starts = np.flatnonzero(self.lane_in_warp == 0)
        self.lane_warp = np.cumsum(self.lane_in_warp == 0) - 1
        self.padded_lane = self.lane_block * (self.warps_per_block * ws) + t   # position counting whole warps
        self._shared_base: dict[int, np.ndarray] = {}

        bx, by, _ = block
        self.special = np.zeros((len(SR), L), U32)      # a row per special register; the blocks' set in `set_blocks`
        self.special[SR.TID_X], self.special[SR.TID_Y], self.special[SR.TID_Z] = t % bx, t // bx % by, t // (bx * by)
        self.special[SR.LANEID], self.special[SR.WARPID] = self.lane_in_warp, t // ws
        self._blocks_set: tuple | None = None          # (first block, grid) the block rows were set for

    def shared_base(self, shared_words: int) -> np.ndarray:
        """Each lane's block's first word of shared memory, for blocks of `shared_words` words (in storage padded
        as register rows are: a fused run reads whole vectors of it)."""
        base = self._shared_base.get(shared_words)
        if base is None:
            storage = np.zeros(padded_lanes(self.lanes), np.int64)
            storage[:self.lanes] = self.lane_block * shared_words
            base = self._shared_base[shared_words] = storage[:self.lanes]
        return base

    def set_blocks(self, first_block: int, grid: tuple[int, int, int], compute_units: int) -> None:
        """The block-index rows for blocks first_block .. first_block + nblocks - 1 of `grid`."""
        if self._blocks_set == (first_block, grid):            # a batch relaunched alike has them already
            return
        gx, gy, _ = grid
        b = first_block + np.arange(self.nblocks)                # per block, then broadcast over its lanes
        for row, value in ((SR.CTAID_X, b % gx), (SR.CTAID_Y, b // gx % gy), (SR.CTAID_Z, b // (gx * gy)),
                           (SR.SMID, b % compute_units)):        # blocks go round-robin to the units
            self.special[row].reshape(self.nblocks, self.threads_per_block)[:] = value.astype(U32)[:, None]
        self._blocks_set = (first_block, grid)


class ResidentBlocks:
    """The state of `nblocks` resident thread blocks executing together (a batch of the grid)."""

    def __init__(self, core: "SimtCore", d: Dispatch, layout: LaneLayout):
        self.core, self.layout = core, layout
        self.nblocks, self.threads_per_block, self.lanes = layout.nblocks, layout.threads_per_block, layout.lanes
        self.warps_per_block, self.warp_aligned = layout.warps_per_block, layout.warp_aligned
        self.lane_ids, self.lane_block, self.lane_in_warp = layout.lane_ids, layout.lane_block, layout.lane_in_warp
        self.warp_base, self.warp_len, self.warp_starts = layout.warp_base, layout.warp_len, layout.warp_starts
        self.lane_warp, self.padded_lane, self.special = layout.lane_warp, layout.padded_lane, layout.special
        self.shared_words = -(-d.shared_bytes // 8) * 2       # per block, 8-byte aligned for 64-bit atomics
        self.shared_base = layout.shared_base(self.shared_words)
        self.derived = DerivedValues(d.program, d.registers, core.caches.enabled)
        self.unset = core.caches.per_program(d.program, "read before written", _unset_rows)
        self.exited = np.zeros(self.lanes, bool)         # lanes that ran EXIT
        self.native: NativeRunner | None = None          # runs translated code; the scheduler attaches it
        self.launch(d)

    def launch(self, d: Dispatch) -> None:
        """Take on dispatch `d`, a launch of the same program with the same shape as the last one
        (its grid and arguments may differ): fresh storage from the caches, no instruction bound."""
        caches, L = self.core.caches, self.lanes
        self.d = d
        self.executors: list[Executor | None] = [None] * len(d.program)   # bound when first reached
        if getattr(self, "generation", None) == caches.generation and caches.enabled:
            self.registers.cbank = d.cbank          # the storage is still the caches' current buffers
            return
        self.generation = caches.generation
        self.registers = RegisterFile(caches, d, L)
        self.shared_u32 = caches.array("shared", (max(2, self.nblocks * self.shared_words),), U32)
        self.shared_u8, self.shared_u64 = self.shared_u32.view(np.uint8), self.shared_u32.view(U64)
        # Word w of lane l's local memory is word w * lanes + l: a warp's same-address access is contiguous.
        self.local_u32 = caches.array("local", (max(2, -(-d.local_bytes // 4) * L),), U32)
        self.local_u8 = self.local_u32.view(np.uint8)
        if self.native is not None:
            self.native.acquire()
        self.generation = caches.generation        # acquiring may itself have grown a buffer

    def start(self, first_block: int) -> None:
        """Reset the state for blocks first_block .. first_block + nblocks - 1."""
        self.registers.reset(self.unset)
        self.shared_u32.fill(0)
        self.local_u32.fill(0)
        self.layout.set_blocks(first_block, self.d.grid, self.core.profile.compute_units)
        self.core.data_caches.begin_batch(first_block, self.warps_per_block)
        self.exited.fill(False)
        self.derived.clear()

    def fault(self, pc: int, reason: str, address: int | None = None) -> KernelFault:
        """The fault that stops the kernel at instruction `pc`, for `reason`."""
        inst = self.d.program[pc]
        return KernelFault(reason, pc * INSTRUCTION_BYTES, format_instruction(inst, pc * INSTRUCTION_BYTES), address)
