"""Layer 0: occupancy and the analytical performance model (docs/performance-model.md derives it).

Occupancy: how many blocks of a kernel fit on one compute unit at once, limited by threads,
registers, shared memory and the block slots; the grid then runs in waves of that many
blocks per unit.

Time: the counters of a run become one time per resource, in nanoseconds; the kernel takes
as long as its busiest resource (a roofline with one roof per resource), plus the fixed
launch cost. With U active units at f GHz:

  issue    = warp instructions / (U x schedulers x f)
  pipe p   = warp instructions on p x warp size / (U x lanes of p x f)      (ALU, FMA, FP64, SFU, LSU)
  matrix   = matrix FLOPs / (U x matrix FLOPs per clock x f)
  shared   = shared-memory wavefronts (bank-conflict replays included) / (U x f)
  l2       = (sectors the L1s passed on x 32 + local bytes) / L2 bandwidth
  far      = sectors the L2 slices passed on x 32 / the far level's bandwidth (H200's far partition,
             MI300X's Infinity Cache)
  dram     = DRAM bytes / (HBM bandwidth x dram_efficiency)
  latency  = waves x (one warp's dependency chain in cycles) / f

The latency term is the occupancy-aware one: a unit interleaves the warps resident on it, so
a wave takes at least as long as one warp's chain of dependent instructions; the more warps
fit (the fewer waves), the better latency is hidden, as in Hong and Kim's MWP-CWP model. A
warp's chain comes from a scoreboard walk over the program in layout order: each instruction
issues one cycle after the previous one, or when its source registers are ready, whichever is
later; a global load is ready after the latency of the level that served it (L1, the unit's
L2 slice, the far level, DRAM), in the proportions the run measured, a shared load after the
profile's shared-memory latency. Each instruction's wait is weighted by how often a warp
executed it, and the warp retires when its last result has landed. A loop's trip takes at least its recurrence: the
longest chain of results from an instruction that reads what the previous trip left (a pointer
chase's address, an accumulator) to the instruction that leaves it, as modulo scheduling
bounds a loop; the layout-order walk alone sees only the first trip's inputs.
"""

from dataclasses import dataclass

import numpy as np

from lapis.hardware.power import kernel_energy_j
from lapis.hardware.profiles import DeviceProfile
from lapis.hardware.simt import Counters
from lapis.hardware.simt.scheduler import branch_target
from lapis.isa import OPCODES, Instruction
from lapis.isa.dataflow import registers


@dataclass(frozen=True)
class Occupancy:
    blocks_per_unit: int
    limiter: str
    warps_per_unit: int
    resident_blocks: int          # on the whole device
    max_warps_per_unit: int

    @property
    def theoretical(self) -> float:
        """Resident warps as a fraction of the unit's warp slots."""
        return self.warps_per_unit / self.max_warps_per_unit


class LaunchResourceError(Exception):
    pass


def occupancy(profile: DeviceProfile, threads_per_block: int, registers: int, shared_bytes: int) -> Occupancy:
    if threads_per_block > profile.max_threads_per_block:
        raise LaunchResourceError(f"{threads_per_block} threads per block exceeds the device limit of "
                                  f"{profile.max_threads_per_block}")
    if shared_bytes > profile.shared_per_block:
        raise LaunchResourceError(f"{shared_bytes} bytes of shared memory per block exceeds the device limit of "
                                  f"{profile.shared_per_block}")
    warps = -(-threads_per_block // profile.warp_size)
    unit = profile.register_allocation_unit
    regs_per_warp = -(-max(registers, 1) * profile.warp_size // unit) * unit
    limits = {
        "block slots": profile.max_blocks_per_unit,
        "threads": profile.max_threads_per_unit // (warps * profile.warp_size),
        "registers": profile.registers_per_unit // (regs_per_warp * warps),
        "shared memory": profile.shared_per_unit // shared_bytes if shared_bytes else profile.max_blocks_per_unit,
    }
    limiter = min(limits, key=limits.get)
    blocks = limits[limiter]
    if blocks < 1:
        raise LaunchResourceError(f"too many resources requested for launch: {registers} registers x "
                                  f"{threads_per_block} threads exceeds the {profile.registers_per_unit} "
                                  "registers of a compute unit")
    return Occupancy(blocks, limiter, blocks * warps, blocks * profile.compute_units, profile.max_warps_per_unit)


@dataclass(frozen=True)
class KernelTiming:
    terms: dict[str, float]       # nanoseconds each resource needs
    launch_ns: float
    duration_ns: float            # on the device: the largest term
    total_ns: float               # launch + duration
    limiter: str                  # the resource of the largest term
    active_units: int
    chain_cycles: float           # one warp's dependency chain
    achieved_occupancy: float     # average resident warps over the run / warp slots
    # per instruction, from the same walk: the cycles a warp waits on its operands each time it issues it
    # and why ("long scoreboard", "short scoreboard", "wait", or "" when it issues at once), as Nsight
    # Compute's source view reports stall reasons
    stalls: list[tuple[float, str]]
    energy_j: float               # dynamic energy of the counted work at full clock (`power.kernel_energy_j`)

    def fraction_of(self, rate: float, amount: float) -> float:
        """`amount` per device duration as a fraction of a peak `rate` (e.g. FLOPs vs FLOP/s)."""
        return amount / (self.duration_ns * 1e-9) / rate if self.duration_ns else 0.0


# Nsight Compute's names for why a warp waited: on a memory result (long scoreboard), on shared
# memory, a shuffle or the special-function unit (short scoreboard), on a fixed-latency result (wait)
_LONG = {"LDG", "ATOMG", "LDL"}
_SHORT = {"LDS", "ATOMS", "MUFU", "SHFL"}


# Instructions whose latency is the profile's (the walk's `level_cycles`), not the opcode table's: a global load's
# depends on where it hits, a shared load's on the device.
_MEMORY_LATENCY = {"LDG": "global", "ATOMG": "global", "LDS": "shared"}


# Walks already done, by (program, load latency): frameworks launch the same kernels over and over,
# and a walk is a Python loop over the program.
_WALKS: dict[tuple[int, float, str], tuple[list[Instruction], tuple]] = {}
_KEPT_WALKS = 512


def _walk(profile: DeviceProfile, program: list[Instruction], c: Counters):
    """The scoreboard walk: per instruction, the cycles a warp waits before issuing it (beyond the one
    issue cycle) and why; then the cycles after the last issue until the last result lands."""
    level_cycles = {"global": global_load_cycles(profile, c), "shared": profile.shared_latency_cycles}

    def walk():
        return _walk_program(_kept(_DATAFLOWS, id(program), program, lambda: _dataflow(program)), level_cycles)
    return _kept(_WALKS, (id(program), level_cycles["global"], profile.name), program, walk)


def global_load_cycles(profile: DeviceProfile, c: Counters) -> float:
    """A global load's latency: each level's, weighted by the share of the run's sectors it served (the L2's if the
    kernel touched none)."""
    if not c.global_sectors:
        return float(profile.l2_latency_cycles)
    served = ((c.l1_hits, profile.l1_latency_cycles), (c.l2_hits, profile.l2_latency_cycles),
              (c.far_hits, profile.far_cache_latency_cycles), (c.far_misses, profile.dram_latency_cycles))
    return sum(sectors * cycles for sectors, cycles in served) / c.global_sectors


# Each program's dataflow, which the walk needs whatever the load latency, kept as walks are.
_DATAFLOWS: dict[int, tuple[list[Instruction], tuple]] = {}


def _kept(cache: dict, key, program: list[Instruction], make):
    """make(), kept in `cache` under `key` beside `program` (so that the program's id, which the key
    holds, cannot be reused by another while the entry lives); past _KEPT_WALKS entries the cache
    starts over."""
    kept = cache.get(key)
    if kept is not None and kept[0] is program:
        return kept[1]
    if len(cache) >= _KEPT_WALKS:
        cache.clear()
    value = make()
    cache[key] = (program, value)
    return value


def _dataflow(program: list[Instruction]) -> tuple:
    """Per instruction the instructions that last wrote the registers it reads, its latency (a memory level's
    name for a load whose latency is the profile's) and its stall kind; the last writer of every register; and the
    innermost loops' recurrences (`_loops`)."""
    writer: dict[int, int] = {}
    deps, latencies, kinds, reads_of, writes_of = [], [], [], [], []
    for pc, inst in enumerate(program):
        reads, writes = registers(inst)
        reads_of.append(reads)
        writes_of.append(writes)
        deps.append(tuple(writer[r] for r in reads if r in writer))
        latencies.append(_MEMORY_LATENCY.get(inst.op, OPCODES[inst.op].latency))
        kinds.append("long scoreboard" if inst.op in _LONG else "short scoreboard" if inst.op in _SHORT else "wait")
        for r in writes:
            writer[r] = pc
    return deps, latencies, kinds, tuple(set(writer.values())), _loops(program, reads_of, writes_of)


def _loops(program: list[Instruction], reads_of: list[tuple[int, ...]], writes_of: list[tuple[int, ...]]
           ) -> list[tuple[int, int, list, list]]:
    """Each innermost loop (a backward branch with no other inside its body) as (first pc, branch pc, the
    body's dependences within an iteration, its loop-carried ones): an instruction that reads a register the
    body writes only at or after it reads the value the previous trip left, so a pointer chase's address
    waits on the last trip's load. The layout-order walk sees only the first trip's writer (before the loop)."""
    backs = [(branch_target(inst, pc), pc) for pc, inst in enumerate(program)
             if inst.op == "BRA" and branch_target(inst, pc) <= pc]
    loops = []
    for start, end in backs:
        if any(start <= s and e <= end and (s, e) != (start, end) for s, e in backs):
            continue                              # not innermost: its body's walk already counts trip by trip
        writer: dict[int, int] = {}
        within: list[tuple[int, ...]] = []
        unwritten: list[tuple[int, ...]] = []     # per instruction, what it reads that the trip has not yet written
        for pc in range(start, end + 1):
            within.append(tuple(writer[r] for r in reads_of[pc] if r in writer))
            unwritten.append(tuple(r for r in reads_of[pc] if r not in writer))
            for r in writes_of[pc]:
                writer[r] = pc
        carried = [(writer[r], pc) for pc in range(start, end + 1) for r in unwritten[pc - start] if r in writer]
        if carried:
            loops.append((start, end, within, carried))
    return loops


def _recurrence(loop: tuple, latencies: list, level_cycles: dict) -> tuple[float, int, int]:
    """The cycles one trip of a loop takes at least, from its slowest loop-carried chain (modulo scheduling's
    recurrence bound): over each carried dependence w -> r, the longest chain of results from r to w within a
    trip plus w's own latency; and that dependence (w, r)."""
    start, end, within, carried = loop
    best = (0.0, -1, -1)
    for w, r in carried:
        longest = {r: 0.0}                        # cycles from r's issue to each instruction's, along results
        for pc in range(r + 1, w + 1):
            arrivals = [longest[d] + _latency(latencies[d], level_cycles) for d in within[pc - start] if d in longest]
            if arrivals:
                longest[pc] = max(arrivals)
        if w in longest:
            best = max(best, (longest[w] + _latency(latencies[w], level_cycles), w, r))
    return best


def _latency(latency: int | str, level_cycles: dict) -> float:
    """An instruction's result latency: the opcode table's, or the profile's for a memory level."""
    return level_cycles[latency] if isinstance(latency, str) else latency


def _walk_program(flow: tuple, level_cycles: dict):
    deps, latencies, kinds, last_writers, loops = flow
    ready: list[float] = []                       # per instruction, when its result lands
    now, stalls = 0.0, []
    for pc, sources in enumerate(deps):
        issue, reason = now + 1.0, ""
        for w in sources:                         # the latest (then the greatest kind, as max of tuples)
            if (ready[w], kinds[w]) > (issue, reason):
                issue, reason = ready[w], kinds[w]
        stalls.append((issue - now - 1.0, reason if issue > now + 1.0 else ""))
        now = issue
        ready.append(issue + _latency(latencies[pc], level_cycles))
    tail = max(0.0, max((ready[w] for w in last_writers), default=0.0) - now)
    for loop in loops:                            # a trip lasts at least its recurrence: the reader of the
        bound, w, r = _recurrence(loop, latencies, level_cycles)         # carried value waits the difference
        trip = sum(1.0 + wait for wait, _ in stalls[loop[0]:loop[1] + 1])
        if bound > trip:
            wait, reason = stalls[r]
            stalls[r] = (wait + bound - trip, kinds[w] if bound - trip >= wait else reason)
    return stalls, tail, np.array([1.0 + wait for wait, _ in stalls])


def _chain_cycles(cycles: np.ndarray, tail: float, c: Counters) -> float:
    """Cycles one warp spends on its dependency chain (see the module docstring): each instruction's issue
    cycle and wait (`cycles`), weighted by how often a warp executed it, then the wait for the last result."""
    warps = max(1, c.blocks * c.warps_per_block)
    return float(cycles @ c.warp_instructions) / warps + tail


# Timings already modelled, by program, occupancy, clock and every count: a training loop launches the same
# kernels on the same shapes, which count the same, over and over, and a tiny kernel's model costs as much
# as running it.
_TIMINGS: dict[tuple, tuple[list[Instruction], "KernelTiming"]] = {}


def model_time(profile: DeviceProfile, c: Counters, occ: Occupancy, program: list[Instruction],
               clock_ratio: float = 1.0, per_pc: tuple[bytes, bytes] | None = None) -> KernelTiming:
    """The kernel's time; `clock_ratio` < 1 is a throttled shader clock (memory keeps its clock). `per_pc`:
    `c.per_pc()`, when the caller has it (its hashes are then reused)."""
    key = (id(program), profile.name, occ.blocks_per_unit, occ.warps_per_unit, clock_ratio, c.key(per_pc))
    return _kept(_TIMINGS, key, program, lambda: _model_time(profile, c, occ, program, clock_ratio))


def _model_time(profile: DeviceProfile, c: Counters, occ: Occupancy, program: list[Instruction],
                clock_ratio: float) -> KernelTiming:
    active = max(1, min(profile.compute_units, c.blocks))
    ghz = profile.clock_ghz * clock_ratio
    per_unit_clock = active * ghz                  # unit-cycles per nanosecond
    ws = profile.warp_size
    lanes = {"ALU": profile.alu_lanes_per_unit, "FMA": profile.fp32_lanes_per_unit,
             "FP64": profile.fp64_lanes_per_unit, "SFU": profile.sfu_lanes_per_unit,
             "LSU": profile.lsu_lanes_per_unit}
    terms = {"issue": c.total_warp_instructions / (per_unit_clock * profile.schedulers_per_unit)}
    for pipe, width in lanes.items():
        terms[pipe.lower()] = c.warp_instructions_by_pipe.get(pipe, 0) * ws / (per_unit_clock * width)
    terms["matrix"] = c.flops_by_precision.get("matrix", 0) / (per_unit_clock * profile.matrix_flops_per_clock)
    terms["shared"] = c.shared_wavefronts / per_unit_clock
    terms["l2"] = (c.l2_requests * 32 + c.local_bytes) / profile.l2_bandwidth * 1e9
    terms["far"] = c.l2_misses * 32 / profile.far_cache_bandwidth * 1e9 if profile.far_cache_bytes else 0.0
    terms["dram"] = c.dram_bytes / (profile.memory_bandwidth * profile.dram_efficiency) * 1e9
    stalls, tail, cycles = _walk(profile, program, c)
    chain = _chain_cycles(cycles, tail, c)
    terms["latency"] = c.waves * chain / ghz
    limiter = max(terms, key=terms.get)
    duration = terms[limiter]
    resident = occ.blocks_per_unit * profile.compute_units
    achieved = occ.theoretical * c.blocks / (max(1, c.waves) * resident)
    return KernelTiming(terms, profile.kernel_launch_ns, duration, profile.kernel_launch_ns + duration, limiter,
                        active, chain, achieved, stalls, kernel_energy_j(profile, c))
