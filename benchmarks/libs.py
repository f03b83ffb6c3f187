"""The Layer 4 libraries against the issue's targets, in the performance model's predicted time.

    python benchmarks/libs.py [--device cuda|hip] [--gemm-size N] [--axpy-size N]
    LAPIS_GPUS=mi300x python benchmarks/libs.py --matmul 1024,2048,4096

`--matmul` prints instead the predicted TFLOP/s of `lapis.matmul` on device `cuda` (the first GPU, whichever
profile LAPIS_GPUS names) for float32, bfloat16 and float16 square products of each size: the sum of its kernels'
simulated times, after one untimed product (which compiles and tunes).

For each routine: the simulated kernel time on the device profile, the achieved fraction of the
relevant peak (FP32 FLOP/s for float32 gemm, matrix FLOP/s for bf16 gemm, HBM bandwidth for
axpy) and the simulator's wall time. Targets on h200: float32 gemm 4096^3 at least 70% of the
FP32 peak, bf16 gemm at least 60% of the matrix peak, axpy at least 80% of HBM bandwidth.
The default gemm size is 2048 (under a minute of simulation; the matrix-unit kernel's 128x256
blocks need that many to fill the h200's 132 units); pass --gemm-size 4096 for the float32
target's size (a few minutes).
"""

import argparse
import time

import ml_dtypes
import numpy as np

import lapis
from lapis import cuda, hip, trace
from lapis.libs import blas


def kernel_events(run) -> tuple[list, float]:
    with trace() as t:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    return [e.args for e in t.select(0, "kernel")], wall


def report(name: str, kernels: list, wall: float, amount: float, peak: float, unit: str) -> None:
    ns = sum(k["duration_ns"] for k in kernels)
    limiters = ", ".join(sorted({k["limiter"] for k in kernels}))
    print(f"{name}: {ns / 1e3:.1f} us simulated, {amount / (ns * 1e-9) / 1e12:.2f} T{unit}/s = "
          f"{amount / (ns * 1e-9) / peak:.0%} of peak (limiter {limiters}); {wall:.2f} s of wall time")


def matmul_api():
    """The API of device cuda's GPU: an AMD one's where only AMD GPUs are (as PyTorch on ROCm)."""
    return cuda if cuda.is_available() else hip


def matmul_tflops(size: int, dtype) -> tuple[float, str]:
    """Predicted TFLOP/s of lapis.matmul of two size x size matrices of `dtype` on device cuda, and the limiters of
    its kernels."""
    api = matmul_api()
    a = lapis.randn(size, size, device="cuda").to(dtype)
    b = lapis.randn(size, size, device="cuda").to(dtype)
    lapis.matmul(a, b)
    api.synchronize()
    kernels, _ = kernel_events(lambda: (lapis.matmul(a, b), api.synchronize()))
    ns = sum(k["duration_ns"] for k in kernels)
    return 2.0 * size**3 / (ns * 1e-9) / 1e12, ", ".join(sorted({k["limiter"] for k in kernels}))


def matmul_table(sizes: list[int]) -> None:
    print(f"lapis.matmul on {matmul_api().get_current_device().name}, predicted TFLOP/s (limiters)")
    print(f"{'size':>6} " + "".join(f"{name:>26}" for name in ("float32", "bfloat16", "float16")))
    for size in sizes:
        cells = [matmul_tflops(size, dtype) for dtype in (lapis.float32, lapis.bfloat16, lapis.float16)]
        print(f"{size:>6} " + "".join(f"{f'{tflops:.1f} ({limiters})':>26}" for tflops, limiters in cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "hip"])
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--axpy-size", type=int, default=1 << 24)
    parser.add_argument("--matmul", metavar="SIZES", help="comma-separated sizes: the lapis.matmul table instead")
    args = parser.parse_args()
    if args.matmul:
        matmul_table([int(size) for size in args.matmul.split(",")])
        return
    api = cuda if args.device == "cuda" else hip
    device = api.get_current_device()
    props = api.get_device_properties()
    handle = blas.create(api)
    print(f"{device.name}: FP32 peak {props.peak_fp32_flops / 1e12:g} TFLOP/s, matrix peak "
          f"{props.peak_matrix_flops / 1e12:g} TFLOP/s, HBM {props.memory_bandwidth / 1e12:.1f} TB/s")

    n = args.axpy_size
    x, y = api.device_array(n, np.float32), api.device_array(n, np.float32)
    blas.axpy(handle, 1024, 1.0, x, 1, y, 1)                      # compile first
    api.synchronize()
    kernels, wall = kernel_events(lambda: (blas.axpy(handle, n, 2.0, x, 1, y, 1), api.synchronize()))
    report(f"axpy n={n}", kernels, wall, sum(k["dram_bytes"] for k in kernels), props.memory_bandwidth, "B")

    s = args.gemm_size
    for dtype, peak, label in ((np.float32, props.peak_fp32_flops / 1e12, "float32"),
                               (ml_dtypes.bfloat16, props.peak_matrix_flops / 1e12, "bfloat16")):
        operands = [api.device_array(s * s, dtype) for _ in range(3)]

        transa = "N" if dtype == np.float32 else "T"      # half types: the k-contiguous layout the HMMA path takes

        def product(a=operands[0], b=operands[1], c=operands[2], transa=transa):
            blas.gemm(handle, transa, "N", s, s, s, 1.0, a, s, b, s, 0.0, c, s)
            api.synchronize()
        product()                                                   # compile, and tune the tiles
        kernels, wall = kernel_events(product)
        tiles = "HMMA" if dtype != np.float32 else blas.choose_tiles(handle, s, s, s, np.dtype(dtype))
        report(f"{label} gemm {s}^3 (tiles {tiles})", kernels, wall, 2.0 * s ** 3, peak * 1e12, "FLOP")


if __name__ == "__main__":
    main()
