"""Microbenchmarks of the simulated GPU beside measurements published for real ones.

    python benchmarks/micro.py [--device cuda|hip|both] [--quick] [--plot latency.png]
    lapis bench micro [--quick]
    python benchmarks/micro.py --device real [--json figures.json]     # on a machine with an NVIDIA GPU
    python benchmarks/micro.py --device cuda --against benchmarks/measured/h200.json [--plot latency.png]

Each figure is measured the way the published benchmark measures it, with lapis kernels through
the whole stack and CUDA events for the time (simulated device time, as `cudaEventElapsedTime`
reports it on a real GPU): a one-thread pointer chase over working sets from a few KiB to past
the last cache (cycles per load, from two chase lengths so that the launch cancels), BabelStream's
copy, mul, add, triad and dot over arrays larger than the caches, an L2-resident read sweep,
shared-memory loads without and with bank conflicts, a dependent and an independent FFMA stream,
a loop of HMMAs, and back-to-back small kernels on one stream. The table gives lapis's value, the
published one, their ratio and the source (`../shared/measured-gpu-figures.md` lists them); a
figure without a published measurement is marked "spec" (a data-sheet peak) or "assumed".
`--plot` draws the latency curve against the published plateaus (matplotlib).

`--device real` runs the same kernels, unchanged, on a real NVIDIA GPU through numba.cuda (numba-cuda installed),
with CUDA events on the GPU and its SM clock read through NVML, so that lapis's figures can be set beside the GPU's
own; `--json` keeps them, and `--against FILE` sets the h200's figures beside them (and its curve in `--plot`).
Three figures are left out there: the HMMA loop (numba.cuda has no `mma`), the shared-memory bandwidth (NVVM
hoists its loads at fixed addresses out of the loop), and back-to-back kernels (numba's launch takes longer than
the kernel; `benchmarks/real_gpu.py` replays them from a CUDA graph).

`tests/test_calibration.py` runs these at reduced sizes and holds the model to the published
bands: latencies within 15%, bandwidths within 10%.
"""

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np

LINE = 128                        # bytes between the chase's pointers: one per cache line
WARM_STEPS = 1 << 17              # the chase's steps a launch when it warms the caches


@dataclass(frozen=True)
class Published:
    """A figure measured on a real GPU: its value (the middle of the range where sources differ), the unit, the
    GPU it was measured on, and where it comes from."""
    value: float
    unit: str
    gpu: str
    source: str
    band: float = 0.0             # the relative band lapis is held to (0: shown, not held)


LATENCY_BAND, BANDWIDTH_BAND = 0.15, 0.10
MT4G, GPU_BENCHES = "caps-tum/mt4g sample_results", "te42kyfo/gpu-benches"
BABELSTREAM_H200 = "Azure/AI-benchmarking-guide ND_H200_v5_results.md"
BABELSTREAM_MI300X = "Azure/AI-benchmarking-guide (fork) ND_MI300X_v5_results.md"
RRZE = "RRZE-HPC/gpu-benches"

# figure name -> profile name -> what was measured
PUBLISHED: dict[str, dict[str, Published]] = {
    "shared-memory load latency": {
        "h200": Published(29.9, "cycles", "H100 SXM", MT4G, LATENCY_BAND),
        "mi300x": Published(51, "cycles", "MI300X", f"{RRZE} gpu-latency/mi300x.txt", LATENCY_BAND)},
    "L1 hit latency": {
        "h200": Published(38, "cycles", "H100 SXM", f"{MT4G}; markdewing/AI_kernels (40)", LATENCY_BAND),
        "mi300x": Published(118, "cycles", "MI300X", f"{RRZE} gpu-latency/mi300x.txt (116-120)", LATENCY_BAND)},
    "L2 hit latency, near": {
        "h200": Published(265, "cycles", "H100 PCIe", f"{GPU_BENCHES} gpu-latency", LATENCY_BAND),
        "mi300x": Published(213, "cycles", "MI300X, own XCD", f"{RRZE} gpu-latency/mi300x.txt", LATENCY_BAND)},
    "L2 hit latency, far": {
        "h200": Published(475, "cycles", "H100 PCIe", f"{GPU_BENCHES} gpu-latency", LATENCY_BAND)},
    "Infinity Cache hit latency": {
        "mi300x": Published(455, "cycles", "MI300X", f"{RRZE} gpu-latency/mi300x.txt", LATENCY_BAND)},
    "DRAM latency": {
        "h200": Published(685, "cycles", "GH200, HBM3e as the H200's (680-689; H100 SXM 700-835)",
                          f"{RRZE} gpu-latency; {GPU_BENCHES} gpu-latency", LATENCY_BAND),
        "mi300x": Published(885, "cycles", "MI300X (870-900)", f"{RRZE} gpu-latency/mi300x.txt", LATENCY_BAND)},
    "FFMA dependent latency": {
        "h200": Published(4, "cycles", "Hopper", "assumed: no trustworthy published figure"),
        "mi300x": Published(4, "cycles", "CDNA3", "assumed: no trustworthy published figure")},
    "BabelStream copy": {
        "h200": Published(4.01, "TB/s", "H200", BABELSTREAM_H200, BANDWIDTH_BAND),
        "mi300x": Published(4.11, "TB/s", "MI300X", BABELSTREAM_MI300X, BANDWIDTH_BAND)},
    "BabelStream mul": {},
    "BabelStream add": {},
    "BabelStream triad": {
        "h200": Published(4.15, "TB/s", "H200", BABELSTREAM_H200, BANDWIDTH_BAND),
        "mi300x": Published(4.09, "TB/s", "MI300X", BABELSTREAM_MI300X, BANDWIDTH_BAND)},
    "BabelStream dot": {},
    "DRAM read, > 100 MB": {
        "h200": Published(3.89, "TB/s", "H200", f"{GPU_BENCHES} gpu-l2-cache/h200.txt", BANDWIDTH_BAND),
        "mi300x": Published(4.20, "TB/s", "MI300X", f"{RRZE} gpu-stream/mi300x.txt", BANDWIDTH_BAND)},
    "L2 read, 16 MiB working set": {
        "h200": Published(9.9, "TB/s", "H200 (9.7-10.1)", f"{GPU_BENCHES} gpu-l2-cache/h200.txt", BANDWIDTH_BAND)},
    "Infinity Cache read, 128 MiB working set": {
        "mi300x": Published(6.4, "TB/s", "MI300X", "ROCm/rocm-amdgpu-bench issue 22", BANDWIDTH_BAND)},
    "shared-memory load bandwidth": {
        "h200": Published(128.9, "B/clock/unit", "H800", "chanzhennan/ChipBenchmarker", BANDWIDTH_BAND)},
    "shared-memory load, 32-way conflict": {},
    "FP32 FMA throughput": {
        "h200": Published(66.9, "TFLOP/s", "H200", "spec: NVIDIA H200 data sheet"),
        "mi300x": Published(163.4, "TFLOP/s", "MI300X", "spec: AMD MI300X data sheet")},
    "matrix throughput (bf16 HMMA)": {
        "h200": Published(989, "TFLOP/s", "H200", "spec: NVIDIA H200 data sheet (dense)"),
        "mi300x": Published(1307, "TFLOP/s", "MI300X", "spec: AMD MI300X data sheet (dense)")},
    "back-to-back 64 kB kernels": {
        "h200": Published(2.5, "us/kernel", "H200", f"{GPU_BENCHES} gpu-small-kernels (derived)", BANDWIDTH_BAND)},
}


# -- timing ---------------------------------------------------------------------------------------
def device_ms(api, launch, repeat: int = 1) -> float:
    """Simulated device milliseconds of `repeat` calls of `launch`, between two events on the default stream, after
    one call untimed (it compiles the kernel and loads it onto the device). On a real GPU (`real_gpu`) the time is
    the mean of `properties.repeats` such runs."""
    launch()
    runs = getattr(api.get_current_device().properties, "repeats", 1)
    start, end = api.event(), api.event()
    start.record()
    for _ in range(repeat * runs):
        launch()
    end.record()
    if runs > 1:
        api.get_current_device().properties.sample_clock()
    end.synchronize()
    return start.elapsed_time(end) / runs


def ms_per_step(api, launch, steps: tuple[int, int]) -> float:
    """Device milliseconds per step of `launch(steps)`, from its times at two step counts: the difference cancels
    what does not grow with the steps (the launch, the loop's entry, the kernel's tail)."""
    scale = getattr(api.get_current_device().properties, "step_scale", 1)
    short, long = steps[0] * scale, steps[1] * scale
    return (device_ms(api, lambda: launch(long)) - device_ms(api, lambda: launch(short))) / (long - short)


def clock_ghz(api) -> float:
    """The shader clock of the current device's profile."""
    return api.get_current_device().properties.clock_ghz


# -- kernels --------------------------------------------------------------------------------------
_KERNELS: dict[tuple, object] = {}


def kernels(api):
    """The suite's kernels for one API (cuda or hip), compiled once."""
    if api in _KERNELS:
        return _KERNELS[api]

    @api.jit
    def chase(following, steps, cursor):
        j = cursor[0]                                # where the last launch stopped: one unbroken chase
        for _ in range(steps):
            j = following[j]
        cursor[0] = j

    @api.jit
    def shared_chase(following, steps, out):
        s = api.shared.array(1024, np.int32)
        for k in range(1024):
            s[k] = following[k]
        j = np.int32(0)                              # int32 throughout: no conversion in the chain
        for _ in range(steps):
            j = s[j]
        out[0] = j

    @api.jit
    def copy(a, c):
        i = api.grid(1)
        if i < a.size:
            c[i] = a[i]

    @api.jit
    def mul(c, b, scalar):
        i = api.grid(1)
        if i < c.size:
            b[i] = scalar * c[i]

    @api.jit
    def add(a, b, c):
        i = api.grid(1)
        if i < a.size:
            c[i] = a[i] + b[i]

    @api.jit
    def triad(a, b, c, scalar):
        i = api.grid(1)
        if i < a.size:
            a[i] = b[i] + scalar * c[i]

    @api.jit
    def dot(a, b, partial):
        cache = api.shared.array(256, np.float64)
        t = api.threadIdx.x
        total = 0.0
        for i in range(api.grid(1), a.size, api.gridsize(1)):
            total += a[i] * b[i]
        cache[t] = total
        api.syncthreads()
        width = 128
        while width > 0:
            if t < width:
                cache[t] += cache[t + width]
            api.syncthreads()
            width //= 2
        if t == 0:
            partial[api.blockIdx.x] = cache[0]

    @api.jit
    def read(a, passes, out):
        i, stride = api.grid(1), api.gridsize(1)
        t0, t1, t2, t3 = np.float32(0), np.float32(0), np.float32(0), np.float32(0)
        for p in range(passes):       # pass p reads what the next block read in pass p - 1, on another unit (blocks
            first = i + p * api.blockDim.x               # go round-robin): no L1 holds it, as in gpu-l2-cache
            if first >= stride:
                first -= stride
            for k in range(first, a.size, 4 * stride):   # four loads in flight a thread (a.size a multiple of 4
                # strides): all four issued before the first add waits for its value
                v0, v1, v2, v3 = a[k], a[k + stride], a[k + 2 * stride], a[k + 3 * stride]
                t0 += v0
                t1 += v1
                t2 += v2
                t3 += v3
        out[i] = t0 + t1 + t2 + t3

    @api.jit
    def shared_read(stride, trips, out):
        s = api.shared.array(8192, np.float32)
        t = api.threadIdx.x
        for k in range(t, 8192, api.blockDim.x):
            s[k] = k
        api.syncthreads()
        base = (t % 32) * stride % 4096
        t0, t1 = np.float32(0), np.float32(0)
        for _ in range(trips):                       # eight loads a trip, at fixed offsets from one address
            v0, v1, v2, v3 = s[base], s[base + 512], s[base + 1024], s[base + 1536]
            v4, v5, v6, v7 = s[base + 2048], s[base + 2560], s[base + 3072], s[base + 3584]
            t0 += v0 + v1 + v2 + v3
            t1 += v4 + v5 + v6 + v7
        out[api.grid(1)] = t0 + t1

    @api.jit
    def ffma_chain(steps, out):
        a = np.float32(api.threadIdx.x)
        for _ in range(steps):                       # eight dependent FFMAs a trip
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
        out[api.grid(1)] = a

    @api.jit
    def ffma_streams(steps, out):
        a = np.float32(api.grid(1)) * np.float32(1e-6)
        # float32 constants: numba types a + 1 (float32 and int) as float64, which a GPU runs as DFMA
        b, c, d, e = a + np.float32(1), a + np.float32(2), a + np.float32(3), a + np.float32(4)
        f, g, h = a + np.float32(5), a + np.float32(6), a + np.float32(7)
        for _ in range(steps):                       # 16 FFMAs a trip: the loop's own 3 instructions a small share
            a = a * np.float32(0.999) + np.float32(0.001)
            b = b * np.float32(0.999) + np.float32(0.001)
            c = c * np.float32(0.999) + np.float32(0.001)
            d = d * np.float32(0.999) + np.float32(0.001)
            e = e * np.float32(0.999) + np.float32(0.001)
            f = f * np.float32(0.999) + np.float32(0.001)
            g = g * np.float32(0.999) + np.float32(0.001)
            h = h * np.float32(0.999) + np.float32(0.001)
            a = a * np.float32(0.999) + np.float32(0.001)
            b = b * np.float32(0.999) + np.float32(0.001)
            c = c * np.float32(0.999) + np.float32(0.001)
            d = d * np.float32(0.999) + np.float32(0.001)
            e = e * np.float32(0.999) + np.float32(0.001)
            f = f * np.float32(0.999) + np.float32(0.001)
            g = g * np.float32(0.999) + np.float32(0.001)
            h = h * np.float32(0.999) + np.float32(0.001)
        out[api.grid(1)] = a + b + c + d + e + f + g + h

    @api.jit
    def hmma_loop(steps, out):
        lane = api.threadIdx.x % 32
        sa = api.shared.array(128, np.uint32)
        sb = api.shared.array(64, np.uint32)
        if api.threadIdx.x < 32:
            for r in range(4):
                sa[lane * 4 + r] = 0x3F803F80          # bfloat16 1.0 twice
            for r in range(2):
                sb[lane * 2 + r] = 0x3F803F80
        api.syncthreads()
        a = api.mma.load(sa, lane * 4, 4)
        b = api.mma.load(sb, lane * 2, 2)
        c0, c1, c2, c3 = api.mma.zeros(), api.mma.zeros(), api.mma.zeros(), api.mma.zeros()
        for _ in range(steps):                       # four independent accumulators
            c0 = api.mma.mma_sync(a, b, c0, api.bfloat16)
            c1 = api.mma.mma_sync(a, b, c1, api.bfloat16)
            c2 = api.mma.mma_sync(a, b, c2, api.bfloat16)
            c3 = api.mma.mma_sync(a, b, c3, api.bfloat16)
        out[api.grid(1)] = api.mma.get(c0, 0) + api.mma.get(c1, 0) + api.mma.get(c2, 0) + api.mma.get(c3, 0)

    found = _KERNELS[api] = dict(chase=chase, shared_chase=shared_chase, copy=copy, mul=mul, add=add, triad=triad,
                                 dot=dot, read=read, shared_read=shared_read, ffma_chain=ffma_chain,
                                 ffma_streams=ffma_streams, hmma_loop=hmma_loop)
    return found


# -- measurements ---------------------------------------------------------------------------------
def random_cycle(count: int, spacing: int, dtype, seed: int) -> np.ndarray:
    """A chase's array: `count` slots `spacing` elements apart, each holding the index of the next slot of one random
    cycle through all of them (the elements between slots unused)."""
    order = np.random.default_rng(seed).permutation(count)
    following = np.zeros(count * spacing, dtype)
    following[order * spacing] = np.roll(order, -1) * spacing
    return following


def chase_cycles(api, working_set: int, steps: tuple[int, int] = (256, 768), seed: int = 0, warm: bool = True
                 ) -> float:
    """Cycles per load of a one-thread pointer chase over `working_set` bytes: one pointer per 128-byte line, the
    lines in a random cycle (no stride a cache or prefetcher could follow), walked once to warm the caches (unless
    not `warm`: a working set past the last cache misses either way), then timed at two lengths. A working set the
    L1 may hold is walked once more at the start of each timed launch (both lengths), as a kernel starts with its
    L1 empty."""
    k = kernels(api)
    lines = max(2, working_set // LINE)
    following = random_cycle(lines, LINE // 8, np.int64, seed)
    d_following, cursor = api.to_device(following), api.to_device(np.zeros(1, np.int64))
    for first in range(0, lines if warm else 0, WARM_STEPS):       # every line once, the caches warm (in launches
        k["chase"][1, 1](d_following, min(WARM_STEPS, lines - first), cursor)     # the watchdog lets through)
    if working_set <= 2 * api.get_current_device().properties.l1_bytes:
        steps = (steps[0] + lines, steps[1] + lines)
    ms = ms_per_step(api, lambda n: k["chase"][1, 1](d_following, n, cursor), steps)
    return ms * 1e6 * clock_ghz(api)


def level_working_sets(api) -> dict[str, int]:
    """The chase's working set for each cache level's plateau: a quarter of the L1; a quarter of the unit's L2
    slice; for the far level, past the slice (four times it, or nineteen twentieths of the far level if that is
    less: the H200's far partition is only twice its near one); past twice the last cache for DRAM."""
    p = api.get_current_device().properties
    slice_bytes = p.l2_bytes // p.l2_slices
    sets = {"L1": p.l1_bytes // 4, "L2": slice_bytes // 4, "DRAM": 2 * last_cache_bytes(api)}
    if p.far_cache_bytes:
        sets["far"] = min(4 * slice_bytes, p.far_cache_bytes * 19 // 20)
    return sets


# The published figure each level's plateau is held to, by the level's name in `level_working_sets`
LEVEL_FIGURES = {"L1": "L1 hit latency", "L2": "L2 hit latency, near", "DRAM": "DRAM latency"}
FAR_FIGURES = {"h200": "L2 hit latency, far", "mi300x": "Infinity Cache hit latency"}


def level_latencies(api) -> dict[str, float]:
    """The chase's cycles per load at each level's working set, by the published figure's name."""
    profile = api.get_current_device().properties.profile
    return {LEVEL_FIGURES.get(level) or FAR_FIGURES[profile]: chase_cycles(api, size, warm=level != "DRAM")
            for level, size in level_working_sets(api).items()}


def shared_chase_cycles(api, steps: tuple[int, int] = (256, 768)) -> float:
    """Cycles per load of a one-thread chase through shared memory (1,024 words in a random cycle)."""
    k = kernels(api)
    following = random_cycle(1024, 1, np.int32, seed=1)
    d_following, out = api.to_device(following), api.device_array(1, np.int32)
    ms = ms_per_step(api, lambda steps: k["shared_chase"][1, 1](d_following, steps, out), steps)
    return ms * 1e6 * clock_ghz(api)


def latency_curve(api, sizes: list[int]) -> list[tuple[int, float]]:
    """(working set in bytes, cycles per load) of the pointer chase at each size."""
    return [(size, chase_cycles(api, size)) for size in sizes]


def babelstream(api, n: int, names: tuple[str, ...] = ("copy", "mul", "add", "triad", "dot")) -> dict[str, float]:
    """BabelStream's five kernels (or those `names`) over float64 arrays of n elements: TB/s each, from the bytes
    each moves (copy and mul 2n words, add and triad 3n, dot 2n) and its device time after one warm-up run."""
    k = kernels(api)
    a = api.to_device(np.full(n, 0.1))
    b = api.to_device(np.full(n, 0.2))
    c = api.to_device(np.zeros(n))
    blocks = -(-n // 256)
    dot_blocks = 4 * api.get_current_device().properties.compute_units
    partial = api.device_array(dot_blocks, np.float64)
    runs = {"copy": (lambda: k["copy"][blocks, 256](a, c), 2),
            "mul": (lambda: k["mul"][blocks, 256](c, b, 0.4), 2),
            "add": (lambda: k["add"][blocks, 256](a, b, c), 3),
            "triad": (lambda: k["triad"][blocks, 256](a, b, c, 0.4), 3),
            "dot": (lambda: k["dot"][dot_blocks, 256](a, b, partial), 2)}
    return {name: words * n * 8 / (device_ms(api, launch) * 1e-3) / 1e12
            for name, (launch, words) in runs.items() if name in names}


def read_bandwidth(api, working_set: int, passes: tuple[int, int] | None = None) -> float:
    """TB/s of reads of `working_set` bytes of float32 from 8 blocks a unit of 256 threads: from the time of two
    numbers of passes over it in one launch after a warm-up (the caches hold it), or with `passes` None of one pass
    (larger than the caches: DRAM's, the launch included, as STREAM counts it)."""
    k = kernels(api)
    threads = 8 * api.get_current_device().properties.compute_units * 256
    a = api.to_device(np.ones(working_set // 4 // (4 * threads) * 4 * threads, np.float32))
    out = api.device_array(threads, np.float32)
    if passes is None:
        ms = device_ms(api, lambda: k["read"][threads // 256, 256](a, 1, out))
    else:
        ms = ms_per_step(api, lambda n: k["read"][threads // 256, 256](a, n, out), passes)
    return a.nbytes / (ms * 1e-3) / 1e12


def shared_bandwidth(api, stride: int, trips: tuple[int, int] = (16, 48)) -> float:
    """Bytes of shared memory loaded per clock per unit: each of 1,024 threads a block (a block a unit) loads eight
    words a loop trip at word (lane * stride) mod 4096 + 512 j of its warp (stride 1: no conflicts; 32: all 32
    lanes on one bank), from two numbers of trips."""
    k = kernels(api)
    units = api.get_current_device().properties.compute_units
    out = api.device_array(units * 1024, np.float32)
    ms = ms_per_step(api, lambda n: k["shared_read"][units, 1024](stride, n, out), trips)
    return units * 1024 * 8 * 4 / (ms * 1e-3) / (units * clock_ghz(api) * 1e9)


def ffma_latency(api, steps: tuple[int, int] = (64, 192)) -> float:
    """Cycles per FFMA of one thread's dependent chain (eight a loop trip), from two numbers of trips. The loop's
    own instructions issue while the chain waits, as long as a trip's chain is the longer."""
    k = kernels(api)
    out = api.device_array(1, np.float32)
    ms = ms_per_step(api, lambda n: k["ffma_chain"][1, 1](n, out), steps)
    return ms * 1e6 * clock_ghz(api) / 8


def ffma_throughput(api, steps: tuple[int, int] = (32, 96)) -> float:
    """TFLOP/s of eight independent FFMA streams a thread (16 FFMAs a loop trip) over 4 blocks of 256 threads a
    unit."""
    k = kernels(api)
    threads = 4 * api.get_current_device().properties.compute_units * 256
    out = api.device_array(threads, np.float32)
    ms = ms_per_step(api, lambda n: k["ffma_streams"][threads // 256, 256](n, out), steps)
    return threads * 16 * 2 / (ms * 1e-3) / 1e12


def matrix_throughput(api, steps: tuple[int, int] = (32, 96)) -> float:
    """TFLOP/s of a loop of bfloat16 HMMA.16816 (four independent accumulators a warp), 8 warps a unit."""
    k = kernels(api)
    warp = api.get_current_device().properties.warp_size
    units = api.get_current_device().properties.compute_units
    out = api.device_array(units * 8 * warp, np.float32)
    ms = ms_per_step(api, lambda n: k["hmma_loop"][units, 8 * warp](n, out), steps)
    mmas = units * 8 * (warp // 32) * 4                                  # a 64-lane wavefront runs two
    return mmas * 2 * 16 * 8 * 16 / (ms * 1e-3) / 1e12


def small_kernels(api, count: int = 200) -> float:
    """Microseconds per kernel of `count` back-to-back 64 kB copies on one stream."""
    k = kernels(api)
    n = 64 * 1024 // 4
    a, c = api.to_device(np.ones(n, np.float32)), api.device_array(n, np.float32)
    k["copy"][n // 256, 256](a, c)
    return device_ms(api, lambda: k["copy"][n // 256, 256](a, c), count) * 1e3 / count


# -- a real GPU -----------------------------------------------------------------------------------
@dataclass
class RealGpuProperties:
    """What the suite reads of a lapis device's properties, for a real NVIDIA GPU: its units, warp and L2 from the
    driver; the L1 and the L2's two partitions as Hopper's tuning guide gives them; its SM clock as NVML read it
    while the last timed kernels ran (a real GPU's clock moves with its load: idle, an H200's drops to 345 MHz)."""
    marketing_name: str
    compute_units: int
    warp_size: int
    l2_bytes: int
    nvml_device: object
    l1_bytes: int = 256 * 1024        # L1 and shared memory together per SM (Hopper, Blackwell)
    l2_slices: int = 2                # two partitions; a line's far copy lives in the other (the A100 whitepaper)
    vendor: str = "nvidia"
    # The suite's timings repeated, and its step counts scaled, so that the GPU works milliseconds between two
    # events: their ticks are half a microsecond, and a kernel shorter than numba's launch leaves the GPU idle.
    repeats: int = 20
    step_scale: int = 16
    clock_ghz: float = 0.0

    @property
    def far_cache_bytes(self) -> int:
        return self.l2_bytes

    @property
    def profile(self) -> str:
        """The lapis profile this GPU's figures are compared with: its published figures are the H100's and H200's."""
        return "h200"

    def sample_clock(self) -> None:
        """Read the SM clock now, while timed kernels run (`device_ms` calls this before it waits for them)."""
        import pynvml
        self.clock_ghz = pynvml.nvmlDeviceGetClockInfo(self.nvml_device, pynvml.NVML_CLOCK_SM) / 1e3


def real_gpu():
    """numba.cuda on this machine's first NVIDIA GPU, to take the place of `lapis.cuda` in the suite: the module
    itself (numba types a kernel's `api.grid` by the module it names), its device given the `properties` the
    suite reads."""
    import pynvml
    if not hasattr(np, "row_stack"):      # numba-cuda 0.30 overloads np.row_stack, which numpy 2.5 removed
        np.row_stack = np.vstack
    from numba import cuda as numba_cuda
    pynvml.nvmlInit()
    device = numba_cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else device.name
    device.properties = RealGpuProperties(name, device.MULTIPROCESSOR_COUNT, device.WARP_SIZE, device.L2_CACHE_SIZE,
                                          pynvml.nvmlDeviceGetHandleByIndex(0))
    return numba_cuda


# -- the suite ------------------------------------------------------------------------------------
def last_cache_bytes(api) -> int:
    """The largest cache in front of DRAM: a working set past twice this misses in every level."""
    p = api.get_current_device().properties
    return max(p.l2_bytes, p.far_cache_bytes)


def chase_sizes(api, quick: bool) -> list[int]:
    """Working sets from 4 KiB to twice the last cache, by factors of 4 (8 with `quick`)."""
    last = last_cache_bytes(api)
    factor = 8 if quick else 4
    return [4096 * factor**k for k in range(int(math.log(2 * last / 4096, factor)) + 2)]


def stream_elements(api, quick: bool) -> int:
    """BabelStream's array length: its default 2^25 float64 (2^24 with `quick`), or the last cache's size if more,
    so that the three arrays pass it."""
    return max(1 << 24 if quick else 1 << 25, last_cache_bytes(api) // 8)


def dram_read_bytes(api) -> int:
    """The DRAM read's working set: 256 MiB, or twice the last cache if more (one pass: nothing of it is reused)."""
    return max(256 << 20, 2 * last_cache_bytes(api))


def measure(api, quick: bool = False) -> tuple[dict[str, float], list[tuple[int, float]]]:
    """Every figure of the suite on the current device of `api`, and the latency curve."""
    curve = latency_curve(api, chase_sizes(api, quick))
    figures = {"shared-memory load latency": shared_chase_cycles(api), **level_latencies(api),
               "FFMA dependent latency": ffma_latency(api)}
    for name, value in babelstream(api, stream_elements(api, quick)).items():
        figures[f"BabelStream {name}"] = value
    figures["DRAM read, > 100 MB"] = read_bandwidth(api, dram_read_bytes(api))
    figures["L2 read, 16 MiB working set"] = read_bandwidth(api, 16 << 20, (2, 4))
    if api.get_current_device().properties.vendor == "amd":
        figures["Infinity Cache read, 128 MiB working set"] = read_bandwidth(api, 128 << 20, (1, 2))
    figures["FP32 FMA throughput"] = ffma_throughput(api)
    if isinstance(api.get_current_device().properties, RealGpuProperties):
        return figures, curve         # NVVM hoists the shared loads; numba has no mma; numba's launch outlasts a kernel
    figures["shared-memory load bandwidth"] = shared_bandwidth(api, 1)
    figures["shared-memory load, 32-way conflict"] = shared_bandwidth(api, 32)
    figures["matrix throughput (bf16 HMMA)"] = matrix_throughput(api)
    figures["back-to-back 64 kB kernels"] = small_kernels(api, 50 if quick else 200)
    return figures, curve


UNITS = {"shared-memory load latency": "cycles", "L1 hit latency": "cycles", "L2 hit latency, near": "cycles",
         "L2 hit latency, far": "cycles", "Infinity Cache hit latency": "cycles", "DRAM latency": "cycles",
         "FFMA dependent latency": "cycles", "shared-memory load bandwidth": "B/clock/unit",
         "shared-memory load, 32-way conflict": "B/clock/unit", "FP32 FMA throughput": "TFLOP/s",
         "matrix throughput (bf16 HMMA)": "TFLOP/s", "back-to-back 64 kB kernels": "us/kernel"}


def table(profile_name: str, figures: dict[str, float], who: str = "lapis") -> list[str]:
    """The report's lines for one profile: each figure, its value as `who` measured it, the published one, the
    ratio, the source."""
    lines = [f"{'figure':<38} {who:>10} {'published':>10} {'ratio':>6}  unit, GPU measured, source"]
    for name in PUBLISHED:
        mine = figures.get(name)
        known = PUBLISHED[name].get(profile_name)
        if mine is None and known is None:
            continue
        mine_text = "-" if mine is None else f"{mine:10.3g}"
        if known is None:
            lines.append(f"{name:<38} {mine_text:>10} {'-':>10} {'':>6}  {UNITS.get(name, 'TB/s')}")
            continue
        ratio = f"{mine / known.value:6.2f}" if mine is not None else "     -"
        held = f" (held to +-{round(known.band * 100)}%)" if known.band else ""
        lines.append(f"{name:<38} {mine_text:>10} {known.value:10.4g} {ratio}  {known.unit}, {known.gpu}, "
                     f"{known.source}{held}")
    return lines


def measured(path: str) -> tuple[list[dict], list]:
    """The runs' figures and the latency curve a file of a real GPU's measurements holds: `--json`'s output of
    `--device real` (one run), or a file of several runs as benchmarks/measured/h200.json keeps them."""
    with open(path) as file:
        data = json.load(file)
    if "micro_runs" in data:
        return data["micro_runs"], data["latency_curve"]
    run = next(iter(data.values()))
    return [run["figures"]], run["latency_curve"]


def against(figures: dict[str, float], runs: list[dict]) -> list[str]:
    """Lines setting lapis's figures beside a real GPU's (the range of its runs) and their ratio (to the runs'
    middle value)."""
    lines = [f"{'figure':<38} {'lapis':>10} {'real GPU':>14} {'ratio':>6}"]
    for name in PUBLISHED:
        values = sorted(run[name] for run in runs if name in run)
        if name not in figures or not values:
            continue
        seen = f"{values[0]:.3g}" if values[0] == values[-1] else f"{values[0]:.3g}-{values[-1]:.3g}"
        lines.append(f"{name:<38} {figures[name]:10.3g} {seen:>14} {figures[name] / values[len(values) // 2]:6.2f}")
    return lines


def plot(curves: dict[str, list[tuple[int, float]]], path: str, label: str = "lapis",
         real: list | None = None) -> None:
    """The chase's cycles against working set for each profile, beside the published plateaus (and, given `real`,
    a real GPU's curve beside the h200's); `label` names what ran the chase."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (profile_name, curve) in zip(axes[0], curves.items(), strict=True):
        sizes, cycles = zip(*curve, strict=True)
        ax.plot(sizes, cycles, "o-", label=label)
        if real is not None and profile_name == "h200":
            ax.plot(*zip(*real, strict=True), "s--", label="a real H200, numba.cuda")
        for name, by_profile in PUBLISHED.items():
            known = by_profile.get(profile_name)
            if known is not None and known.unit == "cycles" and "FFMA" not in name:
                ax.axhline(known.value, linestyle="--", linewidth=0.8, color="gray")
                ax.annotate(f"{name} ({known.gpu})", (sizes[0], known.value), fontsize=7, va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("working set (bytes)")
        ax.set_ylabel("cycles per load")
        ax.set_title(f"pointer chase, {profile_name}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="both", choices=["cuda", "hip", "both", "real"],
                        help="real: this machine's NVIDIA GPU through numba.cuda")
    parser.add_argument("--quick", action="store_true", help="smaller arrays, fewer working sets")
    parser.add_argument("--plot", metavar="PNG", help="draw the latency curve into this file (needs matplotlib)")
    parser.add_argument("--json", metavar="FILE", help="keep each GPU's figures and latency curve in this file")
    parser.add_argument("--against", metavar="FILE", help="set the h200's figures beside a real GPU's, as --device "
                        "real --json wrote them (benchmarks/measured/h200.json: an H200's)")
    args = parser.parse_args(argv)
    real = measured(args.against) if args.against else None
    if args.device == "real":
        apis = [real_gpu()]
    else:
        from lapis import cuda, hip
        apis = {"cuda": [cuda], "hip": [hip], "both": [cuda, hip]}[args.device]
    curves, kept = {}, {}
    for api in apis:
        props = api.get_current_device().properties
        figures, curve = measure(api, args.quick)
        curves[props.profile] = curve
        kept[props.marketing_name] = {"figures": figures, "latency_curve": curve}
        print(f"{props.marketing_name} ({props.profile})")
        for line in table(props.profile, figures, "this GPU" if args.device == "real" else "lapis"):
            print("  " + line)
        if real is not None and props.profile == "h200":
            print(f"  beside {args.against}:")
            for line in against(figures, real[0]):
                print("    " + line)
        print("  pointer chase, cycles per load: " + ", ".join(
            f"{size // 1024} KiB {cycles:.0f}" if size < 1 << 20 else f"{size >> 20} MiB {cycles:.0f}"
            for size, cycles in curve))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(kept, file, indent=1)
    if args.plot:
        plot(curves, args.plot, "a real GPU, numba.cuda" if args.device == "real" else "lapis",
             real[1] if real else None)
        print(f"latency curve: {args.plot}")


if __name__ == "__main__":
    main()
