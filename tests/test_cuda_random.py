"""lapis.cuda.random: numba.cuda's xoroshiro128+ generators, against numba's own CPU reference of them."""

import numpy as np
import pytest

from lapis import cuda, hip
from lapis.cuda.random import (
    create_xoroshiro128p_states,
    init_xoroshiro128p_states,
    xoroshiro128p_next,
    xoroshiro128p_normal_float32,
    xoroshiro128p_normal_float64,
    xoroshiro128p_uniform_float32,
    xoroshiro128p_uniform_float64,
)

reference = pytest.importorskip("numba.cuda.random")    # numba's generators run on the CPU too


def numba_states(n: int, seed: int, start: int = 0) -> np.ndarray:
    states = np.zeros(n, dtype=reference.xoroshiro128p_dtype)
    reference.init_xoroshiro128p_states_cpu(states, seed, start)
    return states


@pytest.mark.parametrize("seed,start", [(42, 0), (0, 3), (-1, 1)])
def test_the_states_are_numbas(seed, start):
    got = init_xoroshiro128p_states(50, seed, start).view(np.uint64)
    want = numba_states(50, seed, start)
    assert got[:, 0].tolist() == want["s0"].tolist() and got[:, 1].tolist() == want["s1"].tolist()


@cuda.jit
def draw(states, bits, u32, u64, n32, n64):
    i = cuda.grid(1)
    if i < bits.shape[0]:
        for k in range(bits.shape[1]):
            bits[i, k] = xoroshiro128p_next(states, i)
            u32[i, k] = xoroshiro128p_uniform_float32(states, i)
            u64[i, k] = xoroshiro128p_uniform_float64(states, i)
            n32[i, k] = xoroshiro128p_normal_float32(states, i)
            n64[i, k] = xoroshiro128p_normal_float64(states, i)


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
def test_each_threads_numbers_are_numbas(api):
    n, k = 300, 3
    states = api.to_device(init_xoroshiro128p_states(n, 1234))
    outs = [api.device_array((n, k), t) for t in (np.int64, np.float32, np.float64, np.float32, np.float64)]
    draw[3, 128](states, *outs)
    bits, u32, u64, n32, n64 = (o.copy_to_host() for o in outs)
    want = numba_states(n, 1234)
    for i in range(0, n, 37):                          # numba's functions, on the host, thread by thread
        for j in range(k):
            assert np.uint64(bits[i, j].view(np.uint64)) == reference.xoroshiro128p_next(want, i)
            assert u32[i, j] == reference.xoroshiro128p_uniform_float32(want, i)
            assert u64[i, j] == reference.xoroshiro128p_uniform_float64(want, i)
            assert n32[i, j] == pytest.approx(reference.xoroshiro128p_normal_float32(want, i), rel=1e-5, abs=1e-6)
            # numba takes the log of the float32 uniform in float32: ours and its logf agree within an ulp or so
            assert n64[i, j] == pytest.approx(reference.xoroshiro128p_normal_float64(want, i), rel=1e-6)
    assert states.copy_to_host().view(np.uint64)[::37, 0].tolist() == want["s0"][::37].tolist()


def test_monte_carlo_pi_in_numbas_style():
    @cuda.jit
    def darts(states, hits):
        i = cuda.grid(1)
        if i < hits.size:
            inside = 0
            for _ in range(100):
                x = xoroshiro128p_uniform_float32(states, i)
                y = xoroshiro128p_uniform_float32(states, i)
                if x * x + y * y <= 1.0:
                    inside += 1
            hits[i] = inside

    states = create_xoroshiro128p_states(4096, seed=1)
    hits = cuda.device_array(4096, np.int32)
    darts[16, 256](states, hits)
    assert abs(4 * hits.copy_to_host().sum() / (4096 * 100) - np.pi) < 0.01
    with pytest.raises(ValueError, match="must be >= 0"):
        create_xoroshiro128p_states(-1, seed=1)
