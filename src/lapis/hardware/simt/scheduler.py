"""The scheduling of lanes: which lanes run which instruction next, and the control instructions.

`SimtCore.run` splits the grid into batches of resident blocks (`blocks.py`) and runs each.
Within a batch, lanes at different program counters form groups; the group with the lowest
PC runs next, and groups that reach the same PC merge. Because the compiler lays code out in
structured order (join points after both arms of an `if`, loop exits after the loop), this
reconverges exactly where the SIMT stack of a GPU's warp scheduler would (the "thread
frontier" scheme of Diamos et al., MICRO 2011). A branch splits a group into the lanes that
jump and those that fall through; those that fall through run on, unless the branch goes back
(a loop's test at its bottom), when they wait and the lanes at the lower pc run first. EXIT
retires lanes; a barrier (BAR) is a no-op when the lanes that arrive (those of its group whose
guard holds) are every live lane of each block they touch, and otherwise is a barrier under
divergence, which faults. A watchdog on scheduler steps stops a kernel that never ends, and the
dispatch's deadline (the command processor's time limit per kernel, or its cancelling the kernel)
one that runs too long: it is read between batches, between slices of the native engine's run
and every `DEADLINE_STEPS` steps of the reference's, never per instruction.

Every step counts the warp- and thread-instructions it issued; instruction latencies do not
delay execution here (they feed the performance model through the counters).
"""

import time
from functools import partial

import numpy as np

from lapis.hardware.caches import DataCaches
from lapis.hardware.memory import PhysicalMemory
from lapis.hardware.mmu import Mmu
from lapis.hardware.profiles import DeviceProfile
from lapis.hardware.simt.binders import CONTROL, Executor, Mask, bind, binds
from lapis.hardware.simt.blocks import LaneLayout, ResidentBlocks
from lapis.hardware.simt.compare import compare_executors
from lapis.hardware.simt.fused import fuse_hot
from lapis.hardware.simt.launch import FLOPS_PER_LANE, Counters, Dispatch
from lapis.hardware.simt.native_scheduler import FINISHED, PAST_END, STORED, ready_engine
from lapis.hardware.simt.registers import padded_lanes
from lapis.hardware.simt.simulator_caches import SimulatorCaches
from lapis.hardware.simt.translate import Translation
from lapis.hardware.simt.translated import NativeRunner
from lapis.isa import INSTRUCTION_BYTES, OPCODES, PT, Instruction
from lapis.isa.verify import branch_problem


class SimtCore:
    """Runs dispatches: splits the grid into batches of resident blocks and executes each."""

    MAX_LANES = 1 << 16        # cap on lanes simulated together, to bound host memory
    MAX_LOCAL_BYTES = 1 << 30  # ... and on their local memory (host memory, zeroed as each batch starts)
    MAX_COOPERATIVE_LANES = 1 << 20    # a cooperative dispatch's lanes, all together (the engine's atomics index them)
    # A run of arithmetic is compiled into an LLVM function (`fused.py`) once threads have run it this many
    # times, over all launches: compiling costs about 2 ms per instruction and saves about 0.15 ns per
    # instruction and thread, so within one process a run would pay for itself after some 2^23 thread-runs;
    # but its object code is kept on disk and every later process loads it at its first launch, so a run
    # worth compiling once per machine is one a program returns to: a training loop's kernels, from its
    # first few dozen steps (a tiny GPT's attention, 8,192 thread-runs a step, from its 32nd).
    FUSE_AFTER = 1 << 18
    # The native engine runs a batch in slices, and the scheduler reads the deadline between them. The first is about
    # this many lane-instructions (a few milliseconds at the engine's speed), each next one 4x the last while a slice
    # takes under SLICE_S: a kernel shorter than a slice never pays for one more call, which costs about as much as
    # regathering the batch's registers (2^24 lane-instructions a slice halved the ALU benchmark's speed), and an
    # endless one is still looked at every SLICE_S or so.
    DEADLINE_LANE_STEPS = 1 << 28
    SLICE_S = 0.05
    DEADLINE_STEPS = 256        # the reference reads the deadline once every so many steps

    def __init__(self, profile: DeviceProfile, mmu: Mmu, vram: PhysicalMemory, sysmem: PhysicalMemory,
                 caches: bool = True, translated: bool = True, compare: bool = False):
        self.profile = profile
        self.translated = translated            # run translated code natively (`translated.py`), or only the binders
        self.fuse_after = self.FUSE_AFTER       # times threads run a run before it is fused; None: never
        self.compare = compare                  # run every dispatch both ways and check they agree (`compare.py`)
        self.write_log: list | None = None       # global writes (host memory?, byte addresses, old bytes), when kept
        self.warp_size = profile.warp_size
        self.mmu, self.vram, self.sysmem = mmu, vram, sysmem
        self.data_caches = DataCaches(profile)
        self.caches = SimulatorCaches(caches)
        self.counters = Counters.for_program(0)
        self.per_pc: tuple = (None, None)       # (the last counters `execute` made, their `Counters.per_pc`)
        self._l1_bytes: dict[int, int] = {}     # the L1's capacity by shared memory per unit (looked up per launch)
        self.engine_ready = not translated      # the native engine's code is loaded (`ready_engine`)

    def ready_engine(self) -> None:
        """Load (or compile) the native engine, if this core runs translated code and has not yet: before a kernel's
        time limit starts (`native_scheduler.ready_engine`)."""
        if not self.engine_ready:
            ready_engine()
            self.engine_ready = True

    def run(self, d: Dispatch, resident_blocks: int) -> Counters:
        """Execute every block of the grid; `resident_blocks` is how many fit on the device at once."""
        shared = -(-resident_blocks // self.profile.compute_units) * d.shared_bytes
        l1_bytes = self._l1_bytes.get(shared)
        if l1_bytes is None:
            l1_bytes = self._l1_bytes[shared] = self.profile.l1_bytes_for(shared)
        self.data_caches.begin_kernel(l1_bytes)
        if self.compare:
            return compare_executors(self, d, resident_blocks)
        return self.execute(d, resident_blocks, self.translated)

    def execute(self, d: Dispatch, resident_blocks: int, translated: bool) -> Counters:
        """Run the dispatch, with the translated code or only the reference executor."""
        n = len(d.program)
        self.counters = c = Counters.for_program(n)
        total = d.grid[0] * d.grid[1] * d.grid[2]
        tpb = d.block[0] * d.block[1] * d.block[2]
        fit = min(self.MAX_LANES // tpb, self.MAX_LOCAL_BYTES // (tpb * d.local_bytes or 1))
        per_batch = max(1, min(resident_blocks, fit))
        if d.cooperative:               # blocks wait for each other: the command processor checked they all fit
            per_batch = total
        c.waves = -(-total // resident_blocks)
        c.blocks = total
        c.warps_per_block = -(-tpb // self.warp_size)
        kinds, targets, pipes, flops = self.caches.per_program(d.program, "facts", program_facts)
        stride = padded_lanes(min(per_batch, total) * tpb)       # a whole batch's register file's row length
        translation = self.caches.translation(d.program, d.registers, stride) if translated else None
        for first in range(0, total, per_batch):
            nblocks = min(per_batch, total - first)
            blocks = self._batch_for(d, nblocks, translation)
            if first and time.monotonic() >= d.deadline:
                raise blocks.fault(0, f"{d.deadline_reason} ({first} of {total} workgroups had run)")
            blocks.start(first)
            self._run_blocks(blocks, kinds, targets)
        if translation is not None and self.fuse_after is not None:
            fuse_hot(translation, c.thread_instructions, self.fuse_after, stride, self.warp_size)
        per_pc = c.per_pc()
        self.per_pc = (c, per_pc)               # the performance model's key holds the same bytes: hashed once
        by_pipe, by_precision = self.caches.per_count(d.program, per_pc,
                                                      partial(_pipe_and_precision_totals, c, pipes, flops))
        c.warp_instructions_by_pipe.update(by_pipe)
        c.flops_by_precision.update(by_precision)
        return c

    def _batch(self, d: Dispatch, nblocks: int, translation: Translation | None) -> ResidentBlocks:
        """The state of a batch of `nblocks` blocks, with a native runner when the program is translated."""
        layout = self.caches.layout((self.warp_size, d.block, nblocks), nblocks * d.block[0] * d.block[1] * d.block[2],
                                    partial(LaneLayout, self.warp_size, d.block, nblocks))
        blocks = ResidentBlocks(self, d, layout)
        if translation is not None:
            blocks.native = NativeRunner(blocks, translation)
        return blocks

    def _batch_for(self, d: Dispatch, nblocks: int, translation: Translation | None) -> ResidentBlocks:
        """The batch state for `nblocks` blocks of `d`: one kept from an earlier launch of the same program
        and shape, taking on `d`, or a new one."""
        key = (id(d.program), nblocks, d.block, d.registers, d.shared_bytes, d.local_bytes, translation is not None)
        blocks = self.caches.batch(key, d.program, nblocks * d.block[0] * d.block[1] * d.block[2],
                                   partial(self._batch, d, nblocks, translation))
        if blocks.d is not d:
            blocks.launch(d)
        if blocks.native is not None:       # kept from a launch over another grid: that launch's translation
            blocks.native.translation = translation
        return blocks

    def _run_blocks(self, blocks: ResidentBlocks, kinds: list[str], targets: list[int]) -> None:
        """Run one batch until every lane has exited: natively when the program is translated."""
        if blocks.native is not None:
            self._run_native(blocks, kinds)
        else:
            with np.errstate(all="ignore"):        # IEEE arithmetic on a GPU raises no warnings: inf and NaN flow
                self._run_reference(blocks, kinds, targets)

    def _run_reference(self, blocks: ResidentBlocks, kinds: list[str], targets: list[int]) -> None:
        """Run one batch through the binders, group by group."""
        groups: dict[int, Mask] = {0: None}         # program counter -> the lanes waiting there
        end = len(blocks.d.program)
        steps = 0
        while groups:
            pc = min(groups)
            mask = groups.pop(pc)
            lanes, warps = active_counts(blocks, mask)
            while True:
                steps, execute = self._issue(blocks, pc, mask, lanes, warps, steps)
                kind = kinds[pc]
                if kind == "BRA":
                    taken = execute(mask)
                    if taken is True:
                        pc = targets[pc]
                        park(groups, pc, mask)
                        break
                    if taken is not False:
                        rest = ~taken if mask is None else mask & ~taken
                        park(groups, targets[pc], taken)
                        if targets[pc] <= pc < end - 1:     # a branch back: the lowest pc runs first
                            park(groups, pc + 1, rest)
                            break
                        mask = rest
                        lanes, warps = active_counts(blocks, mask)
                elif kind == "EXIT":
                    taken = execute(mask)
                    if taken is True:
                        blocks.exited |= True if mask is None else mask
                        break
                    if taken is not False:
                        blocks.exited |= taken
                        mask = (~taken if mask is None else mask & ~taken)
                        lanes, warps = active_counts(blocks, mask)
                else:
                    self._step(blocks, pc, mask, warps, kind, execute)
                pc += 1
                if pc >= end:
                    raise blocks.fault(pc - 1, PAST_END_TEXT)
                if pc in groups:
                    park(groups, pc, mask)
                    break
        self.counters.steps += steps

    def _run_native(self, blocks: ResidentBlocks, kinds: list[str]) -> None:
        """Run one batch with the native scheduler; the binders run the steps it hands back."""
        native = blocks.native
        translated, waiting = native.translation.translated, native.waiting
        d = blocks.d
        budget, end = d.watchdog_steps, len(d.program)
        per_slice, sliced = max(1, self.DEADLINE_LANE_STEPS // blocks.lanes), time.monotonic()
        native.begin()
        steps, pc, current = 0, 0, False
        while True:
            allowed = min(budget - steps, per_slice)
            status, pc, ran = native.run(pc, current, allowed)
            steps += ran
            if status == FINISHED:
                break
            if status == PAST_END:
                raise blocks.fault(pc - 1, PAST_END_TEXT)
            current = True
            if status == STORED:
                continue
            if time.monotonic() >= d.deadline:
                raise blocks.fault(pc, d.deadline_reason)
            if ran == allowed and steps < budget:
                now = time.monotonic()
                per_slice, sliced = per_slice * 4 if now - sliced < self.SLICE_S else per_slice, now
                # The slice ran out: the engine stopped before the instruction at pc, the running group kept, and goes
                # on from there. Had it stopped there for the binders too, the next call stops at once, and they run it.
                continue
            mask, lanes, warps = native.current()
            with np.errstate(all="ignore"):           # the running group, through the binders (as the reference)
                while True:
                    steps, execute = self._issue(blocks, pc, mask, lanes, warps, steps)
                    if kinds[pc] in ("BRA", "EXIT"):
                        execute(mask)                 # the engine hands these back only to fault
                        raise RuntimeError(f"the native scheduler handed back the branch at {pc:#x}, which did not "
                                           "fault")
                    self._step(blocks, pc, mask, warps, kinds[pc], execute)
                    pc += 1
                    if pc >= end or translated[pc] or waiting[pc]:
                        break
        self.counters.steps += steps

    def _issue(self, blocks: ResidentBlocks, pc: int, mask: Mask, lanes: int, warps: int,
               steps: int) -> tuple[int, Executor]:
        """Count instruction pc as issued by a group of `lanes` lanes in `warps` warps, under the watchdog;
        returns the steps so far and its executor."""
        steps += 1
        d = blocks.d
        if steps > d.watchdog_steps:
            raise blocks.fault(pc, f"watchdog: more than {d.watchdog_steps} instruction steps in one batch of blocks "
                                   "(an infinite loop?); raise LAPIS_WATCHDOG_STEPS if the kernel is just long")
        if not steps % self.DEADLINE_STEPS and time.monotonic() >= d.deadline:
            raise blocks.fault(pc, d.deadline_reason)
        c = self.counters
        c.warp_instructions[pc] += warps
        c.thread_instructions[pc] += lanes
        execute = blocks.executors[pc]
        if execute is None:
            execute = bind(blocks, pc)
            if self.caches.enabled:
                blocks.executors[pc] = execute
        return steps, execute

    def _step(self, blocks: ResidentBlocks, pc: int, mask: Mask, warps: int, kind: str, execute: Executor) -> None:
        """Run instruction pc (neither a branch nor an exit) for the group of `mask`."""
        execute(mask)
        if kind == "BAR":
            self.counters.barriers += warps
        else:
            derived = blocks.derived
            for r in derived.bumps[pc]:
                derived.version[r] += 1


PAST_END_TEXT = "execution ran past the end of the program (missing EXIT)"


def _pipe_and_precision_totals(c: Counters, pipes: tuple, flops: tuple) -> tuple[dict, dict]:
    """Warp instructions by pipe and FLOPs by precision (those not zero), from the per-instruction counts."""
    (pipe_names, per_pipe), (precisions, flops_per_lane) = pipes, flops
    by_pipe = dict(zip(pipe_names, (per_pipe @ c.warp_instructions).tolist(), strict=True))
    by_precision = {precision: count for precision, count
                    in zip(precisions, (flops_per_lane @ c.thread_instructions).tolist(), strict=True) if count}
    return by_pipe, by_precision


def program_facts(program: list[Instruction]) -> tuple:
    """What the scheduler looks up per instruction, worked out once per program: the control kind
    (or ""), the branch target; the pipes (in first-use order, as the counters list them) with a
    (pipes, instructions) matrix marking each one's instructions; the precisions with a matrix of
    each arithmetic instruction's FLOPs per lane. A launch's totals are then one product each."""
    kinds = [i.op if i.op in CONTROL else "" for i in program]
    targets = [branch_target(i, pc) if i.op == "BRA" else 0 for pc, i in enumerate(program)]
    pipe_names = list(dict.fromkeys(OPCODES[inst.op].pipe for inst in program))
    per_pipe = np.zeros((len(pipe_names), len(program)), np.int64)
    for pc, inst in enumerate(program):
        per_pipe[pipe_names.index(OPCODES[inst.op].pipe), pc] = 1
    precisions = list(dict.fromkeys(FLOPS_PER_LANE[inst.op][0] for inst in program if inst.op in FLOPS_PER_LANE))
    flops_per_lane = np.zeros((len(precisions), len(program)), np.int64)
    for pc, inst in enumerate(program):
        if inst.op in FLOPS_PER_LANE:
            precision, per_lane = FLOPS_PER_LANE[inst.op]
            flops_per_lane[precisions.index(precision), pc] = per_lane
    return kinds, targets, (pipe_names, per_pipe), (precisions, flops_per_lane)


def active_counts(blocks: ResidentBlocks, mask: Mask) -> tuple[int, int]:
    """(active lanes, warps with an active lane): what one step of this group issues."""
    if mask is None:
        return blocks.lanes, blocks.nblocks * blocks.warps_per_block
    lanes = int(np.count_nonzero(mask))
    if blocks.warp_aligned:
        warps = int(np.count_nonzero(mask.reshape(-1, blocks.core.warp_size).any(axis=1)))
    else:
        warps = int(np.count_nonzero(np.logical_or.reduceat(mask, blocks.warp_starts)))
    return lanes, warps


def park(groups: dict[int, Mask], pc: int, mask: Mask) -> None:
    """Leave the lanes of `mask` waiting at `pc`, merged with any already there."""
    if pc in groups:
        other = groups[pc]
        merged = None if mask is None or other is None else mask | other
        if merged is not None and merged.all():
            merged = None
        groups[pc] = merged
    else:
        groups[pc] = mask


def branch_target(inst: Instruction, pc: int) -> int:
    """The index of the instruction a branch at index `pc` jumps to."""
    return inst.branch_target(pc * INSTRUCTION_BYTES) // INSTRUCTION_BYTES


def guarded_lanes(blocks: ResidentBlocks, inst: Instruction, mask: Mask):
    """Lanes of `mask` whose guard holds: True (all), False (none) or a mask."""
    if inst.guard == PT and not inst.guard_neg:
        return True
    p = blocks.registers.P[inst.guard]
    taken = ~p if inst.guard_neg else p.copy()      # not a view: the lanes that jump wait with it, P changes
    if mask is not None:
        taken = taken & mask
    if not taken.any():
        return False
    if (mask is None and taken.all()) or (mask is not None and np.array_equal(taken, mask)):
        return True
    return taken


@binds("NOP")
def nop(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    return lambda mask: None


@binds("BRA")
def branch(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    """The executor gives the lanes that jump; the scheduler parks them at the target."""
    problem = branch_problem(inst, pc * INSTRUCTION_BYTES, len(blocks.d.program) * INSTRUCTION_BYTES)

    def execute(mask: Mask):
        taken = guarded_lanes(blocks, inst, mask)
        if taken is not False and problem is not None:
            raise blocks.fault(pc, problem)
        return taken
    return execute


@binds("EXIT")
def exit_lanes(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    """The executor gives the lanes that finish; the scheduler retires them."""
    return lambda mask: guarded_lanes(blocks, inst, mask)


@binds("BPT")
def trap(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    """A lane that gets here stops the kernel: a fault naming the trap's number (which the compiler maps to the
    assertion that failed). The engine leaves it untranslated, so it costs nothing until a lane reaches it."""
    number = inst.b.bits

    def execute(mask: Mask) -> None:
        raise blocks.fault(pc, f"device-side assert triggered (trap {number})")
    return execute


@binds("BAR")
def barrier(blocks: ResidentBlocks, inst: Instruction, pc: int) -> Executor:
    """The lanes of the group whose guard holds arrive (a predicated-off thread does not take part, as for any
    instruction). In lockstep the barrier has nothing to wait for; the executor faults if a block has threads
    that arrive and live threads that do not (on another path, or predicated off): they would wait forever."""
    def execute(mask: Mask) -> None:
        arriving = guarded_lanes(blocks, inst, mask)
        if arriving is False:
            return
        if arriving is not True:
            mask = arriving
        if mask is None:
            return
        missing = (~blocks.exited & ~mask).reshape(blocks.nblocks, blocks.threads_per_block)
        present = mask.reshape(blocks.nblocks, blocks.threads_per_block).any(axis=1)
        if (present & missing.any(axis=1)).any():
            raise blocks.fault(pc, "barrier reached under divergence: some live threads of the block do not "
                                   "arrive (they are on another path or predicated off)")
    return execute
