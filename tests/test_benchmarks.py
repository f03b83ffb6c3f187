"""The benchmark scripts run (at a reduced size) and the teaching profile works end to end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow                 # a subprocess each: `make test-fast` leaves them out

ROOT = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=True).stdout


def test_simulator_benchmark_reports_its_figures():
    out = run("benchmarks/simulator.py", "--threads", "4096", "--size", "64", "--repeat", "1")
    for kernel in ("ALU-bound kernel", "memory-bound kernel", "sgemm 64x64x64", "bfloat16 gemm 64x64x64"):
        assert kernel in out
    assert out.count("warp-instructions/s of simulation") == 4
    assert "limiter issue" in out                      # the ALU-bound kernel is bound by instruction issue
    assert "numpy on this CPU" in out


def test_library_benchmark_reports_fractions_of_peak():
    out = run("benchmarks/libs.py", "--gemm-size", "64", "--axpy-size", "4096")
    assert "axpy n=4096" in out and "float32 gemm 64^3" in out and "bfloat16 gemm 64^3" in out
    assert out.count("% of peak") == 3


def test_framework_benchmark_reports_op_overhead_and_step_times():
    out = run("benchmarks/framework.py", "--repeat", "3", "--steps", "1", "--models", "mlp,gpt", "--settle", "1",
              "--cpu-ops")
    gpu_us = float(out.split("us of wall time per op")[0].split(":")[-1])
    cpu_us = float(out.split("us on cpu")[0].split(",")[-1])
    assert "(1 kernel)" in out                          # an add on cuda is one kernel: no cast, no copy
    table = out.split("ops on small cpu tensors")[1].split("digits MLP")[0]
    assert table.count("us in PyTorch") == 15 and "cat([x, x])" in table    # each op, beside PyTorch's
    assert gpu_us > cpu_us                              # the simulated GPU's launch path costs more than numpy
    assert "tiny GPT, 8 x 16 tokens" in out and "the " in out.split("tiny GPT")[1]   # beside the cpu step
    assert "after 1 more steps" in out.split("tiny GPT")[1]                          # and its steady state
    # forward: 2 gemms that add their biases as they write (addmm), relu, log-softmax and the loss; backward:
    # their gradients; fused Adam over the 4 parameters in 3 launches (16,384, 2,560 and 256 + 10 elements:
    # parameters of alike sizes share one); a reduction for each of the 3 products split along k; every gradient
    # is stored in .grad as computed, the weights' computed in the weights' own layout (no copy): 21 kernels
    assert "digits MLP, batch 256" in out and "21 kernels" in out


def test_demo_runs_on_the_teaching_profile():
    out = run("-m", "lapis.cli", "demo", "--size", "64", env={"LAPIS_GPUS": "teaching"})
    assert "teaching" in out and "C matches numpy's A @ B: yes" in out
