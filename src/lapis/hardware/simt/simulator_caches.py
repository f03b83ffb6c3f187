"""What the SIMT core keeps only to run faster, behind one switch.

None of this is modelled hardware (the L2 in `lapis.hardware.caches` and the MMU's TLB are):
it is the simulator keeping work it would otherwise redo, as QEMU keeps translated blocks.

- Decoded programs, by their bytes: the command processor decodes a kernel's code once.
- The arrays of the register file, shared and local memory, reused from launch to launch:
  fresh host pages fault on first touch, which for a 64K-lane register file is milliseconds
  per launch. One batch runs at a time and each clears what it uses, so batches share them.
- The lane layout of a batch shape (its lanes' block, warp and thread indices, the special
  registers), shared by every program launched with that shape.
- The state of a batch of resident blocks, reused by the next batch of the same size, in the
  same launch with the executors its instructions were bound to (binding reads operands, folds
  constants and picks functions; see `binders.py`), and by later launches of the same program
  and shape.
- Each program's translation for the native engine (`translate.py`).
- What is summed from a launch's per-instruction counts (its warp instructions by pipe, FLOPs by
  precision), by program and counts: a framework launches one kernel on one shape over and over.
- Values derived from registers (`DerivedValues`), kept until one of those registers is
  written again: a shared-memory address register's word indices, its bank-conflict count,
  an HMMA operand's unpacked fragment.

`SimtCore(..., caches=False)`, or `LAPIS_SIM_CACHES=0` in the environment (which `Gpu` reads),
switches all of it off: every launch decodes its code, every batch gets fresh arrays and state,
every instruction is bound each time it runs, and nothing derived from a register is kept. Results and counters must not
change; a test runs kernels both ways and compares.
"""

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.translate import Translation, translate
from lapis.isa import Instruction

if TYPE_CHECKING:
    from lapis.hardware.simt.blocks import LaneLayout, ResidentBlocks


class SimulatorCaches:
    """The SIMT core's caches; with `enabled` False, every lookup misses and nothing is kept."""

    KEPT_BATCHES = 64
    KEPT_LANES = 1 << 21           # lanes of all kept batches together (about 20 bytes each) ...
    KEPT_LAYOUT_LANES = 1 << 20    # ... and of all kept lane layouts (about 120 bytes each)
    KEPT_COUNTS = 4096             # launches' count totals (past this many, the cache starts over)

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.generation = 0                # advances whenever `array` hands out a new buffer
        self._programs: dict[bytes, list[Instruction]] = {}
        self._translations: dict[tuple[int, int, int], tuple[list[Instruction], Translation]] = {}
        self._per_program: dict[tuple[int, str], tuple[list[Instruction], object]] = {}
        self._per_count: dict[tuple[int, bytes, bytes], tuple[list[Instruction], tuple]] = {}
        self._arrays: dict[str, np.ndarray] = {}
        self._batches: dict[Hashable, tuple[list[Instruction], ResidentBlocks, int]] = {}
        self._layouts: dict[Hashable, tuple[None, LaneLayout, int]] = {}

    def program(self, code: bytes, decode: Callable[[bytes], list[Instruction]]) -> list[Instruction]:
        """A kernel's instructions: decode(code), once per distinct code."""
        if not self.enabled:
            return decode(code)
        program = self._programs.get(code)
        if program is None:
            program = self._programs[code] = decode(code)
        return program

    def per_program(self, program: list[Instruction], what: str, make: Callable[[list[Instruction]], object]):
        """make(program), once per program (for what the scheduler looks up per instruction)."""
        if not self.enabled:
            return make(program)
        key = (id(program), what)
        kept = self._per_program.get(key)
        if kept is None or kept[0] is not program:
            kept = self._per_program[key] = (program, make(program))
        return kept[1]

    def translation(self, program: list[Instruction], registers: int, stride: int) -> "Translation":
        """The program's translation for the native engine (`translate.py`), once per program, register count
        and register-file row length `stride`: the runs `fused.py` compiles into it are for one row length, so
        launches of the same kernel over grids of other sizes keep their own."""
        if not self.enabled:
            return translate(program, registers)
        key = (id(program), registers, stride)
        kept = self._translations.get(key)
        if kept is None or kept[0] is not program:
            kept = self._translations[key] = (program, translate(program, registers))
        return kept[1]

    def per_count(self, program: list[Instruction], per_pc: tuple[bytes, bytes], make: Callable[[], tuple]) -> tuple:
        """make(), once per program and per-instruction warp and thread counts (`Counters.per_pc`)."""
        if not self.enabled:
            return make()
        key = (id(program), *per_pc)
        kept = self._per_count.get(key)
        if kept is None or kept[0] is not program:
            if len(self._per_count) >= self.KEPT_COUNTS:
                self._per_count.clear()
            kept = self._per_count[key] = (program, make())
        return kept[1]

    def translations(self, program: list[Instruction]) -> list["Translation"]:
        """Every translation kept of the program (one per register count and row length)."""
        return [translation for kept, translation in self._translations.values() if kept is program]

    def forget_programs(self) -> None:
        """After a device reset, nothing decoded before is trusted."""
        self._programs.clear()
        self._translations.clear()
        self._per_program.clear()
        self._per_count.clear()
        self._batches.clear()
        self._layouts.clear()

    def array(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An array for the state of a batch (the register file, shared or local memory), contents undefined."""
        if not self.enabled:
            return np.zeros(shape, dtype)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        buf = self._arrays.get(name)
        if buf is None or buf.size < nbytes:
            buf = self._arrays[name] = np.zeros(max(nbytes, 8), np.uint8)
            self.generation += 1
        return buf[:nbytes].view(dtype).reshape(shape)

    def batch(self, key: Hashable, program: list[Instruction], lanes: int,
              make: Callable[[], "ResidentBlocks"]) -> "ResidentBlocks":
        """The state of a batch of blocks kept under `key` (a program and a launch shape), or make().

        Building a batch costs more than running a small kernel, and frameworks launch the same
        kernels over and over, so the most recently used batches are kept across launches (the
        caller points a kept one at its new dispatch)."""
        return self._kept(self._batches, key, program, lanes, make, self.KEPT_LANES)

    def layout(self, key: Hashable, lanes: int, make: Callable[[], "LaneLayout"]) -> "LaneLayout":
        """The lane layout of a batch shape (`blocks.LaneLayout`), kept as batches are, or make()."""
        return self._kept(self._layouts, key, None, lanes, make, self.KEPT_LAYOUT_LANES)

    def _kept(self, kept_by_key: dict, key: Hashable, program, lanes: int, make: Callable, most_lanes: int):
        """kept_by_key[key]'s value when it was made for `program`, else make()'s; kept by recency
        (the most recently used last), at most `KEPT_BATCHES` of them and `most_lanes` lanes in all."""
        if not self.enabled:
            return make()
        kept = kept_by_key.pop(key, None)
        if kept is not None and kept[0] is program:
            kept_by_key[key] = kept                        # a hit changes no total: nothing to evict
            return kept[1]
        kept = kept_by_key[key] = (program, make(), lanes)
        while len(kept_by_key) > 1 and (len(kept_by_key) > self.KEPT_BATCHES
                                        or sum(entry[2] for entry in kept_by_key.values()) > most_lanes):
            del kept_by_key[next(iter(kept_by_key))]
        return kept[1]


class DerivedValues:
    """Values computed from registers, each valid until one of the registers it was computed from is written.

    Every register row has a version, which the scheduler advances after each instruction
    that writes it (`bumps[pc]` lists the rows instruction pc may write); an entry is kept
    with the versions of the rows it was computed from and is current while they match.
    Only the rows some entry can be computed from are tracked: the address registers of
    shared-memory loads and stores and the A and B fragments of HMMA.
    """

    def __init__(self, program: list[Instruction], registers: int, enabled: bool):
        self.enabled = enabled
        tracked: set[int] = set()
        if enabled:
            tracked = {i.ra for i in program if i.op in ("LDS", "STS")}
            tracked |= {first + k for i in program if i.op == "HMMA" for first, n in ((i.ra, 4), (i.b.index, 2))
                        for k in range(n)}
            tracked = {r for r in tracked if r < registers}     # not RZ, which never changes
        self.version = np.zeros(registers + 2, np.int64)
        # No instruction writes more than four registers (HMMA's D, LDS.128).
        self.bumps = [tuple(r for r in range(i.rd, i.rd + 4) if r in tracked) if "Rd" in i.opcode.operands else ()
                      for i in program]
        self.bump_rows = np.full((len(program), 4), -1, np.int64)     # the same, for the native engine
        for pc, rows in enumerate(self.bumps):
            self.bump_rows[pc, :len(rows)] = rows
        self._entries: dict[Hashable, tuple[Hashable, object]] = {}

    def clear(self) -> None:
        """Forget every entry (the registers were reset without their versions advancing)."""
        self._entries.clear()

    def get(self, key: Hashable, versions: Hashable):
        """The value kept under `key` if it was computed from registers at `versions`, else None."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == versions else None

    def latest(self, key: Hashable) -> tuple[Hashable, object] | None:
        """(versions, value) last kept under `key`, current or not, or None."""
        return self._entries.get(key)

    def put(self, key: Hashable, versions: Hashable, value) -> None:
        if self.enabled:
            self._entries[key] = (versions, value)
