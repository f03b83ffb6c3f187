"""The register file: every lane's registers and predicates, and how instructions read and write them.

Models the register file of an SM (64K 32-bit registers on H200; a CU's vector registers on
MI300X) with its operand collectors. Register Rn of every lane in flight is row n of a
(registers + 2, lanes) uint32 array, viewed as int32 or float32 when an instruction reads it
so; a 64-bit value is an even-aligned pair of registers, low word first, as in SASS. Row
`registers` reads as zero (RZ) and the last row takes the writes to RZ, so no instruction
special-cases the zero register. Predicates P0-P6 and PT (always true) are rows of a boolean
array. A launch starts with the registers its threads may read before writing them at zero
(`reset`); real GPUs leave them undefined.

Operand B is a register, a 32-bit immediate or a word of constant bank 0, and sources may
carry the `-x` and `|x|` modifiers; the readers here resolve all that when an instruction is
bound, so an executor only calls them. Writes leave the lanes outside the active mask as
they were.
"""

from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.binders import Executor, Mask
from lapis.isa import PT, RZ, Const, Imm, Instruction, Reg

if TYPE_CHECKING:
    from lapis.hardware.simt.launch import Dispatch
    from lapis.hardware.simt.simulator_caches import SimulatorCaches

U32, I32, F32, U64, I64, F64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64


def write(dst: np.ndarray, value, mask: Mask) -> None:
    """Store `value` (an array over all lanes, or a scalar) into the lanes of `mask` of row `dst`."""
    if mask is None:
        dst[...] = value
    else:
        np.copyto(dst, value, where=mask, casting="unsafe")


ROW_ALIGNMENT = 16            # lanes: a row's length is a multiple (a fused run computes 16 lanes at a time)


def padded_lanes(lanes: int) -> int:
    """The length of a register or predicate row in memory: `lanes` rounded up to whole 64-byte lines of
    registers, and on to 3 lines past a multiple of 4, so that no two of 64 consecutive rows lie a multiple
    of 4 KiB apart. Rows that do share the L1's sets, and a store to one makes a load from the other wait
    (4K aliasing): rows 16 KiB apart made an FFMA loop over 65,536 lanes a quarter slower."""
    padded = -(-lanes // ROW_ALIGNMENT) * ROW_ALIGNMENT
    while padded // ROW_ALIGNMENT % 4 != 3:
        padded += ROW_ALIGNMENT
    return padded


class RegisterFile:
    def __init__(self, caches: "SimulatorCaches", d: "Dispatch", lanes: int):
        self.count, self.lanes, self.cbank = d.registers, lanes, d.cbank
        stride = padded_lanes(lanes)
        # The storage (contiguous rows of `stride` lanes, what the native engine takes) and the registers.
        self.R_rows = caches.array("registers", (d.registers + 2, stride), U32)
        self.P_rows = caches.array("predicates", (8, stride), bool)
        self.R, self.P = self.R_rows[:, :lanes], self.P_rows[:, :lanes]
        self.F, self.S = self.R.view(F32), self.R.view(I32)          # the same registers read as float32, int32

    def reset(self, unset: tuple[int, ...]) -> None:
        """Start a batch: the registers in `unset` (those a thread may read before writing them,
        `isa.dataflow.read_before_written`) and RZ's row at zero, every predicate false but PT. The
        other rows keep what the last batch left: no thread of this one can read it, and zeroing a
        register file of many lanes costs more than running a small kernel."""
        for r in unset:                    # row by row: an index array's assignment costs more, even empty
            if r < self.count:
                self.R[r] = 0
        self.R[self.count] = 0
        self.P.fill(False)
        self.P[PT] = True

    def row(self, r: int) -> int:
        """The row register `r` is read from."""
        if r == RZ:
            return self.count
        if r >= self.count:
            raise ValueError(f"uses R{r} but the kernel declares {self.count} registers")
        return r

    def dest(self, r: int) -> int:
        """The row a write to register `r` goes to."""
        return self.count + 1 if r == RZ else self.row(r)

    def constant(self, offset: int) -> int:
        """The word of constant bank 0 at byte `offset` (zero past its end)."""
        return int(self.cbank[offset // 4]) if offset // 4 < len(self.cbank) else 0

    def b32(self, inst: Instruction, view: np.ndarray, dtype):
        """Operand B as a row of `view` or a scalar of `dtype`."""
        b = inst.b
        if isinstance(b, Reg):
            return view[self.row(b.index)]
        bits = b.bits if isinstance(b, Imm) else self.constant(b.offset)
        return np.array(bits, U32).view(dtype)[()]

    def pair(self, r: int):
        """A 64-bit register pair as a uint64 array (RZ pairs read as zero)."""
        if r == RZ:
            return U64(0)
        out = np.empty(self.lanes, U64)
        halves = out.view(U32).reshape(-1, 2)          # little-endian: the low word first
        halves[:, 0] = self.R[self.row(r)]
        halves[:, 1] = self.R[self.row(r + 1)]
        return out

    def b64(self, inst: Instruction):
        """A reader of operand B as a 64-bit value: a register pair, two constant words or a sign-extended immediate."""
        b = inst.b
        if isinstance(b, Reg):
            return lambda: self.pair(b.index)
        if isinstance(b, Const):
            value = U64(self.constant(b.offset) | self.constant(b.offset + 4) << 32)
        else:
            value = U64(inst.simm & 0xFFFFFFFFFFFFFFFF)
        return lambda: value

    def write_pair(self, r: int, value: np.ndarray, mask: Mask) -> None:
        value = np.ascontiguousarray(np.broadcast_to(np.asarray(value).astype(U64, copy=False), self.lanes))
        halves = value.view(U32).reshape(-1, 2)
        write(self.R[self.dest(r)], halves[:, 0], mask)
        if r != RZ:
            write(self.R[self.dest(r + 1)], halves[:, 1], mask)

    @staticmethod
    def modifier(inst: Instruction, operand: str, dtype):
        """The function applying operand's |x| and -x flags (absolute value first), or None."""
        absolute, negate = operand in inst.abs_, operand in inst.neg
        if dtype in (F32, F64):
            if absolute:
                return (lambda x: -np.abs(x)) if negate else np.abs
            return np.negative if negate else None
        return (lambda x: dtype(0) - x) if negate else None

    def operands(self, inst: Instruction, view: np.ndarray, names: str) -> list:
        """Readers of the sources in `names` (of 'abc') through `view`, modifiers applied; constants folded."""
        dtype = view.dtype.type
        readers = []
        for name in names:
            if name == "b":
                x = self.b32(inst, view, dtype)
            else:
                x = view[self.row(inst.ra if name == "a" else inst.rc)]
            fn = self.modifier(inst, name, dtype)
            if isinstance(x, np.generic):
                value = fn(x) if fn else x
                readers.append(lambda value=value: value)
            elif fn:
                readers.append(lambda x=x, fn=fn: fn(x))
            else:
                readers.append(lambda x=x: x)
        return readers

    def elementwise(self, inst: Instruction, view: np.ndarray, fn) -> Executor:
        """The executor of d = fn(a, b), the operands read through `view`."""
        d = self.R[self.dest(inst.rd)].view(view.dtype)
        a, b = self.operands(inst, view, "ab")

        def execute(mask: Mask) -> None:
            if mask is None:
                fn(a(), b(), out=d)
            else:
                np.copyto(d, fn(a(), b()), where=mask)
        return execute
