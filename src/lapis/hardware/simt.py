"""Layer 0: the SIMT core: executes decoded machine code for a batch of resident thread blocks at once.

Every register is a numpy array over all lanes in flight (every thread of the resident
blocks), and each instruction is one numpy operation under an active-lane mask: there is
no loop over threads. Lanes that are at different program counters form groups; the group
with the lowest PC runs next, and groups that reach the same PC merge. Because the compiler
lays code out in structured order (join points after both arms of an `if`, loop exits after
the loop), this reconverges exactly where a mask stack would (the "thread frontier" scheme
of Diamos et al., MICRO 2011). A barrier runs when its group holds every live lane of each
block it touches; otherwise it is a barrier under divergence, which faults.

Warp-level instructions (SHFL, VOTE, HMMA) see lanes grouped into warps of the profile's
size; so do the counters (coalescing into 32-byte sectors, shared-memory bank conflicts,
active lanes per warp instruction). Memory accesses also feed the L2 model (`caches.py`).

Simplifications, on purpose: FFMA rounds the product and the sum separately (numpy has no
fused float32 multiply-add); denormals are kept; instruction latencies do not delay
execution here (they feed the performance model through the counters); memory is
sequentially consistent (each instruction completes before the next), so MEMBAR orders
nothing that is not already ordered.
"""

from dataclasses import dataclass, field

import numpy as np

from lapis.hardware import atomics
from lapis.hardware.caches import L2Cache, shared_wavefronts
from lapis.hardware.memory import PhysicalMemory
from lapis.hardware.mmu import MemoryFault, Mmu
from lapis.hardware.numerics import float_to_format, format_to_float, pack_halves, split_halves
from lapis.hardware.profiles import DeviceProfile
from lapis.isa import INSTRUCTION_BYTES, OPCODES, PT, RZ, Const, Imm, Instruction, Reg, format_instruction
from lapis.isa import SpecialRegister as SR

U32, I32, F32, U64, I64, F64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64
_MEM_BYTES = {"": 4, "U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}
SECTOR_BITS = 40          # a physical sector number fits in 40 bits (32 TiB), below the warp number
MMA_GROUP = 32            # HMMA works on groups of 32 lanes (two per 64-wide wavefront)


def _mma_layout():
    """Flat matrix positions of each (lane, register, half) of the m16n8k16 fragments, as in PTX's mma."""
    lane = np.arange(MMA_GROUP)[:, None, None]
    g, t = lane >> 2, lane & 3
    reg4, reg2, half = np.arange(4)[None, :, None], np.arange(2)[None, :, None], np.arange(2)[None, None, :]
    a = (g + 8 * (reg4 & 1)) * 16 + 2 * t + 8 * (reg4 >> 1) + half            # A: 16x16, row-major
    b = (2 * t + 8 * reg2 + half) * 8 + g                                     # B: 16(k) x 8(n)
    cd = ((g + 8 * (reg4 >> 1)) * 8 + 2 * t + (reg4 & 1))[:, :, 0]            # C, D: 16x8 float32
    return a.reshape(-1), b.reshape(-1), cd.reshape(-1)


_MMA_A, _MMA_B, _MMA_CD = _mma_layout()


class KernelFault(Exception):
    """A kernel stopped on an error; names the instruction and, for memory, the address."""

    def __init__(self, reason: str, pc: int, instruction: str, address: int | None = None):
        where = f" at address {address:#x}" if address is not None else ""
        super().__init__(f"{reason}{where} (instruction /*{pc:04x}*/ {instruction})")
        self.reason, self.pc, self.instruction, self.address = reason, pc, instruction, address


@dataclass
class Counters:
    """What executing a kernel counted, per program counter and in total."""
    warp_instructions: list[int]
    thread_instructions: list[int]
    flops_by_precision: dict[str, int] = field(default_factory=dict)   # fp32, fp64, fp16 (packed), matrix
    warp_instructions_by_pipe: dict[str, int] = field(default_factory=dict)
    global_bytes: int = 0          # bytes requested by global loads, stores and atomics
    global_sectors: int = 0        # 32-byte sectors those requests touched after coalescing (L2 requests)
    l2_misses: int = 0             # sectors the L2 did not hold
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

    @property
    def flops(self) -> int:
        return sum(self.flops_by_precision.values())

    @property
    def l2_hits(self) -> int:
        return self.global_sectors - self.l2_misses

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
        return cls([0] * n, [0] * n)

    @property
    def total_warp_instructions(self) -> int:
        return sum(self.warp_instructions)

    @property
    def total_thread_instructions(self) -> int:
        return sum(self.thread_instructions)


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


class ResidentBlocks:
    """The state of `nblocks` resident thread blocks executing together (a batch of the grid)."""

    def __init__(self, core: "SimtCore", d: Dispatch, nblocks: int):
        self.core, self.d = core, d
        self.tpb = d.block[0] * d.block[1] * d.block[2]
        self.nblocks = nblocks
        L = self.lanes = nblocks * self.tpb
        # Row `registers` reads as RZ; the last row is a sink for writes to RZ.
        self.R = core.storage("registers", (d.registers + 2, L), U32)
        self.F, self.S = self.R.view(F32), self.R.view(I32)
        self.P = core.storage("predicates", (8, L), bool)
        self.smem_words = -(-d.shared_bytes // 8) * 2       # 8-byte aligned per block, for 64-bit atomics
        self.smem = core.storage("shared", (max(2, nblocks * self.smem_words),), U32)
        self.smem8, self.smem64 = self.smem.view(np.uint8), self.smem.view(U64)
        self.local = core.storage("local", (max(2, -(-d.local_bytes // 4) * L),), U32)   # word w of lane l: w*L + l
        self.local8 = self.local.view(np.uint8)
        ws = core.warp_size
        self.warps_per_block = -(-self.tpb // ws)
        self.warp_aligned = self.tpb % ws == 0
        self.lane_ids = np.arange(L, dtype=np.int64)
        t = self.lane_ids % self.tpb
        self.lane_block = self.lane_ids // self.tpb
        self.smem_base = self.lane_block * self.smem_words
        # Warps: lane `lane_in_warp` of a warp of `warp_len` lanes whose lane 0 is lane `warp_base`.
        self.lane_in_warp = t % ws
        self.warp_base = self.lane_ids - self.lane_in_warp
        self.warp_len = np.minimum(ws, self.tpb - t // ws * ws)
        self.warp_starts = np.flatnonzero(self.lane_in_warp == 0)
        self.lane_warp = np.cumsum(self.lane_in_warp == 0) - 1
        self.padded_lane = self.lane_block * (self.warps_per_block * ws) + t   # position in whole warps
        bx, by, _ = d.block
        self.sregs = np.zeros((len(SR), L), U32)      # a row per special register; the block's set in `start`
        self.sregs[SR.TID_X], self.sregs[SR.TID_Y], self.sregs[SR.TID_Z] = t % bx, t // bx % by, t // (bx * by)
        self.sregs[SR.LANEID], self.sregs[SR.WARPID] = self.lane_in_warp, t // ws
        self.executors: list = [None] * len(d.program)   # each instruction's closure, made when it first runs
        # Shared-memory address registers and HMMA operands: their per-lane word indices and decoded
        # fragments are cached until the register is written again (`bumps[pc]` lists the tracked rows
        # instruction pc writes), so a fragment used by several HMMAs is unpacked once.
        tracked = {self._row(i.ra) for i in d.program if i.op in ("LDS", "STS") and i.ra != RZ}
        tracked |= {self._row(first + k) for i in d.program if i.op == "HMMA"
                    for first, n in ((i.ra, 4), (i.b.index, 2)) if first != RZ for k in range(n)}
        self.version = [0] * (d.registers + 2)
        self.bumps = [tuple(self._row(i.rd + k) for k in range(4) if i.rd + k < d.registers
                            and self._row(i.rd + k) in tracked) if "Rd" in i.opcode.operands and i.rd != RZ else ()
                      for i in d.program]
        self.addr_cache: dict[int, tuple] = {}
        self.bank_cache: dict[tuple, tuple] = {}
        self.fragment_cache: dict[tuple, tuple] = {}

    def start(self, first_block: int) -> None:
        """Reset the state for blocks first_block .. first_block + nblocks - 1."""
        self.R.fill(0)
        self.P.fill(False)
        self.P[PT] = True
        self.smem.fill(0)
        gx, gy, _ = self.d.grid
        b = first_block + self.lane_block
        self.sregs[SR.CTAID_X], self.sregs[SR.CTAID_Y], self.sregs[SR.CTAID_Z] = b % gx, b // gx % gy, b // (gx * gy)
        self.sregs[SR.SMID] = b % self.core.profile.compute_units     # blocks go round-robin to the units
        self.local.fill(0)
        self.exited = np.zeros(self.lanes, bool)
        self.addr_cache.clear()
        self.bank_cache.clear()
        self.fragment_cache.clear()

    # -- operand access ------------------------------------------------------------------------
    def _row(self, r: int) -> int:
        if r == RZ:
            return self.d.registers
        if r >= self.d.registers:
            raise ValueError(f"uses R{r} but the kernel declares {self.d.registers} registers")
        return r

    def _dst(self, r: int) -> int:
        return self.d.registers + 1 if r == RZ else self._row(r)

    def _cword(self, offset: int) -> int:
        return int(self.d.cbank[offset // 4]) if offset // 4 < len(self.d.cbank) else 0

    def _b32(self, inst: Instruction, view: np.ndarray, dtype):
        """Operand B as an array row or a scalar of `dtype`."""
        b = inst.b
        if isinstance(b, Reg):
            return view[self._row(b.index)]
        bits = b.bits if isinstance(b, Imm) else self._cword(b.offset)
        return np.array(bits, U32).view(dtype)[()]

    def _pair(self, r: int):
        """A 64-bit register pair as a uint64 array (RZ pairs read as zero)."""
        if r == RZ:
            return U64(0)
        out = np.empty(self.lanes, U64)
        halves = out.view(U32).reshape(-1, 2)          # little-endian: the low word first
        halves[:, 0] = self.R[self._row(r)]
        halves[:, 1] = self.R[self._row(r + 1)]
        return out

    def _b64(self, inst: Instruction):
        b = inst.b
        if isinstance(b, Reg):
            return lambda: self._pair(b.index)
        if isinstance(b, Const):
            value = U64(self._cword(b.offset) | self._cword(b.offset + 4) << 32)
        else:   # a 32-bit immediate, sign-extended
            value = U64(inst.simm & 0xFFFFFFFFFFFFFFFF)
        return lambda: value

    def _write_pair(self, r: int, value: np.ndarray, mask) -> None:
        value = np.ascontiguousarray(np.broadcast_to(np.asarray(value).astype(U64, copy=False), self.lanes))
        halves = value.view(U32).reshape(-1, 2)
        self._write(self.R[self._dst(r)], halves[:, 0], mask)
        if r != RZ:
            self._write(self.R[self._dst(r + 1)], halves[:, 1], mask)

    @staticmethod
    def _write(dst: np.ndarray, value, mask) -> None:
        if mask is None:
            dst[...] = value
        else:
            np.copyto(dst, value, where=mask, casting="unsafe")

    # -- instruction semantics -----------------------------------------------------------------
    def _bind(self, pc: int, inst: Instruction):
        """A function mask -> None that executes `inst` for the lanes in mask."""
        try:
            fn = getattr(self, "_op_" + inst.op)(inst, pc)
        except ValueError as e:
            address = pc * INSTRUCTION_BYTES
            raise KernelFault(str(e), address, format_instruction(inst, address)) from None
        if inst.guard == PT and not inst.guard_neg:
            return fn
        g, neg = self.P[inst.guard], inst.guard_neg

        def guarded(mask):
            active = ~g if neg else g.copy()
            if mask is not None:
                active &= mask
            if active.any():
                fn(active)
        return guarded

    @staticmethod
    def _modifier(inst: Instruction, operand: str, dtype):
        """The function applying operand's |x| and -x flags (absolute value first), or None."""
        absolute, negate = operand in inst.abs_, operand in inst.neg
        if dtype in (F32, F64):
            if absolute:
                return (lambda x: -np.abs(x)) if negate else np.abs
            return np.negative if negate else None
        return (lambda x: dtype(0) - x) if negate else None

    def _operands(self, inst, view, names: str):
        """Operand readers for the sources in `names` (of 'abc'), modifiers applied; constants folded."""
        dtype = view.dtype.type
        readers = []
        for name in names:
            if name == "b":
                x = self._b32(inst, view, dtype)
            else:
                x = view[self._row(inst.ra if name == "a" else inst.rc)]
            fn = self._modifier(inst, name, dtype)
            if isinstance(x, np.generic):
                value = fn(x) if fn else x
                readers.append(lambda value=value: value)
            elif fn:
                readers.append(lambda x=x, fn=fn: fn(x))
            else:
                readers.append(lambda x=x: x)
        return readers

    def _arith(self, inst, view, fn):
        d = self.R[self._dst(inst.rd)].view(view.dtype)
        a, b = self._operands(inst, view, "ab")

        def op(mask):
            if mask is None:
                fn(a(), b(), out=d)
            else:
                np.copyto(d, fn(a(), b()), where=mask)
        return op

    def _count_flops(self, pc: int, precision: str, per_thread: int) -> None:
        self.core.flop_kind[pc] = (precision, per_thread)

    def _op_NOP(self, inst, pc):
        return lambda mask: None

    def _op_MOV(self, inst, pc):
        d, b = self.R[self._dst(inst.rd)], self._b32(inst, self.R, U32)
        return lambda mask: self._write(d, b, mask)

    def _op_S2R(self, inst, pc):
        d, src = self.R[self._dst(inst.rd)], self.sregs[inst.b.bits]
        if inst.b.bits == SR.CLOCKLO:
            return lambda mask: self._write(d, U32(self.core.counters.steps & 0xFFFFFFFF), mask)
        return lambda mask: self._write(d, src, mask)

    def _op_LDC(self, inst, pc):
        lo = self._cword(inst.b.offset)
        if inst.mod("w") == "64":
            value = U64(lo | self._cword(inst.b.offset + 4) << 32)
            return lambda mask: self._write_pair(inst.rd, np.full(self.lanes, value), mask)
        d = self.R[self._dst(inst.rd)]
        return lambda mask: self._write(d, U32(lo), mask)

    def _op_SEL(self, inst, pc):
        d, a, b = self.R[self._dst(inst.rd)], self.R[self._row(inst.ra)], self._b32(inst, self.R, U32)
        p, neg = self.P[inst.ps], inst.ps_neg
        return lambda mask: self._write(d, np.where(~p if neg else p, a, b), mask)

    def _op_IADD(self, inst, pc):
        if inst.mod("w") == "64":
            a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
            na, nb = "a" in inst.neg, "b" in inst.neg
            return lambda mask: self._write_pair(
                inst.rd, (U64(0) - a() if na else a()) + (U64(0) - b() if nb else b()), mask)
        return self._arith(inst, self.R, np.add)

    def _op_IMUL(self, inst, pc):
        if inst.mod("w") == "64":
            a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
            return lambda mask: self._write_pair(inst.rd, a() * b(), mask)
        return self._arith(inst, self.R, np.multiply)

    def _op_IMAD(self, inst, pc):
        w = inst.mod("w")
        negc = "c" in inst.neg
        if w == "":
            d, a, c = self.R[self._dst(inst.rd)], self.R[self._row(inst.ra)], self.R[self._row(inst.rc)]
            b = self._b32(inst, self.R, U32)
            return lambda mask: self._write(d, a * b + (U32(0) - c if negc else c), mask)
        c = lambda: self._pair(inst.rc)   # noqa: E731
        if w == "WIDE":
            a, b = self.S[self._row(inst.ra)], self._b32(inst, self.S, I32)
            return lambda mask: self._write_pair(
                inst.rd, (a.astype(I64) * np.asarray(b).astype(I64)).astype(U64) + (U64(0) - c() if negc else c()),
                mask)
        a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
        return lambda mask: self._write_pair(inst.rd, a() * b() + (U64(0) - c() if negc else c()), mask)

    def _shift(self, inst, fn64, fn32):
        if inst.mod("w") == "64":
            a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
            return lambda mask: self._write_pair(inst.rd, fn64(a(), np.minimum(b() & U64(0xFFFFFFFF), U64(64))), mask)
        d, b = self.R[self._dst(inst.rd)], self._b32(inst, self.R, U32)
        return lambda mask: self._write(d, fn32(np.minimum(b, U32(32))), mask)

    def _op_SHL(self, inst, pc):
        a = self.R[self._row(inst.ra)]
        return self._shift(inst, lambda x, s: np.where(s >= 64, U64(0), x << np.minimum(s, U64(63))),
                           lambda s: np.where(s >= 32, U32(0), a << np.minimum(s, U32(31))))

    def _op_SHR(self, inst, pc):
        signed = inst.mod("t") == "S32"
        a = self.S[self._row(inst.ra)] if signed else self.R[self._row(inst.ra)]
        if signed:
            return self._shift(inst, lambda x, s: (x.view(I64) >> np.minimum(s, U64(63)).astype(I64)).view(U64),
                               lambda s: (a >> np.minimum(s, U32(31)).astype(I32)).view(U32))
        return self._shift(inst, lambda x, s: np.where(s >= 64, U64(0), x >> np.minimum(s, U64(63))),
                           lambda s: np.where(s >= 32, U32(0), a >> np.minimum(s, U32(31))))

    def _op_LOP(self, inst, pc):
        fn = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}[inst.mod("op")]
        if inst.mod("w") == "64":
            a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
            return lambda mask: self._write_pair(inst.rd, fn(a(), b()), mask)
        return self._arith(inst, self.R, fn)

    def _op_IMNMX(self, inst, pc):
        fn = np.minimum if inst.mod("op") == "MIN" else np.maximum
        t = inst.mod("t")
        if t in ("S64", "U64"):
            a, b = (lambda: self._pair(inst.ra)), self._b64(inst)
            dt = I64 if t == "S64" else U64
            return lambda mask: self._write_pair(inst.rd, fn(a().view(dt), np.asarray(b()).view(dt)).view(U64),
                                                 mask)
        return self._arith(inst, self.S if t == "S32" else self.R, fn)

    def _setp(self, inst, a_fn, b_fn, unordered_ne: bool):
        cmp = inst.mod("cmp")
        bop = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}[inst.mod("bop")]
        d, p, pneg = self.P[inst.pd] if inst.pd != PT else np.zeros(self.lanes, bool), self.P[inst.ps], inst.ps_neg
        fn = {"LT": np.less, "EQ": np.equal, "LE": np.less_equal, "GT": np.greater, "NE": np.not_equal,
              "GE": np.greater_equal}.get(cmp)

        plain = inst.ps == PT and not pneg and inst.mod("bop") == "AND"     # pd = a cmp b

        def op(mask):
            if cmp in ("F", "T"):
                r = np.full(self.lanes, cmp == "T")
            elif plain and mask is None:
                fn(a_fn(), b_fn(), out=d)
                return
            else:
                r = fn(a_fn(), b_fn())
            if not plain:
                r = bop(r, ~p if pneg else p)
            self._write(d, r, mask)
        return op

    def _op_ISETP(self, inst, pc):
        t = inst.mod("t")
        if t in ("S64", "U64"):
            dt = I64 if t == "S64" else U64
            b = self._b64(inst)
            return self._setp(inst, lambda: self._pair(inst.ra).view(dt), lambda: np.asarray(b()).view(dt), False)
        view = self.S if t == "S32" else self.R
        a, b = view[self._row(inst.ra)], self._b32(inst, view, view.dtype)
        return self._setp(inst, lambda: a, lambda: b, False)

    def _op_I2I(self, inst, pc):
        to, fr = inst.mod("to"), inst.mod("fr")
        if fr == "S64":      # truncate to the low word
            b = self._b64(inst)
            d = self.R[self._dst(inst.rd)]
            return lambda mask: self._write(d, (np.asarray(b()) & U64(0xFFFFFFFF)).astype(U32), mask)
        x = self._b32(inst, self.S, I32) if fr == "S32" else self._b32(inst, self.R, U32)
        if to == "S64":      # sign- or zero-extend into a pair
            return lambda mask: self._write_pair(
                inst.rd, np.broadcast_to(np.asarray(x).astype(I64), (self.lanes,)).view(U64), mask)
        d = self.R[self._dst(inst.rd)]
        return lambda mask: self._write(d, np.asarray(x).view(U32), mask)

    def _op_FADD(self, inst, pc):
        self._count_flops(pc, "fp32", 1)
        return self._arith(inst, self.F, np.add)

    def _op_FMUL(self, inst, pc):
        self._count_flops(pc, "fp32", 1)
        return self._arith(inst, self.F, np.multiply)

    def _op_FFMA(self, inst, pc):
        self._count_flops(pc, "fp32", 2)
        d = self.F[self._dst(inst.rd)]
        a, b, c = self._operands(inst, self.F, "abc")
        tmp = np.empty(self.lanes, F32)

        def op(mask):
            np.multiply(a(), b(), out=tmp)
            if mask is None:
                np.add(tmp, c(), out=d)
            else:
                np.add(tmp, c(), out=tmp)
                np.copyto(d, tmp, where=mask)
        return op

    def _op_FMNMX(self, inst, pc):
        return self._arith(inst, self.F, np.fmin if inst.mod("op") == "MIN" else np.fmax)

    def _op_FSETP(self, inst, pc):
        a, b = self._operands(inst, self.F, "ab")
        return self._setp(inst, a, b, True)

    def _f64_operands(self, inst, names: str):
        """Readers of float64 register-pair (or constant) sources, modifiers applied."""
        readers = []
        for name in names:
            raw = self._b64(inst) if name == "b" else (lambda r=inst.ra if name == "a" else inst.rc: self._pair(r))
            fn = self._modifier(inst, name, F64)
            readers.append(lambda raw=raw, fn=fn: fn(np.asarray(raw()).view(F64)) if fn
                           else np.asarray(raw()).view(F64))
        return readers

    def _dbin(self, inst, pc, fn, flops):
        if flops:
            self._count_flops(pc, "fp64", flops)
        a, b = self._f64_operands(inst, "ab")
        return lambda mask: self._write_pair(inst.rd, np.broadcast_to(fn(a(), b()), self.lanes).view(U64), mask)

    def _op_DADD(self, inst, pc):
        return self._dbin(inst, pc, np.add, 1)

    def _op_DMUL(self, inst, pc):
        return self._dbin(inst, pc, np.multiply, 1)

    def _op_DMNMX(self, inst, pc):
        return self._dbin(inst, pc, np.fmin if inst.mod("op") == "MIN" else np.fmax, 0)

    def _op_DFMA(self, inst, pc):
        self._count_flops(pc, "fp64", 2)
        a, b, c = self._f64_operands(inst, "abc")
        return lambda mask: self._write_pair(inst.rd, np.broadcast_to(a() * b() + c(), self.lanes).view(U64), mask)

    def _op_DSETP(self, inst, pc):
        return self._setp(inst, *self._f64_operands(inst, "ab"), True)

    def _int_source(self, inst, fr: str):
        """A reader of operand B as an integer array of type fr (S32, U32 or S64)."""
        if fr == "S64":
            b = self._b64(inst)
            return lambda: np.asarray(b()).view(I64)
        x = self._b32(inst, self.S if fr == "S32" else self.R, I32 if fr == "S32" else U32)
        return lambda: x

    def _float_source(self, inst, fr: str):
        """A reader of operand B, stored in float format fr, as float64."""
        if fr == "F64":
            b = self._b64(inst)
            return lambda: format_to_float(b(), "F64")
        x = self._b32(inst, self.R, U32)
        return lambda: format_to_float(x, fr)

    def _write_format(self, inst, to: str, value, mask) -> None:
        """Write float64 values rounded to format `to` (a pair for F64, a register otherwise)."""
        bits = np.broadcast_to(float_to_format(value, to), self.lanes)
        if to == "F64":
            self._write_pair(inst.rd, bits, mask)
        else:
            self._write(self.R[self._dst(inst.rd)], bits, mask)

    def _op_IABS(self, inst, pc):
        if inst.mod("w") == "64":
            b = self._b64(inst)
            return lambda mask: self._write_pair(
                inst.rd, np.broadcast_to(np.abs(np.asarray(b()).view(I64)), self.lanes).view(U64), mask)
        d, b = self.S[self._dst(inst.rd)], self._b32(inst, self.S, I32)
        return lambda mask: self._write(d, np.abs(b), mask)

    def _op_I2F(self, inst, pc):
        to, src = inst.mod("to"), self._int_source(inst, inst.mod("fr"))
        if to == "F32":      # straight from the integer: one rounding, also for 64-bit values
            d = self.F[self._dst(inst.rd)]
            return lambda mask: self._write(d, np.asarray(src()).astype(F32), mask)
        return lambda mask: self._write_format(inst, to, np.asarray(src()).astype(F64), mask)

    def _op_F2I(self, inst, pc):
        to, rnd = inst.mod("to"), inst.mod("rnd")
        src = self._float_source(inst, inst.mod("fr"))
        round_fn = {"TRUNC": np.trunc, "FLOOR": np.floor, "CEIL": np.ceil, "RN": np.rint}[rnd]
        dt = {"S32": I32, "S64": I64, "U32": U32}[to]
        info = np.iinfo(dt)

        def convert():
            x = round_fn(src())
            x = np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min)
            return np.broadcast_to(np.clip(x, info.min, info.max).astype(dt), self.lanes)
        if to == "S64":
            return lambda mask: self._write_pair(inst.rd, convert().view(U64), mask)
        d = self.R[self._dst(inst.rd)]
        return lambda mask: self._write(d, convert().view(U32), mask)

    def _op_F2F(self, inst, pc):
        to, src = inst.mod("to"), self._float_source(inst, inst.mod("fr"))
        return lambda mask: self._write_format(inst, to, src(), mask)

    def _op_FRND(self, inst, pc):
        fn = {"RN": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc}[inst.mod("rnd")]
        if inst.mod("w") == "F64":
            b = self._float_source(inst, "F64")
            return lambda mask: self._write_format(inst, "F64", fn(b()), mask)
        d, b = self.F[self._dst(inst.rd)], self._b32(inst, self.F, F32)
        return lambda mask: self._write(d, fn(b), mask)

    def _half(self, inst, pc, fn, sources: str, flops: int):
        """A packed half-precision instruction: fn over float64 halves, rounded once to the format."""
        t = inst.mod("t")
        if flops:
            self._count_flops(pc, "fp16", flops)
        d = self.R[self._dst(inst.rd)]
        regs = {"a": self.R[self._row(inst.ra)], "b": self._b32(inst, self.R, U32),
                "c": self.R[self._row(inst.rc)]}
        srcs = [(regs[x], U32(0x80008000) if x in inst.neg else U32(0)) for x in sources]

        def op(mask):
            halves = [split_halves(x ^ sign, t) for x, sign in srcs]
            lo = fn(*(h[0] for h in halves))
            hi = fn(*(h[1] for h in halves))
            self._write(d, pack_halves(lo, hi, t), mask)
        return op

    def _op_HADD2(self, inst, pc):
        return self._half(inst, pc, np.add, "ab", 2)

    def _op_HMUL2(self, inst, pc):
        return self._half(inst, pc, np.multiply, "ab", 2)

    def _op_HFMA2(self, inst, pc):
        return self._half(inst, pc, lambda a, b, c: a * b + c, "abc", 4)

    def _op_HMNMX2(self, inst, pc):
        return self._half(inst, pc, np.fmin if inst.mod("op") == "MIN" else np.fmax, "ab", 0)

    def _op_MUFU(self, inst, pc):
        fn = {"RCP": lambda x: F32(1) / x, "RSQ": lambda x: F32(1) / np.sqrt(x), "SQRT": np.sqrt,
              "EX2": np.exp2, "LG2": np.log2, "SIN": np.sin, "COS": np.cos}[inst.mod("fn")]
        d, b = self.F[self._dst(inst.rd)], self._b32(inst, self.F, F32)
        return lambda mask: self._write(d, np.asarray(fn(b), F32), mask)

    def _op_PLOP(self, inst, pc):
        fn = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}[inst.mod("op")]
        d = self.P[inst.pd] if inst.pd != PT else np.zeros(self.lanes, bool)
        a, an, b, bn = self.P[inst.ps], inst.ps_neg, self.P[inst.pq], inst.pq_neg
        return lambda mask: self._write(d, fn(~a if an else a, ~b if bn else b), mask)

    # -- memory --------------------------------------------------------------------------------
    def _fault(self, pc: int, reason: str, address: int | None = None) -> KernelFault:
        inst = self.d.program[pc]
        return KernelFault(reason, pc * INSTRUCTION_BYTES, format_instruction(inst, pc * INSTRUCTION_BYTES), address)

    def _global_access(self, pc, inst, mask, nbytes, write, atomic=False):
        """Translate the active lanes' addresses and count the traffic; returns (physical addresses, memory)."""
        base = self._pair(inst.ra)
        if isinstance(base, np.generic):
            base = np.full(self.lanes, base)
        off = inst.simm
        va = base + U64(off) if off >= 0 else base - U64(-off)
        if mask is not None:
            va = va[mask]
        if va.size == 0:
            return None
        misaligned = (va & U64(nbytes - 1)) != 0 if nbytes > 1 else None
        if misaligned is not None and misaligned.any():
            raise self._fault(pc, f"misaligned {nbytes}-byte access", int(va[np.flatnonzero(misaligned)[0]]))
        try:
            pa, system = self.core.mmu.translate(self.d.vmid, va, nbytes, write)
        except MemoryFault as e:
            raise self._fault(pc, f"illegal memory access: {e.reason}" + (" (write)" if write else " (read)"),
                              e.va) from None
        if not isinstance(system, bool):
            raise self._fault(pc, "one instruction touched both device and host memory", int(va[0]))
        core = self.core
        c = core.counters
        c.global_bytes += va.size * nbytes
        if atomic:
            c.atomic_lanes += va.size
        sector = pa.astype(U64) >> U64(5)
        # The distinct sectors of each warp: (warp, sector) keys, sorted only when lanes do not already
        # ask in address order (a warp whose lanes run down columns), then one per run of equal keys.
        warp = self.padded_lane if mask is None else self.padded_lane[mask]
        key = (warp // core.warp_size).astype(U64) << U64(SECTOR_BITS) | sector
        if (key[1:] < key[:-1]).any():
            key = np.sort(key)
        starts = np.ones(key.size, bool)
        np.not_equal(key[1:], key[:-1], out=starts[1:])
        touched = key[starts] & U64((1 << SECTOR_BITS) - 1)
        c.global_sectors += touched.size
        if system:
            c.pcie_bytes += va.size * nbytes
        else:
            misses, dirtied = core.l2.access(touched, write)
            c.l2_misses += misses
            if not write or atomic:              # a store overwrites whole words: nothing to fetch
                c.dram_read_bytes += misses * 32
            c.dram_write_bytes += dirtied * 32
        return pa.astype(I64), core.sysmem if system else core.vram

    @staticmethod
    def _gather(words: np.ndarray, octets: np.ndarray, word: np.ndarray, byte: np.ndarray | None, width: str,
                stride: int = 1) -> list[np.ndarray]:
        """Load `width` from word arrays: register values (one per 32 bits) for the given word indices.

        `byte` is the byte within the word for sub-word widths; a lane's later words sit `stride` apart.
        """
        nbytes = _MEM_BYTES[width]
        if nbytes >= 4:
            return [words[word + i * stride] if i else words[word] for i in range(nbytes // 4)]
        at = word * 4 + byte
        raw = octets[at].astype(U32)
        if nbytes == 2:
            raw |= octets[at + 1].astype(U32) << U32(8)
        if width.startswith("S"):
            raw = (raw.view(I32) << (32 - 8 * nbytes) >> (32 - 8 * nbytes)).view(U32)
        return [raw]

    @staticmethod
    def _scatter(words: np.ndarray, octets: np.ndarray, word: np.ndarray, byte: np.ndarray | None, width: str,
                 values: list[np.ndarray], stride: int = 1) -> None:
        nbytes = _MEM_BYTES[width]
        if nbytes >= 4:
            for i, v in enumerate(values):
                words[word + i * stride if i else word] = v
            return
        at = word * 4 + byte
        octets[at] = (values[0] & U32(0xFF)).astype(np.uint8)
        if nbytes == 2:
            octets[at + 1] = (values[0] >> U32(8) & U32(0xFF)).astype(np.uint8)

    def _load_rows(self, inst, width):
        words = max(1, _MEM_BYTES[width] // 4)
        return [self.R[self._dst(inst.rd + i if inst.rd != RZ else RZ)] for i in range(words)]

    def _store_rows(self, inst, width):
        words = max(1, _MEM_BYTES[width] // 4)
        return [self.R[self._row(inst.rc + i if inst.rc != RZ else RZ)] for i in range(words)]

    @staticmethod
    def _put(dsts, values, mask) -> None:
        for dst, v in zip(dsts, values, strict=True):
            if mask is None:
                dst[...] = v
            else:
                dst[mask] = v

    def _op_LDG(self, inst, pc):
        width = inst.mod("w")
        nbytes, dsts = _MEM_BYTES[width], self._load_rows(inst, width)

        def op(mask):
            got = self._global_access(pc, inst, mask, nbytes, False)
            if got is not None:
                pa, mem = got
                self._put(dsts, self._gather(mem.u32, mem.u8, pa >> 2, pa & 3, width), mask)
        return op

    def _op_STG(self, inst, pc):
        width = inst.mod("w")
        nbytes, srcs = _MEM_BYTES[width], self._store_rows(inst, width)

        def op(mask):
            got = self._global_access(pc, inst, mask, nbytes, True)
            if got is not None:
                pa, mem = got
                self._scatter(mem.u32, mem.u8, pa >> 2, pa & 3, width, [s if mask is None else s[mask] for s in srcs])
        return op

    # shared memory --------------------------------------------------------------------------
    def _shared_index(self, pc, inst, mask, nbytes):
        """Word index into the batch's shared memory, and byte within the word, of each active lane."""
        addr = self.R[self._row(inst.ra)]
        off = inst.simm
        a = addr if mask is None else addr[mask]
        if a.size == 0:
            return None
        lo, hi = int(a.min()) + off, int(a.max()) + off
        if lo < 0 or hi + nbytes > self.d.shared_bytes:
            bad = lo if lo < 0 else hi
            raise self._fault(pc, f"shared memory access outside the block's {self.d.shared_bytes} bytes", bad)
        if nbytes > 1 and ((a + U32(off & 0xFFFFFFFF)) & U32(nbytes - 1)).any():
            raise self._fault(pc, f"misaligned {nbytes}-byte shared memory access", lo)
        self.core.counters.shared_bytes += a.size * nbytes
        byte = a.astype(I64) + off
        local_word = byte >> 2
        self._count_banks(local_word, mask, nbytes)
        base = self.smem_base if mask is None else self.smem_base[mask]
        return base + local_word, byte & 3

    def _warp_layout(self, values: np.ndarray, mask) -> np.ndarray:
        """Per-lane values (of the active lanes) as (warps, warp size), -1 where no active lane is."""
        ws = self.core.warp_size
        if mask is None and self.warp_aligned:
            return values.reshape(-1, ws)
        laid = np.full(self.nblocks * self.warps_per_block * ws, -1, I64)
        laid[self.padded_lane if mask is None else self.padded_lane[mask]] = values
        return laid.reshape(-1, ws)

    def _count_banks(self, local_word: np.ndarray, mask, nbytes: int) -> None:
        wavefronts, ideal = shared_wavefronts(self._warp_layout(local_word, mask), max(1, nbytes // 4))
        c = self.core.counters
        c.shared_wavefronts += wavefronts
        c.shared_ideal_wavefronts += ideal

    def _shared_words(self, row: int) -> tuple:
        """(version, per-lane word index into the batch's shared memory, min, max, low four address bits of
        any lane) of R[row]."""
        entry = self.addr_cache.get(row)
        if entry is None or entry[0] != self.version[row]:
            a = self.R[row]
            entry = (self.version[row], self.smem_base + (a >> U32(2)).astype(I64), int(a.min()), int(a.max()),
                     int(np.bitwise_or.reduce(a & U32(15))))
            self.addr_cache[row] = entry
        return entry

    def _banks_of(self, row: int, version: int, words: np.ndarray, per_lane: int) -> tuple[int, int]:
        """Bank-conflict wavefronts of an unmasked access of `per_lane` words through address register `row`.

        Measured on the batch's first block and scaled to all its blocks: every block runs the
        same code, and a shared address that depends on the block is rare (the masked accesses of
        the slow path are measured on every lane). Shifting every lane's address by
        one amount permutes the banks and keeps the conflicts, so a register that advanced
        uniformly (a pointer stepping through a tile) reuses the count.
        """
        cached = self.bank_cache.get((row, per_lane))
        if cached is not None and cached[0] == version:
            return cached[2]
        first = words[:self.warps_per_block * self.core.warp_size if self.warp_aligned else self.tpb]
        if cached is not None:
            delta = first - cached[1]
            if delta.min() == delta.max() and delta[0] % per_lane == 0:
                self.bank_cache[(row, per_lane)] = (version, first, cached[2])
                return cached[2]
        if self.warp_aligned:
            wavefronts, ideal = shared_wavefronts(first.reshape(-1, self.core.warp_size), per_lane)
        else:
            laid = np.full(self.warps_per_block * self.core.warp_size, -1, I64)
            laid[:self.tpb] = first
            wavefronts, ideal = shared_wavefronts(laid.reshape(-1, self.core.warp_size), per_lane)
        counts = (wavefronts * self.nblocks, ideal * self.nblocks)
        self.bank_cache[(row, per_lane)] = (version, first, counts)
        return counts

    def _shared_fast(self, inst, nbytes: int):
        """The word index array and first word for an unmasked, aligned access of 4, 8 or 16 bytes, or
        None to take the slow path."""
        off = inst.simm
        if inst.ra == RZ or nbytes < 4 or off % nbytes:
            return None
        row = self._row(inst.ra)
        version, words, lo, hi, low_bits = self._shared_words(row)
        if low_bits & (nbytes - 1) or lo + off < 0 or hi + off + nbytes > self.d.shared_bytes:
            return None
        c = self.core.counters
        c.shared_bytes += self.lanes * nbytes
        wavefronts, ideal = self._banks_of(row, version, words, nbytes // 4)
        c.shared_wavefronts += wavefronts
        c.shared_ideal_wavefronts += ideal
        return words, off >> 2

    def _op_LDS(self, inst, pc):
        width = inst.mod("w")
        nbytes, dsts = _MEM_BYTES[width], self._load_rows(inst, width)

        def op(mask):
            if mask is None:
                fast = self._shared_fast(inst, nbytes)
                if fast is not None:                                        # bounds checked above
                    for k, dst in enumerate(dsts):
                        np.take(self.smem[fast[1] + k:], fast[0], out=dst, mode="clip")
                    return
            at = self._shared_index(pc, inst, mask, nbytes)
            if at is not None:
                self._put(dsts, self._gather(self.smem, self.smem8, *at, width), mask)
        return op

    def _op_STS(self, inst, pc):
        width = inst.mod("w")
        nbytes, srcs = _MEM_BYTES[width], self._store_rows(inst, width)

        def op(mask):
            if mask is None:
                fast = self._shared_fast(inst, nbytes)
                if fast is not None:                                        # bounds checked above
                    for k, src in enumerate(srcs):
                        self.smem[fast[1] + k:][fast[0]] = src
                    return
            at = self._shared_index(pc, inst, mask, nbytes)
            if at is not None:
                self._scatter(self.smem, self.smem8, *at, width, [s if mask is None else s[mask] for s in srcs])
        return op

    # local memory: private to each thread, interleaved so a warp's same-address access is contiguous
    def _local_index(self, pc, inst, mask, nbytes):
        addr = self.R[self._row(inst.ra)]
        a = (addr if mask is None else addr[mask]).astype(I64) + inst.simm
        if a.size == 0:
            return None
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi + nbytes > self.d.local_bytes:
            raise self._fault(pc, f"local memory access outside the thread's {self.d.local_bytes} bytes",
                              lo if lo < 0 else hi)
        if nbytes > 1 and (a & (nbytes - 1)).any():
            raise self._fault(pc, f"misaligned {nbytes}-byte local memory access", lo)
        self.core.counters.local_bytes += a.size * nbytes
        lanes = self.lane_ids if mask is None else self.lane_ids[mask]
        return (a >> 2) * self.lanes + lanes, a & 3

    def _op_LDL(self, inst, pc):
        width = inst.mod("w")
        nbytes, dsts = _MEM_BYTES[width], self._load_rows(inst, width)

        def op(mask):
            at = self._local_index(pc, inst, mask, nbytes)
            if at is not None:
                self._put(dsts, self._gather(self.local, self.local8, *at, width, self.lanes), mask)
        return op

    def _op_STL(self, inst, pc):
        width = inst.mod("w")
        nbytes, srcs = _MEM_BYTES[width], self._store_rows(inst, width)

        def op(mask):
            at = self._local_index(pc, inst, mask, nbytes)
            if at is not None:
                self._scatter(self.local, self.local8, *at, width, [s if mask is None else s[mask] for s in srcs],
                              self.lanes)
        return op

    # atomics ---------------------------------------------------------------------------------
    def _atomic(self, inst, memory: np.ndarray, index: np.ndarray, mask) -> None:
        """Apply the instruction's atomic at `index` of `memory` for the active lanes; old values to Rd."""
        op, t = inst.mod("op"), inst.mod("t")
        wide = t == "U64"

        def operand(r):
            value = self._pair(r) if wide else self.R[self._row(r)]
            value = np.broadcast_to(value, self.lanes)
            return value if mask is None else value[mask]
        value = operand(inst.rc)
        new = operand(inst.rc + (2 if wide else 1)) if op == "CAS" and inst.rc != RZ else None
        if op == "CAS" and new is None:
            new = np.zeros_like(value)
        old = atomics.apply(memory, index, np.ascontiguousarray(value), op, t, new)
        if inst.rd == RZ:
            return
        if wide:
            self._put([self.R[self._dst(inst.rd)], self.R[self._dst(inst.rd + 1)]],
                      [(old & U64(0xFFFFFFFF)).astype(U32), (old >> U64(32)).astype(U32)], mask)
        else:
            self._put([self.R[self._dst(inst.rd)]], [old], mask)

    def _op_ATOMG(self, inst, pc):
        nbytes = 8 if inst.mod("t") == "U64" else 4

        def op(mask):
            got = self._global_access(pc, inst, mask, nbytes, True, atomic=True)
            if got is not None:
                pa, mem = got
                memory = mem.u64 if nbytes == 8 else mem.u32
                self._atomic(inst, memory, pa >> (3 if nbytes == 8 else 2), mask)
        return op

    def _op_ATOMS(self, inst, pc):
        nbytes = 8 if inst.mod("t") == "U64" else 4

        def op(mask):
            at = self._shared_index(pc, inst, mask, nbytes)
            if at is not None:
                self.core.counters.atomic_lanes += at[0].size
                if nbytes == 8:
                    self._atomic(inst, self.smem64, at[0] >> 1, mask)
                else:
                    self._atomic(inst, self.smem, at[0], mask)
        return op

    def _op_MEMBAR(self, inst, pc):
        return lambda mask: None          # memory here is sequentially consistent: nothing to order

    # warp-level ------------------------------------------------------------------------------
    def _op_SHFL(self, inst, pc):
        mode, ws = inst.mod("mode"), self.core.warp_size
        d, a = self.R[self._dst(inst.rd)], self.R[self._row(inst.ra)]
        b = self._b32(inst, self.R, U32)
        lane = self.lane_in_warp

        def sources():
            x = np.asarray(b).astype(I64)
            src = {"IDX": x & (ws - 1), "UP": lane - x, "DOWN": lane + x, "BFLY": lane ^ x}[mode]
            inside = (src >= 0) & (src < self.warp_len)
            return np.where(inside, self.warp_base + src, self.lane_ids)
        fixed = sources() if isinstance(b, np.generic) else None

        def op(mask):
            self._write(d, a[fixed if fixed is not None else sources()], mask)
        return op

    def _per_warp(self, values: np.ndarray) -> np.ndarray:
        """Sum uint64 lane values over each warp, the result given back to every lane of the warp."""
        ws = self.core.warp_size
        if self.warp_aligned:
            return np.repeat(values.reshape(-1, ws).sum(axis=1, dtype=U64), ws)
        return np.add.reduceat(values, self.warp_starts)[self.lane_warp]

    def _op_VOTE(self, inst, pc):
        mode, ws = inst.mod("mode"), self.core.warp_size
        p, neg = self.P[inst.ps], inst.ps_neg
        bit = U64(1) << self.lane_in_warp.astype(U64)
        pd = self.P[inst.pd] if inst.pd != PT else None
        lo = self.R[self._dst(inst.rd)]
        hi = self.R[self._dst(inst.rd + 1)] if ws > 32 and inst.rd != RZ else None

        def op(mask):
            active = np.ones(self.lanes, bool) if mask is None else mask
            vote = (~p if neg else p) & active
            ballot = self._per_warp(np.where(vote, bit, U64(0)))
            if pd is not None:
                result = ballot != 0 if mode == "ANY" else ballot == self._per_warp(np.where(active, bit, U64(0)))
                self._write(pd, result, mask)
            self._write(lo, (ballot & U64(0xFFFFFFFF)).astype(U32), mask)
            if hi is not None:
                self._write(hi, (ballot >> U64(32)).astype(U32), mask)
        return op

    def _op_HMMA(self, inst, pc):
        t, g = inst.mod("t"), MMA_GROUP
        if self.tpb % g:
            raise ValueError(f"HMMA needs thread blocks of whole {g}-lane groups, not {self.tpb} threads")
        self._count_flops(pc, "matrix", 2 * 16 * 8 * 16 // g)
        groups = self.lanes // g

        def rows(first, n):
            if first == RZ:
                return np.zeros((n, self.lanes), U32)
            return np.stack([self.R[self._row(first + i)] for i in range(n)])
        dsts = [self.R[self._dst(inst.rd + i if inst.rd != RZ else RZ)] for i in range(4)]

        def fragment(regs, count, layout, size):
            """Registers (count, lanes) of packed halves -> (groups, size) float32 matrices."""
            halves = np.stack(split_halves(regs, t), axis=-1).astype(F32)          # (count, lanes, 2)
            flat = np.empty((groups, size), F32)
            flat[:, layout] = halves.transpose(1, 0, 2).reshape(groups, g * count * 2)
            return flat

        def decoded(first, count, layout, size, shape):
            if first == RZ:
                return fragment(rows(first, count), count, layout, size).reshape(shape)
            versions = tuple(self.version[self._row(first + i)] for i in range(count))
            hit = self.fragment_cache.get((first, count, t))
            if hit is not None and hit[0] == versions:
                return hit[1]
            value = fragment(rows(first, count), count, layout, size).reshape(shape)
            self.fragment_cache[(first, count, t)] = (versions, value)
            return value

        def op(mask):
            if mask is not None:
                per_group = mask.reshape(groups, g)
                if (per_group.any(axis=1) != per_group.all(axis=1)).any():
                    raise self._fault(pc, f"HMMA with some lanes of a {g}-lane group inactive (diverged)")
            a = decoded(inst.ra, 4, _MMA_A, 256, (groups, 16, 16))
            b = decoded(inst.b.index, 2, _MMA_B, 128, (groups, 16, 8))
            c = np.empty((groups, 128), F32)
            c[:, _MMA_CD] = rows(inst.rc, 4).view(F32).T.reshape(groups, g * 4)
            out = (np.matmul(a, b) + c.reshape(groups, 16, 8)).reshape(groups, 128)
            values = out[:, _MMA_CD].reshape(self.lanes, 4).T.view(U32)
            for dst, v in zip(dsts, values, strict=True):
                self._write(dst, v, mask)
        return op

    # Control instructions are run by the scheduler in `SimtCore._run_blocks`; these only validate.
    def _op_BRA(self, inst, pc):
        target = inst.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES
        if not 0 <= target < len(self.d.program):
            raise ValueError(f"branch target {target * INSTRUCTION_BYTES:#x} is outside the program")
        return None

    def _op_EXIT(self, inst, pc):
        return None

    def _op_BAR(self, inst, pc):
        return None


class SimtCore:
    """Runs dispatches: splits the grid into batches of resident blocks and executes each."""

    MAX_LANES = 1 << 16        # cap on lanes simulated together, to bound host memory

    def __init__(self, profile: DeviceProfile, mmu: Mmu, vram: PhysicalMemory, sysmem: PhysicalMemory):
        self.profile = profile
        self.warp_size = profile.warp_size
        self.mmu, self.vram, self.sysmem = mmu, vram, sysmem
        self.l2 = L2Cache(profile.l2_bytes)
        self.counters = Counters.for_program(0)
        self.flop_kind: list[tuple[str, int] | None] = []
        self._storage: dict[str, np.ndarray] = {}

    def storage(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A reusable array for the state of resident blocks (the register file, shared and local memory).

        Fresh host pages cost a fault each on first touch, which for a 64K-lane register file is
        milliseconds per launch; keeping the arrays makes later launches start at once. One
        batch runs at a time and `ResidentBlocks.start` clears what it uses, so batches may share them.
        """
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        buf = self._storage.get(name)
        if buf is None or buf.size < nbytes:
            buf = self._storage[name] = np.zeros(max(nbytes, 8), np.uint8)
        return buf[:nbytes].view(dtype).reshape(shape)

    def run(self, d: Dispatch, resident_blocks: int) -> Counters:
        """Execute every block of the grid; `resident_blocks` is how many fit on the device at once."""
        n = len(d.program)
        self.counters = c = Counters.for_program(n)
        self.flop_kind = [None] * n
        total = d.grid[0] * d.grid[1] * d.grid[2]
        tpb = d.block[0] * d.block[1] * d.block[2]
        per_chunk = max(1, min(resident_blocks, self.MAX_LANES // tpb))
        c.waves = -(-total // resident_blocks)
        c.blocks = total
        c.warps_per_block = -(-tpb // self.warp_size)
        kinds = [i.op if i.op in ("BRA", "EXIT", "BAR") else "" for i in d.program]
        targets = [i.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES if i.op == "BRA" else 0
                   for pc, i in enumerate(d.program)]
        batches: dict[int, ResidentBlocks] = {}
        with np.errstate(all="ignore"):        # IEEE arithmetic on a GPU raises no warnings: inf and NaN flow
            for first in range(0, total, per_chunk):
                nblocks = min(per_chunk, total - first)
                if nblocks not in batches:
                    batches[nblocks] = ResidentBlocks(self, d, nblocks)
                blocks = batches[nblocks]
                blocks.start(first)
                self._run_blocks(blocks, kinds, targets)
        for pc, inst in enumerate(d.program):
            pipe = OPCODES[inst.op].pipe
            c.warp_instructions_by_pipe[pipe] = c.warp_instructions_by_pipe.get(pipe, 0) + c.warp_instructions[pc]
            if self.flop_kind[pc]:
                precision, per_thread = self.flop_kind[pc]
                c.flops_by_precision[precision] = (c.flops_by_precision.get(precision, 0)
                                                   + per_thread * c.thread_instructions[pc])
        return c

    def _mask_stats(self, mask, blocks: ResidentBlocks) -> tuple[int, int]:
        if mask is None:
            return blocks.lanes, blocks.nblocks * blocks.warps_per_block
        lanes = int(np.count_nonzero(mask))
        if blocks.warp_aligned:
            warps = int(np.count_nonzero(mask.reshape(-1, self.warp_size).any(axis=1)))
        else:
            warps = int(np.count_nonzero(np.logical_or.reduceat(mask, blocks.warp_starts)))
        return lanes, warps

    def _run_blocks(self, blocks: ResidentBlocks, kinds: list[str], targets: list[int]) -> None:
        c, executors, program = self.counters, blocks.executors, blocks.d.program
        bumps, version = blocks.bumps, blocks.version
        budget = blocks.d.watchdog_steps
        groups: dict[int, np.ndarray | None] = {0: None}
        steps = 0
        while groups:
            pc = min(groups)
            mask = groups.pop(pc)
            lanes, warps = self._mask_stats(mask, blocks)
            while True:
                steps += 1
                if steps > budget:
                    raise blocks._fault(pc, f"watchdog: more than {budget} instruction steps in one batch of blocks "
                                          "(an infinite loop?); raise LAPIS_WATCHDOG_STEPS if the kernel is just long")
                c.warp_instructions[pc] += warps
                c.thread_instructions[pc] += lanes
                kind = kinds[pc]
                if not kind:
                    op = executors[pc]
                    if op is None:
                        op = executors[pc] = blocks._bind(pc, program[pc])
                    op(mask)
                    for r in bumps[pc]:
                        version[r] += 1
                    pc += 1
                elif kind == "BRA":
                    inst = program[pc]
                    taken = self._guard(blocks, inst, mask)
                    if taken is True:
                        pc = targets[pc]
                        self._park(groups, pc, mask, blocks)
                        break
                    if taken is not False:
                        rest = ~taken if mask is None else mask & ~taken
                        self._park(groups, targets[pc], taken, blocks)
                        mask = rest
                        lanes, warps = self._mask_stats(mask, blocks)
                    pc += 1
                elif kind == "EXIT":
                    taken = self._guard(blocks, program[pc], mask)
                    if taken is True:
                        blocks.exited |= True if mask is None else mask
                        break
                    if taken is not False:
                        blocks.exited |= taken
                        mask = (~taken if mask is None else mask & ~taken)
                        lanes, warps = self._mask_stats(mask, blocks)
                    pc += 1
                else:
                    self._barrier(blocks, pc, mask)
                    c.barriers += warps
                    pc += 1
                if pc >= len(program):
                    raise blocks._fault(pc - 1, "execution ran past the end of the program (missing EXIT)")
                if pc in groups:
                    self._park(groups, pc, mask, blocks)
                    break
        c.steps += steps

    @staticmethod
    def _guard(blocks: ResidentBlocks, inst: Instruction, mask):
        """Lanes of `mask` whose guard holds: True (all), False (none) or a mask."""
        if inst.guard == PT and not inst.guard_neg:
            return True
        p = blocks.P[inst.guard]
        taken = ~p if inst.guard_neg else p
        if mask is not None:
            taken = taken & mask
        if not taken.any():
            return False
        if (mask is None and taken.all()) or (mask is not None and np.array_equal(taken, mask)):
            return True
        return taken

    @staticmethod
    def _park(groups: dict, pc: int, mask, blocks: ResidentBlocks) -> None:
        if pc in groups:
            other = groups[pc]
            merged = None if mask is None or other is None else mask | other
            if merged is not None and merged.all():
                merged = None
            groups[pc] = merged
        else:
            groups[pc] = mask

    @staticmethod
    def _barrier(blocks: ResidentBlocks, pc: int, mask) -> None:
        if mask is None:
            return
        missing = (~blocks.exited & ~mask).reshape(blocks.nblocks, blocks.tpb)
        present = mask.reshape(blocks.nblocks, blocks.tpb).any(axis=1)
        bad = np.flatnonzero(present & missing.any(axis=1))
        if bad.size:
            raise blocks._fault(pc, "barrier reached under divergence: some live threads of the block are "
                                  "on another path")
