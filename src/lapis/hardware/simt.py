"""Layer 0: the SIMT core: executes decoded machine code for a wave of thread blocks at once.

Every register is a numpy array over all lanes in flight (every thread of the resident
blocks), and each instruction is one numpy operation under an active-lane mask: there is
no loop over threads. Lanes that are at different program counters form groups; the group
with the lowest PC runs next, and groups that reach the same PC merge. Because the compiler
lays code out in structured order (join points after both arms of an `if`, loop exits after
the loop), this reconverges exactly where a mask stack would (the "thread frontier" scheme
of Diamos et al., MICRO 2011). A barrier runs when its group holds every live lane of each
block it touches; otherwise it is a barrier under divergence, which faults.

Simplifications, on purpose: FFMA rounds the product and the sum separately (numpy has no
fused float32 multiply-add); denormals are kept; instruction latencies do not delay
execution here (they feed the performance model through the counters).
"""

from dataclasses import dataclass

import numpy as np

from lapis.hardware.memory import PhysicalMemory
from lapis.hardware.mmu import MemoryFault, Mmu
from lapis.isa import INSTRUCTION_BYTES, PT, RZ, Const, Imm, Instruction, Reg, format_instruction

U32, I32, F32, U64, I64, F64 = np.uint32, np.int32, np.float32, np.uint64, np.int64, np.float64
_MEM_BYTES = {"": 4, "U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


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
    flops: int = 0
    global_bytes: int = 0          # bytes requested by global loads and stores
    global_sectors: int = 0        # 32-byte sectors those requests touched, per warp
    shared_bytes: int = 0
    pcie_bytes: int = 0            # global accesses that landed in host memory
    barriers: int = 0
    waves: int = 0
    blocks: int = 0
    steps: int = 0                 # scheduler steps (group-instructions), for the watchdog

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


class Wave:
    """The state of `nblocks` resident thread blocks executing together."""

    def __init__(self, core: "SimtCore", d: Dispatch, nblocks: int):
        self.core, self.d = core, d
        self.tpb = d.block[0] * d.block[1] * d.block[2]
        self.nblocks = nblocks
        L = self.lanes = nblocks * self.tpb
        self.R = np.zeros((d.registers + 2, L), U32)   # row `registers` reads as RZ, the last is a sink
        self.F, self.S = self.R.view(F32), self.R.view(I32)
        self.P = np.zeros((8, L), bool)
        self.P[PT] = True
        self.smem_words = -(-d.shared_bytes // 4)
        self.smem = np.zeros(max(1, nblocks * self.smem_words), U32)
        self.warps_per_block = -(-self.tpb // core.warp_size)
        self.warp_aligned = self.tpb % core.warp_size == 0
        t = np.arange(L, dtype=np.int64) % self.tpb
        self.lane_block = np.arange(L, dtype=np.int64) // self.tpb
        self.smem_base = self.lane_block * self.smem_words
        bx, by, _ = d.block
        self.sregs = [(t % bx).astype(U32), (t // bx % by).astype(U32), (t // (bx * by)).astype(U32),
                      np.zeros(L, U32), np.zeros(L, U32), np.zeros(L, U32),
                      (t % core.warp_size).astype(U32), np.zeros(L, U32)]
        self.ops = [self._compile(pc, inst) for pc, inst in enumerate(d.program)]
        # Shared-memory address registers: their per-lane word indices are cached until the
        # register is written again (`bumps[pc]` lists the tracked rows instruction pc writes).
        tracked = {self._row(i.ra) for i in d.program if i.op in ("LDS", "STS") and i.ra != RZ}
        self.version = [0] * (d.registers + 2)
        self.bumps = [tuple(self._row(i.rd + k) for k in range(4) if i.rd + k < d.registers
                            and self._row(i.rd + k) in tracked) if "Rd" in i.opcode.operands and i.rd != RZ else ()
                      for i in d.program]
        self.addr_cache: dict[int, tuple] = {}

    def start(self, first_block: int) -> None:
        """Reset the state for blocks first_block .. first_block + nblocks - 1."""
        self.R.fill(0)
        self.P[:PT] = False
        self.smem.fill(0)
        gx, gy, _ = self.d.grid
        b = first_block + self.lane_block
        self.sregs[3][:] = b % gx
        self.sregs[4][:] = b // gx % gy
        self.sregs[5][:] = b // (gx * gy)
        self.exited = np.zeros(self.lanes, bool)
        self.addr_cache.clear()

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
        lo, hi = self.R[self._row(r)], self.R[self._row(r + 1)]
        return lo.astype(U64) | (hi.astype(U64) << U64(32))

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
        value = np.asarray(value).astype(U64, copy=False)
        self._write(self.R[self._dst(r)], (value & U64(0xFFFFFFFF)).astype(U32), mask)
        if r != RZ:
            self._write(self.R[self._dst(r + 1)], (value >> U64(32)).astype(U32), mask)

    @staticmethod
    def _write(dst: np.ndarray, value, mask) -> None:
        if mask is None:
            dst[...] = value
        else:
            np.copyto(dst, value, where=mask, casting="unsafe")

    # -- instruction semantics -----------------------------------------------------------------
    def _compile(self, pc: int, inst: Instruction):
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

    def _arith(self, inst, view, fn):
        d = self.R[self._dst(inst.rd)].view(view.dtype)
        a = view[self._row(inst.ra)]
        b = self._b32(inst, view, view.dtype)
        neg_a, neg_b = "a" in inst.neg, "b" in inst.neg
        if isinstance(b, np.generic) and neg_b:
            b, neg_b = (-b if view.dtype == F32 else (np.array(0, view.dtype) - b)[()]), False
        negate = np.negative if view.dtype == F32 else (lambda x: view.dtype.type(0) - x)

        def op(mask):
            x = negate(a) if neg_a else a
            y = negate(b) if neg_b else b
            if mask is None:
                fn(x, y, out=d)
            else:
                np.copyto(d, fn(x, y), where=mask)
        return op

    def _op_NOP(self, inst, pc):
        return lambda mask: None

    def _op_MOV(self, inst, pc):
        d, b = self.R[self._dst(inst.rd)], self._b32(inst, self.R, U32)
        return lambda mask: self._write(d, b, mask)

    def _op_S2R(self, inst, pc):
        d, src = self.R[self._dst(inst.rd)], self.sregs[inst.b.bits]
        if inst.b.bits == 7:
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

        def op(mask):
            if cmp in ("F", "T"):
                r = np.full(self.lanes, cmp == "T")
            else:
                r = fn(a_fn(), b_fn())
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
        self.core.flop_per_thread[pc] = 1
        return self._arith(inst, self.F, np.add)

    def _op_FMUL(self, inst, pc):
        self.core.flop_per_thread[pc] = 1
        return self._arith(inst, self.F, np.multiply)

    def _op_FFMA(self, inst, pc):
        self.core.flop_per_thread[pc] = 2
        d, a, c = self.F[self._dst(inst.rd)], self.F[self._row(inst.ra)], self.F[self._row(inst.rc)]
        b = self._b32(inst, self.F, F32)
        if isinstance(b, np.generic) and "b" in inst.neg:
            b = -b
        na, nb, nc = "a" in inst.neg, "b" in inst.neg and not isinstance(b, np.generic), "c" in inst.neg
        tmp = np.empty(self.lanes, F32)
        combine = np.subtract if nc else np.add

        def op(mask):
            np.multiply(-a if na else a, -b if nb else b, out=tmp)
            if mask is None:
                combine(tmp, c, out=d)
            else:
                combine(tmp, c, out=tmp)
                np.copyto(d, tmp, where=mask)
        return op

    def _op_FMNMX(self, inst, pc):
        return self._arith(inst, self.F, np.fmin if inst.mod("op") == "MIN" else np.fmax)

    def _op_FSETP(self, inst, pc):
        a, b = self.F[self._row(inst.ra)], self._b32(inst, self.F, F32)
        return self._setp(inst, lambda: a, lambda: b, True)

    @staticmethod
    def _const_fn(value):
        return lambda: value

    def _f64(self, r):
        return lambda: self._pair(r).view(F64)

    def _b_f64(self, inst):
        b = self._b64(inst)
        return lambda: np.asarray(b()).view(F64)

    def _dbin(self, inst, pc, fn, flops):
        self.core.flop_per_thread[pc] = flops
        a, b = self._f64(inst.ra), self._b_f64(inst)
        na, nb = "a" in inst.neg, "b" in inst.neg
        return lambda mask: self._write_pair(inst.rd, fn(-a() if na else a(), -b() if nb else b()).view(U64), mask)

    def _op_DADD(self, inst, pc):
        return self._dbin(inst, pc, np.add, 1)

    def _op_DMUL(self, inst, pc):
        return self._dbin(inst, pc, np.multiply, 1)

    def _op_DFMA(self, inst, pc):
        self.core.flop_per_thread[pc] = 2
        a, b, c = self._f64(inst.ra), self._b_f64(inst), self._f64(inst.rc)
        sa, sb, sc = (-1.0 if x in inst.neg else 1.0 for x in "abc")
        return lambda mask: self._write_pair(inst.rd, (sa * a() * (sb * b()) + sc * c()).view(U64), mask)

    def _op_DSETP(self, inst, pc):
        return self._setp(inst, self._f64(inst.ra), self._b_f64(inst), True)

    def _op_I2F(self, inst, pc):
        to, fr = inst.mod("to"), inst.mod("fr")
        if fr == "S64":
            b = self._b64(inst)
            src = lambda: np.asarray(b()).view(I64)   # noqa: E731
        else:
            x = self._b32(inst, self.S if fr == "S32" else self.R, I32 if fr == "S32" else U32)
            src = lambda: x   # noqa: E731
        if to == "F64":
            return lambda mask: self._write_pair(inst.rd, np.broadcast_to(np.asarray(src()).astype(F64), self.lanes)
                                                 .view(U64), mask)
        d = self.F[self._dst(inst.rd)]
        return lambda mask: self._write(d, np.asarray(src()).astype(F32), mask)

    def _op_F2I(self, inst, pc):
        to, fr, rnd = inst.mod("to"), inst.mod("fr"), inst.mod("rnd")
        src = self._b_f64(inst) if fr == "F64" else self._const_fn(self._b32(inst, self.F, F32))
        round_fn = {"TRUNC": np.trunc, "FLOOR": np.floor, "CEIL": np.ceil, "RN": np.rint}[rnd]
        dt = I64 if to == "S64" else I32
        info = np.iinfo(dt)

        def convert():
            x = round_fn(np.asarray(src(), F64))
            x = np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min)
            return np.clip(x, info.min, info.max).astype(dt)
        if to == "S64":
            return lambda mask: self._write_pair(inst.rd, np.broadcast_to(convert(), self.lanes).view(U64), mask)
        d = self.S[self._dst(inst.rd)]
        return lambda mask: self._write(d, convert(), mask)

    def _op_F2F(self, inst, pc):
        to, fr = inst.mod("to"), inst.mod("fr")
        src = self._b_f64(inst) if fr == "F64" else self._const_fn(self._b32(inst, self.F, F32))
        if to == "F64":
            return lambda mask: self._write_pair(inst.rd, np.broadcast_to(np.asarray(src(), F64), self.lanes)
                                                 .view(U64), mask)
        d = self.F[self._dst(inst.rd)]
        return lambda mask: self._write(d, np.asarray(src()).astype(F32), mask)

    def _op_FRND(self, inst, pc):
        fn = {"RN": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc}[inst.mod("rnd")]
        if inst.mod("w") == "F64":
            b = self._b_f64(inst)
            return lambda mask: self._write_pair(inst.rd, np.broadcast_to(fn(b()), (self.lanes,)).view(U64), mask)
        d, b = self.F[self._dst(inst.rd)], self._b32(inst, self.F, F32)
        return lambda mask: self._write(d, fn(b), mask)

    def _op_MUFU(self, inst, pc):
        self.core.flop_per_thread[pc] = 1
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

    def _global_access(self, pc, inst, mask, nbytes, write):
        """Translate the active lanes' addresses; returns (active addresses' physical form, memory, lanes)."""
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
        core = self.core
        c = core.counters
        c.global_bytes += va.size * nbytes
        if mask is None and self.warp_aligned:
            sectors = (va >> U64(5)).reshape(-1, core.warp_size)
            c.global_sectors += int(np.count_nonzero(sectors[:, 1:] != sectors[:, :-1])) + len(sectors)
        else:
            c.global_sectors += int(np.count_nonzero(np.diff(va >> U64(5)))) + 1
        if not isinstance(system, bool):
            raise self._fault(pc, "one instruction touched both device and host memory", int(va[0]))
        if system:
            c.pcie_bytes += va.size * nbytes
        return pa.astype(I64), core.sysmem if system else core.vram

    def _op_LDG(self, inst, pc):
        width = inst.mod("w")
        nbytes = _MEM_BYTES[width]
        words = max(1, nbytes // 4)
        dsts = [self.R[self._dst(inst.rd + i if inst.rd != RZ else RZ)] for i in range(words)]

        def op(mask):
            got = self._global_access(pc, inst, mask, nbytes, False)
            if got is None:
                return
            pa, mem = got
            if nbytes < 4:
                raw = mem.u8[pa].astype(U32)
                if nbytes == 2:
                    raw |= mem.u8[pa + 1].astype(U32) << U32(8)
                if width.startswith("S"):
                    raw = raw.view(I32) << (32 - 8 * nbytes) >> (32 - 8 * nbytes)
                values = [raw.view(U32) if raw.dtype != U32 else raw]
            else:
                w = pa >> 2
                values = [mem.u32[w + i] for i in range(words)]
            for dst, v in zip(dsts, values, strict=True):
                if mask is None:
                    dst[...] = v
                else:
                    dst[mask] = v
        return op

    def _op_STG(self, inst, pc):
        width = inst.mod("w")
        nbytes = _MEM_BYTES[width]
        words = max(1, nbytes // 4)
        srcs = [self.R[self._row(inst.rc + i if inst.rc != RZ else RZ)] for i in range(words)]

        def op(mask):
            got = self._global_access(pc, inst, mask, nbytes, True)
            if got is None:
                return
            pa, mem = got
            values = [s if mask is None else s[mask] for s in srcs]
            if nbytes < 4:
                mem.u8[pa] = (values[0] & U32(0xFF)).astype(np.uint8)
                if nbytes == 2:
                    mem.u8[pa + 1] = (values[0] >> U32(8) & U32(0xFF)).astype(np.uint8)
                return
            w = pa >> 2
            for i, v in enumerate(values):
                mem.u32[w + i] = v
        return op

    def _shared_index(self, pc, inst, mask, nbytes):
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
        base = self.smem_base if mask is None else self.smem_base[mask]
        return base + ((a.astype(I64) + off) >> 2)

    def _shared_words(self, row: int) -> tuple:
        """(version, per-lane word index into the wave's shared memory, min, max, 4-byte aligned) of R[row]."""
        entry = self.addr_cache.get(row)
        if entry is None or entry[0] != self.version[row]:
            a = self.R[row]
            entry = (self.version[row], self.smem_base + (a >> U32(2)).astype(I64), int(a.min()), int(a.max()),
                     not (a & U32(3)).any())
            self.addr_cache[row] = entry
        return entry

    def _shared_fast(self, inst, nbytes: int):
        """The word index array and first word for an unmasked 4-byte access, or None to take the slow path."""
        off = inst.simm
        if inst.ra == RZ or nbytes != 4 or off % 4:
            return None
        _, words, lo, hi, aligned = self._shared_words(self._row(inst.ra))
        if not aligned or lo + off < 0 or hi + off + nbytes > self.d.shared_bytes:
            return None
        self.core.counters.shared_bytes += self.lanes * nbytes
        return words, off >> 2

    def _op_LDS(self, inst, pc):
        nbytes = _MEM_BYTES[inst.mod("w")]
        if nbytes < 4:
            raise ValueError("sub-word shared memory loads are not implemented")
        dsts = [self.R[self._dst(inst.rd + i if inst.rd != RZ else RZ)] for i in range(nbytes // 4)]

        def op(mask):
            if mask is None:
                fast = self._shared_fast(inst, nbytes)
                if fast is not None:
                    np.take(self.smem[fast[1]:], fast[0], out=dsts[0], mode="clip")   # bounds checked above
                    return
            idx = self._shared_index(pc, inst, mask, nbytes)
            if idx is None:
                return
            for i, dst in enumerate(dsts):
                v = self.smem[idx + i] if i else self.smem[idx]
                if mask is None:
                    dst[...] = v
                else:
                    dst[mask] = v
        return op

    def _op_STS(self, inst, pc):
        nbytes = _MEM_BYTES[inst.mod("w")]
        if nbytes < 4:
            raise ValueError("sub-word shared memory stores are not implemented")
        srcs = [self.R[self._row(inst.rc + i if inst.rc != RZ else RZ)] for i in range(nbytes // 4)]

        def op(mask):
            if mask is None:
                fast = self._shared_fast(inst, nbytes)
                if fast is not None:
                    np.put(self.smem[fast[1]:], fast[0], srcs[0], mode="clip")
                    return
            idx = self._shared_index(pc, inst, mask, nbytes)
            if idx is None:
                return
            for i, s in enumerate(srcs):
                self.smem[idx + i] = s if mask is None else s[mask]
        return op

    # Control instructions are run by the scheduler in `SimtCore.run_wave`; these only validate.
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
    """Runs dispatches: splits the grid into waves of resident blocks and executes each."""

    MAX_LANES = 1 << 16        # cap on lanes simulated together, to bound host memory

    def __init__(self, warp_size: int, mmu: Mmu, vram: PhysicalMemory, sysmem: PhysicalMemory):
        self.warp_size = warp_size
        self.mmu, self.vram, self.sysmem = mmu, vram, sysmem
        self.counters = Counters.for_program(0)
        self.flop_per_thread: list[int] = []

    def run(self, d: Dispatch, resident_blocks: int) -> Counters:
        """Execute every block of the grid; `resident_blocks` is how many fit on the device at once."""
        n = len(d.program)
        self.counters = c = Counters.for_program(n)
        self.flop_per_thread = [0] * n
        total = d.grid[0] * d.grid[1] * d.grid[2]
        tpb = d.block[0] * d.block[1] * d.block[2]
        per_chunk = max(1, min(resident_blocks, self.MAX_LANES // tpb))
        c.waves = -(-total // resident_blocks)
        c.blocks = total
        kinds = [i.op if i.op in ("BRA", "EXIT", "BAR") else "" for i in d.program]
        targets = [i.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES if i.op == "BRA" else 0
                   for pc, i in enumerate(d.program)]
        waves: dict[int, Wave] = {}
        with np.errstate(all="ignore"):        # IEEE arithmetic on a GPU raises no warnings: inf and NaN flow
            for first in range(0, total, per_chunk):
                nblocks = min(per_chunk, total - first)
                if nblocks not in waves:
                    waves[nblocks] = Wave(self, d, nblocks)
                wave = waves[nblocks]
                wave.start(first)
                self._run_wave(wave, kinds, targets)
        c.flops = sum(f * t for f, t in zip(self.flop_per_thread, c.thread_instructions, strict=True))
        return c

    def _mask_stats(self, mask, wave: Wave) -> tuple[int, int]:
        if mask is None:
            return wave.lanes, wave.nblocks * wave.warps_per_block
        lanes = int(np.count_nonzero(mask))
        if wave.warp_aligned:
            warps = int(np.count_nonzero(mask.reshape(-1, self.warp_size).any(axis=1)))
        else:
            warps = -(-lanes // self.warp_size)
        return lanes, warps

    def _run_wave(self, wave: Wave, kinds: list[str], targets: list[int]) -> None:
        c, ops, program = self.counters, wave.ops, wave.d.program
        bumps, version = wave.bumps, wave.version
        budget = wave.d.watchdog_steps
        groups: dict[int, np.ndarray | None] = {0: None}
        steps = 0
        while groups:
            pc = min(groups)
            mask = groups.pop(pc)
            lanes, warps = self._mask_stats(mask, wave)
            while True:
                steps += 1
                if steps > budget:
                    raise wave._fault(pc, f"watchdog: more than {budget} instruction steps in one wave "
                                          "(an infinite loop?); raise LAPIS_WATCHDOG_STEPS if the kernel is just long")
                c.warp_instructions[pc] += warps
                c.thread_instructions[pc] += lanes
                kind = kinds[pc]
                if not kind:
                    ops[pc](mask)
                    for r in bumps[pc]:
                        version[r] += 1
                    pc += 1
                elif kind == "BRA":
                    inst = program[pc]
                    taken = self._guard(wave, inst, mask)
                    if taken is True:
                        pc = targets[pc]
                        self._park(groups, pc, mask, wave)
                        break
                    if taken is not False:
                        rest = ~taken if mask is None else mask & ~taken
                        self._park(groups, targets[pc], taken, wave)
                        mask = rest
                        lanes, warps = self._mask_stats(mask, wave)
                    pc += 1
                elif kind == "EXIT":
                    taken = self._guard(wave, program[pc], mask)
                    if taken is True:
                        wave.exited |= True if mask is None else mask
                        break
                    if taken is not False:
                        wave.exited |= taken
                        mask = (~taken if mask is None else mask & ~taken)
                        lanes, warps = self._mask_stats(mask, wave)
                    pc += 1
                else:
                    self._barrier(wave, pc, mask)
                    c.barriers += warps
                    pc += 1
                if pc >= len(program):
                    raise wave._fault(pc - 1, "execution ran past the end of the program (missing EXIT)")
                if pc in groups:
                    self._park(groups, pc, mask, wave)
                    break
        c.steps += steps

    @staticmethod
    def _guard(wave: Wave, inst: Instruction, mask):
        """Lanes of `mask` whose guard holds: True (all), False (none) or a mask."""
        if inst.guard == PT and not inst.guard_neg:
            return True
        p = wave.P[inst.guard]
        taken = ~p if inst.guard_neg else p
        if mask is not None:
            taken = taken & mask
        if not taken.any():
            return False
        if (mask is None and taken.all()) or (mask is not None and np.array_equal(taken, mask)):
            return True
        return taken

    @staticmethod
    def _park(groups: dict, pc: int, mask, wave: Wave) -> None:
        if pc in groups:
            other = groups[pc]
            merged = None if mask is None or other is None else mask | other
            if merged is not None and merged.all():
                merged = None
            groups[pc] = merged
        else:
            groups[pc] = mask

    @staticmethod
    def _barrier(wave: Wave, pc: int, mask) -> None:
        if mask is None:
            return
        missing = (~wave.exited & ~mask).reshape(wave.nblocks, wave.tpb)
        present = mask.reshape(wave.nblocks, wave.tpb).any(axis=1)
        bad = np.flatnonzero(present & missing.any(axis=1))
        if bad.size:
            raise wave._fault(pc, "barrier reached under divergence: some live threads of the block are "
                                  "on another path")
