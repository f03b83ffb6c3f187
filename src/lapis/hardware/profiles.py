"""Layer 0: device profiles, the one table of every number that describes a simulated GPU.

The figures are those of DESIGN.md (H200 SXM and MI300X), plus a small `teaching` profile.
The performance model, the occupancy calculator, the memory sizes and the PCIe link all read
them from here. Figures DESIGN.md does not give are public approximations: pipe widths per
unit from the vendors' architecture papers (Hopper: 64 INT32, 64 FP64, 16 SFU lanes per SM),
latencies and L2 bandwidth from published microbenchmarks of H100 and MI300X, and
`dram_efficiency` from the measured H200 copy (4.3 of 4.8 TB/s). The energy figures are
chosen so that a kernel at the FP32 or matrix peak draws close to the board power (TDP) and
a streaming copy about half of it, as measured on such boards; the thermal figures put the
steady state at TDP a few degrees under the slowdown temperature.
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
    alu_lanes_per_unit: int        # integer and logic lanes
    fp64_lanes_per_unit: int
    sfu_lanes_per_unit: int        # transcendental (special function) lanes
    lsu_lanes_per_unit: int        # lanes of memory instructions issued per clock
    fp32_tflops: float             # dense peak (FMA = 2 FLOP)
    matrix_tflops: float           # FP16/BF16 dense matrix peak
    memory_bytes: int
    memory_bandwidth: float        # bytes per second
    dram_efficiency: float         # fraction of the bandwidth a streaming access pattern sustains
    dram_latency_cycles: int
    l2_bytes: int                  # all slices together
    l2_bandwidth: float            # bytes per second
    l2_latency_cycles: int         # a hit in the unit's own slice (the near partition, the XCD's L2)
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
    # The data caches (`caches.DataCaches`). An L1 per unit: on Hopper one 256 KiB array with shared memory, which
    # takes the carve-out the driver picks for a kernel (`shared_carveouts_kib`) and leaves the L1 the rest.
    l1_bytes: int = 16 * KiB
    l1_latency_cycles: int = 30
    shared_carveouts_kib: tuple[int, ...] = ()     # empty: shared memory is a separate array
    # The L2 in slices, unit u using slice u mod l2_slices: the H200's two partitions, the MI300X's eight XCDs.
    l2_slices: int = 1
    # Behind the slices, before DRAM (0 bytes: none): the H200's far L2 partition, where each line has its home
    # (a miss in the near partition finds it there), or the MI300X's memory-side Infinity Cache.
    far_cache_bytes: int = 0
    far_cache_latency_cycles: int = 0
    far_cache_bandwidth: float = 1.0
    register_allocation_unit: int = 256   # registers are handed to warps in chunks of this many, as on NVIDIA GPUs
    # A shared-memory (LDS) load's latency, which the performance model's scoreboard walk charges its consumer
    shared_latency_cycles: int = 24
    # The most local (private, scratch) memory a thread may have: CUDA's documented 512 KiB per thread; on AMD the
    # CP's per-wave scratch field (COMPUTE_TMPRING_SIZE.WAVESIZE, 8,387,584 bytes) over a wave's 64 lanes.
    max_local_per_thread: int = 512 * KiB
    # power and temperature (lapis.hardware.power): energy per unit of work, the thermal model
    idle_watts: float = 90.0
    memory_clock_mhz: float = 2619.0
    pj_per_warp_instruction: float = 100.0
    pj_per_fp32_flop: float = 7.0
    pj_per_fp64_flop: float = 20.0
    pj_per_fp16_flop: float = 3.5
    pj_per_matrix_flop: float = 0.5
    pj_per_l2_byte: float = 5.0
    pj_per_dram_byte: float = 60.0
    ambient_c: float = 30.0
    thermal_resistance_c_per_w: float = 0.075     # steady-state rise per watt
    thermal_time_constant_s: float = 2.0
    temperature_limit_c: float = 87.0

    @property
    def matrix_flops_per_clock(self) -> float:
        """Dense FP16/BF16 matrix FLOPs one unit retires per clock."""
        return self.matrix_tflops * 1e12 / (self.compute_units * self.clock_ghz * 1e9)

    def l1_bytes_for(self, shared_per_unit: int) -> int:
        """The L1's capacity on a unit whose resident blocks use `shared_per_unit` bytes of shared memory: where
        the two share one array, what the smallest carve-out that holds them leaves."""
        if not self.shared_carveouts_kib:
            return self.l1_bytes
        carveout = next((k for k in self.shared_carveouts_kib if k * KiB >= shared_per_unit),
                        self.shared_carveouts_kib[-1])
        return self.l1_bytes - carveout * KiB

    @property
    def max_warps_per_unit(self) -> int:
        return self.max_threads_per_unit // self.warp_size


H200 = DeviceProfile(
    name="h200", marketing_name="NVIDIA H200 SXM (simulated)", vendor="nvidia",
    compute_units=132, warp_size=32, clock_ghz=1.98, fp32_lanes_per_unit=128, alu_lanes_per_unit=64,
    fp64_lanes_per_unit=64, sfu_lanes_per_unit=16, lsu_lanes_per_unit=32,
    fp32_tflops=66.9, matrix_tflops=989.0, memory_bytes=141 * GB, memory_bandwidth=4.8e12,
    # DRAM latency: a pointer chase past the L2 takes 680-689 cycles on a GH200 (HBM3e, as the H200's) and 700-835 on
    # an H100 SXM (RRZE-HPC and te42kyfo gpu-benches, gpu-latency); the chase's own address arithmetic adds 4.
    dram_efficiency=0.9, dram_latency_cycles=690,
    # L2 bandwidth: A100's published 5120 bytes per clock (its whitepaper) at this clock; Hopper's L2
    # is at least as wide. (Chips and Cheese measured 5.5 TB/s on a power-limited H100 PCIe at lower clocks.)
    # L2 size: 60 MiB, as a real H200's driver reports it (cudaDeviceProp.l2CacheSize 62,914,560;
    # benchmarks/measured/h200.json); the H100 SXM enables 50 of the GH100's 60.
    l2_bytes=60 * 2**20, l2_bandwidth=10.1e12, l2_latency_cycles=260,
    shared_per_unit=228 * KiB, shared_per_block=227 * KiB,
    registers_per_unit=65536, max_registers_per_thread=255, max_threads_per_unit=2048,
    max_threads_per_block=1024, max_blocks_per_unit=32, schedulers_per_unit=4,
    # kernel_launch_ns: back-to-back 64 kB kernels on one stream of an H200 are ~2.5 us apart (te42kyfo/gpu-benches
    # gpu-small-kernels); such a kernel runs ~0.2 us here, the rest is the front end's fixed cost of a dispatch.
    pcie_bandwidth=64e9, pcie_latency_ns=1000.0, tdp_watts=700.0, kernel_launch_ns=2300.0,
    compute_capability=(9, 0),
    shared_latency_cycles=26,       # a chase through shared memory: 29.9 cycles on an H100 SXM (mt4g), 4 its SHL
    # L1: 256 KiB with shared memory (Hopper tuning guide), the carve-outs cudaFuncAttributePreferredSharedMemory-
    # Carveout offers; a hit takes 38 cycles a chase step on an H100 SXM (mt4g; 40 markdewing/AI_kernels), 4 of
    # them the chase's address arithmetic. The L2: two 30 MiB partitions, a near hit 265 cycles and a far one 475
    # (H100 PCIe, te42kyfo/gpu-benches gpu-latency; GH200 280 and 480-522): the far level is the partition where a
    # line has its home, which holds every line the near one does not (the A100 whitepaper: each partition caches
    # lines for the SMs next to it).
    l1_bytes=256 * KiB, l1_latency_cycles=34, shared_carveouts_kib=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
    l2_slices=2, far_cache_bytes=60 * 2**20, far_cache_latency_cycles=471, far_cache_bandwidth=10.1e12,
)

MI300X = DeviceProfile(
    name="mi300x", marketing_name="AMD Instinct MI300X (simulated)", vendor="amd",
    compute_units=304, warp_size=64, clock_ghz=2.1, fp32_lanes_per_unit=128, alu_lanes_per_unit=128,
    fp64_lanes_per_unit=64, sfu_lanes_per_unit=32, lsu_lanes_per_unit=64,
    fp32_tflops=163.4, matrix_tflops=1307.0, memory_bytes=192 * GB, memory_bandwidth=5.3e12,
    # BabelStream copy and triad reach 4.11 and 4.09 TB/s, a STREAM read 4.20 (Azure's ND MI300X v5 results, RRZE-HPC
    # gpu-stream): 0.8 of 5.3 TB/s, the launch included; a chase past the caches takes 870-900 cycles (gpu-latency)
    dram_efficiency=0.8, dram_latency_cycles=880,
    l2_bytes=32 * 2**20, l2_bandwidth=17.2e12, l2_latency_cycles=209,
    shared_per_unit=64 * KiB, shared_per_block=64 * KiB,
    registers_per_unit=131072, max_registers_per_thread=255, max_threads_per_unit=2048,
    max_threads_per_block=1024, max_blocks_per_unit=32, schedulers_per_unit=4,
    pcie_bandwidth=64e9, pcie_latency_ns=1000.0, tdp_watts=750.0, kernel_launch_ns=3000.0,
    compute_capability=(9, 4), idle_watts=130.0, memory_clock_mhz=1300.0, pj_per_warp_instruction=150.0,
    pj_per_fp32_flop=3.5, pj_per_fp64_flop=8.0, pj_per_fp16_flop=1.75, pj_per_matrix_flop=0.4, pj_per_l2_byte=4.0,
    pj_per_dram_byte=55.0, thermal_resistance_c_per_w=0.07, temperature_limit_c=90.0,
    max_local_per_thread=8_387_584 // 64,
    shared_latency_cycles=47,       # an LDS chase: 51 cycles (RRZE-HPC gpu-latency/mi300x.txt), 4 of them its shift
    # A 32 KiB vector L1 per CU, a 4 MB L2 per XCD (eight of 38 CUs; workgroups go round-robin to the XCDs) and the
    # 256 MB Infinity Cache in front of HBM (CDNA 3 whitepaper). A chase step: L1 116-120 cycles, own XCD's L2 213,
    # Infinity Cache 455 (RRZE-HPC gpu-latency/mi300x.txt), 4 of each the chase's arithmetic; the Infinity Cache
    # reads 6.4 TB/s (ROCm/rocm-amdgpu-bench issue 22).
    l1_bytes=32 * KiB, l1_latency_cycles=114, l2_slices=8, far_cache_bytes=256 * 2**20,
    far_cache_latency_cycles=451, far_cache_bandwidth=6.4e12,
)

# Small enough to follow by hand: two units of eight warps (one 256-thread block each, the
# largest block the libraries launch), one scheduler each, a 1 GHz clock (so cycles and
# nanoseconds coincide) and round numbers everywhere.
TEACHING = DeviceProfile(
    name="teaching", marketing_name="lapis teaching GPU (2 units x 8 warps, simulated)", vendor="nvidia",
    compute_units=2, warp_size=32, clock_ghz=1.0, fp32_lanes_per_unit=32, alu_lanes_per_unit=32,
    fp64_lanes_per_unit=8, sfu_lanes_per_unit=8, lsu_lanes_per_unit=32,
    fp32_tflops=0.128, matrix_tflops=2.048, memory_bytes=1 * GiB, memory_bandwidth=64e9,
    dram_efficiency=0.9, dram_latency_cycles=400,
    l2_bytes=1 * 2**20, l2_bandwidth=256e9, l2_latency_cycles=100, shared_per_unit=16 * KiB,
    shared_per_block=16 * KiB, registers_per_unit=32768, max_registers_per_thread=255, max_threads_per_unit=256,
    max_threads_per_block=256, max_blocks_per_unit=4, schedulers_per_unit=1,
    pcie_bandwidth=16e9, pcie_latency_ns=1000.0, tdp_watts=50.0, kernel_launch_ns=1000.0,
    compute_capability=(9, 0), idle_watts=5.0, memory_clock_mhz=1000.0, thermal_resistance_c_per_w=1.0,
    thermal_time_constant_s=0.5, temperature_limit_c=85.0, l1_bytes=4 * KiB, l1_latency_cycles=30,
)

PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (H200, MI300X, TEACHING)}


def get_profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown device profile {name!r}; known profiles: {', '.join(PROFILES)}") from None
