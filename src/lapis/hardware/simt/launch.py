"""The SIMT core's interface: a `Dispatch` comes in, `Counters` go out, a `KernelFault` stops it.

A `Dispatch` is one kernel launch as the command processor hands it to the compute units:
the decoded program, the grid and block shapes, what each block takes (registers, shared
and local memory), constant bank 0 and the address space, as a GPU's front end hands a
launch descriptor (NVIDIA's QMD, AMD's dispatch packet) to the block scheduler. `Counters`
is what executing it counted, per program counter and in total, the figures a profiler
reads from the hardware counters (instructions executed, sectors, shared-memory
wavefronts), from which the performance model (`perf.py`) derives a time. A kernel that
stops on an error raises `KernelFault`, naming the instruction and, for memory, the
address, as a GPU reports an illegal or misaligned address.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from lapis.isa import Instruction


class KernelFault(Exception):
    """A kernel stopped on an error; names the instruction and, for memory, the address."""

    def __init__(self, reason: str, pc: int, instruction: str, address: int | None = None):
        where = f" at address {address:#x}" if address is not None else ""
        super().__init__(f"{reason}{where} (instruction /*{pc:04x}*/ {instruction})")
        self.reason, self.pc, self.instruction, self.address = reason, pc, instruction, address


# The floating-point operations each arithmetic instruction does per active lane, by precision: an
# FMA is two, a packed-half instruction does its operation on two halves, and HMMA's 16x8x16
# multiply-accumulate (2 * 16 * 8 * 16 operations) is shared by the 32 lanes of its group.
FLOPS_PER_LANE: dict[str, tuple[str, int]] = {
    "FADD": ("fp32", 1), "FMUL": ("fp32", 1), "FFMA": ("fp32", 2),
    "DADD": ("fp64", 1), "DMUL": ("fp64", 1), "DFMA": ("fp64", 2),
    "HADD2": ("fp16", 2), "HMUL2": ("fp16", 2), "HFMA2": ("fp16", 4),
    "HMMA": ("matrix", 2 * 16 * 8 * 16 // 32),
}


@dataclass
class Counters:
    """What executing a kernel counted, per program counter (int64 arrays) and in total."""
    warp_instructions: np.ndarray
    thread_instructions: np.ndarray
    flops_by_precision: dict[str, int] = field(default_factory=dict)   # fp32, fp64, fp16 (packed), matrix
    warp_instructions_by_pipe: dict[str, int] = field(default_factory=dict)
    global_bytes: int = 0          # bytes requested by global loads, stores and atomics
    global_sectors: int = 0        # 32-byte sectors those requests touched after coalescing (L1 requests)
    l1_hits: int = 0               # sectors the unit's L1 held (loads only: stores and atomics go on to the L2)
    l2_misses: int = 0             # sectors the unit's L2 slice did not hold (gone on to the far level or DRAM)
    far_misses: int = 0            # sectors no cache held (gone on to DRAM): the L2 misses without a far level
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    atomic_lanes: int = 0          # lane-operations of global and shared atomics
    shared_bytes: int = 0
    shared_wavefronts: int = 0     # shared-memory cycles spent, bank conflicts included
    shared_ideal_wavefronts: int = 0   # the cycles a conflict-free access pattern would take
    local_bytes: int = 0           # per-thread local memory (spills, local arrays)
    pcie_bytes: int = 0            # global accesses that landed in host memory
    barriers: int = 0
    waves: int = 0                 # rounds of resident blocks the grid takes on the device (the last may be partial)
    blocks: int = 0
    warps_per_block: int = 0
    steps: int = 0                 # scheduler steps (group-instructions), for the watchdog

    def __eq__(self, other) -> bool:
        if not isinstance(other, Counters):
            return NotImplemented
        return all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
                   for a, b in zip(self.__dict__.values(), other.__dict__.values(), strict=True))

    def per_pc(self) -> tuple[bytes, bytes]:
        """The per-pc warp and thread counts as bytes: the part of `key` that identifies them (a bytes object
        keeps its hash, so a caller that keys two lookups by the same ones hashes them once)."""
        return self.warp_instructions.tobytes(), self.thread_instructions.tobytes()

    def key(self, per_pc: tuple[bytes, bytes] | None = None) -> tuple:
        """Every count as one hashable value: equal keys, equal counters. (The fields after the two arrays
        and two dicts are numbers; a new array or dict among them would make the key unhashable.) `per_pc`:
        `per_pc()`'s bytes, when the caller has them already."""
        return (*(per_pc or self.per_pc()),
                tuple(self.flops_by_precision.items()), tuple(self.warp_instructions_by_pipe.items()),
                tuple(self.__dict__.values())[4:])

    @property
    def flops(self) -> int:
        return sum(self.flops_by_precision.values())

    @property
    def l2_requests(self) -> int:
        return self.global_sectors - self.l1_hits

    @property
    def l2_hits(self) -> int:
        return self.l2_requests - self.l2_misses

    @property
    def far_hits(self) -> int:
        return self.l2_misses - self.far_misses

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def bank_conflicts(self) -> int:
        """Shared-memory replays: wavefronts beyond the conflict-free count."""
        return self.shared_wavefronts - self.shared_ideal_wavefronts

    @property
    def average_active_lanes(self) -> float:
        """Active lanes per warp instruction (the warp size when nothing diverges)."""
        return self.total_thread_instructions / max(1, self.total_warp_instructions)

    @classmethod
    def for_program(cls, n: int) -> "Counters":
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64))

    @property
    def total_warp_instructions(self) -> int:
        return int(self.warp_instructions.sum())

    @property
    def total_thread_instructions(self) -> int:
        return int(self.thread_instructions.sum())


@dataclass
class Dispatch:
    """One kernel launch as the command processor hands it to the compute units."""
    program: list[Instruction]
    block: tuple[int, int, int]
    grid: tuple[int, int, int]           # in blocks
    registers: int
    shared_bytes: int
    cbank: np.ndarray                    # constant bank 0, uint32 words
    vmid: int
    watchdog_steps: int
    local_bytes: int = 0                 # local (private) memory per thread
    cooperative: bool = False            # every block resident at once (one batch), for grid barriers
    # The time.monotonic() past which the SIMT core stops the kernel with a fault for `deadline_reason`: the command
    # processor's per-kernel time limit, or at once when it cancels the kernel (`stop`).
    deadline: float = math.inf
    deadline_reason: str = ""

    def stop(self, reason: str) -> None:
        """Stop the kernel at the SIMT core's next look at the deadline (from another thread: its queue went)."""
        self.deadline_reason = reason
        self.deadline = -math.inf
