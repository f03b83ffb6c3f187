"""Figures of a real NVIDIA GPU through PyTorch, to set beside what lapis predicts for the same work.

    python benchmarks/real_gpu.py [--sizes 1024,2048,4096,8192] [--json FILE]     # where PyTorch sees a GPU

- `torch.matmul` of square matrices of each size in float32 (TF32 off: lapis's float32 gemm is FFMA), bfloat16 and
  float16, in TFLOP/s of GPU time (ten products in a CUDA graph, replayed), on normal random data.
  `python benchmarks/libs.py --matmul 1024,2048,4096` prints lapis's predicted figures for the same products.
- back-to-back 64 kB elementwise kernels replayed from a CUDA graph: microseconds per kernel, the GPU's own cost of
  a kernel following a kernel. (`benchmarks/micro.py --device real` launches its kernels from Python, whose launch
  costs more than the GPU's.)

lapis itself is not imported: this runs where PyTorch and a GPU are, and lapis's figures come from its own run.
"""

import argparse
import json

import torch


def graph_ms(run, count: int) -> float:
    """Milliseconds of GPU time per call of `run`: `count` calls captured in one CUDA graph, replayed once untimed
    and then ten times between CUDA events. The graph keeps the GPU's time apart from Python's launches, which
    outlast a small product or a small kernel."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run()                                        # the kernel loaded (and cuBLAS's workspace made) before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            run()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (10 * count)


def matmul_tflops(size: int, dtype: torch.dtype) -> float:
    """TFLOP/s of torch.matmul of two size x size normal random matrices of `dtype`, into one output."""
    a = torch.randn(size, size, device="cuda").to(dtype)
    b = torch.randn(size, size, device="cuda").to(dtype)
    out = torch.empty(size, size, device="cuda", dtype=dtype)
    return 2.0 * size**3 / (graph_ms(lambda: torch.matmul(a, b, out=out), 10) * 1e-3) / 1e12


def graph_kernel_us(count: int = 200) -> float:
    """Microseconds per kernel of `count` back-to-back 64 kB float32 adds in one CUDA graph."""
    a = torch.ones(16 * 1024, device="cuda")
    out = torch.empty_like(a)
    return graph_ms(lambda: torch.add(a, 1.0, out=out), count) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--json", metavar="FILE", help="keep the figures in this file")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name()
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    print(f"torch.matmul on {name} (torch {torch.__version__}), TFLOP/s")
    print(f"{'size':>6} " + "".join(f"{dtype:>10}" for dtype in dtypes))
    matmul = {}
    for size in (int(size) for size in args.sizes.split(",")):
        matmul[size] = {dtype: matmul_tflops(size, torch_dtype) for dtype, torch_dtype in dtypes.items()}
        print(f"{size:>6} " + "".join(f"{tflops:10.1f}" for tflops in matmul[size].values()), flush=True)
    graph_us = graph_kernel_us()
    print(f"back-to-back 64 kB kernels from a CUDA graph: {graph_us:.2f} us per kernel")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"gpu": name, "torch": torch.__version__, "matmul_tflops": matmul,
                       "graph_kernel_us": graph_us}, file, indent=1)


if __name__ == "__main__":
    main()
