"""Layer 0: device profiles, the one table of every number that describes a simulated GPU.

The figures are those of DESIGN.md (H200 SXM and MI300X). The performance model, the
occupancy calculator, the memory sizes and the PCIe link all read them from here.
"""

from dataclasses import dataclass

GB = 10**9
GiB = 2**30
KiB = 1024


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    marketing_name: str
    vendor: str                    # "nvidia" or "amd": which programming interface lists it
    compute_units: int             # SMs or CUs
    warp_size: int
    clock_ghz: float
    fp32_lanes_per_unit: int       # FP32 FMA lanes per unit per clock
    fp32_tflops: float             # dense peak (FMA = 2 FLOP)
    matrix_tflops: float           # FP16/BF16 dense matrix peak
    memory_bytes: int
    memory_bandwidth: float        # bytes per second
    l2_bytes: int
    shared_per_unit: int           # bytes of shared memory (LDS) per unit
    shared_per_block: int
    registers_per_unit: int        # 32-bit registers
    max_registers_per_thread: int
    max_threads_per_unit: int
    max_threads_per_block: int
    max_blocks_per_unit: int
    schedulers_per_unit: int       # warp instructions issued per clock per unit
    pcie_bandwidth: float          # bytes per second, each way
    pcie_latency_ns: float
    tdp_watts: float
    kernel_launch_ns: float        # fixed front-end cost of a dispatch
    compute_capability: tuple[int, int]

    @property
    def peak_issue_rate(self) -> float:
        """Warp instructions per second the whole device can issue."""
        return self.compute_units * self.schedulers_per_unit * self.clock_ghz * 1e9


H200 = DeviceProfile(
    name="h200", marketing_name="NVIDIA H200 SXM (simulated)", vendor="nvidia",
    compute_units=132, warp_size=32, clock_ghz=1.98, fp32_lanes_per_unit=128,
    fp32_tflops=66.9, matrix_tflops=989.0, memory_bytes=141 * GB, memory_bandwidth=4.8e12,
    l2_bytes=50 * 2**20, shared_per_unit=228 * KiB, shared_per_block=227 * KiB,
    registers_per_unit=65536, max_registers_per_thread=255, max_threads_per_unit=2048,
    max_threads_per_block=1024, max_blocks_per_unit=32, schedulers_per_unit=4,
    pcie_bandwidth=64e9, pcie_latency_ns=1000.0, tdp_watts=700.0, kernel_launch_ns=3000.0,
    compute_capability=(9, 0),
)

MI300X = DeviceProfile(
    name="mi300x", marketing_name="AMD Instinct MI300X (simulated)", vendor="amd",
    compute_units=304, warp_size=64, clock_ghz=2.1, fp32_lanes_per_unit=128,
    fp32_tflops=163.4, matrix_tflops=1307.0, memory_bytes=192 * GB, memory_bandwidth=5.3e12,
    l2_bytes=256 * 2**20, shared_per_unit=64 * KiB, shared_per_block=64 * KiB,
    registers_per_unit=131072, max_registers_per_thread=255, max_threads_per_unit=2048,
    max_threads_per_block=1024, max_blocks_per_unit=32, schedulers_per_unit=4,
    pcie_bandwidth=64e9, pcie_latency_ns=1000.0, tdp_watts=750.0, kernel_launch_ns=3000.0,
    compute_capability=(9, 4),
)

PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (H200, MI300X)}


def get_profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown device profile {name!r}; known profiles: {', '.join(PROFILES)}") from None
