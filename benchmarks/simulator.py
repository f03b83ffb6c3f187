"""How fast the simulated GPU simulates: thread- and warp-instructions per second of host time.

    python benchmarks/simulator.py [--device cuda|hip] [--threads N]

Runs, through the whole stack, an ALU-bound kernel (independent float32 multiply-adds) and
a memory-bound kernel (a copy), each over at least 64K threads, the 1024x1024x1024 sgemm
behind lapis.matmul beside numpy's, and the same product in bfloat16 on the matrix unit.
"Simulation" is the time the SIMT core spent executing (the kernel event's simulation_wall_s);
"wall" adds compiling nothing (kernels are warm), packing arguments, the queue and the sync. For
scale: Accel-Sim publishes about 12,500 warp-instructions per second, GPGPU-Sim about 0.1-0.2
million thread-instructions per second.
"""

import argparse
import time

import numpy as np

import lapis
from lapis import cuda, hip


def alu_kernel(api):
    @api.jit
    def alu(out, n):
        i = api.grid(1)
        a = api.float32(i) * 1e-6
        b, c, d, e, f, g, h = a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7
        for _ in range(n):
            a = a * 0.999 + 0.001
            b = b * 0.999 + 0.001
            c = c * 0.999 + 0.001
            d = d * 0.999 + 0.001
            e = e * 0.999 + 0.001
            f = f * 0.999 + 0.001
            g = g * 0.999 + 0.001
            h = h * 0.999 + 0.001
            a = a * 0.999 + 0.001
            b = b * 0.999 + 0.001
            c = c * 0.999 + 0.001
            d = d * 0.999 + 0.001
            e = e * 0.999 + 0.001
            f = f * 0.999 + 0.001
            g = g * 0.999 + 0.001
            h = h * 0.999 + 0.001
        out[i] = a + b + c + d + e + f + g + h
    return alu


def copy_kernel(api):
    @api.jit
    def copy(src, dst):
        i = api.grid(1)
        dst[i] = src[i]
    return copy


def timed(launch, api, repeat: int) -> dict:
    """The fastest of `repeat` warm runs (the host is shared; the minimum is the least disturbed)."""
    launch()                              # compile and warm up
    api.synchronize()
    best = None
    for _ in range(repeat):
        with lapis.trace() as t:
            start = time.perf_counter()
            launch()
            api.synchronize()
            wall = time.perf_counter() - start
        k = t.select(0, "kernel")[-1].args
        run = {"wall": wall, "sim": k["simulation_wall_s"], "thread": k["thread_instructions"],
               "warp": k["warp_instructions"], "time_ns": k["time_ns"], "limiter": k["limiter"],
               "dram": k["dram_bytes"]}
        best = run if best is None or run["wall"] < best["wall"] else best
    return best


def report(name: str, r: dict) -> None:
    print(f"{name}:")
    print(f"  {r['thread'] / 1e6:.1f} M thread-instructions ({r['warp'] / 1e6:.2f} M warp-instructions) in "
          f"{r['sim']:.2f} s of simulation, {r['wall']:.2f} s wall")
    print(f"  {r['thread'] / r['sim'] / 1e9:.2f} G thread-instructions/s, "
          f"{r['warp'] / r['sim'] / 1e6:.1f} M warp-instructions/s of simulation "
          f"({r['thread'] / r['wall'] / 1e9:.2f} G thread-instructions/s wall)")
    print(f"  simulated time {r['time_ns'] / 1e3:.1f} us, limiter {r['limiter']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "hip"])
    parser.add_argument("--threads", type=int, default=1 << 16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024, help="of the sgemm")
    args = parser.parse_args()
    api = cuda if args.device == "cuda" else hip
    n = args.threads
    print(f"device {api.get_current_device().name}; {n} threads per kernel")

    out = api.device_array(n, np.float32)
    alu = alu_kernel(api)
    r = timed(lambda: alu[n // 256, 256](out, 64), api, 4 * args.repeat)     # milliseconds each: more tries
    report("ALU-bound kernel (16 independent FMAs per loop trip, 64 trips)", r)

    m = 256 * n                           # 64 MiB each way at the default: more than the L2 holds
    src = api.to_device(np.arange(m, dtype=np.float32))
    dst = api.device_array(m, np.float32)
    copy = copy_kernel(api)
    r = timed(lambda: copy[m // 256, 256](src, dst), api, args.repeat)
    report(f"memory-bound kernel (copy of {m * 4 >> 20} MiB, {m} threads)", r)
    print(f"  DRAM traffic {r['dram'] >> 20} MiB at {r['dram'] / r['time_ns']:.0f} GB/s simulated (launch included)")

    size = args.size
    A = lapis.randn(size, size, device=args.device)
    B = lapis.randn(size, size, device=args.device)
    r = timed(lambda: lapis.matmul(A, B), api, args.repeat)
    a, b = A.cpu().numpy(), B.cpu().numpy()
    numpy_s = float("inf")
    for _ in range(10):                   # the fastest of ten, as lapis's figure is the fastest of its runs
        start = time.perf_counter()
        a @ b
        numpy_s = min(numpy_s, time.perf_counter() - start)
    report(f"sgemm {size}x{size}x{size} (lapis.matmul)", r)
    print(f"  simulated {2 * size**3 / r['time_ns'] / 1e3:.1f} TFLOP/s; numpy on this CPU: {numpy_s * 1e3:.1f} ms "
          f"(lapis takes {r['wall'] / numpy_s:.1f}x numpy's time)")

    half_a, half_b = A.to(lapis.bfloat16), B.to(lapis.bfloat16)
    r = timed(lambda: lapis.matmul(half_a, half_b), api, args.repeat)
    report(f"bfloat16 gemm {size}x{size}x{size} (lapis.matmul; from 512^3 B staged k-contiguous, then the matrix "
           "unit: figures of the last kernel, wall of all)", r)
    print(f"  simulated {2 * size**3 / r['time_ns'] / 1e3:.1f} TFLOP/s in the last kernel")


if __name__ == "__main__":
    main()
