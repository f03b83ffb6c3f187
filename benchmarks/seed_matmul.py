"""The seed program's 1024x1024 matmul through the whole stack, timed beside numpy's own.

    python benchmarks/seed_matmul.py [--size N] [--device cuda|hip] [--repeat R]

Prints the wall time of lapis.matmul (first call, which compiles the sgemm kernel, and
later calls), the simulated kernel time on the device profile, and numpy's time for the
same product on the host CPU.
"""

import argparse
import time

import numpy as np

import lapis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--device", default="cuda", choices=["cuda", "hip"])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    n, device = args.size, lapis.device(args.device)
    A = lapis.randn(n, n, device=device)
    B = lapis.randn(n, n, device=device)
    walls, kernel_ns, thread_instructions = [], 0.0, 0
    for _ in range(args.repeat):
        with lapis.trace() as t:
            start = time.perf_counter()
            C = lapis.matmul(A, B)
            C.cpu()                       # a sync point: the matmul has finished
            walls.append(time.perf_counter() - start)
        kernel = t.select(0, "kernel")[-1].args
        kernel_ns, thread_instructions = kernel["time_ns"], kernel["thread_instructions"]
    a, b = A.cpu().numpy(), B.cpu().numpy()
    reps = 20
    start = time.perf_counter()
    for _ in range(reps):
        expected = a @ b
    numpy_s = (time.perf_counter() - start) / reps
    err = float(np.abs(C.cpu().numpy() - expected).max())
    flop = 2 * n**3
    gpu = A.device.api.get_current_device()
    print(f"lapis.matmul {n}x{n}x{n} on {A.device} ({gpu.name}, profile {gpu.profile})")
    print(f"  wall, first call (compiles the kernel): {walls[0]:.2f} s")
    if len(walls) > 1:
        print(f"  wall, later calls:                      {min(walls[1:]):.2f} s "
              f"({thread_instructions / min(walls[1:]) / 1e9:.2f} G simulated thread-instructions/s)")
    print(f"  simulated kernel time on the device:    {kernel_ns / 1e3:.1f} us ({flop / kernel_ns / 1e3:.1f} TFLOP/s)")
    print(f"  numpy A @ B on this CPU:                {numpy_s * 1e3:.2f} ms ({flop / numpy_s / 1e9:.1f} GFLOP/s)")
    print(f"  max abs difference from numpy:          {err:.2e}")


if __name__ == "__main__":
    main()
