"""Layer 0: occupancy and the analytical performance model.

Occupancy: how many blocks of a kernel fit on one compute unit at once, limited by threads,
registers, shared memory and the block slots; the grid then runs in waves of that many
blocks per unit.

Time (a first-order roofline; each term in nanoseconds on the profile's clock):
  issue   = warp instructions / (active units x schedulers x clock)
  fp32    = FP32 FLOPs / (active units x FP32 lanes x 2 x clock)
  shared  = shared-memory bytes / (active units x 128 bytes per clock)
  memory  = 32-byte sectors x 32 / HBM bandwidth
  kernel  = launch overhead + max(issue, fp32, shared, memory)
The largest term names the limiter. Every global sector is charged to DRAM (there is no L2
model yet), so memory time is an upper bound for kernels that reuse data.
"""

from dataclasses import dataclass

from lapis.hardware.profiles import DeviceProfile
from lapis.hardware.simt import Counters

REGISTER_ALLOCATION_UNIT = 256      # registers are handed to warps in chunks, as on NVIDIA GPUs
SHARED_BYTES_PER_CLOCK = 128


@dataclass(frozen=True)
class Occupancy:
    blocks_per_unit: int
    limiter: str
    warps_per_unit: int
    resident_blocks: int          # on the whole device


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
    regs_per_warp = -(-max(registers, 1) * profile.warp_size // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
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
    return Occupancy(blocks, limiter, blocks * warps, blocks * profile.compute_units)


@dataclass(frozen=True)
class KernelTiming:
    issue_ns: float
    fp32_ns: float
    shared_ns: float
    memory_ns: float
    launch_ns: float
    total_ns: float
    limiter: str
    active_units: int


def model_time(profile: DeviceProfile, c: Counters, occ: Occupancy) -> KernelTiming:
    active = max(1, min(profile.compute_units, c.blocks))
    ghz = profile.clock_ghz
    terms = {
        "issue": c.total_warp_instructions / (active * profile.schedulers_per_unit * ghz),
        "fp32": c.flops / (active * profile.fp32_lanes_per_unit * 2 * ghz),
        "shared": c.shared_bytes / (active * SHARED_BYTES_PER_CLOCK * ghz),
        "memory": c.global_sectors * 32 / profile.memory_bandwidth * 1e9,
    }
    limiter = max(terms, key=terms.get)
    return KernelTiming(terms["issue"], terms["fp32"], terms["shared"], terms["memory"], profile.kernel_launch_ns,
                        profile.kernel_launch_ns + terms[limiter], limiter, active)
