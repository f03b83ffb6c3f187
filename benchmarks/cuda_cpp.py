"""The same algorithms in CUDA C++ (NVRTC -> PTX -> lapis's PTX assembler) and in lapis's kernel language (Python,
numba.cuda's dialect): the simulated time on the h200 profile and the simulator's wall time of each, and their
ratios (the target: within 2x of each other, both ways).

    python benchmarks/cuda_cpp.py [--size N]

Each kernel runs once to compile and warm up, then is timed over three launches (the wall time's median); the
simulated time is the performance model's duration of one launch. Results are checked against numpy.
"""

import argparse
import statistics
import time

import numpy as np

from lapis import cuda, trace

CPP = r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float partial[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    partial[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) partial[t] += partial[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, partial[0]);
}

extern "C" __global__ void transpose(const float* in, float* out, int n) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    out[y * n + x] = tile[threadIdx.x][threadIdx.y];
}

extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n) {
    __shared__ float As[16][16], Bs[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n / 16; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * 16 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * 16 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
"""


@cuda.jit
def add(a, b, c, n):
    i = cuda.grid(1)
    if i < n:
        c[i] = a[i] + b[i]


@cuda.jit
def block_sum(x, out, n):
    partial = cuda.shared.array(256, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    partial[t] = x[i] if i < n else np.float32(0)
    cuda.syncthreads()
    k = cuda.blockDim.x // 2
    while k > 0:
        if t < k:
            partial[t] += partial[t + k]
        cuda.syncthreads()
        k >>= 1
    if t == 0:
        cuda.atomic.add(out, 0, partial[0])


@cuda.jit
def transpose(a, out, n):
    tile = cuda.shared.array((32, 33), np.float32)
    x = cuda.blockIdx.x * 32 + cuda.threadIdx.x
    y = cuda.blockIdx.y * 32 + cuda.threadIdx.y
    tile[cuda.threadIdx.y, cuda.threadIdx.x] = a[y * n + x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * 32 + cuda.threadIdx.x
    y = cuda.blockIdx.x * 32 + cuda.threadIdx.y
    out[y * n + x] = tile[cuda.threadIdx.x, cuda.threadIdx.y]


@cuda.jit
def matmul(a, b, c, n):
    As = cuda.shared.array((16, 16), np.float32)
    Bs = cuda.shared.array((16, 16), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * 16 + ty, cuda.blockIdx.x * 16 + tx
    acc = np.float32(0)
    for t in range(n // 16):
        As[ty, tx] = a[row * n + t * 16 + tx]
        Bs[ty, tx] = b[(t * 16 + ty) * n + col]
        cuda.syncthreads()
        for k in range(16):
            acc += As[ty, k] * Bs[k, tx]
        cuda.syncthreads()
    c[row * n + col] = acc


def measure(launch) -> tuple[float, float]:
    """(simulated ns of one launch, median wall seconds of three) after a warm-up launch."""
    launch()
    cuda.synchronize()
    walls = []
    for _ in range(3):
        with trace() as t:
            start = time.perf_counter()
            launch()
            cuda.synchronize()
            walls.append(time.perf_counter() - start)
    return sum(e.args["duration_ns"] for e in t.select(0, "kernel")), statistics.median(walls)


def cases(n: int, module) -> list:
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(n * n).astype(np.float32) for _ in range(2))
    dx, dy, dz = cuda.to_device(x), cuda.to_device(y), cuda.device_array(n * n, np.float32)
    zero = np.zeros(1, np.float32)
    total = cuda.to_device(zero)
    m = 256 if n >= 256 else n
    am, bm = (rng.standard_normal(m * m).astype(np.float32) for _ in range(2))
    dam, dbm, dcm = cuda.to_device(am), cuda.to_device(bm), cuda.device_array(m * m, np.float32)
    big = n * n
    grid2 = (n // 32, n // 32)
    return [
        ("add", lambda: module.get_function("add")(((big + 255) // 256,), (256,), (dx, dy, dz, big)),
         lambda: add[(big + 255) // 256, 256](dx, dy, dz, big), lambda: np.array_equal(dz.copy_to_host(), x + y)),
        ("block sum", lambda: (total.copy_to_device(zero), module.get_function("block_sum")(
            ((big + 255) // 256,), (256,), (dx, total, big))),
         lambda: (total.copy_to_device(zero), block_sum[(big + 255) // 256, 256](dx, total, big)),
         lambda: np.isclose(total.copy_to_host()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)),
        ("transpose", lambda: module.get_function("transpose")(grid2, (32, 32), (dx, dz, n)),
         lambda: transpose[grid2, (32, 32)](dx, dz, n),
         lambda: np.array_equal(dz.copy_to_host(), x.reshape(n, n).T.ravel())),
        (f"matmul {m}", lambda: module.get_function("matmul")((m // 16, m // 16), (16, 16), (dam, dbm, dcm, m)),
         lambda: matmul[(m // 16, m // 16), (16, 16)](dam, dbm, dcm, m),
         lambda: np.allclose(dcm.copy_to_host().reshape(m, m), am.reshape(m, m) @ bm.reshape(m, m), atol=1e-3)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="the side of the square arrays (a multiple of 32)")
    args = parser.parse_args()
    module = cuda.RawModule(CPP)
    print(f"{'kernel':<12} {'C++ sim us':>10} {'Python sim us':>13} {'ratio':>6}   {'C++ wall s':>10} "
          f"{'Python wall s':>13} {'ratio':>6}")
    for name, cpp, python, check in cases(args.size, module):
        cpp_ns, cpp_wall = measure(cpp)
        ok_cpp = check()
        py_ns, py_wall = measure(python)
        ok_py = check()
        flag = "" if ok_cpp and ok_py else "  WRONG RESULT"
        print(f"{name:<12} {cpp_ns / 1e3:>10.1f} {py_ns / 1e3:>13.1f} {cpp_ns / py_ns:>6.2f}   {cpp_wall:>10.3f} "
              f"{py_wall:>13.3f} {cpp_wall / py_wall:>6.2f}{flag}")


if __name__ == "__main__":
    main()
